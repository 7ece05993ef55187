"""Streamed replies screened as they grow, for `GuardianMiddleware` and `guard()`.

Why not LangChain's stream hook (`AgentMiddleware.transformers`, as `PIIMiddleware`
uses)? In langgraph 1.2 those transformers run only for `stream_events(version="v3")`;
`agent.stream(..., stream_mode="messages")`, `astream` and `astream_events(v2)` never
pass through them (a PII-redacting agent streams the raw e-mail address there). So the
middleware screens where every stream mode starts: the model call.

`wrap_model_call` (policies `block`, `warn` and `raise`, output direction on):

- While the model runs, the client-facing streaming callback handlers (the one behind
  `stream_mode="messages"`, the one behind `astream_events`, the content-block one
  behind `stream_events(version="v3")`) are put behind a relay (`_relay.py`).
  The relay passes each token through the hold-back gate (`_holdback.ReplyGate`):
  under `block`/`raise` text is released a sentence at a time (or the complete words
  of a tail past `DEFAULT_MAX_HOLD_CHARS`), each piece only after the reply so far has
  been screened in the context of the turns before it; a prefix that flags (or fails to
  be screened, under `on_error` other than "pass") stops the release. Under `warn`
  tokens pass at once. The model's own final message is held too.
- When the model is done, the whole reply gets the middleware's usual screen and policy
  (`_screen`, `_act`: annotation, record, `on_finding`, rewrite, `on_error`, `raise`,
  spans): the verdict `invoke` would get. The relay then sends the rest of what the
  policy decided: the held clean text, the warn notice, or, for a flagged reply,
  `safe_reply` (or the rewrite) in place of words that were never shown.
- The model node returns the screened message, so `stream_mode="updates"`/`"values"`,
  checkpoints and `after_model` see what the client saw. `after_model` skips a reply
  already screened here. Streamed chunks carry the verdict, never the quotes
  (`on_the_wire`).

`guard(...).stream/astream` use the same gate around the wrapped runnable's stream.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, BaseMessageChunk
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tracers._streaming import _V2StreamingCallbackHandler

from guardian.agents._engine import Verdict
from guardian.agents._holdback import DEFAULT_MAX_HOLD_CHARS, ReplyGate, closing_piece
from guardian.agents._relay import (
    ARelay,
    AV2Relay,
    Relay,
    RelayBase,
    Session,
    V2Relay,
    on_the_wire,
    relayed,
    reset_var,
    unstreamed,
)
from guardian.agents._screening import MessageTurn, annotate, payload, to_turns
from guardian.agents.policy import failed_screen

if TYPE_CHECKING:
    from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse

GuardianMiddleware = Any
"""`guardian.agents.middleware.GuardianMiddleware` (not imported: it imports this module)."""
GuardedRunnable = Any
"""`guardian.agents.guard.GuardedRunnable` (likewise)."""

STREAM_SURFACE = "stream"
"""Telemetry surface of the screens of a reply's prefixes while it streams; the whole
reply's screen is counted under the caller's own surface ("middleware", "guard")."""


# --- the middleware hook -----------------------------------------------------------------------


def screens_streams(middleware: GuardianMiddleware) -> bool:
    """Whether replies are screened in the model call: `block`, `warn` or `raise`, output direction on.

    Not under `review`: its `interrupt()` belongs in `after_model`, where resuming does not
    call the model again; nor under `observe`, which never changes what the user sees.
    """
    return middleware.policy in ("block", "warn", "raise") and "output" in middleware.directions


def _prior(middleware: GuardianMiddleware, request: ModelRequest[Any], thread_id: str | None) -> list[MessageTurn]:
    turns = to_turns(list(request.state.get("messages") or []), speakers=middleware.screener.speakers)
    return middleware.screener.memory.context(thread_id, turns)


def _session(middleware: GuardianMiddleware) -> Session:
    return Session(
        hold=middleware.policy in ("block", "raise"),
        max_hold_chars=DEFAULT_MAX_HOLD_CHARS,
        fail_closed=middleware.on_error != "pass",
    )


def _reply_job(middleware: GuardianMiddleware, request: ModelRequest[Any], response: ModelResponse) -> tuple[Any, int] | None:
    """The middleware's output job for the reply in `response`, and the reply's position in it."""
    for position, message in enumerate(response.result):
        if isinstance(message, AIMessage):
            state = {**request.state, "messages": [*(request.state.get("messages") or []), message]}
            job = middleware._job("output", state, request.runtime)
            return (job, position) if job is not None else None
    return None


def _settled(response: ModelResponse, position: int, update: dict[str, Any]) -> tuple[ExtendedModelResponse, AIMessage | None]:
    """The model call's result with the screened reply in place, the rest of the delta as a command."""
    from langchain.agents.middleware.types import ExtendedModelResponse, ModelResponse
    from langgraph.types import Command

    result = list(response.result)
    messages = list(update.get("messages") or [])
    if messages and update.get("jump_to") == "end" and isinstance(messages[0], AIMessage) and messages[0].tool_calls:
        # after_model ends a replaced turn with jump_to; here the replacement simply calls no tools
        messages[0] = messages[0].model_copy(update={"tool_calls": [], "invalid_tool_calls": []})
    if messages:
        result[position] = messages[0]
        result[position + 1 : position + 1] = messages[1:]
    rest = {k: v for k, v in update.items() if k not in ("messages", "jump_to")}
    screened = ModelResponse(result=result, structured_response=response.structured_response)
    last = result[position]
    final = last if isinstance(last, AIMessage) else None
    return ExtendedModelResponse(model_response=screened, command=Command(update=rest) if rest else None), final


