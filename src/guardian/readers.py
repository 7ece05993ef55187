"""Transcript readers: text in the formats people actually have, into a Conversation.

Formats: `Name: text` lines (MentalManip style), JSON Lines, WhatsApp/Signal
exports, WebVTT and SRT subtitles. Auto-detection looks at the extension and the
first lines; `--input-format` overrides it. Every error names the source, the
line and what was expected.
"""

from __future__ import annotations

import json
import math
import re
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from guardian.conversation import Conversation, Turn
from guardian.errors import InputError

MIB = 1024 * 1024
#: JSON nested past Python's recursion limit (100,000 brackets) is refused, not a crash.
TOO_DEEP = 'JSON nested too deeply; expected one flat object per line like {"speaker": "Ann", "text": "Hi"}'
DEFAULT_MAX_BYTES = 20 * MIB
DEFAULT_MAX_TURN_CHARS = 100_000


class InputFormat(StrEnum):
    AUTO = "auto"
    LINES = "lines"
    JSONL = "jsonl"
    WHATSAPP = "whatsapp"
    VTT = "vtt"
    SRT = "srt"


@dataclass(frozen=True, slots=True)
class RawTurn:
    speaker: str
    text: str
    line: int
    start: float | None = None
    end: float | None = None


_NAME = r"[^\W\d_][\w .'’()\-]{0,39}?|\d{1,3}"
SPEAKER_LINE = re.compile(rf"^\s*(?P<name>{_NAME})\s*:\s?(?P<text>.*)$")
_URL_LIKE = re.compile(r"^\s*\w+://")
_WA_BRACKET = re.compile(
    r"^\u200e?\[(?P<date>\d{1,4}[./-]\d{1,2}[./-]\d{1,4}),?\s+(?P<time>\d{1,2}:\d{2}(?::\d{2})?(?:\s?[APap][Mm])?)\]\s+"
    r"(?P<name>[^:]{1,60}?):\s?(?P<text>.*)$"
)
_WA_DASH = re.compile(
    r"^\u200e?(?P<date>\d{1,4}[./-]\d{1,2}[./-]\d{1,4}),?\s+(?P<time>\d{1,2}:\d{2}(?::\d{2})?(?:\s?[APap][Mm])?)\s+[-–]\s+"
    r"(?P<name>[^:]{1,60}?):\s?(?P<text>.*)$"
)
_WA_SYSTEM = re.compile(
    r"^\u200e?\[?\d{1,4}[./-]\d{1,2}[./-]\d{1,4},?\s+\d{1,2}:\d{2}(?::\d{2})?(?:\s?[APap][Mm])?\]?\s*[-–]?\s*[^:]*$"
)
_CUE_TIME = re.compile(
    r"^\s*(?P<start>(?:\d+:)?\d{1,2}:\d{2}[.,]\d{1,3})\s*-->\s*(?P<end>(?:\d+:)?\d{1,2}:\d{2}[.,]\d{1,3})"
)
_VOICE = re.compile(r"^<v(?:\.[\w.]+)?\s+(?P<name>[^>]+)>(?P<text>.*?)(?:</v>)?$")
_TAGS = re.compile(r"</?[a-z][^>]*>", re.IGNORECASE)


