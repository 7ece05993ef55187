"""The results table on disk, written so that an interrupted run resumes without a duplicate.

Rows are buffered and written in chunks (`chunk_rows` rows, or every `flush_s`
seconds). A kill -9 loses at most the chunk not yet written; those conversations
are simply not done and are screened again by the next run with the same `--out`,
which first reads back the ids already written and skips them.

- `results.parquet` is a folder of parts (`part-00000.parquet`, ...), the layout
  pandas, DuckDB, Spark and Ray read as one table. A part is written under a hidden
  temporary name and renamed into place, so it is either whole or absent.
- `results.jsonl` is one file; a chunk is one write, flushed and synced. A torn
  last line (the process died mid-write) is cut off when the run resumes.

With `--per-turn`, turn rows go to `results.turns.parquet` / `results.turns.jsonl`,
each chunk written *before* its conversation rows; turns whose conversation row
never made it are removed on resume, so the two tables always agree.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from guardian.bulk.rows import ConversationRow, Screened, TurnRow
from guardian.errors import InputError

#: Rows per written chunk: what a kill -9 can cost at most (those are re-screened, never duplicated).
CHUNK_ROWS = 256
#: Seconds after which a partial chunk is written anyway (slow detectors still show progress on disk).
FLUSH_S = 30.0
FORMATS = (".parquet", ".jsonl")


class Sink(Protocol):
    """Where screened conversations go; `done` holds the ids an earlier run already wrote."""

    path: Path
    done: frozenset[str]

    def add(self, screened: Screened) -> None: ...

    def close(self) -> None: ...


def turns_path(out: Path) -> Path:
    """`results.parquet` -> `results.turns.parquet` (the `--per-turn` table beside it)."""
    return out.with_name(f"{out.stem}.turns{out.suffix}")


def open_sink(out: str | Path, *, per_turn: bool, chunk_rows: int = CHUNK_ROWS, flush_s: float = FLUSH_S) -> Sink:
    """A sink for `out` (.parquet folder or .jsonl file), resuming whatever an earlier run left there."""
    path = Path(out)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return ParquetSink(path, per_turn=per_turn, chunk_rows=chunk_rows, flush_s=flush_s)
    if suffix == ".jsonl":
        return JsonlSink(path, per_turn=per_turn, chunk_rows=chunk_rows, flush_s=flush_s)
    raise InputError("--out must end in .parquet or .jsonl", source=str(path))


class _Buffered:
    """Chunking shared by both formats: rows wait here until a chunk is full or old enough."""

    def __init__(self, *, per_turn: bool, chunk_rows: int, flush_s: float) -> None:
        self.per_turn = per_turn
        self.chunk_rows = max(1, chunk_rows)
        self.flush_s = flush_s
        self._rows: list[ConversationRow] = []
        self._turns: list[TurnRow] = []
        self._since = time.monotonic()

    def add(self, screened: Screened) -> None:
        if not self._rows:  # a chunk's age is its oldest row's: the workers' start is no row's wait
            self._since = time.monotonic()
        self._rows.append(screened.row)
        if self.per_turn:
            self._turns.extend(screened.turns)
        if len(self._rows) >= self.chunk_rows or time.monotonic() - self._since >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        if self._rows:
            self._write(self._rows, self._turns)
        self._rows, self._turns = [], []
        self._since = time.monotonic()

    def close(self) -> None:
        self.flush()

    def _write(self, rows: list[ConversationRow], turns: list[TurnRow]) -> None:
        raise NotImplementedError


# --- Parquet: a folder of parts ---------------------------------------------------------------


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise InputError("Parquet needs pyarrow: pip install pyarrow (or write --out results.jsonl)") from None
    return pyarrow


def _schemas() -> tuple[Any, Any]:
    """Explicit schemas: inferring them from a chunk whose lists are all empty would give each part its own."""
    pa = _pyarrow()
    score = pa.list_(pa.struct([("name", pa.string()), ("score", pa.float64())]))
    evidence = pa.struct([("turn", pa.int64()), ("quote", pa.string()), ("start", pa.int64()), ("end", pa.int64())])
    finding = pa.struct([
        ("technique", pa.string()), ("pattern", pa.string()), ("score", pa.float64()),
        ("evidence", pa.list_(evidence)), ("vulnerabilities", pa.list_(pa.string())),
        ("speaker", pa.string()), ("detector", pa.string()), ("explanation", pa.string()),
    ])
    quoted = pa.struct([("turn", pa.int64()), ("speaker", pa.string()), ("text", pa.string())])
    conversation = pa.schema([
        ("id", pa.string()), ("status", pa.string()), ("label", pa.string()), ("turns", pa.int64()),
        ("decision", pa.bool_()), ("probability", pa.float64()), ("first_flagged_turn", pa.int64()),
        ("manipulator", pa.string()), ("techniques", score), ("vulnerabilities", score),
        ("findings", pa.list_(finding)), ("quoted_turns", pa.list_(quoted)), ("not_assessed_turns", pa.int64()),
        ("detectors", pa.list_(pa.string())), ("errors", pa.list_(pa.string())),
    ])
    turn = pa.schema([
        ("conversation_id", pa.string()), ("turn", pa.int64()), ("speaker", pa.string()), ("text", pa.string()),
        ("decision", pa.bool_()), ("probability", pa.float64()), ("manipulator", pa.string()),
        ("techniques", score), ("vulnerabilities", score), ("findings", pa.list_(finding)),
        ("not_assessed", pa.string()), ("errors", pa.list_(pa.string())),
    ])
    return conversation, turn


def _parts(folder: Path) -> dict[int, Path]:
    out: dict[int, Path] = {}
    if folder.is_dir():
        for p in folder.glob("part-*.parquet"):
            try:
                out[int(p.stem.split("-", 1)[1])] = p
            except ValueError:
                continue
    return out


class ParquetSink(_Buffered):
    def __init__(self, path: Path, *, per_turn: bool, chunk_rows: int, flush_s: float) -> None:
        super().__init__(per_turn=per_turn, chunk_rows=chunk_rows, flush_s=flush_s)
        pq = _pyarrow().parquet
        self.path = path
        self.turns_path = turns_path(path)
        for folder in (path, self.turns_path):
            if folder.exists() and not folder.is_dir():
                raise InputError(
                    "exists and is a file; Parquet results are a folder of parts: give a new name, "
                    "or the folder of an earlier run to resume it",
                    source=str(folder),
                )
        path.mkdir(parents=True, exist_ok=True)
        for folder in (path, self.turns_path):
            for tmp in folder.glob(".part-*.tmp") if folder.is_dir() else ():
                tmp.unlink()  # a part the last run was writing when it died
        parts = _parts(path)
        for number, orphan in _parts(self.turns_path).items():
            if number not in parts:
                orphan.unlink()  # turns whose conversation rows were never written
        done: set[str] = set()
        for part in parts.values():
            try:
                done.update(str(v) for v in pq.read_table(part, columns=["id"]).column("id").to_pylist())
            except Exception as exc:  # pyarrow's own error types
                raise InputError(f"is not a readable results part ({exc}); move it away to re-screen its rows",
                                 source=str(part)) from None
        self.done = frozenset(done)
        self._next = max(parts, default=-1) + 1
        self._schemas = _schemas()

    def _write_part(self, folder: Path, rows: list[Any], schema: Any) -> None:
        pa = _pyarrow()
        folder.mkdir(parents=True, exist_ok=True)
        name = f"part-{self._next:05d}.parquet"
        tmp = folder / f".{name}.tmp"
        table = pa.Table.from_pylist([r.model_dump(mode="json") for r in rows], schema=schema)
        pa.parquet.write_table(table, tmp)
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        tmp.replace(folder / name)

    def _write(self, rows: list[ConversationRow], turns: list[TurnRow]) -> None:
        conversation_schema, turn_schema = self._schemas
        if self.per_turn:
            self._write_part(self.turns_path, turns, turn_schema)
        self._write_part(self.path, rows, conversation_schema)
        self._next += 1


# --- JSONL: one file, appended ------------------------------------------------------------------


def _cut_torn_tail(path: Path) -> None:
    """Drop a last line without its newline (the writer died mid-line)."""
    size = path.stat().st_size
    if size == 0:
        return
    with path.open("rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        pos, keep = size, 0
        while pos > 0:
            step = min(65536, pos)
            pos -= step
            fh.seek(pos)
            block = fh.read(step)
            nl = block.rfind(b"\n")
            if nl >= 0:
                keep = pos + nl + 1
                break
        fh.truncate(keep)


class JsonlSink(_Buffered):
    def __init__(self, path: Path, *, per_turn: bool, chunk_rows: int, flush_s: float) -> None:
        super().__init__(per_turn=per_turn, chunk_rows=chunk_rows, flush_s=flush_s)
        self.path = path
        self.turns_path = turns_path(path)
        if path.is_dir():
            raise InputError("is a folder; JSONL results are one file", source=str(path))
        done: set[str] = set()
        if path.exists():
            _cut_torn_tail(path)
            with path.open("rb") as fh:
                for n, line in enumerate(fh, start=1):
                    try:
                        done.add(str(json.loads(line)["id"]))
                    except (ValueError, KeyError, TypeError):
                        raise InputError("is not a guardian results file (a line without an id); give another --out",
                                         source=str(path), line=n) from None
        self.done = frozenset(done)
        if self.turns_path.exists():
            _cut_torn_tail(self.turns_path)
            self._drop_orphan_turns()

    def _drop_orphan_turns(self) -> None:
        """Turn rows are written before their conversations' rows, so orphans are a tail: cut it."""
        keep = 0
        with self.turns_path.open("rb+") as fh:
            for line in fh:
                try:
                    cid = str(json.loads(line)["conversation_id"])
                except (ValueError, KeyError, TypeError):
                    break
                if cid not in self.done:
                    break
                keep += len(line)
            fh.truncate(keep)

    @staticmethod
    def _append(path: Path, lines: list[str]) -> None:
        with path.open("a", encoding="utf-8") as fh:
            fh.write("".join(lines))
            fh.flush()
            os.fsync(fh.fileno())

    def _write(self, rows: list[ConversationRow], turns: list[TurnRow]) -> None:
        if self.per_turn:
            self._append(self.turns_path, [t.model_dump_json() + "\n" for t in turns])
        self._append(self.path, [r.model_dump_json() + "\n" for r in rows])


# --- reading a results table back ----------------------------------------------------------------


def read_rows(path: str | Path) -> Iterator[ConversationRow]:
    """Every conversation row of a results table (Parquet folder or JSONL), as written."""
    p = Path(path)
    if p.is_dir() or p.suffix.lower() == ".parquet":
        pq = _pyarrow().parquet
        for part in sorted(_parts(p).items()):
            for row in pq.read_table(part[1]).to_pylist():
                yield ConversationRow.model_validate(row)
        return
    with p.open("rb") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield ConversationRow.model_validate_json(line)
            except ValueError:
                raise InputError("is not a guardian results row", source=str(p), line=n) from None


def read_turn_rows(path: str | Path) -> Iterator[TurnRow]:
    """The `--per-turn` rows beside a results table (none when it was written without them)."""
    t = turns_path(Path(path))
    if not t.exists():
        return
    if t.suffix.lower() == ".parquet":
        pq = _pyarrow().parquet
        for _, part in sorted(_parts(t).items()):
            for row in pq.read_table(part).to_pylist():
                yield TurnRow.model_validate(row)
        return
    with t.open("rb") as fh:
        for line in fh:
            if line.strip():
                yield TurnRow.model_validate_json(line)
