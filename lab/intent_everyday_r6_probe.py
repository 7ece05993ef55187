"""Round 6 of the everyday face-act experiment (issue 25): is a deeper encoder the lever? A frozen probe.

Fine-tuning all-mpnet-base-v2 with all 12 layers on the everyday pairs would take most of an hour
on the 2 cores and run at twice mpnet-6's cost per turn, so before paying for it: the same logistic
probe (C 2, class weights power .5, as round 3) on frozen, mean-pooled vectors of the turn and of
the turn before it (x .6), after mpnet's 6th layer and after its 12th, trained on the train part and
read on the dev part. If 12 layers do not beat 6 frozen, fine-tuning them is unlikely to either.
Usage: python lab/intent_everyday_r6_probe.py [--cache FEATS.npz]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import load_faceacts
from guardian.detectors.intent.train import utterances_in_context

sys.path.insert(0, str(Path(__file__).parent))
from intent_everyday_r3_features import mpnet_vectors

EVERYDAY = "data/faceacts/everyday.csv"


def main(argv: list[str]) -> None:
    rows = load_faceacts(EVERYDAY)
    utts = utterances_in_context(rows)
    cache = Path(argv[argv.index("--cache") + 1]) if "--cache" in argv else None
    if cache is not None and cache.is_file():
        feats = dict(np.load(cache))
    else:
        turn = mpnet_vectors([u.text for u in utts])
        prev = mpnet_vectors([u.context[-1][1] if u.context else "" for u in utts])
        feats = {**{f"turn_{k}": v for k, v in turn.items()}, **{f"prev_{k}": v for k, v in prev.items()}}
        if cache is not None:
            np.savez(cache, **feats)  # type: ignore[arg-type]
    part = np.array([split_of(r.conversation_id) for r in rows])
    gold = np.array([str(r.face_act) for r in rows])
    train, dev = part == "train", part == "dev"
    counts = {a: (gold[train] == a).sum() for a in set(gold[train])}
    weights = np.array([(train.sum() / (len(counts) * counts[g])) ** 0.5 for g in gold[train]])
    for name in ("mp6", "mp12", "mp6+mp12"):
        layers = name.split("+")
        x = np.hstack([np.hstack([feats[f"turn_{k}"], 0.6 * feats[f"prev_{k}"]]) for k in layers])
        clf = LogisticRegression(C=2.0, max_iter=3000).fit(x[train], gold[train], sample_weight=weights)
        pred = clf.predict(x[dev])
        print(f"{name:9} dev acc {accuracy_score(gold[dev], pred):.4f} macro-F1 "
              f"{f1_score(gold[dev], pred, average='macro'):.4f} (train {train.sum()}, dev {dev.sum()})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
