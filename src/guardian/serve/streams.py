"""`WS /v1/conversations/{id}/events`: push turns, receive the monitor's events as they happen.

The client sends turns as JSON (`{"speaker", "text", "start"?, "end"?, "idempotency_key"?}`),
and receives every event of the conversation in the `guardian watch --headless` schema
(turn, finding, assessment, error), including those of turns posted over HTTP meanwhile;
an assessment event also carries `api_version` and the conversation's `summary` after that
turn, exactly as the HTTP answer does (`conversations.answer`).
A turn pushed here goes through the same path as `POST .../turns` (stored before its
assessment is sent). A bad message is answered with an `error` event (kind `input`); the
stream goes on. A client too slow to read its events is disconnected (close code 1013)
rather than having events dropped silently.

Auth: `Authorization: Bearer <token>` on the upgrade request, or `?token=` for clients that
cannot set headers (browsers); the token never reaches the logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Coroutine
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from guardian.events import AssessmentReady, Event, to_dict
from guardian.monitor import Monitor
from guardian.serve.conversations import IdempotencyMismatch, answer, state_summary
from guardian.serve.metrics import ServeMetrics
from guardian.serve.runtime import Runtime, ServiceError, check_turn
from guardian.serve.schemas import StreamTurnIn, valid_id

#: Events a client may leave unread before it is disconnected.
MAX_UNREAD = 1000


def input_error(conversation_id: str, message: str) -> dict[str, Any]:
    return {"type": "error", "conversation_id": conversation_id, "time": time.time(), "turn": None,
            "kind": "input", "detector": None, "line": None, "message": message}


async def admit_socket(websocket: WebSocket, object_id: str) -> str | None:
    """Check the id, token and rate limit before accepting; refuse with an HTTP answer otherwise."""
    rt: Runtime = websocket.app.state.guardian
    try:
        if not valid_id(object_id):
            raise ServiceError(422, "invalid", "the id must be 1-128 letters, digits or . _ : -")
        client = rt.admit(websocket.headers.get("authorization"), token=websocket.query_params.get("token"),
                          address=websocket.client.host if websocket.client else None)
        rt.require()
    except ServiceError as exc:
        response = JSONResponse({"error": exc.code, "message": exc.message, "detail": None},
                                status_code=exc.status, headers=exc.headers)
        try:
            await websocket.send_denial_response(response)
        except RuntimeError:  # the server cannot send an HTTP answer to an upgrade: close instead
            await websocket.close(code=1008, reason=exc.message[:120])
        return None
    websocket.state.client = client
    return client


class EventPipe:
    """The monitor's events of one conversation, sent to one WebSocket in order.

    Events wait in a bounded queue; a client that leaves more than MAX_UNREAD unread is
    disconnected (1013) rather than having events dropped silently.
    """

    def __init__(self, websocket: WebSocket, monitor: Monitor, conversation_id: str) -> None:
        self.websocket = websocket
        self.monitor = monitor
        self.conversation_id = conversation_id
        self.unread: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=MAX_UNREAD)
        self.overflow = asyncio.Event()
        self._unsubscribe = monitor.subscribe(self._deliver)

    def _deliver(self, event: Event) -> None:
        if event.conversation_id != self.conversation_id:
            return
        data = to_dict(event)
        if isinstance(event, AssessmentReady):
            # the HTTP answer's shape: the monitor has recorded this turn before announcing it
            data = answer(data, state_summary(self.monitor.state(self.conversation_id)))
        try:
            self.unread.put_nowait(data)
        except asyncio.QueueFull:
            self.overflow.set()

    async def put(self, message: dict[str, Any]) -> None:
        await self.unread.put(message)

    async def flush(self) -> None:
        """Wait until every queued event has been sent."""
        while not self.unread.empty() and not self.overflow.is_set():
            await asyncio.sleep(0.01)

    async def _write(self) -> None:
        while True:
            await self.websocket.send_text(json.dumps(await self.unread.get(), ensure_ascii=False))

    async def run(self, reader: Coroutine[Any, Any, None], *, metrics: ServeMetrics) -> None:
        """Send events while `reader` handles what the client sends; ends when either side does."""
        tasks = [asyncio.create_task(reader), asyncio.create_task(self._write()),
                 asyncio.create_task(self.overflow.wait())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if tasks[2] in done:
                metrics.errors.labels("slow_client").inc()
                with contextlib.suppress(Exception):
                    await self.websocket.close(code=1013, reason="events were not read fast enough")
            reader_task = tasks[0]  # the writer failing means the client left: nothing to report
            if reader_task in done and not reader_task.cancelled():
                exc = reader_task.exception()
                if exc is not None and not isinstance(exc, WebSocketDisconnect | RuntimeError):
                    raise exc
        finally:
            self._unsubscribe()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def add_stream_routes(app: FastAPI) -> None:
    @app.websocket("/v1/conversations/{conversation_id}/events")
    async def conversation_events(websocket: WebSocket, conversation_id: str) -> None:
        client = await admit_socket(websocket, conversation_id)
        if client is None:
            return
        rt: Runtime = websocket.app.state.guardian
        conversations = rt.require()
        await websocket.accept()
        pipe = EventPipe(websocket, conversations.monitor, conversation_id)
        rt.metrics.open_streams.inc()

        async def read() -> None:
            while True:
                raw = await websocket.receive_text()
                try:
                    turn = StreamTurnIn.model_validate_json(raw)
                    check_turn(rt, turn)
                    wait = rt.limiter.take(client)
                    if wait > 0:
                        raise ServiceError(429, "rate_limited", f"too many turns for this token; retry in {wait:.2f} s")
                    result = await conversations.add_turn(conversation_id, turn, idempotency_key=turn.idempotency_key)
                except ValidationError as exc:
                    first = exc.errors()[0]
                    where = ".".join(str(p) for p in first["loc"]) or "message"
                    await pipe.put(input_error(conversation_id, f"{where}: {first['msg']}"))
                    continue
                except ServiceError as exc:
                    await pipe.put(input_error(conversation_id, exc.message))
                    continue
                except IdempotencyMismatch:
                    await pipe.put(input_error(conversation_id, "this idempotency_key was used for a different turn"))
                    continue
                if result.replayed:  # no events were produced: send the stored answer again
                    await pipe.put(result.response)

        try:
            await pipe.run(read(), metrics=rt.metrics)
        finally:
            rt.metrics.open_streams.dec()
