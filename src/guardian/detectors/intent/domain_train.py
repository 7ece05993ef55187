"""Training the everyday head, the domain gate and the abstention threshold (never imported at run time).

The everyday set (`data/faceacts/everyday.csv`) is split by conversation with the corpora's
`split_of` (train / dev / test): the head and the gate learn from the train part (and the whole
persuasion corpus), the tuned half's share and the abstention threshold are chosen on the dev part,
and the test part is only ever scored (`guardian eval faceacts data/faceacts/everyday.csv --split test`).
The fine-tuned halves are kept as they are: refitting them costs hours on two cores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import FaceActUtterance
from guardian.detectors.intent.domain import DeepHead, DomainGate, EverydayHead
from guardian.detectors.intent.model import (
    SIDE_PARAMS,
    WORD_PARAMS,
    FeatureConfig,
    IntentModel,
    NGrams,
    assemble,
    context_vectors,
    side_text,
)
from guardian.detectors.intent.train import CLASS_WEIGHT_POWER, utterances_in_context
from guardian.detectors.intent.tuned import TunedFaceActs, pair_text
from guardian.encoding.finetune import class_weights
from guardian.encoding.sentence_encoder import SentenceEncoder
from guardian.taxonomy import FaceAct

Part = Literal["train", "dev", "test"]
#: How much one everyday utterance counts against one persuasion utterance in the head's loss.
EVERYDAY_WEIGHT = 4.0
#: ... and one distilled utterance (labelled once by an LLM, rounds 8-11; 2 did as well on dev, lab/intent_everyday_r9_head.py).
DISTILLED_WEIGHT = 4.0
#: The everyday head's regularisation (the persuasion linear half uses C = 2).
HEAD_C = 1.0
#: The gate's regularisation (C = 4 and 0.5 route the same share of persuasion turns; 4 did better on the dev part).
GATE_C = 4.0
#: The smallest share of the dev part's turns that must keep a shown intent when the threshold is tuned.
MIN_COVERAGE = 0.1


def part_of(rows: Sequence[FaceActUtterance], part: Part | None) -> list[FaceActUtterance]:
    """The rows of one split part (whole conversations, by `split_of` of the conversation id); all for None."""
    return list(rows) if part is None else [r for r in rows if split_of(r.conversation_id) == part]


@dataclass(frozen=True, slots=True)
class Vectors:
    """MiniLM vectors of rows' utterances and of their contexts (row order)."""

    utterance: np.ndarray
    context: np.ndarray

    @classmethod
    def of(cls, rows: Sequence[FaceActUtterance], encoder: SentenceEncoder) -> Vectors:
        utts = utterances_in_context(rows)
        return cls(encoder.encode([u.text for u in utts]), context_vectors(encoder, utts))


def fit_gate(persuasion: np.ndarray, everyday: np.ndarray, *, c: float = GATE_C) -> DomainGate:
    """Logistic regression, persuasion (1) against everyday (0) utterance vectors, classes balanced."""
    from sklearn.linear_model import LogisticRegression

    x = np.vstack([persuasion, everyday])
    y = np.r_[np.ones(len(persuasion)), np.zeros(len(everyday))]
    clf = LogisticRegression(C=c, max_iter=2000, class_weight="balanced").fit(x, y)
    return DomainGate(np.asarray(clf.coef_[0], dtype=np.float32), float(clf.intercept_[0]))


@dataclass(frozen=True, slots=True)
class Head:
    classes: list[FaceAct]
    coef: np.ndarray
    intercept: np.ndarray
    word: NGrams
    side: NGrams


