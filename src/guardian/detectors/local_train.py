"""Training of the local manipulation model (what `guardian train` runs).

The model is linear on TF-IDF features (see `local_features`):

* a binary head (manipulative or not), class-balanced logistic regression,
  calibrated by Platt scaling on out-of-fold scores so its output reads as a
  probability on MentalManip's class balance;
* one head per technique and per vulnerability, trained on the manipulative
  dialogues that carry such labels (so they answer "if this is manipulation,
  which kind?"), each with its own threshold tuned on out-of-fold scores.

Everything is deterministic for a fixed seed (liblinear/lbfgs are deterministic;
the inner folds are seeded), which a test checks on a small subset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

import numpy as np
from scipy import sparse

from guardian.conversation import Conversation
from guardian.detectors.local_encoder import UtteranceEncoder, embedding_cache_file, shared_encoder
from guardian.detectors.local_features import (
    FeatureConfig,
    TextFeaturizer,
    build_features,
    dialogue_text,
    embedding_features,
)
from guardian.eval.datasets import LabelledDialogue
from guardian.taxonomy import Technique, Vulnerability

TECHNIQUES: tuple[Technique, ...] = tuple(Technique)
VULNERABILITIES: tuple[Vulnerability, ...] = tuple(Vulnerability)

#: Progress callback: (step description, steps done, steps total).
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Hyper-parameters (the defaults are the ones chosen by cross-validation, docs/model-card.md)."""

    seed: int = 17
    c_binary: float = 1.0
    c_labels: float = 4.0
    #: Add the MiniLM utterance-embedding block (stacked with the TF-IDF block).
    embeddings: bool = True
    c_embed_binary: float = 0.25
    c_embed_labels: float = 1.0
    #: Class-balanced weights in the technique/vulnerability heads.
    label_balanced: bool = True
    inner_folds: int = 5
    #: What the decision threshold maximises on out-of-fold scores: "macro_f1" or "accuracy".
    threshold_objective: str = "macro_f1"
    features: FeatureConfig = field(default_factory=FeatureConfig)

    def as_dict(self) -> dict[str, object]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "features"}
        out["features"] = self.features.as_dict()
        return out


@dataclass
class LinearHeads:
    """Several logistic-regression heads over the same features: scores = X @ coef.T + intercept."""

    coef: np.ndarray  # (labels, features) float32
    intercept: np.ndarray  # (labels,)

    def logits(self, x: sparse.csr_matrix | np.ndarray) -> np.ndarray:
        return np.asarray(x @ self.coef.T) + self.intercept

    def proba(self, x: sparse.csr_matrix | np.ndarray) -> np.ndarray:
        return _sigmoid(self.logits(x))


@dataclass
class HeadSet:
    """The binary, technique and vulnerability heads of one feature block."""

    binary: LinearHeads
    techniques: LinearHeads
    vulnerabilities: LinearHeads


@dataclass
class Stacker:
    """Per-label combination of the blocks' logits: p = sigmoid(sum_k w[:, k] * logit_k + b)."""

    weights: np.ndarray  # (labels, blocks)
    bias: np.ndarray  # (labels,)

    def proba(self, logits: Sequence[np.ndarray]) -> np.ndarray:
        z = sum(self.weights[:, k] * logits[k] for k in range(len(logits))) + self.bias
        return _sigmoid(np.asarray(z))


