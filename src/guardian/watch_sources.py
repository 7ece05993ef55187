"""Where `guardian watch` gets turns: a transcript replayed, a growing file, or a stream.

Every source is an async iterator of `TurnInput` or `InputProblem`, shared by the
TUI and the headless printer. Live text is read line by line with
`guardian.readers.parse_line`; a line without a speaker continues the previous
turn (chat logs wrap long messages), and is never thrown away: once that turn has
been sent it becomes a new turn by the same speaker.

Live text obeys the rules files obey: a line that is not UTF-8 or a turn longer than
`max_turn_chars` is refused with an `InputProblem` (the turns already seen stay, the
stream goes on), and a stream line is read only up to the bytes such a turn could
take, so one endless line cannot fill the memory.
"""

from __future__ import annotations

import asyncio
import json
import stat
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from guardian.conversation import Conversation
from guardian.readers import DEFAULT_MAX_TURN_CHARS, TOO_DEEP, parse_line


@dataclass(frozen=True, slots=True)
class TurnInput:
    speaker: str
    text: str
    line: int | None = None
    start: float | None = None
    end: float | None = None


@dataclass(frozen=True, slots=True)
class InputProblem:
    line: int | None
    message: str


SourceItem = TurnInput | InputProblem


@dataclass(frozen=True, slots=True)
class LineTooLong:
    """A stream line cut at the reader's byte bound (its rest was skipped): longer than any turn may be."""


#: What the readers queue for the assembler: a line's bytes, an over-long line, or None at the end.
QueuedLine = bytes | LineTooLong | None


def line_byte_limit(max_turn_chars: int) -> int:
    """Bytes a line may take before it surely holds more than `max_turn_chars` characters
    (UTF-8 spends at most 4 bytes on a character), so reading can stop there."""
    return 4 * (max_turn_chars + 1) + 2


def too_long(chars: int | None, max_turn_chars: int) -> str:
    """The one sentence for a live turn over the limit (files say the same in `parse_transcript`)."""
    size = f"{chars:,} characters" if chars is not None else "more characters"
    return (
        f"a turn of {size} is longer than the {max_turn_chars:,} allowed and was skipped "
        "(is this really a conversation? raise GUARDIAN_MAX_TURN_CHARS to accept it)"
    )


class Pacer:
    """Replay pacing with pause/resume; interval 0 means as fast as detectors allow."""

    def __init__(self, *, interval: float = 0.0) -> None:
        self.interval = interval
        self._running = asyncio.Event()
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def toggle(self) -> bool:
        """Flip pause; returns True when now paused."""
        if self.paused:
            self.resume()
        else:
            self.pause()
        return self.paused

    async def wait(self, *, first: bool = False) -> None:
        await self._running.wait()
        if self.interval > 0 and not first:
            await asyncio.sleep(self.interval)
            await self._running.wait()


async def replay(conversation: Conversation, pacer: Pacer, *, skip: int = 0) -> AsyncIterator[SourceItem]:
    """The turns of a transcript, one per pacer tick; the first `skip` are already in a resumed log."""
    for n, turn in enumerate(conversation.turns[skip:]):
        await pacer.wait(first=n == 0)
        yield TurnInput(turn.speaker, turn.text, line=None, start=turn.start, end=turn.end)


