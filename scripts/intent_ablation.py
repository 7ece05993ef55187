"""Do intent features help the manipulation model? Same folds (mentalmanip_folds), with vs without.

Scores every MentalManip (con) utterance with the shipped intent model (trained only on the
face-act corpus), builds 39 dialogue-level columns (mean/max face-act probabilities, mean per side,
pattern counts) and compares the local model's binary head with and without them, appended through
`local_features.build_features(extra=...)` (results in docs/intent.md). Prints one JSON line per
weight. Run: `.venv/bin/python scripts/intent_ablation.py [--weights 0,0.5,1,2]` (slow: encodes
~12k turns; the intent columns are cached in --cache).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np


def intent_columns(dialogues: list) -> np.ndarray:  # type: ignore[type-arg]
    from guardian.detectors.intent_model import CONTEXT, Utterance, load_model
    from guardian.detectors.patterns import PATTERNS, derive_patterns
    from guardian.findings import Intent

    model = load_model()
    classes = model.classes
    k = len(classes)
    utts, owner = [], []
    for di, d in enumerate(dialogues):
        turns = d.conversation.turns
        opener = turns[0].speaker if turns else ""
        for pos, t in enumerate(turns):
            ctx = tuple((p.speaker, p.text) for p in turns[max(0, pos - CONTEXT) : pos])
            utts.append(Utterance(t.text, t.speaker, ctx, t.speaker == opener, pos))
            owner.append(di)
    probs, _ = model.predict_proba(utts)
    owners = np.array(owner)
    features = np.zeros((len(dialogues), 4 * k + len(PATTERNS)), np.float32)
    for di, d in enumerate(dialogues):
        rows = np.flatnonzero(owners == di)
        if not len(rows):
            continue
        p = probs[rows]
        turns = d.conversation.turns
        first = np.array([t.speaker == turns[0].speaker for t in turns])
        features[di, :k] = p.mean(0)
        features[di, k : 2 * k] = p.max(0)
        features[di, 2 * k : 3 * k] = p[first].mean(0) if first.any() else 0
        features[di, 3 * k : 4 * k] = p[~first].mean(0) if (~first).any() else 0
        intents = [
            Intent(turn=t.index, speaker=t.speaker, face_act=classes[int(p[j].argmax())],
                   score=float(p[j].max()), intention="", detector="intent")
            for j, t in enumerate(turns)
        ]
        for f in derive_patterns(d.conversation, intents):
            features[di, 4 * k + PATTERNS.index(str(f.pattern))] += 1
    return features


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weights", default="0,0.5,1,2")
    parser.add_argument("--cache", default="intent_ablation_features.npy")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    from sklearn.metrics import accuracy_score, f1_score, roc_auc_score

    from guardian.detectors.local_features import TextFeaturizer, build_features, dialogue_text
    from guardian.detectors.local_train import TrainConfig, _fit_binary
    from guardian.eval.datasets import load_mentalmanip, mentalmanip_path
    from guardian.eval.folds import mentalmanip_folds

    torch.set_num_threads(1)
    dialogues = load_mentalmanip(mentalmanip_path("con"))
    cache = Path(args.cache)
    if cache.exists():
        features = np.load(cache)
    else:
        features = intent_columns(dialogues)
        np.save(cache, features)
    y = np.array([int(d.manipulative) for d in dialogues])
    conv = [d.conversation for d in dialogues]
    cfg = TrainConfig()
    weights = [float(w) for w in args.weights.split(",")]
    scores = {w: np.zeros(len(y)) for w in weights}
    folds = mentalmanip_folds(dialogues)
    for tr, te in folds:
        featurizer = TextFeaturizer(config=cfg.features).fit([dialogue_text(conv[i]) for i in tr])
        z = (features - features[tr].mean(0)) / (features[tr].std(0) + 1e-6)
        for w in weights:
            extra_tr = None if w == 0 else z[tr]
            extra_te = None if w == 0 else z[te]
            x_tr = build_features([conv[i] for i in tr], featurizer=featurizer, extra=extra_tr, extra_weight=w)
            x_te = build_features([conv[i] for i in te], featurizer=featurizer, extra=extra_te, extra_weight=w)
            scores[w][te] = _fit_binary(x_tr, y[tr], cfg.c_binary).proba(x_te)[:, 0]
    for w in weights:
        pred = scores[w] >= 0.5
        print(json.dumps({
            "intent_weight": w,
            "auc": round(float(roc_auc_score(y, scores[w])), 4),
            "acc@0.5": round(float(accuracy_score(y, pred)), 4),
            "macro_f1@0.5": round(float(f1_score(y, pred, average="macro")), 4),
            "per_fold_auc": [round(float(roc_auc_score(y[te], scores[w][te])), 4) for _, te in folds],
        }))


if __name__ == "__main__":
    main()
