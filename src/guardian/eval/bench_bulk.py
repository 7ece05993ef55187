"""The `bulk` bench suite: dialogues per second through `guardian analyze ARCHIVE --out`.

Each run screens MentalManip dialogues that no earlier run saw (detectors cache per
utterance) from a conversations JSONL into a results table, with the default
detectors and the same code path as the command: `--jobs 1`, `--jobs 2` and Ray
with 2 workers. Each run starts its own workers, so it is cold by design; two rates
are reported per run: end to end (worker start included) and steady (first row to
last row, what a long archive sees). Memory is the largest worker's peak RSS.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from guardian.bulk.inputs import iter_items
from guardian.bulk.local import EngineStats, screen_local
from guardian.bulk.rows import Screened
from guardian.bulk.screen import ScreenOptions, resolve_options
from guardian.bulk.sink import open_sink
from guardian.eval.timing import Figures

#: Dialogues per measured run, by configuration (about 10-20 s of screening each on 2 cores).
PER_RUN = {"jobs_1": 60, "jobs_2": 100, "ray_2": 100}
MILLION = 1_000_000


class _Dialogues:
    """Unseen MentalManip dialogues, written as a conversations JSONL per run."""

    def __init__(self, folder: Path) -> None:
        from guardian.eval.datasets import load_mentalmanip

        self.folder = folder
        self.pool = [d.conversation for d in load_mentalmanip()]
        self.offset = 0

    def next_file(self, n: int) -> Path:
        if self.offset + n > len(self.pool):
            self.offset = 0  # more runs than dialogues: a fresh process per run keeps caches cold anyway
        chosen = self.pool[self.offset : self.offset + n]
        self.offset += n
        path = self.folder / f"dialogues-{self.offset}.jsonl"
        path.write_text(
            "".join(
                json.dumps({"id": c.id, "turns": [{"speaker": t.speaker, "text": t.text} for t in c.turns]}) + "\n"
                for c in chosen
            ),
            encoding="utf-8",
        )
        return path


def _one_run(
    source: Path, out: Path, *, options: ScreenOptions, engine: str, jobs: int
) -> tuple[float, float, float, int]:
    """(end-to-end /s, steady /s, peak worker RSS MB, turns) of one run into a fresh results table."""
    stats = EngineStats()
    items = iter_items(source)
    results: Iterator[Screened]
    if engine == "ray":
        from guardian.bulk.ray_engine import screen_ray

        results = screen_ray(items, options=options, workers=jobs, address=None, stats=stats)
    else:
        results = screen_local(items, options=options, jobs=jobs, stats=stats)
    sink = open_sink(out, per_turn=False)
    began = time.perf_counter()
    first = last = began
    n = turns = 0
    for screened in results:
        sink.add(screened)
        n += 1
        turns += screened.row.turns
        last = time.perf_counter()
        if n == 1:
            first = last
    sink.close()
    end_to_end = n / (last - began)
    steady = (n - 1) / (last - first) if n > 1 and last > first else end_to_end
    return end_to_end, steady, stats.peak_worker_rss_mb, turns


def _config(
    name: str, dialogues: _Dialogues, workdir: Path, *, runs: int, options: ScreenOptions, engine: str, jobs: int
) -> Figures:
    e2e, steady, rss, turns = [], [], [], []
    for run in range(runs):
        source = dialogues.next_file(PER_RUN[name])
        a, b, mb, t = _one_run(source, workdir / f"{name}-{run}.parquet", options=options, engine=engine, jobs=jobs)
        e2e.append(a)
        steady.append(b)
        rss.append(mb)
        turns.append(t / PER_RUN[name])
    return {
        "engine": engine,
        "workers": jobs,
        "dialogues_per_run": PER_RUN[name],
        "mean_turns_per_dialogue": round(statistics.mean(turns), 2),
        "dialogues_per_s": round(statistics.median(steady), 2),
        "dialogues_per_s_end_to_end": round(statistics.median(e2e), 2),
        "peak_rss_mb_per_worker": round(max(rss), 1),
    }


def _hours(rate: float) -> float | None:
    return round(MILLION / rate / 3600, 1) if rate > 0 else None


def bench_bulk(runs: int) -> Figures:
    """Local `--jobs 1`, `--jobs 2` and Ray (2 workers) on unseen MentalManip dialogues, plus a 1M estimate."""
    options = resolve_options(detectors=None, window=None, per_turn=False)
    workdir = Path(tempfile.mkdtemp(prefix="guardian-bench-bulk-"))
    dialogues = _Dialogues(workdir)
    figures: Figures = {"detectors": list(options.detectors), "window_turns": options.window}
    figures["jobs_1"] = _config("jobs_1", dialogues, workdir, runs=runs, options=options, engine="local", jobs=1)
    figures["jobs_2"] = _config("jobs_2", dialogues, workdir, runs=runs, options=options, engine="local", jobs=2)
    figures["ray_2"] = _ray_figures(dialogues, workdir, runs=runs, options=options)
    one = figures["jobs_1"]["dialogues_per_s"]
    two = figures["jobs_2"]["dialogues_per_s"]
    figures["scaling_jobs_2_over_1"] = round(two / one, 2) if one else None
    ray_rate = figures["ray_2"].get("dialogues_per_s")
    if isinstance(ray_rate, float | int) and two:
        figures["ray_2_over_jobs_2"] = round(ray_rate / two, 2)
    figures["estimate_1m_dialogues_hours"] = {
        "one_worker": _hours(one),
        "this_machine_jobs_2": _hours(two),
        "per_worker_count": {str(w): _hours(one * w) for w in (16, 64, 256)},
        "assumes": "steady per-worker rate of jobs_1, linear in workers (one worker per core), MentalManip-sized dialogues",
    }
    return figures


def _ray_figures(dialogues: _Dialogues, workdir: Path, *, runs: int, options: ScreenOptions) -> Figures:
    try:
        import ray
    except ImportError:
        return {"skipped": "Ray is not installed (pip install 'guardian[ray]')"}
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    began = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    start_s = time.perf_counter() - began
    try:
        figures = _config("ray_2", dialogues, workdir, runs=runs, options=options, engine="ray", jobs=2)
    finally:
        ray.shutdown()
    figures["ray_start_s"] = round(start_s, 1)
    return figures


