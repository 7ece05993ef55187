"""Stage 3 of the everyday face-act experiment (issue 25): the everyday tuned half.

Goes on fine-tuning the shipped MiniLM half (not the encoder from scratch) on the everyday train
part's pairs, repeated `REPEAT` times, plus `REPLAY` persuasion pairs (so it does not forget the
corpus it came from), `EPOCHS` epochs; saves it and its int8 probabilities for every everyday row.
Usage: python lab/intent_everyday_tune.py OUT_DIR
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import faceacts_path, load_faceacts
from guardian.detectors.intent.model import load_model
from guardian.detectors.intent.train import utterances_in_context
from guardian.detectors.intent.tuned import pair_text
from guardian.detectors.intent.tuned_train import train_tuned

REPEAT, REPLAY, EPOCHS, LR = 2, 500, 2, 4e-5


def pairs_of(rows):  # type: ignore[no-untyped-def]
    return [pair_text(u.text, u.speaker, u.opener, u.context) for u in utterances_in_context(rows)]


def main(out: str) -> None:
    import torch

    torch.set_num_threads(2)
    model = load_model()
    assert model.tuned is not None
    ev = load_faceacts("data/faceacts/everyday.csv")
    pe = load_faceacts(faceacts_path())
    ev_pairs, pe_pairs = pairs_of(ev), pairs_of(pe)
    train = [i for i, r in enumerate(ev) if split_of(r.conversation_id) == "train"]
    replay = random.Random(25).sample(range(len(pe)), REPLAY)
    pairs = [ev_pairs[i] for i in train] * REPEAT + [pe_pairs[i] for i in replay]
    labels = [ev[i].face_act for i in train] * REPEAT + [pe[i].face_act for i in replay]
    config = replace(model.tuned.config, epochs=EPOCHS, lr=LR)
    t0 = time.time()
    tuned = train_tuned(pairs, labels, config=config, start=model.tuned,
                        progress=lambda s, n: print(f"step {s}/{n} {time.time() - t0:.0f} s", flush=True)
                        if s % 20 == 0 else None)
    Path(out).mkdir(parents=True, exist_ok=True)
    tuned.save(Path(out))
    probs = tuned.predict_proba(ev_pairs)
    np.savez(Path(out) / "ev_probs.npz", probs=probs, classes=np.array([str(c) for c in tuned.classes]))
    print(f"trained in {time.time() - t0:.0f} s -> {out}")


if __name__ == "__main__":
    main(sys.argv[1])
