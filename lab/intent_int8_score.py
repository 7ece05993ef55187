"""Experiment (docs/intent.md, "A larger encoder"): score fold networks saved by
`intent_larger_encoder.py --save-models` the way the product runs them (int8 onnxruntime, one
pair at a time, the product's pair layout), alone and averaged 50/50 with the linear half's
out-of-fold probabilities.

    .venv/bin/python lab/intent_int8_score.py --encoder mpnet --layers 6 --folds 0 --out /tmp/mp6 \\
        --linear ~/.cache/guardian/experiments/lin_linear_proba.npy
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
from guardian.detectors.intent.train import metrics, utterances_in_context
from guardian.detectors.intent.tuned import TuneConfig, TunedFaceActs, _network, pair_text
from guardian.taxonomy import FaceAct


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", default="mpnet", choices=["minilm", "mpnet"])
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--folds", default="0,1,2,3,4")
    ap.add_argument("--out", required=True, help="the --out of intent_larger_encoder.py (reads <out>_fold<f>.pt)")
    ap.add_argument("--linear", type=Path, help="the linear half's out-of-fold probabilities, to average with")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = load_faceacts()
    classes = [a for a in FaceAct if any(r.face_act == a for r in rows)]
    pairs = [pair_text(u.text, u.speaker, u.opener, u.context) for u in utterances_in_context(rows)]
    config = TuneConfig(encoder=args.encoder, layers=args.layers)
    proba_file = Path(f"{args.out}_int8_proba.npy")
    proba = np.load(proba_file) if proba_file.is_file() else np.full((len(rows), len(classes)), np.nan, np.float32)
    linear = np.load(args.linear) if args.linear else None
    for f, (_train, test) in enumerate(conversation_folds([r.conversation_id for r in rows], k=5)):
        if str(f) not in args.folds.split(","):
            continue
        net = _network(len(classes), config)
        state = torch.load(f"{args.out}_fold{f}.pt")
        net.load_state_dict({k: v.float() for k, v in state.items()})
        model = TunedFaceActs.from_network(net, classes, config)
        proba[test] = model.predict_proba([pairs[i] for i in test])
        np.save(proba_file, proba)
        gold = [rows[i].face_act for i in test]
        scored = {"alone": proba[test]} | ({"with_linear": (proba[test] + linear[test]) / 2} if linear is not None else {})
        for name, p in scored.items():
            m = metrics(gold, [classes[int(j)] for j in p.argmax(1)])
            print(json.dumps({"fold": f, "int8": name, "accuracy": m["accuracy"], "macro_f1": m["macro_f1"],
                              "hpos-": m["per_class"].get("hpos-", {}).get("f1")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
