"""Round 8 of the everyday face-act experiment (issue 25): the everyday half distilled from LLM labels.

Rounds 2, 5 and 7 added a few hundred gold turns each and moved the everyday half little; round 6's
self-training on 683 turns the model itself labelled confidently moved it three points, but it can only
teach the easy turns back. The labellers (LLM agents reading the written guidelines) agree with each
other on 91-94 % of every kind, film quarrels included, where the half gets 55 %: so their labels on
many more train-part turns are a better teacher than the model's own. `lab/faceacts_sample.py OUT
--round 8` draws the turns (1,858 of 500 more train-part conversations: film dialogues, everyday chat,
calls), each labelled once by one of eight LLM agents from `src/guardian/prompts/intent_guidelines.md`
and the adjudicated conventions (`data/faceacts/everyday_distilled.csv`, everyday.csv's columns, round 8,
`label_b` empty: single-labelled, training data only, never in everyday.csv).

Two starts:
- `--start bundled` (default; 6 min on a host with AMX bfloat16, ~20 on AVX2): the bundled half (round 6's when measured) trained on, as round 7 was: the
  distilled turns once, the labelled train part once, 150 persuasion pairs, `--epochs 2` at `--lr 3e-5`;
- `--start mpnet6`: rounds 5-6's recipe from the mpnet-6 escalation half (`domain_train.TUNE_*`): the
  labelled train part `--repeat` times, the distilled turns once, 300 persuasion pairs (`--epochs 5`
  at `--lr 1e-4`; 30 min on the AMX host, about 95 on an AVX2-only one).

Saves OUT/tuned.npz, which `guardian train-intent --everyday data/faceacts/everyday.csv --distilled
data/faceacts/everyday_distilled.csv --everyday-half OUT --out ART` turns into a side (head and gate on the
train part and the distilled turns, threshold on the dev part; without `--distilled` the head learns from
the labelled turns alone). Scored by `python lab/intent_everyday_r6_kinds.py ART --part dev`.
Round 12 (`--only data/faceacts/everyday_distilled_r12.csv`): the bundled half trained on that file's turns
instead of rounds 8-11's (with the labelled train part and 150 persuasion pairs), each turn's context read
from both files' turns of its conversation (round 12 completes conversations rounds 8-11 drew).
Round 13 (`--start mpnet6 --epochs 2 --add data/faceacts/everyday_distilled_r12.csv`): a half afresh from
mpnet-6 on all distilled turns, rounds 8-12, each with its whole conversation's turns as context.
Usage: python lab/intent_everyday_r8_distill.py OUT_DIR [--start bundled|mpnet6] [--epochs N] [--lr X]
       [--repeat N] [--seed 17] [--only FILE | --add FILE]
       python lab/intent_everyday_r8_distill.py --build SAMPLE.csv LABELS_DIR [--round 9 --out FILE]
       (writes the distilled CSV; round 9's sample is `lab/faceacts_sample.py OUT --round 9`)
"""

from __future__ import annotations

import csv
import random
import sys
import time
from collections import Counter
from pathlib import Path

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import faceacts_path, load_faceacts
from guardian.detectors.intent.domain import EVERYDAY_TUNED_FILE
from guardian.detectors.intent.domain_train import (
    TUNE_EPOCHS,
    TUNE_LR,
    TUNE_REPEAT,
    TUNE_REPLAY,
    labelled_pairs,
    part_of,
)
from guardian.detectors.intent.model import load_model
from guardian.detectors.intent.tuned import TunedFaceActs
from guardian.locations import package_dir
from guardian.taxonomy import FaceAct

sys.path.insert(0, str(Path(__file__).parent))
from finetune_common import option, train_half_and_save

EVERYDAY = Path("data/faceacts/everyday.csv")
DISTILLED = Path("data/faceacts/everyday_distilled.csv")
COLUMNS = ["conversation_id", "turn", "speaker", "utterance", "face_act", "source", "previous", "label_a", "label_b", "round"]


