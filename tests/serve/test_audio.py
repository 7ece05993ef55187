"""WS /v1/calls/{id}/audio: the bundled speech clips give the transcript `guardian listen --audio` gives."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import websockets

from guardian.audio.sources import decode_file
from tests.serve.conftest import AUTH, Server

pytestmark = [pytest.mark.slow, pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]

CLIPS = sorted((Path(__file__).resolve().parent.parent / "data" / "speech").glob("*.mp3"))


def _listen_turns(clip: Path, env: dict[str, str]) -> list[tuple[str, str, float, float]]:
    """What `guardian listen --audio CLIP` transcribes (replayed fast; the turns are the same)."""
    out = subprocess.run(
        [sys.executable, "-m", "guardian.cli", "listen", "--audio", str(clip), "--fast", "--headless", "--no-log",
         "-d", "keyphrases"],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    # listen sometimes aborts at interpreter exit ("terminate called without an active
    # exception", exit 134) after writing everything: judge it by its output being complete
    events = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    turns = [e["turn"]["index"] for e in events if e["type"] == "turn"]
    assessed = [e["turn"] for e in events if e["type"] == "assessment"]
    assert turns and assessed == turns, (out.returncode, out.stderr[-500:])
    return [(e["turn"]["speaker"], e["turn"]["text"], e["turn"]["start"], e["turn"]["end"])
            for e in events if e["type"] == "turn"]


async def _stream(server: Server, call_id: str, clip: Path, *, frame_ms: int = 100) -> list[dict]:
    pcm = (decode_file(clip)[:, 0] * 32768.0).round().clip(-32768, 32767).astype("<i2").tobytes()
    step = 16 * frame_ms * 2
    url = f"{server.ws_url}/v1/calls/{call_id}/audio"
    events = []
    async with websockets.connect(url, additional_headers=AUTH, max_size=None) as ws:
        async def send() -> None:
            for offset in range(0, len(pcm), step):
                await ws.send(pcm[offset : offset + step])
            await ws.send(json.dumps({"type": "end"}))

        sender = asyncio.create_task(send())
        async for raw in ws:
            event = json.loads(raw)
            events.append(event)
            if event["type"] == "end":
                break
        await sender
    return events


@pytest.mark.skipif(len(CLIPS) < 2, reason="the bundled speech clips (tests/data/speech) are missing")
def test_two_calls_at_once_transcribe_like_listen(server: Server) -> None:
    expected = {clip.name: _listen_turns(clip, server.env) for clip in CLIPS}

    async def both() -> list[list[dict]]:
        return await asyncio.gather(*(_stream(server, f"call-{n}", clip) for n, clip in enumerate(CLIPS)))

    results = asyncio.run(both())
    for clip, events in zip(CLIPS, results, strict=True):
        turns = [e["turn"] for e in events if e["type"] == "turn"]
        got = [(t["speaker"], t["text"], t["start"], t["end"]) for t in turns]
        assert got == expected[clip.name], clip.name
        assert len(got) >= 2
        assert all(t["source"] == "audio" for t in turns)
        assessments = [e for e in events if e["type"] == "assessment"]
        assert [a["turn"] for a in assessments] == list(range(len(got)))
        assert events[-1] == {"type": "end", "conversation_id": events[-1]["conversation_id"], "turns": len(got)}
        assert not [e for e in events if e["type"] == "error"]
    with server.client(headers=AUTH) as http:  # a call is a stored conversation like any other
        stored = http.get("/v1/conversations/call-0").json()
    assert [(t["speaker"], t["text"]) for t in stored["turns"]] == [g[:2] for g in expected[CLIPS[0].name]]


async def test_odd_frames_and_text_are_input_errors(server: Server) -> None:
    async with websockets.connect(f"{server.ws_url}/v1/calls/odd/audio", additional_headers=AUTH) as ws:
        await ws.send(b"\x00\x01\x02")
        assert "even number of bytes" in json.loads(await asyncio.wait_for(ws.recv(), 120))["message"]
        await ws.send("hello")
        assert json.loads(await asyncio.wait_for(ws.recv(), 30))["kind"] == "input"
        await ws.send(np.zeros(16000, dtype="<i2").tobytes())  # one second of silence: no turn
        await ws.send(json.dumps({"type": "end"}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 60)) == {"type": "end", "conversation_id": "odd", "turns": 0}