def decode(data: bytes, *, source: str) -> str:
    """Bytes to text: UTF-8 (with or without BOM) or BOM-marked UTF-16; anything else is an error."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        fix = "send it as UTF-8" if source == "<stdin>" else "re-save the file as UTF-8"  # stdin is no file
        raise InputError(
            f"byte {exc.start} is not valid UTF-8 text; {fix}",
            source=source,
            line=line,
        ) from None


def configured_limits() -> tuple[int, int]:
    """(bytes per transcript, characters per turn) from the settings, for every command that reads
    transcripts (`analyze` and `watch` once disagreed: watch ignored both settings)."""
    from guardian.config import settings

    s = settings()
    return int(s.max_transcript_mb * MIB), s.max_turn_chars


def megabytes(limit: int) -> str:
    """A byte limit as the `max_transcript_mb` setting spells it (MB of 1024 × 1024 bytes): 20, not 21."""
    value = limit / MIB
    return (f"{value:.1f}".removesuffix(".0") if value >= 0.1 else f"{value:.2g}") + " MB"


#: Seconds a blocking open of a FIFO may wait before the user is told what it waits for.
FIFO_NOTICE_AFTER_S = 1.0


def _notify_stderr(message: str) -> None:
    from guardian.terminal_text import terminal_safe

    print(f"guardian: {terminal_safe(message, one_line=True)}", file=sys.stderr, flush=True)


def read_limited(
    path: str | Path,
    *,
    max_bytes: int,
    source: str | None = None,
    what: str = "file",
    kind: str = "transcripts",
    hint: str = "split it, or raise GUARDIAN_MAX_TRANSCRIPT_MB",
    devices: bool = True,
    notify: Callable[[str], None] = _notify_stderr,
) -> bytes:
    """The bytes of a file, refused once they pass `max_bytes`.

    Never trusts `stat()`: a device (/dev/zero), a FIFO or a /proc file reports size 0
    and can produce without end, so the data is read in chunks and reading stops one
    byte past the limit. A FIFO with no writer blocks in open(); after a second the
    user is told (via `notify`) what guardian is waiting for instead of hanging silently.
    """
    path = Path(path)
    source = source if source is not None else str(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError(f"{what} not found", source=source) from None
    except OSError as exc:
        raise InputError(f"cannot read the {what} ({exc.strerror})", source=source) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"is a directory; give a {what}", source=source)
    if not devices and (stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)):
        raise InputError(f"is a device, not a {what}", source=source)
    if stat.S_ISREG(info.st_mode) and info.st_size > max_bytes:
        raise InputError(
            f"{what} is {megabytes(info.st_size)}; {kind} are read up to {megabytes(max_bytes)} "
            f"({hint})",
            source=source,
        )
    notice: threading.Timer | None = None
    if stat.S_ISFIFO(info.st_mode):
        notice = threading.Timer(
            FIFO_NOTICE_AFTER_S,
            notify,
            args=(f"waiting for a program to write to the named pipe {source} (Ctrl+C stops)",),
        )
        notice.daemon = True
        notice.start()
    try:
        try:
            handle = path.open("rb")
        finally:
            if notice is not None:
                notice.cancel()
        with handle:
            chunks: list[bytes] = []
            total = 0
            while total <= max_bytes:
                chunk = handle.read(min(1 << 20, max_bytes + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
    except OSError as exc:
        raise InputError(f"cannot read the {what} ({exc.strerror})", source=source) from None
    if total > max_bytes:
        raise InputError(
            f"{what} is larger than {megabytes(max_bytes)}; {kind} are read up to {megabytes(max_bytes)} "
            f"({hint})",
            source=source,
        )
    return b"".join(chunks)


def read_transcript(
    path: str | Path,
    *,
    input_format: InputFormat | str = InputFormat.AUTO,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_turn_chars: int = DEFAULT_MAX_TURN_CHARS,
) -> Conversation:
    """Read a transcript file ('-' for stdin is handled by the CLI via `parse_transcript`)."""
    path = Path(path)
    source = str(path)
    data = read_limited(path, max_bytes=max_bytes, source=source)
    fmt = InputFormat(input_format)
    if fmt is InputFormat.AUTO:
        fmt = _format_from_suffix(path.suffix) or InputFormat.AUTO
    return parse_transcript(
        decode(data, source=source),
        input_format=fmt,
        source=source,
        conversation_id=path.stem,
        max_turn_chars=max_turn_chars,
    )


def _format_from_suffix(suffix: str) -> InputFormat | None:
    return {
        ".jsonl": InputFormat.JSONL,
        ".ndjson": InputFormat.JSONL,
        ".vtt": InputFormat.VTT,
        ".srt": InputFormat.SRT,
    }.get(suffix.lower())


def detect_format(text: str) -> InputFormat:
    """Guess the format from the first non-empty lines."""
    lines = [ln for ln in text.splitlines()[:20] if ln.strip()]
    if not lines:
        return InputFormat.LINES
    first = lines[0].strip()
    if first.startswith("WEBVTT"):
        return InputFormat.VTT
    if first.startswith("{"):
        return InputFormat.JSONL
    if len(lines) > 1 and first.isdigit() and _CUE_TIME.match(lines[1]):
        return InputFormat.SRT
    if any(_WA_BRACKET.match(ln) or _WA_DASH.match(ln) for ln in lines[:5]):
        return InputFormat.WHATSAPP
    return InputFormat.LINES


def parse_transcript(
    text: str,
    *,
    input_format: InputFormat | str = InputFormat.AUTO,
    source: str = "<text>",
    conversation_id: str = "conversation",
    max_turn_chars: int = DEFAULT_MAX_TURN_CHARS,
) -> Conversation:
    if not text.strip():
        raise InputError("the transcript is empty; expected at least one 'Name: text' turn", source=source)
    fmt = InputFormat(input_format)
    if fmt is InputFormat.AUTO:
        fmt = detect_format(text)
    raw = list(_PARSERS[fmt](text, source))
    if not raw:
        raise InputError(f"no turns found (read as {fmt.value})", source=source)
    turns: list[Turn] = []
    for r in raw:
        body = r.text.strip()
        if not body:
            continue
        if len(body) > max_turn_chars:
            raise InputError(
                f"a turn of {len(body):,} characters is longer than the {max_turn_chars:,} allowed "
                "(is this really a conversation? raise GUARDIAN_MAX_TURN_CHARS to accept it)",
                source=source,
                line=r.line,
            )
        turns.append(
            Turn(index=len(turns), speaker=r.speaker.strip(), text=body, start=r.start, end=r.end, source=fmt.value)
        )
    if not turns:
        raise InputError("every turn is empty", source=source)
    return Conversation(id=conversation_id, turns=tuple(turns))


def parse_line(line: str) -> tuple[str, str] | None:
    """Split one `Name: text` line (used by the live readers too); None if it has no speaker."""
    if _URL_LIKE.match(line):
        return None
    m = SPEAKER_LINE.match(line)
    if m is None:
        return None
    return m.group("name").strip(), m.group("text")


def _parse_lines(text: str, source: str) -> Iterator[RawTurn]:
    current: RawTurn | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parsed = parse_line(line)
        if parsed is not None:
            if current is not None:
                yield current
            current = RawTurn(parsed[0], parsed[1], number)
        elif current is None and not any(ch.isalnum() for ch in line):
            continue  # stray punctuation before the first turn (seen in MentalManip rows)
        elif current is None:
            raise InputError(
                f"expected 'Name: text' (a speaker name, a colon, then what they said), got {_preview(line)}",
                source=source,
                line=number,
            )
        else:
            current = RawTurn(current.speaker, f"{current.text} {line.strip()}".strip(), current.line)
    if current is not None:
        yield current


def _parse_jsonl(text: str, source: str) -> Iterator[RawTurn]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"not valid JSON ({exc.msg}); expected one object per line like "
                '{"speaker": "Ann", "text": "Hi"}',
                source=source,
                line=number,
            ) from None
        except RecursionError:
            raise InputError(TOO_DEEP, source=source, line=number) from None
        if not isinstance(obj, dict):
            raise InputError("expected a JSON object with 'speaker' and 'text'", source=source, line=number)
        speaker, body = obj.get("speaker"), obj.get("text")
        if not isinstance(speaker, str) or not speaker.strip():
            raise InputError("missing or non-string 'speaker'", source=source, line=number)
        if not isinstance(body, str):
            raise InputError("missing or non-string 'text'", source=source, line=number)
        start, end = obj.get("start"), obj.get("end")
        for key, value in (("start", start), ("end", end)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            ):
                raise InputError(f"'{key}' must be a number of seconds", source=source, line=number)
        yield RawTurn(speaker, body, number, _num(start), _num(end))


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _parse_whatsapp(text: str, source: str) -> Iterator[RawTurn]:
    current: RawTurn | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        m = _WA_BRACKET.match(line) or _WA_DASH.match(line)
        if m is not None:
            if current is not None:
                yield current
            body = m.group("text")
            current = RawTurn(m.group("name").strip(), body, number)
        elif _WA_SYSTEM.match(line):
            continue  # "Messages are end-to-end encrypted", joins, leaves
        elif current is None:
            raise InputError(
                "expected a chat export line like '[12/03/24, 21:15] Name: text' or "
                f"'12/03/2024, 21:15 - Name: text', got {_preview(line)}",
                source=source,
                line=number,
            )
        else:
            current = RawTurn(current.speaker, f"{current.text}\n{line}", current.line)
    if current is not None:
        yield current


def _seconds(stamp: str) -> float:
    parts = stamp.replace(",", ".").split(":")
    total = 0.0
    for part in parts:
        total = total * 60 + float(part)
    return total


def _parse_cues(text: str, source: str, *, srt: bool) -> Iterator[RawTurn]:
    lines = text.splitlines()
    i = 0
    pending: RawTurn | None = None
    found_cue = False
    while i < len(lines):
        m = _CUE_TIME.match(lines[i])
        if m is None:
            i += 1
            continue
        found_cue = True
        cue_line = i + 1
        start, end = _seconds(m.group("start")), _seconds(m.group("end"))
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip():
            body.append(lines[i].strip())
            i += 1
        if srt and body and i < len(lines) and body[-1].isdigit():
            body.pop()
        speaker, spoken = _cue_speaker(body)
        if speaker is None:
            if pending is None:
                raise InputError(
                    "cue has no speaker; expected '<v Name>text' or 'Name: text'",
                    source=source,
                    line=cue_line,
                )
            speaker = pending.speaker
        if pending is not None and pending.speaker == speaker:
            pending = RawTurn(speaker, f"{pending.text} {spoken}".strip(), pending.line, pending.start, end)
        else:
            if pending is not None:
                yield pending
            pending = RawTurn(speaker, spoken, cue_line, start, end)
    if not found_cue:
        raise InputError("no cues found; expected timing lines like '00:00:01.000 --> 00:00:03.500'", source=source)
    if pending is not None:
        yield pending


def _cue_speaker(body: list[str]) -> tuple[str | None, str]:
    speaker: str | None = None
    texts: list[str] = []
    for line in body:
        v = _VOICE.match(line)
        if v is not None:
            speaker = speaker or v.group("name").strip()
            line = v.group("text")
        else:
            parsed = parse_line(_TAGS.sub("", line))
            if parsed is not None and speaker is None:
                speaker, line = parsed
        texts.append(_TAGS.sub("", line).strip())
    return speaker, " ".join(t for t in texts if t)


def _parse_vtt(text: str, source: str) -> Iterator[RawTurn]:
    if not text.lstrip("\ufeff").startswith("WEBVTT"):
        raise InputError("a WebVTT file must start with 'WEBVTT'", source=source, line=1)
    return _parse_cues(text, source, srt=False)


def _parse_srt(text: str, source: str) -> Iterator[RawTurn]:
    return _parse_cues(text, source, srt=True)


def _preview(line: str) -> str:
    line = line.strip()
    return repr(line if len(line) <= 60 else line[:57] + "...")


_PARSERS: dict[InputFormat, Callable[[str, str], Iterator[RawTurn]]] = {
    InputFormat.LINES: _parse_lines,
    InputFormat.JSONL: _parse_jsonl,
    InputFormat.WHATSAPP: _parse_whatsapp,
    InputFormat.VTT: _parse_vtt,
    InputFormat.SRT: _parse_srt,
}
