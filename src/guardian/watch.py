"""`guardian watch`: wire a source, the detectors, the monitor and a sink (TUI or JSON Lines).

Everything that can fail because of the user's input (a missing file, an unknown
detector, a malformed log) fails here, before the TUI takes the terminal, so the
CLI can print one plain sentence.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import stat
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from guardian.conversation import Conversation, Turn
from guardian.detectors.base import Detector
from guardian.errors import GuardianError, InputError
from guardian.events import ErrorRaised, Event, TurnAdded, to_dict
from guardian.monitor import Monitor
from guardian.readers import InputFormat, configured_limits, read_transcript
from guardian.session_log import SessionHeader, SessionLog, default_log_path, read_log
from guardian.watch_sources import (
    InputProblem,
    Pacer,
    SourceItem,
    TurnInput,
    follow_file,
    read_stream,
    replay,
)

#: Replay speed (turns per second) in the TUI when neither --speed nor --instant is given.
DEFAULT_TUI_SPEED = 1.0


@dataclass(frozen=True, slots=True)
class WatchOptions:
    file: str | None = None
    speed: float | None = None
    instant: bool = False
    follow: bool = False
    headless: bool = False
    resume: Path | None = None
    detectors: tuple[str, ...] | None = None
    log: Path | None = None
    no_log: bool = False
    input_format: str = "auto"
    export_dir: Path | None = None


SourceFactory = Callable[[Pacer], AsyncIterator[SourceItem]]


@dataclass
class WatchSession:
    """A prepared session: the monitor, where turns come from, and what was restored."""

    monitor: Monitor
    conversation_id: str
    source_label: str
    make_source: SourceFactory | None
    interval: float
    mode: str = "replay"  # replay | follow | stream | chat
    log: SessionLog | None = None
    restored: list[Event] = field(default_factory=list)
    problems: list[ErrorRaised] = field(default_factory=list)
    export_dir: Path = field(default_factory=Path.cwd)

    async def pump(self, pacer: Pacer) -> int:
        """Feed every item of the source to the monitor; returns the number of turns submitted."""
        if self.make_source is None:
            return 0
        count = 0
        async for item in self.make_source(pacer):
            if isinstance(item, TurnInput):
                await self.monitor.submit(
                    self.conversation_id, item.speaker, item.text, start=item.start, end=item.end
                )
                count += 1
            else:
                self.monitor.publish(
                    ErrorRaised(
                        conversation_id=self.conversation_id,
                        turn=None,
                        kind="input",
                        message=item.message,
                        line=item.line,
                    )
                )
        return count

    def close(self) -> None:
        self.monitor.close()
        if self.log is not None:
            self.log.close()


def default_detector_names() -> list[str]:
    """Detectors used when none are named: the registry decides (configured, else every installed local one)."""
    from guardian.detectors import registry

    return registry.default_names()


def load_detectors(names: list[str] | None) -> tuple[list[Detector], list[ErrorRaised]]:
    """Create and warm up detectors. Named ones must load; defaults that fail are reported and skipped."""
    from guardian.detectors import registry

    explicit = names is not None
    wanted = list(names) if names is not None else default_detector_names()
    detectors: list[Detector] = []
    problems: list[ErrorRaised] = []
    for name in wanted:
        try:
            detector = registry.create(name)
            detector.warm_up()
        except Exception as exc:
            if explicit:
                if isinstance(exc, GuardianError):
                    raise
                raise GuardianError(f"detector {name!r} could not start ({type(exc).__name__}: {exc})") from exc
            problems.append(
                ErrorRaised(conversation_id=None, turn=None, kind="unavailable", detector=name, message=str(exc))
            )
            continue
        detectors.append(detector)
    if not detectors:
        reasons = "; ".join(f"{p.detector}: {p.message}" for p in problems) or "none are installed"
        raise GuardianError(f"no detector could be started ({reasons})")
    from guardian.language import warm_up as warm_language

    warm_language()  # every turn consults it first: load it now, not on the first turn (~0.8 s)
    return detectors, problems


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (through links too); False when either does not exist."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class Continuation:
    """Lines up what a source says again on `--resume` with the turns already in the log.

    A live source decides where a turn ends by pauses (a line without a speaker after a
    pause becomes its own turn), a file read back cannot see those pauses and joins the
    lines into one turn: counting turns skipped one turn too many. So the source's text is
    matched against the logged turns instead: a source turn may cover several logged turns
    of its speaker, or part of one; what goes past the log is new and is passed on; a turn
    that says something else means the input does not continue this log.
    """

    def __init__(self, logged: Sequence[Turn]) -> None:
        self.logged = list(logged)
        self.next = 0
        self.rest: str | None = None  # the part of logged[next] the source has not said yet

    @property
    def caught_up(self) -> bool:
        return self.next >= len(self.logged)

    def feed(self, speaker: str, text: str) -> str | None:
        """The new part of a source turn ('' when all of it is in the log); None on a mismatch."""
        said = text.strip()
        while said and not self.caught_up:
            turn = self.logged[self.next]
            logged = self.rest if self.rest is not None else turn.text.strip()
            if turn.speaker != speaker:
                break
            if said == logged:
                said, self.next, self.rest = "", self.next + 1, None
            elif said.startswith(logged) and said[len(logged)].isspace():
                said, self.next, self.rest = said[len(logged) :].lstrip(), self.next + 1, None
            elif logged.startswith(said) and logged[len(said)].isspace():
                said, self.rest = "", logged[len(said) :].lstrip()
            else:
                break
        if said and not self.caught_up:
            return None
        return said

    def mismatch(self) -> str:
        turn = self.logged[self.next]
        return (
            f"the input does not continue the session log: its turn {turn.index} "
            f"({turn.speaker}: {turn.text[:40]!r}) is not what the input says here"
        )


def _continue_after(source: AsyncIterator[SourceItem], logged: Sequence[Turn]) -> AsyncIterator[SourceItem]:
    """The source's items past what the resumed log already holds (see `Continuation`)."""

    async def gen() -> AsyncIterator[SourceItem]:
        continuation = Continuation(logged)
        async for item in source:
            if not isinstance(item, TurnInput) or continuation.caught_up:
                yield item
                continue
            new = continuation.feed(item.speaker, item.text)
            if new is None:
                yield InputProblem(item.line, continuation.mismatch())
                return  # never mix another conversation into this log
            if new:
                yield replace(item, text=new)

    return gen()


