"""Pure ASGI middlewares, outermost first: metrics with the access log, the Host and Origin
check, authentication, the request size limit.

Pure ASGI rather than `BaseHTTPMiddleware`: the body limit must stop reading a request as
soon as it is too large (a client announcing nothing, or lying in Content-Length, cannot
make the server hold more than the limit), authentication must answer before a body is read
at all, and none may get in a WebSocket's way.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import time
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from guardian.serve.metrics import ServeMetrics
from guardian.serve.runtime import Runtime, ServiceError

log = logging.getLogger("guardian.serve")

#: What an access-log line shows of a path: ids are at most 128 characters, so more is noise or an attack.
MAX_LOGGED_PATH = 200

_ESCAPED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def loggable(text: str, *, limit: int = MAX_LOGGED_PATH) -> str:
    """`text` safe for a log line: control, format and line-separator characters written as escapes
    (\\n, \\x1b, \\u2028; a backslash doubled, so an escape in the log always was one), and at most
    about `limit` characters. A decoded path is the client's to choose: `%0A` forged whole log lines
    and `%1B]0;...%07` set the title of the terminal that read the log."""
    out: list[str] = []
    size = 0
    for n, ch in enumerate(text):
        if size >= limit:
            out.append(f"...({len(text) - n} more characters)")
            break
        if ch in _ESCAPED:
            piece = _ESCAPED[ch]
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            code = ord(ch)
            piece = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
        else:
            piece = ch
        out.append(piece)
        size += len(piece)
    return "".join(out)


def error_json(
    status: int, code: str, message: str, *, headers: dict[str, str] | None = None
) -> tuple[dict[str, Any], bytes]:
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"),
                    *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items())],
    }
    return start, json.dumps({"error": code, "message": message, "detail": None}).encode()


async def refuse(scope: Scope, receive: Receive, send: Send, error: ServiceError) -> None:
    """Answer `error` as the JSON error body, on HTTP or instead of a WebSocket's upgrade.

    A WebSocket gets the HTTP answer where the server can send one before the upgrade (uvicorn
    can), else it is closed with 1008 (policy violation) and the sentence as its reason."""
    start, body = error_json(error.status, error.code, error.message, headers=error.headers)
    if scope["type"] == "http":
        await send(start)
        await send({"type": "http.response.body", "body": body})
        return
    await receive()  # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({**start, "type": "websocket.http.response.start"})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})


def address_of(scope: Scope) -> str | None:
    """The client's network address (uvicorn has already applied a trusted proxy's X-Forwarded-For)."""
    client = scope.get("client")
    return str(client[0]) if client else None


# --- Host and Origin ----------------------------------------------------------------------------

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_WILDCARD_BINDS = ("", "0.0.0.0", "::")


def host_name(authority: str) -> str | None:
    """The name in a Host header ('name', 'name:port', '[v6]:port'), lower case, without port or
    final dot; None when it is not one."""
    value = authority.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1:]
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        name = value[1:end]
    elif value.count(":") == 1:
        name, _, port = value.partition(":")
        if not port.isdigit():
            return None
    else:
        name = value  # a name, or a bare IPv6 address (not valid in Host, but not a foreign name either)
    name = name.rstrip(".")
    return name or None


def _is_ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class HostNames:
    """The names this service answers to: loopback, the address it is bound to, `[serve] allowed_hosts`.

    DNS rebinding points a name the attacker owns at 127.0.0.1 so that their web page may call
    a loopback service as its own origin; its requests then say `Host: attacker.example`, which
    is on no list here. An IP address in Host cannot be rebound, so a service bound to every
    address (0.0.0.0, ::) answers to any address of the machine, but still to no other name.
    """

    names: frozenset[str]
    any_name: bool = False
    any_address: bool = False

    @classmethod
    def of(cls, *, bind_host: str, allowed: Iterable[str]) -> HostNames:
        allowed = [a.strip().lower() for a in allowed]
        bind = bind_host.strip().lower().removeprefix("[").removesuffix("]")
        names = {*_LOOPBACK_NAMES, *(a for a in allowed if a != "*")}
        if bind not in _WILDCARD_BINDS:
            names.add(bind.rstrip("."))
        return cls(frozenset(names), any_name="*" in allowed, any_address=bind in _WILDCARD_BINDS)

    def allows(self, name: str) -> bool:
        if self.any_name or name in self.names:
            return True
        address = _is_ip(name)
        return address is not None and (address.is_loopback or self.any_address)


class TrustedHosts:
    """Refuse (403) a request whose Host, or whose Origin (sent by browsers), names a host this
    service is not: without it, with no tokens configured, any web page its user opened could
    post turns, read conversations and open WebSockets through a rebound name or cross-origin.

    A request without Host (HTTP/1.0) or without Origin (every non-browser client) passes: a
    browser always sends Host, and sends Origin on cross-origin requests and every WebSocket.
    """

    def __init__(self, app: ASGIApp, *, hosts: HostNames) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.hosts.any_name:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        if host is not None:
            name = host_name(host)
            if name is None or not self.hosts.allows(name):
                await refuse(scope, receive, send, ServiceError(
                    403, "forbidden_host",
                    f"this service does not answer to the host {loggable(host, limit=80)}; "
                    "if that is its name, add it to [serve] allowed_hosts"))
                return
        origin = headers.get("origin")
        if origin is not None and not self._allows_origin(origin):
            await refuse(scope, receive, send, ServiceError(
                403, "forbidden_origin",
                f"requests from web pages at {loggable(origin, limit=80)} are refused; "
                "add that page's host to [serve] allowed_hosts to allow them"))
            return
        await self.app(scope, receive, send)

    def _allows_origin(self, origin: str) -> bool:
        """An origin is 'scheme://host[:port]'; 'null' (a sandboxed frame, a file) is nobody's."""
        try:
            parts = urlsplit(origin.strip())
            name, _port = parts.hostname, parts.port  # the port raises ValueError when it is not one
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not name:
            return False
        return self.hosts.allows(name.rstrip("."))