def wrap_model_call(
    middleware: GuardianMiddleware,
    request: ModelRequest[Any],
    handler: Callable[[ModelRequest[Any]], ModelResponse],
    *,
    thread_id: str | None,
) -> ModelResponse | ExtendedModelResponse:
    """`GuardianMiddleware.wrap_model_call`: see the module docstring."""
    if not screens_streams(middleware):
        return handler(request)
    session = _session(middleware)
    prior: list[MessageTurn] | None = None
    key = f"stream:{uuid.uuid4()}"

    def screen(text: str) -> Verdict:
        nonlocal prior
        if prior is None:
            prior = _prior(middleware, request, thread_id)
        reply = MessageTurn(key, middleware.screener.speakers.assistant, text.strip())
        with middleware.telemetry.screen(surface=STREAM_SURFACE, direction="output", speaker=reply.speaker, text=reply.text) as span:
            verdict = middleware.screener.screen("output", thread_id, [*prior, reply])
            span.assessed(verdict.assessment, flagged=verdict.flagged)
        return verdict

    def _relay(inner: list[BaseCallbackHandler]) -> RelayBase:
        v2 = any(isinstance(h, _V2StreamingCallbackHandler) for h in inner)
        return (V2Relay if v2 else Relay)(inner, session, screen)

    swapped = relayed(var_child_runnable_config.get() or {}, _relay, is_async=False)
    relay = swapped[1] if swapped is not None else None
    assert relay is None or isinstance(relay, Relay)
    token = var_child_runnable_config.set(swapped[0]) if swapped is not None else None
    try:
        response = handler(request)
    finally:
        if token is not None:
            reset_var(var_child_runnable_config, token)
    out: ModelResponse | ExtendedModelResponse = response
    final: AIMessage | None = None  # None (no text, or the policy raised): only what was released
    try:
        found = _reply_job(middleware, request, response)
        if found is not None:
            job, at = found
            verdict = middleware._screen(job)[0]  # the whole reply, as without streaming (one span)
            with unstreamed(is_async=False):
                rewrite = middleware._rewrite(job, verdict) if middleware._wants_rewrite(verdict) else None
            out, final = _settled(response, at, middleware._act(job, verdict, [], rewrite))
    finally:
        if relay is not None and session.last is not None:
            relay.finish(session.last, final)
            for run_id in list(session.ends):
                relay.finish(run_id, None)
    return out


