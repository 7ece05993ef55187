"""Issue 19: MentalManip dialogues, tokenised whole, for the technique/vulnerability fine-tuning test (`lab/turn_labels_gpu.py`).

The shipped label head reads the turn model's frozen window features and stops near .47 / .47
micro-F1 on dev (docs/model-card.md, "Label heads measured on dev"); the card names a fine-tuned
encoder as the other input worth trying. Which tactic and which vulnerability are properties of
the whole dialogue (MentalManip labels them so), so this one reads the dialogue: its turns joined
by the separator token, no speaker names, the first `MAX_TOKENS` tokens. Token ids are renumbered
with the vocabularies `lab/turn_mil_curve_payload.py` kept (run that first; a token it dropped
becomes the unknown token), so that the runner reuses its int8 weights.

Writes `labels.npz` beside the curve payload. Usage: python lab/turn_labels_payload.py --payload .gpu
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import load_mentalmanip
from guardian.encoding.encoders import encoder_path
from guardian.taxonomy import TECHNIQUES, VULNERABILITIES

MAX_TOKENS = 256
PARTS = ("train", "dev", "test")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--payload", default=".gpu")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    payload = Path(args.payload)
    vocab = np.load(payload / "data.npz")
    dialogues = [d for d in load_mentalmanip() if d.manipulative]
    arrays: dict[str, np.ndarray] = {
        "part": np.array([PARTS.index(split_of(d.id)) for d in dialogues], np.int8),
        "techniques": np.array([[t in d.techniques for t in TECHNIQUES] for d in dialogues], np.int8),
        "vulnerabilities": np.array([[v in d.vulnerabilities for v in VULNERABILITIES] for d in dialogues], np.int8),
    }
    for name, encoder in (("minilm", "minilm"), ("mpnet", "mpnet")):
        tok = AutoTokenizer.from_pretrained(str(encoder_path(encoder)), local_files_only=True)  # type: ignore[arg-type]
        used = vocab[f"{name}_vocab"]
        remap = np.full(max(int(used.max()), tok.vocab_size) + 1, -1, np.int64)
        remap[used] = np.arange(len(used))
        unk = int(remap[tok.unk_token_id])
        if unk < 0:
            raise SystemExit("the curve payload predates its special-token fix: run lab/turn_mil_curve_payload.py again")
        rows = []
        for d in dialogues:
            ids = [tok.cls_token_id]
            for turn in d.conversation.turns:
                ids += [*tok(turn.text, add_special_tokens=False)["input_ids"], tok.sep_token_id]
            ids = ids[:MAX_TOKENS]
            rows.append(np.where(remap[ids] >= 0, remap[ids], unk))
        arrays[f"{name}_offsets"] = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
        arrays[f"{name}_ids"] = np.concatenate(rows).astype(np.int16)
        arrays[f"{name}_first"] = np.diff(arrays[f"{name}_offsets"]).astype(np.int16)  # one segment: type 0 throughout
    np.savez_compressed(payload / "labels.npz", **arrays)
    print({p: int((arrays["part"] == i).sum()) for i, p in enumerate(PARTS)},
          "with techniques", int(arrays["techniques"].any(1).sum()), "with vulnerabilities",
          int(arrays["vulnerabilities"].any(1).sum()))


if __name__ == "__main__":
    main()
