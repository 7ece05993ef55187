"""Round 4 of the everyday face-act experiment (issue 25): round 3's CV for blends without a tuned pass.

Same folds, rows and scoring as `lab/intent_everyday_r3_cv.py` (whose functions it uses): the deep
head's out-of-fold probabilities, blended with parts a live everyday turn gets for free (round 1's
MiniLM everyday head at share h; the linear half's log-probabilities or MiniLM vectors as extra
features), with the everyday tuned half at share w (a second pass), or only for the turns the cheap
blend is unsure of (`gated t`: below t; the share of turns that make the pass is printed).
Usage: python lab/intent_everyday_r4_cv.py FEATS.npz --frozen FROZEN.npz [--only NAME,...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from intent_everyday_r3_cv import ACTS, aligned, design, fit_predict, folds_of, gold, load, score

from guardian.corpora.conversations import split_of


def main() -> None:
    f = dict(np.load(sys.argv[1]))
    f.update(np.load(sys.argv[sys.argv.index("--frozen") + 1]))
    rows, rounds, parts = load()
    classes = [str(c) for c in f["classes"]]
    half, head = aligned(f["ev_tuned"], classes), aligned(f["head"], classes)
    lin = aligned(f["lin"], classes)
    idx = np.array(parts["train"] + parts["dev"])
    y = np.array(gold(rows, idx))
    clean = np.array([not (rounds[i] == 1 and split_of(rows[i].conversation_id) == "train") for i in idx])
    folds = folds_of(rows, idx)
    names = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else [
        "mp6q+cues03", "mini+mp6q+cues03", "mp6q+cues03+lin"]
    for name in names:
        base = name.replace("+lin", "")
        x = design(f, rows, base)
        if name.endswith("+lin"):
            x = np.hstack([x, np.log(np.clip(lin, 1e-4, 1)) / 5])
        for c, power in ((2.0, 0.5), (2.0, 1.0)):
            oof = np.zeros((len(idx), len(ACTS)), np.float32)
            for j in range(5):
                tr, te = folds != j, folds == j
                oof[te] = fit_predict(x[idx[tr]], y[tr], x[idx[te]], c=c, power=power)
            line = f"{name:20} C {c} pw {power}"
            for w, h in ((0, 0), (0, .1), (0, .2), (0, .3), (.2, 0), (.2, .1)):
                p = (1 - w - h) * oof + w * half[idx] + h * head[idx]
                a, m = score(rows, idx[clean], p[clean])
                line += f" | w{w} h{h} {a:.3f}/{m:.3f}"
            full = 0.8 * oof + 0.2 * half[idx]
            for h in (0, .2):
                cheap = (1 - h) * oof + h * head[idx]
                for t in (0.4, 0.5):
                    unsure = cheap.max(1) < t
                    p = np.where(unsure[:, None], full, cheap)
                    a, m = score(rows, idx[clean], p[clean])
                    line += f" | gated h{h} t{t} {a:.3f}/{m:.3f} ({unsure.mean():.2f})"
            print(line, flush=True)


if __name__ == "__main__":
    main()