class LineAssembler:
    """Turns live text lines into turns (`Name: text` or a JSON object per line)."""

    def __init__(self, *, max_turn_chars: int = DEFAULT_MAX_TURN_CHARS) -> None:
        self.pending: TurnInput | None = None
        self.last_speaker: str | None = None
        self.line = 0
        self.max_turn_chars = max_turn_chars
        #: Continuation lines of a refused turn are skipped with it (they are not a turn of their own).
        self.skipping = False

    def feed(self, line: str) -> list[SourceItem]:
        self.line += 1
        line = line.rstrip("\r\n")
        if not line.strip():
            return []
        if line.lstrip().startswith("{"):
            self.skipping = False
            return [*self.flush(), self._json(line)]
        parsed = parse_line(line)
        if parsed is not None:
            self.skipping = False
            out = self.flush()
            self.pending = TurnInput(parsed[0], parsed[1].strip(), line=self.line)
            return [*out, *self._check_length()]
        if self.skipping:
            return []
        if self.pending is not None:
            self.pending = replace(self.pending, text=f"{self.pending.text} {line.strip()}".strip())
            return self._check_length()
        if self.last_speaker is not None:
            self.pending = TurnInput(self.last_speaker, line.strip(), line=self.line)
            return self._check_length()
        return [
            InputProblem(self.line, f"expected 'Name: text' (a speaker, a colon, what they said), got {line[:60]!r}")
        ]

    def feed_bytes(self, raw: bytes) -> list[SourceItem]:
        """A line as read: UTF-8 or an input error, as for files (invalid bytes were silently
        replaced, so a stream said something else than the same text saved as a file would be
        refused for). The line is skipped; the turns before it and the stream go on."""
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.line += 1
            return [InputProblem(self.line, f"byte {exc.start} of this line is not valid UTF-8 text "
                                            "and the line was skipped; send the conversation as UTF-8")]
        return self.feed(line)

    def feed_too_long(self) -> list[SourceItem]:
        """A line the reader cut off: it ends the pending turn and is refused, its continuations with it."""
        self.line += 1
        out = self.flush()
        self.skipping = True
        return [*out, InputProblem(self.line, too_long(None, self.max_turn_chars))]

    def _check_length(self) -> list[SourceItem]:
        """Refuse the pending turn once it passes the limit (a file with such a turn is refused whole)."""
        if self.pending is None or len(self.pending.text) <= self.max_turn_chars:
            return []
        refused, self.pending = self.pending, None
        self.skipping = True
        return [InputProblem(refused.line, too_long(len(refused.text), self.max_turn_chars))]

    def flush(self) -> list[SourceItem]:
        pending, self.pending = self.pending, None
        if pending is None or not pending.text:
            return []
        self.last_speaker = pending.speaker
        return [pending]

    def _json(self, line: str) -> SourceItem:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            return InputProblem(self.line, f"not valid JSON ({exc.msg})")
        except RecursionError:
            return InputProblem(self.line, TOO_DEEP)
        speaker = obj.get("speaker") if isinstance(obj, dict) else None
        text = obj.get("text") if isinstance(obj, dict) else None
        if not isinstance(speaker, str) or not speaker.strip() or not isinstance(text, str):
            return InputProblem(self.line, 'expected {"speaker": "...", "text": "..."}')
        if len(text.strip()) > self.max_turn_chars:
            return InputProblem(self.line, too_long(len(text.strip()), self.max_turn_chars))
        self.last_speaker = speaker.strip()
        return TurnInput(speaker.strip(), text.strip(), line=self.line)


async def _assemble(
    lines: asyncio.Queue[QueuedLine], pacer: Pacer | None, *, idle_flush: float, max_turn_chars: int
) -> AsyncIterator[SourceItem]:
    """Group queued lines into turns; a pause in the input (idle_flush s) completes the pending turn."""
    assembler = LineAssembler(max_turn_chars=max_turn_chars)
    first = True
    while True:
        try:
            line = await asyncio.wait_for(lines.get(), timeout=idle_flush)
        except TimeoutError:
            items = assembler.flush()
        else:
            if line is None:
                for item in assembler.flush():
                    yield item
                return
            items = assembler.feed_too_long() if isinstance(line, LineTooLong) else assembler.feed_bytes(line)
        for item in items:
            if pacer is not None:
                await pacer.wait(first=first)
            first = False
            yield item


async def read_stream(
    stream: IO[bytes],
    *,
    pacer: Pacer | None = None,
    idle_flush: float = 0.3,
    max_turn_chars: int = DEFAULT_MAX_TURN_CHARS,
) -> AsyncIterator[SourceItem]:
    """Lines from a binary stream (stdin, a pipe) until end of file, read in a thread.

    Each line is read up to `line_byte_limit` bytes: a longer one cannot be a turn
    allowed, so its rest is skipped unread into memory and it is queued as `LineTooLong`.
    """
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[QueuedLine] = asyncio.Queue()
    limit = line_byte_limit(max_turn_chars)

    def pump() -> None:
        try:
            while raw := stream.readline(limit):
                if len(raw) >= limit and not raw.endswith(b"\n"):
                    while (rest := stream.readline(limit)) and not rest.endswith(b"\n"):
                        pass
                    loop.call_soon_threadsafe(lines.put_nowait, LineTooLong())
                    continue
                loop.call_soon_threadsafe(lines.put_nowait, raw)
        finally:
            loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=pump, name="guardian-stdin", daemon=True).start()
    async for item in _assemble(lines, pacer, idle_flush=idle_flush, max_turn_chars=max_turn_chars):
        yield item


class _TailLines:
    """Splits appended bytes into lines for `follow_file`, holding at most `limit` bytes."""

    def __init__(self, lines: asyncio.Queue[QueuedLine], *, limit: int) -> None:
        self.lines = lines
        self.limit = limit
        self.partial = b""
        self.skipping = False  # inside a line already reported as too long

    def reset(self) -> None:
        self.partial, self.skipping = b"", False

    def feed(self, data: bytes) -> None:
        *complete, rest = data.split(b"\n")
        for piece in complete:
            if self.skipping:
                self.skipping = False  # the over-long line ends here
                continue
            raw = self.partial + piece
            self.partial = b""
            self.lines.put_nowait(LineTooLong() if len(raw) > self.limit else raw)
        if self.skipping:
            return
        self.partial += rest
        if len(self.partial) > self.limit:
            self.partial, self.skipping = b"", True
            self.lines.put_nowait(LineTooLong())