@dataclass
class TrainedModel:
    """Everything inference needs; `local_artifact` stores and loads it."""

    featurizer: TextFeaturizer
    tfidf: HeadSet
    embedding: HeadSet | None
    binary_stacker: Stacker
    technique_stacker: Stacker
    vulnerability_stacker: Stacker
    threshold: float
    #: A label is reported when its probability >= ratio * the row's highest label probability.
    technique_ratio: float
    vulnerability_ratio: float
    metrics: dict[str, float] = field(default_factory=dict)
    #: Columns of caller-supplied extra features appended to the dense block (0 for the product).
    extra_dim: int = 0
    encoder: Callable[[], UtteranceEncoder] = field(default=shared_encoder, repr=False)

    @property
    def binary(self) -> LinearHeads:
        """The TF-IDF binary head (also used to score single sentences for evidence)."""
        return self.tfidf.binary

    @property
    def techniques(self) -> LinearHeads:
        return self.tfidf.techniques

    def block_inputs(
        self, conversations: Sequence[Conversation], *, extra: np.ndarray | None = None
    ) -> tuple[sparse.csr_matrix, np.ndarray | None]:
        """(TF-IDF matrix, dense block); `extra` columns are appended when the model uses them."""
        x = build_features(conversations, featurizer=self.featurizer)
        embedded = self.embedding is not None and self.embedding.binary.coef.shape[1] > self.extra_dim
        e = embedding_features(conversations, encoder=self.encoder()) if embedded else None
        if self.extra_dim:
            if extra is None or extra.shape != (len(conversations), self.extra_dim):
                raise ValueError(f"this model needs {self.extra_dim} extra feature columns per conversation")
            e = extra.astype(np.float32) if e is None else np.hstack([e, extra.astype(np.float32)])
        return x, e

    def predict(self, conversations: Sequence[Conversation]) -> Predictions:
        if self.extra_dim:
            raise ValueError("this model was trained with extra features: use predict_inputs")
        return self.predict_inputs(*self.block_inputs(conversations))

    def predict_inputs(self, x: sparse.csr_matrix, e: np.ndarray | None) -> Predictions:
        blocks: list[tuple[HeadSet, sparse.csr_matrix | np.ndarray]] = [(self.tfidf, x)]
        if self.embedding is not None and e is not None:
            blocks.append((self.embedding, e))
        probability = self.binary_stacker.proba([h.binary.logits(f)[:, 0] for h, f in blocks])
        techniques = self.technique_stacker.proba([h.techniques.logits(f) for h, f in blocks])
        vulnerabilities = self.vulnerability_stacker.proba([h.vulnerabilities.logits(f) for h, f in blocks])
        return Predictions(
            probability=probability,
            decision=probability >= self.threshold,
            techniques=techniques,
            vulnerabilities=vulnerabilities,
            technique_decisions=relative_decisions(techniques, self.technique_ratio),
            vulnerability_decisions=relative_decisions(vulnerabilities, self.vulnerability_ratio),
        )


@dataclass(frozen=True, slots=True)
class Predictions:
    """Batch predictions: one row per conversation; label columns in TECHNIQUES/VULNERABILITIES order."""

    probability: np.ndarray
    decision: np.ndarray
    techniques: np.ndarray
    vulnerabilities: np.ndarray
    technique_decisions: np.ndarray
    vulnerability_decisions: np.ndarray


def tqdm_progress(description: str = "training local model") -> Progress:
    """A Progress callback drawing a tqdm bar on stderr (created lazily on the first step)."""
    import sys

    from tqdm import tqdm

    bar: list[tqdm] = []

    def update(step: str, done: int, total: int) -> None:
        if not bar:
            bar.append(tqdm(total=total, desc=description, file=sys.stderr, leave=True))
        bar[0].set_postfix_str(step, refresh=False)
        bar[0].n = done
        bar[0].refresh()
        if done >= total:
            bar[0].close()

    return update


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -40, 40))))


