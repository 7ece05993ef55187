"""The example store on a real Chroma PersistentClient in temp dirs, with the real MiniLM encoder.

A small labelled subset keeps this fast; indexing the whole set is a benchmark
(`guardian bench --suite index`), not a timed test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.cli import main
from guardian.corpora.datasets import LabelledDialogue, load_mentalmanip, mentalmanip_path
from guardian.retrieval.embedding import MiniLMEmbeddingFunction
from guardian.retrieval.store import ExampleStore
from guardian.taxonomy import Technique


@pytest.fixture(scope="module")
def subset() -> list[LabelledDialogue]:
    """12 manipulative (some with Accusation) and 8 non-manipulative dialogues from the data."""
    data = load_mentalmanip()
    accusing = [d for d in data if Technique.ACCUSATION in d.techniques][:4]
    manipulative = [d for d in data if d.manipulative and d not in accusing][:8]
    benign = [d for d in data if not d.manipulative][:8]
    return accusing + manipulative + benign


@pytest.fixture(scope="module")
def built(subset: list[LabelledDialogue], tmp_path_factory: pytest.TempPathFactory) -> ExampleStore:
    store = ExampleStore(path=tmp_path_factory.mktemp("chroma") / "chroma")
    report = store.build(subset, source="mentalmanip_con")
    assert report.added == len(subset) and report.total == len(subset) and report.rebuilt is None
    return store


def test_metadata_is_stored(built: ExampleStore, subset: list[LabelledDialogue]) -> None:
    col, _ = built._collection(create=False)
    assert col is not None
    assert col.metadata["embedding_model"] == built.embedding.model_id
    got = col.get(ids=[subset[0].id, subset[-1].id], include=["metadatas", "documents"])
    meta = dict(zip(got["ids"], got["metadatas"], strict=True))
    first = meta[subset[0].id]
    assert first["label"] == 1 and "ACC" in str(first["techniques"]).split(",")
    assert first["source"] == "mentalmanip_con" and isinstance(first["split"], int)
    assert first["t_ACC"] is True
    assert meta[subset[-1].id]["label"] == 0 and meta[subset[-1].id]["techniques"] == ""


def test_building_again_adds_nothing(built: ExampleStore, subset: list[LabelledDialogue]) -> None:
    report = built.build(subset)
    assert (report.added, report.removed, report.total) == (0, 0, len(subset))


def test_query_is_balanced_and_excludes_itself(built: ExampleStore, subset: list[LabelledDialogue]) -> None:
    target = subset[5]
    examples = built.query(target.conversation)
    assert [e.manipulative for e in examples] == [True, True, False]
    assert target.id not in {e.id for e in examples}
    by_id = {d.id: d for d in subset}
    for e in examples:
        assert by_id[e.id].manipulative == e.manipulative
        assert e.text == by_id[e.id].conversation.as_text()
    distances = [e.distance for e in examples if e.manipulative]
    assert distances == sorted(distances)


def test_identical_text_under_another_id_is_excluded(built: ExampleStore, subset: list[LabelledDialogue]) -> None:
    target = subset[1]
    renamed = target.conversation.model_copy(update={"id": "pasted-by-a-user"})
    examples = built.query(renamed, manipulative=20, other=0)
    assert target.id not in {e.id for e in examples}
    assert len(examples) == 11  # every other manipulative dialogue in the subset


def test_nearest_neighbour_is_a_near_duplicate(built: ExampleStore, subset: list[LabelledDialogue]) -> None:
    target = subset[2]
    window = target.conversation.model_copy(update={"id": "other"}).window(len(target.conversation) - 1)
    [nearest] = built.query(window, manipulative=1, other=0)
    assert nearest.id == target.id  # a conversation's own opening is closest to it


def test_technique_filter(built: ExampleStore, subset: list[LabelledDialogue]) -> None:
    examples = built.query(subset[-1].conversation, manipulative=3, other=1, technique=Technique.ACCUSATION)
    manipulative = [e for e in examples if e.manipulative]
    assert len(manipulative) == 3
    assert all(Technique.ACCUSATION in e.techniques for e in manipulative)
    assert sum(not e.manipulative for e in examples) == 1


def test_stale_ids_are_removed(subset: list[LabelledDialogue], tmp_path: Path) -> None:
    store = ExampleStore(path=tmp_path / "chroma")
    store.build(subset[:6])
    report = store.build(subset[:4])
    assert (report.added, report.removed, report.total) == (0, 2, 4)


class _OtherModel(MiniLMEmbeddingFunction):
    """The same weights under another id: what a store built by a different encoder looks like."""

    @property
    def model_id(self) -> str:
        return "some-other-encoder:123"


def test_other_embedding_model_is_detected_and_rebuilt(subset: list[LabelledDialogue], tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    ExampleStore(path=path, embedding=_OtherModel()).build(subset[:3])
    store = ExampleStore(path=path)
    ok, why = store.ready()
    assert not ok and why is not None and "another embedding model" in why
    assert store.query(subset[0].conversation) == []
    report = store.build(subset[:3])
    assert report.rebuilt is not None and report.added == 3
    assert store.ready() == (True, None)


def test_corrupt_store_is_moved_aside_and_rebuilt(subset: list[LabelledDialogue], tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    path.mkdir()
    (path / "chroma.sqlite3").write_bytes(b"this is not a database" * 100)
    store = ExampleStore(path=path)
    report = store.build([*subset[:3], subset[-1]])
    assert report.rebuilt is not None and "could not be read" in report.rebuilt
    assert report.total == 4
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("chroma.corrupt-")]
    assert len(moved) == 1 and (moved[0] / "chroma.sqlite3").read_bytes().startswith(b"this is not")
    assert [e.manipulative for e in store.query(subset[5].conversation, manipulative=1, other=1)] == [True, False]


def test_rebuild_flag(built: ExampleStore, subset: list[LabelledDialogue], tmp_path: Path) -> None:
    store = ExampleStore(path=tmp_path / "chroma")
    store.build(subset[:3])
    report = store.build(subset[:3], rebuild=True)
    assert report.rebuilt == "--rebuild" and report.added == 3 and report.total == 3


def test_cli_index(subset: list[LabelledDialogue], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import csv

    csv_path = tmp_path / "mentalmanip_con.csv"
    text = mentalmanip_path("con").read_text(encoding="utf-8")
    source = {row["ID"]: row for row in csv.DictReader(text.splitlines(keepends=True))}
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["ID", "Dialogue", "Manipulative", "Technique", "Vulnerability"])
        writer.writeheader()
        for d in subset[:4]:
            writer.writerow(source[d.id])
    assert main(["index", "--data", str(tmp_path)]) == 0
    first = capsys.readouterr()
    assert "4 dialogues (4 added, 0 removed)" in first.out
    assert "embedding dialogues" in first.err and "4/4" in first.err  # guardian's one progress bar (tqdm)
    assert main(["index", "--data", str(csv_path)]) == 0
    again = capsys.readouterr()
    assert "4 dialogues (0 added, 0 removed)" in again.out
    assert "embedding dialogues" not in again.err  # nothing to embed, no bar
    assert main(["index", "--data", str(tmp_path / "missing")]) == 2
    assert "file not found" in capsys.readouterr().err
