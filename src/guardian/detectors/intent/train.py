"""Training and honest evaluation of the face-act model.

Everything here runs on `data/faceacts/faceacts.csv` (or any CSV in that
format) and splits by conversation with the shared `conversation_folds`, so an
utterance is never scored by a model that saw its own dialogue. Reported
figures come from out-of-fold predictions (`cross_validate`); `evaluate` with a
trained model is for a CSV the model never saw.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from guardian import locations
from guardian.corpora.conversations import Split as Part
from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import FaceActUtterance, faceacts_path, file_sha256, load_faceacts
from guardian.corpora.folds import conversation_folds
from guardian.detectors.intent.domain import ConversationDomain
from guardian.detectors.intent.model import (
    CONTEXT,
    ESCALATION_RATE,
    ESCALATION_SLACK,
    SIDE_PARAMS,
    WORD_PARAMS,
    EscalationBudget,
    FeatureConfig,
    IntentModel,
    NGrams,
    Utterance,
    assemble,
    context_vectors,
    side_text,
)
from guardian.detectors.intent.tuned import TuneConfig, pair_text
from guardian.detectors.intent.tuned_train import part_progress, train_tuned_cached
from guardian.encoding.finetune import class_weights
from guardian.encoding.sentence_encoder import SentenceEncoder
from guardian.errors import InputError
from guardian.taxonomy import PERSUASION_INTENTIONS, FaceAct

#: Class weights are (n / (k * count)) ** power: rare acts (hpos-, sneg+, spos-) count more.
CLASS_WEIGHT_POWER = 0.75  # 0 = no re-weighting, 1 = fully "balanced"; 0.75 chosen by CV (docs/history.md, "Intent model")


#: Who said the `previous` turn of a conversation that starts mid-way (not one of its speakers).
PREVIOUS_SPEAKER = "(previous)"

#: The escalation half of the shipped model (`IntentModel.escalation`): mpnet cut to six layers.
ESCALATION = TuneConfig(encoder="mpnet", layers=6)


def tuned_models_dir() -> Path:
    """Where fine-tuned models are cached by training key (fold models and teachers; the name
    predates the all-data models kept there too)."""
    return locations.cache_dir() / "intent_cv_tuned"


def utterances_in_context(rows: Sequence[FaceActUtterance], *, context: int = CONTEXT) -> list[Utterance]:
    """Rows -> Utterances with their preceding turns, in the rows' order.

    The opener is the conversation's first speaker: the persuader in the corpus,
    and the side that starts the request in most settings. No role label is read.
    A conversation that starts mid-way (its first row has `previous`) gets that turn as the first
    row's context, said by someone else (`PREVIOUS_SPEAKER`).
    """
    by_conv: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_conv[r.conversation_id].append(i)
    out: list[Utterance | None] = [None] * len(rows)
    for idx in by_conv.values():
        idx.sort(key=lambda i: rows[i].turn)
        opener = rows[idx[0]].speaker
        before = rows[idx[0]].previous
        lead = ((PREVIOUS_SPEAKER, before),) if before and rows[idx[0]].turn > 0 else ()
        for pos, i in enumerate(idx):
            ctx = tuple((rows[j].speaker, rows[j].utterance) for j in idx[max(0, pos - context) : pos])
            if len(ctx) < context and pos < context:
                ctx = (lead + ctx)[-context:]
            out[i] = Utterance(rows[i].utterance, rows[i].speaker, ctx, rows[i].speaker == opener, pos)
    return [u for u in out if u is not None]


def in_turn_order(rows: Sequence[FaceActUtterance], indices: Iterable[int]) -> list[int]:
    """`indices` with each conversation's rows in turn order (what its escalation budget needs)."""
    return sorted(indices, key=lambda i: rows[i].turn)


def conversation_budgets(rows: Sequence[FaceActUtterance]) -> list[EscalationBudget]:
    """One escalation budget per conversation, the same object for each of its rows: evaluation
    spends the escalation half as the live detector does."""
    by_conversation: dict[str, EscalationBudget] = {}
    return [by_conversation.setdefault(r.conversation_id, EscalationBudget()) for r in rows]


