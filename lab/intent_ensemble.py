"""Experiment (docs/intent.md): average out-of-fold face-act probabilities of several models.

Every input is out-of-fold over the shared conversation folds (`conversation_folds`, seed 17):
the linear model's from `intent_train.cross_validate` (computed once, cached in
`<cache>_linear_proba.npy`), the fine-tuned ones from `lab/intent_finetune.py --out X`
(`X_proba.npy`). Weights are fixed on the command line, never searched on these folds.

    .venv/bin/python lab/intent_ensemble.py --linear /tmp/lin /tmp/ftA_proba.npy /tmp/ftB_proba.npy
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import guardian  # noqa: F401  (offline environment defaults)
from guardian.corpora.datasets import load_faceacts
from guardian.corpora.folds import conversation_folds
from guardian.detectors.intent.train import cross_validate, metrics


def report(name: str, gold: list, classes: list, proba: np.ndarray, fold_of: np.ndarray) -> dict:
    pred = [classes[int(j)] for j in proba.argmax(1)]
    m = metrics(gold, pred)
    per_fold = [
        round(float(np.mean([pred[i] == gold[i] for i in np.flatnonzero(fold_of == f)])), 3)
        for f in range(int(fold_of.max()) + 1)
    ]
    return {"model": name, "n": m["n"], "accuracy": m["accuracy"], "macro_f1": m["macro_f1"],
            "hpos-": m["per_class"].get("hpos-", {}).get("f1"), "fold_accuracy": per_fold}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("finetuned", nargs="*", help="X_proba.npy files from intent_finetune.py")
    ap.add_argument("--linear", default="intent_oof", help="cache prefix for the linear model's OOF")
    ap.add_argument("--linear-weight", type=float, default=None,
                    help="weight of the linear model (default: equal weights for every model)")
    args = ap.parse_args()

    rows = load_faceacts()
    gold = [r.face_act for r in rows]
    cache = Path(f"{args.linear}_linear_proba.npy")
    if cache.is_file():
        linear = np.load(cache)
    else:
        linear = cross_validate(rows).probabilities
        np.save(cache, linear)
    classes = sorted({r.face_act for r in rows}, key=lambda a: list(type(a)).index(a))
    fold_of = np.zeros(len(rows), dtype=int)
    for f, (_, test) in enumerate(conversation_folds([r.conversation_id for r in rows], k=5)):
        fold_of[test] = f
    tuned = [np.load(p) for p in args.finetuned]
    out = [report("linear", gold, classes, linear, fold_of)]
    for p, t in zip(args.finetuned, tuned, strict=True):
        out.append(report(Path(p).name, gold, classes, t, fold_of))
    if tuned:
        mean_tuned = np.mean(tuned, axis=0)
        if len(tuned) > 1:
            out.append(report("mean of fine-tuned", gold, classes, mean_tuned, fold_of))
        w = args.linear_weight if args.linear_weight is not None else 1 / (1 + len(tuned))
        out.append(report(f"linear x {w:.2f} + fine-tuned", gold, classes,
                          w * linear + (1 - w) * mean_tuned, fold_of))
    for line in out:
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
