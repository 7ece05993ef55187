"""The everyday side of the face-act model: a domain gate, an everyday head and abstention (issue 25).

Why: the shipped halves were trained on one setting, persuasion for charity, whose annotators
labelled information questions and their answers `other`; in everyday conversations most clear acts
(requests, complaints, self-praise) came out as `other`, and about one turn in three was right.
Retraining the fine-tuned halves costs hours on a small machine, so the cheap parts change:

- **Domain gate**: a logistic regression on an utterance's MiniLM vector (persuasion corpus against
  everyday utterances: DailyDialog, SGD, phone calls, MentalManip). A conversation's
  persuasion-likeness `g` is the sigmoid of the running mean of its utterances' gate logits
  (`ConversationDomain`, one per conversation, fed its turns in order like `EscalationBudget`).
- **Everyday head**: a linear model on the linear half's features (its own n-gram vocabulary),
  trained on the persuasion corpus and the everyday set together with the features copied once
  for everyday rows only (feature augmentation: shared weights plus everyday-specific ones; the
  copy is folded into one weight matrix when saved, so it costs one matrix product).
- **Blend**: p = g x (persuasion model: linear + tuned) + (1 - g) x (everyday head + tuned at
  `tuned_weight`); on the persuasion corpus g is near 1, so its figures stand.
- **Abstain**: an intent whose top probability is below `abstain_below` (tuned for precision on
  the everyday set's dev part) is marked abstained; renderers show no intent for it.

Plain arrays and JSON, like the rest of the artifact (no pickle).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from guardian.detectors.intent.cues import N_CUES
from guardian.detectors.intent.frozen import (
    FROZEN_DIM,
    FROZEN_ENCODER,
    FROZEN_LAYERS,
    FrozenEncoder,
    shared_frozen_encoder,
)
from guardian.detectors.intent.tuned import TunedFaceActs
from guardian.taxonomy import FaceAct

if TYPE_CHECKING:
    from guardian.detectors.intent.features import FeatureConfig, NGrams, Utterance

EVERYDAY_FILE = "everyday.npz"
EVERYDAY_META = "everyday.json"
EVERYDAY_TUNED_FILE = "everyday_tuned.npz"
#: A conversation is persuasion-like (seed 002's charity descriptions are shown) from this g on.
PERSUASION_LIKE = 0.5


def in_class_order(probabilities: np.ndarray, have: Sequence[FaceAct], want: Sequence[FaceAct]) -> np.ndarray:
    """Probabilities over `have` as columns in `want`'s order, zero for the acts `have` lacks: every
    part of the model (halves, heads) keeps its own class order and the blend reads the model's."""
    out = np.zeros((len(probabilities), len(want)), dtype=np.float32)
    for j, c in enumerate(have):
        if c in want:
            out[:, list(want).index(c)] = probabilities[:, j]
    return out


def _softmax_in_order(logits: np.ndarray, have: Sequence[FaceAct], want: Sequence[FaceAct]) -> np.ndarray:
    logits = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return in_class_order(p / p.sum(axis=1, keepdims=True), have, want)


@dataclass(frozen=True, slots=True)
class DomainGate:
    """Persuasion-likeness of one utterance: logit = vector . weights + bias (positive: persuasion)."""

    weights: np.ndarray
    bias: float

    def logits(self, vectors: np.ndarray) -> np.ndarray:
        return np.asarray(vectors, dtype=np.float32) @ self.weights.astype(np.float32) + np.float32(self.bias)


