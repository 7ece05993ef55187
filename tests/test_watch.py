"""`guardian watch` without a terminal: JSON Lines events, sources, detector loading and resume."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import jsonschema
import pytest

from guardian.cli import main
from guardian.detectors import registry
from guardian.events import AssessmentReady, TurnAdded, json_schema
from guardian.readers import read_transcript
from guardian.session_log import read_log
from guardian.watch import WatchOptions, prepare, run_headless
from guardian.watch_sources import InputProblem, LineAssembler, TurnInput, follow_file
from tests.monitor_fakes import FailingDetector, WordDetector

REPO = Path(__file__).resolve().parent.parent
SCHEMA_FILE = REPO / "src" / "guardian" / "schema" / "watch-event.schema.json"
CHAT = "Ann: You are stupid.\nBen: Please stop.\nAnn: stupid, I said.\n"


@pytest.fixture(autouse=True)
def _test_detectors() -> Iterator[None]:
    registry.register("word-test", WordDetector)
    registry.register("failing-test", FailingDetector)
    yield
    registry.unregister("word-test")
    registry.unregister("failing-test")


def _lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_committed_schema_matches_the_code() -> None:
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == json.loads(json.dumps(json_schema()))


def test_headless_replay_prints_schema_valid_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chat = tmp_path / "chat.txt"
    chat.write_text(CHAT, encoding="utf-8")
    assert main(["watch", str(chat), "--headless", "--detectors", "word-test", "--no-log"]) == 0
    events = _lines(capsys.readouterr().out)
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    for event in events:
        jsonschema.validate(event, schema)
    assert [e["turn"]["index"] for e in events if e["type"] == "turn"] == [0, 1, 2]
    assert [e["turn"] for e in events if e["type"] == "assessment"] == [0, 1, 2]
    quotes = [(e["turn"], e["finding"]["evidence"][0]["quote"]) for e in events if e["type"] == "finding"]
    assert quotes == [(0, "stupid"), (2, "stupid")]
    assert all(e["conversation_id"] == "chat" for e in events)


def test_stdin_lines_continuations_and_bad_lines(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    data = "no speaker here\nAnn: You are\nreally stupid.\nBen: ok\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    assert main(["watch", "-", "--detectors", "word-test", "--no-log"]) == 0
    events = _lines(capsys.readouterr().out)
    assert events[0]["type"] == "error" and events[0]["kind"] == "input" and events[0]["line"] == 1
    turns = [e["turn"] for e in events if e["type"] == "turn"]
    assert [(t["speaker"], t["text"]) for t in turns] == [("Ann", "You are really stupid."), ("Ben", "ok")]


def test_a_default_detector_that_fails_to_load_is_reported_and_skipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken() -> WordDetector:
        raise RuntimeError("weights missing")

    registry.register("broken-test", broken)
    try:
        monkeypatch.setattr("guardian.watch.default_detector_names", lambda: ["broken-test", "word-test"])
        chat = tmp_path / "chat.txt"
        chat.write_text(CHAT, encoding="utf-8")
        assert main(["watch", str(chat), "--no-log"]) == 0
    finally:
        registry.unregister("broken-test")
    events = _lines(capsys.readouterr().out)
    assert events[0] == {**events[0], "type": "error", "kind": "unavailable", "detector": "broken-test"}
    assert sum(e["type"] == "finding" for e in events) == 2


def test_input_mistakes_are_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chat = tmp_path / "chat.txt"
    chat.write_text(CHAT, encoding="utf-8")
    assert main(["watch", str(tmp_path / "missing.txt"), "--headless", "--detectors", "word-test"]) == 2
    assert main(["watch", str(chat), "--headless", "--detectors", "nope"]) == 2
    assert main(["watch", str(chat), "--headless", "--speed", "0", "--detectors", "word-test"]) == 2
    assert main(["watch", "--follow", "--headless"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "file not found" in err and "no detector named 'nope'" in err and "--speed" in err


async def test_resume_continues_a_crashed_session_without_repeating_turns(tmp_path: Path) -> None:
    chat = tmp_path / "chat.txt"
    chat.write_text(CHAT + "Ben: Enough.\n", encoding="utf-8")
    log = tmp_path / "session.jsonl"
    options = WatchOptions(file=str(chat), instant=True, detectors=("word-test",), log=log)
    await run_headless(prepare(options, tui=False), out=io.StringIO())
    # Simulate a crash after turn 1 was written (before any assessment), mid-way through the next line.
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = [i for i, line in enumerate(lines) if '"type":"turn"' in line][1] + 1
    assert not any('"type":"assessment"' in line for line in lines[:cut])
    log.write_text("".join(lines[:cut]) + '{"type":"assessm', encoding="utf-8")

    out = io.StringIO()
    resumed = prepare(WatchOptions(file=str(chat), instant=True, detectors=("word-test",), resume=log), tui=False)
    await run_headless(resumed, out=out)
    printed = _lines(out.getvalue())
    # Every turn without an assessment in the log is assessed, then the file's new turns follow.
    assert [e["turn"] for e in printed if e["type"] == "assessment"] == [0, 1, 2, 3]
    assert [e["turn"]["index"] for e in printed if e["type"] == "turn"] == [2, 3]
    record = read_log(log)
    turns = [e.turn for e in record.events if isinstance(e, TurnAdded)]
    assert [t.index for t in turns] == [0, 1, 2, 3]
    assert [t.text for t in turns][-1] == "Enough."
    assert not record.torn_tail


def test_line_assembler_handles_json_lines_and_wrapped_turns() -> None:
    a = LineAssembler()
    assert a.feed('{"speaker": "Ann", "text": "hi"}') == [TurnInput("Ann", "hi", line=1)]
    assert a.feed("Ben: a long") == []
    assert a.feed("  message") == []
    assert a.flush() == [TurnInput("Ben", "a long message", line=2)]
    assert a.feed("more from Ben after a pause") == []
    assert a.flush() == [TurnInput("Ben", "more from Ben after a pause", line=4)]
    bad = a.feed("{not json")
    assert isinstance(bad[0], InputProblem) and bad[0].line == 5


async def test_follow_drops_a_line_that_grows_past_the_turn_limit_and_keeps_reading(tmp_path: Path) -> None:
    """A writer that never ends its line (or appends megabytes at once) cannot fill memory (issue 21)."""
    path = tmp_path / "live.log"
    path.write_text("Ann: first\n", encoding="utf-8")
    stop = asyncio.Event()
    got: list[TurnInput | InputProblem] = []

    async def read() -> None:
        async for item in follow_file(path, poll=0.02, idle_flush=0.05, stop=stop, max_turn_chars=100):
            got.append(item)
            if isinstance(item, TurnInput) and item.speaker == "Ben":
                stop.set()
                return

    task = asyncio.create_task(read())
    await asyncio.sleep(0.2)
    with path.open("a", encoding="utf-8") as f:
        for _ in range(50):  # 50 kB of one line, written in pieces, no newline yet
            f.write("x" * 1000)
            f.flush()
        await asyncio.sleep(0.2)
        f.write("\nBen: second\n")
    await asyncio.wait_for(task, timeout=10)
    assert [type(item).__name__ for item in got] == ["TurnInput", "InputProblem", "TurnInput"]
    assert "longer than the 100 allowed" in got[1].message


def test_the_follow_buffer_never_holds_more_than_a_line_may_take() -> None:
    from guardian.watch_sources import LineTooLong, _TailLines

    lines: asyncio.Queue[object] = asyncio.Queue()
    tail = _TailLines(lines, limit=64)  # type: ignore[arg-type]
    for _ in range(100):
        tail.feed(b"y" * 50)
        assert len(tail.partial) <= 64
    tail.feed(b"tail of the long line\nAnn: ok\n" + b"z" * 70 + b"\n")
    queued = [lines.get_nowait() for _ in range(lines.qsize())]
    assert [type(q).__name__ for q in queued] == ["LineTooLong", "bytes", "LineTooLong"]
    assert queued[1] == b"Ann: ok"
    assert isinstance(queued[0], LineTooLong)


async def test_follow_reads_what_is_appended(tmp_path: Path) -> None:
    path = tmp_path / "live.log"
    path.write_text("Ann: first\n", encoding="utf-8")
    stop = asyncio.Event()
    got: list[TurnInput] = []

    async def read() -> None:
        async for item in follow_file(path, poll=0.02, idle_flush=0.05, stop=stop):
            assert isinstance(item, TurnInput)
            got.append(item)
            if len(got) == 3:
                stop.set()
                return

    task = asyncio.create_task(read())
    await asyncio.sleep(0.2)
    with path.open("a", encoding="utf-8") as f:
        f.write("Ben: second\nAnn: thi")
        f.flush()
        await asyncio.sleep(0.2)
        f.write("rd\n")
    await asyncio.wait_for(task, timeout=10)
    assert [(t.speaker, t.text) for t in got] == [("Ann", "first"), ("Ben", "second"), ("Ann", "third")]


@pytest.mark.e2e
def test_killed_watch_process_resumes_from_its_log(tmp_path: Path) -> None:
    """The real CLI, killed with SIGKILL mid-replay, then `--resume`d: every turn once, in order."""
    import os
    import signal
    import subprocess
    import sys
    import time

    chat = REPO / "examples" / "car_keys.txt"  # 12 turns
    log = tmp_path / "session.jsonl"
    guardian = str(Path(sys.executable).parent / "guardian")
    env = {**os.environ, "GUARDIAN_DATA_DIR": str(tmp_path), "GUARDIAN_CONFIG_DIR": str(tmp_path)}
    base = [guardian, "watch", str(chat), "--headless", "--detectors", "keyphrases"]
    proc = subprocess.Popen([*base, "--speed", "20", "--log", str(log)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not log.exists() or log.read_text().count('"type":"turn"') < 4):
            time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    before = [e for e in read_log(log).events if isinstance(e, TurnAdded)]
    assert 4 <= len(before) < 12
    done = subprocess.run([*base, "--instant", "--resume", str(log)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    record = read_log(log)
    turns = [e.turn for e in record.events if isinstance(e, TurnAdded)]
    assert [t.index for t in turns] == list(range(12))
    assert [t.text for t in turns] == [t.text for t in read_transcript(chat).turns]
    assessed = sorted({e.assessment.turn for e in record.events if isinstance(e, AssessmentReady)})
    assert assessed == list(range(12))


def _session_turns(log: Path) -> list[TurnAdded]:
    return [e for e in read_log(log).events if isinstance(e, TurnAdded)]


def _wait_for(condition: Callable[[], bool], *, seconds: float, what: str) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.e2e
def test_follow_with_the_default_log_survives_kill_and_resume(tmp_path: Path) -> None:
    """`watch --follow` on a chat log another process appends to, logging to the default place
    (it once followed its own session log instead), killed with SIGKILL and `--resume`d while
    the writer goes on: every turn of the chat is in the log once, in order."""
    import os
    import signal
    import subprocess
    import sys

    lines = (REPO / "examples" / "car_keys.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    chat = tmp_path / "c.log"
    chat.write_text("".join(lines[:2]), encoding="utf-8")
    data = tmp_path / "data"
    env = {**os.environ, "GUARDIAN_DATA_DIR": str(data), "GUARDIAN_CONFIG_DIR": str(tmp_path / "config")}
    guardian = str(Path(sys.executable).parent / "guardian")
    base = [guardian, "watch", str(chat), "--follow", "--headless", "--detectors", "keyphrases"]
    writer_code = (
        "import sys, time\n"
        "path, lines = sys.argv[1], sys.argv[2:]\n"
        "go = path + '.go'\n"
        "for n, line in enumerate(lines):\n"
        "    while n == 3 and not __import__('os').path.exists(go):\n"
        "        time.sleep(0.05)\n"
        "    with open(path, 'a', encoding='utf-8') as f:\n"
        "        f.write(line)\n"
        "    time.sleep(0.15)\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", writer_code, str(chat), *lines[2:]])
    first = subprocess.Popen(base, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    resumed: subprocess.Popen[bytes] | None = None
    try:
        sessions = data / "sessions"

        def logged(count: int) -> Callable[[], bool]:
            def check() -> bool:
                logs = list(sessions.glob("*.jsonl")) if sessions.exists() else []
                return len(logs) == 1 and len(_session_turns(logs[0])) >= count

            return check

        _wait_for(logged(4), seconds=60, what="four followed turns in the default session log")
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        (tmp_path / "c.log.go").touch()  # the writer goes on only once the watcher is dead
        (log,) = sessions.glob("*.jsonl")
        before = len(_session_turns(log))
        assert 4 <= before < len(lines)
        resumed = subprocess.Popen([*base, "--resume", str(log)], env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        writer.wait(timeout=60)
        _wait_for(lambda: len(_session_turns(log)) >= len(lines), seconds=60, what="every turn after --resume")
        import time

        time.sleep(1.0)  # a duplicate would arrive within the follow poll and idle flush
    finally:
        for proc in (first, resumed, writer):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
    turns = [e.turn for e in _session_turns(log)]
    assert [t.index for t in turns] == list(range(len(lines)))
    assert [f"{t.speaker}: {t.text}\n" for t in turns] == lines
    assert sorted(p.name for p in (data / "sessions").iterdir()) == [log.name]
    assert chat.read_text(encoding="utf-8") == "".join(lines)  # the chat file itself is never written to


def test_watch_honours_the_size_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = tmp_path / "chat.txt"
    chat.write_text(CHAT * 100, encoding="utf-8")  # 5.5 kB
    monkeypatch.setenv("GUARDIAN_MAX_TRANSCRIPT_MB", "0.001")
    assert main(["watch", str(chat), "--headless", "--detectors", "word-test", "--no-log"]) == 2
    assert "transcripts are read up to 0.001 MB" in capsys.readouterr().err
    from guardian.config import settings

    settings.cache_clear()
    monkeypatch.setenv("GUARDIAN_MAX_TRANSCRIPT_MB", "1")
    monkeypatch.setenv("GUARDIAN_MAX_TURN_CHARS", "5")
    assert main(["watch", str(chat), "--headless", "--detectors", "word-test", "--no-log"]) == 2
    assert "longer than the 5 allowed" in capsys.readouterr().err


def _watch_with_log(chat: Path, log: Path) -> int:
    return main(["watch", str(chat), "--headless", "--instant", "--detectors", "word-test", "--log", str(log)])


def test_a_log_is_never_written_over_another_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--log notes.txt` once emptied notes.txt (exit 0), `--log` on the input appended JSON to the
    transcript, and a symlinked log's target was cut: each is refused with one sentence, exit 2."""
    import os

    chat = tmp_path / "chat.txt"
    chat.write_text(CHAT, encoding="utf-8")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, no newline at the end", encoding="utf-8")
    link = tmp_path / "link.jsonl"
    os.symlink(notes, link)
    folder = tmp_path / "folder"
    folder.mkdir()
    for log, message in (
        (notes, "is not a guardian session log"),
        (chat, "is the transcript being watched"),
        (link, "is a symbolic link"),
        (folder, "is a directory"),
    ):
        assert _watch_with_log(chat, log) == 2, log
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and err.count("\n") == 1
    assert notes.read_text(encoding="utf-8") == "my notes, no newline at the end"
    assert chat.read_text(encoding="utf-8") == CHAT
    # A session log is appended to, as before; a new path is created.
    log = tmp_path / "logs" / "s.jsonl"
    assert _watch_with_log(chat, log) == 0 and _watch_with_log(chat, log) == 0
    assert [h.source for h in read_log(log).headers] == [str(chat), str(chat)]