def _check_continues(conversation: Conversation, logged: Sequence[Turn], *, log: Path | None) -> None:
    """A transcript given with `--resume` must say what the log says first (else: one sentence)."""
    continuation = Continuation(logged)
    for turn in conversation.turns:
        if continuation.caught_up:
            return
        if continuation.feed(turn.speaker, turn.text) is None:
            raise InputError(continuation.mismatch() + "; give the transcript this log was made from",
                             source=str(log) if log is not None else None)


def prepare(
    options: WatchOptions,
    *,
    tui: bool,
    stdin: IO[bytes] | None = None,
    monitor_factory: Callable[[list[Detector]], Monitor] | None = None,
) -> WatchSession:
    """Read inputs, load detectors and the resumed log; raise GuardianError for anything wrong."""
    if options.speed is not None and options.speed <= 0:
        raise InputError("--speed must be a positive number of turns per second")
    restored: list[Event] = []
    conversation_id: str | None = None
    if options.resume is not None:
        record = read_log(options.resume)
        restored = list(record.events)
        ids = [e.conversation_id for e in restored if isinstance(e, TurnAdded)]
        conversation_id = ids[0] if ids else None
    file = options.file
    if file is None and not tui:
        file = "-"  # headless with no file: read the turns from standard input
    make_source: SourceFactory | None
    transcript: Conversation | None = None
    if file is None:
        make_source, label, default_id, mode = None, "typed chat", "chat", "chat"
    elif file == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        stream_turn_chars = configured_limits()[1]  # a stream has no size, but its turns have a limit

        def make_source(pacer: Pacer) -> AsyncIterator[SourceItem]:
            return read_stream(stream, pacer=pacer, max_turn_chars=stream_turn_chars)

        label, default_id, mode = "standard input", "stdin", "stream"
    elif options.follow:
        followed = Path(file)
        if followed.is_dir():
            raise InputError("is a directory; give a chat log file", source=file)
        try:  # say so now: following a file that is not there (or not readable) waited without a word
            if stat.S_ISFIFO(followed.stat().st_mode):  # opening one waits for its writer: ask instead
                if not os.access(followed, os.R_OK):
                    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
            else:
                with followed.open("rb"):
                    pass
        except FileNotFoundError:
            raise InputError("file not found; --follow reads a chat log that exists (create it first)",
                             source=file) from None
        except OSError as exc:
            raise InputError(f"cannot read the file ({exc.strerror})", source=file) from None

        followed_turn_chars = configured_limits()[1]

        def make_source(pacer: Pacer) -> AsyncIterator[SourceItem]:
            return follow_file(followed, pacer=pacer, max_turn_chars=followed_turn_chars)

        label, default_id, mode = f"{file} (following)", followed.stem, "follow"
    else:
        max_bytes, max_turn_chars = configured_limits()
        conversation = transcript = read_transcript(
            file, input_format=InputFormat(options.input_format), max_bytes=max_bytes, max_turn_chars=max_turn_chars
        )

        def make_source(pacer: Pacer) -> AsyncIterator[SourceItem]:
            return replay(conversation, pacer)

        label, default_id, mode = file, Path(file).stem, "replay"
    conversation_id = conversation_id or default_id

    if sys.stderr.isatty():
        # Heavy detectors load (or build themselves) before the screen is taken over.
        print("guardian: starting detectors…", file=sys.stderr, flush=True)
    detectors, problems = load_detectors(list(options.detectors) if options.detectors else None)
    monitor = monitor_factory(detectors) if monitor_factory is not None else Monitor(detectors)
    try:
        monitor.restore(restored)
    except ValueError as exc:  # a gap or a repeat in the logged turns: the log was edited or mixed
        monitor.close()
        raise InputError(f"cannot resume: {exc}", source=str(options.resume)) from None
    logged = monitor.conversation(conversation_id).turns
    if transcript is not None and logged:
        _check_continues(transcript, logged, log=options.resume)
    if make_source is not None and logged:
        inner = make_source

        def make_source(pacer: Pacer) -> AsyncIterator[SourceItem]:
            return _continue_after(inner(pacer), logged)

    log: SessionLog | None = None
    if not options.no_log:
        log_path = options.resume or options.log or default_log_path(conversation_id)
        if file not in (None, "-") and _same_file(log_path, Path(file)):
            raise InputError("is the transcript being watched; give the session log another path", source=str(log_path))
        log = SessionLog(log_path).open(SessionHeader(label, monitor.detector_names, time.time()))
        monitor.subscribe(log.write)
        for problem in problems:
            log.write(problem)

    if options.instant:
        interval = 0.0
    elif options.speed is not None:
        interval = 1.0 / options.speed
    else:
        interval = 1.0 / DEFAULT_TUI_SPEED if tui and not options.follow and file != "-" else 0.0
    return WatchSession(
        monitor=monitor,
        conversation_id=conversation_id,
        source_label=label,
        make_source=make_source,
        interval=interval,
        mode=mode,
        log=log,
        restored=restored,
        problems=problems,
        export_dir=options.export_dir or Path.cwd(),
    )