def fit_head(
    persuasion: Sequence[FaceActUtterance], everyday: Sequence[FaceActUtterance], *,
    persuasion_vectors: Vectors, everyday_vectors: Vectors, config: FeatureConfig | None = None,
    everyday_weight: float | np.ndarray = EVERYDAY_WEIGHT, c: float = HEAD_C, augment: bool = True,
) -> Head:
    """The everyday head: the linear half's features over both sets (`everyday_weight`: one weight
    for every everyday row, or one per row); with `augment`, the features
    once more for everyday rows only (zeros for persuasion rows), so everyday conventions get their
    own weights on top of the shared ones. At run time every utterance it reads is treated as
    everyday, so the copy folds into the shared weights (coef = shared + everyday)."""
    from scipy.sparse import csr_matrix, hstack, vstack
    from sklearn.linear_model import LogisticRegression

    config = config or FeatureConfig()
    up, ue = utterances_in_context(persuasion), utterances_in_context(everyday)
    texts = [u.text for u in (*up, *ue)]
    word = NGrams.fit(texts, WORD_PARAMS)
    side = NGrams.fit([side_text(u) for u in (*up, *ue)], SIDE_PARAMS)

    def design(utts: list[Any], v: Vectors) -> Any:
        return assemble(utts, v.utterance, v.context, word.transform([u.text for u in utts]),
                        side.transform([side_text(u) for u in utts]), config)

    xp, xe = design(up, persuasion_vectors), design(ue, everyday_vectors)
    width = xp.shape[1]
    if augment:
        xp = hstack([xp, csr_matrix(xp.shape, dtype=np.float32)], format="csr")
        xe = hstack([xe, xe], format="csr")
    x = vstack([xp, xe], format="csr")
    labels = [str(r.face_act) for r in (*persuasion, *everyday)]
    cw = class_weights(labels, power=CLASS_WEIGHT_POWER)
    weights = np.array([cw[y] for y in labels]) * np.r_[np.ones(len(up)), np.broadcast_to(everyday_weight, len(ue))]
    clf = LogisticRegression(C=c, max_iter=3000).fit(x, np.array(labels), sample_weight=weights)
    coef = np.asarray(clf.coef_, dtype=np.float32)
    if augment:
        coef = coef[:, :width] + coef[:, width:]
    return Head([FaceAct(c) for c in clf.classes_], coef, np.asarray(clf.intercept_, dtype=np.float32), word, side)


#: The deep head (frozen mpnet-6 vectors of the turn and the turn before, `domain.DeepHead`), chosen by
#: conversation-grouped 5-fold CV over the everyday train + dev parts (lab/intent_everyday_r3_cv.py).
DEEP_C, DEEP_POWER, DEEP_CUE_SCALE, DEEP_TUNED_SHARE, DEEP_HEAD_SHARE = 2.0, 0.5, 0.3, 0.2, 0.0
#: The everyday tuned half is read only for turns whose blend without it is below this (round 4: in the
#: same CV the half read for the unsure third of the turns did as well as read for all; 1.0 reads it
#: always, round 3's candidate, whose third pass per everyday turn put the bench over 15 ms).
DEEP_TUNED_BELOW = 0.4
#: Whether `train_everyday` fits the deep head by default (docs/history.md, "Intent model", rounds 3-4; since
#: round 5 the fine-tuned mpnet-6 everyday half does better on dev without it, in one pass fewer).
EVERYDAY_DEEP = False


def fit_deep(rows: Sequence[FaceActUtterance], *, c: float = DEEP_C, power: float = DEEP_POWER,
             cue_scale: float = DEEP_CUE_SCALE, tuned_share: float = DEEP_TUNED_SHARE,
             head_share: float = DEEP_HEAD_SHARE, tuned_below: float = DEEP_TUNED_BELOW) -> DeepHead:
    """The deep head on everyday rows alone (the persuasion corpus' conventions are what it must not
    learn), class weights (n / (k x count)) ** power; the vectors from the int8 encoder the detector runs."""
    from sklearn.linear_model import LogisticRegression

    from guardian.detectors.intent.frozen import shared_frozen_encoder

    probe = DeepHead([], np.zeros((0, 0), np.float32), np.zeros(0, np.float32), cue_scale, tuned_share, head_share)
    x = probe.design(utterances_in_context(rows), shared_frozen_encoder())
    labels = [str(r.face_act) for r in rows]
    cw = class_weights(labels, power=power)
    clf = LogisticRegression(C=c, max_iter=3000).fit(x, np.array(labels), sample_weight=np.array([cw[y] for y in labels]))
    return DeepHead([FaceAct(k) for k in clf.classes_], np.asarray(clf.coef_, dtype=np.float32),
                    np.asarray(clf.intercept_, dtype=np.float32), cue_scale, tuned_share, head_share, tuned_below)


