"""The pure screening functions: messages to turns, flag rules, notices, annotations."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from guardian.agents._screening import (
    Speakers,
    annotate,
    append_notice,
    assess,
    assessment_of,
    is_flagged,
    summary,
    to_conversation,
    to_turns,
)
from guardian.conversation import Conversation, Evidence
from guardian.findings import Assessment, Finding
from guardian.taxonomy import Technique
from tests.agents.conftest import BrokenDetector, Lines, ScriptedDetector


def test_only_spoken_turns_become_conversation() -> None:
    messages = [
        SystemMessage("You are a helpful assistant."),
        HumanMessage("What's the weather?", id="h"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {}, "id": "c"}]),
        ToolMessage("sunny", tool_call_id="c"),
        AIMessage([{"type": "text", "text": "It is sunny."}], id="a"),
    ]
    turns = to_turns(messages, speakers=Speakers("Maya", "Bot"))
    assert [(t.key, t.speaker, t.text) for t in turns] == [("h", "Maya", "What's the weather?"), ("a", "Bot", "It is sunny.")]
    conversation = to_conversation(turns, conversation_id="t1")
    assert conversation.id == "t1" and [t.index for t in conversation.turns] == [0, 1]


def _assessment(**kw: object) -> Assessment:
    return Assessment(conversation_id="c", turn=1, **kw)  # type: ignore[arg-type]


def test_flag_rules() -> None:
    assert is_flagged(_assessment(probability=0.7, decision=True))
    assert not is_flagged(_assessment(probability=0.7, decision=False))
    assert is_flagged(_assessment(probability=0.7, decision=False), threshold=0.6)
    assert not is_flagged(_assessment(probability=0.7, decision=True), threshold=0.8)
    # Pattern-only detectors: a finding on the screened turn, at or above 0.5.
    on_turn = Finding(pattern="key_phrase", score=0.5, evidence=(Evidence(turn=1, quote="x", start=0, end=1),), detector="k")
    earlier = Finding(pattern="key_phrase", score=0.9, evidence=(Evidence(turn=0, quote="x", start=0, end=1),), detector="k")
    assert is_flagged(_assessment(findings=(on_turn,)))
    assert not is_flagged(_assessment(findings=(earlier,)))
    # Evidence only in earlier turns: judged when said, not again now.
    assert not is_flagged(_assessment(probability=0.9, decision=True, findings=(earlier,)))
    assert is_flagged(_assessment(probability=0.9, decision=True, findings=(earlier, on_turn)))
    # The detectors blame the other party: this speaker's turn is not flagged.
    blamed = _assessment(probability=0.9, decision=True, manipulator="User")
    assert is_flagged(blamed, speaker="User")
    assert not is_flagged(blamed, speaker="Assistant")


def test_summary_names_tactic_and_quote(lines: Lines, scripted: ScriptedDetector) -> None:
    conversation = Conversation.from_pairs([("User", "Hi"), ("Assistant", lines.belittling.text)])
    assessment = assess([scripted], conversation)
    text = summary(assessment, direction="output")
    assert text == "this reply may be manipulative (Rationalization), 91% likely: “Don't be so dramatic.”"


def test_assess_records_failures_and_merges(lines: Lines, scripted: ScriptedDetector) -> None:
    conversation = Conversation.from_pairs([("User", lines.threat.text)], id="x")
    assessment = assess([BrokenDetector(), scripted], conversation)
    assert assessment.decision and assessment.techniques == {Technique.INTIMIDATION: 0.91}
    assert [(e.detector, e.kind) for e in assessment.errors] == [("broken-test", "error")]
    assert assessment.detectors == ("broken-test", "scripted-test")


def test_annotation_round_trip_and_notice_shapes() -> None:
    assessment = _assessment(probability=0.2)
    message = annotate(AIMessage("Hello", id="m"), {"assessment": assessment.model_dump(mode="json")})
    assert assessment_of(message) == assessment
    assert assessment_of(AIMessage("plain")) is None
    assert append_notice(AIMessage("Hello "), "[guardian] note").content == "Hello\n\n[guardian] note"
    blocks = append_notice(AIMessage([{"type": "text", "text": "Hello"}]), "[guardian] note").content
    assert blocks[-1] == {"type": "text", "text": "\n\n[guardian] note"}