def conversation_domains(rows: Sequence[FaceActUtterance]) -> list[ConversationDomain]:
    """One running persuasion-likeness per conversation, the same object for each of its rows."""
    by_conversation: dict[str, ConversationDomain] = {}
    return [by_conversation.setdefault(r.conversation_id, ConversationDomain()) for r in rows]


def predict_in_turn_order(
    model: IntentModel, rows: Sequence[FaceActUtterance], utts: Sequence[Utterance], indices: Iterable[int]
) -> tuple[list[int], np.ndarray]:
    """(`indices` in turn order, their probabilities in that order): each conversation fed to the
    model in turn order with one escalation budget and one domain state, as the live detector does."""
    order = in_turn_order(rows, indices)
    in_order = [rows[i] for i in order]
    probs, _ = model.predict_proba([utts[i] for i in order], budgets=conversation_budgets(in_order),
                                   domains=conversation_domains(in_order))
    return order, probs


def fit(
    rows: Sequence[FaceActUtterance],
    *,
    config: FeatureConfig | None = None,
    encoder: SentenceEncoder | None = None,
    meta: dict[str, Any] | None = None,
    tune: TuneConfig | None = None,
    escalate: TuneConfig | None = None,
    tuned_cache: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> IntentModel:
    """Train on `rows` (whole conversations). Deterministic for the same data and config.

    With `tune`, MiniLM is also fine-tuned on the same rows (`tuned_train`) and averaged
    with the linear model; `progress(step, total)` follows that slow part. With
    `tuned_cache`, a fine-tuned model trained on exactly these inputs before is reused.
    """
    from sklearn.linear_model import LogisticRegression

    if not rows:
        raise InputError("no labelled utterances to train on")
    config = config or FeatureConfig()
    encoder = encoder or SentenceEncoder(cache_size=50_000, batch_size=64)
    utts = utterances_in_context(rows)
    texts = [u.text for u in utts]
    side_texts = [side_text(u) for u in utts]
    word = NGrams.fit(texts, WORD_PARAMS)
    side = NGrams.fit(side_texts, SIDE_PARAMS)
    x = assemble(
        utts, encoder.encode(texts), context_vectors(encoder, utts), word.transform(texts),
        side.transform(side_texts), config,
    )
    y = np.array([str(r.face_act) for r in rows])
    clf = LogisticRegression(C=config.C, max_iter=3000, class_weight=class_weights([r.face_act for r in rows], power=CLASS_WEIGHT_POWER))
    clf.fit(x, y)
    intention_vectors = encoder.encode([d.text for d in PERSUASION_INTENTIONS])
    tuned = escalation = None
    if tune is not None:
        pairs = [pair_text(u.text, u.speaker, u.opener, u.context) for u in utts]
        labels = [r.face_act for r in rows]
        parts = 2 if escalate is not None else 1
        tuned = train_tuned_cached(pairs, labels, config=tune, folder=tuned_cache,
                                   progress=part_progress(progress, 0, parts))
        if escalate is not None:
            escalation = train_tuned_cached(pairs, labels, config=escalate, folder=tuned_cache,
                                            progress=part_progress(progress, 1, parts))
    return IntentModel(
        classes=[FaceAct(c) for c in clf.classes_],
        coef=np.asarray(clf.coef_),
        intercept=np.asarray(clf.intercept_),
        word=word,
        side=side,
        config=config,
        intention_vectors=intention_vectors,
        meta=dict(meta or {}),
        encoder=encoder,
        tuned=tuned,
        escalation=escalation,
    )


@dataclass
class OutOfFold:
    """Out-of-fold predictions for every row: each from a model trained on the other folds."""

    rows: list[FaceActUtterance]
    predicted: list[FaceAct]
    probabilities: np.ndarray
    classes: list[FaceAct]
    fold_of: np.ndarray
    fold_metrics: list[dict[str, Any]] = field(default_factory=list)
    escalated: int = 0  # utterances the escalation half re-assessed
    last_model: IntentModel | None = None


def cross_validate(
    rows: Sequence[FaceActUtterance],
    *,
    config: FeatureConfig | None = None,
    encoder: SentenceEncoder | None = None,
    k: int = 5,
    tune: TuneConfig | None = None,
    escalate: TuneConfig | None = None,
    reuse: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> OutOfFold:
    """Out-of-fold predictions; with `reuse`, fold models fine-tuned on the same inputs before
    (same rows, config, library versions: `cache_keys.training_key`) come from the cache."""
    rows = list(rows)
    tuned_cache = tuned_models_dir() if reuse else None
    encoder = encoder or SentenceEncoder(cache_size=50_000, batch_size=64)
    encoder.encode([r.utterance for r in rows])  # once, shared by every fold
    folds = conversation_folds([r.conversation_id for r in rows], k=k)
    classes = sorted({r.face_act for r in rows}, key=list(FaceAct).index)
    proba = np.zeros((len(rows), len(classes)), dtype=np.float32)
    fold_of = np.zeros(len(rows), dtype=int)
    oof = OutOfFold(rows, [], proba, classes, fold_of)
    utts = utterances_in_context(rows)
    for f, (train, test_rows) in enumerate(folds):
        fold_tune = replace(tune, seed=tune.seed + f) if tune is not None else None
        fold_escalate = replace(escalate, seed=escalate.seed + f) if escalate is not None else None
        model = fit([rows[i] for i in train], config=config, encoder=encoder, tune=fold_tune, escalate=fold_escalate,
                    tuned_cache=tuned_cache, progress=part_progress(progress, f, k))
        before = model.escalated
        test, p = predict_in_turn_order(model, rows, utts, test_rows.tolist())
        oof.escalated += model.escalated - before
        for j, c in enumerate(model.classes):
            proba[test, classes.index(c)] = p[:, j]
        fold_of[test] = f
        pred = [classes[int(j)] for j in proba[test].argmax(1)]
        oof.fold_metrics.append(metrics([rows[i].face_act for i in test], pred))
        oof.last_model = model
    oof.predicted = [classes[int(j)] for j in proba.argmax(1)]
    return oof


def metrics(gold: Sequence[FaceAct], predicted: Sequence[FaceAct]) -> dict[str, Any]:
    """n, accuracy, macro-F1 over the face acts present in the gold labels, per-class P/R/F1."""
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support

    labels = sorted({str(g) for g in gold}, key=[str(a) for a in FaceAct].index)
    g = [str(x) for x in gold]
    p = [str(x) for x in predicted]
    prec, rec, f1, support = precision_recall_fscore_support(g, p, labels=labels, zero_division=0)
    return {
        "n": len(g),
        "accuracy": round(float(accuracy_score(g, p)), 4) if g else 0.0,
        "macro_f1": round(float(np.mean(f1)), 4) if labels else 0.0,
        "per_class": {
            lab: {"precision": round(float(a), 4), "recall": round(float(b), 4), "f1": round(float(c), 4),
                  "support": int(s)}
            for lab, a, b, c, s in zip(labels, prec, rec, f1, support, strict=True)
        },
    }


def latency_p50(model: IntentModel, rows: Sequence[FaceActUtterance], *, limit: int = 200) -> float:
    """Median milliseconds to assess one new utterance with a warm encoder cache for its context.

    This is the live situation: the earlier turns were encoded when they arrived.
    """
    order = in_turn_order(rows, range(len(rows)))[:limit]
    everything = utterances_in_context(rows)
    utts = [everything[i] for i in order]
    budgets = conversation_budgets([rows[i] for i in order])
    domains = conversation_domains([rows[i] for i in order])
    if not utts:
        return 0.0
    model.encoder.encode([t for u in utts for _, t in u.context])
    model.predict_proba(utts[:1])  # load the encoder
    times: list[float] = []
    for u, budget, domain in zip(utts, budgets, domains, strict=True):
        model.encoder.forget([u.text])  # a new turn's own text is not cached yet
        t0 = time.perf_counter()
        model.predict_proba([u], budgets=[budget], domains=[domain])
        times.append((time.perf_counter() - t0) * 1000)
    return round(float(np.median(times)), 2)


def evaluate_file(
    path: str | Path,
    *,
    cv: bool = False,
    model: IntentModel | None = None,
    tune: TuneConfig | None = None,
    escalate: TuneConfig | None = None,
    reuse: bool = True,
    progress: Callable[[int, int], None] | None = None,
    split: Part | None = None,
) -> dict[str, Any]:
    """Metrics for a face-act CSV: with `cv`, out-of-fold over its own conversations (fine-tuning
    in every fold when `tune` is given, as the shipped model is built, reusing fold models
    trained on the same inputs before unless `reuse` is off); else with `model`. `split`: only
    the conversations of that part (`split_of`, as the everyday set is divided)."""
    from guardian.detectors.intent.model import load_model

    rows = [r for r in load_faceacts(path) if split is None or split_of(r.conversation_id) == split]
    if not rows:
        raise InputError("no utterances in the file" + (f" in its {split} part" if split else ""), source=str(path))
    if cv:
        oof = cross_validate(rows, tune=tune, escalate=escalate, reuse=reuse, progress=progress)
        result = metrics([r.face_act for r in rows], oof.predicted)
        result["mode"] = (
            "cross-validated (5 conversation folds, each fold scored by a model trained on the others"
            + (f", linear + fine-tuned {_describe(tune)}" if tune is not None else ", linear model only")
            + (f", {_describe(escalate)} where they are unsure, for at most {ESCALATION_RATE:.0%} of a conversation's"
               f" turns + {ESCALATION_SLACK})" if tune is not None and escalate is not None else ")")
        )
        if tune is not None and escalate is not None:
            result["escalated_share"] = round(oof.escalated / len(rows), 4)
        result["folds"] = [
            {"n": m["n"], "accuracy": m["accuracy"], "macro_f1": m["macro_f1"],
             "hpos-_f1": m["per_class"].get("hpos-", {}).get("f1")}
            for m in oof.fold_metrics
        ]
        assert oof.last_model is not None
        lat_model = oof.last_model
    else:
        lat_model = model or load_model()
        order, in_order = predict_in_turn_order(lat_model, rows, utterances_in_context(rows), range(len(rows)))
        probs = np.zeros_like(in_order)
        probs[order] = in_order
        predicted = [lat_model.classes[int(j)] for j in probs.argmax(1)]
        result = metrics([r.face_act for r in rows], predicted)
        result.update(shown_metrics([r.face_act for r in rows], predicted, probs.max(1), lat_model.abstain_below))
        result["mode"] = "trained model" + (
            " (WARNING: this file is its training data)"
            if lat_model.meta.get("data_sha256") == file_sha256(Path(path)) else ""
        )
    result["latency_ms_p50"] = latency_p50(lat_model, rows)
    return result


def shown_metrics(
    gold: Sequence[FaceAct], predicted: Sequence[FaceAct], confidence: np.ndarray, threshold: float
) -> dict[str, Any]:
    """What a user sees: the intents at or above the abstention threshold, their share and precision
    (all shown intents, and those that are not `other`)."""
    shown = confidence >= threshold
    right = np.array([g == p for g, p in zip(gold, predicted, strict=True)], dtype=bool)
    acts = shown & np.array([p is not FaceAct.OTHER for p in predicted], dtype=bool)
    return {"abstain_below": round(float(threshold), 4), "shown_share": round(float(shown.mean()), 4),
            "shown_precision": round(float(right[shown].mean()), 4) if shown.any() else None,
            "shown_acts_precision": round(float(right[acts].mean()), 4) if acts.any() else None}


def _describe(config: TuneConfig) -> str:
    return config.encoder + (f" cut to {config.layers} layers" if config.layers else "")


def train_and_save(
    out: Path,
    *,
    data: Path | None = None,
    tune: TuneConfig | None = None,
    escalate: TuneConfig | None = None,
    reuse: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> IntentModel:
    """The reproducible build of the shipped artifact (`guardian train-intent`); with `reuse`, a
    fine-tuned model (or teacher) trained on exactly these inputs before comes from the cache."""
    import sklearn
    import torch

    path = data or faceacts_path()
    rows = load_faceacts(path)
    meta = {"data_sha256": file_sha256(path), "n_train": len(rows), "sklearn": sklearn.__version__,
            "torch": torch.__version__, "tune_config": asdict(tune) if tune is not None else None,
            "escalation_config": asdict(escalate) if tune is not None and escalate is not None else None}
    model = fit(rows, meta=meta, tune=tune, escalate=escalate, tuned_cache=tuned_models_dir() if reuse else None,
                progress=progress)
    model.save(out)
    return model
