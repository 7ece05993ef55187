"""Two pure ASGI middlewares: the request size limit, and metrics with the access log.

Pure ASGI rather than `BaseHTTPMiddleware`: the body limit must stop reading a request as
soon as it is too large (a client announcing nothing, or lying in Content-Length, cannot
make the server hold more than the limit), and neither may get in a WebSocket's way.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from guardian.serve.metrics import ServeMetrics

log = logging.getLogger("guardian.serve")


def error_json(status: int, code: str, message: str) -> tuple[dict[str, Any], bytes]:
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json")],
    }
    return start, json.dumps({"error": code, "message": message, "detail": None}).encode()


class BodyLimit:
    """Refuse (413) a request body larger than `max_bytes`, announced or streamed."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        announced = dict(scope.get("headers") or []).get(b"content-length")
        if announced is not None and announced.isdigit() and int(announced) > self.max_bytes:
            await self._refuse(send)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break
        replay = iter(messages)

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)

    async def _refuse(self, send: Send) -> None:
        start, body = error_json(
            413, "too_large", f"the request body is larger than {self.max_bytes} bytes (serve.max_request_bytes)"
        )
        await send(start)
        await send({"type": "http.response.body", "body": body})


class Observed:
    """Count and time every request by its route template (never the raw path: ids are
    unbounded), and log one line per request without bodies or query strings."""

    def __init__(self, app: ASGIApp, *, metrics: ServeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = [0]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "websocket.accept":
                status[0] = 101
            elif message["type"] == "websocket.http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            status[0] = status[0] or 500
            raise
        finally:
            elapsed = time.perf_counter() - began
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope.get("method", "WS")
            code = str(status[0] or (403 if scope["type"] == "websocket" else 500))
            self.metrics.requests.labels(method, route, code).inc()
            if scope["type"] == "http":
                self.metrics.latency.labels(method, route).observe(elapsed)
            if code.startswith("5"):
                self.metrics.errors.labels("service").inc()
            client = scope.get("state", {}).get("client", "-")
            log.info("%s %s %s %.1f ms client=%s", method, scope.get("path", ""), code, elapsed * 1000, client)
