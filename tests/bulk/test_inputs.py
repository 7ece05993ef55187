"""Archives in: a directory, a conversations JSONL, Parquet; whatever is malformed is an error item."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian.bulk.inputs import count_items, is_bulk_input, iter_items
from guardian.conversation import Conversation
from guardian.errors import InputError
from tests.bulk.conftest import sample_conversations, write_directory, write_jsonl, write_parquet


def _turns(conversation: Conversation | None) -> list[tuple[int, str, str]]:
    """What the detectors read (a turn's `source` says which reader made it, and differs by form)."""
    assert conversation is not None
    return [(t.index, t.speaker, t.text) for t in conversation.turns]


def test_the_three_forms_yield_the_same_conversations(tmp_path: Path) -> None:
    convs = sample_conversations(n_dialogues=5, n_calls=2)
    folder = write_directory(tmp_path / "archive", convs)
    (folder / ".DS_Store").write_bytes(b"\x00\x01")  # hidden: skipped
    jsonl = write_jsonl(tmp_path / "convs.jsonl", convs)
    parquet = write_parquet(tmp_path / "convs.parquet", convs)
    expected = sorted((c.id, _turns(c)) for c in convs)
    for source in (folder, jsonl, parquet):
        assert is_bulk_input(str(source))
        items = list(iter_items(source))
        assert sorted((i.id, _turns(i.conversation)) for i in items) == expected, source
        assert count_items(source) == len(convs)


def test_one_transcript_jsonl_is_not_an_archive(tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"speaker": "A", "text": "hi"}\n', encoding="utf-8")
    assert not is_bulk_input(str(chat))


def test_malformed_conversations_are_error_items(tmp_path: Path) -> None:
    good = sample_conversations(n_dialogues=2, n_calls=0)
    source = write_jsonl(
        tmp_path / "convs.jsonl",
        good,
        extra_lines=(
            "{not json",
            json.dumps({"id": "no-turns", "turns": "hello"}),
            json.dumps({"turns": [{"speaker": "A", "text": "hi"}]}),
            json.dumps({"id": "bad-turn", "turns": [{"speaker": "A"}]}),
            json.dumps({"id": good[0].id, "turns": [{"speaker": "A", "text": "again"}]}),
        ),
    )
    items = list(iter_items(source))
    errors = {i.id: i.error for i in items if i.error is not None}
    assert [i.id for i in items if i.error is None] == [c.id for c in good]
    assert set(errors) == {"convs.jsonl:3", "no-turns", "convs.jsonl:5", "bad-turn", f"{good[0].id}@convs.jsonl:7"}
    assert "not JSON" in (errors["convs.jsonl:3"] or "")
    assert "no turns" in (errors["no-turns"] or "")
    assert "appears twice" in (errors[f"{good[0].id}@convs.jsonl:7"] or "")


def test_an_unreadable_transcript_in_a_directory_is_an_error_item(tmp_path: Path) -> None:
    write_directory(tmp_path, sample_conversations(n_dialogues=1, n_calls=0))
    (tmp_path / "latin1.txt").write_bytes("Ann: caf\xe9\n".encode("latin-1"))
    items = {i.id: i for i in iter_items(tmp_path)}
    assert items["latin1.txt"].conversation is None
    assert "UTF-8" in (items["latin1.txt"].error or "")


def test_parquet_without_the_columns_is_one_sentence(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"dialogue": ["A: hi"]}), path)
    with pytest.raises(InputError, match="needs the columns id and turns"):
        list(iter_items(path))


def test_one_transcript_with_out_is_one_item(tmp_path: Path) -> None:
    chat = tmp_path / "chat.txt"
    chat.write_text("Ann: hi\nBob: hello\n", encoding="utf-8")
    (item,) = iter_items(chat)
    assert item.id == "chat.txt" and _turns(item.conversation) == [(0, "Ann", "hi"), (1, "Bob", "hello")]
    assert count_items(chat) == 1
