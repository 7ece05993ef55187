"""The session log: round trip, torn last lines, a real kill mid-write, and resuming."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guardian.errors import InputError
from guardian.events import AssessmentReady, ErrorRaised, FindingRaised, TurnAdded, to_dict
from guardian.monitor import Monitor
from guardian.session_log import SessionHeader, SessionLog, read_log
from tests.monitor_fakes import WordDetector

REPO = Path(__file__).resolve().parent.parent


async def _session(path: Path) -> list:
    monitor = Monitor([WordDetector()], window=10, timeout_s=5)
    events: list = []
    monitor.subscribe(events.append)
    log = SessionLog(path).open(SessionHeader("test", monitor.detector_names, 0.0))
    monitor.subscribe(log.write)
    for speaker, text in [("Ann", "You are stupid"), ("Ben", "No \u2014 \u201cnever\u201d"), ("Ann", "stupid again")]:
        await monitor.add_turn("c", speaker, text)
    log.write(ErrorRaised(conversation_id="c", turn=None, kind="input", message="bad line", line=7))
    log.close()
    return events


async def test_events_round_trip_through_the_log(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    events = await _session(path)
    record = read_log(path)
    assert record.detectors == ("word-test",)
    assert not record.torn_tail
    assert [to_dict(e) for e in record.events[:-1]] == [to_dict(e) for e in events]
    assert isinstance(record.events[-1], ErrorRaised)
    assert record.events[-1].line == 7
    kinds = [type(e) for e in record.events]
    assert kinds.count(TurnAdded) == 3 and kinds.count(AssessmentReady) == 3 and kinds.count(FindingRaised) == 2


async def test_a_torn_last_line_is_skipped_then_cut_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    await _session(path)
    complete = read_log(path).events
    with path.open("ab") as f:
        f.write(b'{"type": "turn", "conversation_id": "c", "tu')  # the crash
    record = read_log(path)
    assert record.torn_tail
    assert len(record.events) == len(complete)
    log = SessionLog(path).open(SessionHeader("resumed", ("word-test",), 1.0))
    log.write(ErrorRaised(conversation_id="c", turn=None, kind="input", message="after resume"))
    log.close()
    again = read_log(path)
    assert not again.torn_tail
    assert len(again.headers) == 2
    assert len(again.events) == len(complete) + 1
    assert all(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())


def test_a_corrupt_line_in_the_middle_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"type": "session", "detectors": []}\nnot json\n{"type": "session"}\n', encoding="utf-8")
    with pytest.raises(InputError, match="line 2"):
        read_log(path)


def test_missing_and_empty_logs_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        read_log(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(InputError, match="empty"):
        read_log(tmp_path / "empty.jsonl")


WRITER = """
import sys
from guardian.conversation import Turn
from guardian.events import TurnAdded
from guardian.session_log import SessionHeader, SessionLog
log = SessionLog(sys.argv[1]).open(SessionHeader("writer", (), 0.0))
i = 0
while True:
    log.write(TurnAdded(conversation_id="c", turn=Turn(index=i, speaker="A", text="x" * 20000 + str(i))))
    i += 1
"""


def test_killing_the_writer_mid_write_loses_only_the_line_being_written(tmp_path: Path) -> None:
    path = tmp_path / "killed.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not path.exists() or path.stat().st_size < 2_000_000):
            time.sleep(0.01)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    record = read_log(path)
    turns = [e for e in record.events if isinstance(e, TurnAdded)]
    assert len(turns) >= 50
    assert [t.turn.index for t in turns] == list(range(len(turns)))  # nothing lost before the tear
    # Resuming restores every committed turn and continues numbering after them.
    monitor = Monitor([WordDetector()], window=10, timeout_s=5)
    monitor.restore(record.events)
    assert len(monitor.conversation("c").turns) == len(turns)
    log = SessionLog(path).open(SessionHeader("resumed", (), 1.0))
    monitor.subscribe(log.write)
    monitor.add_turn_sync("c", "B", "back again")
    monitor.close()
    log.close()
    final = [e for e in read_log(path).events if isinstance(e, TurnAdded)]
    assert [t.turn.index for t in final] == list(range(len(turns) + 1))


def test_a_device_is_not_read_as_a_session_log() -> None:
    """`guardian report /dev/zero` once read until memory ran out (stat() says 0 bytes)."""
    with pytest.raises(InputError, match="/dev/zero: is a device, not a session log"):
        read_log("/dev/zero")


def test_events_never_hold_nan_or_infinity(tmp_path: Path) -> None:
    """Python's json writes NaN/Infinity, which is not JSON: such numbers are null in events."""
    from guardian.conversation import Turn
    from guardian.findings import Assessment

    turn = Turn(index=0, speaker="Ann", text="hi", start=float("nan"), end=float("inf"))
    assessment = Assessment(conversation_id="c", turn=0)
    log = tmp_path / "s.jsonl"
    with SessionLog(log).open(SessionHeader("chat", ("x",), 0.0)) as writer:
        writer.write(TurnAdded(conversation_id="c", turn=turn))
        writer.write(AssessmentReady(conversation_id="c", assessment=assessment, risk=float("inf")))
    for line in log.read_text(encoding="utf-8").splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in a session log line"))
    assert to_dict(TurnAdded(conversation_id="c", turn=turn))["turn"]["start"] is None


def test_a_jsonl_transcript_with_nan_times_is_refused(tmp_path: Path) -> None:
    from guardian.readers import read_transcript

    path = tmp_path / "t.jsonl"
    path.write_text('{"speaker": "Ann", "text": "hi", "start": NaN}\n', encoding="utf-8")
    with pytest.raises(InputError, match="'start' must be a number of seconds"):
        read_transcript(path)