def test_a_log_in_an_unwritable_place_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chat = tmp_path / "chat.txt"
    chat.write_text(CHAT, encoding="utf-8")
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    assert _watch_with_log(chat, blocker / "sub" / "s.jsonl") == 2  # a folder that cannot exist
    err = capsys.readouterr().err
    assert "cannot write the session log there" in err and "Traceback" not in err


async def test_a_turn_split_by_a_pause_live_is_not_lost_on_resume(tmp_path: Path) -> None:
    """On standard input a line without a speaker after the pause is its own turn; read back
    from the file it joins the previous turn. Resuming by counting turns skipped msg-020."""
    import os
    import threading
    import time

    lines = ["Ann: msg-018 hello", "Ann: msg-019 first part", "continued after a pause", "Ben: msg-020 reply",
             "Ann: msg-021 last"]
    read_fd, write_fd = os.pipe()

    def write() -> None:
        with os.fdopen(write_fd, "wb") as pipe:
            for n, line in enumerate(lines):
                if n == 2:
                    time.sleep(0.8)  # longer than the stream's 0.3 s pause
                pipe.write(line.encode() + b"\n")
                pipe.flush()

    threading.Thread(target=write, daemon=True).start()
    log = tmp_path / "session.jsonl"
    with os.fdopen(read_fd, "rb", buffering=0) as stream:
        options = WatchOptions(file="-", instant=True, detectors=("word-test",), log=log)
        await run_headless(prepare(options, tui=False, stdin=stream), out=io.StringIO())
    live = [e.turn.text for e in _session_turns(log)]
    assert live == ["msg-018 hello", "msg-019 first part", "continued after a pause", "msg-020 reply", "msg-021 last"]
    # The session is cut after the third turn, then resumed from the file the stream came from.
    kept = log.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = [i for i, line in enumerate(kept) if '"type":"turn"' in line][3]
    log.write_text("".join(kept[:cut]), encoding="utf-8")
    chat = tmp_path / "stdin.txt"
    chat.write_text("\n".join(lines) + "\n", encoding="utf-8")
    resumed = prepare(WatchOptions(file=str(chat), instant=True, detectors=("word-test",), resume=log), tui=False)
    await run_headless(resumed, out=io.StringIO())
    turns = [e.turn for e in _session_turns(log)]
    assert [t.text for t in turns] == live
    assert [t.index for t in turns] == list(range(5))


