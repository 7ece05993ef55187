"""The turn model at run time: NumPy weights, no torch, no training code.

One small network over `features` rows: a hidden layer shared by four heads
(manipulation, the 11 techniques, the 5 vulnerabilities, scam request). The
manipulation and scam heads are calibrated (Platt scaling on the development
part, conversation by conversation: a conversation's score is its highest turn),
so "probability" reads as "how likely a conversation whose most suspicious turn
looks like this one is manipulative". Technique and vulnerability heads are
conditional: "if this turn manipulates, how".

Technique and vulnerability labels come, when the artifact has one, from a window
label head (linear, over the hidden layer): a turn's labels read the window's
mean hidden vector, its mean weighted by the manipulation logits (softmax) and
the turn's own. MentalManip labels whole dialogues, and a label head that sees
one turn only reached technique micro-F1 .32 on dev, the window head .46
(docs/model-card.md). Without one, the per-turn heads answer.

Stored as `weights.npz` (arrays), `manifest.json` (thresholds, metrics, data
hash, checksums) and, when trained with one, the fine-tuned reply head's
`reply_pair.npz` (`reply_pair`) and its two-register twin `reply_pair_spoken.npz`
(`register`), never a pickle.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from guardian.detectors.local.reply_pair import REPLY_PAIR_FILE, SPOKEN_PAIR_FILE, ReplyPairHead
from guardian.taxonomy import Technique, Vulnerability

#: Column order of the technique and vulnerability heads (and of the training labels).
TECHNIQUES: tuple[Technique, ...] = tuple(Technique)
VULNERABILITIES: tuple[Vulnerability, ...] = tuple(Vulnerability)

MANIFEST = "manifest.json"
WEIGHTS = "weights.npz"
FORMAT = "guardian-turn-model/1"

#: Head columns of the output layer.
MANIP = 0
TECH = slice(1, 1 + len(TECHNIQUES))
VULN = slice(1 + len(TECHNIQUES), 1 + len(TECHNIQUES) + len(VULNERABILITIES))
SCAM = 1 + len(TECHNIQUES) + len(VULNERABILITIES)
OUTPUTS = SCAM + 1

#: Named sensitivities, from quiet to eager; the manifest maps each to a threshold.
SENSITIVITIES = ("low", "medium", "high")


class ArtifactError(Exception):
    """The stored model is missing, from another format, or does not match its checksums."""


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -40, 40))))


def platt_probability(logits: np.ndarray, platt: tuple[float, float]) -> np.ndarray:
    """Logits as probabilities under a Platt scale (a, b): sigmoid(a * z + b)."""
    a, b = platt
    return _sigmoid(a * np.asarray(logits) + b)


@dataclass(frozen=True, slots=True)
class TurnScores:
    """Per-row scores: calibrated manipulation and scam probabilities, conditional label probabilities."""

    manipulation: np.ndarray  # (n,)
    scam: np.ndarray  # (n,)
    techniques: np.ndarray  # (n, 11)
    vulnerabilities: np.ndarray  # (n, 5)
    logits: np.ndarray  # (n,) raw manipulation logit (evidence ranking)
    #: Calibrated probability that the turn is a manipulative reply to a user (the reply head), when the
    #: artifact has one; the detector reads it in chatbot threads only (`kind="assistant"`).
    reply: np.ndarray | None = None


@dataclass
class TurnModel:
    """Weights and the calibration/thresholds chosen on the development part."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    #: Platt scaling (a, b) of the manipulation and scam logits: p = sigmoid(a * z + b).
    manip_platt: tuple[float, float]
    scam_platt: tuple[float, float]
    #: Decision thresholds on the calibrated manipulation probability, per sensitivity.
    thresholds: dict[str, float]
    scam_threshold: float
    #: Per sensitivity, the lower threshold two turns of one speaker within the window must both reach to
    #: be flagged together (`repetition`); a sensitivity without one flags single turns only.
    repeat_thresholds: dict[str, float] = field(default_factory=dict)
    #: A label is reported when its probability >= ratio * the turn's most likely label.
    technique_ratio: float = 0.8
    vulnerability_ratio: float = 0.8
    metrics: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    #: Whether the features include the mean of the recent turns (`features.turn_rows(context=)`).
    context: bool = False
    #: Weights of a linear block over sparse features (TF-IDF of the turn), when trained with one.
    sparse_w: np.ndarray | None = None
    #: Window label head (`window_label_logits`): (3 * hidden, 11 + 5) and (16,), when trained with one.
    label_w: np.ndarray | None = None
    label_b: np.ndarray | None = None
    #: Reply head (`reply_probability`): logistic regression over the turn's MiniLM vector, calibrated:
    #: (DIM,) and (1,), when trained with one.
    reply_w: np.ndarray | None = None
    reply_b: np.ndarray | None = None
    #: The fine-tuned (reply, request) head (`reply_pair`), when trained with one: in chatbot threads it
    #: answers with `reply_w`, in other conversations (with its dialogue scale) with the network (the
    #: detector reads it, `score` does not: it needs the texts).
    reply_pair: ReplyPairHead | None = None
    #: The same head trained on written turns and their copies as a speech transcript writes them
    #: (`augment.spoken`), when the artifact has one: outside chatbot threads it reads the turns in that
    #: register (`register.spoken_register`) in `reply_pair`'s place.
    reply_pair_spoken: ReplyPairHead | None = None

    def threshold(self, sensitivity: str) -> float:
        if sensitivity not in SENSITIVITIES:
            raise ValueError(f"unknown sensitivity {sensitivity!r}; use one of {', '.join(SENSITIVITIES)}")
        try:
            return self.thresholds[sensitivity]
        except KeyError:
            raise ValueError(
                f"unknown sensitivity {sensitivity!r}; use one of {', '.join(SENSITIVITIES)}"
            ) from None

    def hidden(self, x: np.ndarray) -> np.ndarray:
        hidden = x @ self.w1 + self.b1
        return np.asarray(0.5 * hidden * (1.0 + np.tanh(0.7978845608 * (hidden + 0.044715 * hidden**3))))  # GELU

    def logits(self, x: np.ndarray, sparse_rows: Any = None) -> np.ndarray:
        z = self.hidden(x) @ self.w2 + self.b2
        if self.sparse_w is not None and sparse_rows is not None:
            z = z + np.asarray(sparse_rows @ self.sparse_w)
        return np.asarray(z, dtype=np.float32)

    def score(self, x: np.ndarray, *, windows: Sequence[int] | None = None) -> TurnScores:
        """Scores of feature rows; `windows`: the lengths of the consecutive windows the rows form
        (the label head pools over each), one window of all rows by default."""
        hidden, z = self._network(np.asarray(x, dtype=np.float32))
        labels = z[:, TECH.start : VULN.stop]
        if self.label_w is not None and len(z):
            lengths = list(windows) if windows is not None else [len(z)]
            starts = np.cumsum([0, *lengths[:-1]])
            labels = np.vstack([
                window_label_logits(self, hidden[at : at + n], z[at : at + n, MANIP])
                for at, n in zip(starts, lengths, strict=True) if n
            ])
        return TurnScores(
            manipulation=platt_probability(z[:, MANIP], self.manip_platt),
            scam=platt_probability(z[:, SCAM], self.scam_platt),
            techniques=_sigmoid(labels[:, : len(TECHNIQUES)]),
            vulnerabilities=_sigmoid(labels[:, len(TECHNIQUES) :]),
            logits=z[:, MANIP],
            reply=self.reply_probability(x),
        )

    def _network(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Hidden layer and output logits of `x`, each distinct row computed once."""
        unique, inverse = _unique_rows(x)
        if unique is None:
            hidden = self.hidden(x)
            return hidden, np.asarray(hidden @ self.w2 + self.b2, dtype=np.float32)
        hidden = self.hidden(x[unique])  # the rest are copies
        return hidden[inverse], np.asarray(hidden @ self.w2 + self.b2, dtype=np.float32)[inverse]

    def reply_probability(self, x: np.ndarray) -> np.ndarray | None:
        """p(manipulative reply) of feature rows from the turn's own vector (the first block of a row).

        Why apart from the network: the network learned manipulation from movie lines and calls; as a
        reply to a user's request it ranked a polite password reminder above gaslighting (dev AUC .79
        on the chatbot exchanges), where a linear model over the reply's vector alone separates them
        (.95). Read in chatbot threads only, where the speaker is known to answer a user.
        """
        if self.reply_w is None or self.reply_b is None:
            return None
        return _sigmoid(np.asarray(x, dtype=np.float32)[:, : len(self.reply_w)] @ self.reply_w + self.reply_b[0])

    # -- storage ---------------------------------------------------------------------------------

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        labels: dict[str, Any] = {}  # Any: numpy types savez(**kw) as its allow_pickle flag
        if self.label_w is not None and self.label_b is not None:
            labels = {"label_w": self.label_w, "label_b": self.label_b}
        if self.reply_w is not None and self.reply_b is not None:
            labels.update(reply_w=self.reply_w, reply_b=self.reply_b)
        np.savez(directory / WEIGHTS, w1=self.w1.astype(np.float16), b1=self.b1, w2=self.w2, b2=self.b2, **labels)
        checksums = {WEIGHTS: hashlib.sha256((directory / WEIGHTS).read_bytes()).hexdigest()}
        pair: dict[str, Any] = {}
        for key, head, file in (("reply_pair", self.reply_pair, REPLY_PAIR_FILE),
                                ("reply_pair_spoken", self.reply_pair_spoken, SPOKEN_PAIR_FILE)):
            if head is None:
                continue
            saved = head.save(directory, file=file)
            checksums[saved.name] = hashlib.sha256(saved.read_bytes()).hexdigest()
            pair[key] = {"file": saved.name, "platt": list(head.platt)}
            if head.dialogue_platt is not None:
                pair[key]["dialogue_platt"] = list(head.dialogue_platt)
        manifest = {
            "format": FORMAT,
            "manip_platt": list(self.manip_platt),
            "scam_platt": list(self.scam_platt),
            "thresholds": self.thresholds,
            "scam_threshold": self.scam_threshold,
            "repeat_thresholds": self.repeat_thresholds,
            "technique_ratio": self.technique_ratio,
            "vulnerability_ratio": self.vulnerability_ratio,
            "metrics": self.metrics,
            "info": self.info,
            "context": self.context,
            "sha256": checksums,
            **pair,
        }
        (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory: Path) -> TurnModel:
        try:
            manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ArtifactError(f"no {MANIFEST} in {directory}") from None
        except (OSError, ValueError) as exc:
            raise ArtifactError(f"{MANIFEST} unreadable ({exc})") from None
        if manifest.get("format") != FORMAT:
            raise ArtifactError(f"{directory} holds another model format ({manifest.get('format')!r})")
        weights = directory / WEIGHTS
        try:
            digest = hashlib.sha256(weights.read_bytes()).hexdigest()
        except OSError:
            raise ArtifactError(f"{WEIGHTS} missing in {directory}") from None
        if digest != manifest.get("sha256", {}).get(WEIGHTS):
            raise ArtifactError(f"{WEIGHTS} does not match its checksum (a partial copy or an edit)")
        reply_pair, reply_pair_spoken = (_pair_head(directory, manifest, key) for key in ("reply_pair", "reply_pair_spoken"))
        with np.load(weights, allow_pickle=False) as npz:
            arrays = {k: np.asarray(npz[k], dtype=np.float32) for k in ("w1", "b1", "w2", "b2")}
            label_arrays = {k: np.asarray(npz[k], dtype=np.float32)
                            for k in ("label_w", "label_b", "reply_w", "reply_b") if k in npz}
        return cls(
            **arrays,
            manip_platt=(float(manifest["manip_platt"][0]), float(manifest["manip_platt"][1])),
            scam_platt=(float(manifest["scam_platt"][0]), float(manifest["scam_platt"][1])),
            thresholds={str(k): float(v) for k, v in manifest["thresholds"].items()},
            scam_threshold=float(manifest["scam_threshold"]),
            repeat_thresholds={str(k): float(v) for k, v in manifest.get("repeat_thresholds", {}).items()},
            technique_ratio=float(manifest["technique_ratio"]),
            vulnerability_ratio=float(manifest["vulnerability_ratio"]),
            metrics=dict(manifest.get("metrics", {})),
            info=dict(manifest.get("info", {})),
            context=bool(manifest.get("context", False)),
            reply_pair=reply_pair,
            reply_pair_spoken=reply_pair_spoken,
            **label_arrays,
        )


def _pair_head(directory: Path, manifest: dict[str, Any], key: str) -> ReplyPairHead | None:
    """The pair head the manifest lists under `key`, its file checked against the manifest's checksum."""
    if key not in manifest:
        return None
    entry = manifest[key]
    path = directory / str(entry.get("file", ""))
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        raise ArtifactError(f"{path.name} missing in {directory}") from None
    if digest != manifest.get("sha256", {}).get(path.name):
        raise ArtifactError(f"{path.name} does not match its checksum (a partial copy or an edit)")
    a, b = entry["platt"]
    scale = entry.get("dialogue_platt")
    return ReplyPairHead(path=path, platt=(float(a), float(b)),
                         dialogue_platt=None if scale is None else (float(scale[0]), float(scale[1])))


