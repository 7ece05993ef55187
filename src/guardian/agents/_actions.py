"""Acting on a verdict: the state delta and the compact record of one screened turn.

`GuardianMiddleware` finds the turn and screens it; what its policy then does to the
messages (annotate, append a notice, replace a reply, refuse a user turn, withhold a tool
result, keep a reviewer's edit) is decided here, as plain functions of the job, the
verdict and the configured replies. Kept apart so the middleware module stays the hooks
and this stays testable without a graph.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from guardian.agents import review as _review
from guardian.agents._engine import GuardianEvent, Screener, Verdict
from guardian.agents._screening import (
    METADATA_KEY,
    Direction,
    MessageTurn,
    annotate,
    append_notice,
    log,
    message_text,
    payload,
    summary,
)
from guardian.agents._state import STATE_KEY, compact
from guardian.agents.policy import failed_screen
from guardian.agents.tool_results import tool_notice, with_injection
from guardian.conversation import Turn
from guardian.findings import Assessment, DetectorError

Side = Literal["input", "output", "tool"]
"""Which turn a job screens: the user's, the model's reply, or a tool result (a third party)."""


@dataclass(frozen=True, slots=True)
class Job:
    """One turn to screen, with the thread it belongs to and the turns the detectors see."""

    direction: Side
    thread_id: str | None
    index: int
    message: BaseMessage
    context: list[MessageTurn]

    @property
    def speaker(self) -> str:
        return self.context[-1].speaker

    @property
    def screen_direction(self) -> Direction:
        """What the shared Screener is told (it knows user and assistant sides only)."""
        return "output" if self.direction == "output" else "input"


@dataclass(frozen=True, slots=True)
class Replies:
    """What replaces a turn the policy stops: a blocked reply, a refused user turn, and the
    fail-closed versions of both (a screen that failed, `on_error="block"`)."""

    safe_reply: str
    input_block_reply: str
    error_reply: str
    input_error_reply: str


def failure_verdict(job: Job, exc: BaseException) -> Verdict:
    """The screen itself failed (not one detector): a verdict that says so, for `on_error` to act on."""
    log.exception("guardian screening failed on thread %s", job.thread_id, exc_info=exc)
    error = DetectorError(detector="guardian", kind="error", message=f"{type(exc).__name__}: {exc}")
    assessment = Assessment(conversation_id=job.thread_id or "conversation", turn=max(len(job.context) - 1, 0), errors=(error,))
    return Verdict(assessment, False, None)


def tool_verdict(job: Job, verdict: Verdict) -> tuple[Verdict, list[dict[str, object]]]:
    """A tool result also flags when it gives the assistant instructions."""
    if job.direction != "tool":
        return verdict, []
    last = job.context[-1]
    turn = Turn(index=verdict.assessment.turn if verdict.assessment.turn >= 0 else len(job.context) - 1, speaker=last.speaker, text=last.text)
    assessment, injection = with_injection(verdict.assessment, turn)
    flagged = verdict.flagged or bool(injection)
    name = getattr(job.message, "name", None) or "tool"
    text = summary(assessment, direction="input") if verdict.flagged else None
    notice = tool_notice(name=name, summary=text, injection=injection, blocked=False) if flagged else None
    return Verdict(assessment, flagged, notice), injection


# --- rewriting (optional, block only) ---------------------------------------------------------


@cache
def rewrite_prompt() -> str:
    return resources.files("guardian").joinpath("prompts/rewrite_reply.txt").read_text(encoding="utf-8")


def rewrite_messages(job: Job, verdict: Verdict) -> list[BaseMessage]:
    """What the rewriting model is asked: the finding, then the flagged reply."""
    finding = summary(verdict.assessment, direction="output")
    return [
        SystemMessage(rewrite_prompt().format(finding=finding)),
        HumanMessage(message_text(job.message)),
    ]


def rewritten_turns(job: Job, reply: BaseMessage) -> list[MessageTurn] | None:
    """The thread with the rewrite in the reply's place (to screen again), or None if it said nothing."""
    text = message_text(reply)
    if not text:
        return None
    last = job.context[-1]
    return [*job.context[:-1], MessageTurn(last.key, last.speaker, text)]


def rewrite(model: BaseChatModel, job: Job, verdict: Verdict, *, screener: Screener) -> tuple[str, Verdict] | None:
    """Ask `model` once to rewrite a flagged reply; the rewrite and its own verdict, or None (safe reply)."""
    try:
        reply = model.invoke(rewrite_messages(job, verdict))
    except Exception as exc:
        log.warning("guardian rewrite failed; using the safe reply: %s", exc)
        return None
    turns = rewritten_turns(job, reply)
    if turns is None:
        return None
    try:
        return turns[-1].text, screener.screen("output", job.thread_id, turns)
    except Exception as exc:
        log.warning("guardian could not screen the rewrite; using the safe reply: %s", exc)
        return None


async def arewrite(model: BaseChatModel, job: Job, verdict: Verdict, *, screener: Screener) -> tuple[str, Verdict] | None:
    """`rewrite` for the async hooks."""
    try:
        reply = await model.ainvoke(rewrite_messages(job, verdict))
    except Exception as exc:
        log.warning("guardian rewrite failed; using the safe reply: %s", exc)
        return None
    turns = rewritten_turns(job, reply)
    if turns is None:
        return None
    try:
        return turns[-1].text, await screener.ascreen("output", job.thread_id, turns)
    except Exception as exc:
        log.warning("guardian could not screen the rewrite; using the safe reply: %s", exc)
        return None


