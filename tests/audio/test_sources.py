"""Sources: files decoded and replayed, microphones through sounddevice (real and stand-in)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guardian.audio import sources
from guardian.audio.sources import (
    NO_MICROPHONE,
    FileSource,
    MicrophoneSource,
    decode_file,
    list_input_devices,
)
from guardian.errors import InputError
from guardian.eval.speech import SAMPLE_RATE, write_wav

DATA = Path(__file__).resolve().parent.parent / "data" / "speech"
sd = pytest.importorskip("sounddevice", reason="sounddevice needs libportaudio2 (bash scripts/setup.sh)")


def tone(seconds: float, hz: float = 440.0, rate: int = SAMPLE_RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


# --- files -------------------------------------------------------------------------------------


def test_mp3_is_decoded_to_16khz_mono() -> None:
    samples = decode_file(DATA / "85514499_composed_amanda_mark.mp3")
    assert samples.dtype == np.float32
    assert samples.shape[1] == 1
    assert len(samples) / SAMPLE_RATE == pytest.approx(23.0, abs=0.1)


def _encode(path: Path, codec: str) -> None:
    """Write one second of a 440 Hz tone with PyAV (the same FFmpeg that decodes)."""
    import av

    rate = 16_000
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(tone(1.0)[None, :], format="fltp", layout="mono")
        frame.sample_rate = rate
        resampler = av.AudioResampler(
            format=stream.codec_context.format, layout="mono", rate=stream.codec_context.sample_rate
        )
        for chunk in [*resampler.resample(frame), *resampler.resample(None)]:
            for packet in stream.encode(chunk):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


@pytest.mark.parametrize(("suffix", "codec"), [("m4a", "aac"), ("ogg", "libopus")])
def test_m4a_and_ogg_are_decoded(tmp_path: Path, suffix: str, codec: str) -> None:
    path = tmp_path / f"call.{suffix}"
    try:
        _encode(path, codec)
    except Exception as exc:  # an FFmpeg build without this encoder
        pytest.skip(f"cannot encode {codec} here: {exc}")
    samples = decode_file(path)
    assert len(samples) == pytest.approx(SAMPLE_RATE, abs=2000)
    spectrum = np.abs(np.fft.rfft(samples[2000:10000, 0]))
    assert np.argmax(spectrum) * SAMPLE_RATE / 8000 == pytest.approx(440, abs=4)


def test_stereo_channels_are_kept_apart(tmp_path: Path) -> None:
    left, right = tone(1.0, 300), np.zeros(SAMPLE_RATE, dtype=np.float32)
    write_wav(tmp_path / "call.wav", np.stack([left, right], axis=1))
    samples = decode_file(tmp_path / "call.wav", split_channels=True)
    assert samples.shape == (SAMPLE_RATE, 2)
    assert np.abs(samples[:, 0]).max() > 0.25
    assert np.abs(samples[:, 1]).max() < 1e-3


def test_channels_on_a_mono_file_is_one_clear_sentence(tmp_path: Path) -> None:
    write_wav(tmp_path / "mono.wav", tone(0.5))
    with pytest.raises(InputError, match="needs a stereo recording"):
        decode_file(tmp_path / "mono.wav", split_channels=True)


@pytest.mark.parametrize(
    ("name", "content"),
    [("broken.mp3", b"ID3\x03\x00garbage" * 50), ("notes.wav", b"this is text, not audio\n"), ("empty.ogg", b"")],
)
def test_unreadable_audio_is_an_input_error(tmp_path: Path, name: str, content: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        decode_file(path)
    message = str(info.value)
    assert name in message
    assert "\n" not in message


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such audio file"):
        decode_file(tmp_path / "nope.wav")
    with pytest.raises(InputError, match="no such audio file"):
        decode_file(tmp_path)


def test_realtime_replay_paces_by_the_clock(tmp_path: Path) -> None:
    write_wav(tmp_path / "a.wav", tone(1.0))
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    source = FileSource(tmp_path / "a.wav", realtime=True, clock=lambda: now[0], sleep=sleep)
    chunks = list(source.chunks())
    assert sum(len(c.samples) for c in chunks) == SAMPLE_RATE
    assert now[0] - 100.0 == pytest.approx(1.0, abs=1e-6)  # one second of audio took one second
    fast = FileSource(tmp_path / "a.wav", realtime=False, sleep=lambda s: pytest.fail("slept in --fast"))
    assert np.concatenate([c.samples for c in fast.chunks()]).shape == (SAMPLE_RATE, 1)


# --- microphones: the real PortAudio with no sound card ----------------------------------------


def _no_sound_card() -> bool:
    try:
        return not any(d["max_input_channels"] > 0 for d in sd.query_devices())
    except sd.PortAudioError:
        return True


@pytest.mark.skipif(not _no_sound_card(), reason="this machine has an input device")
def test_no_sound_card_is_one_clear_sentence() -> None:
    with pytest.raises(InputError) as info:
        next(MicrophoneSource().chunks())
    assert str(info.value) == NO_MICROPHONE
    assert list_input_devices() == []


def test_portaudio_error_on_open_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCard(np.zeros((SAMPLE_RATE, 1), dtype=np.float32))
    fake.install(monkeypatch)

    def refuse(**kwargs: Any) -> None:
        raise sd.PortAudioError("Device unavailable", -9985)

    monkeypatch.setattr(sd, "InputStream", refuse)
    with pytest.raises(InputError, match="could not open input device 'Stand-in mic'"):
        next(MicrophoneSource().chunks())


def test_unknown_device_name(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCard(np.zeros((10, 1), dtype=np.float32)).install(monkeypatch)
    with pytest.raises(InputError, match="guardian devices"):
        next(MicrophoneSource(device="no such thing").chunks())


# --- microphones: a stand-in InputStream delivering an array through our callback --------------


class FakeCard:
    """One input device; its InputStream plays `frames` through the callback, then goes silent
    (as an unplugged USB microphone does: no more callbacks)."""

    def __init__(self, frames: np.ndarray, *, rate: float = SAMPLE_RATE, refuse_16k: bool = False) -> None:
        self.frames, self.rate, self.refuse_16k = frames, rate, refuse_16k
        self.opened: dict[str, Any] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        info = {"name": "Stand-in mic", "index": 3, "max_input_channels": 2, "default_samplerate": self.rate, "hostapi": 0}
        card = self

        def query_devices(device: Any = None, kind: str | None = None) -> Any:
            if device is None and kind is None:
                return [info]
            if device not in (None, 3, "Stand-in mic"):
                raise ValueError(f"No input device matching {device!r}")
            return info

        def check_input_settings(**kwargs: Any) -> None:
            if card.refuse_16k and kwargs["samplerate"] == SAMPLE_RATE:
                raise sd.PortAudioError("Invalid sample rate", -9997)

        class Stream:
            def __init__(self, **kwargs: Any) -> None:
                card.opened = kwargs
                self.callback = kwargs["callback"]
                self.block = kwargs["blocksize"]
                self.thread = threading.Thread(target=self.play, daemon=True)
                self.stopped = False

            def play(self) -> None:
                data = card.frames
                for i in range(0, len(data), self.block):
                    if self.stopped:
                        return
                    block = data[i : i + self.block]
                    self.callback(block, len(block), None, sd.CallbackFlags())
                    time.sleep(0.0005)

            def start(self) -> None:
                self.thread.start()

            def stop(self) -> None:
                self.stopped = True

            def close(self) -> None:
                self.stopped = True

        monkeypatch.setattr(sd, "query_devices", query_devices)
        monkeypatch.setattr(sd, "query_hostapis", lambda: [{"name": "ALSA"}])
        monkeypatch.setattr(sd.default, "device", [3, -1])
        monkeypatch.setattr(sd, "check_input_settings", check_input_settings)
        monkeypatch.setattr(sd, "InputStream", Stream)


def test_capture_delivers_every_frame_then_reports_the_vanished_device(monkeypatch: pytest.MonkeyPatch) -> None:
    signal = tone(2.0)[:, None]
    card = FakeCard(signal)
    card.install(monkeypatch)
    source = MicrophoneSource(device="3", stall_timeout_s=0.3)
    got: list[np.ndarray] = []

    def capture() -> None:
        for chunk in source.chunks():
            got.append(chunk.samples)

    with pytest.raises(InputError, match="stopped delivering audio") as info:
        capture()
    assert "Stand-in mic" in str(info.value)
    assert card.opened["samplerate"] == SAMPLE_RATE
    assert card.opened["dtype"] == "float32"
    np.testing.assert_array_equal(np.concatenate(got), signal)


def test_a_device_that_refuses_16khz_is_resampled(monkeypatch: pytest.MonkeyPatch) -> None:
    card = FakeCard(tone(2.0, 440, rate=48_000)[:, None], rate=48_000, refuse_16k=True)
    card.install(monkeypatch)
    got = []

    def capture() -> None:
        for chunk in MicrophoneSource(stall_timeout_s=0.3).chunks():
            got.append(chunk.samples[:, 0])

    with pytest.raises(InputError):
        capture()
    assert card.opened["samplerate"] == 48_000
    audio = np.concatenate(got)
    assert len(audio) == pytest.approx(2 * SAMPLE_RATE, abs=400)
    spectrum = np.abs(np.fft.rfft(audio[2000:18000]))
    assert np.argmax(spectrum) * SAMPLE_RATE / 16000 == pytest.approx(440, abs=2)


def test_list_devices_with_a_card(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCard(np.zeros((10, 1), dtype=np.float32)).install(monkeypatch)
    (device,) = list_input_devices()
    assert device.name == "Stand-in mic"
    assert device.is_default


def test_stop_ends_a_live_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCard(tone(5.0)[:, None]).install(monkeypatch)
    source = MicrophoneSource(stall_timeout_s=5)
    n = 0
    for _ in source.chunks():
        n += 1
        if n == 3:
            source.close()
    assert n in (3, 4)


def test_missing_portaudio_library_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def fake_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(InputError, match="libportaudio2"):
        sources._sounddevice()
