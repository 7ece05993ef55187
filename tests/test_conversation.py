from __future__ import annotations

import pytest
from pydantic import ValidationError

from guardian import Assessment, Conversation, Evidence, Finding, Turn
from guardian.findings import DetectorError, Intent
from guardian.taxonomy import FaceAct, Technique, Vulnerability


def test_window_keeps_original_indices(gaslighting: Conversation) -> None:
    window = gaslighting.window(2)
    assert [t.index for t in window.turns] == [2, 3]
    assert window.turn(3).speaker == "Daniel"
    with pytest.raises(KeyError):
        window.turn(0)
    assert gaslighting.upto(1).last == gaslighting.turns[1]
    assert gaslighting.window(0).turns == ()


def test_append_numbers_turns(gaslighting: Conversation) -> None:
    longer = gaslighting.append("Maya", "ok", start=1.0, end=2.0, source="audio")
    assert longer.last == Turn(index=4, speaker="Maya", text="ok", start=1.0, end=2.0, source="audio")
    assert len(gaslighting) == 4  # frozen: the original is untouched


def test_types_are_frozen(gaslighting: Conversation) -> None:
    with pytest.raises(ValidationError):
        gaslighting.turns[0].text = "changed"  # type: ignore[misc]


def test_evidence_span_must_match_quote_length() -> None:
    with pytest.raises(ValidationError):
        Evidence(turn=0, quote="abc", start=0, end=5)


def test_finding_needs_exactly_one_label() -> None:
    with pytest.raises(ValidationError):
        Finding(score=0.5, detector="x")
    with pytest.raises(ValidationError):
        Finding(technique=Technique.DENIAL, pattern="p", score=0.5, detector="x")


def test_assessment_json_round_trip(gaslighting: Conversation) -> None:
    evidence = Evidence(turn=1, quote="I never said that.", start=0, end=18)
    assessment = Assessment(
        conversation_id=gaslighting.id,
        turn=1,
        probability=0.9,
        decision=True,
        threshold=0.5,
        techniques={Technique.DENIAL: 0.8},
        vulnerabilities={Vulnerability.NAIVETE: 0.4},
        findings=(
            Finding(
                technique=Technique.DENIAL,
                score=0.8,
                evidence=(evidence,),
                vulnerabilities=(Vulnerability.NAIVETE,),
                speaker="Daniel",
                detector="local",
            ),
        ),
        intents=(Intent(turn=1, speaker="Daniel", face_act=FaceAct.HPOS_MINUS, score=0.7, intention="x", detector="intent"),),
        errors=(DetectorError(detector="llm", kind="timeout", message="took too long"),),
    )
    assert Assessment.model_validate_json(assessment.model_dump_json()) == assessment
    assert Conversation.model_validate_json(gaslighting.model_dump_json()) == gaslighting


def test_merge_takes_strongest_probability_and_unions_findings() -> None:
    f = Finding(pattern="key_phrase", score=0.5, detector="keyphrases")
    a = Assessment(turn=3, probability=0.2, threshold=0.5, detectors=("a",))
    b = Assessment(turn=3, probability=0.7, decision=True, threshold=0.6, findings=(f,), detectors=("b",))
    merged = Assessment.merge([a, b], conversation_id="c", turn=3)
    assert merged.probability == 0.7
    assert merged.decision is True
    assert merged.threshold == 0.6
    assert merged.findings == (f,)
    assert merged.detectors == ("a", "b")


class CountingTurns(tuple[Turn, ...]):
    """A turns tuple that counts how many turns are read through it (iteration and slices)."""

    read = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        CountingTurns.read += len(self)
        return super().__iter__()

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        got = super().__getitem__(key)
        CountingTurns.read += len(got) if isinstance(key, slice) else 1
        return got


def long_conversation(n: int) -> Conversation:
    turns = CountingTurns(Turn(index=i, speaker="AB"[i % 2], text=f"turn {i}") for i in range(n))
    CountingTurns.read = 0
    return Conversation.model_construct(id="long", turns=turns)


def test_a_window_ending_at_a_turn_reads_only_the_window() -> None:
    """Per turn, a window must cost O(window), not O(turns before it): a 100,000-turn
    transcript never finished when every window copied the whole conversation."""
    n = 5_000
    conversation = long_conversation(n)
    for i in range(n):
        window = conversation.window(10, ending_at=i)
        assert [t.index for t in window.turns] == list(range(max(0, i - 9), i + 1))
    assert CountingTurns.read <= 12 * n
    CountingTurns.read = 0
    assert conversation.turn(n - 1).index == n - 1 and CountingTurns.read <= 5


def test_windows_of_windows_keep_indices() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    @given(
        st.lists(st.integers(min_value=0, max_value=60), unique=True, max_size=30),
        st.integers(min_value=-2, max_value=12),
        st.integers(min_value=-3, max_value=65),
    )
    def check(indices: list[int], size: int, end: int) -> None:
        turns = tuple(Turn(index=i, speaker="A", text="x") for i in sorted(indices))
        conversation = Conversation(turns=turns)
        expected = [t for t in turns if t.index <= end]
        expected = expected[-size:] if size > 0 else []
        assert list(conversation.window(size, ending_at=end).turns) == expected
        assert list(conversation.upto(end).turns) == [t for t in turns if t.index <= end]
        for t in turns:
            assert conversation.turn(t.index) is t
        missing = next(i for i in range(70) if i not in indices)
        with pytest.raises(KeyError):
            conversation.turn(missing)

    check()


def test_conversations_without_an_id_get_their_own() -> None:
    """Detectors keep state per conversation id; unnamed conversations all shared "conversation"."""
    a = Conversation.from_pairs([("Ann", "hi")])
    b = Conversation.from_pairs([("Ann", "hi")])
    assert a.id != b.id and Conversation().id != Conversation().id
    assert a.id.startswith("conversation-")
    assert a.append("Ben", "yo").window(1).id == a.id  # windows and appends keep it
    assert Conversation.from_pairs([("Ann", "hi")], id="chat-1").id == "chat-1"
