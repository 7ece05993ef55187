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