def precision_threshold(
    confidence: np.ndarray, correct: np.ndarray, *, target: float, min_coverage: float = MIN_COVERAGE,
    z: float = 0.0,
) -> tuple[float, float, float]:
    """(threshold, precision, coverage): the lowest threshold on `confidence` whose shown predictions
    (confidence >= threshold) are right at least `target` of the time, keeping at least
    `min_coverage` of them; when none reaches the target, the most precise one with that coverage.

    With `z` > 0 the shown predictions' Wilson lower bound at `z` must reach the target, not their
    precision: the lowest threshold where a noisy precision curve first touches the target is chosen
    because it is high there by chance, so on new turns it gives the target only half of the time
    (round 6, `lab/intent_everyday_r6_threshold.py`)."""
    order = np.sort(np.unique(np.round(confidence, 4)))
    best: tuple[float, float, float] | None = None
    fallback: tuple[float, float, float] = (0.0, float(correct.mean()) if len(correct) else 0.0, 1.0)
    for t in order:
        shown = confidence >= t
        coverage = float(shown.mean())
        if coverage < min_coverage:
            break
        precision = float(correct[shown].mean())
        if wilson_lower(precision, int(shown.sum()), z) >= target and best is None:
            best = (float(t), precision, coverage)
        if precision > fallback[1]:
            fallback = (float(t), precision, coverage)
    return best or fallback


def wilson_lower(p: float, n: int, z: float) -> float:
    """The Wilson score interval's lower end for a proportion p of n (p itself for z = 0)."""
    if z <= 0.0 or n <= 0:
        return p
    z2 = z * z
    return float((p + z2 / (2 * n) - z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n))) / (1 + z2 / n))


def with_everyday(model: IntentModel, head: Head, gate: DomainGate, *, tuned_weight: float, abstain_below: float,
                  meta: dict[str, Any], tuned: TunedFaceActs | None = None, deep: DeepHead | None = None) -> IntentModel:
    """`model` (its halves unchanged) with the everyday head attached."""
    model.everyday = EverydayHead(
        classes=head.classes, coef=head.coef, intercept=head.intercept, word=head.word, side=head.side,
        config=model.config, gate=gate, tuned_weight=tuned_weight, abstain_below=abstain_below, meta=meta,
        tuned=tuned, deep=deep,
    )
    return model


def gate_texts(n_per_source: int = 800, seed: int = 25) -> list[str]:
    """The gate's everyday negatives besides the labelled set: utterances of train-part
    conversations (never a dev/test one) of DailyDialog, SGD, the phone calls and MentalManip."""
    import json
    import random

    from guardian.corpora.conversations import conversations_dir
    from guardian.corpora.datasets import load_mentalmanip

    rng = random.Random(seed)
    out: list[str] = []
    for name in ("dailydialog", "sgd", "calls"):
        path = conversations_dir() / f"{name}.jsonl"
        if not path.is_file():
            continue
        texts = []
        with path.open(encoding="utf-8") as f:
            for line in f:
                conv = json.loads(line)
                if split_of(conv["id"]) == "train":
                    texts += [t["text"] for t in conv["turns"] if t["text"].strip()]
        out += rng.sample(texts, min(n_per_source, len(texts)))
    mm = [t.text for d in load_mentalmanip() if split_of(f"mm-{d.id}") == "train" for t in d.conversation.turns]
    out += rng.sample(mm, min(n_per_source, len(mm)))
    return out


