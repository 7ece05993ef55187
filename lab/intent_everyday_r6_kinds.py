"""Round 6 of the everyday face-act experiment (issue 25): held-out figures by kind of conversation.

The users' conversations are of kinds (everyday chat, assistant/task dialogue, phone calls, film
quarrels), and the team measures on other corpora of those kinds, so one pooled accuracy hides what
a user of one kind sees. This runs an artifact over a split part as `guardian eval faceacts` does
(turn order, one domain state and budget per conversation, the artifact's abstention threshold)
and prints accuracy, macro-F1 and the shown intents' precision and share per source corpus, per
labelling round, and on the turns both labellers agreed on against those they did not (the
adjudicated ones: how much of the error is the labels' own ambiguity). No choice is made here.
With `--round N`, the turns of labelling round N whatever their part (round 7: train-part turns, held out
only from an artifact whose head and half were built without them).
Usage: python lab/intent_everyday_r6_kinds.py [ARTIFACT_DIR] [--part test | --round N]
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import FaceActUtterance, load_faceacts
from guardian.detectors.intent.model import IntentModel, load_model
from guardian.detectors.intent.train import metrics, predict_in_turn_order, utterances_in_context

EVERYDAY = Path("data/faceacts/everyday.csv")


def main(argv: list[str]) -> None:
    part = argv[argv.index("--part") + 1] if "--part" in argv else "test"
    round_only = argv[argv.index("--round") + 1] if "--round" in argv else None
    paths = [a for i, a in enumerate(argv) if not a.startswith("--") and (i == 0 or argv[i - 1] not in ("--part", "--round"))]
    model = IntentModel.load(Path(paths[0])) if paths else load_model()
    rows = load_faceacts(EVERYDAY)
    with EVERYDAY.open(encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    keep = [i for i, r in enumerate(rows) if split_of(r.conversation_id) == part] if round_only is None \
        else [i for i, t in enumerate(table) if t["round"] == round_only]
    if round_only is not None:
        part = f"round {round_only}"
    order, probs = predict_in_turn_order(model, rows, utterances_in_context(rows), keep)
    predicted = [model.classes[j] for j in probs.argmax(1)]
    confident = probs.max(1) >= model.abstain_below

    def report(name: str, where: Callable[[int], bool]) -> None:
        idx = [k for k, i in enumerate(order) if where(i)]
        if idx:
            print(json.dumps({"group": name, **scores(rows, order, predicted, confident, idx)}))

    report(f"{part} part, all", lambda i: True)
    for source in sorted({t["source"] for t in table}):
        report(f"source {source}", lambda i, s=source: table[i]["source"] == s)  # type: ignore[misc]
    for round_ in sorted({t["round"] for t in table}):
        report(f"round {round_}", lambda i, r=round_: table[i]["round"] == r)  # type: ignore[misc]
    report("labellers agreed", lambda i: table[i]["label_a"] == table[i]["label_b"])
    report("labellers disagreed (adjudicated)", lambda i: table[i]["label_a"] != table[i]["label_b"])


def scores(rows: list[FaceActUtterance], order: list[int], predicted: list[str], confident: np.ndarray,
           idx: list[int]) -> dict[str, float | int | None]:
    """n, accuracy, macro-F1 and the shown intents' share and precision over positions `idx` of `order`."""
    m = metrics([rows[order[k]].face_act for k in idx], [predicted[k] for k in idx])
    right = np.array([predicted[k] == rows[order[k]].face_act for k in idx])
    shown = confident[idx]
    return {"n": len(idx), "accuracy": round(m["accuracy"], 4), "macro_f1": round(m["macro_f1"], 4),
            "shown_share": round(float(shown.mean()), 4),
            "shown_precision": round(float(right[shown].mean()), 4) if shown.any() else None}


if __name__ == "__main__":
    main(sys.argv[1:])
