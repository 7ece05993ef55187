"""Round 6 of the everyday face-act experiment (issue 25): a weight-averaged ("soup") everyday half.

Round 5's everyday halves are all fine-tuned from one start (the persuasion mpnet-6 escalation half)
with one recipe, on rounds 1-4 or 1-5 of the labelled set. Averaging their probabilities lifted the
dev part by about a point; averaging their *weights* (Wortsman et al. 2022, "model soups") keeps
that in one network, so an everyday turn still costs one pass. This averages the float16 arrays of
N saved halves (same keys and shapes, or it stops) into OUT/tuned.npz, which `--everyday-half OUT`
and `lab/intent_everyday_r5_variants.py OUT ...` read like any half.
Usage: python lab/intent_everyday_r6_soup.py OUT_DIR HALF_DIR HALF_DIR [HALF_DIR ...] [--weights W,W,...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from guardian.detectors.intent.tuned import TUNED_FILE


def soup(halves: list[Path], weights: list[float]) -> dict[str, np.ndarray]:
    loaded = [np.load(h / TUNED_FILE) for h in halves]
    keys = loaded[0].files
    if any(z.files != keys for z in loaded):
        raise SystemExit("the halves do not have the same arrays: not from one start")
    if any(str(z["classes"].tolist()) != str(loaded[0]["classes"].tolist()) for z in loaded):
        raise SystemExit("the halves order their classes differently")
    out: dict[str, np.ndarray] = {}
    for key in keys:
        first = loaded[0][key]
        if first.dtype.kind == "f":
            mean = sum(w * z[key].astype(np.float64) for w, z in zip(weights, loaded, strict=True))
            out[key] = np.asarray(mean, dtype=first.dtype)
        else:
            out[key] = first
    config = [c for c in out["config"].tolist() if not c.startswith("soup=")]
    out["config"] = np.array([*config, "soup=" + "+".join(h.name for h in halves)])
    return out


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
    np.savez(out / TUNED_FILE, **soup(halves, weights))  # type: ignore[arg-type]
    print(f"soup of {', '.join(map(str, halves))} (weights {', '.join(f'{w:.2f}' for w in weights)}) -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