#: The everyday tuned half's share beside the everyday head (chosen on the dev part, docs/intent.md "Operating points").
HEAD_TUNED_WEIGHT = 0.5
#: The everyday tuned half's recipe: a persuasion half fine-tuned further on the everyday train
#: pairs, each `TUNE_REPEAT` times, plus `TUNE_REPLAY` persuasion pairs so it keeps what it knew.
#: Round 5 starts from the mpnet-6 escalation half (`TUNE_FROM_ESCALATION`; rounds 1-4: the MiniLM
#: half, 2 / 500 / 2 / 4e-5), which needs a longer, faster schedule to leave the charity setting.
TUNE_REPEAT, TUNE_REPLAY, TUNE_EPOCHS, TUNE_LR = 3, 300, 5, 1e-4
TUNE_FROM_ESCALATION = True
#: The precision the abstention threshold is tuned for on the dev part (the issue's target for shown intents).
SHOWN_PRECISION = 0.85
#: ... as the Wilson lower bound at this z (one-sided 90 %), so that new turns get it too (round 6: the
#: plain precision rule realised .848 on average and under .79 one time in ten on held-out halves of dev).
SHOWN_PRECISION_Z = 1.2816


def labelled_pairs(rows: Sequence[FaceActUtterance]) -> list[tuple[str, str]]:
    """The tuned halves' input pair of each row, in row order (context from the rows before it in its conversation)."""
    return [pair_text(u.text, u.speaker, u.opener, u.context) for u in utterances_in_context(rows)]


def tune_everyday_half(start: TunedFaceActs, persuasion: Sequence[FaceActUtterance],
                       train: Sequence[FaceActUtterance], *, progress: Callable[[int, int], None] | None = None,
                       distilled: Sequence[FaceActUtterance] = (), repeat: int = TUNE_REPEAT,
                       replay: int = TUNE_REPLAY, epochs: int = TUNE_EPOCHS, lr: float = TUNE_LR) -> TunedFaceActs:
    """The everyday tuned half (recipe `TUNE_*` by default): the labelled train pairs `repeat` times, the
    `distilled` ones (single LLM labels, round 8) once; about 10 minutes from mpnet-6 on 2 idle AMX cores
    for the labelled part alone, 30 with round 8's distilled turns."""
    import random

    from guardian.detectors.intent.tuned_train import train_tuned

    replayed = random.Random(25).sample(range(len(persuasion)), min(replay, len(persuasion)))
    pe_pairs = labelled_pairs(persuasion)
    x = labelled_pairs(train) * repeat + labelled_pairs(distilled) + [pe_pairs[i] for i in replayed]
    y = ([r.face_act for r in train] * repeat + [r.face_act for r in distilled]
         + [persuasion[i].face_act for i in replayed])
    return train_tuned(x, y, config=replace(start.config, epochs=epochs, lr=lr), start=start, progress=progress)


def distilled_train_rows(distilled: Sequence[FaceActUtterance]) -> list[FaceActUtterance]:
    """`distilled` itself, checked to hold train-part conversations only: a distilled turn of a dev or
    test conversation would leak into the threshold or the held-out figures."""
    outside = [r.conversation_id for r in distilled if split_of(r.conversation_id) != "train"]
    if outside:
        raise ValueError(f"{len(outside)} distilled turns are of dev/test conversations (e.g. {outside[0]}); "
                         "distilled labels may only come from the train part")
    return list(distilled)


