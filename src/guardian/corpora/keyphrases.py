"""MentalManip's key phrases and the paper's rule for matching them (seed 000, section 3.2, Table 2).

A sentence matches a key phrase when it contains at least P% of the phrase's
tokens, with P = 100/90/80/70% for phrases of <=4/<=6/<=10/>10 tokens. The
paper's phrases are lemmatised and in the present tense, so contractions are
expanded and both sides lemmatised: "You're overreacting" matches "you are overreact".

Why here and not in the detector: the phrases are the corpus's own annotation, and two
readers use the rule, the `keyphrases` detector at run time and the local model's training
(key-phrase turns as weak hints, `detectors/local/augment.py`). Below the detectors, neither
detector package imports the other.

Matching reads a normalised copy of each sentence (NFKC, format characters such as
zero-width spaces and bidi controls removed), so "over\u200breacting" cannot hide a phrase.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources

_CONTRACTIONS = [
    (re.compile(r"\bcan't\b"), "can not"),
    (re.compile(r"\bcannot\b"), "can not"),
    (re.compile(r"\bwon't\b"), "will not"),
    (re.compile(r"\bshan't\b"), "shall not"),
    (re.compile(r"\bain't\b"), "am not"),
    (re.compile(r"n't\b"), " not"),
    (re.compile(r"'re\b"), " are"),
    (re.compile(r"\bi'm\b"), "i am"),
    (re.compile(r"'ll\b"), " will"),
    (re.compile(r"'ve\b"), " have"),
    (re.compile(r"'d\b"), " would"),
    (re.compile(r"\b(it|that|what|there|he|she|who|where|here|how)'s\b"), r"\1 is"),
    (re.compile(r"\bgonna\b"), "going to"),
    (re.compile(r"\bwanna\b"), "want to"),
]
_TOKEN = re.compile(r"[a-z0-9]+")


@lru_cache(maxsize=65536)
def _lemma(token: str) -> str:
    import simplemma

    lemma: str = simplemma.lemmatize(token, lang="en")
    return lemma.lower()


def normalised(text: str) -> str:
    """`text` as the matcher reads it: NFKC (full-width and ligature letters become plain ones)
    without format characters (category Cf: zero-width spaces and joiners, soft hyphens, bidi
    controls), which are invisible to a reader but split a word in two for the tokenizer."""
    if text.isascii():
        return text  # nothing to normalise: the common case stays cheap
    text = unicodedata.normalize("NFKC", text)
    return "".join(c for c in text if c.isascii() or unicodedata.category(c) != "Cf")


def tokens(text: str) -> list[str]:
    """Lower-case, contraction-expanded, lemmatised tokens (the matcher's unit) of the normalised text."""
    text = normalised(text).lower().replace("\u2019", "'").replace("\u2018", "'")
    for pattern, replacement in _CONTRACTIONS:
        text = pattern.sub(replacement, text)
    return [_lemma(t) for t in _TOKEN.findall(text)]


def required_fraction(length: int) -> float:
    """The paper's length-adaptive matching percentage P for a phrase of `length` tokens."""
    if length <= 4:
        return 1.0
    if length <= 6:
        return 0.9
    if length <= 10:
        return 0.8
    return 0.7


@dataclass(frozen=True, slots=True)
class KeyPhrase:
    text: str
    tokens: tuple[str, ...]

    @property
    def required(self) -> float:
        return required_fraction(len(self.tokens))

    def coverage(self, sentence_tokens: frozenset[str]) -> float:
        if not self.tokens:
            return 0.0
        return sum(t in sentence_tokens for t in self.tokens) / len(self.tokens)


@dataclass(frozen=True, slots=True)
class PhraseMatch:
    phrase: KeyPhrase
    coverage: float


@cache
def load_phrases() -> tuple[KeyPhrase, ...]:
    text = resources.files("guardian.resources").joinpath("key_phrases.txt").read_text(encoding="utf-8")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            out.append(KeyPhrase(line, tuple(tokens(line))))
    return tuple(out)


@cache
def _needed_counts() -> tuple[int, ...]:
    """Per shipped phrase, the fewest of its tokens a sentence must contain: the smallest count whose
    coverage passes `match_sentence`'s test, so the loop compares integers instead of calling the
    `required` property of every phrase sharing a token (~95 per sentence, "you" and "be" are in many)."""
    out = []
    for phrase in load_phrases():
        n = len(phrase.tokens)
        out.append(next((k for k in range(1, n + 1) if k / n >= phrase.required - 1e-9), n + 1))
    return tuple(out)


@cache
def _phrases_by_token() -> dict[str, tuple[tuple[int, int], ...]]:
    """Token -> (position of a shipped phrase containing it, how many times it does)."""
    index: dict[str, list[tuple[int, int]]] = {}
    for n, phrase in enumerate(load_phrases()):
        for token in dict.fromkeys(phrase.tokens):
            index.setdefault(token, []).append((n, phrase.tokens.count(token)))
    return {token: tuple(hits) for token, hits in index.items()}


def match_sentence(sentence: str, phrases: tuple[KeyPhrase, ...] | None = None) -> list[PhraseMatch]:
    """Every key phrase this sentence matches under the length-adaptive rule, best first.

    The shipped phrases are counted through a token index: only those sharing a token with the
    sentence are looked at (a match covers at least 70 % of a phrase's tokens), each with the
    coverage `KeyPhrase.coverage` gives, in file order, so the matches are the ones scoring all
    175 gives, in a third of the time (it mattered once bulk screening made the encoder cheap, issue 23).
    """
    toks = frozenset(tokens(sentence))
    if not toks:
        return []
    found = []
    if phrases is None:
        shipped = load_phrases()
        index = _phrases_by_token()
        needed = _needed_counts()
        counts: dict[int, int] = {}
        for token in toks:
            for n, times in index.get(token, ()):
                counts[n] = counts.get(n, 0) + times
        for n in sorted(n for n, c in counts.items() if c >= needed[n]):
            phrase = shipped[n]
            found.append(PhraseMatch(phrase, counts[n] / len(phrase.tokens)))
        found.sort(key=lambda m: (-m.coverage, -len(m.phrase.tokens)))
        return found
    for phrase in phrases:
        cov = phrase.coverage(toks)
        if cov >= phrase.required - 1e-9:
            found.append(PhraseMatch(phrase, cov))
    found.sort(key=lambda m: (-m.coverage, -len(m.phrase.tokens)))
    return found