async def awrap_model_call(
    middleware: GuardianMiddleware,
    request: ModelRequest[Any],
    handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse]],
    *,
    thread_id: str | None,
) -> ModelResponse | ExtendedModelResponse:
    """`GuardianMiddleware.awrap_model_call`: the async twin of `wrap_model_call`."""
    if not screens_streams(middleware):
        return await handler(request)
    session = _session(middleware)
    prior: list[MessageTurn] | None = None
    key = f"stream:{uuid.uuid4()}"

    async def screen(text: str) -> Verdict:
        nonlocal prior
        if prior is None:
            prior = _prior(middleware, request, thread_id)
        reply = MessageTurn(key, middleware.screener.speakers.assistant, text.strip())
        with middleware.telemetry.screen(surface=STREAM_SURFACE, direction="output", speaker=reply.speaker, text=reply.text) as span:
            verdict = await middleware.screener.ascreen("output", thread_id, [*prior, reply])
            span.assessed(verdict.assessment, flagged=verdict.flagged)
        return verdict

    def _arelay(inner: list[BaseCallbackHandler]) -> RelayBase:
        v2 = any(isinstance(h, _V2StreamingCallbackHandler) for h in inner)
        return (AV2Relay if v2 else ARelay)(inner, session, screen)

    swapped = relayed(var_child_runnable_config.get() or {}, _arelay, is_async=True)
    relay = swapped[1] if swapped is not None else None
    assert relay is None or isinstance(relay, ARelay)
    token = var_child_runnable_config.set(swapped[0]) if swapped is not None else None
    try:
        response = await handler(request)
    finally:
        if token is not None:
            reset_var(var_child_runnable_config, token)
    out: ModelResponse | ExtendedModelResponse = response
    final: AIMessage | None = None  # None (no text, or the policy raised): only what was released
    try:
        found = _reply_job(middleware, request, response)
        if found is not None:
            job, at = found
            verdict = (await middleware._ascreen(job))[0]
            with unstreamed(is_async=True):
                rewrite = await middleware._arewrite(job, verdict) if middleware._wants_rewrite(verdict) else None
            out, final = _settled(response, at, await middleware._aact(job, verdict, [], rewrite))
    finally:
        if relay is not None and session.last is not None:
            await relay.finish(session.last, final)
            for run_id in list(session.ends):
                await relay.finish(run_id, None)
    return out


# --- guard(...).stream / astream ---------------------------------------------------------------


def _piece_like(chunk: Any, piece: str) -> Any:
    if isinstance(chunk, str):
        return piece
    update: dict[str, Any] = {"content": piece}
    if isinstance(chunk, AIMessageChunk):
        update["chunk_position"] = None
    return chunk.model_copy(update=update)


def _delta(chunk: Any) -> str | None:
    if isinstance(chunk, str):
        return chunk
    if isinstance(chunk, BaseMessageChunk):
        return chunk.text
    return None


def _closing_chunk(template: Any, gate: ReplyGate, final: str, data: dict[str, Any]) -> Any:
    piece = closing_piece(gate.released, final)
    gate.released += piece
    if isinstance(template, str):
        return piece or None
    chunk = template.model_copy(update={"content": piece})
    if isinstance(chunk, AIMessageChunk):
        chunk = chunk.model_copy(update={"chunk_position": "last"})
    if not isinstance(chunk, BaseMessage):
        return chunk
    annotated = annotate(chunk, data)
    return annotated.model_copy(update={"response_metadata": on_the_wire(annotated.response_metadata)})


