"""Bulk runs end to end with the real default detectors: every input form, both engines, a kill -9.

Each run must reproduce `reference_rows` (the sample screened once in this process by
the function `guardian analyze FILE` uses; `fresh_reference_rows` for runs in other
processes), in input order, with nothing twice.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guardian.analyze import AnalyzeReport
from guardian.bulk.rows import ConversationRow, conversation_row
from guardian.bulk.run import BulkOptions, run_bulk
from guardian.bulk.screen import ScreenOptions, resolve_options
from guardian.bulk.sink import read_rows, read_turn_rows
from guardian.conversation import Conversation
from tests.bulk.conftest import write_directory, write_jsonl, write_parquet

pytestmark = pytest.mark.slow
GUARDIAN = Path(sys.executable).with_name("guardian")


def _rows(out: Path) -> list[ConversationRow]:
    rows = list(read_rows(out))
    assert len({r.id for r in rows}) == len(rows), "a conversation was written twice"
    return rows


def test_default_options_are_bulk_defaults(default_options: ScreenOptions) -> None:
    assert resolve_options(detectors=None, window=None, per_turn=True) == default_options


def test_this_process_and_a_fresh_one_agree_on_every_decision(
    reference_rows: dict[str, ConversationRow], fresh_reference_rows: dict[str, ConversationRow]
) -> None:
    assert fresh_reference_rows.keys() == reference_rows.keys()
    for cid, row in reference_rows.items():
        fresh = fresh_reference_rows[cid]
        assert (fresh.decision, fresh.manipulator, fresh.first_flagged_turn) == (row.decision, row.manipulator, row.first_flagged_turn), cid
        assert fresh.probability == pytest.approx(row.probability, abs=1e-3), cid


def test_directory_jsonl_and_parquet_give_the_same_rows(
    tmp_path: Path,
    conversations: list[Conversation],
    reference_rows: dict[str, ConversationRow],
    default_options: ScreenOptions,
) -> None:
    sources = {
        "directory": write_directory(tmp_path / "archive", conversations),
        "jsonl": write_jsonl(tmp_path / "convs.jsonl", conversations),
        "parquet": write_parquet(tmp_path / "convs.parquet", conversations),
    }
    for name, source in sources.items():
        out = tmp_path / f"{name}.parquet"
        summary = run_bulk(BulkOptions(source=str(source), out=out, screen=default_options), show_progress=False)
        assert summary.screened == len(conversations) and summary.errors == 0
        assert {r.id: r for r in _rows(out)} == reference_rows, name
        turn_rows = list(read_turn_rows(out))
        assert len(turn_rows) == sum(len(c) for c in conversations)
    assert any(r.decision for r in reference_rows.values()), "the sample should have flagged conversations"
    assert any(not r.decision for r in reference_rows.values())


def test_a_row_says_what_guardian_analyze_file_says(
    tmp_path: Path,
    conversations: list[Conversation],
    fresh_reference_rows: dict[str, ConversationRow],
    default_options: ScreenOptions,
) -> None:
    reference_rows = fresh_reference_rows
    flagged = next(c for c in conversations if reference_rows[c.id].decision and c.id.endswith(".txt"))
    folder = write_directory(tmp_path, [flagged])
    proc = subprocess.run(
        [str(GUARDIAN), "analyze", str(folder / flagged.id), "--format", "json", "-d", ",".join(default_options.detectors)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = AnalyzeReport.model_validate_json(proc.stdout)
    row = conversation_row(
        report.conversation.model_copy(update={"id": flagged.id}), report.assessments,
        label=None, detectors=report.detectors,
    )
    assert row == reference_rows[flagged.id]


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_local_processes_and_ray_give_identical_rows(
    tmp_path: Path,
    conversations: list[Conversation],
    fresh_reference_rows: dict[str, ConversationRow],
    default_options: ScreenOptions,
) -> None:
    reference_rows = fresh_reference_rows  # the engines screen in worker processes
    ray = pytest.importorskip("ray", reason="the Ray extra is installed by `make setup` (pip install 'guardian[ray]')")
    source = str(write_jsonl(tmp_path / "convs.jsonl", conversations))
    expected = [reference_rows[c.id] for c in conversations]  # input order, from either engine

    local = tmp_path / "local.jsonl"
    run_bulk(BulkOptions(source=source, out=local, screen=default_options, jobs=2), show_progress=False)
    assert _rows(local) == expected

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        on_ray = tmp_path / "ray.jsonl"
        summary = run_bulk(
            BulkOptions(source=source, out=on_ray, screen=default_options, jobs=2, engine="ray"), show_progress=False
        )
    finally:
        ray.shutdown()
    assert summary.engine == "ray" and summary.peak_worker_rss_mb > 0
    assert _rows(on_ray) == expected


def test_a_run_killed_mid_way_resumes_without_a_duplicate_or_a_loss(
    tmp_path: Path, conversations: list[Conversation], fresh_reference_rows: dict[str, ConversationRow]
) -> None:
    reference_rows = fresh_reference_rows
    source = write_jsonl(tmp_path / "convs.jsonl", conversations)
    out = tmp_path / "results.parquet"
    args = [str(GUARDIAN), "analyze", str(source), "--out", str(out), "--per-turn", "--flush-rows", "2"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not (out / "part-00002.parquet").exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the run wrote no chunk in time"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    partial = _rows(out)
    assert 6 <= len(partial) < len(conversations), "the kill came after the run had finished"

    resumed = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(partial)} already done" in resumed.stdout
    assert {r.id: r for r in _rows(out)} == reference_rows
    turns = [(t.conversation_id, t.turn) for t in read_turn_rows(out)]
    assert len(turns) == len(set(turns)) == sum(len(c) for c in conversations)


def test_a_malformed_conversation_is_an_error_row(tmp_path: Path, conversations: list[Conversation]) -> None:
    source = write_jsonl(
        tmp_path / "convs.jsonl", conversations[:3],
        extra_lines=('{"id": "broken", "turns": [{"speaker": "A"}]}', "{not json"),
    )
    out = tmp_path / "results.jsonl"
    proc = subprocess.run(
        [str(GUARDIAN), "analyze", str(source), "--out", str(out), "-d", "keyphrases"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "5 conversations screened" in proc.stdout and "2 errors" in proc.stdout
    rows = {r.id: r for r in _rows(out)}
    assert [rows[c.id].status for c in conversations[:3]] == ["ok", "ok", "ok"]
    assert rows["broken"].status == "error" and "turn 0 is not" in rows["broken"].errors[0]
    assert rows["convs.jsonl:5"].status == "error" and "not JSON" in rows["convs.jsonl:5"].errors[0]


def test_ray_missing_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from guardian.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    source = write_jsonl(tmp_path / "convs.jsonl", [])
    source.write_text(json.dumps({"id": "a", "turns": [{"speaker": "A", "text": "hi"}]}) + "\n")
    code = main(["analyze", str(source), "--out", str(tmp_path / "r.jsonl"), "--engine", "ray", "-d", "keyphrases"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and "pip install 'guardian[ray]'" in err


def test_a_row_does_not_depend_on_what_the_worker_screened_before(default_options: ScreenOptions) -> None:
    """The shared encoder caches vectors by text: when a vector depended on its batch's padding, a
    worker that met "I don't know." in a long conversation once gave a later conversation other
    probabilities than a fresh process (`guardian analyze FILE`) does."""
    from guardian.bulk.inputs import Item
    from guardian.bulk.screen import Screener
    from guardian.encoding.sentence_encoder import shared_encoder

    long = "You never listen to me, you always twist what I say until I doubt my own memory of it. " * 3
    earlier = Conversation.from_pairs([("A", long), ("B", "I don't know."), ("A", long), ("B", "Fine.")], id="earlier")
    later = Conversation.from_pairs([("A", "Why?"), ("B", "I don't know."), ("A", "Ok."), ("B", "Fine.")], id="later")
    screener = Screener(default_options)
    screener.screen(Item(earlier.id, conversation=earlier))
    after = screener.screen(Item(later.id, conversation=later)).row
    shared_encoder().clear()
    alone = screener.screen(Item(later.id, conversation=later)).row
    assert after == alone


def test_the_batched_path_gives_the_per_window_rows(default_options: ScreenOptions) -> None:
    """`screen_batch` encodes the turns of many conversations in one pass (`_prefetch`); every row must be
    the one `guardian analyze FILE`'s path gives that conversation alone, in a fresh state (nothing
    cached, detectors of its own): every decision, name, finding and span exactly, every score to 1e-5.
    With the intent model too (not a bulk default), which reads the same cached vectors.

    Why not every float to the bit: on an AVX2-only host (2026-11-27) a full CI run gave per-turn
    probabilities that differed in the eighth digit (0.056346007 vs 0.056345988) though the run of this file
    alone agreed to the bit; float32 BLAS may round the last bit differently with the threads that made a
    vector. A wrong vector (another text's, a padded one) moves scores by far more than 1e-5."""
    from guardian.analyze import assess_turns
    from guardian.bulk.inputs import Item
    from guardian.bulk.rows import turn_rows
    from guardian.bulk.screen import Screener
    from guardian.encoding.sentence_encoder import shared_encoder
    from tests.bulk.conftest import sample_conversations

    sample = sample_conversations(n_dialogues=40, n_calls=4)
    everything = ScreenOptions(detectors=("keyphrases", "local", "intent"), window=default_options.window,
                               per_turn=True)
    alone = Screener(everything)
    names = [d.name for d in alone.detectors]
    expected = []
    for conversation in sample:
        shared_encoder().clear()
        windows = assess_turns(conversation, alone.detectors, window=everything.window)
        expected.append((conversation_row(conversation, windows, label=None, detectors=names),
                         turn_rows(conversation, windows)))
    shared_encoder().clear()
    batched = Screener(everything)
    got = [s for k in range(0, len(sample), 20)
           for s in batched.screen_batch([Item(c.id, conversation=c) for c in sample[k : k + 20]])]
    assert sum(row.decision for row, _ in expected) >= 5, "too few flagged conversations to compare findings"
    for conversation, (row, turns), fast in zip(sample, expected, got, strict=True):
        assert _same_but_rounding(fast.row, row), conversation.id
        assert _same_but_rounding(fast.turns, turns), conversation.id


def _same_but_rounding(got: object, expected: object) -> bool:
    """Equal, with floats compared to 1e-5 (relative) or 1e-7 (absolute); everything else exactly."""
    import math

    from pydantic import BaseModel

    if isinstance(got, BaseModel):
        return type(got) is type(expected) and _same_but_rounding(got.model_dump(), expected.model_dump())
    if isinstance(got, float) and isinstance(expected, float):
        return math.isclose(got, expected, rel_tol=1e-5, abs_tol=1e-7)
    if isinstance(got, (tuple, list)) and isinstance(expected, (tuple, list)):
        return (type(got) is type(expected) and len(got) == len(expected)
                and all(_same_but_rounding(a, b) for a, b in zip(got, expected, strict=True)))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_same_but_rounding(got[k], expected[k]) for k in got)
    return got == expected


