"""Request and response bodies of the service (they make the OpenAPI document at /docs).

Responses reuse the shapes the rest of guardian already writes: a turn's answer is the
`assessment` event of `guardian watch --headless` (schema/watch-event.schema.json) plus the
conversation's per-speaker `summary`, a screened conversation is the `guardian analyze
--format json` report (which carries its summary already).

Versioned by `api_version` (`API_VERSION`); a new version only adds fields, so a client written
for an older one reads a newer answer unchanged, and an answer stored by an older service (no
`api_version`, no `summary`) still reads as version 1.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from guardian.conversation import Turn
from guardian.findings import Assessment
from guardian.summary import ConversationSummary

#: Version of the turn and conversation answers. 1: the watch assessment event as it is;
#: 2: plus `api_version` and the conversation's per-speaker `summary` (issue 46).
API_VERSION = 2
_API_VERSION = "version of the service's answer (absent, and read as 1, in answers stored before version 2)"
_SUMMARY = ("per speaker: flagged turns, tactics, since which turn, and the conversation's risk now "
            "(`guardian.summary`; absent before api_version 2)")

#: Conversation and call ids: what fits in a URL path, a Redis key and a log line unchanged.
ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
_ID = re.compile(ID_PATTERN)


def valid_id(value: str) -> bool:
    return bool(_ID.fullmatch(value))


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TurnIn(_Body):
    """One turn said in a conversation."""

    speaker: str = Field(min_length=1, max_length=200, examples=["Daniel"])
    text: str = Field(min_length=1, examples=["I never said that. You're overreacting, as usual."])
    start: float | None = Field(default=None, ge=0.0, description="seconds into the call (audio)")
    end: float | None = Field(default=None, ge=0.0)


class StreamTurnIn(TurnIn):
    """A turn pushed over the events WebSocket; `idempotency_key` plays the HTTP header's part."""

    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)


class AssessmentEvent(BaseModel):
    """A turn's answer: the `assessment` event of `guardian watch --headless` (the verdict after
    one turn) and the conversation's summary after it."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["assessment"] = "assessment"
    schema_version: int = Field(default=1, ge=1, description="version of the watch event line it is")
    api_version: int = Field(default=1, ge=1, description=_API_VERSION)
    conversation_id: str
    time: float
    turn: int
    risk: float = Field(ge=0.0, le=1.0, description="the conversation's running risk after this turn")
    new_findings: int = Field(ge=0)
    assessment: Assessment
    summary: ConversationSummary | None = Field(default=None, description=_SUMMARY)


class ConversationOut(BaseModel):
    """A stored conversation: its turns, the latest verdict and the summary of them all."""

    model_config = ConfigDict(extra="forbid")

    api_version: int = Field(default=1, ge=1, description=_API_VERSION)
    id: str
    turns: list[Turn]
    latest: AssessmentEvent | None
    risk: float
    summary: ConversationSummary | None = Field(default=None, description=_SUMMARY)


class ScreenIn(_Body):
    """A whole conversation screened at once; nothing is stored."""

    id: str = Field(default="screen", pattern=ID_PATTERN)
    turns: list[TurnIn] = Field(min_length=1)


class ErrorBody(BaseModel):
    """Every error answer: one plain sentence and a stable code."""

    error: str = Field(description="stable code, e.g. unauthorized, too_large, invalid, rate_limited")
    message: str = Field(description="one plain sentence saying what to change")
    detail: Any | None = None


class Health(BaseModel):
    status: Literal["ok", "starting", "failed"]
    detectors: list[str] = Field(default_factory=list)
    message: str | None = None
