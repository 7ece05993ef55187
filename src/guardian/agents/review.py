"""`policy="review"`: a person decides about a flagged turn, in HumanInTheLoopMiddleware's shape.

Why that shape: UIs built for LangChain's `HumanInTheLoopMiddleware` (Agent Chat UI,
LangGraph Studio, in-house ones) already render an interrupt whose value is a
`HITLRequest` - `action_requests` (name, args, description) and `review_configs`
(action_name, allowed_decisions) - and answer with `Command(resume={"decisions": [...]})`.
A flagged turn is offered as one action named `guardian_review`; its args carry what
the reviewer needs: the text, the tactic, the quoted evidence.

Decisions:
- `{"type": "approve"}`: the turn goes on as it was (a false alarm, or accepted).
- `{"type": "edit", "edited_action": {"name": "guardian_review", "args": {"text": ...}}}`:
  a reply or tool result is replaced by the reviewer's text (never a user's own words:
  a user turn may be approved or rejected only).
- `{"type": "reject", "message": "optional reason"}`: what `block` does (the safe reply,
  the refusal, the withheld tool result); the reason is recorded.

The pause is a LangGraph `interrupt()`, so the agent needs a checkpointer; on resume
the hook runs again and gets the decision back from `interrupt()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from langchain.agents.middleware.human_in_the_loop import ActionRequest, HITLRequest, ReviewConfig

REVIEW_ACTION = "guardian_review"

ReviewDecision = Literal["approve", "edit", "reject"]

_WHAT = {"input": "user message", "output": "reply", "tool": "tool result"}


@dataclass(frozen=True, slots=True)
class Reviewed:
    """A reviewer's answer about one flagged turn."""

    decision: ReviewDecision
    text: str | None = None  # edit: the replacement text
    reason: str | None = None  # reject: why, when given


def allowed_decisions(direction: str) -> list[ReviewDecision]:
    """A user's own words are never rewritten: their turn is approved or rejected."""
    return ["approve", "reject"] if direction == "input" else ["approve", "edit", "reject"]


def review_request(*, direction: str, text: str, summary: str, record: dict[str, Any], speaker: str | None = None) -> HITLRequest:
    """The interrupt value: one `guardian_review` action, as HumanInTheLoopMiddleware builds them."""
    what = _WHAT.get(direction, direction)
    args: dict[str, Any] = {
        "direction": direction,
        "text": text,
        "summary": summary,
        "techniques": list(record.get("techniques", [])),
        "probability": record.get("probability"),
        "evidence": list(record.get("evidence", [])),
        "message_id": record.get("message_id"),
    }
    if speaker is not None:
        args["speaker"] = speaker
    if record.get("injection"):
        args["injection"] = list(record["injection"])
    choices = allowed_decisions(direction)
    verbs = "approve to let it through, edit to replace it, reject to block it" if "edit" in choices else "approve to let it through, reject to block it"
    description = f"guardian flagged this {what}: {summary}\n\nReview it: {verbs}."
    return HITLRequest(
        action_requests=[ActionRequest(name=REVIEW_ACTION, args=args, description=description)],
        review_configs=[ReviewConfig(action_name=REVIEW_ACTION, allowed_decisions=list(choices))],
    )


def read_decision(response: Any, *, direction: str) -> Reviewed:
    """The reviewer's answer (`{"decisions": [one decision]}`), checked; a bad one is one plain sentence."""
    decisions = response.get("decisions") if isinstance(response, dict) else None
    if not isinstance(decisions, list) or len(decisions) != 1 or not isinstance(decisions[0], dict):
        raise ValueError('resume a guardian review with {"decisions": [one decision]}, e.g. {"decisions": [{"type": "approve"}]}')
    decision = decisions[0]
    kind = decision.get("type")
    choices = allowed_decisions(direction)
    if kind not in choices:
        raise ValueError(f"a guardian review of a {_WHAT.get(direction, direction)} takes one of {choices}, not {kind!r}")
    if kind == "edit":
        action = decision.get("edited_action")
        args = action.get("args") if isinstance(action, dict) else None
        text = args.get("text") if isinstance(args, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ValueError('an edit needs the new text: {"type": "edit", "edited_action": {"name": "guardian_review", "args": {"text": "..."}}}')
        return Reviewed("edit", text=text)
    if kind == "reject":
        reason = decision.get("message")
        return Reviewed("reject", reason=reason if isinstance(reason, str) and reason else None)
    return Reviewed("approve")


__all__ = ["REVIEW_ACTION", "ReviewDecision", "Reviewed", "allowed_decisions", "read_decision", "review_request"]
