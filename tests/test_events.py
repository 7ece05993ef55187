"""The JSON form of events: a pydantic discriminated union on `type`, with the exact shape
session logs, `watch --headless` and the service have always written."""

from __future__ import annotations

import json

import jsonschema
import pytest

from guardian.conversation import Evidence, Turn
from guardian.errors import InputError
from guardian.events import (
    SCHEMA_VERSION,
    AssessmentReady,
    ErrorRaised,
    Event,
    FindingRaised,
    TurnAdded,
    from_dict,
    json_schema,
    to_dict,
)
from guardian.findings import Assessment, Finding
from guardian.taxonomy import Technique

TURN = Turn(index=1, speaker="Ann", text="You are stupid.")
FINDING = Finding(
    technique=Technique.SHAMING_OR_BELITTLEMENT, score=0.8, detector="d",
    evidence=(Evidence(turn=1, quote="stupid", start=8, end=14),),
)
EVENTS: list[Event] = [
    TurnAdded("c", TURN, time=1.5),
    AssessmentReady("c", Assessment(conversation_id="c", turn=1, probability=0.8), risk=0.123456789, new_findings=1, time=2.0),
    FindingRaised("c", 1, FINDING, time=2.5),
    ErrorRaised("c", 1, "timeout", "took too long", detector="llm", time=3.0),
    ErrorRaised(None, None, "input", "line 4: no speaker", line=4, time=3.5),
]


def test_every_event_keeps_its_wire_shape_and_key_order() -> None:
    lines = [json.dumps(to_dict(e)) for e in EVENTS]
    assert lines[0] == (
        '{"type": "turn", "schema_version": 2, "conversation_id": "c", "time": 1.5, "turn": '
        + json.dumps(TURN.model_dump(mode="json")) + "}"
    )
    assert list(to_dict(EVENTS[1])) == ["type", "schema_version", "conversation_id", "time", "turn", "risk", "new_findings",
                                     "assessment"]
    assert to_dict(EVENTS[1])["risk"] == 0.123457  # rounded to 6 places, as always
    assert list(to_dict(EVENTS[2])) == ["type", "schema_version", "conversation_id", "time", "turn", "finding"]
    assert lines[4] == (
        '{"type": "error", "schema_version": 2, "conversation_id": null, "time": 3.5, "turn": null, "kind": "input", '
        '"detector": null, "line": 4, "message": "line 4: no speaker"}'
    )


def test_round_trip_and_schema() -> None:
    schema = json_schema()
    for event in EVENTS:
        data = json.loads(json.dumps(to_dict(event)))
        jsonschema.validate(data, schema)
        back = from_dict(data)
        assert type(back) is type(event)
        assert to_dict(back) == data


def test_a_number_json_cannot_hold_becomes_null() -> None:
    event = AssessmentReady("c", Assessment(conversation_id="c", turn=0), risk=float("nan"))
    assert to_dict(event)["risk"] is None


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"type": "nope"}, "unknown event type 'nope'"),
        ({"turn": 1}, "unknown event type None"),
        ({"type": "turn", "turn": TURN.model_dump(mode="json")}, "malformed turn event (missing field 'conversation_id')"),
        ({"type": "assessment", "conversation_id": "c", "turn": 0, "assessment": {}}, "missing field 'risk'"),
        ({"type": "error", "kind": "boom"}, "malformed error event (kind: Input should be"),
        ({"type": "finding", "conversation_id": "c", "turn": "x", "finding": {}}, "malformed finding event (turn:"),
    ],
)
def test_a_malformed_line_is_one_sentence_naming_the_line(data: dict, words: str) -> None:
    with pytest.raises(InputError) as info:
        from_dict(data, source="s.jsonl", line=7)
    message = str(info.value)
    assert words in message and message.startswith("s.jsonl, line 7:")
    assert "\n" not in message and "pydantic" not in message


def test_reading_is_lenient_where_it_always_was() -> None:
    """A field a newer guardian adds is ignored; an absent `time` is 0; a numeric id is a string."""
    data = {"type": "turn", "conversation_id": 5, "turn": TURN.model_dump(mode="json"), "extra": 1}
    event = from_dict(data)
    assert isinstance(event, TurnAdded) and event.conversation_id == "5" and event.time == 0.0


def test_every_line_says_its_schema_version_and_a_version_1_line_still_reads() -> None:
    assert SCHEMA_VERSION == 2
    for event in EVENTS:
        assert to_dict(event)["schema_version"] == SCHEMA_VERSION
    old = {"type": "turn", "conversation_id": "c", "time": 1.5, "turn": TURN.model_dump(mode="json")}
    back = from_dict(old)
    assert isinstance(back, TurnAdded) and back.turn == TURN
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(old, json_schema())  # what guardian prints always carries the version