class ConversationDomain:
    """Running persuasion-likeness of one conversation: sigmoid of the mean gate logit of its turns
    so far. Mutable, one per conversation, fed each turn once, in order (the detector keeps one per
    conversation id; evaluation one per conversation)."""

    __slots__ = ("_lock", "count", "total")

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0
        self._lock = threading.Lock()

    def observe(self, logit: float) -> float:
        """Count one more turn's gate logit; the conversation's g after it."""
        with self._lock:
            self.total += float(logit)
            self.count += 1
            return self._g()

    def everyday_so_far(self) -> bool:
        """Whether the next turn goes to the everyday tuned half: no turn seen yet, or g < PERSUASION_LIKE."""
        with self._lock:
            return self.count == 0 or self._g() < PERSUASION_LIKE

    @property
    def persuasion(self) -> float:
        with self._lock:
            return self._g()

    def _g(self) -> float:
        if not self.count:
            return 0.5
        z = max(-30.0, min(30.0, self.total / self.count))
        return 1.0 / (1.0 + math.exp(-z))


class _Admits(Protocol):
    """A conversation's budget of extra passes (`model.EscalationBudget`)."""

    def admit(self, unsure: bool) -> bool: ...


@dataclass(frozen=True, slots=True)
class DeepHead:
    """Logistic regression on frozen mpnet-6 vectors (`frozen`) of the turn and of the turn before it
    (x `PREV_WEIGHT`) and, with `cue_scale` > 0, the guideline cues of both (`cues`; the previous
    turn's at half weight). On everyday turns it is the most accurate part (round 3 in
    docs/history.md, "Intent model"); the everyday side reads (1 - tuned_share - head_share) x this + tuned_share x
    the everyday tuned half + head_share x the MiniLM everyday head.

    `tuned_below` < 1: the everyday tuned half is read only for the turns this head is unsure of (top
    probability under `tuned_below`) while the conversation's budget of extra passes has room
    (`EverydayHead.deep_then_tuned`); the others get the blend without it, its share spread over the
    rest. Why: a third pass on every everyday turn put the bench over its latency target, and in
    conversation-grouped CV the half helped only where the deep head was unsure (round 4 in
    docs/history.md, "Intent model": a third of the turns make the pass, accuracy unchanged)."""

    classes: list[FaceAct]
    coef: np.ndarray
    intercept: np.ndarray
    cue_scale: float
    tuned_share: float
    head_share: float
    tuned_below: float = 1.0

    PREV_WEIGHT = 0.6

    @property
    def gated(self) -> bool:
        """Whether the tuned half is read only for unsure turns (see the class docstring)."""
        return 0.0 < self.tuned_share < 1.0 and self.tuned_below < 1.0

    def design(self, utterances: Sequence[Utterance], encoder: FrozenEncoder) -> np.ndarray:
        from guardian.detectors.intent.cues import N_CUES, cue_vector

        texts = [u.text for u in utterances]
        prev = [u.context[-1][1] if u.context else "" for u in utterances]
        blocks = [encoder.encode(texts), self.PREV_WEIGHT * encoder.encode(prev)]
        if self.cue_scale:
            blocks += [self.cue_scale * np.vstack([cue_vector(t) for t in texts]).reshape(len(texts), N_CUES),
                       0.5 * self.cue_scale * np.vstack([cue_vector(t) for t in prev]).reshape(len(texts), N_CUES)]
        return np.hstack(blocks).astype(np.float32)

    def proba(self, x: np.ndarray, classes: Sequence[FaceAct]) -> np.ndarray:
        """Probabilities in `classes` order from `design`'s rows."""
        return _softmax_in_order(x @ self.coef.T + self.intercept, self.classes, classes)


