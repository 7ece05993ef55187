"""Round 6 of the everyday face-act experiment (issue 25): the everyday half's share in the blend, on dev.

The bundled everyday side averages the MiniLM everyday head and the fine-tuned mpnet-6 everyday half
50/50 (`EverydaySide.tuned_weight`, fixed in round 1 when the half was a weaker MiniLM). This runs
an artifact over a split part in turn order (`lab/intent_everyday_r4_blend.components`: every part's
probabilities per turn, as `guardian eval faceacts` computes them, the half as int8) and scores the
everyday turns' blend at other shares w of the half: p = g x persuasion + (1 - g) x ((1 - w) head +
w half), the persuasion side and the turns the half did not read left as they were; and the same
with the gate g made hard (g >= .5) or steeper (its logit x 4), since the persuasion side, which
calls most everyday acts `other`, leaks into every everyday turn at g's share. Prints accuracy,
macro-F1 and the threshold for shown precision .85 (chosen on the part itself: a dev-only tool).
`--max-len N` makes the half read N word pieces instead of `EVERYDAY_MAX_LEN` (64).
Usage: python lab/intent_everyday_r6_blend.py ARTIFACT_DIR [--part dev] [--max-len N]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from guardian.detectors.intent.model import IntentModel

sys.path.insert(0, str(Path(__file__).parent))
from intent_everyday_r4_blend import components, score

SHARES = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0)


def main(argv: list[str]) -> None:
    model = IntentModel.load(Path(argv[0]))
    part = argv[argv.index("--part") + 1] if "--part" in argv else "dev"
    if "--max-len" in argv:
        assert model.everyday is not None and model.everyday.tuned is not None
        model.everyday.tuned.max_len = int(argv[argv.index("--max-len") + 1])
    _, a = components(model, part)
    read = (a["tuned"].sum(1) > 0) & ~a["persuasion_half"]  # the everyday half's probabilities, not a persuasion half's
    g = a["g"][:, None]
    persuasion = (1 - model.tuned_weight) * a["linear"] + model.tuned_weight * a["tuned"]
    print(f"{part}: {len(a['gold'])} turns, the everyday half read {read.mean():.3f} of them; median g {np.median(a['g']):.3f}")
    base = score(a["final"], a["gold"], model.classes, None)
    print(f"as built        acc {base['acc']:.4f} F1 {base['f1']:.4f} | thr {base['thr']:.3f} share {base['share']:.3f}")
    gates = {"soft": g, "hard": (g >= 0.5).astype(np.float32), "steep": sharpen(g)}
    for name, gate in gates.items():
        for w in SHARES:
            p = gate * persuasion + (1 - gate) * ((1 - w) * a["head"] + w * a["tuned"])
            p = np.where(read[:, None], p, a["final"])
            s = score(p, a["gold"], model.classes, None)
            print(f"gate {name:5} half share {w:.1f}  acc {s['acc']:.4f} F1 {s['f1']:.4f} | thr {s['thr']:.3f} "
                  f"share {s['share']:.3f}", flush=True)


def sharpen(g: np.ndarray, slope: float = 4.0) -> np.ndarray:
    """The gate's logit times `slope`: the same .5 point, a quicker turn from one side to the other."""
    logit = np.log(np.clip(g, 1e-6, 1 - 1e-6) / np.clip(1 - g, 1e-6, 1))
    return 1.0 / (1.0 + np.exp(-slope * logit))


if __name__ == "__main__":
    main(sys.argv[1:])
