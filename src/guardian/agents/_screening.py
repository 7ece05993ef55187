"""Pure screening functions shared by the middleware, `guard()` and the callback handler.

LangChain messages go in, a guardian `Conversation` is built from them, detectors
assess its latest turn, and the result is a plain `Assessment`. Nothing here holds
state, takes a lock or knows about LangGraph, so every step can be tested with a
list of messages and a detector, the way LangChain tests `_redaction.py` apart from
`PIIMiddleware`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from guardian.agents.types import Direction
from guardian.agents.types import Policy as Policy  # re-exported for the integration modules
from guardian.conversation import Conversation
from guardian.detectors.base import Detector
from guardian.findings import Assessment
from guardian.plain_words import plain_words
from guardian.runner import Runner

log = logging.getLogger("guardian.agents")


METADATA_KEY = "guardian"
"""Key under `message.response_metadata` that carries the assessment of that message.

`response_metadata` rather than `additional_kwargs`: provider integrations (e.g.
ChatOpenAI) read `additional_kwargs` when they serialise the history for the next
call, while `response_metadata` stays on our side and survives checkpointing."""

DEFAULT_NOTICE = "[guardian] {summary}"
DEFAULT_SAFE_REPLY = (
    "I'm sorry, I can't send that reply: it was flagged as possibly manipulative. "
    "Let me know how I can help you in a more straightforward way."
)
DEFAULT_INPUT_BLOCK_REPLY = (
    "I can't continue with this request: the message was flagged as an attempt at "
    "manipulation. Please rephrase what you need plainly."
)


def blocked_reply(reply: str, *, next_steps: bool = True) -> str:
    """What the user sees in place of a blocked reply: `reply` (the safe or error reply), then
    the "blocked" next steps of `resources/plain_words.toml`, one per line (issue 46).

    Why: the replacement alone left the user guessing what happened to their answer and what
    to do now; the steps say the reply was held back and how to go on. They are package data,
    edited with the other plain words, not a string in each integration. `next_steps=False`
    (an application that explains blocks its own way) gives `reply` unchanged.
    """
    steps = plain_words().next_steps("blocked") if next_steps else ()
    if not steps:
        return reply
    return "\n".join([f"{reply.rstrip()}\n", *(f"- {step}" for step in steps)])


@dataclass(frozen=True, slots=True)
class Speakers:
    """Speaker names the detectors see for the two sides of a chatbot conversation."""

    user: str = "User"
    assistant: str = "Assistant"


@dataclass(frozen=True, slots=True)
class MessageTurn:
    """One message that becomes a conversation turn; `key` identifies it across calls."""

    key: str
    speaker: str
    text: str


def message_text(message: BaseMessage) -> str:
    """The visible text of a message (content blocks joined; tool calls ignored)."""
    return message.text.strip()


def message_key(message: BaseMessage, position: int) -> str:
    """A stable identity: the message id when present (always, inside an agent)."""
    if message.id:
        return str(message.id)
    return f"{message.type}:{position}:{hash(message_text(message)) & 0xFFFFFFFF:08x}"


def to_turns(messages: Sequence[BaseMessage], *, speakers: Speakers) -> list[MessageTurn]:
    """Human and AI messages with text, in order; system and tool messages are not turns.

    Tool output is data the model read, not something either party said; an AI
    message that only calls tools says nothing to the user.
    """
    out: list[MessageTurn] = []
    for position, message in enumerate(messages):
        if isinstance(message, HumanMessage):
            speaker = speakers.user
        elif isinstance(message, AIMessage):
            speaker = speakers.assistant
        else:
            continue
        text = message_text(message)
        if text:
            out.append(MessageTurn(message_key(message, position), speaker, text))
    return out


def to_conversation(turns: Sequence[MessageTurn], *, conversation_id: str) -> Conversation:
    return Conversation.from_pairs(((t.speaker, t.text) for t in turns), id=conversation_id, source="langchain")


def latest_index(messages: Sequence[BaseMessage], kind: type[BaseMessage]) -> int | None:
    """Position of the latest message of `kind` (HumanMessage or AIMessage), or None."""
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], kind):
            return i
    return None


def assess(detectors: Sequence[Detector], window: Conversation) -> Assessment:
    """All detectors on `window`, merged, by the one runner (`guardian.runner`): failures are
    recorded in `errors`, ungrounded quotes dropped, and a window the models cannot read
    (not English) is not given to the detectors."""
    return Runner(detectors).assess(window)


def findings_on_turn(assessment: Assessment) -> list[Any]:
    """Findings about the assessed turn itself (context turns may be quoted too)."""
    return [
        f
        for f in assessment.findings
        if not f.evidence or any(e.turn == assessment.turn for e in f.evidence)
    ]


def is_flagged(assessment: Assessment, *, threshold: float | None = None, speaker: str | None = None) -> bool:
    """Whether the assessed turn counts as manipulative.

    A calibrated probability decides when any detector gave one (with `threshold`
    overriding the detectors' own decision). Pattern-only detectors such as the key
    phrases give no probability; then a finding on the turn scoring at least
    `threshold` (0.5 by default) flags it. When `speaker` (who said the screened
    turn) is given and the detectors name a different manipulator, the turn is not
    flagged: a user who was manipulative two turns ago must not get the bot's next
    honest reply blocked, and vice versa. Likewise, when the detectors quote
    evidence but none of it is in the screened turn, the turn is not flagged: the
    quoted words were judged when they were said, and a window that still holds
    them must not flag every later turn.
    """
    if speaker is not None and assessment.manipulator is not None and assessment.manipulator != speaker:
        return False
    quoted = [e for f in (*assessment.findings, *assessment.history) for e in f.evidence]
    if quoted and all(e.turn != assessment.turn for e in quoted):
        return False
    if assessment.probability is not None:
        if threshold is not None:
            return assessment.probability >= threshold
        return assessment.decision
    if assessment.decision:
        return True
    floor = 0.5 if threshold is None else threshold
    return any(f.score >= floor for f in findings_on_turn(assessment))


def summary(assessment: Assessment, *, direction: Direction) -> str:
    """One short sentence an application can show: what, how sure, and the words."""
    who = "this reply" if direction == "output" else "this message"
    labels: list[str] = []
    if assessment.techniques:
        ranked = sorted(assessment.techniques.items(), key=lambda kv: -kv[1])
        labels = [t.value for t, _ in ranked[:2]]
    else:
        labels = list(dict.fromkeys(f.label.replace("_", " ") for f in findings_on_turn(assessment)))[:2]
    what = f" ({', '.join(labels)})" if labels else ""
    sure = f", {assessment.probability:.0%} likely" if assessment.probability is not None else ""
    quote = next((e.quote for f in findings_on_turn(assessment) for e in f.evidence), None)
    said = f": “{_clip(quote)}”" if quote else ""
    return f"{who} may be manipulative{what}{sure}{said}"


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def payload(assessment: Assessment, *, direction: Direction, flagged: bool, action: str, notice: str | None) -> dict[str, Any]:
    """What is attached to a message and recorded in agent state (JSON-safe)."""
    return {
        "direction": direction,
        "flagged": flagged,
        "action": action,
        "notice": notice,
        "assessment": assessment.model_dump(mode="json"),
    }


def annotate(message: BaseMessage, data: dict[str, Any]) -> BaseMessage:
    """A copy of `message` with `data` under `response_metadata["guardian"]`."""
    metadata = {**message.response_metadata, METADATA_KEY: data}
    return message.model_copy(update={"response_metadata": metadata})


def append_notice(message: BaseMessage, notice: str) -> BaseMessage:
    """A copy of `message` whose visible text ends with `notice` on its own paragraph."""
    content = message.content
    new_content: str | list[str | dict[Any, Any]]
    if isinstance(content, str):
        new_content = f"{content.rstrip()}\n\n{notice}" if content.strip() else notice
    else:
        new_content = [*content, {"type": "text", "text": f"\n\n{notice}"}]
    return message.model_copy(update={"content": new_content})


def assessment_of(message: BaseMessage) -> Assessment | None:
    """The Assessment guardian attached to `message`, if any."""
    data = message.response_metadata.get(METADATA_KEY)
    if not isinstance(data, dict) or "assessment" not in data:
        return None
    return Assessment.model_validate(data["assessment"])