# --- applying the policy ----------------------------------------------------------------------


def apply_action(
    job: Job,
    verdict: Verdict,
    action: str,
    injection: list[dict[str, object]],
    rewrite: tuple[str, Verdict] | None,
    reviewed: _review.Reviewed | None,
    *,
    replies: Replies,
    screener: Screener,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state delta and the compact record of one screened turn under its action."""
    failed = failed_screen(verdict.assessment, flagged=verdict.flagged)
    if reviewed is not None:
        action = {"approve": "approved", "edit": "edited", "reject": "rejected"}[reviewed.decision]
    elif action == "warned" and not verdict.flagged:
        action = "observed"
    elif action == "blocked" and rewrite is not None and not rewrite[1].flagged and job.direction == "output":
        action = "rewritten"
    data = payload(verdict.assessment, direction=cast(Direction, job.direction), flagged=verdict.flagged, action=action, notice=verdict.notice)
    if injection:
        data["injection"] = injection
    if reviewed is not None and reviewed.reason:
        data["review_reason"] = reviewed.reason
    original = message_text(job.message)
    replacement: str | None = None
    update: dict[str, Any] = {}
    extra: list[BaseMessage] = []
    if job.direction == "output":
        if action == "rewritten" and rewrite is not None:
            replacement = rewrite[0]
        elif action in ("blocked", "rejected"):
            replacement = replies.error_reply if failed and action == "blocked" else replies.safe_reply
        elif action == "edited" and reviewed is not None:
            replacement = reviewed.text
        if action in ("blocked", "rewritten", "rejected"):
            update["jump_to"] = "end"
        if rewrite is not None:
            data["rewrite_assessment"] = rewrite[1].assessment.model_dump(mode="json")
    elif job.direction == "tool":
        name = getattr(job.message, "name", None) or "tool"
        if action in ("blocked", "rejected"):
            replacement = tool_notice(name=name, summary=summary(verdict.assessment, direction="input") if verdict.flagged else None,
                                      injection=injection, blocked=True, failed=failed and action == "blocked")
        elif action == "edited" and reviewed is not None:
            replacement = reviewed.text
    elif action in ("blocked", "rejected"):
        reply = replies.input_error_reply if failed and action == "blocked" else replies.input_block_reply
        extra.append(annotate(AIMessage(content=reply, id=f"guardian-{uuid.uuid4()}"), data))
        update["jump_to"] = "end"
    if replacement is not None:
        data["original_text"] = original
        annotated = annotate(job.message.model_copy(update={"content": replacement}), data)  # same id: replaced in place
    else:
        annotated = annotate(job.message, data)
        if action == "warned" and verdict.notice and job.direction in ("output", "tool"):
            annotated = append_notice(annotated, verdict.notice)
    remember(job, replacement, extra, screener=screener)
    if verdict.flagged:
        screener.notify(
            GuardianEvent(
                direction=cast(Direction, job.direction),
                thread_id=job.thread_id,
                assessment=verdict.assessment,
                action=action,
                text=original,
                message_id=job.message.id,
            )
        )
    record = compact(verdict.assessment, direction=job.direction, flagged=verdict.flagged, action=action,
                     message_id=job.message.id, thread_id=job.thread_id,
                     speaker=job.speaker if job.direction == "tool" else None)
    if injection:
        record["injection"] = injection[:3]
    return {"messages": [annotated, *extra], STATE_KEY: [record], **update}, record


def remember(job: Job, replacement: str | None, extra: list[BaseMessage], *, screener: Screener) -> None:
    """Thread memory (callers without a checkpointer): what the user and the model actually saw."""
    if job.direction == "tool" or isinstance(job.message, ToolMessage):
        return  # tool output is data the model read, not a turn of the conversation
    remembered = list(job.context)
    if replacement is not None:
        remembered[-1] = MessageTurn(remembered[-1].key, remembered[-1].speaker, replacement)
    for message in extra:
        remembered.append(MessageTurn(str(message.id), screener.speakers.assistant, message_text(message)))
    screener.memory.remember(job.thread_id, remembered)


def combine(updates: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One state delta from the deferred user-side result and the reply's, in that order."""
    if not updates:
        return None
    out: dict[str, Any] = {STATE_KEY: []}
    for update in updates:
        for key, value in update.items():
            if key in ("messages", STATE_KEY):
                out.setdefault(key, []).extend(value)
            else:
                out[key] = value
    return out


def assessments(state: dict[str, Any], *, direction: Side | None = None) -> list[dict[str, Any]]:
    """The guardian records of an agent result/state, optionally for one direction.

    State keeps compact records; each is returned joined with what its message carries
    (`response_metadata["guardian"]`: the full `assessment`, `notice`, `original_text`,
    `rewrite_assessment`) while that message is still in `state["messages"]`.
    """
    by_id: dict[str, dict[str, Any]] = {}
    for message in state.get("messages") or []:
        data = message.response_metadata.get(METADATA_KEY) if isinstance(message, BaseMessage) else None
        if message.id and isinstance(data, dict) and str(message.id) not in by_id:
            by_id[str(message.id)] = data
    out: list[dict[str, Any]] = []
    for record in state.get(STATE_KEY) or []:
        if direction is not None and record.get("direction") != direction:
            continue
        data = by_id.get(str(record.get("message_id")), {})
        out.append({**data, **record})
    return out
