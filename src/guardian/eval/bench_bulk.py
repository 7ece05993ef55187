"""The `bulk` bench suite: dialogues per second through `guardian analyze ARCHIVE --out`.

Each run screens MentalManip dialogues that no earlier run saw (detectors cache per
utterance) from a conversations JSONL into a results table, with the default
detectors and the same code path as the command: `--jobs 1`, `--jobs 2` and Ray
with 2 workers. Each run starts its own workers, so it is cold by design; two rates
are reported per run: end to end (worker start included) and steady (after every
worker's first batch of `BATCH` conversations), plus each worker's rate while busy (what
an archive of any size gets per worker; the 1M estimate uses it). Memory is the largest
worker's peak RSS.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from guardian.bulk.inputs import iter_items
from guardian.bulk.local import EngineStats, screen_local
from guardian.bulk.rows import Screened
from guardian.bulk.screen import BATCH, ScreenOptions, resolve_options
from guardian.bulk.sink import open_sink
from guardian.detectors import registry
from guardian.eval.timing import Figures

#: Dialogues per measured run, by configuration (about 4-20 s of screening each on 2 cores). The two
#: engines compared end to end screen 768: each run starts its workers cold (3-8 s before the first
#: row), and with 384 a run on a fast host was about 8 s, so the end-to-end ratio measured mostly
#: how fast each engine starts its workers, not how it screens an archive (docs/bulk.md).
PER_RUN = {"jobs_1": 192, "jobs_2": 768, "ray_2": 768, "jobs_1_with_intent": 96, "jobs_1_int8": 192}
MILLION = 1_000_000


class _Dialogues:
    """Unseen MentalManip dialogues, written as a conversations JSONL per run."""

    def __init__(self, folder: Path) -> None:
        from guardian.corpora.datasets import load_mentalmanip

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


def _one_run(source: Path, out: Path, *, options: ScreenOptions, engine: str, jobs: int) -> dict[str, float]:
    """One run into a fresh results table: its rates, its workers' peak RSS and the turns it screened."""
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
    arrivals: list[float] = []
    turns = 0
    for screened in results:
        sink.add(screened)
        turns += screened.row.turns
        arrivals.append(time.perf_counter())
    sink.close()
    n = len(arrivals)
    # Rows arrive in bursts of a batch (a worker's 64, a Ray block). The steady rate counts the rows
    # after every worker's first batch, over the time from the last of those to the last row: the
    # workers' start and their first batch are out, and each later batch is counted whole (counting
    # from the first row instead, as before, credited a whole burst to no time).
    first = arrivals[0]
    warm = min(jobs * BATCH, n) - 1
    span = arrivals[-1] - arrivals[warm]
    steady = (n - 1 - warm) / span if span > 0 else n / (arrivals[-1] - began)
    return {
        "end_to_end": n / (arrivals[-1] - began),
        "steady": steady,
        "first_row_s": first - began,
        "per_worker": stats.per_worker_per_s,
        "rss": stats.peak_worker_rss_mb,
        "turns": turns,
    }


def _config(
    name: str, dialogues: _Dialogues, workdir: Path, *, runs: int, options: ScreenOptions, engine: str, jobs: int
) -> Figures:
    measured = []
    for run in range(runs):
        source = dialogues.next_file(PER_RUN[name])
        measured.append(_one_run(source, workdir / f"{name}-{run}.parquet", options=options, engine=engine, jobs=jobs))

    def median(key: str) -> float:
        return round(statistics.median(m[key] for m in measured), 2)

    return {
        "engine": engine,
        "workers": jobs,
        "dialogues_per_run": PER_RUN[name],
        "mean_turns_per_dialogue": round(statistics.mean(m["turns"] for m in measured) / PER_RUN[name], 2),
        "dialogues_per_s": median("steady"),
        "dialogues_per_s_end_to_end": median("end_to_end"),
        "first_row_s": median("first_row_s"),
        "dialogues_per_s_per_busy_worker": median("per_worker"),
        "peak_rss_mb_per_worker": round(max(m["rss"] for m in measured), 1),
    }


def _hours(rate: float) -> float | None:
    return round(MILLION / rate / 3600, 1) if rate > 0 else None


def bench_bulk(runs: int) -> Figures:
    """Local `--jobs 1`, `--jobs 2` and Ray (2 workers) on unseen MentalManip dialogues, plus a 1M estimate."""
    options = resolve_options(detectors=None, window=None, per_turn=False)
    workdir = Path(tempfile.mkdtemp(prefix="guardian-bench-bulk-"))
    dialogues = _Dialogues(workdir)
    from guardian.encoding.sentence_encoder import SentenceEncoder, default_precision

    figures: Figures = {"detectors": list(options.detectors), "window_turns": options.window,
                        "encoder_precision": options.encoder_precision or default_precision()}
    figures["jobs_1"] = _config("jobs_1", dialogues, workdir, runs=runs, options=options, engine="local", jobs=1)
    everything = resolve_options(detectors=",".join(registry.default_names(purpose="conversation")), window=None,
                                 per_turn=False)
    if everything.detectors != options.detectors:  # the bulk default leaves the intent model out: its cost shown
        figures["jobs_1_with_intent"] = {  # before jobs_2: dialogues this process has not encoded yet
            "detectors": list(everything.detectors),
            **_config("jobs_1_with_intent", dialogues, workdir, runs=runs, options=everything, engine="local", jobs=1),
        }
    if figures["encoder_precision"] != "int8":  # the opt-in int8 encoder (docs/bulk.md): its rate beside the default's
        SentenceEncoder(precision="int8", cache_size=0).warm_up()  # built once into the user's cache, not timed
        figures["jobs_1_int8"] = {
            "encoder_precision": "int8",
            **_config("jobs_1_int8", dialogues, workdir, runs=runs, options=replace(options, encoder_precision="int8"),
                      engine="local", jobs=1),
        }
    figures["jobs_2"] = _config("jobs_2", dialogues, workdir, runs=runs, options=options, engine="local", jobs=2)
    figures["ray_2"] = _ray_figures(dialogues, workdir, runs=runs, options=options)
    one = figures["jobs_1"]["dialogues_per_s"]
    two = figures["jobs_2"]["dialogues_per_s"]
    figures["scaling_jobs_2_over_1"] = round(two / one, 2) if one else None
    # Ray against --jobs 2 on the rates that mean the same for both engines: end to end (start included)
    # and per busy worker. Ray's "steady" rate is not one of them: it returns rows in input order, so
    # rows held back behind a slow block arrive in a burst after the warm-up and inflate it.
    ray = figures["ray_2"]
    if isinstance(ray.get("dialogues_per_s_end_to_end"), float | int):
        figures["ray_2_over_jobs_2"] = {
            key: round(ray[key] / figures["jobs_2"][key], 2) if figures["jobs_2"][key] else None
            for key in ("dialogues_per_s_end_to_end", "dialogues_per_s_per_busy_worker")
        }
    worker = figures["jobs_1"]["dialogues_per_s_per_busy_worker"]
    figures["estimate_1m_dialogues_hours"] = {
        "one_worker": _hours(worker),
        "this_machine_jobs_2": _hours(two),
        "workers": {str(w): _hours(worker * w) for w in (16, 64, 256)},
        "assumes": "a worker per core screening at jobs_1's busy rate, linear in workers; MentalManip-sized dialogues",
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


