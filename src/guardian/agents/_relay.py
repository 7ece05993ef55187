"""The relay: client-facing stream handlers put behind the hold-back gate while a model runs.

LangChain streams a model's tokens to clients through callback handlers: the one behind
`stream_mode="messages"` (v1 chunks via `on_llm_new_token`), the one behind
`astream_events`, and the content-block one behind `stream_events(version="v3")`
(`on_stream_event`). For one model call, `relayed` swaps them in the runnable config for
one relay that passes every token through a `ReplyGate` (screening the reply so far when
a piece is due) and holds the model's end events until the caller says what the client
gets last (`finish`). Every other callback event is forwarded unchanged.

The handler classes and `var_child_runnable_config` are LangChain internals
(langchain-core 1.8, langgraph 1.2); `tests/agents/test_streaming.py` pins what this
relies on with real graphs.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tracers._streaming import _StreamingCallbackHandler, _V2StreamingCallbackHandler

from guardian.agents._engine import Verdict
from guardian.agents._holdback import ReplyGate, closing_piece
from guardian.agents._screening import METADATA_KEY
from guardian.agents.policy import failed_screen
from guardian.findings import Assessment, DetectorError

log = logging.getLogger("guardian.agents")

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


class Session:
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


class RelayBase(BaseCallbackHandler, _StreamingCallbackHandler):
    """Stands in for the client-facing streaming handlers while one model call runs."""

    run_inline = True

    def __init__(self, inner: list[BaseCallbackHandler], session: Session) -> None:
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


class Relay(RelayBase):
    """Sync relay: screens with the sync screener, calls sync handlers."""

    def __init__(self, inner: list[BaseCallbackHandler], session: Session, screen: ScreenText) -> None:
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


class ARelay(RelayBase):
    """Async relay: awaits the async screener and async handlers (the astream_events one)."""

    def __init__(self, inner: list[BaseCallbackHandler], session: Session, screen: AScreenText) -> None:
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


class V2Relay(Relay, _V2StreamingCallbackHandler):
    """Sync relay for the v3 protocol handler: the model sends it content-block events.

    Tokens may come as v1 callbacks too; the v3 handler ignores those, so they pass
    ungated (gating them as well would count each delta twice).
    """

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, run_id: UUID, **kwargs: Any) -> None:
        self._send("on_llm_new_token", token, chunk=chunk, run_id=run_id, **kwargs)


class AV2Relay(ARelay, _V2StreamingCallbackHandler):
    """Async relay for the v3 protocol handler."""

    async def on_llm_new_token(self, token: Any, *, chunk: Any = None, run_id: UUID, **kwargs: Any) -> None:
        await self._send("on_llm_new_token", token, chunk=chunk, run_id=run_id, **kwargs)


def _add_forwarders() -> None:
    """Every other callback event goes to the wrapped handlers unchanged."""

    def sync_forward(name: str) -> Callable[..., None]:
        def forward(self: Relay, *args: Any, **kwargs: Any) -> None:
            self._send(name, *args, **kwargs)

        return forward

    def async_forward(name: str) -> Callable[..., Awaitable[None]]:
        async def forward(self: ARelay, *args: Any, **kwargs: Any) -> None:
            await self._send(name, *args, **kwargs)

        return forward

    for name in _FORWARDED:
        setattr(Relay, name, sync_forward(name))
        setattr(ARelay, name, async_forward(name))


_add_forwarders()


def _client_streams(handlers: list[BaseCallbackHandler], *, is_async: bool) -> list[BaseCallbackHandler]:
    """The streaming handlers a client reads: `stream_mode="messages"`, `astream_events`, and
    the v3 protocol one (`stream_events(version="v3")`); when a v3 one is there, only those."""
    from langchain_core.callbacks import AsyncCallbackHandler

    found: list[BaseCallbackHandler] = []
    for handler in handlers:
        if isinstance(handler, RelayBase):
            continue
        if isinstance(handler, _StreamingCallbackHandler) and (is_async or not isinstance(handler, AsyncCallbackHandler)):
            found.append(handler)
    v2: list[BaseCallbackHandler] = [h for h in found if isinstance(h, _V2StreamingCallbackHandler)]
    return v2 or found


def relayed(
    config: RunnableConfig, relay_of: Callable[[list[BaseCallbackHandler]], RelayBase] | None, *, is_async: bool
) -> tuple[RunnableConfig, RelayBase | None] | None:
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
def unstreamed(*, is_async: bool) -> Iterator[None]:
    """Model calls made inside (the rewrite) do not stream to the client: what they say is
    screened first and reaches the client through the relay, if at all."""
    quiet = relayed(var_child_runnable_config.get() or {}, None, is_async=is_async)
    token = var_child_runnable_config.set(quiet[0]) if quiet is not None else None
    try:
        yield
    finally:
        if token is not None:
            reset_var(var_child_runnable_config, token)


def reset_var(var: ContextVar[Any], token: Any) -> None:
    try:
        var.reset(token)
    except ValueError:  # reset from another context (a generator resumed elsewhere): restore by value
        var.set(token.old_value if token.old_value is not token.MISSING else None)


__all__ = [
    "ARelay",
    "AScreenText",
    "AV2Relay",
    "Relay",
    "RelayBase",
    "ScreenText",
    "Session",
    "V2Relay",
    "on_the_wire",
    "relayed",
    "reset_var",
    "unstreamed",
]
