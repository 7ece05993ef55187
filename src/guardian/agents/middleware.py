"""`GuardianMiddleware`: manipulation screening for LangChain 1.x `create_agent`.

A thin `AgentMiddleware` in the style of LangChain's own `PIIMiddleware`: the
hooks find the turn to screen, ask the shared `Screener` (pure detection lives in
`_screening`), and return a state delta or `None`.

- `before_model` screens the latest human turn in the context of the thread (a
  user socially engineering the bot); `after_model` screens the model's reply
  before the user sees it (a bot manipulating its user).
- Every screened message carries its Assessment under
  `message.response_metadata["guardian"]` (JSON-safe `model_dump`), and the agent
  state gains a `guardian` list with one record per screened turn, so a
  checkpointer keeps the audit trail with the thread.
- `policy="observe"` only annotates and calls `on_finding`; `"warn"` also appends a
  short notice to a flagged reply; `"block"` replaces a flagged reply with a safe
  message (or, with `rewrite_with=`, one rewrite that must pass the screen again)
  and ends the turn with `jump_to: "end"`. A flagged user message under `"block"`
  is answered with a refusal and the model is not called.
- A detector that fails or hangs never breaks the agent: the message passes and
  the failure is recorded in the Assessment's `errors`.
"""

from __future__ import annotations

import asyncio
import operator
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Annotated, Any, Literal, NotRequired

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    OmitFromInput,
    hook_config,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from guardian.agents._engine import DetectorSpec, FindingCallback, GuardianEvent, Screener, Verdict
