"""Round 6 of the everyday face-act experiment (issue 25): a weight-averaged ("soup") everyday half.

Round 5's everyday halves are all fine-tuned from one start (the persuasion mpnet-6 escalation half)
with one recipe, on rounds 1-4 or 1-5 of the labelled set. Averaging their probabilities lifted the
dev part by about a point; averaging their *weights* (Wortsman et al. 2022, "model soups") keeps
that in one network, so an everyday turn still costs one pass. This averages the float16 arrays of
N saved halves (same keys and shapes, or it stops; a half is a folder holding tuned.npz or an intent
artifact folder, whose int8-stored everyday half is read back to float) into OUT/tuned.npz, which `--everyday-half OUT`
and `lab/intent_everyday_r5_variants.py OUT ...` read like any half.
Usage: python lab/intent_everyday_r6_soup.py OUT_DIR HALF_DIR HALF_DIR [HALF_DIR ...] [--weights W,W,...]
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from guardian.detectors.intent.domain import EVERYDAY_TUNED_FILE
from guardian.detectors.intent.tuned import TunedFaceActs


def load_half(path: Path) -> TunedFaceActs:
    """A half saved as tuned.npz, or an intent artifact folder's everyday half (stored as int8: read back to float)."""
    everyday = path / EVERYDAY_TUNED_FILE
    return TunedFaceActs.load(path, file=EVERYDAY_TUNED_FILE) if everyday.is_file() else TunedFaceActs.load(path)


def soup(halves: list[Path], weights: list[float]) -> TunedFaceActs:
    """The weighted mean of the halves' layers and heads (float32 sums, stored in each array's dtype)."""
    loaded = [load_half(h) for h in halves]
    first = loaded[0]
    if any(set(h.layers) != set(first.layers) for h in loaded):
        raise SystemExit("the halves do not have the same arrays: not from one start")
    def network(h: TunedFaceActs) -> object:  # the config less the schedule (epochs, lr, seed): a round-11 half ran 2 epochs
        return replace(h.config, epochs=first.config.epochs, lr=first.config.lr, seed=first.config.seed)

    if any(h.classes != first.classes or network(h) != first.config or h.max_len != first.max_len for h in loaded):
        raise SystemExit("the halves differ in classes, network or input length: not from one start")

    def mean(arrays: list[np.ndarray]) -> np.ndarray:
        total = sum(w * a.astype(np.float32) for w, a in zip(weights, arrays, strict=True))
        return np.asarray(total, dtype=arrays[0].dtype)

    return TunedFaceActs(classes=first.classes, layers={k: mean([h.layers[k] for h in loaded]) for k in first.layers},
                         head_weight=mean([h.head_weight for h in loaded]), head_bias=mean([h.head_bias for h in loaded]),
                         config=first.config, threads=first.threads, max_len=first.max_len)


def main(argv: list[str]) -> None:
    weights_arg = argv[argv.index("--weights") + 1] if "--weights" in argv else None
    paths = [a for i, a in enumerate(argv) if a != "--weights" and (i == 0 or argv[i - 1] != "--weights")]
    out, halves = Path(paths[0]), [Path(p) for p in paths[1:]]
    if len(halves) < 2:
        raise SystemExit(__doc__)
    weights = [float(w) for w in weights_arg.split(",")] if weights_arg else [1.0] * len(halves)
    total = sum(weights)
    weights = [w / total for w in weights]
    out.mkdir(parents=True, exist_ok=True)
    soup(halves, weights).save(out)
    print(f"soup of {', '.join(map(str, halves))} (weights {', '.join(f'{w:.2f}' for w in weights)}) -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
