"""Round 3 of the everyday face-act experiment (issue 25): an artifact scored as `guardian eval` scores it.

`evaluate_file(data/faceacts/everyday.csv, model=<artifact>, split=...)` (each conversation in turn
order, one domain state and escalation budget per conversation, the artifact's abstention threshold)
for an artifact folder that is not (yet) the bundled one, with its everyday meta; `--split test`
only for the final candidate, once.
Usage: python lab/intent_everyday_r3_eval.py ARTIFACT_DIR [--split dev|test]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from guardian.detectors.intent.model import IntentModel
from guardian.detectors.intent.train import evaluate_file


def main(artifact: str, split: str) -> None:
    model = IntentModel.load(Path(artifact))
    assert model.everyday is not None
    print(json.dumps({k: v for k, v in model.everyday.meta.items() if k not in ("classes", "config")}, sort_keys=True))
    result = evaluate_file("data/faceacts/everyday.csv", model=model, split=split)  # type: ignore[arg-type]
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[sys.argv.index("--split") + 1] if "--split" in sys.argv else "dev")
