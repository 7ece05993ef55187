"""`guard(runnable)`: the middleware's policies for plain LCEL chains and runnables.

For pipelines that are not `create_agent` agents: a chain `prompt | model`, a
`RunnableWithMessageHistory`, anything whose input is a string, a message, a
list of messages or a dict holding one of those, and whose output is a string
or a message. The wrapper screens the user turn before the runnable runs and the
reply after, in the context of the thread (`thread_id` in the runnable config,
remembered in memory because a plain chain has no agent state).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import ensure_config

from guardian.agents._engine import DetectorSpec, FindingCallback, GuardianEvent, Screener, Verdict
from guardian.agents._screening import (
    DEFAULT_INPUT_BLOCK_REPLY,
    DEFAULT_NOTICE,
    DEFAULT_SAFE_REPLY,
    Direction,
    MessageTurn,
    Speakers,
    annotate,
    append_notice,
    blocked_reply,
    message_text,
    payload,
    to_turns,
)
from guardian.agents.policy import (
    DEFAULT_ERROR_REPLY,
    DEFAULT_INPUT_ERROR_REPLY,
    GuardianScreenError,
    GuardianViolation,
    OnError,
    check_options,
    decide,
    failed_screen,
)
from guardian.findings import Assessment
from guardian.telemetry import Telemetry

GuardPolicy = Literal["observe", "warn", "block", "raise"]
"""The middleware's policies less "review" (a plain runnable has no graph to pause)."""

_TEXT_KEYS = ("input", "question", "query", "text", "message")


@dataclass(frozen=True, slots=True)
class _Screened:
    verdict: Verdict
    action: str


def _input_turns(value: Any, speakers: Speakers) -> list[MessageTurn] | None:
    """The conversation carried by a runnable's input, or None when it carries none."""
    if isinstance(value, str):
        return [MessageTurn(f"in:{uuid.uuid4()}", speakers.user, value.strip())] if value.strip() else None
    if isinstance(value, PromptValue):
        value = value.to_messages()
    if isinstance(value, BaseMessage):
        value = [value]
    if isinstance(value, list) and all(isinstance(m, BaseMessage) for m in value):
        turns = to_turns(value, speakers=speakers)
        if not turns or turns[-1].speaker != speakers.user:
            return None
        return turns
    if isinstance(value, dict):
        if "messages" in value:
            return _input_turns(value["messages"], speakers)
        for key in _TEXT_KEYS:
            if isinstance(value.get(key), str):
                return _input_turns(value[key], speakers)
    return None


def _output_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, BaseMessage):
        return message_text(value) or None
    return None


