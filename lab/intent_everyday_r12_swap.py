"""Round 12 of the everyday face-act experiment (issue 25): another everyday half in the bundled side.

`guardian train-intent --everyday` refits the head and gate too (20+ minutes on an AVX2 host) and
re-chooses the threshold; to ask only "is this half better", this copies the bundled artifact to OUT
with HALF's tuned.npz (a folder from `lab/intent_everyday_r8_distill.py` or `lab/intent_everyday_r6_soup.py`)
stored as its int8 everyday half, as `train-intent` stores it. Head, gate and threshold stay the bundled
ones, so accuracy and macro-F1 of `lab/intent_everyday_r6_kinds.py OUT --part dev` are the half's effect;
shown precision and share are at the bundled threshold, not one chosen for this half.
Usage: python lab/intent_everyday_r12_swap.py HALF_DIR OUT_DIR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from guardian.detectors.intent.domain import EVERYDAY_TUNED_FILE
from guardian.detectors.intent.model import bundled_artifact_dir
from guardian.detectors.intent.tuned import TunedFaceActs


def main(half: Path, out: Path) -> None:
    if out.exists():
        raise SystemExit(f"{out} exists; give a new folder")
    shutil.copytree(bundled_artifact_dir(), out)
    TunedFaceActs.load(half).save(out, file=EVERYDAY_TUNED_FILE, int8=True)
    print(f"bundled side with the everyday half of {half} -> {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
