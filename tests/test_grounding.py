from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from guardian.conversation import Conversation, Turn
from guardian.grounding import (
    clauses,
    find_span,
    ground,
    ground_in_turn,
    normalize_quote,
    sentences,
)


def _conv(*texts: str) -> Conversation:
    return Conversation.from_pairs([("A" if i % 2 == 0 else "B", t) for i, t in enumerate(texts)])


def test_exact_quote_is_found_with_span() -> None:
    conv = _conv("Hello there.", "You never listen to me. Ever.")
    ev = ground(conv, "You never listen to me.")
    assert ev is not None
    assert (ev.turn, ev.start, ev.end) == (1, 0, 23)
    assert conv.turn(1).text[ev.start : ev.end] == ev.quote


def test_tolerates_whitespace_case_and_curly_quotes_but_returns_transcript_text() -> None:
    conv = _conv("I  never said   that, it's\nyour fault.")
    ev = ground(conv, "i never SAID that, it’s your fault")
    assert ev is not None
    assert ev.quote == "I  never said   that, it's\nyour fault"


def test_nothing_fuzzier() -> None:
    conv = _conv("You never listen to me.")
    assert ground(conv, "You never listen to us.") is None
    assert ground(conv, "You never listen to me!!") is None
    assert ground(conv, "Younever listen") is None
    assert ground(conv, "") is None
    assert ground(conv, "   ") is None


def test_prefers_requested_turn_then_latest() -> None:
    conv = _conv("stop it", "stop it", "stop it")
    assert ground(conv, "stop it", turn=1).turn == 1  # type: ignore[union-attr]
    assert ground(conv, "stop it").turn == 2  # type: ignore[union-attr]


def test_speaker_prefix_copied_from_layout_is_tolerated() -> None:
    conv = _conv("Hi", "You are too sensitive.")
    ev = ground(conv, "B: You are too sensitive.")
    assert ev is not None and ev.turn == 1 and ev.quote == "You are too sensitive."


def _occurrences(hay: str, needle: str) -> int:
    return sum(hay.startswith(needle, i) for i in range(len(hay)))


@given(st.text(min_size=1, max_size=200), st.data())
def test_any_substring_is_found_at_its_true_span(text: str, data: st.DataObject) -> None:
    start = data.draw(st.integers(min_value=0, max_value=len(text) - 1))
    end = data.draw(st.integers(min_value=start + 1, max_value=len(text)))
    sub = text[start:end]
    span = find_span(text, sub)
    if not normalize_quote(sub):
        assert span is None
        return
    assert span is not None
    s, e = span
    # The first match is at or before the true position, and is the same text under normalisation.
    assert normalize_quote(text[s:e]) == normalize_quote(sub)
    assert s <= start + (len(sub) - len(sub.lstrip()))
    if _occurrences(normalize_quote(text), normalize_quote(sub)) == 1:
        assert (s, e) == (start + len(sub) - len(sub.lstrip()), end - (len(sub) - len(sub.rstrip())))


@given(st.text(max_size=300))
def test_sentence_and_clause_spans_are_verbatim(text: str) -> None:
    turn = Turn(index=0, speaker="A", text=text)
    for span in [*sentences(text), *clauses(text)]:
        assert text[span.start : span.end] == span.text
        assert span.text.strip() == span.text and span.text
        assert ground_in_turn(turn, span.text) is not None


def test_sentences_split_dialogue() -> None:
    assert [s.text for s in sentences("Stop. Why would you do that?! I said no…  fine\nnext")] == [
        "Stop.",
        "Why would you do that?!",
        "I said no…",
        "fine",
        "next",
    ]
