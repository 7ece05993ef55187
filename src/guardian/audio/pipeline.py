"""Audio in, turns out: source -> VAD -> Whisper -> speaker, as a stream of events.

`AudioPipeline.events()` is a plain generator and `aevents()` its async twin, so
the same pipeline feeds the monitor behind the TUI, `guardian listen --headless`
and the benchmark. Besides turns it reports the input level (for a meter) and
the microphone state; these are frequent and may be coalesced by a slow
consumer, turns never are.

Errors: a source that fails mid-stream (device unplugged) does not lose speech
already heard — open utterances are cut and transcribed first, then an
`AudioError` event carries the one-sentence reason and the stream ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from guardian.audio.sources import AudioSource
from guardian.audio.speakers import SpeakerAttributor
from guardian.audio.transcribe import Transcriber, Transcript
from guardian.audio.vad import SAMPLE_RATE, Segmenter, Utterance, VadConfig
from guardian.conversation import Turn
from guardian.errors import GuardianError

MicState = Literal["listening", "speech", "stopped", "error"]


@dataclass(frozen=True, slots=True)
class TurnHeard:
    """A transcribed utterance.

    `latency_s`: end of speech -> text, in a live stream whose CPU keeps up: the
    silence hangover, or the transcription started early in the silence if that
    finishes later, plus speaker attribution. `waited_s`: wall time this pipeline
    actually waited for the text after the cut (measured, any mode).
    """

    turn: Turn
    channel: int
    speech_end: float
    decided: float
    cut: str
    compute_s: float
    latency_s: float
    waited_s: float = 0.0
    wall_time: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class LevelMeasured:
    """Input level per channel in dBFS (RMS over the last interval), for a level meter."""

    time: float
    levels_db: tuple[float, ...]
    speech: bool


@dataclass(frozen=True, slots=True)
class MicStateChanged:
    state: MicState
    source: str
    time: float


@dataclass(frozen=True, slots=True)
class AudioError:
    """The source failed; every turn heard before it has already been emitted."""

    message: str
    time: float


AudioEvent = TurnHeard | LevelMeasured | MicStateChanged | AudioError


@dataclass(frozen=True, slots=True)
class _Speculation:
    key: tuple[int, int, int]
    started: float
    future: Future[Transcript]


def _key(utterance: Utterance) -> tuple[int, int, int]:
    return (utterance.channel, round(utterance.start * SAMPLE_RATE), round(utterance.end * SAMPLE_RATE))


def level_db(samples: np.ndarray) -> float:
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if len(samples) else 0.0
    return max(-100.0, 20.0 * np.log10(rms)) if rms > 0 else -100.0


class AudioPipeline:
    """One audio source, one segmenter per channel, a shared transcriber and speaker attribution."""

    def __init__(
        self,
        source: AudioSource,
        *,
        transcriber: Transcriber,
        speakers: SpeakerAttributor,
        vad: VadConfig | None = None,
        level_interval_s: float = 0.1,
        first_index: int = 0,
        early_asr_s: float | None = 0.2,
    ) -> None:
        self.source = source
        self.transcriber = transcriber
        self.speakers = speakers
        self.vad = vad or VadConfig()
        self.level_interval_s = level_interval_s
        self._next_index = first_index
        self._stop = threading.Event()
        #: Start transcribing this far into a silence, before the hangover ends (None: off).
        self.early_asr_s = early_asr_s
        self._speculative: dict[int, _Speculation] = {}
        self._worker: ThreadPoolExecutor | None = None

    def stop(self) -> None:
        """Ask the stream to end (thread-safe); open speech is still transcribed."""
        self._stop.set()
        self.source.close()

    def events(self) -> Iterator[AudioEvent]:
        segmenters = [Segmenter(self.vad, channel=c) for c in range(self.source.channels)]
        yield MicStateChanged("listening", self.source.name, 0.0)
        speaking = False
        level_every = max(1, int(self.level_interval_s * SAMPLE_RATE))
        level_acc: list[np.ndarray] = []
        level_n = 0
        now = 0.0
        error: str | None = None
        try:
            for chunk in self.source.chunks():
                now = chunk.start + len(chunk.samples) / SAMPLE_RATE
                heard: list[Utterance] = []
                for segmenter in segmenters:
                    heard.extend(segmenter.push(chunk.samples[:, segmenter.channel]))
                level_acc.append(chunk.samples)
                level_n += len(chunk.samples)
                is_speaking = any(s.speaking for s in segmenters)
                if level_n >= level_every:
                    block = np.concatenate(level_acc)
                    levels = tuple(level_db(block[:, c]) for c in range(block.shape[1]))
                    yield LevelMeasured(now, levels, is_speaking)
                    level_acc, level_n = [], 0
                if is_speaking != speaking:
                    speaking = is_speaking
                    yield MicStateChanged("speech" if speaking else "listening", self.source.name, now)
                for utterance in sorted(heard, key=lambda u: u.decided):
                    yield from self._turn(utterance)
                if self.early_asr_s is not None:
                    for segmenter in segmenters:
                        self._speculate(segmenter.provisional(self.early_asr_s))
                if self._stop.is_set():
                    break
        except GuardianError as exc:
            error = str(exc)
        finally:
            if self._worker is not None:
                self._worker.shutdown(wait=False, cancel_futures=True)
                self._worker = None
        leftovers = [u for s in segmenters for u in s.flush()]
        for utterance in sorted(leftovers, key=lambda u: u.start):
            yield from self._turn(utterance)
        if error is not None:
            yield AudioError(error, now)
            yield MicStateChanged("error", self.source.name, now)
        else:
            yield MicStateChanged("stopped", self.source.name, now)

    def _speculate(self, utterance: Utterance | None) -> None:
        """Transcribe a provisional utterance in the background (one at a time, latest wins)."""
        if utterance is None:
            return
        current = self._speculative.get(utterance.channel)
        if current is not None and current.key == _key(utterance):
            return
        if current is not None:
            current.future.cancel()  # speech resumed: that guess is void (if not started yet)
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="guardian-asr")
        self._speculative[utterance.channel] = _Speculation(
            key=_key(utterance),
            started=utterance.decided,
            future=self._worker.submit(self.transcriber.transcribe, utterance.samples),
        )

    def _transcript(self, utterance: Utterance) -> tuple[Transcript, float]:
        """The text and when its transcription started in stream time (early if speculated)."""
        guess = self._speculative.pop(utterance.channel, None)
        if guess is not None and guess.key == _key(utterance) and not guess.future.cancelled():
            with contextlib.suppress(Exception):  # a failed guess is simply redone below
                return guess.future.result(), guess.started
        return self.transcriber.transcribe(utterance.samples), utterance.decided

    def _turn(self, utterance: Utterance) -> Iterator[TurnHeard]:
        waited = time.perf_counter()
        transcript, asr_started = self._transcript(utterance)
        if not transcript.text:
            return
        began = time.perf_counter()
        speaker = self.speakers.attribute(utterance.samples, channel=utterance.channel)
        attribution = time.perf_counter() - began
        compute = transcript.compute_s + attribution
        # Live model (exact when the CPU keeps up): text is ready when both the hangover has
        # passed and the transcription that started at `asr_started` has finished.
        ready = max(utterance.decided, asr_started + transcript.compute_s) + attribution
        turn = Turn(
            index=self._next_index,
            speaker=speaker,
            text=transcript.text,
            start=round(utterance.start, 3),
            end=round(utterance.end, 3),
            source="audio",
        )
        self._next_index += 1
        yield TurnHeard(
            turn=turn,
            channel=utterance.channel,
            speech_end=utterance.speech_end,
            decided=utterance.decided,
            cut=utterance.cut,
            compute_s=compute,
            latency_s=ready - utterance.speech_end,
            waited_s=time.perf_counter() - waited,
        )

    async def aevents(self, *, max_pending: int = 64) -> AsyncIterator[AudioEvent]:
        """The same events from a worker thread.

        Turns, states and errors are always delivered (they are few); level events
        are dropped while more than `max_pending` events wait for a slow consumer.
        Close the iterator (or stop the pipeline) to end it early.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[AudioEvent | None] = asyncio.Queue()
        failure: list[BaseException] = []
        gone = threading.Event()

        def put(event: AudioEvent | None) -> None:
            if gone.is_set() or (isinstance(event, LevelMeasured) and queue.qsize() > max_pending):
                return
            try:
                loop.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # the consumer's loop is closed
                gone.set()

        def work() -> None:
            try:
                for event in self.events():
                    put(event)
            except BaseException as exc:
                failure.append(exc)
            finally:
                put(None)

        thread = threading.Thread(target=work, name="guardian-audio", daemon=True)
        thread.start()
        try:
            while True:
                event = await queue.get()
                if event is None:
                    break
                yield event
        finally:
            self.stop()
            gone.set()
        if failure:
            raise failure[0]
