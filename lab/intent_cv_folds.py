"""Fine-tune the tuned half of chosen cross-validation folds into the cache `guardian eval faceacts
--cv` reads (`intent_cv_tuned`), so that the five folds can train in parallel processes on a
multi-core machine. Each fold's inputs are exactly those `intent_train.cross_validate` builds
(training rows in file order, seed + fold), so the evaluation finds these models by their
training key instead of training them again.

    for f in 0 1; do OMP_NUM_THREADS=1 .venv/bin/python lab/intent_cv_folds.py --folds $f \\
        --encoder mpnet --layers 6 & done; wait
    .venv/bin/guardian eval faceacts data/faceacts/faceacts.csv --cv --encoder mpnet --layers 6
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace

import guardian  # noqa: F401  (offline environment defaults)
from guardian.corpora.datasets import load_faceacts
from guardian.corpora.folds import conversation_folds
from guardian.detectors.intent.train import tuned_models_dir, utterances_in_context
from guardian.detectors.intent.tuned import TuneConfig, pair_text
from guardian.detectors.intent.tuned_train import train_tuned_cached


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", required=True, help="comma-separated fold numbers (0-4)")
    ap.add_argument("--encoder", default=TuneConfig().encoder, choices=["minilm", "mpnet"])
    ap.add_argument("--layers", type=int, default=TuneConfig().layers)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = load_faceacts()
    tune = replace(TuneConfig(), encoder=args.encoder, layers=args.layers)
    folder = tuned_models_dir()
    for f, (train, _test) in enumerate(conversation_folds([r.conversation_id for r in rows], k=5)):
        if str(f) not in args.folds.split(","):
            continue
        started = time.time()
        fold_rows = [rows[i] for i in train]
        pairs = [pair_text(u.text, u.speaker, u.opener, u.context) for u in utterances_in_context(fold_rows)]
        train_tuned_cached(pairs, [r.face_act for r in fold_rows], config=replace(tune, seed=tune.seed + f),
                           folder=folder)
        print(json.dumps({"fold": f, "minutes": round((time.time() - started) / 60, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