def label_matrices(dialogues: Sequence[LabelledDialogue]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(binary labels, technique indicator matrix, vulnerability indicator matrix)."""
    y = np.array([int(d.manipulative) for d in dialogues], dtype=np.int64)
    t = np.array([[int(x in d.techniques) for x in TECHNIQUES] for d in dialogues], dtype=np.int64)
    v = np.array([[int(x in d.vulnerabilities) for x in VULNERABILITIES] for d in dialogues], dtype=np.int64)
    return y, t.reshape(len(dialogues), len(TECHNIQUES)), v.reshape(len(dialogues), len(VULNERABILITIES))


def _fit_binary(
    x: sparse.csr_matrix | np.ndarray, y: np.ndarray, c: float, *, balanced: bool = True
) -> LinearHeads:
    from sklearn.linear_model import LogisticRegression

    if len(set(y.tolist())) < 2:
        # One class only (tiny subsets): a constant head at the observed rate.
        rate = float(np.clip(y.mean() if len(y) else 0.5, 1e-3, 1 - 1e-3))
        return LinearHeads(np.zeros((1, x.shape[1]), np.float32), np.array([np.log(rate / (1 - rate))]))
    model = LogisticRegression(C=c, class_weight="balanced" if balanced else None, max_iter=3000)
    model.fit(x, y)
    return LinearHeads(model.coef_.astype(np.float32), model.intercept_.astype(np.float64))


def _fit_multilabel(
    x: sparse.csr_matrix | np.ndarray, labels: np.ndarray, c: float, *, balanced: bool = True
) -> LinearHeads:
    coefs, intercepts = [], []
    for j in range(labels.shape[1]):
        head = _fit_binary(x, labels[:, j], c, balanced=balanced)
        coefs.append(head.coef[0])
        intercepts.append(head.intercept[0])
    n = x.shape[1]
    coef = np.vstack(coefs).astype(np.float32) if coefs else np.zeros((0, n), np.float32)
    return LinearHeads(coef, np.array(intercepts, dtype=np.float64))


DEFAULT_RATIO = 0.6
_RATIOS = np.round(np.arange(0.3, 1.0001, 0.05), 2)


def relative_decisions(probabilities: np.ndarray, ratio: float) -> np.ndarray:
    """Labels within `ratio` of each row's most likely label (so every row names at least one).

    Cross-validation preferred this to one threshold per label: it keeps the
    labels' ranking, which the heads get right more often than their absolute level.
    """
    if probabilities.size == 0:
        return np.zeros(probabilities.shape, dtype=bool)
    return np.asarray(probabilities >= ratio * probabilities.max(axis=1, keepdims=True))


def _best_ratio(labels: np.ndarray, probabilities: np.ndarray) -> float:
    """The ratio maximising micro-F1 on out-of-fold probabilities."""
    if len(labels) == 0:
        return DEFAULT_RATIO
    best, best_f1 = DEFAULT_RATIO, -1.0
    truth = labels.astype(bool)
    for ratio in _RATIOS:
        pred = relative_decisions(probabilities, float(ratio))
        tp = float(np.sum(pred & truth))
        f1 = 2 * tp / max(1.0, float(pred.sum() + truth.sum()))
        if f1 > best_f1 + 1e-12:
            best, best_f1 = float(ratio), f1
    return best


def _best_threshold(y: np.ndarray, scores: np.ndarray, objective: str) -> float:
    """Threshold on `scores` maximising the objective (ties: the middle of the best run)."""
    if len(y) == 0 or len(set(y.tolist())) < 2:
        return 0.5
    candidates = np.unique(np.round(scores, 4))
    if len(candidates) > 400:
        candidates = np.quantile(scores, np.linspace(0.0, 1.0, 401))
    best, best_value = 0.5, -1.0
    for thr in candidates:
        pred = scores >= thr
        value = _objective(y, pred, objective)
        if value > best_value + 1e-12:
            best, best_value = float(thr), value
    return best


def _objective(y: np.ndarray, pred: np.ndarray, objective: str) -> float:
    tp = float(np.sum(pred & (y == 1)))
    fp = float(np.sum(pred & (y == 0)))
    fn = float(np.sum(~pred & (y == 1)))
    tn = float(np.sum(~pred & (y == 0)))
    if objective == "accuracy":
        return (tp + tn) / max(1.0, len(y))
    f1_pos = 2 * tp / max(1.0, 2 * tp + fp + fn)
    if objective == "f1":
        return f1_pos
    f1_neg = 2 * tn / max(1.0, 2 * tn + fn + fp)
    return (f1_pos + f1_neg) / 2


def _inner_folds(y: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import StratifiedKFold

    counts = np.bincount(y, minlength=2)
    k = int(min(k, counts.min())) if counts.min() > 0 else 0
    if k < 2:
        return []
    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(len(y)), y))


def train(
    dialogues: Sequence[LabelledDialogue],
    *,
    config: TrainConfig | None = None,
    progress: Progress | None = None,
    encoder: UtteranceEncoder | None = None,
    label_only: Sequence[LabelledDialogue] = (),
    extra_features: np.ndarray | None = None,
) -> TrainedModel:
    """Fit the model on `dialogues`; stacking weights and thresholds come from inner out-of-fold scores.

    `label_only` dialogues (e.g. MentalManip's maj-only ones) add training examples to
    the technique/vulnerability heads only; they never enter the binary head, the
    stacking or the thresholds, which are all fitted and tuned on `dialogues`.

    `extra_features` (one row per dialogue, then per label-only dialogue) join the
    dense block: the hook for measuring other signals (e.g. intent features) on the
    shared folds. Such a model predicts through `predict_inputs` with the same
    columns appended, and cannot be saved as the product's artifact.
    """
    config = config or TrainConfig()
    report = progress or (lambda _step, _done, _total: None)
    n_primary = len(dialogues)
    conversations = [d.conversation for d in (*dialogues, *label_only)]
    y_all, t, v = label_matrices([*dialogues, *label_only])
    y = y_all[:n_primary]
    extra = np.arange(n_primary, len(conversations))
    folds = _inner_folds(y, config.inner_folds, config.seed)
    total = len(folds) + 2
    emb: np.ndarray | None = None
    if config.embeddings:
        report("embedding utterances (MiniLM)", 0, total)
        enc = encoder or shared_encoder()
        cache_file = embedding_cache_file(enc)
        enc.preload(cache_file)
        emb = embedding_features(conversations, encoder=enc)
        enc.persist(cache_file)
    extra_dim = 0
    if extra_features is not None:
        extra_features = np.asarray(extra_features, dtype=np.float32)
        if extra_features.shape[0] != len(conversations):
            raise ValueError("extra_features need one row per dialogue (dialogues, then label_only)")
        extra_dim = extra_features.shape[1]
        emb = extra_features if emb is None else np.hstack([emb, extra_features])
    n_blocks = 2 if emb is not None else 1
    oof_b = np.zeros((n_blocks, len(y)))
    oof_t = np.zeros((n_blocks, n_primary, t.shape[1]))
    oof_v = np.zeros((n_blocks, n_primary, v.shape[1]))
    for i, (tr, te) in enumerate(folds):
        report("out-of-fold scores for stacking and thresholds", i + 1, total)
        featurizer, heads = _fit_blocks(conversations, emb, y_all, t, v, tr, config, extra)
        inputs = _inputs(featurizer, emb, [conversations[j] for j in te], te)
        for k, (h, f) in enumerate(zip(heads, inputs, strict=True)):
            oof_b[k, te] = h.binary.logits(f)[:, 0]
            oof_t[k, te] = h.techniques.logits(f)
            oof_v[k, te] = h.vulnerabilities.logits(f)
    report("final model", len(folds) + 1, total)
    featurizer, heads = _fit_blocks(conversations, emb, y_all, t, v, np.arange(n_primary), config, extra)
    t, v = t[:n_primary], v[:n_primary]
    has_t = t.sum(1) > 0
    has_v = v.sum(1) > 0
    if folds:
        b_stack = _fit_stacker(oof_b[:, :, None], y[:, None])
        t_stack = _fit_stacker(oof_t[:, has_t], t[has_t])
        v_stack = _fit_stacker(oof_v[:, has_v], v[has_v])
        probability = b_stack.proba(list(oof_b))
        threshold = _best_threshold(y, probability, config.threshold_objective)
        p_t = t_stack.proba(list(oof_t[:, has_t]))
        p_v = v_stack.proba(list(oof_v[:, has_v]))
        t_ratio = _best_ratio(t[has_t], p_t)
        v_ratio = _best_ratio(v[has_v], p_v)
        metrics = _oof_metrics(y, probability, threshold)
    else:
        b_stack = _identity_stacker(1, n_blocks)
        t_stack = _identity_stacker(t.shape[1], n_blocks)
        v_stack = _identity_stacker(v.shape[1], n_blocks)
        threshold = 0.5
        t_ratio = v_ratio = DEFAULT_RATIO
        metrics = {}
    report("done", total, total)
    return TrainedModel(
        featurizer=featurizer,
        tfidf=heads[0],
        embedding=heads[1] if len(heads) > 1 else None,
        binary_stacker=b_stack,
        technique_stacker=t_stack,
        vulnerability_stacker=v_stack,
        threshold=float(threshold),
        technique_ratio=t_ratio,
        vulnerability_ratio=v_ratio,
        metrics=metrics,
        extra_dim=extra_dim,
    )


def _identity_stacker(labels: int, blocks: int) -> Stacker:
    return Stacker(np.full((labels, blocks), 1.0 / blocks), np.zeros(labels))


def _fit_stacker(logits: np.ndarray, labels: np.ndarray) -> Stacker:
    """One small logistic regression per label on the blocks' out-of-fold logits (blocks, rows, labels)."""
    from sklearn.linear_model import LogisticRegression

    n_blocks, _, n_labels = logits.shape
    weights = np.full((n_labels, n_blocks), 1.0 / n_blocks)
    bias = np.zeros(n_labels)
    for j in range(n_labels):
        yj = labels[:, j]
        if len(set(yj.tolist())) < 2:
            continue
        model = LogisticRegression(C=1.0, max_iter=1000).fit(logits[:, :, j].T, yj)
        weights[j] = model.coef_[0]
        bias[j] = model.intercept_[0]
    return Stacker(weights, bias)


def _inputs(
    featurizer: TextFeaturizer, emb: np.ndarray | None, conversations: Sequence[Conversation], rows: np.ndarray
) -> list[sparse.csr_matrix | np.ndarray]:
    out: list[sparse.csr_matrix | np.ndarray] = [build_features(conversations, featurizer=featurizer)]
    if emb is not None:
        out.append(emb[rows])
    return out


def _fit_heads(
    x: sparse.csr_matrix | np.ndarray,
    x_labels: sparse.csr_matrix | np.ndarray,
    y: np.ndarray,
    t: np.ndarray,
    v: np.ndarray,
    c_binary: float,
    c_labels: float,
    balanced: bool,
) -> HeadSet:
    """Binary head on `x`; label heads on `x_labels` (the same rows plus any label-only extras)."""
    t_rows = t.sum(1) > 0
    v_rows = v.sum(1) > 0
    return HeadSet(
        binary=_fit_binary(x, y, c_binary),
        techniques=_fit_multilabel(x_labels[t_rows], t[t_rows], c_labels, balanced=balanced),
        vulnerabilities=_fit_multilabel(x_labels[v_rows], v[v_rows], c_labels, balanced=balanced),
    )


def _fit_blocks(
    conversations: Sequence[Conversation],
    emb: np.ndarray | None,
    y: np.ndarray,
    t: np.ndarray,
    v: np.ndarray,
    rows: np.ndarray,
    config: TrainConfig,
    extra: np.ndarray | None = None,
) -> tuple[TextFeaturizer, list[HeadSet]]:
    """Fit both blocks on `rows`; `extra` rows (label-only dialogues) join the label heads only."""
    featurizer = TextFeaturizer(config=config.features).fit([dialogue_text(conversations[i]) for i in rows])
    label_rows = rows if extra is None or len(extra) == 0 else np.concatenate([rows, extra])
    inputs = _inputs(featurizer, emb, [conversations[i] for i in label_rows], label_rows)
    n = len(rows)
    tl, vl = t[label_rows], v[label_rows]
    heads = [
        _fit_heads(inputs[0][:n], inputs[0], y[rows], tl, vl, config.c_binary, config.c_labels, config.label_balanced)
    ]
    if emb is not None:
        heads.append(
            _fit_heads(
                inputs[1][:n], inputs[1], y[rows], tl, vl, config.c_embed_binary, config.c_embed_labels,
                config.label_balanced,
            )
        )
    return featurizer, heads


def _oof_metrics(y: np.ndarray, probability: np.ndarray, threshold: float) -> dict[str, float]:
    pred = probability >= threshold
    return {
        "oof_accuracy": float(np.mean(pred == (y == 1))),
        "oof_macro_f1": _objective(y, pred, "macro_f1"),
        "threshold": float(threshold),
    }
