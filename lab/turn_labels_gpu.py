"""Issue 19: technique and vulnerability from a fine-tuned encoder reading the whole dialogue (reads `lab/turn_labels_payload.py`).

torch, numpy and transformers only, like `lab/turn_mil_curve_gpu.py` (whose int8 weights and
encoder it reuses), so it runs on the GPU machine as well as here. One encoder, mean pooling and a
linear layer of 11 technique + 5 vulnerability outputs; binary cross-entropy on the MentalManip con
train part's manipulative dialogues (a family's loss only where the dialogue has labels of that
family); AdamW, linear warm-up and decay, bfloat16. The decision rule is the product's: every label
within `ratio` of the row's best, the ratio chosen on the dev part (micro-F1), then the test part
read once. Baseline: the train part's label frequencies as every dialogue's scores, same rule.
Micro-F1 over the dialogues that carry labels of the family, as `guardian eval mentalmanip`.

Usage: python lab/turn_labels_gpu.py --payload .gpu --encoders minilm,mpnet6 [--device cpu] --out FILE
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from turn_mil_curve_gpu import ENCODERS, Fit, Pairs, Scorer

RATIOS = np.round(np.arange(0.05, 1.0001, 0.05), 2)
TECHNIQUES = 11


def micro_f1(truth: np.ndarray, pred: np.ndarray) -> float:
    rows = truth.any(axis=1)
    t, p = truth[rows].astype(bool), pred[rows].astype(bool)
    tp = float((t & p).sum())
    return 2 * tp / max(float(t.sum() + p.sum()), 1.0)


def decided(scores: np.ndarray, ratio: float) -> np.ndarray:
    return scores >= ratio * scores.max(axis=1, keepdims=True)


def judged(p_dev: np.ndarray, y_dev: np.ndarray, p_test: np.ndarray, y_test: np.ndarray) -> dict[str, float]:
    ratio = float(max(RATIOS, key=lambda r: micro_f1(y_dev, decided(p_dev, r))))
    return {"ratio": ratio, "dev": round(micro_f1(y_dev, decided(p_dev, ratio)), 4),
            "test": round(micro_f1(y_test, decided(p_test, ratio)), 4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--payload", default=".gpu")
    ap.add_argument("--encoders", default="minilm")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", default="minilm=5e-5,mpnet6=3e-5,mpnet12=3e-5")
    ap.add_argument("--seeds", default="17")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="labels.json")
    args = ap.parse_args()
    import torch

    payload = Path(args.payload)
    meta = json.loads((payload / "meta.json").read_text())
    data = np.load(payload / "labels.npz")
    part, tech, vuln = data["part"], data["techniques"], data["vulnerabilities"]
    y = np.concatenate([tech, vuln], axis=1).astype(np.float32)
    train, dev, test = (np.flatnonzero(part == i) for i in range(3))
    train = train[y[train].any(axis=1)]
    lrs = {k: float(v) for k, v in (x.split("=") for x in args.lr.split(","))}
    freq = y[train].mean(axis=0)
    base = np.tile(freq, (len(y), 1))
    result: dict[str, Any] = {
        "settings": vars(args), "train_dialogues": len(train), "dev": len(dev), "test": len(test),
        "label_frequencies": {"technique": judged(base[dev, :TECHNIQUES], tech[dev], base[test, :TECHNIQUES], tech[test]),
                              "vulnerability": judged(base[dev, TECHNIQUES:], vuln[dev], base[test, TECHNIQUES:], vuln[test])},
        "encoders": {}}
    print(json.dumps(result["label_frequencies"]), flush=True)
    for encoder in args.encoders.split(","):
        family = ENCODERS[encoder][0]
        pairs = Pairs(data, family, meta[family]["pad"], args.device)
        probs = []
        runs = []
        for seed in (int(s) for s in args.seeds.split(",")):
            began = time.time()
            torch.manual_seed(seed)
            scorer = Scorer(meta, payload, encoder, args.device)
            scorer.head = torch.nn.Linear(scorer.head.in_features, y.shape[1]).to(args.device)
            fit = Fit(scorer, lr=lrs[encoder], steps=args.epochs * -(-len(train) // args.batch))
            rng = np.random.default_rng(seed)
            target = torch.from_numpy(y).to(args.device)
            has_t = torch.from_numpy(tech.any(axis=1)).to(args.device)
            has_v = torch.from_numpy(vuln.any(axis=1)).to(args.device)
            scorer.encoder.train()
            for _ in range(args.epochs):
                order = rng.permutation(train)
                for s in range(0, len(order), args.batch):
                    idx = torch.from_numpy(order[s : s + args.batch]).to(args.device)
                    z = scorer.logits(*pairs.rows(idx))
                    bce = torch.nn.functional.binary_cross_entropy_with_logits(z, target[idx], reduction="none")
                    mask = torch.cat([has_t[idx, None].expand(-1, TECHNIQUES),
                                      has_v[idx, None].expand(-1, y.shape[1] - TECHNIQUES)], dim=1).float()
                    fit.step((bce * mask).sum() / mask.sum().clamp(min=1))
            scorer.encoder.eval()
            with torch.inference_mode():
                z = torch.cat([scorer.logits(*pairs.rows(torch.arange(s, min(s + 64, len(y)), device=args.device)))
                               for s in range(0, len(y), 64)])
            p = torch.sigmoid(z).cpu().numpy()
            probs.append(p)
            runs.append({"seed": seed, "train_s": round(time.time() - began, 1),
                         "technique": judged(p[dev, :TECHNIQUES], tech[dev], p[test, :TECHNIQUES], tech[test]),
                         "vulnerability": judged(p[dev, TECHNIQUES:], vuln[dev], p[test, TECHNIQUES:], vuln[test])})
            print(encoder, json.dumps(runs[-1]), flush=True)
        p = np.mean(probs, axis=0)
        result["encoders"][encoder] = {
            "runs": runs,
            "mean_of_seeds": {"technique": judged(p[dev, :TECHNIQUES], tech[dev], p[test, :TECHNIQUES], tech[test]),
                              "vulnerability": judged(p[dev, TECHNIQUES:], vuln[dev], p[test, TECHNIQUES:], vuln[test])}}
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
