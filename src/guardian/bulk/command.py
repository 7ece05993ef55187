"""`guardian analyze SOURCE --out OUT`: options checked, the run, the summary line.

Kept here so the command line only wires options: every bulk rule lives in `guardian.bulk`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from guardian.bulk.run import BulkOptions, Engine, run_bulk
from guardian.bulk.screen import resolve_options
from guardian.errors import InputError

ENGINES: tuple[Engine, ...] = ("local", "ray")


def run_bulk_command(
    source: str,
    *,
    out: Path | None,
    detectors: str | None,
    input_format: str,
    window: int | None,
    per_turn: bool,
    jobs: int,
    engine: str,
    address: str | None,
    flush_rows: int,
    output_format: str = "text",
) -> None:
    """Screen `source` into `out` and print the summary (stdout); errors are one sentence (InputError)."""
    if out is None:
        raise InputError(
            "holds many conversations; say where the rows go with --out results.parquet or --out results.jsonl",
            source=source,
        )
    if source == "-":
        raise InputError("bulk screening reads a file or folder, not standard input; give its path")
    if output_format != "text":
        raise InputError("--format is for one transcript printed to the terminal; a bulk run writes --out")
    chosen = next((e for e in ENGINES if e == engine), None)
    if chosen is None:
        raise InputError(f"--engine must be one of {', '.join(ENGINES)}")
    if address is not None and chosen != "ray":
        raise InputError("--address is for --engine ray")
    options = BulkOptions(
        source=source,
        out=out,
        screen=resolve_options(detectors=detectors, window=window, per_turn=per_turn),
        input_format=input_format,
        jobs=jobs,
        engine=chosen,
        address=address,
        chunk_rows=flush_rows,
    )
    summary = run_bulk(options)
    sys.stdout.write(summary.text() + "\n")
