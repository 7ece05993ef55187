"""Experiment (docs/intent.md): out-of-fold probabilities of the product's fine-tuned half alone.

Trains `detectors.intent.tuned_train.train_tuned` (the code `guardian train-intent` runs) in each of the 5
conversation folds (`conversation_folds`, fold f with seed + f, as `intent_train.cross_validate`
does), saves `<out>_proba.npy` (rows in `load_faceacts()` order, columns in FaceAct order of the
acts present) and each fold's model as `<out>_fold<f>/tuned.npz`, so that ensembles and
inference variants can be measured afterwards without retraining (`lab/intent_ensemble.py`).

    OMP_NUM_THREADS=1 .venv/bin/python lab/intent_tuned_oof.py --seed 17 --out /tmp/tuned17
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import guardian  # noqa: F401  (offline environment defaults)
from guardian.corpora.datasets import load_faceacts
from guardian.corpora.folds import conversation_folds
from guardian.detectors.intent.train import metrics, utterances_in_context
from guardian.detectors.intent.tuned import TuneConfig, pair_text
from guardian.detectors.intent.tuned_train import train_tuned
from guardian.taxonomy import FaceAct


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=TuneConfig().seed, help="fold f trains with seed + f")
    ap.add_argument("--epochs", type=int, default=TuneConfig().epochs)
    ap.add_argument("--context", type=int, default=2, help="previous utterances in the second segment")
    ap.add_argument("--max-len", type=int, default=TuneConfig().max_len, help="word pieces per pair")
    ap.add_argument("--power", type=float, default=TuneConfig().class_weight_power,
                    help="class-weight power (0 = none, 1 = balanced)")
    ap.add_argument("--pooling", default=TuneConfig().pooling, choices=["all", "utterance"])
    ap.add_argument("--folds", default="0,1,2,3,4")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    rows = load_faceacts()
    classes = [a for a in FaceAct if any(r.face_act == a for r in rows)]
    pairs = [pair_text(u.text, u.speaker, u.opener, u.context) for u in utterances_in_context(rows, context=args.context)]
    proba_file = Path(f"{args.out}_proba.npy")
    proba = np.load(proba_file) if proba_file.is_file() else np.full((len(rows), len(classes)), np.nan, np.float32)
    config = replace(TuneConfig(), epochs=args.epochs, max_len=args.max_len,
                     class_weight_power=args.power, pooling=args.pooling)
    for f, (train, test) in enumerate(conversation_folds([r.conversation_id for r in rows], k=5)):
        if str(f) not in args.folds.split(","):
            continue
        started = time.time()
        model = train_tuned([pairs[i] for i in train], [rows[i].face_act for i in train],
                            config=replace(config, seed=args.seed + f))
        model.save(Path(f"{args.out}_fold{f}"))
        p = model.predict_proba([pairs[i] for i in test])
        for j, c in enumerate(model.classes):
            proba[test, classes.index(c)] = p[:, j]
        np.save(proba_file, proba)
        m = metrics([rows[i].face_act for i in test], [classes[int(j)] for j in proba[test].argmax(1)])
        print(json.dumps({"fold": f, "accuracy": m["accuracy"], "macro_f1": m["macro_f1"],
                          "minutes": round((time.time() - started) / 60, 1)}), flush=True)
    done = np.flatnonzero(~np.isnan(proba[:, 0]))
    m = metrics([rows[i].face_act for i in done], [classes[int(j)] for j in proba[done].argmax(1)])
    print(json.dumps({"pooled": True, "n": m["n"], "accuracy": m["accuracy"], "macro_f1": m["macro_f1"],
                      "hpos-": m["per_class"].get("hpos-", {}).get("f1"), "args": vars(args)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