class _GuardStream:
    """One `guard(...)` stream: the gate, the turns it is judged in, and how it ends."""

    def __init__(self, guarded: GuardedRunnable, thread_id: str | None, context: list[MessageTurn]) -> None:
        self.guarded = guarded
        self.thread_id = thread_id
        self.context = context
        self.gate = ReplyGate(hold=guarded.policy in ("block", "raise"))
        self.reply = guarded._reply_turns(context, "")[-1]
        self.template: Any = None
        self.fail_closed = guarded.on_error != "pass"

    def turns(self, text: str) -> list[MessageTurn]:
        return [*self.context, MessageTurn(self.reply.key, self.reply.speaker, text.strip())]

    def stops(self, verdict: Verdict) -> bool:
        return verdict.flagged or (self.fail_closed and failed_screen(verdict.assessment, flagged=verdict.flagged))

    def span(self, text: str) -> Any:
        return self.guarded.telemetry.screen(surface=STREAM_SURFACE, direction="output", speaker=self.reply.speaker, text=text)

    def take(self, chunk: Any, delta: str) -> str:
        """Add a delta; returns what is released before any screen (without hold-back)."""
        self.template = chunk if self.template is None else self.template
        return self.gate.add(delta)

    def end(self, verdict: Verdict) -> tuple[str, Any]:
        """The whole reply's verdict applied as `invoke` applies it (raise, block, warn): the final text and last chunk."""
        guarded = self.guarded
        screened = guarded._record("output", self.thread_id, self.turns(self.gate.text), verdict)
        final = guarded._finish(self.gate.text, screened)
        data = payload(verdict.assessment, direction="output", flagged=verdict.flagged, action=screened.action, notice=verdict.notice)
        last = _closing_chunk(self.template, self.gate, final, data)
        guarded._remember(self.thread_id, self.context, final)
        return final, last


def stream_guarded(guarded: GuardedRunnable, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
    """`GuardedRunnable.stream`: the user turn screened first, the reply held back and screened as it grows."""
    config, thread_id = guarded._thread(config)
    has_input, context = guarded._context(thread_id, input)
    if has_input and "input" in guarded.directions:
        screened_in = guarded._record("input", thread_id, context, guarded._screen("input", thread_id, context))
        if screened_in.action == "blocked":
            refusal = guarded._refusal(screened_in)
            guarded._remember(thread_id, context, refusal)
            yield refusal
            return
    if "output" not in guarded.directions:
        yield from guarded.runnable.stream(input, config, **kwargs)
        return
    run = _GuardStream(guarded, thread_id, context)
    for chunk in guarded.runnable.stream(input, config, **kwargs):
        delta = _delta(chunk)
        if delta is None:
            yield chunk  # not text (a dict, a document): as `invoke`, only text replies are screened
            continue
        piece = run.take(chunk, delta)
        due = run.gate.due()
        if due is not None:
            with run.span(due) as span:
                verdict = guarded.screener.screen("output", thread_id, run.turns(due))
                span.assessed(verdict.assessment, flagged=verdict.flagged)
            piece += run.gate.settle(due, verdict, stop=run.stops(verdict))
        if piece:
            yield _piece_like(chunk, piece)
    if run.template is None or not run.gate.text.strip():
        return
    _, last = run.end(guarded._screen("output", thread_id, run.turns(run.gate.text)))
    if last is not None:
        yield last


async def astream_guarded(guarded: GuardedRunnable, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
    """`GuardedRunnable.astream`: the async twin of `stream_guarded`."""
    config, thread_id = guarded._thread(config)
    has_input, context = guarded._context(thread_id, input)
    if has_input and "input" in guarded.directions:
        screened_in = guarded._record("input", thread_id, context, await guarded._ascreen("input", thread_id, context))
        if screened_in.action == "blocked":
            refusal = guarded._refusal(screened_in)
            guarded._remember(thread_id, context, refusal)
            yield refusal
            return
    if "output" not in guarded.directions:
        async for chunk in guarded.runnable.astream(input, config, **kwargs):
            yield chunk
        return
    run = _GuardStream(guarded, thread_id, context)
    async for chunk in guarded.runnable.astream(input, config, **kwargs):
        delta = _delta(chunk)
        if delta is None:
            yield chunk
            continue
        piece = run.take(chunk, delta)
        due = run.gate.due()
        if due is not None:
            with run.span(due) as span:
                verdict = await guarded.screener.ascreen("output", thread_id, run.turns(due))
                span.assessed(verdict.assessment, flagged=verdict.flagged)
            piece += run.gate.settle(due, verdict, stop=run.stops(verdict))
        if piece:
            yield _piece_like(chunk, piece)
    if run.template is None or not run.gate.text.strip():
        return
    _, last = run.end(await guarded._ascreen("output", thread_id, run.turns(run.gate.text)))
    if last is not None:
        yield last


__all__ = ["astream_guarded", "awrap_model_call", "screens_streams", "stream_guarded", "wrap_model_call"]
