"""Round 3 of the everyday face-act experiment (issue 25): what the deep head costs per live turn.

Two intent artifacts (round 1's and round 3's folders) in one process, alternating, each over
fresh bench conversations (`guardian.eval.bench._Fresh`: 40-turn stitched movie dialogues, each
turn assessed with its 10-turn window as the bench does): per-turn wall-clock p50/p95 and the
process CPU seconds per turn (all threads), which a loaded machine distorts less than wall time.
Usage: python lab/intent_everyday_r3_latency.py OLD_DIR NEW_DIR [ROUNDS]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from guardian.detectors.intent.detector import IntentDetector
from guardian.eval.bench import _Fresh


def main(old: str, new: str, rounds: int) -> None:
    detectors = {"old": IntentDetector(model_path=old), "new": IntentDetector(model_path=new)}
    for d in detectors.values():
        d.warm_up()
    fresh = _Fresh()
    wall: dict[str, list[float]] = {k: [] for k in detectors}
    cpu: dict[str, list[float]] = {k: [] for k in detectors}
    for _ in range(rounds):
        for name, d in detectors.items():
            conv = fresh.conversation(40)
            for i in range(len(conv)):
                w = conv.window(10, ending_at=i)
                c0, w0 = time.process_time(), time.perf_counter()
                d.analyze(w)
                wall[name].append(1000 * (time.perf_counter() - w0))
                cpu[name].append(1000 * (time.process_time() - c0))
    for name in detectors:
        print(f"{name}: {len(wall[name])} turns; wall p50 {np.median(wall[name]):.1f} ms, p95 "
              f"{np.quantile(wall[name], .95):.1f}; CPU per turn p50 {np.median(cpu[name]):.1f} ms, "
              f"mean {np.mean(cpu[name]):.1f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 4)
