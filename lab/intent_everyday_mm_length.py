"""Film quarrels by the length of their dialogue (issue 25): is the everyday side's loss in short or long ones?

The product's complaint was that the turn model's score rose with a dialogue's length; for intents the
question is the other way round: whether the everyday side reads short MentalManip dialogues (a median of
5 turns, often one line each) worse than long ones. This scores an artifact on the film-dialogue turns of a
part of `data/faceacts/everyday.csv` as `guardian eval faceacts` does (turn order, one domain state and
budget per conversation, the artifact's abstention threshold) and reports accuracy, macro-F1 and the shown
intents' precision and share for dialogues of at most `SHORT` turns and of more. No choice is made here.
Usage: python lab/intent_everyday_mm_length.py ARTIFACT_DIR [ARTIFACT_DIR ...] [--part test|dev]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from guardian.corpora.conversations import split_of
from guardian.corpora.datasets import load_faceacts, load_mentalmanip
from guardian.detectors.intent.model import IntentModel
from guardian.detectors.intent.train import predict_in_turn_order, utterances_in_context

sys.path.insert(0, str(Path(__file__).parent))
from intent_everyday_r6_kinds import scores

EVERYDAY = Path("data/faceacts/everyday.csv")
#: Dialogues of at most this many turns count as short (the corpus median is 5).
SHORT = 8


def main(argv: list[str]) -> None:
    part = argv[argv.index("--part") + 1] if "--part" in argv else "test"
    artifacts = [a for i, a in enumerate(argv) if not a.startswith("--") and (i == 0 or argv[i - 1] != "--part")]
    length = {f"mm-{d.id}": len(d.conversation.turns) for d in load_mentalmanip()}
    rows = load_faceacts(EVERYDAY)
    keep = [i for i, r in enumerate(rows) if split_of(r.conversation_id) == part and r.conversation_id in length]
    for artifact in artifacts:
        model = IntentModel.load(Path(artifact))
        order, probs = predict_in_turn_order(model, rows, utterances_in_context(rows), keep)
        predicted = [model.classes[j] for j in probs.argmax(1)]
        shown = probs.max(1) >= model.abstain_below
        for name, test in ((f"<= {SHORT} turns", lambda n: n <= SHORT), (f">= {SHORT + 1} turns", lambda n: n > SHORT)):
            idx = [k for k, i in enumerate(order) if test(length[rows[i].conversation_id])]
            if not idx:
                continue
            print(json.dumps({"artifact": artifact, "part": part, "dialogues": name,
                              **scores(rows, order, predicted, shown, idx)}))


if __name__ == "__main__":
    main(sys.argv[1:])
