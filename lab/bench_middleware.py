#!/usr/bin/env python
"""Print GuardianMiddleware's overhead per model call as JSON (target: p50 <= 30 ms on 2 cores).

Usage: .venv/bin/python lab/bench_middleware.py [--runs 5] [--dialogues 30]
       [--detectors local,keyphrases] [--policy observe|warn|block] [--model-latency-ms 0]
The default detector is the best local one installed (`local`, else `keyphrases`).
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the machine is shared; one thread per detector call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dialogues", type=int, default=30)
    parser.add_argument("--detectors", default=None, help="comma-separated detector names")
    parser.add_argument("--policy", default="observe", choices=["observe", "warn", "block"])
    parser.add_argument("--model-latency-ms", type=float, default=0.0, help="simulated model latency (0: worst case)")
    args = parser.parse_args()

    from guardian.eval.bench_middleware import bench_middleware
    from guardian.eval.timing import machine, peak_rss_mb

    names = [n.strip() for n in args.detectors.split(",")] if args.detectors else None
    figures = bench_middleware(args.runs, dialogues=args.dialogues, detectors=names, policy=args.policy, model_latency_ms=args.model_latency_ms)
    figures["machine"] = machine()
    figures["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