async def run_headless(session: WatchSession, *, out: IO[str] | None = None) -> int:
    """Print every event as one JSON object per line (the schema of docs/watch.md).

    When the reader goes away (`| head`), the session stops quietly; the log keeps
    what was seen.
    """
    stream = out if out is not None else sys.stdout
    closed = asyncio.Event()
    failed: list[OSError] = []

    def emit(event: Event) -> None:
        if closed.is_set():
            return
        try:
            stream.write(json.dumps(to_dict(event), ensure_ascii=False) + "\n")
            stream.flush()
        except OSError as exc:  # the reader went away (a pipe), or the output is full (/dev/full)
            closed.set()
            if not isinstance(exc, BrokenPipeError):
                failed.append(exc)
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())

    for problem in session.problems:
        emit(problem)
    session.monitor.subscribe(emit)

    async def work() -> None:
        await session.monitor.reassess_pending()
        await session.pump(Pacer(interval=session.interval))
        await session.monitor.drain()

    try:
        task = asyncio.create_task(work())
        stop = asyncio.create_task(closed.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await session.monitor.aclose()
    finally:
        session.close()
    if failed:
        reason = failed[0].strerror or type(failed[0]).__name__
        kept = "; the session log keeps them" if session.log is not None else ""
        raise GuardianError(f"cannot write the events to the output ({reason}){kept}")
    return 0
