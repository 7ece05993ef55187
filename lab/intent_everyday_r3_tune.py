"""Round 3 of the everyday face-act experiment (issue 25): an everyday tuned half from mpnet-6.

The shipped everyday half is the persuasion MiniLM half fine-tuned further on everyday pairs; this
starts from the persuasion mpnet-6 half instead (the escalation half: all-mpnet-base-v2 cut to six
layers, more accurate than MiniLM on the corpus, three times its cost per pair) with the same
recipe (`domain_train.tune_everyday_half`: the everyday train part's pairs twice, 500 persuasion
pairs replayed, 2 epochs, lr 4e-5). Saves the half and its int8 probabilities for every everyday row
(the dev rows choose, the test rows are read once by `lab/intent_everyday_r3_cv.py --test`).
`--recipe EPOCHS,LR,REPEAT,REPLAY` overrides the recipe (`domain_train.TUNE_*`; e.g. 4,8e-5,3,300).
Usage: python lab/intent_everyday_r3_tune.py OUT_DIR [--start minilm|mpnet6] [--recipe E,LR,R,P]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from guardian.corpora.datasets import faceacts_path, load_faceacts
from guardian.detectors.intent.domain_train import part_of, tune_everyday_half
from guardian.detectors.intent.model import load_model
from guardian.detectors.intent.train import utterances_in_context
from guardian.detectors.intent.tuned import pair_text


def main(out: str, start_name: str, recipe: str | None = None) -> None:
    import torch

    options: dict[str, Any] = {}
    if recipe:
        epochs, lr, repeat, replay = recipe.split(",")
        options = {"epochs": int(epochs), "lr": float(lr), "repeat": int(repeat), "replay": int(replay)}

    torch.set_num_threads(2)
    model = load_model()
    start = model.escalation if start_name == "mpnet6" else model.tuned
    assert start is not None
    ev = load_faceacts("data/faceacts/everyday.csv")
    pe = load_faceacts(faceacts_path())
    t0 = time.time()
    tuned = tune_everyday_half(start, pe, part_of(ev, "train"), **options,
                               progress=lambda s, n: print(f"step {s}/{n} {time.time() - t0:.0f} s", flush=True)
                               if s % 10 == 0 else None)
    Path(out).mkdir(parents=True, exist_ok=True)
    tuned.save(Path(out))
    pairs = [pair_text(u.text, u.speaker, u.opener, u.context) for u in utterances_in_context(ev)]
    probs = tuned.predict_proba(pairs)
    np.savez(Path(out) / "ev_probs.npz", probs=probs, classes=np.array([str(c) for c in tuned.classes]))
    print(f"trained in {time.time() - t0:.0f} s -> {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[sys.argv.index("--start") + 1] if "--start" in sys.argv else "minilm",
         sys.argv[sys.argv.index("--recipe") + 1] if "--recipe" in sys.argv else None)
