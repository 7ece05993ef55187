"""The session log: one JSON object per line, appended and flushed per event.

A crash (or `kill -9`) can cut at most the line being written. Reading skips
such a torn last line (it has no newline), and reopening a log for appending
first cuts it off, so the file stays valid JSON Lines and everything before the
tear is kept. The first line is a `session` header; the rest are the monitor's
events in the schema of `guardian.events` (docs/watch.md).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from guardian import __version__
from guardian.errors import InputError
from guardian.events import SCHEMA_VERSION, Event, from_dict, to_dict
from guardian.readers import MIB, read_limited

#: Logs are read whole; a log is a few times its transcript (assessments), which is at most
#: `max_transcript_mb`. Past this, something that is not a session log is being read.
MAX_LOG_BYTES = 1024 * MIB


@dataclass(frozen=True, slots=True)
class SessionHeader:
    """Where the session came from and which detectors watched it."""

    source: str | None
    detectors: tuple[str, ...]
    started: float
    version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "session",
            "version": self.version,
            "guardian": __version__,
            "started": self.started,
            "source": self.source,
            "detectors": list(self.detectors),
        }


@dataclass(slots=True)
class SessionRecord:
    """A log read back: its header(s), its events, and whether a torn last line was skipped."""

    path: Path
    headers: list[SessionHeader] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    torn_tail: bool = False

    @property
    def source(self) -> str | None:
        return self.headers[0].source if self.headers else None

    @property
    def detectors(self) -> tuple[str, ...]:
        names: dict[str, None] = {}
        for header in self.headers:
            names.update(dict.fromkeys(header.detectors))
        return tuple(names)


def read_log(path: str | Path) -> SessionRecord:
    """Read a session log; a torn final line is skipped, any other bad line is an InputError."""
    path = Path(path)
    source = str(path)
    data = read_limited(
        path,
        max_bytes=MAX_LOG_BYTES,
        source=source,
        what="session log",
        kind="session logs",
        hint="start a new session log",
        devices=False,
    )
    record = SessionRecord(path=path)
    lines = data.split(b"\n")
    if lines and lines[-1] != b"":
        record.torn_tail = True  # written up to a crash: no newline yet, so not committed
    for number, raw in enumerate(lines[:-1], start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"not a JSON object ({exc})", source=source, line=number) from None
        except RecursionError:
            raise InputError("JSON nested too deeply; not a session log line", source=source, line=number) from None
        if not isinstance(obj, dict):
            raise InputError("expected a JSON object per line", source=source, line=number)
        if obj.get("type") == "session":
            record.headers.append(
                SessionHeader(
                    source=obj.get("source"),
                    detectors=tuple(obj.get("detectors") or ()),
                    started=float(obj.get("started", 0.0)),
                    version=int(obj.get("version", SCHEMA_VERSION)),
                )
            )
            continue
        record.events.append(from_dict(obj, source=source, line=number))
    if not record.headers and not record.events:
        raise InputError("the session log is empty", source=source)
    return record


class SessionLog:
    """Append-only writer; use as a monitor subscriber (`monitor.subscribe(log.write)`)."""

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None

    def open(self, header: SessionHeader | None = None) -> SessionLog:
        """Open for appending (cutting a torn last line first) and write a session header.

        Only a guardian session log (or a new or empty file) is ever written to: `--log notes.txt`
        once emptied an unrelated file, and a symlink's target was cut. Anything else, and a place
        that cannot be written, is an InputError naming the path.
        """
        source = str(self.path)
        check_writable_log(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _cut_torn_tail(self.path)
            # owner-only (0600): a log holds every word of the conversation
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise InputError(f"cannot write the session log there ({reason})", source=source) from None
        self._file = os.fdopen(fd, "ab")
        if header is not None:
            self._write_obj(header.to_dict())
        return self

    def write(self, event: Event) -> None:
        self._write_obj(to_dict(event))

    def _write_obj(self, obj: dict[str, Any]) -> None:
        line = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock:
            if self._file is None:
                raise RuntimeError("the session log is not open")
            self._file.write(line)
            self._file.flush()
            if self.fsync:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> SessionLog:
        if self._file is None:
            self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_session_log(path: Path) -> bool:
    """True when the file's first line is a guardian `session` header."""
    try:
        with path.open("rb") as f:
            first = f.readline(1 << 16)
        obj = json.loads(first.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(obj, dict) and obj.get("type") == "session" and "detectors" in obj


def check_writable_log(path: Path) -> None:
    """Refuse (InputError) a log path that would clobber something: a symlink, a directory or
    device, or an existing non-empty file that is not a guardian session log."""
    source = str(path)
    if path.is_symlink():
        raise InputError("is a symbolic link; give the session log's own path, not a link to it", source=source)
    if not path.exists():
        return
    if path.is_dir():
        raise InputError("is a directory; give a file name for the session log", source=source)
    if not path.is_file():
        raise InputError("is not a regular file; give a file name for the session log", source=source)
    if path.stat().st_size and not is_session_log(path):
        raise InputError(
            "is not a guardian session log, and guardian does not write over other files; choose another --log path",
            source=source,
        )


def _cut_torn_tail(path: Path) -> None:
    """Truncate a partial last line so appended events start on a line of their own."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        # Walk back to the last newline (logs are small enough to scan in blocks).
        pos = size
        block = 4096
        while pos > 0:
            start = max(0, pos - block)
            f.seek(start)
            chunk = f.read(pos - start)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                f.truncate(start + cut + 1)
                return
            pos = start
        f.truncate(0)


def default_log_path(conversation_id: str) -> Path:
    """Sessions live under the user data dir, named by start time and conversation."""
    from guardian import locations

    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in conversation_id)[:60] or "session"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return locations.data_dir() / "sessions" / f"{stamp}-{safe}.jsonl"
