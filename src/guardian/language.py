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
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return _identifier


@lru_cache(maxsize=4096)
def identify(text: str) -> LanguageGuess:
    """The most likely language of `text`, its probability, and English's probability."""
    ranked: list[tuple[str, float]] = _load().rank(text)
    language, confidence = ranked[0]
    english = next((p for code, p in ranked if code == SUPPORTED), 0.0)
    return LanguageGuess(language=str(language), confidence=float(confidence), english=float(english))


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
