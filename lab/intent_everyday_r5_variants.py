"""Round 5 of the everyday face-act experiment (issue 25): everyday sides built with another tuned half.

Round 3 found the encoder is the lever (frozen mpnet-6 vectors beat every MiniLM head), but its
fine-tuned mpnet-6 half was never finished. `lab/intent_everyday_r3_tune.py --start mpnet6 --recipe
...` now trains one in minutes on the idle machine. This builds the everyday side as
`guardian train-intent --everyday` does (gate, MiniLM head and deep head on the everyday train part,
abstention threshold on dev) with that half in place of the MiniLM everyday half, in several
arrangements, and scores each on the dev part as `guardian eval faceacts` scores (turn order, one
budget and domain state per conversation). Spec keys: `deep` (0: no frozen deep head, the half
blended with the MiniLM head at `htw`, round 1's arrangement: two passes per everyday turn, run side
by side; 1: the deep head, with the half at `share` for the turns whose deep blend is below `below`).
Usage: python lab/intent_everyday_r5_variants.py HALF_DIR OUT_BASE SPEC [SPEC ...]
       e.g. deep=0,htw=.5  deep=1,share=.3,below=1  deep=1,share=.2,below=.4
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from guardian.corpora.datasets import faceacts_path, file_sha256, load_faceacts
from guardian.detectors.intent.domain import EVERYDAY_TUNED_FILE
from guardian.detectors.intent.domain_train import train_everyday
from guardian.detectors.intent.model import IntentModel, bundled_artifact_dir
from guardian.detectors.intent.train import evaluate_file
from guardian.detectors.intent.tuned import TunedFaceActs

EVERYDAY = Path("data/faceacts/everyday.csv")


def build(half_dir: Path, out: Path, spec: dict[str, float]) -> IntentModel:
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(bundled_artifact_dir(), out)
    model = IntentModel.load(out)
    file = half_dir / EVERYDAY_TUNED_FILE
    half = TunedFaceActs.load(half_dir, file=EVERYDAY_TUNED_FILE) if file.is_file() else TunedFaceActs.load(half_dir)
    deep_fit = {k: spec[key] for k, key in (("tuned_share", "share"), ("tuned_below", "below")) if key in spec}
    train_everyday(model, load_faceacts(faceacts_path()), load_faceacts(EVERYDAY), data_sha256=file_sha256(EVERYDAY),
                   tuned=half, deep=bool(spec.get("deep", 1)), tuned_weight=spec.get("htw", 0.5), deep_fit=deep_fit)
    assert model.everyday is not None
    model.everyday.save(out)
    return IntentModel.load(out)


def main(half_dir: str, out_base: str, specs: list[str]) -> None:
    for text in specs:
        spec = {k: float(v) for k, v in (kv.split("=") for kv in text.split(","))}
        name = text.replace(",", "_").replace("=", "")
        model = build(Path(half_dir), Path(out_base) / name, spec)
        result = evaluate_file(EVERYDAY, model=model, split="dev")
        print(json.dumps({"half": half_dir, "spec": text, "dir": str(Path(out_base) / name),
                          **{k: result[k] for k in ("n", "accuracy", "macro_f1", "abstain_below", "shown_precision",
                                                    "shown_share", "latency_ms_p50")},
                          "f1": {a: m["f1"] for a, m in result["per_class"].items()}}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