class EverydayHead:
    """The everyday linear head, the domain gate, the tuned half's share and the abstention threshold."""

    def __init__(
        self, *, classes: list[FaceAct], coef: np.ndarray, intercept: np.ndarray, word: NGrams, side: NGrams,
        config: FeatureConfig, gate: DomainGate, tuned_weight: float, abstain_below: float,
        meta: dict[str, Any] | None = None, tuned: TunedFaceActs | None = None, deep: DeepHead | None = None,
    ) -> None:
        self.classes = classes
        self.coef = coef.astype(np.float32)
        self.intercept = intercept.astype(np.float32)
        self.word = word
        self.side = side
        self.config = config
        self.gate = gate
        self.tuned_weight = tuned_weight
        self.abstain_below = abstain_below
        self.meta = dict(meta or {})
        #: The everyday tuned half: the persuasion MiniLM half fine-tuned further on everyday pairs (it
        #: knows sneg-, which the corpus lacks); it reads the turns of conversations that are not
        #: persuasion-like in its place, so a turn still costs one tuned pass.
        self.tuned = tuned
        #: The head on frozen mpnet-6 vectors; read with the tuned half for the turns it reads.
        self.deep = deep
        self.frozen = shared_frozen_encoder() if deep is not None else None

    def deep_proba(self, utterances: Sequence[Utterance], classes: Sequence[FaceAct]) -> np.ndarray:
        """The deep head's probabilities in `classes` order (an mpnet-6 pass per new sentence)."""
        assert self.deep is not None and self.frozen is not None
        return self.deep.proba(self.deep.design(utterances, self.frozen), classes)

    def deep_then_tuned(self, utterances: Sequence[Utterance], pairs: Sequence[tuple[str, str]],
                        classes: Sequence[FaceAct], budgets: Sequence[_Admits] | None,
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A gated deep head's part of a turn, in one worker beside the linear half: (deep head
        probabilities, rows the tuned half read, its probabilities there (zeros elsewhere)), all in
        `classes` order. The tuned half reads the rows the deep head is unsure of (top probability
        under `tuned_below`) that the conversation's budget admits; each row is counted once by it.
        Why here: the pass then overlaps the linear half's MiniLM pass instead of following it."""
        assert self.deep is not None and self.tuned is not None
        deep = self.deep_proba(utterances, classes)
        below = deep.max(axis=1) < self.deep.tuned_below
        if budgets is not None:
            below = np.array([b.admit(bool(u)) for b, u in zip(budgets, below, strict=True)], dtype=bool)
        rows = np.flatnonzero(below)
        tuned = np.zeros_like(deep)
        if rows.size:
            read = self.tuned.predict_proba([pairs[int(i)] for i in rows])
            tuned[rows] = in_class_order(read, self.tuned.classes, classes)
        return deep, rows, tuned

    def proba(self, utterances: Sequence[Utterance], u_vecs: np.ndarray, ctx_vecs: np.ndarray,
              classes: Sequence[FaceAct]) -> np.ndarray:
        """The head's probabilities, in `classes` order (the model's)."""
        from guardian.detectors.intent.features import assemble, side_text

        x = assemble(utterances, u_vecs, ctx_vecs, self.word.transform([u.text for u in utterances]),
                     self.side.transform([side_text(u) for u in utterances]), self.config)
        return _softmax_in_order(np.asarray(x @ self.coef.T) + self.intercept, self.classes, classes)

    # -- persistence --

    def save(self, directory: Path) -> None:
        from guardian.detectors.intent.features import _jsonable

        arrays: dict[str, np.ndarray] = {
            "coef": self.coef.astype(np.float16), "intercept": self.intercept, "word_idf": self.word.idf,
            "side_idf": self.side.idf, "gate_weights": self.gate.weights.astype(np.float32)}
        if self.deep is not None:
            arrays.update(deep_coef=self.deep.coef.astype(np.float32), deep_intercept=self.deep.intercept.astype(np.float32))
        np.savez_compressed(directory / EVERYDAY_FILE, **arrays)  # type: ignore[arg-type]
        meta = {
            **{k: v for k, v in self.meta.items() if k != "deep"},  # a loaded head's, rewritten below if it has one
            "classes": [str(c) for c in self.classes],
            "config": {f: getattr(self.config, f) for f in type(self.config).__dataclass_fields__},
            "word": {"params": _jsonable(self.word.params), "vocabulary": self.word.vocabulary},
            "side": {"params": _jsonable(self.side.params), "vocabulary": self.side.vocabulary},
            "gate_bias": self.gate.bias, "tuned_weight": self.tuned_weight, "abstain_below": self.abstain_below,
        }
        if self.deep is not None:
            meta["deep"] = {"classes": [str(c) for c in self.deep.classes], "cue_scale": self.deep.cue_scale,
                            "tuned_share": self.deep.tuned_share, "head_share": self.deep.head_share,
                            "tuned_below": self.deep.tuned_below, "encoder": FROZEN_ENCODER, "layers": FROZEN_LAYERS}
        if self.tuned is not None:
            self.tuned.save(directory, file=EVERYDAY_TUNED_FILE, int8=True)
        else:
            (directory / EVERYDAY_TUNED_FILE).unlink(missing_ok=True)
        (directory / EVERYDAY_META).write_text(json.dumps(meta, sort_keys=True), encoding="utf-8")

    @classmethod
    def load(cls, directory: Path) -> EverydayHead | None:
        """The head saved in `directory`, or None when the artifact has none (a persuasion-only model).
        A damaged one raises ValueError/OSError/KeyError (the caller says it as ModelUnavailable)."""
        from guardian.detectors.intent.features import (
            DENSE_DIM,
            ENCODER_DIM,
            FeatureConfig,
            NGrams,
            _params,
        )

        if not (directory / EVERYDAY_META).exists():
            return None
        meta = json.loads((directory / EVERYDAY_META).read_text(encoding="utf-8"))
        with np.load(directory / EVERYDAY_FILE, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        word = NGrams(_params(meta["word"]["params"]), meta["word"]["vocabulary"], arrays["word_idf"])
        side = NGrams(_params(meta["side"]["params"]), meta["side"]["vocabulary"], arrays["side_idf"])
        classes = [FaceAct(c) for c in meta["classes"]]
        coef = arrays["coef"].astype(np.float32)
        expected = (len(classes), DENSE_DIM + len(word.vocabulary) + len(side.vocabulary))
        if coef.shape != expected:
            raise ValueError(f"everyday head weights have shape {coef.shape}, expected {expected}")
        gate = arrays["gate_weights"]
        if gate.shape != (ENCODER_DIM,):
            raise ValueError(f"domain gate has shape {gate.shape}, expected ({ENCODER_DIM},)")
        deep = None
        if meta.get("deep"):
            d = meta["deep"]
            if d.get("encoder") != FROZEN_ENCODER or d.get("layers") != FROZEN_LAYERS:
                raise ValueError(f"the everyday deep head reads {d.get('encoder')}-{d.get('layers')}, "
                                 f"this version runs {FROZEN_ENCODER}-{FROZEN_LAYERS}")
            deep = DeepHead([FaceAct(c) for c in d["classes"]], arrays["deep_coef"].astype(np.float32),
                            arrays["deep_intercept"].astype(np.float32), float(d["cue_scale"]),
                            float(d["tuned_share"]), float(d["head_share"]), float(d.get("tuned_below", 1.0)))
            width = 2 * FROZEN_DIM + (2 * N_CUES if deep.cue_scale else 0)
            if deep.coef.shape != (len(deep.classes), width):
                raise ValueError(f"everyday deep head weights have shape {deep.coef.shape}, expected "
                                 f"{(len(deep.classes), width)}")
        return cls(classes=classes, coef=coef, intercept=arrays["intercept"], word=word, side=side,
                   config=FeatureConfig(**meta["config"]), gate=DomainGate(gate, float(meta["gate_bias"])),
                   tuned_weight=float(meta["tuned_weight"]), abstain_below=float(meta["abstain_below"]),
                   meta={k: v for k, v in meta.items() if k not in ("word", "side")},
                   tuned=TunedFaceActs.load(directory, file=EVERYDAY_TUNED_FILE)
                   if (directory / EVERYDAY_TUNED_FILE).exists() else None, deep=deep)
