"""`guardian train` and `guardian eval mentalmanip` end to end on small CSVs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian.cli import main
from guardian.eval.local_eval import label_decisions, training_files
from guardian.eval.metrics import LIVE_KEYS, REPORT_KEYS
from tests.detectors.local.local_data import write_conversations, write_subset

pytestmark = pytest.mark.slow


def test_train_then_eval_on_unseen_dialogues(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train_csv = write_subset(tmp_path / "train.csv", positives=40, negatives=20)
    test_csv = write_subset(tmp_path / "test.csv", positives=20, negatives=10, skip=60)
    conversations = write_conversations(tmp_path / "c.jsonl", per_file=4)
    out = tmp_path / "model"
    assert main(["train", "--data", str(train_csv), "--conversations", str(conversations), "--out", str(out),
                 "--seed", "5", "--epochs", "2"]) == 0
    captured = capsys.readouterr()
    assert "trained on" in captured.out and "thresholds" in captured.out
    assert (out / "manifest.json").is_file()

    assert main(["eval", "mentalmanip", str(test_csv), "--format", "json", "--artifact", str(out)]) == 0
    stdout = capsys.readouterr().out.strip()
    report = json.loads(stdout)  # exactly one JSON object on stdout
    assert tuple(report) == REPORT_KEYS + LIVE_KEYS
    assert report["n"] == 30
    # the 10 non-manipulative dialogues, replayed turn by turn
    assert sum(cell["n"] for cell in report["fpr_by_turns"].values()) == 10
    assert 0.0 <= report["ever_flagged_fpr"] <= 1.0
    assert 0.0 <= report["accuracy"] <= 1.0
    assert report["latency_ms_p50"] > 0

    assert main(["eval", "mentalmanip", str(test_csv), "--format", "text", "--artifact", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Techniques (Table 6)" in text
    assert "flagged at any turn" in text


def test_bad_inputs_give_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "mentalmanip", str(tmp_path / "nope.csv"), "--format", "json"]) == 2
    assert "file not found" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    assert main(["eval", "mentalmanip", str(bad), "--format", "json", "--artifact", str(tmp_path)]) == 2
    assert "missing column" in capsys.readouterr().err
    assert main(["train", "--data", str(tmp_path / "missing")]) == 2
    assert main(["eval", "mentalmanip", str(bad), "--format", "xml"]) == 2


def test_training_files_from_a_folder(tmp_path: Path) -> None:
    write_subset(tmp_path / "mentalmanip_con.csv", positives=2, negatives=2)
    assert training_files([str(tmp_path)]) == [tmp_path / "mentalmanip_con.csv"]
    assert training_files(None) == []


def test_label_decisions_always_name_the_most_likely_label() -> None:
    import numpy as np

    scores = np.array([[0.2, 0.6], [0.9, 0.1], [0.5, 0.45]])
    assert label_decisions(scores, 0.8).tolist() == [[False, True], [True, False], [True, True]]
    assert label_decisions(scores, 1.0).tolist() == [[False, True], [True, False], [True, False]]
