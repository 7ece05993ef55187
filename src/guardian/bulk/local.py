"""`--jobs N`: conversations screened by N local processes, each holding its own detectors.

`--jobs 1` screens in this process. With more, a spawn-started process pool
(torch and onnxruntime do not survive a fork) takes small batches; at most two
batches per worker are in flight, so memory stays flat on any archive, and results
come back in input order. A worker that dies (killed, out of memory) breaks the
pool: it is restarted and the batches in flight are sent again; a batch that was in
flight when the pool broke twice becomes error rows, so one poisonous conversation
cannot stop the run.
"""

from __future__ import annotations

import multiprocessing
import resource
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import islice

from guardian.bulk.inputs import Item
from guardian.bulk.rows import Screened, error_row
from guardian.bulk.screen import BATCH, Screener, ScreenOptions

#: Times a batch may be in flight when the pool breaks before its conversations are error rows.
STRIKES = 2


def peak_rss_mb() -> float:
    """This process's own peak resident memory in MB.

    Linux's ru_maxrss survives execve: a spawned worker reports at least the parent's
    resident size at the moment it was started, so `--jobs 2` workers seemed to need
    1.6 GB against 1.1 GB in-process. VmHWM belongs to the process's current memory
    map, so it counts only what the worker itself touched; ru_maxrss is the fallback
    where /proc is missing.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


@dataclass(slots=True)
class EngineStats:
    """What an engine learnt about its workers while it ran (the summary and the bench report it)."""

    workers: int = 1
    peak_worker_rss_mb: float = 0.0
    #: Conversations screened and seconds the workers spent screening them (not starting, not waiting).
    screened: int = 0
    busy_s: float = 0.0
    restarts: int = 0
    notes: list[str] = field(default_factory=list)

    def saw_rss(self, mb: float) -> None:
        self.peak_worker_rss_mb = max(self.peak_worker_rss_mb, mb)

    def saw_work(self, n: int, seconds: float) -> None:
        self.screened += n
        self.busy_s += seconds

    @property
    def per_worker_per_s(self) -> float:
        """One worker's screening rate while busy: what an archive of any size gets per worker."""
        return self.screened / self.busy_s if self.busy_s > 0 else 0.0


_screener: Screener | None = None


def _init_worker(options: ScreenOptions) -> None:
    import signal

    global _screener
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle (it flushes and stops us)
    _screener = Screener(options)


def _work(items: list[Item]) -> tuple[list[Screened], float, float]:
    """(rows, this worker's peak RSS in MB, seconds spent screening)."""
    assert _screener is not None, "worker used before its initializer ran"
    began = time.perf_counter()
    screened = _screener.screen_batch(items)
    return screened, peak_rss_mb(), time.perf_counter() - began


def screen_local(
    items: Iterable[Item], *, options: ScreenOptions, jobs: int, stats: EngineStats | None = None
) -> Iterator[Screened]:
    """Screened conversations in input order, from `jobs` processes (this one when jobs == 1)."""
    stats = stats if stats is not None else EngineStats()
    stats.workers = jobs
    if jobs <= 1:
        screener = Screener(options)
        pending = iter(items)
        while batch := list(islice(pending, BATCH)):
            rows = screener.screen_each(batch)
            while True:
                began = time.perf_counter()
                screened = next(rows, None)
                if screened is None:
                    break
                stats.saw_work(1, time.perf_counter() - began)
                stats.saw_rss(peak_rss_mb())
                yield screened
        return
    yield from _pooled(iter(items), options=options, jobs=jobs, stats=stats)


@dataclass(slots=True)
class _Task:
    items: list[Item]
    future: Future[tuple[list[Screened], float, float]] | None = None
    strikes: int = 0


def _new_pool(options: ScreenOptions, jobs: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(options,),
    )


def _pooled(items: Iterator[Item], *, options: ScreenOptions, jobs: int, stats: EngineStats) -> Iterator[Screened]:
    pool = _new_pool(options, jobs)
    pending: deque[_Task] = deque()
    try:
        while True:
            while len(pending) < 2 * jobs:
                batch = list(islice(items, BATCH))
                if not batch:
                    break
                task = _Task(batch)
                task.future = pool.submit(_work, batch)
                pending.append(task)
            if not pending:
                return
            head = pending[0]
            if head.future is None:  # in flight each time the pool broke: its conversations are error rows
                pending.popleft()
                yield from (
                    Screened(row=error_row(i.id, "a worker process died while screening it", label=i.label))
                    for i in head.items
                )
                continue
            try:
                screened, rss, busy = head.future.result()
            except BrokenProcessPool:
                pool.shutdown(wait=False, cancel_futures=True)
                stats.restarts += 1
                pool = _new_pool(options, jobs)
                for task in pending:
                    task.strikes += 1
                    task.future = None if task.strikes >= STRIKES else pool.submit(_work, task.items)
                continue
            pending.popleft()
            stats.saw_rss(rss)
            stats.saw_work(len(screened), busy)
            yield from screened
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
