"""Which conversations guardian can judge: English only, said plainly otherwise.

Every model guardian ships was trained on English. On another language it does not
fail loudly; it returns confident nonsense (a French chat scored on English word
pieces), which is worse than no answer. So the runner (`guardian.runner`, behind
`guardian analyze`, the live monitor and the chatbot screening) asks
`not_assessed_reason(window)` before the detectors run and, when it names a reason,
records "not assessed: language fr" instead of a verdict.

The decision is made on the window's text (what the detectors would read), not on
one turn, and leans towards English: a window with fewer than `MIN_LETTERS`
letters ("ok", "hi", "Oui.") is too short to tell and counts as English, and a
window is refused only when the identifier is confident (`CONFIDENCE`) of a
language other than English *and* gives English almost no chance (`ENGLISH_FLOOR`),
so English with a French word or a name in it is still assessed.

Language identification is py3langid (a naive Bayes model over byte n-grams that
ships inside its wheel, ~1 s to load, ~0.2 ms a window): loaded on first use, once
per process, and each window text's answer cached.

Consecutive windows share most of their lines, and py3langid's cost is a Python loop that
walks every byte through its n-gram automaton, so a conversation's text was walked once per
window it falls in (~3.5 times for MentalManip's dialogues; ~20 % of a bulk run's window
scoring, issue 23). `_LineWalkingIdentifier` walks a text line by line and remembers each
(automaton state, line) walk: a later window re-walks only what is new. The walk is a pure
function of its state and bytes and the counts are gathered in the same order, so the answer
is exactly py3langid's (tests/test_language.py compares them).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from guardian.conversation import Conversation

#: The language every shipped model was trained on (ISO 639-1).
SUPPORTED = "en"
#: Fewer letters than this in a window: too little to tell, assessed as English.
MIN_LETTERS = 20
#: The identifier's (normalised) probability a non-English language needs to refuse a window.
CONFIDENCE = 0.7
#: ... and English must score below this.
ENGLISH_FLOOR = 0.05
#: Characters of the window read (the latest ones): enough to tell, bounded cost on long turns.
MAX_CHARS = 2000

_lock = threading.Lock()
_identifier: Any = None


@dataclass(frozen=True, slots=True)
class LanguageGuess:
    """The identifier's answer for one text."""

    language: str
    confidence: float
    english: float


def _load() -> Any:
    """py3langid's identifier with normalised probabilities, loaded once (thread-safe)."""
    global _identifier
    if _identifier is None:
        with _lock:
            if _identifier is None:
                from py3langid.langid import MODEL_FILE

                _identifier = _identifier_class().from_model_file(MODEL_FILE, norm_probs=True)
    return _identifier


def _identifier_class() -> Any:
    """py3langid's `LanguageIdentifier` with a remembered line-by-line walk (see the module docstring)."""
    from collections import Counter

    from py3langid.langid import LanguageIdentifier

    class _LineWalkingIdentifier(LanguageIdentifier):
        def _raw_score(self, text: bytes) -> Any:
            found: list[int] = []
            state = 0
            start = 0
            while start < len(text):  # a line, then its newline: a window's last line is a later window's line
                newline = text.find(b"\n", start)
                end = len(text) if newline < 0 else newline + (newline == start)
                state, features = _walk(state, text[start:end])
                found.extend(features)
                start = end
            if not found:
                return super()._raw_score(b"")  # py3langid's answer for a text without features
            return self._sparse_score(Counter(found), self.nb_ptc)

    return _LineWalkingIdentifier


@lru_cache(maxsize=16384)
def _walk(state: int, line: bytes) -> tuple[int, tuple[int, ...]]:
    """The automaton's state after `line` from `state`, and the features it passed, in order
    (py3langid's `visit_counts` loop, remembered)."""
    identifier = _identifier
    nextmove, rowbase, output = identifier.tk_nextmove, identifier._rowbase, identifier.tk_output
    found = []
    for byte in line:
        state = nextmove[rowbase[state] + byte]
        feature = output[state]
        if feature >= 0:
            found.append(feature)
    return state, tuple(found)


@lru_cache(maxsize=4096)
def identify(text: str) -> LanguageGuess:
    """The most likely language of `text`, its probability, and English's probability."""
    identifier = _load()
    # py3langid's scores with each label's aliases folded into its first column: the top column and
    # English's are what `rank` would list first and for "en", without ranking all ~140 labels.
    scores = identifier._decide(text)
    top = int(scores.argmax())
    classes = identifier.nb_classes
    english = float(scores[classes.index(SUPPORTED)]) if SUPPORTED in classes else 0.0
    return LanguageGuess(language=str(classes[top]), confidence=float(scores[top]), english=english)


def _has_letters(text: str, needed: int) -> bool:
    """Whether `text` has at least `needed` letters; stops counting there, since every window of
    a bulk run passes through here and a full count was a Python loop over 2,000 characters."""
    for ch in text:
        if ch.isalpha():
            needed -= 1
            if needed <= 0:
                return True
    return needed <= 0


def text_reason(text: str) -> str | None:
    """Why `text` cannot be assessed ("language fr"), or None when it can (English or too short to tell)."""
    text = text[-MAX_CHARS:]
    if not _has_letters(text, MIN_LETTERS):
        return None
    guess = identify(text)
    if guess.language != SUPPORTED and guess.confidence >= CONFIDENCE and guess.english < ENGLISH_FLOOR:
        return f"language {guess.language}"
    return None


def not_assessed_reason(window: Conversation) -> str | None:
    """Why the latest turn of `window` gets no verdict, or None when the detectors should run."""
    if not window.turns:
        return None
    return text_reason("\n".join(t.text for t in window.turns))


def warm_up() -> None:
    """Load the identifier now (a second on a cold start) rather than on the first turn."""
    _load()
