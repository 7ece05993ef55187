"""What `GuardianMiddleware` keeps in agent state: one compact record per screened turn, capped.

Why compact and capped: the agent state is checkpointed with the thread on every step,
so a record that held the whole Assessment (findings, intents, every score) twice -
once on the message, once in state - made a long thread's checkpoint grow without
bound. The full Assessment stays on the screened message
(`response_metadata["guardian"]`); state keeps what an audit or a dashboard reads -
decision, action, probability, techniques, evidence spans - and only the latest
`max_state_records` of them.

No `from __future__ import annotations` here: LangGraph reads the reducer out of the
state schema's annotations at run time, and `state_schema(cap)` builds one per cap.
"""

from functools import cache
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware.types import AgentState, OmitFromInput

from guardian.findings import Assessment
from guardian.telemetry import decision_of, labels_of

STATE_KEY = "guardian"
DEFAULT_MAX_STATE_RECORDS = 50
MAX_EVIDENCE_PER_RECORD = 3


class CappedRecords:
    """The state reducer: append the new records, keep the latest `cap` (None: keep all)."""

    def __init__(self, cap: int | None) -> None:
        if cap is not None and cap < 0:
            raise ValueError(f"max_state_records must be 0 or more, not {cap}")
        self.cap = cap
        self.__name__ = f"capped_records_{cap}"  # LangGraph compares reducers by name and identity

    def __call__(self, left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        merged = [*(left or []), *(right or [])]
        if self.cap is None:
            return merged
        return merged[-self.cap :] if self.cap else []

    def __repr__(self) -> str:
        return f"CappedRecords({self.cap})"


_DEFAULT_REDUCER = CappedRecords(DEFAULT_MAX_STATE_RECORDS)


class GuardianState(AgentState[Any]):
    """Agent state with guardian's audit trail: the latest compact records, one per screened turn."""

    guardian: NotRequired[Annotated[list[dict[str, Any]], OmitFromInput, _DEFAULT_REDUCER]]


@cache
def state_schema(cap: int | None) -> type[AgentState[Any]]:
    """The state schema whose `guardian` channel keeps `cap` records (GuardianState for the default)."""
    if cap == DEFAULT_MAX_STATE_RECORDS:
        return GuardianState
    reducer = CappedRecords(cap)

    class CappedGuardianState(AgentState[Any]):
        guardian: NotRequired[Annotated[list[dict[str, Any]], OmitFromInput, reducer]]

    CappedGuardianState.__doc__ = f"GuardianState keeping {cap} records."
    return CappedGuardianState


def compact(
    assessment: Assessment,
    *,
    direction: str,
    flagged: bool,
    action: str,
    message_id: str | None,
    thread_id: str | None,
    speaker: str | None = None,
) -> dict[str, Any]:
    """The state record of one screened turn (JSON-safe, a few hundred bytes)."""
    evidence = [
        {"turn": e.turn, "quote": e.quote, "start": e.start, "end": e.end}
        for f in assessment.findings
        for e in f.evidence
        if e.turn == assessment.turn
    ]
    record: dict[str, Any] = {
        "direction": direction,
        "decision": decision_of(assessment, flagged=flagged),
        "flagged": flagged,
        "action": action,
        "probability": assessment.probability,
        "techniques": labels_of(assessment) if flagged else [],
        "evidence": evidence[:MAX_EVIDENCE_PER_RECORD],
        "message_id": message_id,
        "thread_id": thread_id,
    }
    if speaker is not None:
        record["speaker"] = speaker
    if assessment.errors:
        record["errors"] = [f"{e.detector} ({e.kind})" for e in assessment.errors]
    if assessment.not_assessed:
        record["not_assessed"] = assessment.not_assessed
    return record
