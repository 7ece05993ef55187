"""Round 6 of the everyday face-act experiment (issue 25): self-training the everyday half.

More labelled turns of the same kinds stopped helping after round 2 (docs/intent.md, rounds 2 and 5),
but the corpora hold thousands of unlabelled turns of the same kinds. This draws stretches of 4 turns
of *train-part* conversations no labelling round used (`lab/faceacts_sample.py`'s pools and plan,
times `--scale`), labels them with the bundled model as `guardian eval faceacts` runs it (turn order,
one domain state per conversation), keeps the turns it would show (top probability >= its abstention
threshold: about 85 % right on dev), and fine-tunes the everyday half as round 5 did (from the
mpnet-6 escalation half, `domain_train.TUNE_*`) on the labelled train part three times, those
pseudo-labelled turns once, and 300 persuasion pairs. Saves the half (OUT/tuned.npz), which
`lab/intent_everyday_r5_variants.py OUT ...` scores on dev against round 5's half trained on the
same labelled turns alone (/tmp/mp6tune5 in docs/intent.md).
Usage: python lab/intent_everyday_r6_selftrain.py OUT_DIR [--scale 2] [--seed 33]
"""

from __future__ import annotations

import csv
import random
import sys
import time
from pathlib import Path

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import FaceActUtterance, faceacts_path, load_faceacts
from guardian.detectors.intent.domain_train import (
    TUNE_EPOCHS,
    TUNE_LR,
    TUNE_REPEAT,
    TUNE_REPLAY,
    labelled_pairs,
    part_of,
)
from guardian.detectors.intent.model import load_model
from guardian.detectors.intent.train import predict_in_turn_order, utterances_in_context
from guardian.detectors.intent.tuned import pair_text
from guardian.detectors.intent.tuned_train import train_tuned
from guardian.taxonomy import FaceAct

sys.path.insert(0, str(Path(__file__).parent))
import faceacts_sample

EVERYDAY = Path("data/faceacts/everyday.csv")


def unlabelled(scale: float, seed: int) -> list[FaceActUtterance]:
    """Stretches of 4 turns of train-part conversations that no labelling round drew (face_act: a placeholder)."""
    with EVERYDAY.open(encoding="utf-8") as f:
        # rounds 1-6 only: round 7 drew from outside this pool, which stays the same draw
        taken = {row["conversation_id"] for row in csv.DictReader(f) if int(row.get("round") or 1) <= 6}
    pools = faceacts_sample.source_pools()
    rng = random.Random(seed)
    rows: list[FaceActUtterance] = []
    for source, (n_conv, per) in faceacts_sample.PLAN.items():
        pool = [c for c in pools[source] if c["id"] not in taken and split_of(c["id"]) == "train"]
        for conv in rng.sample(pool, min(len(pool), round(n_conv * scale))):
            turns = conv["turns"]
            start = rng.randrange(0, max(1, len(turns) - per + 1))
            for i in range(start, min(len(turns), start + per)):
                if turns[i]["text"].strip():
                    rows.append(FaceActUtterance(
                        conversation_id=conv["id"], turn=i, speaker=turns[i]["speaker"],
                        utterance=turns[i]["text"].strip(), face_act=FaceAct.OTHER, donated=None,
                        previous=turns[i - 1]["text"].strip() if i else None))
    return rows


def main(argv: list[str]) -> None:
    import torch

    out = Path(argv[0])
    scale = float(argv[argv.index("--scale") + 1]) if "--scale" in argv else 2.0
    seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 33
    torch.set_num_threads(2)
    model = load_model()
    t0 = time.time()
    pool = unlabelled(scale, seed)
    utts = utterances_in_context(pool)
    order, probs = predict_in_turn_order(model, pool, utts, range(len(pool)))
    keep = [(i, model.classes[int(p.argmax())]) for i, p in zip(order, probs, strict=True)
            if p.max() >= model.abstain_below]
    print(f"{len(pool)} unlabelled train-part turns, {len(keep)} pseudo-labelled at >= {model.abstain_below:.3f}: "
          f"{dict(sorted((str(a), sum(1 for _, b in keep if b == a)) for a in {b for _, b in keep}))} "
          f"({time.time() - t0:.0f} s)", flush=True)
    everyday, persuasion = load_faceacts(EVERYDAY), load_faceacts(faceacts_path())
    train = part_of(everyday, "train")
    start = model.escalation
    assert start is not None

    replayed = random.Random(25).sample(range(len(persuasion)), TUNE_REPLAY)
    pe_pairs = labelled_pairs(persuasion)
    pseudo_pairs = [pair_text(utts[i].text, utts[i].speaker, utts[i].opener, utts[i].context) for i, _ in keep]
    x = labelled_pairs(train) * TUNE_REPEAT + pseudo_pairs + [pe_pairs[i] for i in replayed]
    y = [r.face_act for r in train] * TUNE_REPEAT + [a for _, a in keep] + [persuasion[i].face_act for i in replayed]
    from dataclasses import replace

    half = train_tuned(x, y, config=replace(start.config, epochs=TUNE_EPOCHS, lr=TUNE_LR), start=start,
                       progress=lambda s, n: print(f"step {s}/{n} {time.time() - t0:.0f} s", flush=True)
                       if s % 20 == 0 else None)
    out.mkdir(parents=True, exist_ok=True)
    half.save(out)
    np.savez(out / "pseudo.npz", rows=np.array([f"{pool[i].conversation_id}#{pool[i].turn}" for i, _ in keep]),
             acts=np.array([str(a) for _, a in keep]))
    print(f"trained on {len(x)} pairs in {time.time() - t0:.0f} s -> {out}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
