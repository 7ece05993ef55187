"""The bulk run: read the archive, skip what `--out` already has, screen, write, summarise."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from guardian.bulk.inputs import Item, count_items, iter_items
from guardian.bulk.local import EngineStats, screen_local
from guardian.bulk.rows import Screened
from guardian.bulk.screen import ScreenOptions
from guardian.bulk.sink import CHUNK_ROWS, FORMATS, open_sink
from guardian.errors import InputError

Engine = Literal["local", "ray"]


@dataclass(frozen=True, slots=True)
class BulkOptions:
    """One `guardian analyze SOURCE --out OUT` run."""

    source: str
    out: Path
    screen: ScreenOptions
    input_format: str = "auto"
    jobs: int = 1
    engine: Engine = "local"
    address: str | None = None
    chunk_rows: int = CHUNK_ROWS


@dataclass(frozen=True, slots=True)
class Summary:
    """What a run did; `text()` is the line the CLI prints at the end."""

    out: Path
    screened: int
    skipped: int
    flagged: int
    errors: int
    seconds: float
    engine: str
    workers: int
    peak_worker_rss_mb: float
    detectors: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: GUARDIAN_ENCODER_PRECISION when set (e.g. int8): named in the summary, since it moves decisions a little.
    encoder_precision: str | None = None

    @property
    def per_s(self) -> float:
        return self.screened / self.seconds if self.seconds > 0 else 0.0

    def text(self) -> str:
        ok = self.screened - self.errors
        share = f"{100 * self.flagged / ok:.1f} %" if ok else "n/a"
        skipped = f", {self.skipped} already done" if self.skipped else ""
        return (
            f"{self.screened} conversations screened{skipped}: {self.flagged} flagged ({share} of those read), "
            f"{self.errors} errors; {self.seconds:.1f} s, {self.per_s:.2f} conversations/s "
            f"({self.engine}, {self.workers} worker{'s' if self.workers != 1 else ''}, "
            f"peak {self.peak_worker_rss_mb:.0f} MB per worker); detectors {', '.join(self.detectors)}"
            f"{f' (sentence encoder {self.encoder_precision})' if self.encoder_precision else ''}; rows in {self.out}"
        )


def _todo(items: Iterator[Item], done: frozenset[str], skipped: list[int]) -> Iterator[Item]:
    for item in items:
        if item.id in done:
            skipped[0] += 1
            continue
        yield item


def _screened(options: BulkOptions, items: Iterator[Item], stats: EngineStats) -> Iterator[Screened]:
    if options.engine == "ray":
        from guardian.bulk.ray_engine import screen_ray

        return screen_ray(items, options=options.screen, workers=options.jobs, address=options.address, stats=stats)
    return screen_local(items, options=options.screen, jobs=options.jobs, stats=stats)


def run_bulk(options: BulkOptions, *, show_progress: bool | None = None) -> Summary:
    """Screen every conversation of `options.source` not yet in `options.out`; rows are written as they come.

    Ctrl-C stops the run after writing every row already screened; a kill -9 loses at most the
    unwritten chunk. Either way the same command continues where it stopped.
    """
    if options.out.suffix.lower() not in FORMATS:
        raise InputError("--out must end in .parquet or .jsonl", source=str(options.out))
    if options.jobs < 1:
        raise InputError("--jobs must be at least 1")
    items = iter_items(options.source, input_format=options.input_format)
    sink = open_sink(options.out, per_turn=options.screen.per_turn, chunk_rows=options.chunk_rows)
    total = count_items(options.source)
    skipped = [0]
    stats = EngineStats()
    screened = flagged = errors = 0
    began = time.perf_counter()
    bar = _bar(None if total is None else max(0, total - len(sink.done)), show=show_progress)
    try:
        for result in _screened(options, _todo(items, sink.done, skipped), stats):
            sink.add(result)
            screened += 1
            flagged += result.row.decision
            errors += result.row.status == "error"
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"{flagged} flagged, {errors} errors", refresh=False)
    finally:
        sink.close()
        if bar is not None:
            bar.close()
    return Summary(
        out=options.out, screened=screened, skipped=skipped[0], flagged=flagged, errors=errors,
        seconds=time.perf_counter() - began, engine=options.engine, workers=stats.workers,
        peak_worker_rss_mb=stats.peak_worker_rss_mb, detectors=options.screen.detectors, notes=tuple(stats.notes),
        encoder_precision=options.screen.encoder_precision,
    )


def _bar(total: int | None, *, show: bool | None) -> Any:
    """A bar on stderr with rate and ETA; by default only when stderr is a terminal."""
    if show is False or (show is None and not sys.stderr.isatty()):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="screening", unit="conv", file=sys.stderr, smoothing=0.05, dynamic_ncols=True)
