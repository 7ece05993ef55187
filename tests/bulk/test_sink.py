"""The results table on disk: chunks, resume, and what a killed writer leaves behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian.bulk.rows import ConversationRow, Screened, TurnRow, error_row
from guardian.bulk.sink import open_sink, read_rows, read_turn_rows, turns_path
from guardian.errors import InputError


def _screened(n: int) -> Screened:
    row = ConversationRow(id=f"c{n}", turns=2, decision=n % 2 == 0, probability=0.5)
    turns = tuple(TurnRow(conversation_id=f"c{n}", turn=i, speaker="A", text=f"t{i}") for i in range(2))
    return Screened(row=row, turns=turns)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_rows_are_written_in_chunks_and_read_back(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"results{suffix}"
    sink = open_sink(out, per_turn=True, chunk_rows=2)
    for n in range(5):
        sink.add(_screened(n))
    assert [r.id for r in read_rows(out)] == ["c0", "c1", "c2", "c3"]  # two full chunks, one row buffered
    sink.close()
    assert [r.id for r in read_rows(out)] == [f"c{n}" for n in range(5)]
    assert [(t.conversation_id, t.turn) for t in read_turn_rows(out)] == [(f"c{n}", i) for n in range(5) for i in range(2)]
    again = open_sink(out, per_turn=True, chunk_rows=2)
    assert again.done == {f"c{n}" for n in range(5)}


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_an_unflushed_chunk_is_lost_never_half_written(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"results{suffix}"
    sink = open_sink(out, per_turn=False, chunk_rows=3)
    for n in range(4):
        sink.add(_screened(n))
    # the process dies here: no close()
    assert open_sink(out, per_turn=False).done == {"c0", "c1", "c2"}


def test_parquet_resume_drops_temporary_parts_and_orphan_turns(tmp_path: Path) -> None:
    out = tmp_path / "results.parquet"
    sink = open_sink(out, per_turn=True, chunk_rows=1)
    sink.add(_screened(0))
    sink.close()
    turns_dir = turns_path(out)
    # a run killed between writing a chunk's turns and its conversation rows, and one killed mid-part
    (turns_dir / "part-00001.parquet").write_bytes((turns_dir / "part-00000.parquet").read_bytes())
    (out / ".part-00001.parquet.tmp").write_bytes(b"half a parquet file")
    resumed = open_sink(out, per_turn=True, chunk_rows=1)
    assert resumed.done == {"c0"}
    assert sorted(p.name for p in turns_dir.iterdir()) == ["part-00000.parquet"]
    assert sorted(p.name for p in out.iterdir()) == ["part-00000.parquet"]
    resumed.add(_screened(1))
    resumed.close()
    assert [t.conversation_id for t in read_turn_rows(out)] == ["c0", "c0", "c1", "c1"]


def test_jsonl_resume_cuts_a_torn_line_and_orphan_turns(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    sink = open_sink(out, per_turn=True, chunk_rows=1)
    sink.add(_screened(0))
    sink.close()
    with out.open("a", encoding="utf-8") as fh:  # killed mid-line
        fh.write(_screened(1).row.model_dump_json()[:20])
    with turns_path(out).open("a", encoding="utf-8") as fh:  # c1's turns made it, its row did not
        fh.write("".join(t.model_dump_json() + "\n" for t in _screened(1).turns))
    resumed = open_sink(out, per_turn=True, chunk_rows=1)
    assert resumed.done == {"c0"}
    resumed.add(_screened(1))
    resumed.close()
    assert [r.id for r in read_rows(out)] == ["c0", "c1"]
    assert [(t.conversation_id, t.turn) for t in read_turn_rows(out)] == [("c0", 0), ("c0", 1), ("c1", 0), ("c1", 1)]
    lines = out.read_text(encoding="utf-8").splitlines()
    assert all(json.loads(line) for line in lines)


def test_error_rows_round_trip_through_parquet(tmp_path: Path) -> None:
    out = tmp_path / "results.parquet"
    sink = open_sink(out, per_turn=False, chunk_rows=10)
    row = error_row("broken", "broken.txt, line 3: expected `Name: text`", label="scam")
    sink.add(Screened(row=row))
    sink.close()
    assert list(read_rows(out)) == [row]


def test_an_out_that_is_not_a_results_table_is_one_sentence(tmp_path: Path) -> None:
    taken = tmp_path / "results.parquet"
    taken.write_text("not a folder")
    with pytest.raises(InputError, match="exists and is a file"):
        open_sink(taken, per_turn=False)
    other = tmp_path / "notes.jsonl"
    other.write_text('{"hello": 1}\n')
    with pytest.raises(InputError, match="not a guardian results file"):
        open_sink(other, per_turn=False)
    with pytest.raises(InputError, match=r"\.parquet or \.jsonl"):
        open_sink(tmp_path / "results.csv", per_turn=False)