class _Wakeup:
    """When `follow_file` should look at its file again: on a change watchfiles reports, and
    every `recheck` seconds in any case; or, where watchfiles cannot watch, every `poll` seconds.

    watchfiles (inotify, FSEvents, ReadDirectoryChangesW) watches the file's folder, so a file
    created later, rotated (renamed away and created again) or truncated is seen as well as an
    append. It cannot help where the file system reports nothing: a folder that does not exist,
    no inotify watches left, a network or bind-mounted folder written from another machine. The
    watcher then fails (or stays silent) and the `recheck` stat, or plain `poll`-second stat
    polling after a failure, still finds what was appended.
    """

    def __init__(self, path: Path, *, poll: float, recheck: float) -> None:
        self.poll = poll
        self.recheck = recheck
        self.changed = asyncio.Event()
        self.watching = True
        absolute, resolved = path.absolute(), path.resolve()
        self._targets = {str(absolute), str(resolved)}
        self._folders = sorted({str(absolute.parent), str(resolved.parent)})
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        try:
            from watchfiles import awatch

            async for _changes in awatch(
                *self._folders,
                watch_filter=lambda _change, changed: changed in self._targets,
                recursive=False,
                debounce=200,
                step=20,
            ):
                self.changed.set()
        except asyncio.CancelledError:
            raise
        except Exception:  # cannot watch here: poll instead (the follow goes on)
            self.watching = False
            self.changed.set()

    async def wait(self) -> None:
        if not self.watching:
            await asyncio.sleep(self.poll)
            return
        try:
            await asyncio.wait_for(self.changed.wait(), timeout=self.recheck)
        except TimeoutError:
            pass
        self.changed.clear()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


def _is_stream(path: Path) -> bool:
    """A FIFO or a character device (/dev/stdin is one of these): it has no size and no
    appends for watchfiles or `stat` to see, only data to read as it comes."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


async def follow_file(
    path: Path,
    *,
    pacer: Pacer | None = None,
    poll: float = 0.2,
    recheck: float = 1.0,
    idle_flush: float = 0.5,
    stop: asyncio.Event | None = None,
    max_turn_chars: int = DEFAULT_MAX_TURN_CHARS,
) -> AsyncIterator[SourceItem]:
    """Read a file from the start, then keep reading what is appended (like `tail -f`).

    The file is read again when watchfiles reports a change (and every `recheck` seconds in
    case it missed one); where it cannot watch, every `poll` seconds (`_Wakeup`). A file that
    does not exist yet is waited for. A file that shrinks (truncated) or is another file under
    the same name (rotated: a new inode) is read again from its start. What was appended is read in pieces of at most `line_byte_limit` bytes, and
    a line (complete or still growing) longer than that is dropped as `LineTooLong` with the
    rest of it skipped, so a huge append or a writer that never ends its line cannot fill memory.

    A FIFO or character device (`/dev/stdin`) has neither a size nor changes to watch: it is
    read as a stream (`read_stream`, the same bounded lines), opened in a thread because
    opening a FIFO waits for its writer.
    """
    if _is_stream(path):
        stream = await asyncio.to_thread(path.open, "rb")
        try:
            async for item in read_stream(stream, pacer=pacer, idle_flush=idle_flush, max_turn_chars=max_turn_chars):
                if stop is not None and stop.is_set():
                    return
                yield item
        finally:
            stream.close()
        return
    lines: asyncio.Queue[QueuedLine] = asyncio.Queue()
    stop = stop or asyncio.Event()
    tail_lines = _TailLines(lines, limit=line_byte_limit(max_turn_chars))
    wakeup = _Wakeup(path, poll=poll, recheck=recheck)

    async def tail() -> None:
        pos = 0
        identity: tuple[int, int] | None = None  # (device, inode): a rotated file is another file
        while not stop.is_set():
            try:
                info = path.stat()
                size, now = info.st_size, (info.st_dev, info.st_ino)
            except FileNotFoundError:
                size, now = 0, None
            if size < pos or (now is not None and identity is not None and now != identity):
                pos = 0
                tail_lines.reset()
            identity = now if now is not None else identity
            if size > pos:
                with path.open("rb") as f:
                    f.seek(pos)
                    while pos < size and not stop.is_set():
                        data = f.read(min(size - pos, tail_lines.limit))
                        if not data:
                            break
                        pos += len(data)
                        tail_lines.feed(data)
                        await asyncio.sleep(0)
            await wakeup.wait()
        lines.put_nowait(None)

    wakeup.start()
    task = asyncio.create_task(tail())
    try:
        async for item in _assemble(lines, pacer, idle_flush=idle_flush, max_turn_chars=max_turn_chars):
            yield item
    finally:
        stop.set()
        task.cancel()
        wakeup.close()
