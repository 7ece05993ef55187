"""Streamed replies screened as they grow, for `GuardianMiddleware` and `guard()`.

Why not LangChain's stream hook (`AgentMiddleware.transformers`, as `PIIMiddleware`
uses)? In langgraph 1.2 those transformers run only for `stream_events(version="v3")`;
`agent.stream(..., stream_mode="messages")`, `astream` and `astream_events(v2)` never
pass through them (a PII-redacting agent streams the raw e-mail address there). So the
middleware screens where every stream mode starts: the model call.

`wrap_model_call` (policies `block`, `warn` and `raise`, output direction on):

- While the model runs, the client-facing streaming callback handlers (the one behind
  `stream_mode="messages"`, the one behind `astream_events`, the content-block one
  behind `stream_events(version="v3")`) are put behind a relay.
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

import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, BaseMessageChunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tracers._streaming import _StreamingCallbackHandler, _V2StreamingCallbackHandler

from guardian.agents._engine import Verdict
from guardian.agents._holdback import DEFAULT_MAX_HOLD_CHARS, ReplyGate, closing_piece
from guardian.agents._screening import METADATA_KEY, MessageTurn, annotate, payload, to_turns
from guardian.agents.policy import failed_screen
from guardian.findings import Assessment, DetectorError

if TYPE_CHECKING:
    from langchain.agents.middleware.types import ExtendedModelResponse, ModelRequest, ModelResponse

GuardianMiddleware = Any
"""`guardian.agents.middleware.GuardianMiddleware` (not imported: it imports this module)."""
GuardedRunnable = Any
"""`guardian.agents.guard.GuardedRunnable` (likewise)."""

log = logging.getLogger("guardian.agents")

STREAM_SURFACE = "stream"
"""Telemetry surface of the screens of a reply's prefixes while it streams; the whole
reply's screen is counted under the caller's own surface ("middleware", "guard")."""

ScreenText = Callable[[str], Verdict]
AScreenText = Callable[[str], Awaitable[Verdict]]

_FORWARDED = (
    "on_llm_start",
    "on_llm_error",
    "on_chain_start",
    "on_chain_end",
    "on_chain_error",
    "on_tool_start",
    "on_tool_end",
    "on_tool_error",
    "on_retry",
    "on_text",
    "on_custom_event",
)


# --- one streamed model call ------------------------------------------------------------------


class _Session:
    """The gates of one model call (a fallback may run several models) and what is deferred."""

    def __init__(self, *, hold: bool, max_hold_chars: int, fail_closed: bool) -> None:
        self.hold = hold
        self.max_hold_chars = max_hold_chars
        self.fail_closed = fail_closed
        self.gates: dict[UUID, ReplyGate] = {}
        self.ids: dict[UUID, str | None] = {}
        self.ends: dict[UUID, tuple[LLMResult, dict[str, Any]]] = {}
        self.last: UUID | None = None
        # protocol events (stream_events v3): the text block, its held finish events, their kwargs
        self.text_index: dict[UUID, int] = {}
        self.held_events: dict[UUID, list[dict[str, Any]]] = {}
        self.event_kwargs: dict[UUID, dict[str, Any]] = {}

    def gate(self, run_id: UUID) -> ReplyGate:
        if run_id not in self.gates:
            self.gates[run_id] = ReplyGate(hold=self.hold, max_hold_chars=self.max_hold_chars)
        return self.gates[run_id]

    def failed(self, exc: BaseException) -> Verdict:
        """A screen that raised mid-stream: a verdict that says so (`on_error` decides what it stops)."""
        log.warning("guardian stream screen failed: %s", exc)
        error = DetectorError(detector="guardian", kind="error", message=f"{type(exc).__name__}: {exc}")
        return Verdict(Assessment(conversation_id="stream", turn=0, errors=(error,)), False, None)

    def stops(self, verdict: Verdict) -> bool:
        """A flag stops the reply; so does a failed screen when the operator fails closed."""
        return verdict.flagged or (self.fail_closed and failed_screen(verdict.assessment, flagged=verdict.flagged))


def _text_chunk(chunk: ChatGenerationChunk, piece: str) -> ChatGenerationChunk:
    message = chunk.message
    update: dict[str, Any] = {"content": piece}
    if isinstance(message, AIMessageChunk):
        update["chunk_position"] = None  # the relay sends the last chunk itself, at the end
    return ChatGenerationChunk(message=message.model_copy(update=update), generation_info=chunk.generation_info)


def _worth_sending(chunk: ChatGenerationChunk, piece: str) -> bool:
    message = chunk.message
    return bool(piece) or bool(getattr(message, "tool_call_chunks", None)) or bool(getattr(message, "usage_metadata", None))


class _RelayBase(BaseCallbackHandler, _StreamingCallbackHandler):
    """Stands in for the client-facing streaming handlers while one model call runs."""

    run_inline = True

    def __init__(self, inner: list[BaseCallbackHandler], session: _Session) -> None:
        self.inner = inner
        self.session = session

    def tap_output_iter(self, run_id: UUID, output: Iterator[Any]) -> Iterator[Any]:
        for handler in self.inner:
            output = handler.tap_output_iter(run_id, output)  # type: ignore[attr-defined]
        return output

    def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[Any]) -> AsyncIterator[Any]:
        for handler in self.inner:
            output = handler.tap_output_aiter(run_id, output)  # type: ignore[attr-defined]
        return output

    def _closing(self, run_id: UUID, final: AIMessage | None) -> tuple[ChatGenerationChunk, LLMResult, dict[str, Any]] | None:
        """The last chunk and the end event of `run_id`, carrying `final` (None: what was released)."""
        if run_id not in self.session.ends:
            return None
        response, kwargs = self.session.ends.pop(run_id)
        gate = self.session.gate(run_id)
        message_id = self.session.ids.get(run_id)
        if final is None:
            own = response.generations[0][0] if response.generations and response.generations[0] else None
            if isinstance(own, ChatGeneration) and isinstance(own.message, AIMessage):
                final = own.message.model_copy(update={"content": gate.released})
            else:
                final = AIMessage(content=gate.released, id=message_id)
        piece = closing_piece(gate.released, final.text)
        gate.released += piece
        metadata = on_the_wire(final.response_metadata)
        last = AIMessageChunk(content=piece, id=message_id or final.id, response_metadata=metadata, chunk_position="last")
        shown = final.model_copy(update={"id": message_id or final.id, "response_metadata": metadata})
        generations: list[list[Any]] = [[ChatGeneration(message=shown)]]
        end = LLMResult(generations=generations, llm_output=response.llm_output, run=response.run)
        return ChatGenerationChunk(message=last), end, kwargs

    # protocol events (`stream_events(version="v3")`): text deltas gated, a text block's
    # finish and the message's finish held until the policy has decided

    def _held(self, run_id: UUID, event: dict[str, Any]) -> bool:
        kind = event.get("event")
        content = event.get("content")
        if kind == "message-finish" or (kind == "content-block-finish" and isinstance(content, dict) and content.get("type") == "text"):
            self.session.held_events.setdefault(run_id, []).append(event)
            return True
        return False

    def _closing_events(self, run_id: UUID, piece: str, final_text: str) -> list[dict[str, Any]]:
        index = self.session.text_index.get(run_id, 0)
        out: list[dict[str, Any]] = []
        if piece:
            out.append({"event": "content-block-delta", "index": index, "delta": {"type": "text-delta", "text": piece}})
        for event in self.session.held_events.pop(run_id, []):
            if event.get("event") == "content-block-finish":
                text = final_text if event.get("index", 0) == index else ""
                event = {**event, "content": {**event["content"], "text": text}}
            out.append(event)
        return out


def _text_delta(event: dict[str, Any]) -> str | None:
    if event.get("event") != "content-block-delta":
        return None
    delta = event.get("delta")
    if isinstance(delta, dict) and delta.get("type") == "text-delta":
        return str(delta.get("text") or "")
    return None


def on_the_wire(metadata: dict[str, Any]) -> dict[str, Any]:
    """Message metadata fit for the client: the verdict, never the words it judged.

    The stored message keeps the full Assessment (quotes) and a replaced reply's
    `original_text`; a streamed chunk carries only direction, flag and action (and the
    notice of a warned reply, whose words were shown anyway).
    """
    data = metadata.get(METADATA_KEY)
    if not isinstance(data, dict):
        return dict(metadata)
    wire = {k: data[k] for k in ("direction", "flagged", "action") if k in data}
    if data.get("action") == "warned" and data.get("notice"):
        wire["notice"] = data["notice"]
    return {**metadata, METADATA_KEY: wire}


class _Relay(_RelayBase):
    """Sync relay: screens with the sync screener, calls sync handlers."""

    def __init__(self, inner: list[BaseCallbackHandler], session: _Session, screen: ScreenText) -> None:
        super().__init__(inner, session)
        self.screen = screen

    def _send(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        for handler in self.inner:
            try:
                getattr(handler, event)(*args, **kwargs)
            except NotImplementedError:
                raise
            except Exception:
                log.warning("guardian relay: %s.%s failed", type(handler).__name__, event, exc_info=True)

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self._send("on_chat_model_start", *args, **kwargs)

    def _step(self, run_id: UUID, text: str) -> str:
        """Gate one delta of `run_id`; what may be released now."""
        gate = self.session.gate(run_id)
        piece = gate.add(text)
        screened = gate.due()
        if screened is not None:
            try:
                verdict = self.screen(screened)
            except Exception as exc:
                verdict = self.session.failed(exc)
            piece += gate.settle(screened, verdict, stop=self.session.stops(verdict))
        return piece

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, run_id: UUID, **kwargs: Any) -> None:
        if not isinstance(chunk, ChatGenerationChunk):
            self._send("on_llm_new_token", token, chunk=chunk, run_id=run_id, **kwargs)
            return
        self.session.last = run_id
        self.session.ids.setdefault(run_id, chunk.message.id)
        piece = self._step(run_id, chunk.message.text)
        if _worth_sending(chunk, piece):
            self._send("on_llm_new_token", piece, chunk=_text_chunk(chunk, piece), run_id=run_id, **kwargs)

    def on_stream_event(self, event: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.session.last = run_id
        self.session.event_kwargs[run_id] = kwargs
        text = _text_delta(event)
        if text is None:
            if event.get("event") == "message-start":
                self.session.ids.setdefault(run_id, event.get("id"))
            if not self._held(run_id, event):
                self._send("on_stream_event", event, run_id=run_id, **kwargs)
            return
        self.session.text_index.setdefault(run_id, int(event.get("index", 0)))
        piece = self._step(run_id, text)
        if piece:
            self._send("on_stream_event", {**event, "delta": {**event["delta"], "text": piece}}, run_id=run_id, **kwargs)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        self.session.last = run_id
        self.session.ends[run_id] = (response, {"run_id": run_id, **kwargs})

    def finish(self, run_id: UUID, final: AIMessage | None) -> None:
        closing = self._closing(run_id, final)
        if closing is None:
            return
        chunk, end, kwargs = closing
        if run_id in self.session.event_kwargs:  # protocol events: the rest as events
            for event in self._closing_events(run_id, chunk.message.text, end.generations[0][0].text):
                self._send("on_stream_event", event, run_id=run_id, **self.session.event_kwargs[run_id])
        else:
            self._send("on_llm_new_token", chunk.message.text, chunk=chunk, **kwargs)
        self._send("on_llm_end", end, **kwargs)


class _ARelay(_RelayBase):
    """Async relay: awaits the async screener and async handlers (the astream_events one)."""

    def __init__(self, inner: list[BaseCallbackHandler], session: _Session, screen: AScreenText) -> None:
        super().__init__(inner, session)
        self.screen = screen

    async def _send(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        for handler in self.inner:
            try:
                result = getattr(handler, event)(*args, **kwargs)
                if inspect.isawaitable(result):
                    await result
            except NotImplementedError:
                raise
            except Exception:
                log.warning("guardian relay: %s.%s failed", type(handler).__name__, event, exc_info=True)

    async def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        await self._send("on_chat_model_start", *args, **kwargs)

    async def _step(self, run_id: UUID, text: str) -> str:
        gate = self.session.gate(run_id)
        piece = gate.add(text)
        screened = gate.due()
        if screened is not None:
            try:
                verdict = await self.screen(screened)
            except Exception as exc:
                verdict = self.session.failed(exc)
            piece += gate.settle(screened, verdict, stop=self.session.stops(verdict))
        return piece

    async def on_llm_new_token(self, token: Any, *, chunk: Any = None, run_id: UUID, **kwargs: Any) -> None:
        if not isinstance(chunk, ChatGenerationChunk):
            await self._send("on_llm_new_token", token, chunk=chunk, run_id=run_id, **kwargs)
            return
        self.session.last = run_id
        self.session.ids.setdefault(run_id, chunk.message.id)
        piece = await self._step(run_id, chunk.message.text)
        if _worth_sending(chunk, piece):
            await self._send("on_llm_new_token", piece, chunk=_text_chunk(chunk, piece), run_id=run_id, **kwargs)

    async def on_stream_event(self, event: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.session.last = run_id
        self.session.event_kwargs[run_id] = kwargs
        text = _text_delta(event)
        if text is None:
            if event.get("event") == "message-start":
                self.session.ids.setdefault(run_id, event.get("id"))
            if not self._held(run_id, event):
                await self._send("on_stream_event", event, run_id=run_id, **kwargs)
            return
        self.session.text_index.setdefault(run_id, int(event.get("index", 0)))
        piece = await self._step(run_id, text)
        if piece:
            await self._send("on_stream_event", {**event, "delta": {**event["delta"], "text": piece}}, run_id=run_id, **kwargs)

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        self.session.last = run_id
        self.session.ends[run_id] = (response, {"run_id": run_id, **kwargs})

    async def finish(self, run_id: UUID, final: AIMessage | None) -> None:
        closing = self._closing(run_id, final)
        if closing is None:
            return
        chunk, end, kwargs = closing
        if run_id in self.session.event_kwargs:
            for event in self._closing_events(run_id, chunk.message.text, end.generations[0][0].text):
                await self._send("on_stream_event", event, run_id=run_id, **self.session.event_kwargs[run_id])
        else:
            await self._send("on_llm_new_token", chunk.message.text, chunk=chunk, **kwargs)
        await self._send("on_llm_end", end, **kwargs)


class _V2Relay(_Relay, _V2StreamingCallbackHandler):
    """Sync relay for the v3 protocol handler: the model sends it content-block events.

    Tokens may come as v1 callbacks too; the v3 handler ignores those, so they pass
    ungated (gating them as well would count each delta twice).
    """

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, run_id: UUID, **kwargs: Any) -> None:
        self._send("on_llm_new_token", token, chunk=chunk, run_id=run_id, **kwargs)


class _AV2Relay(_ARelay, _V2StreamingCallbackHandler):
    """Async relay for the v3 protocol handler."""

    async def on_llm_new_token(self, token: Any, *, chunk: Any = None, run_id: UUID, **kwargs: Any) -> None:
        await self._send("on_llm_new_token", token, chunk=chunk, run_id=run_id, **kwargs)


def _add_forwarders() -> None:
    """Every other callback event goes to the wrapped handlers unchanged."""

    def sync_forward(name: str) -> Callable[..., None]:
        def forward(self: _Relay, *args: Any, **kwargs: Any) -> None:
            self._send(name, *args, **kwargs)

        return forward

    def async_forward(name: str) -> Callable[..., Awaitable[None]]:
        async def forward(self: _ARelay, *args: Any, **kwargs: Any) -> None:
            await self._send(name, *args, **kwargs)

        return forward

    for name in _FORWARDED:
        setattr(_Relay, name, sync_forward(name))
        setattr(_ARelay, name, async_forward(name))


_add_forwarders()


def _client_streams(handlers: list[BaseCallbackHandler], *, is_async: bool) -> list[BaseCallbackHandler]:
    """The streaming handlers a client reads: `stream_mode="messages"`, `astream_events`, and
    the v3 protocol one (`stream_events(version="v3")`); when a v3 one is there, only those."""
    from langchain_core.callbacks import AsyncCallbackHandler

    found: list[BaseCallbackHandler] = []
    for handler in handlers:
        if isinstance(handler, _RelayBase):
            continue
        if isinstance(handler, _StreamingCallbackHandler) and (is_async or not isinstance(handler, AsyncCallbackHandler)):
            found.append(handler)
    v2: list[BaseCallbackHandler] = [h for h in found if isinstance(h, _V2StreamingCallbackHandler)]
    return v2 or found


def _relayed(
    config: RunnableConfig, relay_of: Callable[[list[BaseCallbackHandler]], _RelayBase] | None, *, is_async: bool
) -> tuple[RunnableConfig, _RelayBase | None] | None:
    """`config` with its client-facing streaming handlers behind one relay (`relay_of`) or,
    without `relay_of`, taken out; None when it streams to no client."""
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        inner = _client_streams(list(dict.fromkeys([*callbacks.handlers, *callbacks.inheritable_handlers])), is_async=is_async)
        if not inner:
            return None
        relay = relay_of(inner) if relay_of is not None else None
        added: list[BaseCallbackHandler] = [relay] if relay is not None else []
        manager = callbacks.copy()
        manager.handlers = [h for h in manager.handlers if h not in inner] + added
        if any(h in inner for h in callbacks.inheritable_handlers):
            manager.inheritable_handlers = [h for h in manager.inheritable_handlers if h not in inner] + added
        return {**config, "callbacks": manager}, relay
    if isinstance(callbacks, list):
        inner = _client_streams([h for h in callbacks if isinstance(h, BaseCallbackHandler)], is_async=is_async)
        if not inner:
            return None
        relay = relay_of(inner) if relay_of is not None else None
        return {**config, "callbacks": [h for h in callbacks if h not in inner] + ([relay] if relay is not None else [])}, relay
    return None


@contextmanager
def _unstreamed(*, is_async: bool) -> Iterator[None]:
    """Model calls made inside (the rewrite) do not stream to the client: what they say is
    screened first and reaches the client through the relay, if at all."""
    quiet = _relayed(var_child_runnable_config.get() or {}, None, is_async=is_async)
    token = var_child_runnable_config.set(quiet[0]) if quiet is not None else None
    try:
        yield
    finally:
        if token is not None:
            _reset(var_child_runnable_config, token)


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


def _session(middleware: GuardianMiddleware) -> _Session:
    return _Session(
        hold=middleware.policy in ("block", "raise"),
        max_hold_chars=getattr(middleware, "stream_max_hold_chars", DEFAULT_MAX_HOLD_CHARS),
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

    def _relay(inner: list[BaseCallbackHandler]) -> _RelayBase:
        v2 = any(isinstance(h, _V2StreamingCallbackHandler) for h in inner)
        return (_V2Relay if v2 else _Relay)(inner, session, screen)

    relayed = _relayed(var_child_runnable_config.get() or {}, _relay, is_async=False)
    relay = relayed[1] if relayed is not None else None
    assert relay is None or isinstance(relay, _Relay)
    token = var_child_runnable_config.set(relayed[0]) if relayed is not None else None
    try:
        response = handler(request)
    finally:
        if token is not None:
            _reset(var_child_runnable_config, token)
    out: ModelResponse | ExtendedModelResponse = response
    final: AIMessage | None = None  # None (no text, or the policy raised): only what was released
    try:
        found = _reply_job(middleware, request, response)
        if found is not None:
            job, at = found
            verdict = middleware._screen(job)[0]  # the whole reply, as without streaming (one span)
            with _unstreamed(is_async=False):
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

    def _arelay(inner: list[BaseCallbackHandler]) -> _RelayBase:
        v2 = any(isinstance(h, _V2StreamingCallbackHandler) for h in inner)
        return (_AV2Relay if v2 else _ARelay)(inner, session, screen)

    relayed = _relayed(var_child_runnable_config.get() or {}, _arelay, is_async=True)
    relay = relayed[1] if relayed is not None else None
    assert relay is None or isinstance(relay, _ARelay)
    token = var_child_runnable_config.set(relayed[0]) if relayed is not None else None
    try:
        response = await handler(request)
    finally:
        if token is not None:
            _reset(var_child_runnable_config, token)
    out: ModelResponse | ExtendedModelResponse = response
    final: AIMessage | None = None  # None (no text, or the policy raised): only what was released
    try:
        found = _reply_job(middleware, request, response)
        if found is not None:
            job, at = found
            verdict = (await middleware._ascreen(job))[0]
            with _unstreamed(is_async=True):
                rewrite = await middleware._arewrite(job, verdict) if middleware._wants_rewrite(verdict) else None
            out, final = _settled(response, at, await middleware._aact(job, verdict, [], rewrite))
    finally:
        if relay is not None and session.last is not None:
            await relay.finish(session.last, final)
            for run_id in list(session.ends):
                await relay.finish(run_id, None)
    return out


def _reset(var: ContextVar[Any], token: Any) -> None:
    try:
        var.reset(token)
    except ValueError:  # reset from another context (a generator resumed elsewhere): restore by value
        var.set(token.old_value if token.old_value is not token.MISSING else None)


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