def test_resuming_with_another_transcript_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chat = tmp_path / "chat.txt"
    chat.write_text(CHAT, encoding="utf-8")
    log = tmp_path / "s.jsonl"
    assert _watch_with_log(chat, log) == 0
    other = tmp_path / "other.txt"
    other.write_text("Zed: something else entirely\nYan: and more\nZed: and more\nYan: and a new turn\n",
                     encoding="utf-8")
    before = log.read_bytes()
    assert main(["watch", str(other), "--headless", "--instant", "--detectors", "word-test", "--resume", str(log)]) == 2
    err = capsys.readouterr().err
    assert "does not continue the session log" in err and "Traceback" not in err
    assert log.read_bytes() == before


async def test_a_stream_that_does_not_continue_the_log_stops_with_an_input_error(tmp_path: Path) -> None:
    chat = tmp_path / "chat.txt"
    chat.write_text(CHAT, encoding="utf-8")
    log = tmp_path / "s.jsonl"
    await run_headless(prepare(WatchOptions(file=str(chat), instant=True, detectors=("word-test",), log=log),
                               tui=False), out=io.StringIO())
    out = io.StringIO()
    stream = io.BytesIO(b"Ann: You are stupid.\nZed: not this conversation\nYan: nor this\n")
    resumed = prepare(WatchOptions(file="-", instant=True, detectors=("word-test",), resume=log), tui=False,
                      stdin=stream)
    await run_headless(resumed, out=out)
    printed = _lines(out.getvalue())
    assert [e["type"] for e in printed if e["type"] in ("turn", "error")] == ["error"]
    assert "does not continue the session log" in printed[-1]["message"]
    assert [t.turn.speaker for t in _session_turns(log)] == ["Ann", "Ben", "Ann"]


