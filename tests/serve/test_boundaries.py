"""The service's trust boundaries (issue 47 item 6): what a hostile client or web page can make
it do (the files it leaves: test_permissions.py). Most run the app in process (Starlette's TestClient, a key-phrases monitor, a private
SQLite file: ready at once); the Host/Origin and access-log checks also run once against the
real uvicorn server, whose WebSocket refusal and log file are what an attacker meets."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from starlette.testclient import TestClient, WebSocketDenialResponse
from websockets.typing import Origin

from guardian.config import ServeSettings
from guardian.detectors import registry
from guardian.serve.app import create_app
from guardian.serve.auth import hash_token
from guardian.serve.state import SQLiteStore
from tests.serve.conftest import AUTH, TOKEN, Server

pytestmark = [pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]

LOCAL = "http://127.0.0.1:8787"


@contextmanager
def served(tmp_path: Path, *, base_url: str = LOCAL, client: tuple[str, int] = ("127.0.0.1", 50000),
           **settings: Any) -> Iterator[TestClient]:
    """The app in process with `[serve]` settings, its detectors loaded (key phrases only)."""
    settings.setdefault("rate_per_s", 0)
    config = ServeSettings(**settings)
    store = SQLiteStore(tmp_path / f"serve-{uuid.uuid4().hex[:6]}.sqlite3")
    app = create_app(config, store=store, detectors=[registry.create("keyphrases")])
    with TestClient(app, base_url=base_url, client=client) as http:
        deadline = time.monotonic() + 30
        while app.state.guardian.status != "ok":
            assert time.monotonic() < deadline, app.state.guardian.failure
            time.sleep(0.01)
        yield http


def _one_sentence(answer: Any) -> str:  # an httpx response (TestClient's or httpx's)
    message = answer.json()["message"]
    assert isinstance(message, str) and message and "\n" not in message
    assert message.count(". ") == 0, message
    return message


# --- 1. the access log ------------------------------------------------------------------------


def test_the_access_log_escapes_control_characters_and_bounds_the_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    forged = "/v1/conversations/x%0A2026-01-01%2000:00:00%20INFO%20guardian.serve:%20GET%20/admin%20200"
    escape = "/v1/conversations/%1B]0;pwned%07%1B[2J%C2%9B%E2%80%A8"
    long = "/v1/" + "a" * 5000
    caplog.set_level(logging.INFO, logger="guardian.serve")
    with served(tmp_path) as http:
        for path in (forged, escape, long):
            http.get(path)
    lines = [r.getMessage() for r in caplog.records if r.name == "guardian.serve" and r.getMessage().startswith("GET ")]
    assert len(lines) == 3, lines
    for line in lines:
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in line), repr(line)
        assert len(line) < 400, len(line)
    assert "x\\n2026-01-01" in lines[0]
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x9b\\u2028" in lines[1]


# --- 2. Host and Origin (DNS rebinding) --------------------------------------------------------


def test_a_foreign_host_or_origin_is_refused_without_tokens(tmp_path: Path) -> None:
    turn = {"speaker": "A", "text": "hello"}
    with served(tmp_path) as http:
        rebound = http.get("/healthz", headers={"Host": "attacker.example:8787"})
        rebound_post = http.post("/v1/conversations/c1/turns", json=turn, headers={"Host": "attacker.example"})
        cross = http.post("/v1/conversations/c1/turns", json=turn, headers={"Origin": "http://attacker.example"})
        null_origin = http.post("/v1/screen", json={"turns": [turn]}, headers={"Origin": "null"})
        fine = [
            http.get("/healthz", headers={"Host": host}).status_code
            for host in ("localhost", "localhost:8787", "127.0.0.1:1234", "[::1]:8787", "LOCALHOST.")
        ]
        same_site = http.post("/v1/conversations/c1/turns", json=turn, headers={"Origin": "http://localhost:3000"})
        with pytest.raises(WebSocketDenialResponse) as refused_ws, http.websocket_connect(
            "ws://127.0.0.1:8787/v1/conversations/c2/events", headers={"Origin": "https://attacker.example"}
        ):
            pass
        with http.websocket_connect("ws://127.0.0.1:8787/v1/conversations/c3/events",
                                    headers={"Origin": "http://127.0.0.1:8787"}) as ws:
            ws.send_text(json.dumps(turn))
            assert json.loads(ws.receive_text())["type"] == "turn"
    for answer in (rebound, rebound_post):
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"] == "forbidden_host"
        assert "allowed_hosts" in _one_sentence(answer)
    for answer in (cross, null_origin):
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"] == "forbidden_origin"
        assert "allowed_hosts" in _one_sentence(answer)
    assert fine == [200] * 5
    assert same_site.status_code == 200
    assert refused_ws.value.status_code == 403
    assert refused_ws.value.json()["error"] == "forbidden_origin"


def test_allowed_hosts_and_the_bind_host_extend_the_loopback_names(tmp_path: Path) -> None:
    with served(tmp_path, host="guardian.internal", allowed_hosts=("chat.example.org",)) as http:
        named = [http.get("/healthz", headers={"Host": h}).status_code
                 for h in ("guardian.internal:8787", "chat.example.org", "localhost", "evil.example.org")]
        origin = http.get("/healthz", headers={"Origin": "https://chat.example.org"})
    assert named == [200, 200, 200, 403]
    assert origin.status_code == 200
    with served(tmp_path, host="0.0.0.0") as http:  # every address of the machine: IP literals, never a name
        wildcard = [http.get("/healthz", headers={"Host": h}).status_code
                    for h in ("10.1.2.3:8787", "[fd00::1]:8787", "attacker.example")]
    assert wildcard == [200, 200, 403]
    with served(tmp_path, allowed_hosts=("*",)) as http:
        assert http.get("/healthz", headers={"Host": "anything.example"}).status_code == 200
    assert ServeSettings(allowed_hosts=(" Chat.Example.org. ", "[fd00::1]")).allowed_hosts == ("chat.example.org", "fd00::1")
    for typo in ("https://chat.example.org", "chat.example.org:443", "[::1]:8787", "*.example.org", ""):
        with pytest.raises(ValueError, match="without scheme or port"):
            ServeSettings(allowed_hosts=(typo,))


async def test_the_real_server_refuses_a_rebound_host_and_a_foreign_websocket_origin(
    make_server: Callable[..., Server],
) -> None:
    srv = make_server(tokens=[])
    marker = uuid.uuid4().hex[:8]
    with httpx.Client(base_url=srv.url, timeout=30) as http:
        rebound = http.get("/readyz", headers={"Host": "attacker.example"})
        forged = http.get(f"/v1/conversations/{marker}%0AFORGED%20LINE%1B]0;title%07")
    assert rebound.status_code == 403
    assert rebound.json()["error"] == "forbidden_host"
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(f"{srv.ws_url}/v1/conversations/c1/events", origin=Origin("http://attacker.example")):
            pass
    assert refused.value.response.status_code == 403
    assert b"forbidden_origin" in refused.value.response.body
    async with websockets.connect(f"{srv.ws_url}/v1/conversations/c1/events", origin=Origin(srv.url)) as ws:
        await ws.send(json.dumps({"speaker": "A", "text": "hi"}))
        assert json.loads(await ws.recv())["type"] == "turn"
    assert forged.status_code == 422  # the id's pattern refuses it; the log line is what matters
    log = srv.log.read_bytes()
    assert b"\x1b" not in log and b"\x07" not in log
    assert not any(line.startswith(b"FORGED") for line in log.splitlines())
    assert f"{marker}\\nFORGED LINE\\x1b]0;title\\x07".encode() in log


# --- 3. authentication comes first ---------------------------------------------------------------


def test_an_unauthenticated_request_gets_401_whatever_its_body(tmp_path: Path) -> None:
    with served(tmp_path, tokens=(hash_token(TOKEN),), max_request_bytes=2048) as http:
        headers = {"content-type": "application/json"}
        malformed = http.post("/v1/conversations/c1/turns", content=b"{not json", headers=headers)
        invalid = http.post("/v1/conversations/c1/turns", json={"speaker": "A"})
        too_big = http.post("/v1/conversations/c1/turns", content=b"{" + b" " * 4096 + b"}", headers=headers)
        screen = http.post("/v1/screen", content=b"[[[", headers=headers)
        bad_id = http.post("/v1/conversations/has%20space/turns", content=b"{", headers=headers)
        wrong = http.post("/v1/screen", content=b"{", headers={**headers, "Authorization": "Bearer nope"})
        # with the token, the body is judged as before
        judged = http.post("/v1/conversations/c1/turns", content=b"{not json", headers={**headers, **AUTH})
    for answer in (malformed, invalid, too_big, screen, bad_id, wrong):
        assert answer.status_code == 401, (answer.request.url, answer.text)
        assert answer.json()["error"] == "unauthorized"
        assert answer.headers["www-authenticate"] == "Bearer"
    assert judged.status_code == 422


# --- 4. failed authentication is rate-limited per address -------------------------------------


def test_wrong_tokens_are_rate_limited_per_client_address(tmp_path: Path) -> None:
    settings: dict[str, Any] = {"tokens": (hash_token(TOKEN),), "auth_failure_rate_per_s": 0.01, "auth_failure_burst": 3}
    turn = {"speaker": "A", "text": "hi"}
    with served(tmp_path, **settings) as http:
        tries = [http.post("/v1/conversations/c1/turns", json=turn, headers={"Authorization": f"Bearer guess-{i}"})
                 for i in range(5)]
        # while the address is held back, even the right token waits: a guesser learns nothing
        right = http.post("/v1/conversations/c1/turns", json=turn, headers=AUTH)
        with pytest.raises(WebSocketDenialResponse) as socket, http.websocket_connect(
            "ws://127.0.0.1:8787/v1/conversations/c1/events?token=guess"
        ):
            pass
        other = TestClient(http.app, base_url=LOCAL, client=("127.0.0.2", 50000))  # the same app, another address
        elsewhere = other.post("/v1/conversations/c1/turns", json=turn, headers=AUTH)
    assert [t.status_code for t in tries] == [401, 401, 401, 429, 429]
    limited = tries[3]
    assert limited.json()["error"] == "rate_limited"
    assert int(limited.headers["retry-after"]) >= 1
    assert "authentication" in _one_sentence(limited)
    assert right.status_code == 429
    assert socket.value.status_code == 429
    assert elsewhere.status_code == 200, elsewhere.text


def test_failed_authentication_buckets_stay_bounded() -> None:
    from guardian.serve.auth import RateLimiter

    now = [0.0]
    limiter = RateLimiter(rate=1.0, burst=2, clock=lambda: now[0], max_clients=100)
    for i in range(1000):
        limiter.take(f"10.0.{i // 256}.{i % 256}")
        now[0] += 0.01
    assert limiter.clients <= 100
    assert limiter.wait("never-seen") == 0.0


# --- 5. the screen endpoint's turn cap ---------------------------------------------------------


def test_screen_refuses_more_turns_than_its_cap_in_one_sentence(tmp_path: Path) -> None:
    assert ServeSettings().max_screen_turns == 400
    turns = [{"speaker": f"S{i % 2}", "text": f"message number {i}"} for i in range(3000)]
    with served(tmp_path) as http:
        began = time.perf_counter()
        refused = http.post("/v1/screen", json={"turns": turns})
        took = time.perf_counter() - began
        at_cap = http.post("/v1/screen", json={"turns": turns[:400]})
    assert refused.status_code == 413, refused.text[:300]
    assert refused.json()["error"] == "too_many_turns"
    message = _one_sentence(refused)
    assert "3000" in message and "400" in message and "serve.max_screen_turns" in message
    assert took < 5.0, took
    assert at_cap.status_code == 200
    assert len(at_cap.json()["assessments"]) == 400
