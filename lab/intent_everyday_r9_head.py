"""Round 9 of the everyday face-act experiment (issue 25): the everyday head's weights, with the distilled turns.

Round 8 showed the distilled turns (train part, labelled once by LLM agents) help the linear everyday
head more than the fine-tuned half, and fitted the head with a distilled turn counting as much as a gold
one (4 persuasion turns). This fits the head again for each of a few settings -- the distilled turns'
weight, the gold turns' weight, the regularisation, which distilled rounds are read -- keeping the gate
and every fine-tuned half of an artifact (the bundled one by default), and scores each on the dev part as
the live detector runs (turn order, int8 halves; threshold chosen by the Wilson rule as `train-intent`
does). Vectors are computed once. The test part is never read.
Usage: python lab/intent_everyday_r9_head.py [--artifact DIR] [--distilled F1,F2] [--grid NAME]
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import faceacts_path, load_faceacts
from guardian.detectors.intent.domain_train import (
    Vectors,
    choose_threshold,
    distilled_train_rows,
    fit_head,
    part_of,
)
from guardian.detectors.intent.model import IntentModel, bundled_artifact_dir
from guardian.detectors.intent.train import metrics, predict_in_turn_order, utterances_in_context

sys.path.insert(0, str(Path(__file__).parent))
from finetune_common import option

EVERYDAY = Path("data/faceacts/everyday.csv")
DISTILLED_ROUNDS = "/tmp/r9/distilled_r8.csv,/tmp/r9/distilled_r9.csv,/tmp/r10/distilled_r10.csv"
GRIDS: dict[str, list[tuple]] = {  # (gold weight, distilled weight per file (0: left out), C[, the half's share])
    "rounds": [(4.0, (4.0, 0.0, 0.0), 1.0), (4.0, (4.0, 4.0, 0.0), 1.0), (4.0, (4.0, 4.0, 4.0), 1.0),
               (4.0, (2.0, 2.0, 2.0), 1.0), (4.0, (6.0, 6.0, 6.0), 1.0)],
    "c": [(4.0, (4.0, 4.0, 4.0), 0.5), (4.0, (4.0, 4.0, 4.0), 2.0), (8.0, (4.0, 4.0, 4.0), 1.0)],
    # round 12 (whole film and everyday conversations): --distilled data/faceacts/everyday_distilled.csv,
    # data/faceacts/everyday_distilled_r12.csv (one weight per file)
    "r12": [(4.0, (4.0, 4.0), 1.0), (4.0, (4.0, 2.0), 1.0), (4.0, (2.0, 2.0), 1.0), (4.0, (4.0, 1.0), 1.0),
            (4.0, (4.0, 0.0), 1.0), (4.0, (4.0, 4.0), 0.5)],
    "share": [(4.0, (4.0, 4.0, 4.0), 1.0, 0.3), (4.0, (4.0, 4.0, 4.0), 1.0, 0.7), (4.0, (4.0, 4.0, 4.0), 1.0, 1.0)],
}


def by_source(model: IntentModel, dev: list, table_sources: list[str]) -> dict[str, float]:
    order, probs = predict_in_turn_order(model, dev, utterances_in_context(dev), range(len(dev)))
    pred = [model.classes[j] for j in probs.argmax(1)]
    out = {}
    for source in sorted(set(table_sources)):
        idx = [k for k, i in enumerate(order) if table_sources[i] == source]
        m = metrics([dev[order[k]].face_act for k in idx], [pred[k] for k in idx])
        out[source] = round(m["accuracy"], 3)
    m = metrics([dev[i].face_act for i in order], pred)
    out["macro_f1"] = round(m["macro_f1"], 4)
    return out


def main(argv: list[str]) -> None:
    import csv

    artifact = Path(option(argv, "--artifact", str(bundled_artifact_dir())))
    files = [Path(f) for f in option(argv, "--distilled", DISTILLED_ROUNDS).split(",")]
    grid = GRIDS[option(argv, "--grid", "rounds")]
    model = IntentModel.load(artifact)
    assert model.everyday is not None
    everyday = load_faceacts(EVERYDAY)
    with EVERYDAY.open(encoding="utf-8") as f:
        sources = [r["source"] for r in csv.DictReader(f)]
    dev_idx = [i for i, r in enumerate(everyday) if split_of(r.conversation_id) == "dev"]
    dev = [everyday[i] for i in dev_idx]
    dev_sources = [sources[i] for i in dev_idx]
    gold = part_of(everyday, "train")
    extras = [distilled_train_rows(load_faceacts(f)) for f in files]
    persuasion = load_faceacts(faceacts_path())
    t0 = time.perf_counter()
    pv = Vectors.of(persuasion, model.encoder)
    train_all = [*gold, *(r for e in extras for r in e)]
    tv = Vectors.of(train_all, model.encoder)
    print(f"vectors in {time.perf_counter() - t0:.0f} s ({len(gold)} gold, {[len(e) for e in extras]} distilled)",
          file=sys.stderr)
    base = copy.copy(model.everyday)
    for gold_w, extra_w, c, *share in grid:
        if len(extra_w) != len(extras):
            continue
        t1 = time.perf_counter()
        weights = np.r_[np.full(len(gold), gold_w), *(np.full(len(e), w) for e, w in zip(extras, extra_w, strict=True))]
        keep = np.flatnonzero(weights > 0)
        head = fit_head(persuasion, [train_all[i] for i in keep], persuasion_vectors=pv,
                        everyday_vectors=Vectors(tv.utterance[keep], tv.context[keep]), everyday_weight=weights[keep], c=c)
        side = copy.copy(base)
        side.classes, side.coef, side.intercept, side.word, side.side = head.classes, head.coef, head.intercept, head.word, head.side
        side.meta = dict(base.meta)
        side.tuned_weight = share[0] if share else base.tuned_weight
        model.everyday = side
        chosen = choose_threshold(model, dev)
        print(json.dumps({"gold_w": gold_w, "distilled_w": extra_w, "c": c, "share": side.tuned_weight,
                          "dev_accuracy": chosen["dev_accuracy"], **by_source(model, dev, dev_sources),
                          "shown_precision": chosen["dev_shown_precision"], "shown_share": chosen["dev_shown_share"],
                          "abstain_below": round(chosen["abstain_below"], 4), "s": round(time.perf_counter() - t1)}),
              flush=True)



if __name__ == "__main__":
    main(sys.argv[1:])
