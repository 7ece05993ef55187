"""A scripted OpenAI-compatible endpoint on 127.0.0.1 for failure tests.

It speaks just enough of `/v1/chat/completions` for the real `ChatOpenAI` client:
each request takes the next scripted reply (an HTTP status with a body, a reply
text, or a delay longer than the client's timeout). Requests are recorded, so
tests can check what was sent (retries, `response_format`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    content: str | None = None  # assistant text for a 200
    delay_s: float = 0.0
    body: str | None = None  # raw body for non-200 replies
    reject_response_format: bool = False  # 400 if the request asks for response_format


@dataclass
class Stub:
    replies: list[Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""

    def next(self) -> Reply:
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            stub.requests.append(request)
            reply = stub.next()
            if reply.delay_s:
                time.sleep(reply.delay_s)
            if reply.reject_response_format and "response_format" in request:
                self._send(400, json.dumps({"error": {"message": "response_format is not supported", "type": "invalid_request_error"}}))
                return
            if reply.status != 200:
                self._send(reply.status, reply.body or json.dumps({"error": {"message": f"status {reply.status}"}}))
                return
            body = {
                "id": "chatcmpl-stub",
                "object": "chat.completion",
                "created": 0,
                "model": request.get("model", "stub"),
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply.content or ""}}
                ],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            }
            self._send(200, json.dumps(body))

        def _send(self, status: int, body: str) -> None:
            data = body.encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                pass

    return Handler


@contextmanager
def serve(replies: list[Reply]) -> Iterator[Stub]:
    stub = Stub(list(replies))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    server.daemon_threads = True
    stub.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