def build(sample: Path, labels: Path, *, round_: int = 8, out: Path = DISTILLED) -> None:
    """The distilled CSV from the drawn sample and the labellers' `item,face_act` files (labels_*.csv)."""
    acts: dict[str, str] = {}
    for f in sorted(labels.glob("labels_*.csv")):
        with f.open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                item, act = row["item"].strip(), row["face_act"].strip()
                FaceAct.parse(act)  # a label outside the nine stops here
                if item in acts:
                    raise SystemExit(f"item {item} labelled twice ({f.name})")
                acts[item] = act
    with sample.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    missing = [r["item"] for r in rows if r["item"] not in acts]
    if missing:
        raise SystemExit(f"{len(missing)} items have no label, e.g. {missing[:5]}")
    assert all(split_of(r["conversation_id"]) == "train" for r in rows), "distillation draws from the train part only"
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        seen: set[str] = set()
        for r in rows:  # `previous` only on a stretch's first turn, as everyday.csv
            first = r["conversation_id"] not in seen
            seen.add(r["conversation_id"])
            w.writerow({"conversation_id": r["conversation_id"], "turn": r["turn"], "speaker": r["speaker"],
                        "utterance": r["utterance"], "face_act": acts[r["item"]], "source": r["source"],
                        "previous": r["previous"] if first else "", "label_a": acts[r["item"]], "label_b": "",
                        "round": round_})
    print(f"{len(rows)} distilled turns -> {out}: {dict(Counter(acts[r['item']] for r in rows).most_common())}")


def train(argv: list[str]) -> None:
    import torch

    out = Path(argv[0])
    start_from = option(argv, "--start", "bundled")
    faithful = start_from == "mpnet6"
    epochs = int(option(argv, "--epochs", str(TUNE_EPOCHS if faithful else 2)))
    lr = float(option(argv, "--lr", str(TUNE_LR if faithful else 3e-5)))
    repeat, seed = int(option(argv, "--repeat", str(TUNE_REPEAT if faithful else 1))), int(option(argv, "--seed", "17"))
    torch.set_num_threads(2)
    t0 = time.time()
    gold, distilled = part_of(load_faceacts(EVERYDAY), "train"), load_faceacts(DISTILLED)
    persuasion = load_faceacts(faceacts_path())
    rng = random.Random(seed)
    pe_pairs = labelled_pairs(persuasion)
    pe = rng.sample(range(len(persuasion)), TUNE_REPLAY if faithful else 150)
    # --only FILE (round 12): train on FILE's turns instead, their context read from both files' turns
    # --add FILE (round 13): FILE's turns as well, all turns' context read from both files
    only, add = option(argv, "--only", ""), option(argv, "--add", "")
    if only and add:
        raise SystemExit("--only FILE trains on FILE's turns instead of the others, --add FILE on both: give one")
    keep = list(range(len(distilled)))
    if only or add:
        extra = load_faceacts(Path(only or add))
        keep = list(range(len(distilled) + len(extra))) if add else list(range(len(distilled), len(distilled) + len(extra)))
        distilled = [*distilled, *extra]
    d_pairs = labelled_pairs(distilled)
    x = labelled_pairs(gold) * repeat + [d_pairs[i] for i in keep] + [pe_pairs[i] for i in pe]
    y = ([r.face_act for r in gold] * repeat + [distilled[i].face_act for i in keep]
         + [persuasion[i].face_act for i in pe])
    if faithful:
        start = load_model().escalation
        assert start is not None
    else:
        start = TunedFaceActs.load(package_dir() / "resources" / "intent_model", file=EVERYDAY_TUNED_FILE)
    print(f"{len(gold)} labelled x{repeat}, {len(keep)} distilled, {len(pe)} persuasion: {len(x)} pairs, "
          f"start {start_from}, {epochs} epochs, lr {lr}", flush=True)
    train_half_and_save(x, y, start=start, epochs=epochs, lr=lr, seed=seed, out=out, started=t0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--build"]:
        build(Path(sys.argv[2]), Path(sys.argv[3]), round_=int(option(sys.argv, "--round", "8")),
              out=Path(option(sys.argv, "--out", str(DISTILLED))))
    else:
        train(sys.argv[1:])
