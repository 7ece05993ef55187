"""Round 7 of the everyday face-act experiment (issue 25): the bundled everyday half, trained on.

Fine-tuning the everyday half from mpnet-6 as rounds 5-6 did takes about 70 minutes of both cores on
an AVX2-only CPU without native bfloat16 (3-4 s per step of 32 pairs in float32), so this starts from
the bundled (round 6, self-trained) half and trains it on for a few epochs at a small learning rate:
round 7's labelled turns (`--round 7` of `lab/faceacts_sample.py`: train-part everyday chat and film
dialogues, the two weakest kinds) `--repeat` times, `--replay` turns drawn from the earlier rounds'
train part (so it keeps what it knew) and 150 persuasion pairs. `--control` trains the same number of
steps on the earlier rounds' turns alone (drawn with replacement; before round 7 is merged, pass
`--replay` the experiment's pair count): what more epochs buy without the new labels. Saves
OUT/tuned.npz, which `guardian train-intent --everyday data/faceacts/everyday.csv --everyday-half OUT
--out ART` turns into a side (head and gate refitted on the train part, threshold on dev).
Usage: python lab/intent_everyday_r7_continue.py OUT_DIR [--control] [--epochs 2] [--lr 3e-5]
       [--repeat 3] [--replay 1000] [--seed 17]
"""

from __future__ import annotations

import csv
import random
import sys
import time
from pathlib import Path

from guardian.corpora.datasets import faceacts_path, load_faceacts
from guardian.detectors.intent.domain_train import labelled_pairs, part_of
from guardian.detectors.intent.tuned import TunedFaceActs
from guardian.locations import package_dir

sys.path.insert(0, str(Path(__file__).parent))
from finetune_common import option, train_half_and_save

EVERYDAY = Path("data/faceacts/everyday.csv")


def main(argv: list[str]) -> None:
    import torch

    out = Path(argv[0])
    epochs, lr = int(option(argv, "--epochs", "2")), float(option(argv, "--lr", "3e-5"))
    repeat, replay, seed = int(option(argv, "--repeat", "3")), int(option(argv, "--replay", "1000")), int(option(argv, "--seed", "17"))
    torch.set_num_threads(2)
    t0 = time.time()
    with EVERYDAY.open(encoding="utf-8") as f:
        new_keys = {(r["conversation_id"], int(r["turn"])) for r in csv.DictReader(f) if int(r.get("round") or 1) == 7}
    train = part_of(load_faceacts(EVERYDAY), "train")
    persuasion = load_faceacts(faceacts_path())

    # Pairs are built over whole conversations (context needs the turns before), then split by round.
    train_pairs = labelled_pairs(train)
    new = [i for i, r in enumerate(train) if (r.conversation_id, r.turn) in new_keys]
    old = [i for i, r in enumerate(train) if (r.conversation_id, r.turn) not in new_keys]
    rng = random.Random(seed)
    if "--control" in argv:
        chosen = [rng.choice(old) for _ in range(len(new) * repeat + replay)]
    else:
        if not new:
            raise SystemExit("no round 7 rows in the train part of data/faceacts/everyday.csv")
        chosen = new * repeat + rng.sample(old, min(len(old), replay))
    pe_pairs = labelled_pairs(persuasion)
    pe = rng.sample(range(len(persuasion)), 150)
    x = [train_pairs[i] for i in chosen] + [pe_pairs[i] for i in pe]
    y = [train[i].face_act for i in chosen] + [persuasion[i].face_act for i in pe]
    start = TunedFaceActs.load(package_dir() / "resources" / "intent_model", file="everyday_tuned.npz")
    print(f"{len(new)} round-7 turns, {len(old)} earlier; {len(x)} pairs, {epochs} epochs, lr {lr}", flush=True)
    train_half_and_save(x, y, start=start, epochs=epochs, lr=lr, seed=seed, out=out, started=t0)


if __name__ == "__main__":
    main(sys.argv[1:])