def test_continuation_matches_text_not_turn_counts() -> None:
    from guardian.conversation import Conversation
    from guardian.watch import Continuation

    logged = Conversation.from_pairs([("Ann", "a b"), ("Ann", "c"), ("Ben", "d e")]).turns
    c = Continuation(logged)
    assert c.feed("Ann", "a b c") == ""  # one source turn covers two logged turns
    assert c.feed("Ben", "d") == ""  # and a source turn can be part of a logged one
    assert not c.caught_up
    assert c.feed("Ben", "e f") == "f"  # past the log: only the new words are passed on
    assert c.caught_up
    c = Continuation(logged)
    assert c.feed("Ann", "a x") is None and "turn 0" in c.mismatch()


def test_a_log_with_a_turn_gap_and_deep_json_are_input_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = tmp_path / "chat.txt"
    chat.write_text(CHAT, encoding="utf-8")
    log = tmp_path / "s.jsonl"
    assert _watch_with_log(chat, log) == 0
    capsys.readouterr()
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    first_turn = next(i for i, line in enumerate(lines) if '"type":"turn"' in line)
    log.write_text("".join(lines[:first_turn] + lines[first_turn + 1 :]), encoding="utf-8")  # turn 0 gone
    assert main(["watch", str(chat), "--headless", "--detectors", "word-test", "--resume", str(log)]) == 2
    err = capsys.readouterr().err
    assert "cannot resume" in err and "turn 1 follows 0 turns" in err and "internal error" not in err
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"{\"text\": " + b"[" * 100_000 + b"\nAnn: hi\n")))
    assert main(["watch", "-", "--detectors", "word-test", "--no-log"]) == 0
    events = _lines(capsys.readouterr().out)
    assert events[0]["type"] == "error" and "nested too deeply" in events[0]["message"]
    assert [e["turn"]["text"] for e in events if e["type"] == "turn"] == ["hi"]