class GuardedRunnable(Runnable[Any, Any]):
    """A runnable screened by guardian; build it with `guard(runnable, ...)`."""

    def __init__(
        self,
        runnable: Runnable[Any, Any],
        *,
        screener: Screener,
        policy: GuardPolicy,
        directions: frozenset[Direction],
        safe_reply: str,
        input_block_reply: str,
        on_error: OnError = "pass",
        error_reply: str = DEFAULT_ERROR_REPLY,
        input_error_reply: str = DEFAULT_INPUT_ERROR_REPLY,
        next_steps: bool = True,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.runnable = runnable
        self.screener = screener
        self.policy: GuardPolicy = policy
        self.directions = directions
        self.safe_reply = safe_reply
        self.input_block_reply = input_block_reply
        self.on_error: OnError = on_error
        self.error_reply = error_reply
        self.input_error_reply = input_error_reply
        self.next_steps = next_steps
        self.telemetry = telemetry if telemetry is not None else Telemetry()

    @property
    def InputType(self) -> Any:  # noqa: N802 - LangChain's name
        return self.runnable.InputType

    @property
    def OutputType(self) -> Any:  # noqa: N802 - LangChain's name
        return self.runnable.OutputType

    def warm_up(self) -> GuardedRunnable:
        """Load the detectors now, so the first call is not slowed (or timed out) by loading."""
        self.screener.pool.warm_up()
        return self

    def history(self, thread_id: str) -> list[MessageTurn]:
        """The turns remembered for `thread_id` (what the detectors saw as context)."""
        return self.screener.memory.turns(thread_id)

    # --- policy -----------------------------------------------------------------------------

    def _action(self, verdict: Verdict, direction: Direction) -> str:
        """The policy's action; "raise" raises here (`on_error` decides a failed screen)."""
        action = decide(verdict.assessment, flagged=verdict.flagged, policy=self.policy, on_error=self.on_error)
        if action == "raise":
            error = GuardianViolation if verdict.flagged else GuardianScreenError
            raise error(verdict.assessment, direction=direction)
        return "observed" if action == "warned" and not verdict.flagged else action

    def _screen(self, direction: Direction, thread_id: str | None, turns: list[MessageTurn]) -> Verdict:
        with self.telemetry.screen(surface="guard", direction=direction, speaker=turns[-1].speaker, text=turns[-1].text) as span:
            verdict = self.screener.screen(direction, thread_id, turns)
            span.assessed(verdict.assessment, flagged=verdict.flagged)
        return verdict

    async def _ascreen(self, direction: Direction, thread_id: str | None, turns: list[MessageTurn]) -> Verdict:
        with self.telemetry.screen(surface="guard", direction=direction, speaker=turns[-1].speaker, text=turns[-1].text) as span:
            verdict = await self.screener.ascreen(direction, thread_id, turns)
            span.assessed(verdict.assessment, flagged=verdict.flagged)
        return verdict

    def _record(self, direction: Direction, thread_id: str | None, turns: list[MessageTurn], verdict: Verdict) -> _Screened:
        action = self._action(verdict, direction)
        if verdict.flagged:
            self.screener.notify(
                GuardianEvent(direction=direction, thread_id=thread_id, assessment=verdict.assessment, action=action, text=turns[-1].text)
            )
        return _Screened(verdict, action)

    def _refusal(self, screened: _Screened) -> Any:
        verdict = screened.verdict
        data = payload(verdict.assessment, direction="input", flagged=verdict.flagged, action="blocked", notice=verdict.notice)
        reply = self.input_error_reply if failed_screen(verdict.assessment, flagged=verdict.flagged) else self.input_block_reply
        if self.runnable.OutputType is str:
            return reply
        return annotate(AIMessage(content=reply), data)

    def _finish(self, output: Any, screened: _Screened | None) -> Any:
        if screened is None:
            return output
        verdict = screened.verdict
        data = payload(verdict.assessment, direction="output", flagged=verdict.flagged, action=screened.action, notice=verdict.notice)
        if screened.action == "blocked":
            reply = self.error_reply if failed_screen(verdict.assessment, flagged=verdict.flagged) else self.safe_reply
            reply = blocked_reply(reply, next_steps=self.next_steps)
            return reply if isinstance(output, str) else annotate(AIMessage(content=reply, id=output.id), data)
        if screened.action == "warned" and verdict.notice:
            if isinstance(output, str):
                return f"{output.rstrip()}\n\n{verdict.notice}"
            output = append_notice(output, verdict.notice)
        return annotate(output, data) if isinstance(output, BaseMessage) else output

    def _thread(self, config: RunnableConfig | None) -> tuple[RunnableConfig, str | None]:
        config = ensure_config(config)
        value = config.get("configurable", {}).get("thread_id")
        return config, None if value is None else str(value)

    def _context(self, thread_id: str | None, value: Any) -> tuple[bool, list[MessageTurn]]:
        """Whether the input has a user turn, and the thread to judge it in.

        A message list with history is the thread; a single turn joins the remembered one.
        """
        turns = _input_turns(value, self.screener.speakers) or []
        return bool(turns), turns if len(turns) > 1 else self.screener.memory.context(thread_id, turns)

    def _reply_turns(self, context: list[MessageTurn], text: str) -> list[MessageTurn]:
        return [*context, MessageTurn(f"out:{uuid.uuid4()}", self.screener.speakers.assistant, text)]

    def _remember(self, thread_id: str | None, context: list[MessageTurn], output: Any) -> None:
        text = _output_text(output)
        turns = self._reply_turns(context, text) if text else context
        self.screener.memory.remember(thread_id, turns)

    # --- streaming (guardian.agents.streaming owns this block) ------------------------------

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        """The reply streams; under "block" each piece is released only once screened (see `streaming`)."""
        from guardian.agents.streaming import stream_guarded

        return stream_guarded(self, input, config, **kwargs)

    def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        from guardian.agents.streaming import astream_guarded

        return astream_guarded(self, input, config, **kwargs)

    # --- end of streaming block ---------------------------------------------------------------

    # --- running ----------------------------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config, thread_id = self._thread(config)
        has_input, context = self._context(thread_id, input)
        if has_input and "input" in self.directions:
            screened = self._record("input", thread_id, context, self._screen("input", thread_id, context))
            if screened.action == "blocked":
                refusal = self._refusal(screened)
                self._remember(thread_id, context, refusal)
                return refusal
        output = self.runnable.invoke(input, config, **kwargs)
        text = _output_text(output)
        screened_out = None
        if text and "output" in self.directions:
            reply = self._reply_turns(context, text)
            screened_out = self._record("output", thread_id, reply, self._screen("output", thread_id, reply))
        result = self._finish(output, screened_out)
        self._remember(thread_id, context, result)
        return result

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config, thread_id = self._thread(config)
        has_input, context = self._context(thread_id, input)
        if has_input and "input" in self.directions:
            verdict = await self._ascreen("input", thread_id, context)
            screened = self._record("input", thread_id, context, verdict)
            if screened.action == "blocked":
                refusal = self._refusal(screened)
                self._remember(thread_id, context, refusal)
                return refusal
        output = await self.runnable.ainvoke(input, config, **kwargs)
        text = _output_text(output)
        screened_out = None
        if text and "output" in self.directions:
            reply = self._reply_turns(context, text)
            verdict = await self._ascreen("output", thread_id, reply)
            screened_out = self._record("output", thread_id, reply, verdict)
        result = self._finish(output, screened_out)
        self._remember(thread_id, context, result)
        return result


def guard(
    runnable: Runnable[Any, Any],
    *,
    detectors: Sequence[DetectorSpec] | None = None,
    policy: GuardPolicy = "observe",
    on_error: OnError = "pass",
    directions: Sequence[Direction] = ("input", "output"),
    threshold: float | None = None,
    window: int = 10,
    on_finding: FindingCallback | Sequence[FindingCallback] | None = None,
    notice: str = DEFAULT_NOTICE,
    safe_reply: str = DEFAULT_SAFE_REPLY,
    input_block_reply: str = DEFAULT_INPUT_BLOCK_REPLY,
    error_reply: str = DEFAULT_ERROR_REPLY,
    input_error_reply: str = DEFAULT_INPUT_ERROR_REPLY,
    next_steps: bool = True,
    speakers: tuple[str, str] = ("User", "Assistant"),
    timeout_s: float | None = 5.0,
    max_threads: int = 10_000,
    telemetry: Telemetry | None = None,
) -> GuardedRunnable:
    """Wrap `runnable` so both sides of each call are screened, with the middleware's policies.

    Message outputs carry the Assessment in `response_metadata["guardian"]`; string
    outputs cannot carry metadata, so use `on_finding` to see assessments there.
    Under "block" a flagged user turn is answered without running `runnable` (a
    string when the runnable's OutputType is str, else an AIMessage), and a flagged
    reply is replaced by `safe_reply` followed by guardian's "blocked" next steps
    (`next_steps=False`: the reply alone). Under "raise" a flagged turn raises
    `GuardianViolation`; `on_error` ("pass", fail-open by default; "block"; "raise")
    decides a screen that failed. Options mean what they mean for `GuardianMiddleware`;
    "review" needs a LangGraph graph to pause, so it is the middleware's only.
    """
    check_options(policy=policy, on_error=on_error, allowed=("observe", "warn", "block", "raise"))
    unknown = set(directions) - {"input", "output"}
    if unknown:
        raise ValueError(f"directions must be 'input' and/or 'output', not {sorted(unknown)}")
    screener = Screener(
        detectors=detectors,
        threshold=threshold,
        window=window,
        speakers=Speakers(*speakers),
        notice=notice,
        on_finding=on_finding,
        timeout_s=timeout_s,
        max_threads=max_threads,
    )
    return GuardedRunnable(
        runnable,
        screener=screener,
        policy=policy,
        directions=frozenset(directions),
        safe_reply=safe_reply,
        input_block_reply=input_block_reply,
        on_error=on_error,
        error_reply=error_reply,
        input_error_reply=input_error_reply,
        next_steps=next_steps,
        telemetry=telemetry,
    )


def assessment_of(output: Any) -> Assessment | None:
    """The Assessment attached to a guarded runnable's message output, if any."""
    from guardian.agents._screening import assessment_of as _of

    return _of(output) if isinstance(output, BaseMessage) else None


__all__ = ["GuardedRunnable", "assessment_of", "guard"]
