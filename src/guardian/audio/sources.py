"""Where audio comes from: a microphone (sounddevice) or a recording replayed.

Every source yields `AudioChunk`s of 16 kHz float32 samples shaped (frames,
channels) with their start time in the stream, so the rest of the pipeline never
knows whether a person is talking now or a file is being replayed. A recording
can be replayed in real time (what a live call would look like, latency included)
or as fast as the CPU allows (`--fast`, for batch screening and benchmarks).

Every failure a user can fix (no sound card, an unknown device, a device that
refuses 16 kHz and every fallback, a device unplugged mid-call, a file that is
missing or not audio) is raised as an InputError with one plain sentence.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from guardian.errors import InputError

SAMPLE_RATE = 16_000
BLOCK = 512


@dataclass(frozen=True, eq=False)
class AudioChunk:
    samples: np.ndarray  # float32, (frames, channels)
    start: float  # seconds since the source started


class AudioSource(Protocol):
    name: str
    channels: int
    realtime: bool

    def chunks(self) -> Iterator[AudioChunk]: ...

    def close(self) -> None: ...


# --- files -------------------------------------------------------------------------------------


def decode_file(path: str | Path, *, split_channels: bool = False) -> np.ndarray:
    """Decode wav/mp3/m4a/ogg/... with PyAV (faster-whisper's decoder) to 16 kHz (frames, channels)."""
    file = Path(path)
    if not file.is_file():
        raise InputError("no such audio file", source=str(path))
    import av
    from faster_whisper.audio import decode_audio

    try:
        with av.open(str(file), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise InputError("the file has no audio stream", source=str(path))
            channels = container.streams.audio[0].codec_context.channels
        if split_channels and channels < 2:
            raise InputError(
                "--channels needs a stereo recording (one party per channel), but this file is mono",
                source=str(path),
            )
        decoded = decode_audio(str(file), sampling_rate=SAMPLE_RATE, split_stereo=split_channels)
    except InputError:
        raise
    except (av.error.FFmpegError, OSError, ValueError, IndexError, EOFError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise InputError(f"cannot be decoded as audio ({reason})", source=str(path)) from None
    if split_channels:
        left, right = decoded
        samples = np.stack([left, right], axis=1).astype(np.float32)
    else:
        samples = np.asarray(decoded, dtype=np.float32)[:, None]
    if len(samples) == 0:
        raise InputError("the file contains no audio samples", source=str(path))
    return samples


class FileSource:
    """A recording replayed in real time (default) or as fast as possible."""

    def __init__(
        self,
        path: str | Path,
        *,
        split_channels: bool = False,
        realtime: bool = True,
        block: int = BLOCK,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.path = Path(path)
        self.name = self.path.name
        self.samples = decode_file(path, split_channels=split_channels)
        self.channels = self.samples.shape[1]
        self.realtime = realtime
        self.block = block
        self._clock, self._sleep = clock, sleep
        self._stop = threading.Event()

    @property
    def duration(self) -> float:
        return len(self.samples) / SAMPLE_RATE

    def chunks(self) -> Iterator[AudioChunk]:
        began = self._clock()
        for offset in range(0, len(self.samples), self.block):
            if self._stop.is_set():
                return
            chunk = self.samples[offset : offset + self.block]
            if self.realtime:
                due = began + (offset + len(chunk)) / SAMPLE_RATE
                wait = due - self._clock()
                if wait > 0:
                    self._sleep(wait)
            yield AudioChunk(chunk, offset / SAMPLE_RATE)

    def close(self) -> None:
        self._stop.set()


# --- microphones -------------------------------------------------------------------------------


def _sounddevice() -> ModuleType:
    try:
        import sounddevice
    except OSError:
        raise InputError(
            "the PortAudio library is missing, so no microphone can be opened; install libportaudio2 "
            "(`sudo apt-get install libportaudio2`) or replay a recording with --audio FILE"
        ) from None
    return sounddevice


@dataclass(frozen=True)
class InputDevice:
    index: int
    name: str
    channels: int
    default_samplerate: float
    is_default: bool
    hostapi: str


def list_input_devices() -> list[InputDevice]:
    """Devices with at least one input channel (what `guardian devices` prints)."""
    sd = _sounddevice()
    try:
        devices = sd.query_devices()
        default = sd.default.device[0]
        apis = sd.query_hostapis()
    except sd.PortAudioError as exc:
        raise InputError(f"the audio system could not list devices ({exc})") from None
    result = []
    for info in devices:
        if int(info["max_input_channels"]) > 0:
            api = apis[info["hostapi"]]["name"] if info["hostapi"] < len(apis) else ""
            result.append(
                InputDevice(
                    index=int(info["index"]),
                    name=str(info["name"]),
                    channels=int(info["max_input_channels"]),
                    default_samplerate=float(info["default_samplerate"]),
                    is_default=int(info["index"]) == default,
                    hostapi=str(api),
                )
            )
    return result


def _parse_device(device: str | int | None) -> str | int | None:
    if isinstance(device, str):
        device = device.strip()
        if device.isdigit():
            return int(device)
        return device or None
    return device


NO_MICROPHONE = (
    "no microphone found (the audio system reports no input device); plug one in, pick one from "
    "`guardian devices` with --device, or replay a recording with --audio FILE"
)


class MicrophoneSource:
    """A live input device through sounddevice's callback stream.

    PortAudio calls our callback on its own thread with each block; the block is
    copied into a queue and `chunks()` hands it on. If no block arrives for
    `stall_timeout_s` (the device was unplugged, or the driver stopped), the
    source raises an InputError instead of hanging.
    """

    def __init__(
        self,
        device: str | int | None = None,
        *,
        channels: int = 1,
        block: int = BLOCK,
        stall_timeout_s: float = 2.0,
    ) -> None:
        self.device = _parse_device(device)
        self.channels = channels
        self.realtime = True
        self.block = block
        self.stall_timeout_s = stall_timeout_s
        self.name = "microphone"
        self.overflows = 0
        self._stop = threading.Event()
        self._settings: tuple[Any, float] | None = None

    def _open_settings(self, sd: ModuleType) -> tuple[Any, float]:
        """The device (index or name) and a sample rate it accepts: 16 kHz, else its default."""
        try:
            info = sd.query_devices(self.device, "input")
        except ValueError as exc:
            raise InputError(f"{exc}; see `guardian devices` for the input devices") from None
        except sd.PortAudioError:
            raise InputError(NO_MICROPHONE) from None
        self.name = str(info["name"])
        if int(info["max_input_channels"]) < self.channels:
            raise InputError(
                f"input device {self.name!r} has {info['max_input_channels']} channel(s), "
                f"{self.channels} were asked for"
            )
        device = self.device if self.device is not None else int(info["index"])
        rates = [float(SAMPLE_RATE), float(info["default_samplerate"])]
        for rate in rates:
            try:
                sd.check_input_settings(device=device, channels=self.channels, dtype="float32", samplerate=rate)
            except (sd.PortAudioError, ValueError):
                continue
            return device, rate
        raise InputError(
            f"input device {self.name!r} refuses {SAMPLE_RATE} Hz and its default "
            f"{info['default_samplerate']:.0f} Hz sample rate with {self.channels} channel(s); pick another "
            "device with --device"
        )

    def check(self) -> None:
        """Find the device and a sample rate now, so a missing microphone fails before the TUI starts."""
        self._settings = self._open_settings(_sounddevice())

    def chunks(self) -> Iterator[AudioChunk]:
        sd = _sounddevice()
        device, rate = self._settings if self._settings is not None else self._open_settings(sd)
        self._settings = None
        blocks: queue.Queue[np.ndarray] = queue.Queue()

        def callback(indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
            if status and getattr(status, "input_overflow", False):
                self.overflows += 1
            blocks.put(np.array(indata, dtype=np.float32, copy=True).reshape(frames, -1))

        resampler = _Resampler(rate, self.channels)
        try:
            stream = sd.InputStream(
                device=device,
                channels=self.channels,
                samplerate=rate,
                dtype="float32",
                blocksize=round(self.block * rate / SAMPLE_RATE),
                callback=callback,
            )
            stream.start()
        except sd.PortAudioError as exc:
            raise InputError(f"could not open input device {self.name!r} ({exc})") from None
        produced = 0
        try:
            while not self._stop.is_set():
                try:
                    data = blocks.get(timeout=self.stall_timeout_s)
                except queue.Empty:
                    if self._stop.is_set():
                        return
                    raise InputError(
                        f"input device {self.name!r} stopped delivering audio for "
                        f"{self.stall_timeout_s:g} s (disconnected?); every turn so far is kept"
                    ) from None
                samples = resampler(data)
                if len(samples):
                    yield AudioChunk(samples, produced / SAMPLE_RATE)
                    produced += len(samples)
        finally:
            try:
                stream.stop()
                stream.close()
            except sd.PortAudioError:
                pass  # the device is already gone; nothing left to release

    def close(self) -> None:
        self._stop.set()


class _Resampler:
    """Streaming resampling to 16 kHz for devices that refuse it (soxr keeps filter state)."""

    def __init__(self, rate: float, channels: int) -> None:
        self._stream: Any = None
        if int(rate) != SAMPLE_RATE:
            import soxr  # type: ignore[import-untyped]  # librosa's resampler, no stubs

            self._stream = soxr.ResampleStream(rate, SAMPLE_RATE, channels, dtype="float32")

    def __call__(self, data: np.ndarray) -> np.ndarray:
        if self._stream is None:
            return data
        out = self._stream.resample_chunk(data)
        return np.asarray(out, dtype=np.float32).reshape(-1, data.shape[1])
