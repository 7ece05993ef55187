"""WS /v1/conversations/{id}/events with a real WebSocket client."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
import websockets

from tests.serve.conftest import AUTH, TOKEN, Server

pytestmark = [pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]


async def _until(ws: websockets.ClientConnection, kind: str, *, timeout: float = 30) -> list[dict]:
    seen = []
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        seen.append(event)
        if event["type"] == kind:
            return seen


async def test_push_turns_and_receive_the_monitors_events(server: Server) -> None:
    cid = "ws-" + uuid.uuid4().hex[:8]
    async with websockets.connect(f"{server.ws_url}/v1/conversations/{cid}/events", additional_headers=AUTH) as ws:
        await ws.send(json.dumps({"speaker": "Daniel", "text": "I never said that. You're overreacting, as usual."}))
        events = await _until(ws, "assessment")
        types = [e["type"] for e in events]
        assert types[0] == "turn"
        assert "finding" in types
        assert events[0]["turn"]["text"].startswith("I never said that")
        assert events[-1]["turn"] == 0
        # a turn posted over HTTP reaches the stream too
        import httpx

        async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
            posted = await http.post(f"/v1/conversations/{cid}/turns", json={"speaker": "Maya", "text": "You did."})
        events = await _until(ws, "assessment")
        assert events[0]["type"] == "turn" and events[0]["turn"]["index"] == 1
        assert events[-1] == posted.json()
        # a bad message is an input error; the stream goes on
        await ws.send("{not json")
        error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert error["type"] == "error" and error["kind"] == "input"
        await ws.send(json.dumps({"speaker": "A"}))
        error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert error["kind"] == "input" and "text" in error["message"]
        await ws.send(json.dumps({"speaker": "A", "text": "x" * 20_001}))
        error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert "max_turn_chars" in error["message"]
        # an idempotent retry answers the stored assessment again, counted once
        await ws.send(json.dumps({"speaker": "A", "text": "Again.", "idempotency_key": "w1"}))
        first = (await _until(ws, "assessment"))[-1]
        await ws.send(json.dumps({"speaker": "A", "text": "Again.", "idempotency_key": "w1"}))
        replay = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert replay == first
        assert first["turn"] == 2


async def test_a_stream_needs_a_token(server: Server) -> None:
    url = f"{server.ws_url}/v1/conversations/ws-refused/events"
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(url):
            pass
    assert refused.value.response.status_code == 401
    async with websockets.connect(f"{url}?token={TOKEN}") as ws:  # browsers cannot set headers
        await ws.send(json.dumps({"speaker": "A", "text": "hello"}))
        assert (await _until(ws, "assessment"))[-1]["turn"] == 0
    with pytest.raises(websockets.InvalidStatus) as bad_id:
        async with websockets.connect(f"{server.ws_url}/v1/conversations/bad%20id/events", additional_headers=AUTH):
            pass
    assert bad_id.value.response.status_code == 422