def test_following_a_missing_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.log"
    assert main(["watch", str(missing), "--follow", "--headless", "--detectors", "word-test", "--no-log"]) == 2
    assert "file not found" in capsys.readouterr().err


def test_following_an_unreadable_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    locked = tmp_path / "locked.log"
    locked.write_text(CHAT, encoding="utf-8")
    locked.chmod(0)
    try:
        if os.access(locked, os.R_OK):
            pytest.skip("running as a user who can read any file (root)")
        assert main(["watch", str(locked), "--follow", "--headless", "--detectors", "word-test", "--no-log"]) == 2
        assert "cannot read the file" in capsys.readouterr().err
    finally:
        locked.chmod(0o644)


def test_stdin_refuses_a_turn_over_max_turn_chars_and_keeps_the_others(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 21 item 10: a stream had no turn-length limit (a file's turn over it is refused)."""
    monkeypatch.setenv("GUARDIAN_MAX_TURN_CHARS", "50")
    endless = "x" * 5000  # one line far past the bytes a 50-character turn can take
    data = f"Ann: hi\nBen: {'y' * 60}\nmore of Ben's turn\n{{\"speaker\": \"Ann\", \"text\": \"{'z' * 51}\"}}\n" \
           f"Ann: {endless}\nstill the endless turn\nBen: ok\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    assert main(["watch", "-", "--detectors", "word-test", "--no-log"]) == 0
    events = _lines(capsys.readouterr().out)
    turns = [(e["turn"]["speaker"], e["turn"]["text"]) for e in events if e["type"] == "turn"]
    assert turns == [("Ann", "hi"), ("Ben", "ok")]
    errors = [e for e in events if e["type"] == "error"]
    assert [(e["kind"], e["line"]) for e in errors] == [("input", 2), ("input", 4), ("input", 5)]
    assert all("longer than the 50 allowed" in e["message"] for e in errors)


def test_invalid_utf8_on_stdin_is_an_input_error_not_replaced(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 21 item 11: a stream's invalid UTF-8 was silently replaced (U+FFFD) while a file is refused."""
    data = b"Ann: hi\nBen: caf\xe9 \xff\nAnn: bye\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["watch", "-", "--detectors", "word-test", "--no-log"]) == 0
    events = _lines(capsys.readouterr().out)
    turns = [(e["turn"]["speaker"], e["turn"]["text"]) for e in events if e["type"] == "turn"]
    assert turns == [("Ann", "hi"), ("Ann", "bye")]
    errors = [e for e in events if e["type"] == "error"]
    assert [(e["kind"], e["line"]) for e in errors] == [("input", 2)]
    assert "byte 8 of this line is not valid UTF-8" in errors[0]["message"]
    assert not any("\ufffd" in json.dumps(e, ensure_ascii=False) for e in events)


def test_invalid_utf8_on_stdin_is_refused_by_analyze_like_a_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"Ann: hi\nBen: caf\xe9\n")))
    assert main(["analyze", "-", "--detectors", "word-test"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["error: <stdin>, line 2: byte 16 is not valid UTF-8 text; send it as UTF-8"]


# --- `--follow` wakes on watchfiles' change reports (issue 20), polling where it cannot watch ---

#: Long enough that only a change report (not a timer) can explain a quick read.
NEVER = 60.0


async def _follow_until(
    path: Path, count: int, write: Callable[[], Awaitable[None]], **options: float
) -> list[TurnInput]:
    """Follow `path`, run `write` once the follower is waiting, return the first `count` turns."""
    stop = asyncio.Event()
    got: list[TurnInput] = []

    async def read() -> None:
        async for item in follow_file(path, idle_flush=0.05, stop=stop, **options):
            assert isinstance(item, TurnInput)
            got.append(item)
            if len(got) == count:
                stop.set()
                return

    task = asyncio.create_task(read())
    await asyncio.sleep(0.5)  # the watcher is up
    await write()
    await asyncio.wait_for(task, timeout=10)
    return got


async def test_follow_wakes_on_a_change_report_not_a_timer(tmp_path: Path) -> None:
    path = tmp_path / "live.log"
    path.write_text("Ann: first\n", encoding="utf-8")

    async def append() -> None:
        with path.open("a", encoding="utf-8") as f:
            f.write("Ben: second\n")

    got = await _follow_until(path, 2, append, poll=NEVER, recheck=NEVER)
    assert [t.text for t in got] == ["first", "second"]


async def test_follow_waits_for_a_file_created_later_and_reads_a_rotated_one(tmp_path: Path) -> None:
    path = tmp_path / "later.log"

    async def create_then_rotate() -> None:
        path.write_text("Ann: one\nBen: two\n", encoding="utf-8")
        await asyncio.sleep(0.5)
        path.rename(tmp_path / "later.log.1")
        path.write_text("Cy: three, a new file longer than the old\n", encoding="utf-8")  # a new inode: from its start

    got = await _follow_until(path, 3, create_then_rotate, poll=NEVER, recheck=NEVER)
    assert [(t.speaker, t.text) for t in got] == [("Ann", "one"), ("Ben", "two"), ("Cy", "three, a new file longer than the old")]


async def test_follow_polls_where_watchfiles_cannot_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import watchfiles

    def no_watch(*_paths: object, **_options: object) -> object:
        raise OSError(28, "inotify watch limit reached")

    monkeypatch.setattr(watchfiles, "awatch", no_watch)
    path = tmp_path / "live.log"
    path.write_text("Ann: first\n", encoding="utf-8")

    async def append() -> None:
        with path.open("a", encoding="utf-8") as f:
            f.write("Ben: second\n")

    got = await _follow_until(path, 2, append, poll=0.02, recheck=NEVER)
    assert [t.text for t in got] == ["first", "second"]


async def test_follow_reads_a_fifo_as_a_stream(tmp_path: Path) -> None:
    """A FIFO has no size to poll and no change to watch: it is read as it is written."""
    import os
    import threading

    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)

    def writer() -> None:
        with fifo.open("w", encoding="utf-8") as f:
            f.write("Ann: over the pipe\n" + "x" * 500 + "\nBen: still here\n")

    thread = threading.Thread(target=writer, daemon=True)
    got: list[TurnInput | InputProblem] = []

    async def read() -> None:
        async for item in follow_file(fifo, idle_flush=0.05, max_turn_chars=100):
            got.append(item)

    thread.start()
    await asyncio.wait_for(read(), timeout=10)
    assert [type(i).__name__ for i in got] == ["TurnInput", "InputProblem", "TurnInput"]
    assert isinstance(got[2], TurnInput) and got[2].text == "still here"


def test_watch_follow_on_a_fifo_reads_until_its_writer_closes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--follow` once opened the FIFO to check it (waiting for a writer), then polled a size that stays 0."""
    import os
    import threading

    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)

    def writer() -> None:
        with fifo.open("w", encoding="utf-8") as f:
            f.write(CHAT)

    threading.Thread(target=writer, daemon=True).start()
    assert main(["watch", str(fifo), "--follow", "--headless", "--detectors", "word-test", "--no-log"]) == 0
    events = _lines(capsys.readouterr().out)
    assert [e["turn"]["speaker"] for e in events if e["type"] == "turn"] == ["Ann", "Ben", "Ann"]
