"""`WS /v1/calls/{id}/audio`: 16 kHz mono s16le PCM in; transcripts with speakers and assessments out.

Each call is the `guardian listen` pipeline (`guardian.audio.listen.build_pipeline`, the same
VAD, Whisper and speaker settings) with a source fed by the WebSocket: its own VAD segmenter
and its own speaker clustering, while the Whisper model and the voice encoder are loaded
once and shared by every call. A call's turns go through the same path as typed turns
(`Conversations.add_turn`, source "audio"): stored, assessed, and on the call's event stream.

Protocol: binary messages are PCM frames (any length, an even number of bytes); the text
message `{"type": "end"}` ends the call: speech still open is transcribed and assessed, then
`{"type": "end", "turns": N}` is sent and the socket closed. Everything the server sends is
JSON: the monitor's events of the call (turn, finding, assessment, error), as on
`/v1/conversations/{id}/events`. A client that sends faster than real time is slowed by
back-pressure (at most BUFFER_S seconds of audio wait), never dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
from collections.abc import Iterator

import numpy as np
from fastapi import FastAPI, WebSocket, WebSocketDisconnect

from guardian.audio.pipeline import AudioError, TurnHeard
from guardian.audio.sources import BLOCK, AudioChunk
from guardian.audio.vad import SAMPLE_RATE
from guardian.serve.conversations import Conversations
from guardian.serve.runtime import Runtime
from guardian.serve.schemas import TurnIn
from guardian.serve.streams import EventPipe, admit_socket, input_error

#: Seconds of audio a call may have waiting for the pipeline before the socket stops being read.
BUFFER_S = 30.0


class PushSource:
    """An AudioSource whose samples are pushed (from the WebSocket), not read from a device."""

    name = "websocket"
    channels = 1
    realtime = True

    def __init__(self, *, buffer_s: float = BUFFER_S) -> None:
        self._queue: queue.Queue[np.ndarray | None] = queue.Queue()
        self._buffered = 0
        self._limit = int(buffer_s * SAMPLE_RATE)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def full(self) -> bool:
        return self._buffered >= self._limit

    def push(self, pcm: bytes) -> None:
        """s16le mono frames; the samples the pipeline sees are exactly those a decoded file gives."""
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        with self._lock:
            self._buffered += len(samples)
        self._queue.put(samples)

    def chunks(self) -> Iterator[AudioChunk]:
        """Blocks of BLOCK samples whatever the frame sizes, as a replayed file gives them: the
        VAD then sees a call exactly as `guardian listen --audio` sees the same recording."""
        offset = 0
        pending = np.zeros(0, dtype=np.float32)
        while True:
            samples = self._queue.get()
            if samples is None:
                break
            with self._lock:
                self._buffered -= len(samples)
            pending = np.concatenate([pending, samples])
            whole = len(pending) - len(pending) % BLOCK
            for start in range(0, whole, BLOCK):
                yield AudioChunk(pending[start : start + BLOCK, None], (offset + start) / SAMPLE_RATE)
            offset += whole
            pending = pending[whole:]
        if len(pending):
            yield AudioChunk(pending[:, None], offset / SAMPLE_RATE)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)


class CallHub:
    """The models every call shares, and the calls open now."""

    def __init__(self, conversations: Conversations) -> None:
        from guardian.audio.speakers import SpeakerEncoder
        from guardian.audio.transcribe import Transcriber
        from guardian.config import settings

        audio = settings().audio
        self.conversations = conversations
        self.transcriber = Transcriber(
            audio.whisper_model, cpu_threads=audio.cpu_threads, language=audio.language,
            fitted_window=audio.encoder_window == "fitted",
        )
        self.encoder = SpeakerEncoder()
        self.open = 0
        self._loaded = asyncio.Lock()
        self._ready = False
        self._sources: set[PushSource] = set()

    async def warm_up(self) -> None:
        """Load Whisper and the voice encoder once (the first call waits for them)."""
        async with self._loaded:
            if not self._ready:
                await asyncio.to_thread(self.transcriber.warm_up)
                await asyncio.to_thread(self.encoder.warm_up)
                self._ready = True

    async def run(self, websocket: WebSocket, call_id: str, pipe: EventPipe) -> None:
        from guardian.audio.listen import ListenOptions, build_pipeline

        source = PushSource()
        pipeline = build_pipeline(ListenOptions(), source=source, transcriber=self.transcriber, encoder=self.encoder)
        self._sources.add(source)
        turns = 0

        async def receive() -> None:
            try:
                while True:
                    message = await websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        return
                    if message.get("bytes") is not None:
                        data: bytes = message["bytes"]
                        if len(data) % 2:
                            await pipe.put(input_error(call_id, "PCM frames are 16-bit: send an even number of bytes"))
                            continue
                        source.push(data)
                        while source.full:  # back-pressure: stop reading until the pipeline catches up
                            await asyncio.sleep(0.02)
                    else:
                        text = message.get("text") or ""
                        try:
                            kind = json.loads(text).get("type")
                        except (ValueError, AttributeError):
                            kind = None
                        if kind == "end":
                            return
                        await pipe.put(input_error(call_id, 'send PCM as binary frames and {"type": "end"} to finish'))
            finally:
                source.close()

        async def transcribe() -> None:
            nonlocal turns
            async for event in pipeline.aevents():
                if isinstance(event, TurnHeard):
                    turn = event.turn
                    said = TurnIn(speaker=turn.speaker, text=turn.text, start=turn.start, end=turn.end)
                    await self.conversations.add_turn(call_id, said, idempotency_key=None, source="audio")
                    turns += 1
                elif isinstance(event, AudioError):
                    await pipe.put(input_error(call_id, event.message))

        async def call() -> None:
            reader = asyncio.create_task(receive())
            try:
                await transcribe()  # ends when the source is closed and every utterance is assessed
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                    await reader
            await pipe.put({"type": "end", "conversation_id": call_id, "turns": turns})
            await pipe.flush()
            with contextlib.suppress(RuntimeError):
                await websocket.close(code=1000)

        self.open += 1
        try:
            await pipe.run(call(), metrics=self.conversations.metrics)
        finally:
            self.open -= 1
            source.close()
            pipeline.stop()
            self._sources.discard(source)

    async def aclose(self) -> None:
        """Shutdown: end every call's input; speech already received is still assessed."""
        for source in list(self._sources):
            source.close()
        while self.open:
            await asyncio.sleep(0.05)


def add_call_routes(app: FastAPI) -> None:
    @app.websocket("/v1/calls/{call_id}/audio")
    async def call_audio(websocket: WebSocket, call_id: str) -> None:
        if await admit_socket(websocket, call_id) is None:
            return
        rt: Runtime = websocket.app.state.guardian
        conversations = rt.require()
        if rt.calls is None:
            rt.calls = CallHub(conversations)
        hub: CallHub = rt.calls
        await websocket.accept()
        pipe = EventPipe(websocket, conversations.monitor, call_id)
        rt.metrics.open_calls.inc()
        try:
            await hub.warm_up()
            await hub.run(websocket, call_id, pipe)
        except Exception as exc:
            rt.metrics.errors.labels("audio").inc()
            with contextlib.suppress(Exception):
                await websocket.send_text(json.dumps(input_error(call_id, f"the call failed: {exc}")))
                await websocket.close(code=1011)
        finally:
            rt.metrics.open_calls.dec()