def test_same_but_rounding_tells_rounding_from_a_different_row() -> None:
    """The comparison above must still fail on a real difference."""
    from guardian.bulk.rows import TurnRow

    row = TurnRow(conversation_id="c", turn=1, speaker="A", text="I didn't follow you!", decision=False,
                  probability=0.05634600669145584, manipulator=None, techniques=(), vulnerabilities=(),
                  findings=(), not_assessed=None, errors=())
    assert _same_but_rounding((row,), (row.model_copy(update={"probability": 0.05634598806500435}),))
    assert not _same_but_rounding((row,), (row.model_copy(update={"probability": 0.0564}),))
    assert not _same_but_rounding((row,), (row.model_copy(update={"decision": True}),))
    assert not _same_but_rounding((row,), (row.model_copy(update={"speaker": "B"}),))


def test_the_int8_encoder_reaches_every_worker_and_gives_the_per_window_rows(
    default_options: ScreenOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GUARDIAN_ENCODER_PRECISION=int8 on the driver is carried in the options to every worker (a worker's own
    environment does not decide), and the batched path still gives exactly the per-window rows: an int8
    vector, like a bfloat16 one, depends on its text only (per-token scales, guardian.encoding.int8)."""
    from guardian.analyze import assess_turns
    from guardian.bulk.inputs import Item
    from guardian.bulk.screen import Screener
    from guardian.encoding.sentence_encoder import shared_encoder, use_shared_precision
    from tests.bulk.conftest import sample_conversations

    monkeypatch.setenv("GUARDIAN_ENCODER_PRECISION", "int8")
    options = resolve_options(detectors=None, window=None, per_turn=False)
    assert options.encoder_precision == "int8"
    monkeypatch.delenv("GUARDIAN_ENCODER_PRECISION")  # a worker without the variable still follows the driver
    try:
        alone = Screener(options)
        assert shared_encoder().precision == "int8"
        names = [d.name for d in alone.detectors]
        sample = sample_conversations(n_dialogues=20, n_calls=2)
        expected = []
        for conversation in sample:
            shared_encoder().clear()
            expected.append(conversation_row(conversation, assess_turns(conversation, alone.detectors,
                                                                        window=options.window), label=None, detectors=names))
        shared_encoder().clear()
        got = Screener(options).screen_batch([Item(c.id, conversation=c) for c in sample])
        assert [s.row for s in got] == expected
        assert any(row.decision for row in expected)
    finally:
        use_shared_precision(None)  # the other tests' rows are bfloat16/float32 ones
        shared_encoder().clear()
    Screener(default_options)
    assert shared_encoder().precision != "int8"
    from guardian.bulk.run import Summary

    line = Summary(out=Path("rows.parquet"), screened=2, skipped=0, flagged=1, errors=0, seconds=1.0, engine="local",
                   workers=1, peak_worker_rss_mb=500.0, detectors=options.detectors, encoder_precision="int8").text()
    assert "detectors keyphrases, local (sentence encoder int8); rows in rows.parquet" in line
