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
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

from cachetools import LRUCache
from langchain.agents.middleware.types import AgentMiddleware, hook_config
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.runtime import Runtime

from guardian.agents._actions import (
    Job,
    Replies,
    apply_action,
    arewrite,
    assessments,
    combine,
    failure_verdict,
    rewrite,
    tool_verdict,
)
from guardian.agents._engine import DetectorSpec, FindingCallback, Screener, Verdict
from guardian.agents._reviews import Reviews
from guardian.agents._screening import (
    DEFAULT_INPUT_BLOCK_REPLY,
    DEFAULT_NOTICE,
    DEFAULT_SAFE_REPLY,
    METADATA_KEY,
    Direction,
    MessageTurn,
    Speakers,
    blocked_reply,
    latest_index,
    message_text,
    to_turns,
)
from guardian.agents._state import DEFAULT_MAX_STATE_RECORDS, GuardianState, state_schema
from guardian.agents.policy import (
    DEFAULT_ERROR_REPLY,
    DEFAULT_INPUT_ERROR_REPLY,
    AgentPolicy,
    GuardianScreenError,
    GuardianViolation,
    OnError,
    check_options,
    chosen_directions,
    decide,
)
from guardian.agents.tool_results import pending_tool_results
from guardian.agents.tracing import atrace_verdict, trace_verdict
from guardian.telemetry import Telemetry


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
        next_steps: bool = True,
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
            next_steps: follow a replaced reply (`safe_reply`, a reviewer's rejection, or
                `error_reply`) with guardian's "blocked" next steps, so the user learns the
                reply was held back and how to go on (`_screening.blocked_reply`); off, the
                reply alone.
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
        self.directions = chosen_directions(directions, apply_to_input, apply_to_output)
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
        self.next_steps = next_steps
        self.rewrite_with = rewrite_with
        self.reviews = Reviews()
        self._name = name
        self.concurrent_input = concurrent_input
        # user turns screened while the model runs; runs that never reach after_model (the model raised) age out
        self._pending: LRUCache[str, tuple[Job, Future[Any] | asyncio.Task[Any]]] = LRUCache(maxsize=4096)
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

    def _job(self, direction: Direction, state: Any, runtime: Runtime[Any] | None) -> Job | None:
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
        return Job(direction, thread_id, index, message, context)

    def _tool_jobs(self, state: Any, runtime: Runtime[Any] | None) -> list[Job]:
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
            Job("tool", thread_id, t.index, t.message, [*context, MessageTurn(str(t.message.id or f"tool:{t.index}"), t.speaker, message_text(t.message))])
            for t in found
        ]

    # --- screening (one span each) ----------------------------------------------------------

    def _screen(self, job: Job) -> tuple[Verdict, list[dict[str, object]]]:
        cached = self.reviews.take(job)
        if cached is not None:
            return tool_verdict(job, cached)
        with self.telemetry.screen(surface="middleware", direction=job.direction, speaker=job.speaker, text=job.context[-1].text) as span:
            try:
                verdict = self.screener.screen(job.screen_direction, job.thread_id, job.context)
            except Exception as exc:
                verdict = failure_verdict(job, exc)
            verdict, injection = tool_verdict(job, verdict)
            span.assessed(verdict.assessment, flagged=verdict.flagged)
        return verdict, injection

    async def _ascreen(self, job: Job) -> tuple[Verdict, list[dict[str, object]]]:
        cached = self.reviews.take(job)
        if cached is not None:
            return tool_verdict(job, cached)
        with self.telemetry.screen(surface="middleware", direction=job.direction, speaker=job.speaker, text=job.context[-1].text) as span:
            try:
                verdict = await self.screener.ascreen(job.screen_direction, job.thread_id, job.context)
            except Exception as exc:
                verdict = failure_verdict(job, exc)
            verdict, injection = tool_verdict(job, verdict)
            span.assessed(verdict.assessment, flagged=verdict.flagged)
        return verdict, injection

    # --- hooks ------------------------------------------------------------------------------

    def _defer_input(self, job: Job) -> bool:
        """Under observe/warn with fail-open nothing waits on the user-side verdict: screen it while the model runs."""
        return (
            self.concurrent_input
            and self.policy in ("observe", "warn")
            and self.on_error == "pass"
            and job.message.id is not None
        )

    def _park(self, key: str, pending: Future[Any] | asyncio.Task[Any], job: Job) -> None:
        with self._pending_lock:
            self._pending[key] = (job, pending)

    def _unpark(self, state: Any) -> list[tuple[Job, Future[Any] | asyncio.Task[Any]]]:
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
                return combine(updates)
        for tool_job in self._tool_jobs(state, runtime):
            updates.append(self._act(tool_job, *self._screen(tool_job)))
        return combine(updates)

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
                return combine(updates)
        for tool_job in self._tool_jobs(state, runtime):
            updates.append(await self._aact(tool_job, *(await self._ascreen(tool_job))))
        return combine(updates)

    @hook_config(can_jump_to=["end"])
    def after_model(self, state: GuardianState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        updates: list[dict[str, Any]] = []
        for deferred, pending in self._unpark(state):
            try:
                if not isinstance(pending, Future):
                    raise RuntimeError("a screen started by abefore_model reached the sync after_model")
                screened = pending.result()
            except Exception as exc:
                screened = (failure_verdict(deferred, exc), [])
            updates.append(self._act(deferred, *screened))
        job = self._job("output", state, runtime)
        if job is not None:
            verdict, _ = self._screen(job)
            rewrite = self._rewrite(job, verdict) if self._wants_rewrite(verdict) else None
            updates.append(self._act(job, verdict, [], rewrite))
        return combine(updates)

    @hook_config(can_jump_to=["end"])
    async def aafter_model(self, state: GuardianState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        updates: list[dict[str, Any]] = []
        for deferred, pending in self._unpark(state):
            try:
                screened = await asyncio.wrap_future(pending) if isinstance(pending, Future) else await pending
            except Exception as exc:
                screened = (failure_verdict(deferred, exc), [])
            updates.append(await self._aact(deferred, *screened))
        job = self._job("output", state, runtime)
        if job is not None:
            verdict, _ = await self._ascreen(job)
            rewrite = await self._arewrite(job, verdict) if self._wants_rewrite(verdict) else None
            updates.append(await self._aact(job, verdict, [], rewrite))
        return combine(updates)

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

    def _rewrite(self, job: Job, verdict: Verdict) -> tuple[str, Verdict] | None:
        assert self.rewrite_with is not None
        return rewrite(self.rewrite_with, job, verdict, screener=self.screener)

    async def _arewrite(self, job: Job, verdict: Verdict) -> tuple[str, Verdict] | None:
        assert self.rewrite_with is not None
        return await arewrite(self.rewrite_with, job, verdict, screener=self.screener)

    # --- applying the policy ----------------------------------------------------------------

    def _decide(self, job: Job, verdict: Verdict) -> str:
        """The policy's action; raises for "raise", and remembers a verdict about to be reviewed."""
        action = decide(verdict.assessment, flagged=verdict.flagged, policy=self.policy, on_error=self.on_error)
        if action == "raise":
            error = GuardianViolation if verdict.flagged else GuardianScreenError
            raise error(verdict.assessment, direction=job.direction, message_id=job.message.id)
        if action == "review":
            self.reviews.hold(job, verdict)
        return action

    def _act(
        self, job: Job, verdict: Verdict, injection: list[dict[str, object]], rewrite: tuple[str, Verdict] | None = None
    ) -> dict[str, Any]:
        action = self._decide(job, verdict)
        reviewed = self.reviews.ask(job, verdict, injection) if action == "review" else None
        update, record = apply_action(job, verdict, action, injection, rewrite, reviewed,
                                      replies=self._replies(), screener=self.screener)
        if self.trace_verdicts:
            trace_verdict(record)
        return update

    async def _aact(
        self, job: Job, verdict: Verdict, injection: list[dict[str, object]], rewrite: tuple[str, Verdict] | None = None
    ) -> dict[str, Any]:
        action = self._decide(job, verdict)
        reviewed = self.reviews.ask(job, verdict, injection) if action == "review" else None
        update, record = apply_action(job, verdict, action, injection, rewrite, reviewed,
                                      replies=self._replies(), screener=self.screener)
        if self.trace_verdicts:
            await atrace_verdict(record)
        return update

    def _replies(self) -> Replies:
        """The texts that replace a stopped turn; a replaced reply carries the next steps
        (`next_steps`), a refused user turn does not (the model's reply was not what was held)."""
        return Replies(safe_reply=blocked_reply(self.safe_reply, next_steps=self.next_steps),
                       input_block_reply=self.input_block_reply,
                       error_reply=blocked_reply(self.error_reply, next_steps=self.next_steps),
                       input_error_reply=self.input_error_reply)


__all__ = ["GuardianMiddleware", "GuardianScreenError", "GuardianState", "GuardianViolation", "assessments", "thread_id_of"]
