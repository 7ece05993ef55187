"""Who said it: channel = speaker for stereo calls, voice embeddings on a mono mix.

Mono: each utterance gets a resemblyzer d-vector (its pretrained encoder ships in
the PyPI package, so nothing downloads) and is clustered online against running
speaker centroids. A new speaker is opened only while fewer than `max_speakers`
exist, only when the utterance is long enough to trust its embedding
(`min_new_s`), and only when it is far from every centroid (`threshold`, cosine
similarity, tuned on espeak-ng voices and the shared clips by
scripts/bench_audio.py). Names are "Speaker 1", "Speaker 2", ... in order of
first appearance; the TUI may rename them.

A speaker change inside one utterance (two people talking with less than the
silence hangover between them, or over each other): the utterance is NOT split.
It is attributed as a whole to the speaker whose centroid is closest to the
utterance's mean embedding — in practice the voice that fills most of it — and
the centroid update is skipped when the utterance's 1.6 s partial embeddings
disagree about who is speaking, so one mixed utterance cannot drag a centroid
towards the other voice. Lowering `audio.silence_s` makes such merges rarer.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol

import numpy as np

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

    def embed(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The utterance embedding and its 1.6 s partial embeddings (rows), all L2-normed."""
        encoder = self.load()
        resemblyzer = sys.modules["resemblyzer"]
        wav = samples.astype(np.float32)
        if np.sqrt(np.mean(wav**2)) > 1e-6:
            wav = resemblyzer.normalize_volume(wav, -30, increase_only=True)
        embed, partials, _ = encoder.embed_utterance(wav, return_partials=True)
        return np.asarray(embed, dtype=np.float32), np.asarray(partials, dtype=np.float32)


@dataclass
class _Centroid:
    name: str
    total: np.ndarray
    weight: float = 0.0

    @property
    def vector(self) -> np.ndarray:
        norm = float(np.linalg.norm(self.total))
        return self.total / norm if norm > 0 else self.total


@dataclass
class OnlineClustering:
    """Online speaker clustering over utterance embeddings (cosine similarity to centroids)."""

    max_speakers: int = 2
    threshold: float = 0.75
    min_new_s: float = 1.0
    centroids: list[_Centroid] = field(default_factory=list)

    def assign(self, embed: np.ndarray, partials: np.ndarray, *, duration: float) -> str:
        if not self.centroids:
            return self._open(embed, duration)
        sims = np.array([float(embed @ c.vector) for c in self.centroids])
        best = int(np.argmax(sims))
        if (
            sims[best] < self.threshold
            and len(self.centroids) < self.max_speakers
            and duration >= self.min_new_s
        ):
            return self._open(embed, duration)
        centroid = self.centroids[best]
        if self._consistent(partials, best):
            centroid.total = centroid.total + embed * duration
            centroid.weight += duration
        return centroid.name

    def _open(self, embed: np.ndarray, duration: float) -> str:
        centroid = _Centroid(speaker_name(len(self.centroids) + 1), embed * duration, duration)
        self.centroids.append(centroid)
        return centroid.name

    def _consistent(self, partials: np.ndarray, best: int) -> bool:
        """True when every partial embedding is closest to the chosen centroid (one voice)."""
        if len(self.centroids) < 2 or len(partials) < 2:
            return True
        matrix = np.stack([c.vector for c in self.centroids])
        return bool(np.all(np.argmax(partials @ matrix.T, axis=1) == best))


class EmbeddingSpeakers:
    """Mono mixes: resemblyzer embeddings + online clustering (channel is ignored)."""

    def __init__(
        self,
        *,
        max_speakers: int = 2,
        threshold: float = 0.75,
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