from guardian.agents._screening import (
    DEFAULT_INPUT_BLOCK_REPLY,
    DEFAULT_NOTICE,
    DEFAULT_SAFE_REPLY,
    METADATA_KEY,
    Direction,
    MessageTurn,
    Policy,
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

STATE_KEY = "guardian"


class GuardianState(AgentState[Any]):
    """Agent state with guardian's audit trail: one JSON-safe record per screened turn."""

    guardian: NotRequired[Annotated[list[dict[str, Any]], OmitFromInput, operator.add]]


@dataclass(frozen=True, slots=True)
class _Job:
    direction: Direction
    thread_id: str | None
    index: int
    message: BaseMessage
    context: list[MessageTurn]


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
    """

    state_schema = GuardianState

    def __init__(
        self,
        *,
        detectors: Sequence[DetectorSpec] | None = None,
        policy: Policy = "observe",
        directions: Sequence[Direction] = ("input", "output"),
        threshold: float | None = None,
        window: int = 10,
        on_finding: FindingCallback | Sequence[FindingCallback] | None = None,
        notice: str = DEFAULT_NOTICE,
        safe_reply: str = DEFAULT_SAFE_REPLY,
        input_block_reply: str = DEFAULT_INPUT_BLOCK_REPLY,
        rewrite_with: BaseChatModel | None = None,
        speakers: tuple[str, str] = ("User", "Assistant"),
        timeout_s: float | None = 5.0,
        max_threads: int = 10_000,
        concurrent_input: bool = True,
        name: str | None = None,
    ) -> None:
        """Configure the screen (all options keyword-only).

        Args:
            detectors: registered detector names or Detector instances; default the
                local manipulation model when installed, else the key phrases.
            policy: "observe" (annotate), "warn" (annotate and append a notice to a
                flagged reply), or "block" (replace a flagged reply and end the turn).
            directions: "input" screens the latest user turn before the model;
                "output" screens the model's reply before the user sees it.
            threshold: manipulation probability that flags a turn; default each
                detector's own decision (see `_screening.is_flagged`).
            window: how many turns of the thread the detectors see.
            on_finding: called with a `GuardianEvent` for every flagged turn.
            notice: template of the warn notice; `{summary}` names tactic and quote.
            safe_reply: what replaces a blocked model reply.
            input_block_reply: the answer to a blocked user message.
            rewrite_with: under "block", ask this model once to rewrite a flagged reply;
                the rewrite is screened again and used only if it passes.
            speakers: (user, assistant) names the detectors see and quote.
            timeout_s: per-detector time limit; a detector that misses it is recorded as
                a timeout and the message passes (None: wait, and run in the caller's thread).
            max_threads: threads remembered for callers without a checkpointer.
            concurrent_input: under "observe" and "warn" (which never stop a user turn),
                screen the user turn while the model runs; its result is attached
                in `after_model`. Off, or under "block", `before_model` waits for it.
            name: node name, needed only to add two guardian middlewares to one agent.
        """
        super().__init__()
        if policy not in ("observe", "warn", "block"):
            raise ValueError(f"policy must be 'observe', 'warn' or 'block', not {policy!r}")
        unknown = set(directions) - {"input", "output"}
        if unknown:
            raise ValueError(f"directions must be 'input' and/or 'output', not {sorted(unknown)}")
        self.policy: Policy = policy
        self.directions = frozenset(directions)
        self.safe_reply = safe_reply
        self.input_block_reply = input_block_reply
        self.rewrite_with = rewrite_with
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

    # --- hooks ------------------------------------------------------------------------------

    def _defer_input(self, job: _Job) -> bool:
        """Under observe/warn nothing waits on the user-side verdict: screen it while the model runs."""
        return self.concurrent_input and self.policy != "block" and job.message.id is not None

    def _park(self, key: str, pending: Future[Verdict] | asyncio.Task[Verdict], job: _Job) -> None:
        with self._pending_lock:
            self._pending[key] = (job, pending)
            while len(self._pending) > 4096:  # runs that never reached after_model (model raised)
                self._pending.popitem(last=False)

    def _unpark(self, state: Any) -> list[tuple[_Job, Future[Verdict] | asyncio.Task[Verdict]]]:
        ids = {m.id for m in state.get("messages") or [] if isinstance(m, HumanMessage) and m.id}
        with self._pending_lock:
            found = [key for key in self._pending if key in ids]
            return [self._pending.pop(key) for key in found]

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: GuardianState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        job = self._job("input", state, runtime)
        if job is None:
            return None
        if self._defer_input(job):
            if self._executor is None:
                with self._pending_lock:
                    if self._executor is None:
                        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="guardian-screen")
            future = self._executor.submit(self.screener.screen, job.direction, job.thread_id, job.context)
            self._park(str(job.message.id), future, job)
            return None
        try:
            verdict = self.screener.screen(job.direction, job.thread_id, job.context)
        except Exception as exc:
            return self._broken(job, exc)
        return self._apply(job, verdict, None)

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: GuardianState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        job = self._job("input", state, runtime)
        if job is None:
            return None
        if self._defer_input(job):
            task = asyncio.ensure_future(self.screener.ascreen(job.direction, job.thread_id, job.context))
            self._park(str(job.message.id), task, job)
            return None
        try:
            verdict = await self.screener.ascreen(job.direction, job.thread_id, job.context)
        except Exception as exc:
            return self._broken(job, exc)
        return self._apply(job, verdict, None)

    @hook_config(can_jump_to=["end"])
    def after_model(self, state: GuardianState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        updates: list[dict[str, Any]] = []
        for deferred, pending in self._unpark(state):
            try:
                if not isinstance(pending, Future):
                    raise RuntimeError("a screen started by abefore_model reached the sync after_model")
                updates.append(self._apply(deferred, pending.result(), None))
            except Exception as exc:
                updates.append(self._broken(deferred, exc))
        job = self._job("output", state, runtime)
        if job is not None:
            try:
                verdict = self.screener.screen(job.direction, job.thread_id, job.context)
                rewrite = self._rewrite(job, verdict) if self._wants_rewrite(verdict) else None
                updates.append(self._apply(job, verdict, rewrite))
            except Exception as exc:
                updates.append(self._broken(job, exc))
        return _combine(updates)

    @hook_config(can_jump_to=["end"])
    async def aafter_model(self, state: GuardianState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        updates: list[dict[str, Any]] = []
        for deferred, pending in self._unpark(state):
            try:
                verdict = await asyncio.wrap_future(pending) if isinstance(pending, Future) else await pending
                updates.append(self._apply(deferred, verdict, None))
            except Exception as exc:
                updates.append(self._broken(deferred, exc))
        job = self._job("output", state, runtime)
        if job is not None:
            try:
                verdict = await self.screener.ascreen(job.direction, job.thread_id, job.context)
                rewrite = await self._arewrite(job, verdict) if self._wants_rewrite(verdict) else None
                updates.append(self._apply(job, verdict, rewrite))
            except Exception as exc:
                updates.append(self._broken(job, exc))
        return _combine(updates)

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
        return turns[-1].text, self.screener.screen("output", job.thread_id, turns)

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
        return turns[-1].text, await self.screener.ascreen("output", job.thread_id, turns)

    # --- applying the policy ----------------------------------------------------------------

    def _apply(self, job: _Job, verdict: Verdict, rewrite: tuple[str, Verdict] | None) -> dict[str, Any]:
        action = "observed"
        if verdict.flagged and self.policy == "warn":
            action = "warned"
        elif verdict.flagged and self.policy == "block":
            action = "blocked"
            if rewrite is not None and not rewrite[1].flagged:
                action = "rewritten"
        data = payload(verdict.assessment, direction=job.direction, flagged=verdict.flagged, action=action, notice=verdict.notice)
        record = {**data, "message_id": job.message.id, "thread_id": job.thread_id}
        annotated = annotate(job.message, data)
        update: dict[str, Any] = {}
        remembered = list(job.context)
        if action == "warned" and job.direction == "output" and verdict.notice:
            annotated = append_notice(annotated, verdict.notice)
        if action in ("blocked", "rewritten") and job.direction == "output":
            text = rewrite[0] if action == "rewritten" and rewrite is not None else self.safe_reply
            if rewrite is not None:
                record["rewrite_assessment"] = rewrite[1].assessment.model_dump(mode="json")
            record["original_text"] = message_text(job.message)
            # Same id: the add_messages reducer replaces the flagged reply in place.
            annotated = annotate(AIMessage(content=text, id=job.message.id), data)
            remembered[-1] = MessageTurn(remembered[-1].key, remembered[-1].speaker, text)
            update["jump_to"] = "end"
        messages: list[BaseMessage] = [annotated]
        if action == "blocked" and job.direction == "input":
            refusal = annotate(AIMessage(content=self.input_block_reply, id=f"guardian-{uuid.uuid4()}"), data)
            messages.append(refusal)
            remembered.append(MessageTurn(str(refusal.id), self.screener.speakers.assistant, self.input_block_reply))
            update["jump_to"] = "end"
        self.screener.memory.remember(job.thread_id, remembered)
        if verdict.flagged:
            self.screener.notify(
                GuardianEvent(
                    direction=job.direction,
                    thread_id=job.thread_id,
                    assessment=verdict.assessment,
                    action=action,
                    text=message_text(job.message),
                    message_id=job.message.id,
                )
            )
        return {"messages": messages, STATE_KEY: [record], **update}

    def _broken(self, job: _Job, exc: BaseException) -> dict[str, Any]:
        """The screen itself failed: let the message through and record why."""
        log.exception("guardian screening failed on thread %s; the message passes", job.thread_id, exc_info=exc)
        return {
            STATE_KEY: [
                {
                    "direction": job.direction,
                    "flagged": False,
                    "action": "failed",
                    "message_id": job.message.id,
                    "thread_id": job.thread_id,
                    "error": f"{type(exc).__name__}: {exc}",
                }
            ]
        }


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


def assessments(state: dict[str, Any], *, direction: Literal["input", "output"] | None = None) -> list[dict[str, Any]]:
    """The guardian records of an agent result/state, optionally for one direction."""
    records = list(state.get(STATE_KEY) or [])
    return [r for r in records if direction is None or r.get("direction") == direction]


__all__ = ["GuardianMiddleware", "GuardianState", "assessments", "thread_id_of"]
