"""Benchmark of the local manipulation model; prints one JSON object.

Per-turn latency: the detector assesses each new turn of MentalManip dialogues
(strung together into one long conversation) with a 10-turn window, as the
monitor does. Throughput: whole dialogues per second through `analyze`. Also the
peak RSS of this process and the artifact size. Wall-clock figures depend on what
else the machine runs (the load average is printed with them); the per-turn CPU
time is the steadier figure on a shared machine. Run with
`OMP_NUM_THREADS=1 .venv/bin/python lab/bench_local.py [--turns N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

from guardian.conversation import Conversation
from guardian.corpora.datasets import load_mentalmanip
from guardian.detectors.local.detector import LocalModelDetector, artifact_size_mb


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300, help="turns assessed for the latency figures")
    parser.add_argument("--dialogues", type=int, default=300, help="dialogues for the throughput figure")
    parser.add_argument("--window", type=int, default=10)
    args = parser.parse_args()

    dialogues = load_mentalmanip()
    detector = LocalModelDetector()
    started = time.perf_counter()
    detector.warm_up()
    load_s = time.perf_counter() - started

    conv = Conversation(id="bench")
    for d in dialogues:
        for t in d.conversation.turns:
            conv = conv.append(t.speaker, t.text)
        if len(conv) >= args.turns + args.window:
            break
    detector.analyze(conv.window(args.window))  # warm caches
    latencies = []
    cpu = []
    for turn in conv.turns[args.window : args.window + args.turns]:
        window = conv.upto(turn.index).window(args.window)
        began, began_cpu = time.perf_counter(), time.process_time()
        detector.analyze(window)
        latencies.append((time.perf_counter() - began) * 1000)
        cpu.append((time.process_time() - began_cpu) * 1000)

    batch = [d.conversation for d in dialogues[: args.dialogues]]
    began = time.perf_counter()
    for c in batch:
        detector.analyze(c)
    elapsed = time.perf_counter() - began

    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = {
        "detector": detector.name,
        "window_turns": args.window,
        "turns": len(latencies),
        "per_turn_p50_ms": round(statistics.median(latencies), 2),
        "per_turn_p95_ms": round(percentile(latencies, 0.95), 2),
        "per_turn_cpu_p50_ms": round(statistics.median(cpu), 2),
        "batch_dialogues_per_s": round(len(batch) / elapsed, 1),
        "load_s": round(load_s, 2),
        "peak_rss_mb": round(rss_kb / 1024, 1),
        "artifact_mb": artifact_size_mb(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