# --- authentication -----------------------------------------------------------------------------


class Authenticated:
    """Check the token and the rate limits of every HTTP request under /v1/ before anything else.

    FastAPI parses a JSON body before it runs any dependency, so a malformed body answered 422
    to a client without a token, telling it about the endpoint; here an unauthenticated request
    gets 401 (or 429) whatever its body, without a byte of the body being read. The client's id
    is left in the request's state for the routes (`client_of`) and the access log.
    """

    def __init__(self, app: ASGIApp, *, runtime: Runtime) -> None:
        self.app = app
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        try:
            client = self.runtime.admit(Headers(scope=scope).get("authorization"), address=address_of(scope))
        except ServiceError as exc:
            await refuse(scope, receive, send, exc)
            return
        scope.setdefault("state", {})["client"] = client
        await self.app(scope, receive, send)


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


def _template(scope: Scope) -> str:
    """The route template of a request refused before routing (a foreign host 403, an unauthenticated
    401, a large body 413), so its count lands on its route as it did when the route refused it;
    'unmatched' when no route has the path."""
    app = scope.get("app")
    for route in getattr(getattr(app, "router", None), "routes", ()):
        match, _ = route.matches(scope)
        if match != Match.NONE:
            return str(getattr(route, "path", "unmatched"))
    return "unmatched"


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
            route = getattr(scope.get("route"), "path", None) or _template(scope)
            method = scope.get("method", "WS")
            code = str(status[0] or (403 if scope["type"] == "websocket" else 500))
            self.metrics.requests.labels(method, route, code).inc()
            if scope["type"] == "http":
                self.metrics.latency.labels(method, route).observe(elapsed)
            if code.startswith("5"):
                self.metrics.errors.labels("service").inc()
            client = scope.get("state", {}).get("client", "-")
            log.info("%s %s %s %.1f ms client=%s", loggable(str(method), limit=20), loggable(str(scope.get("path", ""))),
                     code, elapsed * 1000, client)
