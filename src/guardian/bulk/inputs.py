"""Where the conversations of a bulk run come from: a directory, a JSONL file or Parquet.

Each yields `Item`s in a stable order with stable ids (a resumed run skips the ids
already written, so an id must name the same conversation every time). A
conversation that cannot be read is an `Item` with an error, never an exception
that stops the run: it becomes an error row.

- a directory: every transcript below it, recursively, in any format
  `guardian.readers` reads (auto-detected as `guardian analyze FILE` does); hidden
  files and folders are skipped; the id is the path relative to the directory.
- a JSONL file of conversations (`data/conversations` schema: `id`,
  `turns` [{speaker, text}], optional `label`).
- a Parquet file (or a folder of `.parquet` files) with the same columns.
- one transcript file given with `--out`: one row, its id the file's name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardian.conversation import Conversation, Turn
from guardian.errors import GuardianError, InputError
from guardian.readers import configured_limits, read_transcript

#: Rows read from Parquet at a time (bounded memory on large files).
PARQUET_BATCH = 1024


@dataclass(frozen=True, slots=True)
class Item:
    """One conversation to screen, or the reason it cannot be (`error`)."""

    id: str
    conversation: Conversation | None = None
    label: str | None = None
    error: str | None = None


def is_bulk_input(path: str) -> bool:
    """Whether `path` holds many conversations: a directory, Parquet, or a JSONL of conversation objects.

    A `.jsonl` file may also be one transcript (one turn a line, `guardian analyze chat.jsonl`);
    it is a conversations file when its first non-empty line has `turns`.
    """
    p = Path(path)
    if path == "-" or not p.exists():
        return False
    if p.is_dir() or p.suffix.lower() == ".parquet":
        return True
    return _is_conversations_jsonl(p)


def _is_conversations_jsonl(p: Path) -> bool:
    return p.suffix.lower() in (".jsonl", ".ndjson") and _first_line_has_turns(p)


def _first_line_has_turns(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            for raw in fh:
                if raw.strip():
                    row = json.loads(raw)
                    return isinstance(row, dict) and "turns" in row
    except (OSError, ValueError, RecursionError):
        return False
    return False


def iter_items(path: str | Path, *, input_format: str = "auto") -> Iterator[Item]:
    """Every conversation of `path`, in a stable order; an unreadable path is an InputError."""
    p = Path(path)
    if p.is_dir() and not _is_parquet_dir(p):
        return _directory(p, input_format=input_format)
    if p.suffix.lower() == ".parquet":
        return _parquet(p)
    if p.is_file():
        return _jsonl(p) if _is_conversations_jsonl(p) else _single(p, input_format=input_format)
    raise InputError("not found; give a directory of transcripts, a conversations .jsonl or a .parquet", source=str(p))


def count_items(path: str | Path) -> int | None:
    """How many items `iter_items` will yield, cheaply (for the progress bar's ETA); None if unknown."""
    p = Path(path)
    try:
        if p.is_dir() and not _is_parquet_dir(p):
            return sum(1 for _ in _transcript_files(p))
        if p.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            return sum(pq.ParquetFile(f).metadata.num_rows for f in _parquet_files(p))
        if not _is_conversations_jsonl(p):
            return 1
        with p.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    except (OSError, GuardianError, ImportError):
        return None
    except Exception:  # a corrupt Parquet footer: the run itself will say so, the bar just has no total
        return None


# --- a directory of transcripts ---------------------------------------------------------------


def _transcript_files(root: Path) -> Iterator[Path]:
    """Regular files below `root`, sorted, skipping hidden names (`.DS_Store`, `.git/`)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(folder) / name


def _directory(root: Path, *, input_format: str) -> Iterator[Item]:
    for file in _transcript_files(root):
        yield _transcript(file, cid=file.relative_to(root).as_posix(), input_format=input_format)


def _single(file: Path, *, input_format: str) -> Iterator[Item]:
    """One transcript given with `--out`: one row, its id the file's name."""
    yield _transcript(file, cid=file.name, input_format=input_format)


def _transcript(file: Path, *, cid: str, input_format: str) -> Item:
    max_bytes, max_turn_chars = configured_limits()
    try:
        conversation = read_transcript(file, input_format=input_format, max_bytes=max_bytes, max_turn_chars=max_turn_chars)
    except GuardianError as exc:
        return Item(cid, error=str(exc))
    return Item(cid, conversation=conversation.model_copy(update={"id": cid}))


# --- conversation objects (JSONL lines, Parquet rows) -------------------------------------------

_EXPECTED = "expected an object with id and turns [{speaker, text}]"


def _item_from_object(row: Any, *, where: str, max_turn_chars: int) -> Item:
    """A conversation object as an Item; whatever is wrong with it becomes the Item's error."""
    if not isinstance(row, dict):
        return Item(where, error=f"{where}: {_EXPECTED}")
    raw_id = row.get("id")
    cid = str(raw_id) if raw_id not in (None, "") else where
    label = row.get("label")
    label = str(label) if label is not None else None
    turns = row.get("turns")
    if raw_id in (None, ""):
        return Item(cid, label=label, error=f"{where}: no id; {_EXPECTED}")
    if not isinstance(turns, list | tuple) or not turns:
        return Item(cid, label=label, error=f"{where}: no turns; {_EXPECTED}")
    out = []
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or not isinstance(t.get("speaker"), str) or not isinstance(t.get("text"), str):
            return Item(cid, label=label, error=f"{where}: turn {i} is not {{speaker, text}} strings")
        if len(t["text"]) > max_turn_chars:
            return Item(
                cid, label=label,
                error=f"{where}: turn {i} is longer than {max_turn_chars} characters (raise GUARDIAN_MAX_TURN_CHARS)",
            )
        out.append(Turn(index=i, speaker=t["speaker"], text=t["text"]))
    return Item(cid, conversation=Conversation(id=cid, turns=tuple(out)), label=label)


def _jsonl(path: Path) -> Iterator[Item]:
    """One conversation object a line; a line that is not one is an error row, ids must be unique."""
    _, max_turn_chars = configured_limits()
    seen: dict[str, int] = {}
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror})", source=str(path)) from None
    with fh:
        for n, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            where = f"{path.name}:{n}"
            try:
                row = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                yield Item(where, error=f"{where}: not UTF-8 text")
                continue
            except (ValueError, RecursionError) as exc:
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
                yield Item(where, error=f"{where}: not JSON ({reason}); {_EXPECTED}")
                continue
            item = _item_from_object(row, where=where, max_turn_chars=max_turn_chars)
            yield _unique(item, seen, n, where)


