"""Who said it: channel = speaker for stereo calls, voice embeddings on a mono mix.

Mono: each utterance gets a resemblyzer d-vector (its pretrained encoder ships in
the PyPI package, so nothing downloads) and is clustered online (see OnlineClustering):
at most `max_speakers`, a separate speaker only for voices less similar than
`threshold` (cosine; tuned on espeak-ng voices and the shared clips by
scripts/bench_audio.py), and only utterances long enough to trust (`min_new_s`)
shape the clusters. Names are "Speaker 1", "Speaker 2", ... in order of
first appearance; the TUI may rename them.

A speaker change inside one utterance (two people talking with less than the
silence hangover between them, or over each other): the utterance is NOT split.
It is attributed as a whole to the speaker whose cluster takes the
utterance's mean embedding — in practice the voice that fills most of it — and
the utterance is left out of later clustering when its 1.6 s partial embeddings
disagree about who is speaking, so one mixed utterance cannot drag a speaker
towards the other voice. Lowering `audio.silence_s` makes such merges rarer.
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
        """Load the weights and embed one second of noise: librosa's first call imports a lot."""
        noise = np.random.default_rng(0).normal(0, 0.05, SAMPLE_RATE).astype(np.float32)
        self.embed(noise)

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
class OnlineClustering:
    """Speaker clustering that re-decides on every utterance with all the voices heard so far.

    Average-linkage agglomerative clustering (cosine) over the embeddings of the
    utterances heard so far: clusters keep merging while they are more similar
    than `threshold`, and always until at most `max_speakers` are left. Re-running
    it each time lets an early mistake (the second voice heard first in a short,
    noisy utterance) be outvoted later; names stay stable because each cluster
    inherits the name most of its members were already given. Emitted turns are
    never renamed.
    """

    max_speakers: int = 2
    threshold: float = 0.88
    min_new_s: float = 1.0
    max_history: int = 300
    embeddings: list[np.ndarray] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    names_used: int = 0

    def assign(self, embed: np.ndarray, partials: np.ndarray, *, duration: float) -> str:
        if duration < self.min_new_s and self.embeddings:
            # too short to shape the clusters: nearest existing speaker, not remembered
            return self._nearest(embed, self._centroids())
        vectors = [*self.embeddings, embed]
        clusters = self._cluster(np.stack(vectors))
        names = self._names(clusters)
        label = names[clusters[-1]]
        centroids = {
            names[c]: _normed(np.mean([v for v, k in zip(vectors, clusters, strict=True) if k == c], axis=0))
            for c in set(clusters)
        }
        if len(partials) >= 2 and len(centroids) >= 2 and not all(
            self._nearest(p, centroids) == label for p in partials
        ):
            return label  # voices disagree inside the utterance: attribute, do not remember
        self.embeddings.append(embed)
        self.labels.append(label)
        if len(self.embeddings) > self.max_history:
            self.embeddings, self.labels = self.embeddings[1:], self.labels[1:]
        return label

    def _cluster(self, matrix: np.ndarray) -> list[int]:
        if len(matrix) == 1 or self.max_speakers == 1:
            return [0] * len(matrix)
        from scipy.cluster.hierarchy import fcluster, linkage

        tree = linkage(matrix.astype(np.float64), method="average", metric="cosine")
        flat = fcluster(tree, t=1.0 - self.threshold, criterion="distance")
        if flat.max() > self.max_speakers:
            flat = fcluster(tree, t=self.max_speakers, criterion="maxclust")
        return [int(k) for k in flat]

    def _names(self, clusters: list[int]) -> dict[int, str]:
        """Each cluster takes the name most of its earlier members had; new clusters get new names."""
        votes: dict[int, dict[str, int]] = {}
        for cluster, label in zip(clusters, self.labels, strict=False):
            votes.setdefault(cluster, {}).setdefault(label, 0)
            votes[cluster][label] += 1
        names: dict[int, str] = {}
        taken: set[str] = set()
        ranked = sorted(
            ((n, c, label) for c, v in votes.items() for label, n in v.items()), reverse=True
        )
        for _, cluster, label in ranked:
            if cluster not in names and label not in taken:
                names[cluster] = label
                taken.add(label)
        free = [speaker_name(n) for n in range(1, self.names_used + 1) if speaker_name(n) not in taken]
        for cluster in dict.fromkeys(clusters):
            if cluster not in names:
                if free:  # a name whose voices were all merged elsewhere is given out again
                    names[cluster] = free.pop(0)
                else:
                    self.names_used += 1
                    names[cluster] = speaker_name(self.names_used)
        return names

    def _centroids(self) -> dict[str, np.ndarray]:
        groups: dict[str, list[np.ndarray]] = {}
        for vector, label in zip(self.embeddings, self.labels, strict=True):
            groups.setdefault(label, []).append(vector)
        return {label: _normed(np.mean(vs, axis=0)) for label, vs in groups.items()}

    @staticmethod
    def _nearest(embed: np.ndarray, centroids: dict[str, np.ndarray]) -> str:
        return max(centroids, key=lambda name: float(embed @ centroids[name]))


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
