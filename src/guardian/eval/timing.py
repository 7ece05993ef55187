"""Measurement helpers shared by every benchmark suite.

They sit below `guardian.eval.bench` (the suite registry) and the suites that live in
their own modules (`bench_middleware`), so a suite can use them without importing the
registry that imports it: the import graph stays one-way.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

Figures = dict[str, Any]


def machine() -> dict[str, Any]:
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def latency_runs(samples: Callable[[], list[float]], *, runs: int) -> Figures:
    """Warm up once, then `runs` runs of per-item latencies; medians of each run's p50/p95."""
    samples()
    p50s, p95s = [], []
    for _ in range(runs):
        ms = samples()
        p50s.append(percentile(ms, 0.5))
        p95s.append(percentile(ms, 0.95))
    return {
        "p50_ms": round(statistics.median(p50s), 3),
        "p95_ms": round(statistics.median(p95s), 3),
        "runs": runs,
        "items_per_run": len(ms),
    }


def throughput_runs(work: Callable[[], int], *, runs: int) -> float:
    """Items per second, median over runs after one warm-up."""
    work()
    rates = []
    for _ in range(runs):
        began = time.perf_counter()
        n = work()
        rates.append(n / (time.perf_counter() - began))
    return round(statistics.median(rates), 2)