def _unique(item: Item, seen: dict[str, int], n: int, where: str) -> Item:
    """A second conversation with an id already seen is an error row of its own (id `ID@where`)."""
    if item.id in seen:
        first = seen[item.id]
        return Item(f"{item.id}@{where}", label=item.label,
                    error=f"{where}: conversation id {item.id!r} appears twice (first at {first})")
    seen[item.id] = n
    return item


def _is_parquet_dir(path: Path) -> bool:
    return path.suffix.lower() == ".parquet"


def _parquet_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*.parquet") if p.is_file() and not p.name.startswith((".", "_")))
    return [path]


def _parquet(path: Path) -> Iterator[Item]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("reading Parquet needs pyarrow: pip install pyarrow", source=str(path)) from None
    _, max_turn_chars = configured_limits()
    seen: dict[str, int] = {}
    n = 0
    for file in _parquet_files(path):
        try:
            pf = pq.ParquetFile(file)
        except Exception as exc:  # pyarrow raises its own error types for a file that is not Parquet
            raise InputError(f"not a readable Parquet file ({exc})", source=str(file)) from None
        names = set(pf.schema_arrow.names)
        if not {"id", "turns"} <= names:
            raise InputError("Parquet input needs the columns id and turns (list of {speaker, text})", source=str(file))
        columns = ["id", "turns", *(["label"] if "label" in names else [])]
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH, columns=columns):
            for row in batch.to_pylist():
                n += 1
                where = f"{file.name}:row {n}"
                yield _unique(_item_from_object(row, where=where, max_turn_chars=max_turn_chars), seen, n, where)
