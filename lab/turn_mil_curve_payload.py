"""Issue 19: pack the MIL encoder-size experiment into files small enough to travel to a GPU machine.

The device tool sends the checkout and at most 64 MiB with it, and the GPU machine has no guardian
environment and no model hub. So everything the run needs is prepared here, once:

- `data.npz`: every (previous turn, turn) pair the run reads, already tokenised for both encoders
  (BERT word pieces for all-MiniLM-L6-v2, MPNet's for all-mpnet-base-v2; `MAX_TOKENS` each, longest
  side cut first, as `lab/turn_finetune_mil.py`), and the conversations they belong to: MentalManip
  con (all three parts, with a 5-fold assignment by a hash of the id for cross-validation), the scam
  calls of the train part (positive bags), `--per-kind` dev and test conversations of each ordinary
  kind (DailyDialog, SGD, benign calls) and `--negatives` single turns of train-part ordinary talk.
- `minilm.npz`, `mpnet_a.npz`, `mpnet_b.npz`: the encoders' weights, each token row kept only if
  some pair uses it (ids renumbered, special tokens keep their numbers), matrices int8 with one
  scale per row (fine-tuning starts from these; a row's rounding error is under 0.4 % of its
  largest weight), the rest float16. mpnet is split (`mpnet_a`: embeddings and layers
  0..`--split-layer`-1; `mpnet_b`: the rest) so that each half travels with one call.

Usage: python lab/turn_mil_curve_payload.py --out .gpu [--negatives 8000] [--per-kind 150]
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
from turn_finetune_mil import pairs_of  # the same (previous turn, turn) pairs as the 2-core run

from guardian.conversation import Conversation
from guardian.corpora.conversations import conversations_dir, load_conversations, split_of
from guardian.corpora.datasets import load_mentalmanip
from guardian.encoding.encoders import encoder_path

MAX_TOKENS = 128
SOURCES = ("mentalmanip", "dailydialog", "sgd", "calls", "scam", "negative")
PARTS = ("train", "dev", "test")
FOLDS = 5


def fold_of(conversation_id: str) -> int:
    return int(hashlib.sha1(f"cv5:{conversation_id}".encode()).hexdigest(), 16) % FOLDS


def quantised(state: dict[str, np.ndarray], keep: np.ndarray, prefix_ok: tuple[str, ...]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for key, value in state.items():
        if not key.startswith(prefix_ok) or key.endswith("position_ids") or key.startswith("pooler"):
            continue
        if key == "embeddings.word_embeddings.weight":
            value = value[keep]
        if value.ndim == 2 and value.shape[0] > 64:
            scale = np.abs(value).max(axis=1, keepdims=True) / 127.0
            scale[scale == 0] = 1.0
            out[f"{key}::q"] = np.round(value / scale).astype(np.int8)
            out[f"{key}::s"] = scale.astype(np.float32)
        else:
            out[key] = value.astype(np.float16)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".gpu")
    ap.add_argument("--negatives", type=int, default=8000)
    ap.add_argument("--per-kind", type=int, default=150)
    ap.add_argument("--split-layer", type=int, default=4)
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    groups: list[dict[str, object]] = []
    pairs: list[tuple[str, str]] = []

    def add(conv: Conversation, source: str, part: str, label: bool, fold: int = -1) -> None:
        rows = pairs_of(conv)
        groups.append({"start": len(pairs), "end": len(pairs) + len(rows), "source": SOURCES.index(source),
                       "part": PARTS.index(part), "label": int(label), "fold": fold, "turns": len(rows)})
        pairs.extend(rows)

    for d in load_mentalmanip():
        add(d.conversation, "mentalmanip", split_of(d.id), d.manipulative, fold_of(d.id))
    negatives: list[tuple[str, str]] = []
    for name in ("dailydialog", "sgd", "calls"):
        rows = load_conversations(conversations_dir() / f"{name}.jsonl")
        for part in ("dev", "test"):
            pool = [c for c in rows if split_of(c.id) == part and c.label != "scam"]
            for i in rng.permutation(len(pool))[: args.per_kind]:
                add(pool[int(i)].conversation, name, part, False)
        for c in rows:
            if split_of(c.id) != "train":
                continue
            if c.label == "scam":
                add(c.conversation, "scam", "train", True)
            else:
                negatives.extend(pairs_of(c.conversation))
    for i in rng.permutation(len(negatives))[: args.negatives]:
        groups.append({"start": len(pairs), "end": len(pairs) + 1, "source": SOURCES.index("negative"),
                       "part": 0, "label": 0, "fold": -1, "turns": 1})
        pairs.append(negatives[int(i)])

    arrays: dict[str, np.ndarray] = {k: np.array([g[k] for g in groups], np.int32)
                                     for k in ("start", "end", "source", "part", "label", "fold", "turns")}
    meta: dict[str, object] = {"sources": SOURCES, "parts": PARTS, "max_tokens": MAX_TOKENS, "pairs": len(pairs),
                               "groups": len(groups)}
    for name, encoder in (("minilm", "minilm"), ("mpnet", "mpnet")):
        path = encoder_path(encoder)  # type: ignore[arg-type]
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        specials = sorted(set(tok.all_special_ids))  # kept whether used or not: mpnet's unknown token is 104, not 3
        enc = tok([p[0] for p in pairs], [p[1] for p in pairs], truncation="longest_first", max_length=MAX_TOKENS)
        ids = enc["input_ids"]
        used = np.unique(np.concatenate([np.concatenate([np.asarray(x) for x in ids]), np.array(specials)]))
        remap = np.full(int(used.max()) + 1, -1, np.int64)
        remap[used] = np.arange(len(used))
        flat = np.concatenate([remap[np.asarray(x)] for x in ids]).astype(np.int16)
        offsets = np.cumsum([0] + [len(x) for x in ids]).astype(np.int64)
        sep = tok.sep_token_id
        first = np.array([list(x).index(sep) + 1 for x in ids], np.int16)  # segment A's length, with its [SEP]
        arrays[f"{name}_ids"], arrays[f"{name}_offsets"], arrays[f"{name}_first"] = flat, offsets, first
        arrays[f"{name}_vocab"] = used  # original token id of each kept row (lab/turn_labels_payload.py reads it)
        config = json.loads((Path(path) / "config.json").read_text())
        config["vocab_size"] = len(used)
        config["pad_token_id"] = int(remap[tok.pad_token_id])
        meta[name] = {"config": config, "vocab_used": len(used), "pad": int(remap[tok.pad_token_id]),
                      "mean_tokens": round(float(np.mean(np.diff(offsets))), 1)}
        state = load_file(str(Path(path) / "model.safetensors"))
        if name == "minilm":
            np.savez(out / "minilm.npz", **quantised(state, used, ("embeddings", "encoder")))
        else:
            cut = args.split_layer
            first_half = ("embeddings", "encoder.relative_attention_bias",
                          *(f"encoder.layer.{i}." for i in range(cut)))
            np.savez(out / "mpnet_a.npz", **quantised(state, used, first_half))
            np.savez(out / "mpnet_b.npz", **quantised(state, used, tuple(f"encoder.layer.{i}." for i in range(cut, 12))))
    np.savez_compressed(out / "data.npz", **arrays)
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    counts = {s: int(np.sum(arrays["source"] == i)) for i, s in enumerate(SOURCES)}
    print(json.dumps({"groups": counts, "pairs": len(pairs),
                      "files_mb": {p.name: round(p.stat().st_size / 1e6, 1) for p in sorted(out.iterdir())}}))


if __name__ == "__main__":
    main()
