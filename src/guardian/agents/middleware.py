"""`GuardianMiddleware`: manipulation screening for LangChain 1.x `create_agent`.

A thin `AgentMiddleware` in the style of LangChain's own `PIIMiddleware`: the
hooks find the turn to screen, ask the shared `Screener` (pure detection lives in
`_screening`), and return a state delta or `None`.

- `before_model` screens the latest human turn in the context of the thread (a
  user socially engineering the bot); `after_model` screens the model's reply
  before the user sees it (a bot manipulating its user).
- With `apply_to_tool_results=True`, `before_model` also screens the tool results
  the model is about to read, each as a third party's turn (`tool:<name>`), and
  reports instructions injected into them (`agents/tool_results.py`).
- Every screened message carries its full Assessment under
  `message.response_metadata["guardian"]` (JSON-safe `model_dump`); the agent state
  keeps one compact record per screened turn (`agents/_state.py`), the latest
  `max_state_records` of them, so a checkpointed thread stays small.
- `policy="observe"` only annotates and calls `on_finding`; `"warn"` also appends a
  short notice to a flagged reply (or tool result); `"block"` replaces a flagged
  reply with a safe message (or, with `rewrite_with=`, one rewrite that must pass
  the screen again) and ends the turn with `jump_to: "end"`; a flagged user message
  is answered with a refusal and the model is not called; a flagged tool result is
  replaced by a notice that says it was withheld and why. `"review"` pauses the
  graph for a person (`agents/review.py`); `"raise"` raises `GuardianViolation`.
- A detector that fails or hangs never breaks the agent by default
  (`on_error="pass"`, fail-open): the message passes and the failure is recorded in
  the Assessment's `errors`. `on_error="block"` fails closed, `"raise"` raises
  `GuardianScreenError` (`agents/policy.py`).
- Every screen is a `guardian.screen` OpenTelemetry span and counts in the metrics
  (`guardian.telemetry`); when the run has callbacks (LangSmith tracing), each
  verdict is also a small child run named `guardian` with the verdict as metadata
  and tags (`agents/tracing.py`).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal, cast

from langchain.agents.middleware.types import AgentMiddleware, hook_config
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from guardian.agents import review as _review
from guardian.agents._engine import DetectorSpec, FindingCallback, GuardianEvent, Screener, Verdict
from guardian.agents._screening import (
    DEFAULT_INPUT_BLOCK_REPLY,
    DEFAULT_NOTICE,
    DEFAULT_SAFE_REPLY,
    METADATA_KEY,
    Direction,
    MessageTurn,
    Speakers,
    annotate,
    append_notice,
    latest_index,
    log,
    message_text,
    payload,
    summary,
    to_turns,
)
from guardian.agents._state import (
    DEFAULT_MAX_STATE_RECORDS,
    STATE_KEY,
    GuardianState,
    compact,
    state_schema,
)
from guardian.agents.policy import (
    DEFAULT_ERROR_REPLY,
    DEFAULT_INPUT_ERROR_REPLY,
    AgentPolicy,
    GuardianScreenError,
    GuardianViolation,
    OnError,
    check_options,
    decide,
    failed_screen,
)
from guardian.agents.tool_results import pending_tool_results, tool_notice, with_injection
from guardian.agents.tracing import atrace_verdict, trace_verdict
from guardian.conversation import Turn
from guardian.findings import Assessment, DetectorError
from guardian.telemetry import Telemetry

Side = Literal["input", "output", "tool"]
"""Which turn a job screens: the user's, the model's reply, or a tool result (a third party)."""


@dataclass(frozen=True, slots=True)
class _Job:
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


def thread_id_of(runtime: Runtime[Any] | None) -> str | None:
    """`thread_id` from the runnable config (set with or without a checkpointer)."""
    from langgraph.config import get_config

    try:
        value = get_config().get("configurable", {}).get("thread_id")
    except RuntimeError:  # called outside a graph run (hooks tested directly)
        value = None
    if value is None and runtime is not None:
        info = getattr(runtime, "execution_info", None)
        value = getattr(info, "thread_id", None)
    return None if value is None else str(value)


@cache
def rewrite_prompt() -> str:
    return resources.files("guardian").joinpath("prompts/rewrite_reply.txt").read_text(encoding="utf-8")


class GuardianMiddleware(AgentMiddleware[GuardianState, Any, Any]):
    """Screen both sides of an agent conversation for mental manipulation.

    Example:
        ```python
        from langchain.agents import create_agent
        from guardian.agents import GuardianMiddleware

        agent = create_agent(model, tools, middleware=[GuardianMiddleware(policy="block")])
        ```

    Review by a person (needs a checkpointer; the interrupt has HumanInTheLoopMiddleware's shape):
        ```python
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.types import Command

        agent = create_agent(model, tools, middleware=[GuardianMiddleware(policy="review")],
                             checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t1"}}
        result = agent.invoke({"messages": [("user", "Should I sign?")]}, config)
        if "__interrupt__" in result:  # a flagged reply waits; its text and evidence are in the request
            request = result["__interrupt__"][0].value  # {"action_requests": [...], "review_configs": [...]}
            result = agent.invoke(Command(resume={"decisions": [{"type": "reject"}]}), config)
        ```
    """

    state_schema = GuardianState

    def __init__(
        self,
        *,
        detectors: Sequence[DetectorSpec] | None = None,
        policy: AgentPolicy = "observe",
        on_error: OnError = "pass",
        apply_to_input: bool | None = None,
        apply_to_output: bool | None = None,
        apply_to_tool_results: bool = False,
        directions: Sequence[Direction] | None = None,
        threshold: float | None = None,
        window: int = 10,
        on_finding: FindingCallback | Sequence[FindingCallback] | None = None,
        notice: str = DEFAULT_NOTICE,
        safe_reply: str = DEFAULT_SAFE_REPLY,
        input_block_reply: str = DEFAULT_INPUT_BLOCK_REPLY,
        error_reply: str = DEFAULT_ERROR_REPLY,
        input_error_reply: str = DEFAULT_INPUT_ERROR_REPLY,
        rewrite_with: BaseChatModel | None = None,
        speakers: tuple[str, str] = ("User", "Assistant"),
        timeout_s: float | None = 5.0,
        max_threads: int = 10_000,
        concurrent_input: bool = True,
        max_state_records: int | None = DEFAULT_MAX_STATE_RECORDS,
        telemetry: Telemetry | None = None,
        trace_verdicts: bool = True,
        name: str | None = None,
    ) -> None:
        """Configure the screen (all options keyword-only).

        Args:
            detectors: registered detector names or Detector instances; default the
                local manipulation model when installed, else the key phrases.
            policy: "observe" (annotate), "warn" (annotate and append a notice to a
                flagged reply or tool result), "block" (replace a flagged reply and end
                the turn; refuse a flagged user turn; withhold a flagged tool result),
                "review" (pause the graph with `interrupt()` for a person to approve, edit
                or reject; needs a checkpointer), or "raise" (raise `GuardianViolation`
                carrying the Assessment: LangChain's `exit_behavior="error"`).
            on_error: what a screen that failed does - a detector raised, timed out or
                could not load, and nothing flagged: "pass" (fail-open, the default: the
                turn goes on and the failure is recorded), "block" (fail-closed:
                `error_reply` / `input_error_reply` / a withheld tool result), or "raise"
                (`GuardianScreenError` carrying the Assessment).
            apply_to_input: screen the latest user turn before the model (default on).
            apply_to_output: screen the model's reply before the user sees it (default on).
            apply_to_tool_results: screen tool results before the model reads them, as a
                third party's turn (`tool:<name>`); instructions injected into them are
                reported as an `injected_instructions` finding (default off).
            directions: the older spelling of apply_to_input/apply_to_output:
                ("input", "output") or a part of it; give one spelling, not both.
            threshold: manipulation probability that flags a turn; default each
                detector's own decision (see `_screening.is_flagged`).
            window: how many turns of the thread the detectors see.
            on_finding: called with a `GuardianEvent` for every flagged turn.
            notice: template of the warn notice; `{summary}` names tactic and quote.
            safe_reply: what replaces a blocked model reply.
            input_block_reply: the answer to a blocked user message.
            error_reply / input_error_reply: what `on_error="block"` says instead of a reply
                or an answer that could not be checked.
            rewrite_with: under "block", ask this model once to rewrite a flagged reply;
                the rewrite is screened again and used only if it passes.
            speakers: (user, assistant) names the detectors see and quote.
            timeout_s: per-detector time limit; a detector that misses it is recorded as
                a timeout and the message passes (None: wait, and run in the caller's thread).
            max_threads: threads remembered for callers without a checkpointer.
            concurrent_input: under "observe" and "warn" (which never stop a user turn),
                screen the user turn while the model runs; its result is attached
                in `after_model`. Off, or under "block", "review", "raise" or an
                `on_error` other than "pass", `before_model` waits for it.
            max_state_records: how many compact records `state["guardian"]` keeps (the
                latest; None keeps all). The full Assessment is on each message.
            telemetry: where spans and metrics go; default `Telemetry()` (the global
                OpenTelemetry providers, a no-op until the application sets an SDK, and
                Prometheus' default registry). The screened text is never on a span
                unless `Telemetry(trace_text=True)`.
            trace_verdicts: when the run has callbacks (e.g. LangSmith tracing), record
                each verdict as a child run named "guardian" with metadata and tags.
            name: node name, needed only to add two guardian middlewares to one agent.
        """
        super().__init__()
        check_options(policy=policy, on_error=on_error)
        self.policy: AgentPolicy = policy
        self.on_error: OnError = on_error
        self.directions = _directions(directions, apply_to_input, apply_to_output)
        self.apply_to_input = "input" in self.directions
        self.apply_to_output = "output" in self.directions
        self.apply_to_tool_results = apply_to_tool_results
        self.state_schema = cast("type[GuardianState]", state_schema(max_state_records))
        self.max_state_records = max_state_records
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self.trace_verdicts = trace_verdicts
        self.safe_reply = safe_reply
        self.input_block_reply = input_block_reply
        self.error_reply = error_reply
        self.input_error_reply = input_error_reply
        self.rewrite_with = rewrite_with
        self._reviews: OrderedDict[str, Verdict] = OrderedDict()
        self._name = name
        self.concurrent_input = concurrent_input
        self._pending: OrderedDict[str, tuple[_Job, Future[Verdict] | asyncio.Task[Verdict]]] = OrderedDict()
        self._pending_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self.screener = Screener(
            detectors=detectors,
            threshold=threshold,
            window=window,
            speakers=Speakers(*speakers),
            notice=notice,
            on_finding=on_finding,
            timeout_s=timeout_s,
            max_threads=max_threads,
        )

    @property
    def name(self) -> str:
        return self._name or type(self).__name__

    def warm_up(self) -> GuardianMiddleware:
        """Load the detectors now, so the first turn is not slowed (or timed out) by loading."""
        self.screener.pool.warm_up()
        return self

    # --- finding the turn -------------------------------------------------------------------

    def _job(self, direction: Direction, state: Any, runtime: Runtime[Any] | None) -> _Job | None:
        messages: list[BaseMessage] = list(state.get("messages") or [])
        if direction not in self.directions:
            if direction == "output" and messages and isinstance(messages[-1], AIMessage):
                # Not screened, but remembered: it is context for the next user turn.
                turns = to_turns(messages, speakers=self.screener.speakers)
                self.screener.memory.remember(thread_id_of(runtime), turns)
            return None
        if direction == "input":
            index = latest_index(messages, HumanMessage)
        else:
            index = len(messages) - 1 if messages and isinstance(messages[-1], AIMessage) else None
        if index is None:
            return None
        message = messages[index]
        if METADATA_KEY in message.response_metadata or not message_text(message):
            return None  # already screened (tool loop), or nothing said (tool calls only)
        thread_id = thread_id_of(runtime)
        turns = to_turns(messages[: index + 1], speakers=self.screener.speakers)
        context = self.screener.memory.context(thread_id, turns)
        return _Job(direction, thread_id, index, message, context)

    def _tool_jobs(self, state: Any, runtime: Runtime[Any] | None) -> list[_Job]:
        """Tool results the model is about to read, each the turn of its tool, after the thread so far."""
        if not self.apply_to_tool_results:
            return []
        messages: list[BaseMessage] = list(state.get("messages") or [])
        found = pending_tool_results(messages)
        if not found:
            return []
        thread_id = thread_id_of(runtime)
        before = to_turns(messages[: found[0].index], speakers=self.screener.speakers)
        context = self.screener.memory.context(thread_id, before)
        return [
            _Job("tool", thread_id, t.index, t.message, [*context, MessageTurn(str(t.message.id or f"tool:{t.index}"), t.speaker, message_text(t.message))])
            for t in found
        ]

    # --- screening (one span each) ----------------------------------------------------------

    def _failure(self, job: _Job, exc: BaseException) -> Verdict:
        """The screen itself failed (not one detector): a verdict that says so, for `on_error` to act on."""
        log.exception("guardian screening failed on thread %s", job.thread_id, exc_info=exc)
        error = DetectorError(detector="guardian", kind="error", message=f"{type(exc).__name__}: {exc}")
        assessment = Assessment(conversation_id=job.thread_id or "conversation", turn=max(len(job.context) - 1, 0), errors=(error,))
        return Verdict(assessment, False, None)

    def _tool_verdict(self, job: _Job, verdict: Verdict) -> tuple[Verdict, list[dict[str, object]]]:
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

    def _cached_review(self, job: _Job) -> Verdict | None:
        """On resume the hook runs again: the verdict the reviewer saw, not a second screen."""
        key = str(job.message.id) if job.message.id else None
        with self._pending_lock:
            return self._reviews.pop(key, None) if key else None

    def _screen(self, job: _Job) -> tuple[Verdict, list[dict[str, object]]]:
        cached = self._cached_review(job)
        if cached is not None:
            return self._tool_verdict(job, cached)
        with self.telemetry.screen(surface="middleware", direction=job.direction, speaker=job.speaker, text=job.context[-1].text) as span:
            try:
                verdict = self.screener.screen(job.screen_direction, job.thread_id, job.context)
            except Exception as exc:
                verdict = self._failure(job, exc)
            verdict, injection = self._tool_verdict(job, verdict)
            span.assessed(verdict.assessment, flagged=verdict.flagged)
        return verdict, injection

    async def _ascreen(self, job: _Job) -> tuple[Verdict, list[dict[str, object]]]:
        cached = self._cached_review(job)
        if cached is not None:
            return self._tool_verdict(job, cached)
        with self.telemetry.screen(surface="middleware", direction=job.direction, speaker=job.speaker, text=job.context[-1].text) as span:
            try:
                verdict = await self.screener.ascreen(job.screen_direction, job.thread_id, job.context)
            except Exception as exc:
                verdict = self._failure(job, exc)
            verdict, injection = self._tool_verdict(job, verdict)
            span.assessed(verdict.assessment, flagged=verdict.flagged)
        return verdict, injection

    # --- hooks ------------------------------------------------------------------------------

    def _defer_input(self, job: _Job) -> bool:
        """Under observe/warn with fail-open nothing waits on the user-side verdict: screen it while the model runs."""
        return (
            self.concurrent_input
            and self.policy in ("observe", "warn")
            and self.on_error == "pass"
            and job.message.id is not None
        )

    def _park(self, key: str, pending: Future[Any] | asyncio.Task[Any], job: _Job) -> None:
        with self._pending_lock:
            self._pending[key] = (job, pending)
            while len(self._pending) > 4096:  # runs that never reached after_model (model raised)
                self._pending.popitem(last=False)

    def _unpark(self, state: Any) -> list[tuple[_Job, Future[Any] | asyncio.Task[Any]]]:
        ids = {m.id for m in state.get("messages") or [] if isinstance(m, HumanMessage) and m.id}
        with self._pending_lock:
            found = [key for key in self._pending if key in ids]
            return [self._pending.pop(key) for key in found]

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: GuardianState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        updates: list[dict[str, Any]] = []
        job = self._job("input", state, runtime)
        if job is not None and self._defer_input(job):
            if self._executor is None:
                with self._pending_lock:
                    if self._executor is None:
                        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="guardian-screen")
            context = contextvars.copy_context()  # the span joins the agent's trace
            self._park(str(job.message.id), self._executor.submit(context.run, self._screen, job), job)
        elif job is not None:
            update = self._act(job, *self._screen(job))
            updates.append(update)
            if "jump_to" in update:
                return _combine(updates)
        for tool_job in self._tool_jobs(state, runtime):
            updates.append(self._act(tool_job, *self._screen(tool_job)))
        return _combine(updates)

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: GuardianState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        updates: list[dict[str, Any]] = []
        job = self._job("input", state, runtime)
        if job is not None and self._defer_input(job):
            self._park(str(job.message.id), asyncio.ensure_future(self._ascreen(job)), job)
        elif job is not None:
            update = await self._aact(job, *(await self._ascreen(job)))
            updates.append(update)
            if "jump_to" in update:
                return _combine(updates)
        for tool_job in self._tool_jobs(state, runtime):
            updates.append(await self._aact(tool_job, *(await self._ascreen(tool_job))))
        return _combine(updates)

    @hook_config(can_jump_to=["end"])
    def after_model(self, state: GuardianState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        updates: list[dict[str, Any]] = []
        for deferred, pending in self._unpark(state):
            try:
                if not isinstance(pending, Future):
                    raise RuntimeError("a screen started by abefore_model reached the sync after_model")
                screened = pending.result()
            except Exception as exc:
                screened = (self._failure(deferred, exc), [])
            updates.append(self._act(deferred, *screened))
        job = self._job("output", state, runtime)
        if job is not None:
            verdict, _ = self._screen(job)
            rewrite = self._rewrite(job, verdict) if self._wants_rewrite(verdict) else None
            updates.append(self._act(job, verdict, [], rewrite))
        return _combine(updates)

    @hook_config(can_jump_to=["end"])
    async def aafter_model(self, state: GuardianState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        updates: list[dict[str, Any]] = []
        for deferred, pending in self._unpark(state):
            try:
                screened = await asyncio.wrap_future(pending) if isinstance(pending, Future) else await pending
            except Exception as exc:
                screened = (self._failure(deferred, exc), [])
            updates.append(await self._aact(deferred, *screened))
        job = self._job("output", state, runtime)
        if job is not None:
            verdict, _ = await self._ascreen(job)
            rewrite = await self._arewrite(job, verdict) if self._wants_rewrite(verdict) else None
            updates.append(await self._aact(job, verdict, [], rewrite))
        return _combine(updates)

    # --- streaming (guardian.agents.streaming owns this block) ------------------------------

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        """Under block/warn/raise the reply is screened while it streams, before the client sees it."""
        from guardian.agents import streaming

        return streaming.wrap_model_call(self, request, handler, thread_id=thread_id_of(request.runtime))

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        from guardian.agents import streaming

        return await streaming.awrap_model_call(self, request, handler, thread_id=thread_id_of(request.runtime))

    # --- end of streaming block ---------------------------------------------------------------

    # --- rewriting (optional, block only) ---------------------------------------------------

    def _wants_rewrite(self, verdict: Verdict) -> bool:
        return verdict.flagged and self.policy == "block" and self.rewrite_with is not None

    def _rewrite_messages(self, job: _Job, verdict: Verdict) -> list[BaseMessage]:
        finding = summary(verdict.assessment, direction="output")
        return [
            SystemMessage(rewrite_prompt().format(finding=finding)),
            HumanMessage(message_text(job.message)),
        ]

    def _rewritten_turns(self, job: _Job, reply: BaseMessage) -> list[MessageTurn] | None:
        text = message_text(reply)
        if not text:
            return None
        last = job.context[-1]
        return [*job.context[:-1], MessageTurn(last.key, last.speaker, text)]

    def _rewrite(self, job: _Job, verdict: Verdict) -> tuple[str, Verdict] | None:
        assert self.rewrite_with is not None
        try:
            reply = self.rewrite_with.invoke(self._rewrite_messages(job, verdict))
        except Exception as exc:
            log.warning("guardian rewrite failed; using the safe reply: %s", exc)
            return None
        turns = self._rewritten_turns(job, reply)
        if turns is None:
            return None
        try:
            return turns[-1].text, self.screener.screen("output", job.thread_id, turns)
        except Exception as exc:
            log.warning("guardian could not screen the rewrite; using the safe reply: %s", exc)
            return None

    async def _arewrite(self, job: _Job, verdict: Verdict) -> tuple[str, Verdict] | None:
        assert self.rewrite_with is not None
        try:
            reply = await self.rewrite_with.ainvoke(self._rewrite_messages(job, verdict))
        except Exception as exc:
            log.warning("guardian rewrite failed; using the safe reply: %s", exc)
            return None
        turns = self._rewritten_turns(job, reply)
        if turns is None:
            return None
        try:
            return turns[-1].text, await self.screener.ascreen("output", job.thread_id, turns)
        except Exception as exc:
            log.warning("guardian could not screen the rewrite; using the safe reply: %s", exc)
            return None

    # --- applying the policy ----------------------------------------------------------------

    def _decide(self, job: _Job, verdict: Verdict) -> str:
        """The policy's action; raises for "raise", and remembers a verdict about to be reviewed."""
        action = decide(verdict.assessment, flagged=verdict.flagged, policy=self.policy, on_error=self.on_error)
        if action == "raise":
            error = GuardianViolation if verdict.flagged else GuardianScreenError
            raise error(verdict.assessment, direction=job.direction, message_id=job.message.id)
        if action == "review" and job.message.id:
            with self._pending_lock:
                self._reviews[str(job.message.id)] = verdict
                while len(self._reviews) > 1024:
                    self._reviews.popitem(last=False)
        return action

    def _ask(self, job: _Job, verdict: Verdict, injection: list[dict[str, object]]) -> _review.Reviewed:
        """Pause the graph (LangGraph `interrupt()`); on resume this returns the reviewer's decision."""
        record = compact(verdict.assessment, direction=job.direction, flagged=True, action="review",
                         message_id=job.message.id, thread_id=job.thread_id, speaker=job.speaker)
        if injection:
            record["injection"] = injection
        request = _review.review_request(
            direction=job.direction,
            text=message_text(job.message),
            summary=verdict.notice or summary(verdict.assessment, direction=job.screen_direction),
            record=record,
            speaker=job.speaker,
        )
        reviewed = _review.read_decision(interrupt(request), direction=job.direction)
        with self._pending_lock:
            self._reviews.pop(str(job.message.id), None)
        return reviewed

    def _act(
        self, job: _Job, verdict: Verdict, injection: list[dict[str, object]], rewrite: tuple[str, Verdict] | None = None
    ) -> dict[str, Any]:
        action = self._decide(job, verdict)
        reviewed = self._ask(job, verdict, injection) if action == "review" else None
        update, record = self._apply(job, verdict, action, injection, rewrite, reviewed)
        if self.trace_verdicts:
            trace_verdict(record)
        return update

    async def _aact(
        self, job: _Job, verdict: Verdict, injection: list[dict[str, object]], rewrite: tuple[str, Verdict] | None = None
    ) -> dict[str, Any]:
        action = self._decide(job, verdict)
        reviewed = self._ask(job, verdict, injection) if action == "review" else None
        update, record = self._apply(job, verdict, action, injection, rewrite, reviewed)
        if self.trace_verdicts:
            await atrace_verdict(record)
        return update

    def _apply(
        self,
        job: _Job,
        verdict: Verdict,
        action: str,
        injection: list[dict[str, object]],
        rewrite: tuple[str, Verdict] | None,
        reviewed: _review.Reviewed | None,
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
                replacement = self.error_reply if failed and action == "blocked" else self.safe_reply
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
            reply = self.input_error_reply if failed and action == "blocked" else self.input_block_reply
            extra.append(annotate(AIMessage(content=reply, id=f"guardian-{uuid.uuid4()}"), data))
            update["jump_to"] = "end"
        if replacement is not None:
            data["original_text"] = original
            annotated = annotate(job.message.model_copy(update={"content": replacement}), data)  # same id: replaced in place
        else:
            annotated = annotate(job.message, data)
            if action == "warned" and verdict.notice and job.direction in ("output", "tool"):
                annotated = append_notice(annotated, verdict.notice)
        self._remember(job, replacement, extra)
        if verdict.flagged:
            self.screener.notify(
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

    def _remember(self, job: _Job, replacement: str | None, extra: list[BaseMessage]) -> None:
        """Thread memory (callers without a checkpointer): what the user and the model actually saw."""
        if job.direction == "tool" or isinstance(job.message, ToolMessage):
            return  # tool output is data the model read, not a turn of the conversation
        remembered = list(job.context)
        if replacement is not None:
            remembered[-1] = MessageTurn(remembered[-1].key, remembered[-1].speaker, replacement)
        for message in extra:
            remembered.append(MessageTurn(str(message.id), self.screener.speakers.assistant, message_text(message)))
        self.screener.memory.remember(job.thread_id, remembered)


def _directions(directions: Sequence[Direction] | None, apply_to_input: bool | None, apply_to_output: bool | None) -> frozenset[Direction]:
    """LangChain's spelling (apply_to_input/apply_to_output) or the older `directions=`, not both."""
    if directions is not None:
        if apply_to_input is not None or apply_to_output is not None:
            raise ValueError("give either directions= or apply_to_input/apply_to_output, not both")
        unknown = set(directions) - {"input", "output"}
        if unknown:
            raise ValueError(f"directions must be 'input' and/or 'output', not {sorted(unknown)}")
        return frozenset(directions)
    chosen: list[Direction] = []
    if apply_to_input is not False:
        chosen.append("input")
    if apply_to_output is not False:
        chosen.append("output")
    return frozenset(chosen)


def _combine(updates: list[dict[str, Any]]) -> dict[str, Any] | None:
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


__all__ = ["GuardianMiddleware", "GuardianScreenError", "GuardianState", "GuardianViolation", "assessments", "thread_id_of"]
