"""Grounding: a quote is evidence only if it is found in the transcript.

Matching tolerates what copying text legitimately changes (runs of whitespace,
curly vs straight quotes, letter case) and nothing fuzzier, so what a user is
shown is always the transcript's own words at a known turn and character span.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from guardian.conversation import Conversation, Evidence, Turn

_QUOTE_MAP = str.maketrans(
    {
        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "`": "'",
        "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
    }
)


@dataclass(frozen=True, slots=True)
class _Normalized:
    text: str
    origin: tuple[int, ...]  # origin[i] = index in the original text of normalised char i


def _normalize(text: str) -> _Normalized:
    chars: list[str] = []
    origin: list[int] = []
    in_space = False
    for i, ch in enumerate(text):
        if ch.isspace():
            if not in_space and chars:
                chars.append(" ")
                origin.append(i)
            in_space = True
            continue
        in_space = False
        ch = ch.translate(_QUOTE_MAP)
        low = ch.lower()
        chars.append(low if len(low) == 1 else ch)
        origin.append(i)
    if chars and chars[-1] == " ":
        chars.pop()
        origin.pop()
    return _Normalized("".join(chars), tuple(origin))


def normalize_quote(quote: str) -> str:
    """The form in which quotes are compared (exposed for tests and de-duplication)."""
    return _normalize(quote).text


def find_span(text: str, quote: str) -> tuple[int, int] | None:
    """Span of the first occurrence of `quote` in `text` under normalisation, or None."""
    needle = _normalize(quote).text
    if not needle:
        return None
    hay = _normalize(text)
    pos = hay.text.find(needle)
    if pos < 0:
        return None
    start = hay.origin[pos]
    end = hay.origin[pos + len(needle) - 1] + 1
    return start, end


def ground_in_turn(turn: Turn, quote: str) -> Evidence | None:
    span = find_span(turn.text, quote)
    if span is None:
        return None
    start, end = span
    return Evidence(turn=turn.index, quote=turn.text[start:end], start=start, end=end)


def ground(conversation: Conversation, quote: str, *, turn: int | None = None) -> Evidence | None:
    """Locate `quote` in the transcript; prefer `turn` when given, then latest turns first.

    The returned evidence carries the transcript's own text, never the caller's copy.
    """
    candidates = list(reversed(conversation.turns))
    if turn is not None:
        candidates.sort(key=lambda t: t.index != turn)
    for candidate in candidates:
        evidence = ground_in_turn(candidate, quote)
        if evidence is not None:
            return evidence
    # A quote that carries a "Speaker:" prefix copied from the transcript layout.
    stripped = re.sub(r"^\s*[^:\n]{1,40}:\s+", "", quote)
    if stripped != quote:
        return ground(conversation, stripped, turn=turn)
    return None


_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+|\n+")
_CLAUSE_END = re.compile(r"(?<=[,;:—–])\s+|\s+-{1,2}\s+")


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    text: str


def _split(text: str, pattern: re.Pattern[str]) -> list[Span]:
    spans: list[Span] = []
    pos = 0
    for m in pattern.finditer(text):
        _add(spans, text, pos, m.start())
        pos = m.end()
    _add(spans, text, pos, len(text))
    return spans


def _add(spans: list[Span], text: str, start: int, end: int) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        spans.append(Span(start, end, text[start:end]))


def sentences(text: str) -> list[Span]:
    """Sentence spans of one turn's text (rule-based: good enough for dialogue, no model)."""
    return _split(text, _SENTENCE_END)


def clauses(text: str) -> list[Span]:
    """Clause spans: sentences split further at commas, semicolons and dashes."""
    out: list[Span] = []
    for sentence in sentences(text):
        for clause in _split(sentence.text, _CLAUSE_END):
            out.append(Span(sentence.start + clause.start, sentence.start + clause.end, clause.text))
    return out


def evidence_for(turn: Turn, span: Span) -> Evidence:
    return Evidence(turn=turn.index, quote=turn.text[span.start : span.end], start=span.start, end=span.end)