def window_pool(hidden: np.ndarray, manip_logits: np.ndarray) -> np.ndarray:
    """(mean, manipulation-softmax-weighted mean) of one window's hidden vectors: (2 * hidden,)."""
    attention = np.exp(manip_logits - manip_logits.max())
    attention /= attention.sum()
    return np.concatenate([hidden.mean(axis=0), attention @ hidden])


def _unique_rows(x: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """The first row of each distinct value of `x` and, per row, which of them it is; None when all differ.

    Why: the windows of one conversation overlap, so a turn whose context the window start does not cut
    gives the same feature row in every later window (a bulk run scored each row ~3.5 times, and the
    hidden layer was the largest part of window scoring, issue 23). Rows are compared by their bytes,
    so a copy is exactly the row it stands for.
    """
    seen: dict[bytes, int] = {}
    first: list[int] = []
    inverse = np.empty(len(x), dtype=np.intp)
    for i, row in enumerate(x):
        key = row.tobytes()
        k = seen.get(key)
        if k is None:
            k = seen[key] = len(first)
            first.append(i)
        inverse[i] = k
    if len(first) == len(x):
        return None, inverse
    return np.asarray(first, dtype=np.intp), inverse


def window_label_logits(model: TurnModel, hidden: np.ndarray, manip_logits: np.ndarray) -> np.ndarray:
    """Technique and vulnerability logits (n, 16) of each turn of one window: [pool, turn] @ label_w.

    Linear, so the pooled part is computed once per window and each turn adds its own.
    """
    assert model.label_w is not None and model.label_b is not None
    width = hidden.shape[1]
    pooled = window_pool(hidden, manip_logits) @ model.label_w[: 2 * width] + model.label_b
    return np.asarray(hidden @ model.label_w[2 * width :] + pooled, dtype=np.float32)
