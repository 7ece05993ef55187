"""Is a learned dialogue-level aggregator worth it at the research operating point? (issue 19)

The turn model's dialogue probability is its most suspicious turn's (a maximum). At `high`
(MentalManip's best macro-F1 on dev) that gives accuracy .714, macro-F1 .630 and FPR .647 on the
con test part: the maximum has more chances to fire on longer dialogues. Issue 19 allows "a small
learned aggregator over the recent turns". This fits one logistic regression on the MentalManip
con train part over what the window label head reads (the window's mean hidden vector, its
manipulation-weighted mean, the top turn's hidden vector) plus the top logit, L2 chosen on dev,
and compares it with the maximum on the dev and test parts: AUC, and accuracy / macro-F1 / FPR
(with FPR by length) at the threshold of best dev macro-F1. The window is the whole dialogue, as
`guardian eval mentalmanip` reads it. Nothing of the test part is used for any choice.

Usage: python lab/turn_dialogue_head.py --artifact src/guardian/resources/turn_model [--out JSON]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import load_mentalmanip, mentalmanip_path
from guardian.detectors.local.corpus import training_encoder
from guardian.detectors.local.features import turn_rows
from guardian.detectors.local.labels import fit_multilabel
from guardian.detectors.local.model import MANIP, TurnModel, window_pool


def auc(y: np.ndarray, s: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s))


def metrics(y: np.ndarray, s: np.ndarray, t: float, lengths: np.ndarray) -> dict[str, object]:
    from sklearn.metrics import accuracy_score, f1_score

    pred = s >= t
    fp, tn = int((pred & ~y).sum()), int((~pred & ~y).sum())
    by_len = {}
    for name, lo, hi in (("2-4", 2, 4), ("5-8", 5, 8), ("9+", 9, 10**6)):
        m = ~y & (lengths >= lo) & (lengths <= hi)
        by_len[name] = round(float(pred[m].mean()), 3) if m.any() else None
    return {"accuracy": round(float(accuracy_score(y, pred)), 4),
            "macro_f1": round(float(f1_score(y, pred, average="macro", zero_division=0)), 4),
            "fpr": round(fp / max(1, fp + tn), 4), "recall": round(float(pred[y].mean()), 4), "fpr_by_turns": by_len}


def best_threshold(y: np.ndarray, s: np.ndarray) -> float:
    grid = np.unique(s)
    return float(max(grid, key=lambda t: metrics(y, s, t, np.zeros(len(y)))["macro_f1"]))  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    model = TurnModel.load(args.artifact)
    dialogues = load_mentalmanip(mentalmanip_path("con"))
    encoder = training_encoder()
    parts, feats, tops, lengths, y = [], [], [], [], []
    for d in dialogues:
        turns = d.conversation.turns
        vectors = encoder.encode([t.text for t in turns])
        hidden = model.hidden(turn_rows(turns, vectors))
        z = (hidden @ model.w2 + model.b2)[:, MANIP]
        top = int(np.argmax(z))
        feats.append(np.concatenate([window_pool(hidden, z), hidden[top], [z[top]]]))
        tops.append(float(z[top]))
        lengths.append(len(turns))
        y.append(d.manipulative)
        parts.append(split_of(d.id))
    x, top_z = np.asarray(feats, np.float32), np.asarray(tops)
    y_, n = np.asarray(y, bool), np.asarray(lengths)
    part = np.asarray(parts)
    tr, dv, te = part == "train", part == "dev", part == "test"
    report: dict[str, object] = {"n": {"train": int(tr.sum()), "dev": int(dv.sum()), "test": int(te.sum())}}
    t_max = best_threshold(y_[dv], top_z[dv])
    report["maximum (shipped)"] = {"dev_auc": round(auc(y_[dv], top_z[dv]), 4), "test_auc": round(auc(y_[te], top_z[te]), 4),
                                   "dev": metrics(y_[dv], top_z[dv], t_max, n[dv]),
                                   "test": metrics(y_[te], top_z[te], t_max, n[te])}
    best: tuple[float, float] | None = None
    for l2 in (0.3, 1.0, 3.0, 10.0, 30.0):
        w, b = fit_multilabel(x[tr], y_[tr, None].astype(np.float32), l2=l2)
        s = (x @ w + b)[:, 0]
        a = auc(y_[dv], s[dv])
        report[f"learned, L2 {l2}"] = {"dev_auc": round(a, 4)}
        if best is None or a > best[1]:
            best = (l2, a)
    assert best is not None
    w, b = fit_multilabel(x[tr], y_[tr, None].astype(np.float32), l2=best[0])
    s = (x @ w + b)[:, 0]
    t = best_threshold(y_[dv], s[dv])
    report["learned (L2 of best dev AUC)"] = {
        "l2": best[0], "dev_auc": round(auc(y_[dv], s[dv]), 4), "test_auc": round(auc(y_[te], s[te]), 4),
        "dev": metrics(y_[dv], s[dv], t, n[dv]), "test": metrics(y_[te], s[te], t, n[te])}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
