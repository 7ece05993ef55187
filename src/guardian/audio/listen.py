"""`guardian listen`: wire an audio source, the pipeline and the monitor to the TUI or JSON Lines.

The audio pipeline plays the part a transcript plays for `guardian watch`: its
turns (source "audio", with start/end seconds) go to the same Monitor, so the
same detectors, session log, events and sinks apply. Everything that can fail
because of the user's input (no microphone, an unreadable file, a missing model)
fails here, before the TUI takes the terminal, so the CLI prints one sentence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from guardian.audio.pipeline import AudioError, AudioEvent, AudioPipeline, TurnHeard
from guardian.audio.sources import AudioSource, FileSource, MicrophoneSource
from guardian.audio.speakers import (
    ChannelSpeakers,
    EmbeddingSpeakers,
    SpeakerAttributor,
    SpeakerEncoder,
)
from guardian.audio.transcribe import Transcriber
from guardian.audio.vad import VadConfig
from guardian.errors import InputError
from guardian.events import ErrorRaised, Event, to_dict
from guardian.monitor import Monitor
from guardian.watch import WatchSession, load_detectors
from guardian.watch_sources import Pacer, SourceItem


@dataclass(frozen=True, slots=True)
class ListenOptions:
    audio: Path | None = None
    fast: bool = False
    channels: bool = False
    device: str | None = None
    speakers: int | None = None
    model: str | None = None
    silence_s: float | None = None
    detectors: tuple[str, ...] | None = None
    log: Path | None = None
    no_log: bool = False


def build_pipeline(
    options: ListenOptions,
    *,
    source: AudioSource | None = None,
    transcriber: Transcriber | None = None,
    encoder: SpeakerEncoder | None = None,
) -> AudioPipeline:
    """Source, VAD settings, transcriber and speaker attribution from options over settings.

    `source`, `transcriber` and `encoder` are given by `guardian serve`: audio pushed over a
    WebSocket, and one Whisper model and one voice encoder shared by every call."""
    from guardian.config import settings

    audio = settings().audio
    if options.speakers is not None and options.speakers < 1:
        raise InputError("--speakers must be at least 1")
    if options.silence_s is not None and options.silence_s <= 0:
        raise InputError("--silence must be a positive number of seconds")
    if options.fast and options.audio is None:
        raise InputError("--fast replays a recording; give one with --audio FILE")
    if source is None and options.audio is not None:
        source = FileSource(options.audio, split_channels=options.channels, realtime=not options.fast)
    elif source is None:
        device = options.device if options.device is not None else audio.device
        microphone = MicrophoneSource(device, channels=2 if options.channels else 1)
        microphone.check()
        source = microphone
    speakers: SpeakerAttributor
    if options.channels:
        speakers = ChannelSpeakers()
    else:
        speakers = EmbeddingSpeakers(
            max_speakers=options.speakers or audio.speakers, threshold=audio.speaker_threshold, encoder=encoder
        )
    vad = VadConfig(
        threshold=audio.vad_threshold,
        neg_threshold=max(0.01, audio.vad_threshold - 0.15),
        silence_s=options.silence_s or audio.silence_s,
        max_utterance_s=audio.max_utterance_s,
    )
    transcriber = transcriber or Transcriber(
        options.model or audio.whisper_model,
        cpu_threads=audio.cpu_threads,
        language=audio.language,
        fitted_window=audio.encoder_window == "fitted",
    )
    early = audio.early_asr_s if audio.early_asr_s < vad.silence_s else None
    return AudioPipeline(source, transcriber=transcriber, speakers=speakers, vad=vad, early_asr_s=early)


class AudioWatchSession(WatchSession):
    """A WatchSession whose turns come from the audio pipeline (what the TUI and headless run)."""

    pipeline: AudioPipeline
    on_audio: Callable[[AudioEvent], None] | None = None

    async def pump(self, pacer: Pacer) -> int:
        count = 0
        async for event in self.pipeline.aevents():
            if self.on_audio is not None:
                with contextlib.suppress(Exception):
                    self.on_audio(event)
            if isinstance(event, TurnHeard):
                turn = event.turn
                await self.monitor.submit(
                    self.conversation_id, turn.speaker, turn.text, start=turn.start, end=turn.end, source="audio"
                )
                count += 1
            elif isinstance(event, AudioError):
                self.monitor.publish(
                    ErrorRaised(conversation_id=self.conversation_id, turn=None, kind="input", message=event.message)
                )
        return count

    def close(self) -> None:
        self.pipeline.stop()
        super().close()


def _pumped_by_the_pipeline(pacer: Pacer) -> AsyncIterator[SourceItem]:
    raise RuntimeError("AudioWatchSession.pump reads the audio pipeline, not a text source")


def prepare_listen(
    options: ListenOptions, *, monitor_factory: Callable[[list], Monitor] | None = None
) -> AudioWatchSession:
    """Open the source, load models and detectors; every user-fixable problem raises here."""
    from guardian.session_log import SessionHeader, SessionLog, default_log_path

    pipeline = build_pipeline(options)
    pipeline.transcriber.warm_up()
    if isinstance(pipeline.speakers, EmbeddingSpeakers) and pipeline.speakers.clustering.max_speakers > 1:
        pipeline.speakers.encoder.warm_up()
    detectors, problems = load_detectors(list(options.detectors) if options.detectors else None)
    monitor = monitor_factory(detectors) if monitor_factory is not None else Monitor(detectors)
    if options.audio is not None:
        label, conversation_id = str(options.audio), options.audio.stem
    else:
        label, conversation_id = f"microphone ({pipeline.source.name})", time.strftime("call-%Y%m%d-%H%M%S")
    log = None
    if not options.no_log:
        log = SessionLog(options.log or default_log_path(conversation_id)).open(
            SessionHeader(label, monitor.detector_names, time.time())
        )
        monitor.subscribe(log.write)
        for problem in problems:
            log.write(problem)
    session = AudioWatchSession(
        monitor=monitor,
        conversation_id=conversation_id,
        source_label=label,
        make_source=_pumped_by_the_pipeline,  # not None: None means typed chat to the TUI
        interval=0.0,
        mode="audio",
        log=log,
        problems=problems,
    )
    session.pipeline = pipeline
    return session


async def run_listen_headless(session: AudioWatchSession, *, out: IO[str] | None = None) -> int:
    """JSON Lines on stdout, the schema of `guardian watch --headless`; 2 when the source failed."""
    stream = out if out is not None else sys.stdout
    failed = False

    def emit(event: Event) -> None:
        nonlocal failed
        if isinstance(event, ErrorRaised) and event.kind == "input":
            failed = True
        with contextlib.suppress(BrokenPipeError):
            stream.write(json.dumps(to_dict(event), ensure_ascii=False) + "\n")
            stream.flush()

    for problem in session.problems:
        emit(problem)
    session.monitor.subscribe(emit)
    loop = asyncio.get_running_loop()

    def stop_listening() -> None:
        # First Ctrl-C: stop the source; speech already heard is still transcribed and
        # assessed, then the session ends normally. A second Ctrl-C interrupts at once.
        session.pipeline.stop()
        loop.remove_signal_handler(signal.SIGINT)

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
        loop.add_signal_handler(signal.SIGINT, stop_listening)
    try:
        await session.pump(Pacer())
        await session.monitor.drain()
        await session.monitor.aclose()
    except asyncio.CancelledError:
        pass
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGINT)
        session.close()
    return 2 if failed else 0
