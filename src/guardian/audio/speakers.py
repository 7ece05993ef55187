"""Who said it: channel = speaker for stereo calls, voice embeddings on a mono mix.

Mono: each utterance gets a resemblyzer d-vector (its pretrained encoder ships in
the PyPI package, so nothing downloads) and is clustered online (see
OnlineClustering): at most `max_speakers` voices, a new one only for an utterance
less similar than `threshold` (cosine; 0.88, tuned on espeak-ng voices and the
shared clips by lab/audio_sweep.py) to every known voice. Names are
"Speaker 1", "Speaker 2", ... in order of first appearance.

A speaker change inside one utterance (two people talking with less than the
silence hangover between them, or over each other): the utterance is NOT split.
It is attributed as a whole to the voice whose centroid is closest to the
utterance's mean embedding — in practice the voice that fills most of it — and it
does not update that centroid when its 1.6 s partial embeddings disagree about
who is speaking, so one mixed utterance cannot drag a voice towards the other
one. Lowering `audio.silence_s` makes such merges rarer; stereo never has them.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types
import warnings
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol

import numpy as np

from guardian._env import apply_process_defaults
from guardian.errors import ModelUnavailable

SAMPLE_RATE = 16_000


class SpeakerAttributor(Protocol):
    """Names the speaker of one utterance (samples of its own channel)."""

    def attribute(self, samples: np.ndarray, *, channel: int) -> str: ...


def speaker_name(number: int) -> str:
    return f"Speaker {number}"


class ChannelSpeakers:
    """Stereo recordings of calls: channel i is one party, named "Speaker i+1" unless named."""

    def __init__(self, *, names: tuple[str, ...] = ()) -> None:
        self._names = names

    def attribute(self, samples: np.ndarray, *, channel: int) -> str:
        if channel < len(self._names):
            return self._names[channel]
        return speaker_name(channel + 1)


def _import_resemblyzer() -> Any:
    apply_process_defaults()  # one torch thread: resemblyzer imports torch
    with warnings.catch_warnings():  # resemblyzer imports scipy.ndimage.morphology (deprecated)
        warnings.simplefilter("ignore", DeprecationWarning)
        return _import_resemblyzer_bridged()


def _import_resemblyzer_bridged() -> Any:
    """Import resemblyzer, bridging webrtcvad's `import pkg_resources` on setuptools >= 81.

    webrtcvad (a resemblyzer dependency we never call: its VAD only trims silence
    in `preprocess_wav`) reads its own version through pkg_resources, which
    setuptools 81 removed. A minimal stand-in answers that one call and is
    removed again right after the import, so nothing else can mistake it for
    the real module.
    """
    try:
        return importlib.import_module("resemblyzer")
    except ModuleNotFoundError as exc:
        if exc.name != "pkg_resources":
            raise ModelUnavailable(
                "speaker attribution on a mono recording needs the resemblyzer package; "
                "reinstall guardian with `make setup`"
            ) from None
    shim = types.ModuleType("pkg_resources")

    class _Dist:
        def __init__(self, name: str) -> None:
            try:
                self.version = version(name)
            except PackageNotFoundError:
                self.version = "0"

    shim.get_distribution = _Dist  # type: ignore[attr-defined]
    sys.modules["pkg_resources"] = shim
    try:
        for name in [m for m in sys.modules if m == "resemblyzer" or m.startswith("resemblyzer.")]:
            del sys.modules[name]
        return importlib.import_module("resemblyzer")
    finally:
        if sys.modules.get("pkg_resources") is shim:
            del sys.modules["pkg_resources"]


class SpeakerEncoder:
    """resemblyzer's VoiceEncoder on CPU, loaded once on first use."""

    def __init__(self) -> None:
        self._encoder: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        with self._lock:
            if self._encoder is None:
                resemblyzer = _import_resemblyzer()
                try:
                    self._encoder = resemblyzer.VoiceEncoder(device="cpu", verbose=False)
                except Exception as exc:  # the package raises a bare Exception for missing weights
                    raise ModelUnavailable(
                        f"resemblyzer's voice encoder weights could not be loaded ({exc}); "
                        "reinstall the resemblyzer package"
                    ) from None
            return self._encoder

    def warm_up(self) -> None:
        """Load the weights and embed one second of noise (torch's first pass is slower)."""
        noise = np.random.default_rng(0).normal(0, 0.05, SAMPLE_RATE).astype(np.float32)
        self.embed(noise)

    def embed(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The utterance embedding and its 1.6 s partial embeddings (rows), all L2-normed.

        resemblyzer's `embed_utterance`, with its mel spectrogram computed here in
        numpy (`mel_spectrogram`, equal to librosa's to float precision): librosa's
        first call lazily imports enough to add 4-30 s to guardian's start-up.
        """
        import torch

        encoder = self.load()
        wav = samples.astype(np.float32)
        rms = float(np.sqrt(np.mean(wav.astype(np.float64) ** 2))) if len(wav) else 0.0
        if rms > 1e-6:  # resemblyzer.normalize_volume(wav, -30, increase_only=True)
            gain_db = -30.0 - 20.0 * np.log10(rms)
            if gain_db > 0:
                wav = wav * np.float32(10 ** (gain_db / 20))
        wav_slices, mel_slices = encoder.compute_partial_slices(len(wav), 1.3, 0.75)
        if wav_slices[-1].stop >= len(wav):
            wav = np.pad(wav, (0, wav_slices[-1].stop - len(wav)))
        mel = mel_spectrogram(wav)
        mels = np.array([mel[s] for s in mel_slices])
        with torch.no_grad():
            partials = encoder(torch.from_numpy(mels)).cpu().numpy()
        embed = _normed(np.mean(partials, axis=0))
        return np.asarray(embed, dtype=np.float32), np.asarray(partials, dtype=np.float32)


_MEL_BASIS: np.ndarray | None = None


def _slaney_mel_basis(*, sr: int = SAMPLE_RATE, n_fft: int = 400, n_mels: int = 40) -> np.ndarray:
    """librosa.filters.mel(sr, n_fft, n_mels) (Slaney scale and area norm), in numpy."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f: np.ndarray) -> np.ndarray:
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, f / f_sp)

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    fft_freqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(np.array(0.0)), hz_to_mel(np.array(sr / 2)), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    weights = np.maximum(0, np.minimum(-ramps[:-2] / fdiff[:-1, None], ramps[2:] / fdiff[1:, None]))
    return weights * (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]


def mel_spectrogram(wav: np.ndarray, *, n_fft: int = 400, hop: int = 160) -> np.ndarray:
    """resemblyzer's `wav_to_mel_spectrogram` (librosa power mel, centred, zero-padded): (frames, 40)."""
    global _MEL_BASIS
    if _MEL_BASIS is None:
        _MEL_BASIS = _slaney_mel_basis(n_fft=n_fft)
    padded = np.pad(wav.astype(np.float32), n_fft // 2)
    n_frames = 1 + (len(padded) - n_fft) // hop
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop][:n_frames]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    return (power @ _MEL_BASIS.T).astype(np.float32)


@dataclass
class _Speaker:
    name: str
    total: np.ndarray  # duration-weighted sum of the embeddings attributed to this voice
    seconds: float = 0.0

    @property
    def centroid(self) -> np.ndarray:
        return _normed(self.total)


@dataclass
class OnlineClustering:
    """Online speaker clustering: running centroids, one per voice.

    An utterance joins the voice whose centroid is most similar (cosine). A new
    voice is opened only while fewer than `max_speakers` exist, only for an
    utterance long enough to trust (`min_new_s`) and only when it is less similar
    than `threshold` to every known voice. Measured on the two clips and four
    espeak-ng dialogues (lab/audio_sweep.py), this beat re-clustering all
    utterances with average linkage after every turn (which re-shuffled similar
    espeak voices: 87% vs 100% of utterances right on the hardest dialogue).
    """

    max_speakers: int = 2
    threshold: float = 0.88
    min_new_s: float = 1.0
    speakers: list[_Speaker] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.speakers]

    def assign(self, embed: np.ndarray, partials: np.ndarray, *, duration: float) -> str:
        if not self.speakers:
            return self._open(embed, duration)
        sims = [float(embed @ s.centroid) for s in self.speakers]
        best = int(np.argmax(sims))
        if sims[best] < self.threshold and len(self.speakers) < self.max_speakers and duration >= self.min_new_s:
            return self._open(embed, duration)
        speaker = self.speakers[best]
        if self._one_voice(partials, best):
            speaker.total = speaker.total + embed * duration
            speaker.seconds += duration
        return speaker.name

    def _open(self, embed: np.ndarray, duration: float) -> str:
        speaker = _Speaker(speaker_name(len(self.speakers) + 1), embed * duration, duration)
        self.speakers.append(speaker)
        return speaker.name

    def _one_voice(self, partials: np.ndarray, best: int) -> bool:
        """True unless the utterance's 1.6 s partial embeddings point at different voices."""
        if len(self.speakers) < 2 or len(partials) < 2:
            return True
        centroids = np.stack([s.centroid for s in self.speakers])
        return bool(np.all(np.argmax(partials @ centroids.T, axis=1) == best))


def _normed(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


class EmbeddingSpeakers:
    """Mono mixes: resemblyzer embeddings + online clustering (channel is ignored)."""

    def __init__(
        self,
        *,
        max_speakers: int = 2,
        threshold: float = 0.88,
        min_new_s: float = 1.0,
        encoder: SpeakerEncoder | None = None,
    ) -> None:
        self.encoder = encoder or SpeakerEncoder()
        self.clustering = OnlineClustering(max_speakers=max_speakers, threshold=threshold, min_new_s=min_new_s)

    def attribute(self, samples: np.ndarray, *, channel: int) -> str:
        if self.clustering.max_speakers <= 1:
            return speaker_name(1)
        embed, partials = self.encoder.embed(samples)
        return self.clustering.assign(embed, partials, duration=len(samples) / SAMPLE_RATE)
