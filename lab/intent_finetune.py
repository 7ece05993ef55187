"""Experiment (docs/intent.md, "Fine-tuning MiniLM"): fine-tune MiniLM's top layers for face acts.

Input: the utterance and its previous utterances as a sentence pair ("asker:/asked: utterance" |
"same:/other: previous ..."); the frozen bottom of the network is run once and cached. 5-fold CV
by conversation (`guardian.corpora.folds.conversation_folds`, the shipped model's folds). Prints one
JSON line per fold and a pooled line; saves out-of-fold probabilities to `<out>_proba.npy` (rows
in `load_faceacts()` order, columns in FaceAct order of the acts present). Not part of the
product: the result did not justify shipping it.

    .venv/bin/python lab/intent_finetune.py --layers 6 --lr 5e-5 --power 0.5 --folds 0,1,2,3,4 --out /tmp/ft
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from finetune_common import fit

import guardian  # noqa: F401  (offline environment defaults)
from guardian.corpora.datasets import load_faceacts
from guardian.corpora.folds import conversation_folds
from guardian.detectors.intent.train import metrics, utterances_in_context
from guardian.detectors.intent.tuned import pair_text
from guardian.encoding.finetune import class_weights
from guardian.encoding.sentence_encoder import DIM, default_model_path
from guardian.taxonomy import FaceAct


def attention_mask(base: Any, mask: Any, hidden: Any) -> Any:
    made = base._create_attention_masks(
        attention_mask=mask, encoder_attention_mask=None, embedding_output=hidden,
        encoder_hidden_states=None, past_key_values=None,
    )
    return made[0] if isinstance(made, tuple) else made


def run_layers(layers: Any, hidden: Any, mask: Any) -> Any:
    for layer in layers:
        out = layer(hidden, attention_mask=mask)
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden


def frozen_states(base: Any, ids: list[list[int]], types: list[list[int]], frozen: int, cache: Path) -> list[Any]:
    """Output of the embeddings and the bottom `frozen` layers for every input (bf16, unpadded)."""
    import torch

    if cache.is_file():
        return list(torch.load(cache))
    states: list[Any] = [None] * len(ids)
    order = np.argsort([len(x) for x in ids])
    with torch.inference_mode():
        for s in range(0, len(ids), 64):
            idx = order[s : s + 64]
            width = max(len(ids[i]) for i in idx)
            inp = torch.zeros(len(idx), width, dtype=torch.long)
            typ, mask = torch.zeros_like(inp), torch.zeros_like(inp)
            for k, i in enumerate(idx):
                n = len(ids[i])
                inp[k, :n], typ[k, :n], mask[k, :n] = torch.tensor(ids[i]), torch.tensor(types[i]), 1
            hidden = base.embeddings(input_ids=inp, token_type_ids=typ)
            hidden = run_layers(base.encoder.layer[:frozen], hidden, attention_mask(base, mask, hidden))
            for k, i in enumerate(idx):
                states[i] = hidden[k, : len(ids[i])].to(torch.bfloat16).clone()
    torch.save(states, cache)
    return states


def main() -> int:
    import torch
    from transformers import AutoModel, AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2, help="top layers to fine-tune (6 = all)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--power", type=float, default=0.75, help="class weights (n / (k * count)) ** power")
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--folds", default="0,1,2,3,4")
    ap.add_argument("--out", default="intent_finetune")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--context", type=int, default=2, help="previous utterances in the second segment")
    ap.add_argument("--seed", type=int, default=17, help="fold f trains with seed + f")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    rows = load_faceacts()
    classes = [a for a in FaceAct if any(r.face_act == a for r in rows)]
    y = np.array([classes.index(r.face_act) for r in rows])
    path = str(default_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    base = AutoModel.from_pretrained(path, local_files_only=True).eval()
    pairs = [pair_text(u.text, u.speaker, u.opener, u.context) for u in utterances_in_context(rows, context=args.context)]
    encoded = tokenizer(
        [a for a, _ in pairs], [b for _, b in pairs], truncation="only_second", max_length=args.max_len
    )
    frozen = 6 - args.layers
    started = time.time()
    states = frozen_states(
        base, encoded["input_ids"], encoded["token_type_ids"], frozen,
        Path(f"{args.out}_hidden_L{frozen}_{args.max_len}_c{args.context}.pt"),
    )
    print(f"frozen part {time.time() - started:.1f} s", file=sys.stderr)

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = copy.deepcopy(base.encoder.layer[frozen:])
            self.drop = torch.nn.Dropout(0.1)
            self.out = torch.nn.Linear(DIM, len(classes))

        def forward(self, hidden: Any, mask: Any) -> Any:
            hidden = run_layers(self.layers, hidden, attention_mask(base, mask, hidden))
            m = mask.unsqueeze(-1).float()
            return self.out(self.drop((hidden * m).sum(1) / m.sum(1)))

    def batch(idx: list[int]) -> tuple[Any, Any]:
        width = max(states[i].shape[0] for i in idx)
        hidden = torch.zeros(len(idx), width, DIM)
        mask = torch.zeros(len(idx), width, dtype=torch.long)
        for k, i in enumerate(idx):
            n = states[i].shape[0]
            hidden[k, :n], mask[k, :n] = states[i].float(), 1
        return hidden, mask

    folds = conversation_folds([r.conversation_id for r in rows], k=5)
    proba = np.full((len(rows), len(classes)), np.nan, dtype=np.float32)
    for f in (int(x) for x in args.folds.split(",")):
        train, test = np.array(folds[f][0]), np.array(folds[f][1])
        weights = class_weights([rows[i].face_act for i in train], power=args.power)
        weight = torch.tensor([weights.get(str(c), 1.0) for c in classes], dtype=torch.float32)
        torch.manual_seed(args.seed + f)
        model = Head()
        fit(
            model,
            [{"params": model.layers.parameters(), "lr": args.lr}, {"params": model.out.parameters(), "lr": args.head_lr}],
            train, epochs=args.epochs, size=32, length=lambda i: states[i].shape[0], make_batch=batch, labels=y,
            seed=args.seed + f, tag=f"fold {f}", weight=weight,
        )
        with torch.inference_mode():
            order = sorted(test, key=lambda i: states[i].shape[0])
            for s in range(0, len(order), 64):
                b = order[s : s + 64]
                hidden, mask = batch(b)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    proba[b] = torch.softmax(model(hidden, mask).float(), -1).numpy()
        m = metrics([rows[i].face_act for i in test], [classes[int(j)] for j in proba[test].argmax(1)])
        print(json.dumps({"fold": f, "accuracy": m["accuracy"], "macro_f1": m["macro_f1"],
                          "hpos-": m["per_class"].get("hpos-")}), flush=True)
    np.save(f"{args.out}_proba.npy", proba)
    done = np.flatnonzero(~np.isnan(proba[:, 0]))
    m = metrics([rows[i].face_act for i in done], [classes[int(j)] for j in proba[done].argmax(1)])
    print(json.dumps({"pooled": True, "n": m["n"], "accuracy": m["accuracy"], "macro_f1": m["macro_f1"],
                      "hpos-": m["per_class"].get("hpos-"), "args": vars(args)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
