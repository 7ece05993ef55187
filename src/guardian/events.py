"""What the monitor tells its subscribers, and the JSON Lines form of it.

One event type per thing that happens (a turn arrives, an assessment is ready,
a new finding is raised, something failed). The same dictionaries are printed by
`guardian watch --headless` and appended to the session log, so a pipe consumer,
the log and `guardian report` all read one schema (docs/watch.md).

The events themselves are plain frozen dataclasses (cheap to make on every turn); their JSON
form is a pydantic discriminated union on `type` (`TurnEvent` | `AssessmentEvent` |
`FindingEvent` | `ErrorEvent`) read and written through one `TypeAdapter`, which also
generates the JSON Schema.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from guardian.conversation import Turn
from guardian.errors import InputError
from guardian.findings import Assessment, DetectorError, Finding

#: Version of every event line (`schema_version`) and of a session log's header. 2: an
#: assessment's findings are the assessed turn's own (earlier turns' in `history`), with the
#: turn's `verdict` and `card` (issue 46). A line without the field was written by version 1.
SCHEMA_VERSION = 2

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


# --- the wire form: one pydantic model per line type, told apart by `type` ----------------------

#: Description of every line's `time`.
_TIME = "seconds since the epoch when the event happened"
_VERSION = "version of the line's schema (absent in version 1 lines)"


class _Line(BaseModel):
    """One JSON line. Reading ignores fields it does not know (a newer guardian's log still
    reads) and fills in an absent `time`; the schema, written for what guardian prints, requires
    every field and allows no others (`json_schema_serialization_defaults_required`)."""

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        coerce_numbers_to_str=True,
        json_schema_serialization_defaults_required=True,
        json_schema_extra={"additionalProperties": False},
    )


class TurnEvent(_Line):
    type: Literal["turn"] = "turn"
    schema_version: int = Field(default=1, ge=1, description=_VERSION)
    conversation_id: str
    time: float = Field(default=0.0, description=_TIME)
    turn: Turn


class AssessmentEvent(_Line):
    type: Literal["assessment"] = "assessment"
    schema_version: int = Field(default=1, ge=1, description=_VERSION)
    conversation_id: str
    time: float = Field(default=0.0, description=_TIME)
    turn: int
    risk: float = Field(ge=0, le=1)
    new_findings: int = Field(default=0, ge=0)
    assessment: Assessment


class FindingEvent(_Line):
    type: Literal["finding"] = "finding"
    schema_version: int = Field(default=1, ge=1, description=_VERSION)
    conversation_id: str
    time: float = Field(default=0.0, description=_TIME)
    turn: int
    finding: Finding


class ErrorEvent(_Line):
    type: Literal["error"] = "error"
    schema_version: int = Field(default=1, ge=1, description=_VERSION)
    conversation_id: str | None = None
    time: float = Field(default=0.0, description=_TIME)
    turn: int | None = None
    kind: ErrorKind = "error"
    detector: str | None = None
    line: int | None = None
    message: str = ""


EventLine = Annotated[TurnEvent | AssessmentEvent | FindingEvent | ErrorEvent, Field(discriminator="type")]

_LINES: TypeAdapter[TurnEvent | AssessmentEvent | FindingEvent | ErrorEvent] = TypeAdapter(EventLine)


def _line(event: Event) -> TurnEvent | AssessmentEvent | FindingEvent | ErrorEvent:
    """The wire model of an event. `model_construct`: the event's parts are already validated
    models, and a plug-in's NaN risk must still print (as null), not fail validation."""
    if isinstance(event, TurnAdded):
        return TurnEvent.model_construct(
            schema_version=SCHEMA_VERSION, conversation_id=event.conversation_id, time=event.time, turn=event.turn
        )
    if isinstance(event, AssessmentReady):
        return AssessmentEvent.model_construct(
            schema_version=SCHEMA_VERSION,
            conversation_id=event.conversation_id,
            time=event.time,
            turn=event.assessment.turn,
            risk=round(event.risk, 6),
            new_findings=event.new_findings,
            assessment=event.assessment,
        )
    if isinstance(event, FindingRaised):
        return FindingEvent.model_construct(
            schema_version=SCHEMA_VERSION, conversation_id=event.conversation_id, time=event.time, turn=event.turn,
            finding=event.finding,
        )
    return ErrorEvent.model_construct(
        schema_version=SCHEMA_VERSION,
        conversation_id=event.conversation_id,
        time=event.time,
        turn=event.turn,
        kind=event.kind,
        detector=event.detector,
        line=event.line,
        message=event.message,
    )


def _event(line: TurnEvent | AssessmentEvent | FindingEvent | ErrorEvent) -> Event:
    if isinstance(line, TurnEvent):
        return TurnAdded(conversation_id=line.conversation_id, turn=line.turn, time=line.time)
    if isinstance(line, AssessmentEvent):
        return AssessmentReady(
            conversation_id=line.conversation_id,
            assessment=line.assessment,
            risk=line.risk,
            new_findings=line.new_findings,
            time=line.time,
        )
    if isinstance(line, FindingEvent):
        return FindingRaised(conversation_id=line.conversation_id, turn=line.turn, finding=line.finding, time=line.time)
    return ErrorRaised(
        conversation_id=line.conversation_id,
        turn=line.turn,
        kind=line.kind,
        message=line.message,
        detector=line.detector,
        line=line.line,
        time=line.time,
    )


def to_dict(event: Event) -> dict[str, Any]:
    """The JSON-ready form, with a `type` field: turn | assessment | finding | error.

    Numbers that JSON cannot hold (NaN, ±Infinity, e.g. from a plug-in detector) become null:
    Python's json writes them as `NaN`, which no JSON reader accepts.
    """
    return _finite(_LINES.dump_python(_line(event), mode="json"))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


_TYPES = ("turn", "assessment", "finding", "error")


def from_dict(data: dict[str, Any], *, source: str = "<events>", line: int | None = None) -> Event:
    """Rebuild an event from its dictionary; anything malformed is an InputError naming the line."""
    kind = data.get("type") if isinstance(data, dict) else None
    if kind not in _TYPES:
        raise InputError(f"unknown event type {kind!r}", source=source, line=line)
    try:
        return _event(_LINES.validate_python(data))
    except ValidationError as exc:
        raise InputError(f"malformed {kind} event ({_reason(exc)})", source=source, line=line) from None


def _reason(exc: ValidationError) -> str:
    """The first problem in words: `missing field 'risk'`, `turn: Input should be a valid integer`."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"][1:])  # [0] is the union tag
    if first["type"] == "missing":
        return f"missing field {where!r}"
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def json_schema() -> dict[str, Any]:
    """JSON Schema of one event line (committed as schema/watch-event.schema.json, checked by a
    test; `scripts/gen_schema.py` rewrites it). Generated from the wire models, in serialization
    mode: what guardian prints, every field present."""
    schema = _LINES.json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "guardian watch event",
        "description": "One line of `guardian watch --headless` output or of a session log "
        f"(schema version {SCHEMA_VERSION}).",
        **schema,
    }
