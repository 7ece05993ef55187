"""Per-utterance latency of the `intent` detector, live-style; prints one JSON object.

Replays real conversations of the face-act corpus turn by turn through
`IntentDetector.analyze` (a growing window, as the monitor does), so each call
pays for exactly what a live turn costs: encoding the new utterance, the linear
model, role inference and the pattern rules; earlier turns come from the cache.
Wall-clock latency depends on what else runs on the machine, so the JSON also gives the
process CPU time per turn and the 1-minute load average at the end.
Run: `.venv/bin/python lab/bench_intent.py [--conversations 10] [--threads 1]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import defaultdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--window", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from guardian.conversation import Conversation
    from guardian.corpora.datasets import load_faceacts
    from guardian.detectors.intent.detector import IntentDetector

    by_conv: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for r in load_faceacts():
        by_conv[r.conversation_id].append((r.speaker, r.utterance))
    ids = sorted(by_conv)[: args.conversations]

    detector = IntentDetector()
    t0 = time.perf_counter()
    detector.warm_up()
    warm_ms = (time.perf_counter() - t0) * 1000
    times: list[float] = []
    cpu: list[float] = []
    for cid in ids:
        conv = Conversation.from_pairs(by_conv[cid], id=cid)
        for turn in conv.turns:
            window = conv.upto(turn.index).window(args.window)
            t, c = time.perf_counter(), time.process_time()
            detector.analyze(window)
            times.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
    arr = np.array(times)
    print(json.dumps({
        "benchmark": "intent detector, per utterance (live replay, warm cache for earlier turns)",
        "utterances": len(times),
        "conversations": len(ids),
        "threads": args.threads,
        "latency_ms_p50": round(float(np.percentile(arr, 50)), 2),
        "latency_ms_p90": round(float(np.percentile(arr, 90)), 2),
        "latency_ms_max": round(float(arr.max()), 2),
        "cpu_ms_p50": round(float(np.percentile(np.array(cpu), 50)), 2),
        "warm_up_ms": round(warm_ms, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
