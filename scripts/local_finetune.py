"""Experiment (docs/model-card.md): fine-tune MiniLM end to end on MentalManip's binary label.

Same folds as the shipped model (`guardian.eval.folds.mentalmanip_folds`, seed 17) on
`mentalmanip_con.csv`; dialogues as MentalManip-style lines with speakers renamed PersonN,
first `--max-len` word pieces, mean pooling, cross-entropy, bf16 autocast on CPU. Prints one JSON
line per fold; saves each fold's test probabilities (in the fold's test order) to `<out>.npz`
as `f{k}_probability`, the layout of `scripts/cv_local.py --dump`, so the two can be averaged.

    .venv/bin/python scripts/local_finetune.py --epochs 3 --out /tmp/local_ft
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
from finetune_common import fit

import guardian  # noqa: F401  (offline environment defaults)
from guardian.detectors.local_features import dialogue_text
from guardian.eval.datasets import load_mentalmanip, mentalmanip_path
from guardian.eval.folds import mentalmanip_folds
from guardian.sentence_encoder import DIM, default_model_path


def main() -> int:
    import torch
    from sklearn.metrics import roc_auc_score
    from transformers import AutoModel, AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--folds", default="0,1,2,3,4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="local_finetune")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    dialogues = load_mentalmanip(mentalmanip_path("con"))
    y = np.array([int(d.manipulative) for d in dialogues])
    path = str(default_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    encoded = tokenizer([dialogue_text(d.conversation) for d in dialogues], truncation=True, max_length=args.max_len)
    ids = encoded["input_ids"]

    class Classifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = AutoModel.from_pretrained(path, local_files_only=True)
            self.drop = torch.nn.Dropout(0.1)
            self.out = torch.nn.Linear(DIM, 2)

        def forward(self, inp: Any, mask: Any) -> Any:
            hidden = self.encoder(input_ids=inp, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(hidden.dtype)
            return self.out(self.drop((hidden * m).sum(1) / m.sum(1)))

    def batch(idx: list[int]) -> tuple[Any, Any]:
        width = max(len(ids[i]) for i in idx)
        inp = torch.zeros(len(idx), width, dtype=torch.long)
        mask = torch.zeros_like(inp)
        for k, i in enumerate(idx):
            inp[k, : len(ids[i])], mask[k, : len(ids[i])] = torch.tensor(ids[i]), 1
        return inp, mask

    dump: dict[str, np.ndarray] = {}
    folds = mentalmanip_folds(dialogues)
    for f in (int(x) for x in args.folds.split(",")):
        train, test = folds[f]
        torch.manual_seed(17 + f)
        model = Classifier()
        started = time.time()
        fit(
            model,
            [{"params": model.encoder.parameters(), "lr": args.lr}, {"params": model.out.parameters(), "lr": args.head_lr}],
            train, epochs=args.epochs, size=args.batch, length=lambda i: len(ids[i]), make_batch=batch, labels=y,
            seed=17 + f, tag=f"fold {f}",
        )
        proba = np.zeros(len(test), dtype=np.float32)
        with torch.inference_mode():
            for s in range(0, len(test), 32):
                inp, mask = batch(list(test[s : s + 32]))
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    proba[s : s + 32] = torch.softmax(model(inp, mask).float(), -1)[:, 1].numpy()
        dump[f"f{f}_probability"] = proba
        dump[f"f{f}_y"] = y[test]
        np.savez(f"{args.out}.npz", **dump)  # type: ignore[arg-type]
        print(json.dumps({"fold": f, "auc": round(float(roc_auc_score(y[test], proba)), 4),
                          "accuracy_at_0.5": round(float(np.mean((proba >= 0.5) == y[test])), 4),
                          "seconds": round(time.time() - started)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
