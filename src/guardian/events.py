"""What the monitor tells its subscribers, and the JSON Lines form of it.

One event type per thing that happens (a turn arrives, an assessment is ready,
a new finding is raised, something failed). The same dictionaries are printed by
`guardian watch --headless` and appended to the session log, so a pipe consumer,
the log and `guardian report` all read one schema (docs/watch.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from guardian.conversation import Turn
from guardian.errors import InputError
from guardian.findings import Assessment, DetectorError, Finding

SCHEMA_VERSION = 1

ErrorKind = Literal["error", "timeout", "unavailable", "input"]


@dataclass(frozen=True, slots=True)
class TurnAdded:
    """A turn joined the conversation (emitted before any detector looks at it)."""

    conversation_id: str
    turn: Turn
    time: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class AssessmentReady:
    """Every detector has answered (or failed) for one turn; `risk` is the conversation's running risk."""

    conversation_id: str
    assessment: Assessment
    risk: float
    new_findings: int = 0
    time: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class FindingRaised:
    """A finding not alerted before in this conversation (same label and same quoted span)."""

    conversation_id: str
    turn: int
    finding: Finding
    time: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class ErrorRaised:
    """A detector failed or timed out, or an input line could not be read; the session goes on."""

    conversation_id: str | None
    turn: int | None
    kind: ErrorKind
    message: str
    detector: str | None = None
    line: int | None = None
    time: float = field(default_factory=time.time)

    @classmethod
    def from_detector(cls, error: DetectorError, *, conversation_id: str, turn: int) -> ErrorRaised:
        return cls(
            conversation_id=conversation_id,
            turn=turn,
            kind=error.kind,
            message=error.message,
            detector=error.detector,
        )


Event = TurnAdded | AssessmentReady | FindingRaised | ErrorRaised


def to_dict(event: Event) -> dict[str, Any]:
    """The JSON-ready form, with a `type` field: turn | assessment | finding | error.

    Numbers that JSON cannot hold (NaN, ±Infinity, e.g. from a plug-in detector) become null:
    Python's json writes them as `NaN`, which no JSON reader accepts.
    """
    return _finite(_to_dict(event))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _to_dict(event: Event) -> dict[str, Any]:
    if isinstance(event, TurnAdded):
        return {
            "type": "turn",
            "conversation_id": event.conversation_id,
            "time": event.time,
            "turn": event.turn.model_dump(mode="json"),
        }
    if isinstance(event, AssessmentReady):
        return {
            "type": "assessment",
            "conversation_id": event.conversation_id,
            "time": event.time,
            "turn": event.assessment.turn,
            "risk": round(event.risk, 6),
            "new_findings": event.new_findings,
            "assessment": event.assessment.model_dump(mode="json"),
        }
    if isinstance(event, FindingRaised):
        return {
            "type": "finding",
            "conversation_id": event.conversation_id,
            "time": event.time,
            "turn": event.turn,
            "finding": event.finding.model_dump(mode="json"),
        }
    return {
        "type": "error",
        "conversation_id": event.conversation_id,
        "time": event.time,
        "turn": event.turn,
        "kind": event.kind,
        "detector": event.detector,
        "line": event.line,
        "message": event.message,
    }


def from_dict(data: dict[str, Any], *, source: str = "<events>", line: int | None = None) -> Event:
    """Rebuild an event from its dictionary; anything malformed is an InputError naming the line."""
    kind = data.get("type")
    try:
        if kind == "turn":
            return TurnAdded(
                conversation_id=str(data["conversation_id"]),
                turn=Turn.model_validate(data["turn"]),
                time=float(data.get("time", 0.0)),
            )
        if kind == "assessment":
            return AssessmentReady(
                conversation_id=str(data["conversation_id"]),
                assessment=Assessment.model_validate(data["assessment"]),
                risk=float(data["risk"]),
                new_findings=int(data.get("new_findings", 0)),
                time=float(data.get("time", 0.0)),
            )
        if kind == "finding":
            return FindingRaised(
                conversation_id=str(data["conversation_id"]),
                turn=int(data["turn"]),
                finding=Finding.model_validate(data["finding"]),
                time=float(data.get("time", 0.0)),
            )
        if kind == "error":
            error_kind = data.get("kind", "error")
            if error_kind not in ("error", "timeout", "unavailable", "input"):
                raise ValueError(f"unknown error kind {error_kind!r}")
            return ErrorRaised(
                conversation_id=data.get("conversation_id"),
                turn=data.get("turn"),
                kind=error_kind,
                message=str(data.get("message", "")),
                detector=data.get("detector"),
                line=data.get("line"),
                time=float(data.get("time", 0.0)),
            )
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        reason = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise InputError(f"malformed {kind} event ({reason})", source=source, line=line) from None
    raise InputError(f"unknown event type {kind!r}", source=source, line=line)


def json_schema() -> dict[str, Any]:
    """JSON Schema of one event line (committed as schema/watch-event.schema.json, checked by a test)."""
    from pydantic import TypeAdapter

    defs: dict[str, Any] = {}
    for model in (Turn, Assessment, Finding):
        schema = TypeAdapter(model).json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        defs[model.__name__] = schema
    common = {
        "conversation_id": {"type": "string"},
        "time": {"type": "number", "description": "seconds since the epoch when the event happened"},
    }
    nullable_int = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    events = {
        "TurnEvent": {
            "type": "object",
            "required": ["type", "conversation_id", "time", "turn"],
            "properties": {"type": {"const": "turn"}, **common, "turn": {"$ref": "#/$defs/Turn"}},
            "additionalProperties": False,
        },
        "AssessmentEvent": {
            "type": "object",
            "required": ["type", "conversation_id", "time", "turn", "risk", "new_findings", "assessment"],
            "properties": {
                "type": {"const": "assessment"},
                **common,
                "turn": {"type": "integer"},
                "risk": {"type": "number", "minimum": 0, "maximum": 1},
                "new_findings": {"type": "integer", "minimum": 0},
                "assessment": {"$ref": "#/$defs/Assessment"},
            },
            "additionalProperties": False,
        },
        "FindingEvent": {
            "type": "object",
            "required": ["type", "conversation_id", "time", "turn", "finding"],
            "properties": {
                "type": {"const": "finding"},
                **common,
                "turn": {"type": "integer"},
                "finding": {"$ref": "#/$defs/Finding"},
            },
            "additionalProperties": False,
        },
        "ErrorEvent": {
            "type": "object",
            "required": ["type", "conversation_id", "time", "turn", "kind", "detector", "line", "message"],
            "properties": {
                "type": {"const": "error"},
                "conversation_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "time": common["time"],
                "turn": nullable_int,
                "kind": {"enum": ["error", "timeout", "unavailable", "input"]},
                "detector": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "line": nullable_int,
                "message": {"type": "string"},
            },
            "additionalProperties": False,
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "guardian watch event",
        "description": "One line of `guardian watch --headless` output or of a session log "
        f"(schema version {SCHEMA_VERSION}).",
        "oneOf": [{"$ref": f"#/$defs/{name}"} for name in events],
        "$defs": {**defs, **events},
    }