def train_everyday(model: IntentModel, persuasion: Sequence[FaceActUtterance], everyday: Sequence[FaceActUtterance],
                   *, data_sha256: str, tuned: TunedFaceActs | None = None, deep: bool = EVERYDAY_DEEP,
                   tuned_weight: float = HEAD_TUNED_WEIGHT, deep_fit: Mapping[str, float] | None = None,
                   distilled: Sequence[FaceActUtterance] = (), distilled_sha256: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Attach the everyday head to `model`: head, gate and everyday tuned half (`tuned`, else
    fine-tuned here) from the everyday train part and the `distilled` turns (train-part turns
    labelled once by an LLM, rounds 8-11), the abstention threshold from the dev part (scored as the
    live detector runs); with `deep`, the deep head on frozen mpnet-6 vectors too (`deep_fit`:
    `fit_deep`'s options, for experiments). `tuned_weight`: the half's share beside the head.
    Returns what was chosen."""
    gold, dev = part_of(everyday, "train"), part_of(everyday, "dev")
    if not gold or not dev:
        raise ValueError("the everyday file has no conversations in its train or dev part")
    extra = distilled_train_rows(distilled)
    train = [*gold, *extra]
    encoder = model.encoder
    pv, tv = Vectors.of(persuasion, encoder), Vectors.of(train, encoder)
    gate = fit_gate(pv.utterance, np.vstack([encoder.encode(gate_texts()), tv.utterance]))
    head = fit_head(persuasion, train, persuasion_vectors=pv, everyday_vectors=tv,
                    everyday_weight=np.r_[np.full(len(gold), EVERYDAY_WEIGHT), np.full(len(extra), DISTILLED_WEIGHT)])
    if tuned is None:
        start = model.escalation if TUNE_FROM_ESCALATION and model.escalation is not None else model.tuned
        if start is None:
            raise ValueError("the intent model has no fine-tuned half to start the everyday one from")
        tuned = tune_everyday_half(start, persuasion, gold, distilled=extra, progress=progress)
    meta = {"data_sha256": data_sha256, "trained_on": "train", "tuned_on": "dev", "n_train": len(gold),
            "n_distilled": len(extra), "distilled_sha256": distilled_sha256,
            "everyday_weight": EVERYDAY_WEIGHT, "distilled_weight": DISTILLED_WEIGHT, "head_c": HEAD_C, "gate_c": GATE_C,
            "tune": {"repeat": TUNE_REPEAT, "replay": TUNE_REPLAY, "epochs": TUNE_EPOCHS, "lr": TUNE_LR}}
    if deep:
        meta["deep_fit"] = {"c": DEEP_C, "power": DEEP_POWER}
    with_everyday(model, head, gate, tuned_weight=tuned_weight, abstain_below=0.0, meta=meta, tuned=tuned,
                  deep=fit_deep(train, **(deep_fit or {})) if deep else None)
    return choose_threshold(model, dev)


def rethreshold(model: IntentModel, everyday: Sequence[FaceActUtterance]) -> dict[str, Any]:
    """Choose the everyday side's abstention threshold again on the dev part of `everyday`, keeping
    every weight: what `guardian train-intent --everyday FILE --threshold-only` does after the
    runtime changed how the halves score (round 6: seven-bit int8 weights). Returns what was chosen."""
    if model.everyday is None:
        raise ValueError("the intent model has no everyday side to choose a threshold for; train it with --everyday")
    dev = part_of(everyday, "dev")
    if not dev:
        raise ValueError("the everyday file has no conversations in its dev part")
    return choose_threshold(model, dev)


def choose_threshold(model: IntentModel, dev: Sequence[FaceActUtterance]) -> dict[str, Any]:
    """Score `dev` as the live detector runs (turn order, all halves) and set the everyday side's
    abstention threshold by the Wilson rule (`precision_threshold(..., z=SHOWN_PRECISION_Z)`)."""
    from guardian.detectors.intent.train import predict_in_turn_order

    assert model.everyday is not None
    model.everyday.abstain_below = 0.0
    order, probs = predict_in_turn_order(model, dev, utterances_in_context(dev), range(len(dev)))
    correct = np.array([model.classes[int(j)] == dev[i].face_act for i, j in zip(order, probs.argmax(1), strict=True)])
    threshold, precision, coverage = precision_threshold(probs.max(1), correct, target=SHOWN_PRECISION,
                                                         z=SHOWN_PRECISION_Z)
    model.everyday.abstain_below = threshold
    model.everyday.meta.update({"dev_accuracy": round(float(correct.mean()), 4), "dev_shown_precision": round(precision, 4),
                                "dev_shown_share": round(coverage, 4), "abstain_below": threshold})
    return model.everyday.meta
