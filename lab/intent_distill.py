"""Distil the mpnet-6 tuned half into MiniLM, per cross-validation fold, and score it out of fold.

Why: all-mpnet-base-v2 cut to six layers is the more accurate tuned half (five-fold CV .725 with
the linear half) but costs 24 ms per live turn; MiniLM costs 10. A MiniLM student trained on
the teacher's softened logits as well as the gold labels may keep part of the teacher's gain
at MiniLM's cost. Each fold's teacher is that fold's mpnet-6 model (`lab/intent_cv_folds.py
--encoder mpnet --layers 6`: trained on the fold's training conversations only, found in the
cache by its training key), and it labels only those training rows, so no test row reaches
the student by any path. The student's test-fold probabilities are averaged 50/50 with the
linear half's out-of-fold probabilities (`--linear`, rows in `load_faceacts()` order), as the
product averages them.

    OMP_NUM_THREADS=1 .venv/bin/python lab/intent_distill.py --folds 0 --share 0.5 --temperature 2 \\
        --linear ~/.cache/guardian/experiments/lin_linear_proba.npy --out /tmp/distill
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
from guardian.detectors.intent.train import metrics, tuned_models_dir, utterances_in_context
from guardian.detectors.intent.tuned import TuneConfig, pair_text
from guardian.detectors.intent.tuned_train import train_tuned, train_tuned_cached
from guardian.taxonomy import FaceAct


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", required=True, help="comma-separated fold numbers (0-4)")
    ap.add_argument("--share", type=float, default=0.5, help="share of the loss that follows the teacher")
    ap.add_argument("--temperature", type=float, default=2.0)
    ap.add_argument("--teacher-layers", type=int, default=6)
    ap.add_argument("--linear", type=Path, required=True, help="out-of-fold linear probabilities (.npy)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = load_faceacts()
    utts = utterances_in_context(rows)
    classes = sorted({r.face_act for r in rows}, key=list(FaceAct).index)
    linear = np.load(args.linear)
    teacher_cfg = replace(TuneConfig(), encoder="mpnet", layers=args.teacher_layers)
    student_cfg = replace(TuneConfig(), soft_share=args.share, temperature=args.temperature)
    folder = tuned_models_dir()
    for f, (train, test) in enumerate(conversation_folds([r.conversation_id for r in rows], k=5)):
        if str(f) not in args.folds.split(","):
            continue
        started = time.time()
        fold_rows = [rows[i] for i in train]
        pairs = [pair_text(u.text, u.speaker, u.opener, u.context) for u in utterances_in_context(fold_rows)]
        labels = [r.face_act for r in fold_rows]
        logits_file = args.out / f"teacher_f{f}.npy"
        if logits_file.is_file():
            logits = np.load(logits_file)
        else:
            teacher = train_tuned_cached(pairs, labels, config=replace(teacher_cfg, seed=teacher_cfg.seed + f),
                                         folder=folder)
            logits = teacher.logits(pairs)
            np.save(logits_file, logits)
        y = np.array([classes.index(a) for a in labels])
        student = train_tuned(pairs, labels, config=replace(student_cfg, seed=student_cfg.seed + f), teacher=logits)
        test_pairs = [pair_text(utts[i].text, utts[i].speaker, utts[i].opener, utts[i].context) for i in test]
        p = student.predict_proba(test_pairs)
        np.save(args.out / f"student_f{f}.npy", p)
        gold = [rows[i].face_act for i in test]
        both = 0.5 * linear[test] + 0.5 * p
        alone = metrics(gold, [classes[int(j)] for j in p.argmax(1)])
        mixed = metrics(gold, [classes[int(j)] for j in both.argmax(1)])
        print(json.dumps({
            "fold": f, "share": args.share, "temperature": args.temperature,
            "teacher_train_accuracy": round(float((logits.argmax(1) == y).mean()), 4),
            "student_accuracy": alone["accuracy"], "accuracy": mixed["accuracy"], "macro_f1": mixed["macro_f1"],
            "hpos-": mixed["per_class"]["hpos-"]["f1"], "minutes": round((time.time() - started) / 60, 1),
        }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
