"""Technique / vulnerability labels of the turn model: per-turn heads against window label heads.

`--compare`: dev-part micro-F1 (the labelled manipulative MentalManip con dialogues of the dev
part; the label ratio tuned on dev, as `calibrate` does) of the artifact's per-turn heads at the
top turn, and of window heads (`detectors/local/labels.py`) over pools of the MiniLM turn vectors
(u), the hidden layer (h) or both, for a grid of L2 weights. Also top-1 (one label per dialogue).

`--out DIR`: the artifact with the window label head fitted on its hidden layer (train part),
the label ratios re-tuned on dev; the manipulation and scam heads, calibration and thresholds
are copied unchanged (so no decision changes). `guardian train` fits the same head after the MIL
fit (`TrainConfig.label_l2`).
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from guardian.detectors.local.corpus import Corpus, load_corpus
from guardian.detectors.local.data import Bag
from guardian.detectors.local.labels import LABELLED, fit_label_head, fit_multilabel
from guardian.detectors.local.model import MANIP, TECH, VULN, TurnModel, window_pool
from guardian.detectors.local.train import (
    _micro_f1,
    _ratio_decisions,
    dev_scores,
    tune_label_ratios,
)

RATIOS = np.linspace(0.3, 1.0, 15)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros(scores.shape, bool)
    np.put_along_axis(out, np.argsort(-scores, axis=1)[:, :k], True, axis=1)
    return out


def measure(truth: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    ratio = float(max(RATIOS, key=lambda r: _micro_f1(truth, _ratio_decisions(scores, r))))
    return {"micro_f1": round(_micro_f1(truth, _ratio_decisions(scores, ratio)), 4), "ratio": round(ratio, 2),
            "top1_micro_f1": round(_micro_f1(truth, top_k(scores, 1)), 4)}


def pools(model: TurnModel, features: np.ndarray, what: str) -> Callable[[Bag], np.ndarray]:
    """[mean, manipulation-weighted mean, top turn] of the bag's u (MiniLM turn vectors) and/or h (hidden)."""

    def one(b: Bag) -> np.ndarray:
        x = features[b.rows]
        hidden = model.hidden(x)
        z = (hidden @ model.w2 + model.b2)[:, MANIP]
        top = int(np.argmax(z))
        parts = []
        for m in ((x[:, :384],) if what == "u" else (hidden,) if what == "h" else (x[:, :384], hidden)):
            parts += [window_pool(m, z), m[top]]
        return np.concatenate(parts)

    return one


def tfidf(corpus: Corpus, train: Sequence[Bag], dev: Sequence[Bag], y: np.ndarray) -> np.ndarray:
    """A lexical baseline: 1-2-gram TF-IDF of the whole dialogue, one balanced logistic regression per label."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    def text(b: Bag) -> str:
        return " ".join(corpus.data.texts[r] for r in b.rows)

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    x_train = vectorizer.fit_transform([text(b) for b in train])
    x_dev = vectorizer.transform([text(b) for b in dev])
    return np.stack([LogisticRegression(C=4.0, max_iter=1000, class_weight="balanced").fit(x_train, y[:, j])
                     .predict_proba(x_dev)[:, 1] for j in range(y.shape[1])], axis=1)


def compare(model: TurnModel, corpus: Corpus, l2s: Sequence[float]) -> None:
    x = corpus.data.features
    z = model.logits(x)
    for attr, cols in (("techniques", TECH), ("vulnerabilities", VULN)):
        train = [b for b in corpus.train if b.source in LABELLED and getattr(b, attr) is not None]
        dev = [b for b in corpus.dev if b.source == "mentalmanip" and getattr(b, attr) is not None]
        truth = np.array([getattr(b, attr) for b in dev], bool)
        top = [b.rows[int(np.argmax(z[b.rows, MANIP]))] for b in dev]
        y = np.array([getattr(b, attr) for b in train])
        rows = {"per-turn heads, top turn (shipped before)": 1 / (1 + np.exp(-z[top, cols]))}

        def softmax_pooled(b: Bag, cols: slice = cols) -> np.ndarray:
            a = np.exp(z[b.rows, MANIP] - z[b.rows, MANIP].max())
            return np.asarray((a / a.sum()) @ z[b.rows][:, cols])

        rows["per-turn heads pooled by the manipulation softmax"] = 1 / (1 + np.exp(-np.array(
            [softmax_pooled(b) for b in dev])))
        for what in ("u", "h", "u+h"):
            pool = pools(model, x, what)
            f_train = np.array([pool(b) for b in train])
            f_dev = np.array([pool(b) for b in dev])
            for l2 in l2s:
                w, bias = fit_multilabel(f_train, y, l2=l2)
                rows[f"window head over {what}, l2 {l2}"] = 1 / (1 + np.exp(-(f_dev @ w + bias)))
        if "window head over h, l2 0.1" in rows and "window head over u, l2 1.0" in rows:
            rows["mean of the h (l2 .1) and u (l2 1) heads"] = (
                rows["window head over h, l2 0.1"] + rows["window head over u, l2 1.0"]) / 2
            rows["TF-IDF of the dialogue, logistic regression"] = tfidf(corpus, train, dev, y)
            rows["mean of the h head and TF-IDF"] = (
                rows["window head over h, l2 0.1"] + rows["TF-IDF of the dialogue, logistic regression"]) / 2
        for name, scores in rows.items():
            print(json.dumps({"labels": attr, "n_dev": len(dev), "n_train": len(train), "head": name,
                              **measure(truth, scores)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--l2", type=float, nargs="*", default=[0.03, 0.1, 0.3, 1.0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    model = TurnModel.load(args.artifact)
    corpus = load_corpus()
    if args.compare:
        compare(model, corpus, args.l2)
    if args.out:
        before = copy.copy(model)
        before.label_w = before.label_b = None
        old = tune_label_ratios(before, dev_scores(before, corpus))
        l2 = args.l2[0] if len(args.l2) == 1 else 0.1
        fitted = fit_label_head(model, corpus, l2=l2)
        new = tune_label_ratios(model, dev_scores(model, corpus))
        model.metrics = {**model.metrics, **new}
        model.info = {**model.info, "label_head": fitted,
                      "config": {**model.info.get("config", {}), "label_l2": l2}}
        model.save(args.out)
        print(json.dumps({"per_turn_heads_dev": old, "window_head_dev": new, "ratios": {
            "technique": model.technique_ratio, "vulnerability": model.vulnerability_ratio}, **fitted}, indent=1))


if __name__ == "__main__":
    main()
