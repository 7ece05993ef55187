"""`guardian eval conversations` and the live figures of `guardian eval mentalmanip`, on tiny inputs.

A scripted detector (flags a turn containing "gift card") stands in for the model, so
the figures are known exactly and the tests take milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from guardian.cli import main
from guardian.conversation import Conversation
from guardian.corpora.conversations import load_conversations
from guardian.corpora.datasets import LabelledDialogue
from guardian.detectors import registry
from guardian.detectors.base import Detector
from guardian.eval.replay import (
    ReplayOptions,
    Selection,
    bucket_of,
    mentalmanip_live,
    replay,
    select,
)
from guardian.eval.splits import conversation_split, split_of
from guardian.findings import Assessment


class PhraseDetector(Detector):
    """Flags the latest turn when it contains `phrase`; probability .9, else .1. Counts its batches."""

    name: ClassVar[str] = "phrase-test"

    def __init__(self, phrase: str = "gift card") -> None:
        self.phrase = phrase
        self.batches: list[int] = []
        self.seen: list[tuple[str, int, int]] = []

    def analyze(self, window: Conversation) -> Assessment:
        last = window.last
        if last is None:
            return self.empty(window)
        self.seen.append((window.id, last.index, len(window.turns)))
        hit = self.phrase in last.text.lower()
        return Assessment(
            conversation_id=window.id, turn=last.index, probability=0.9 if hit else 0.1, decision=hit,
            detectors=(self.name,), manipulator=last.speaker if hit else None,
        )

    def analyze_batch(self, windows: Sequence[Conversation]) -> list[Assessment]:
        self.batches.append(len(windows))
        return [self.analyze(w) for w in windows]


def _conversation(cid: str, label: str, texts: list[str], suspect: str | None = None) -> dict[str, object]:
    return {
        "id": cid,
        "label": label,
        "turns": [{"speaker": "Speaker 1" if i % 2 == 0 else "Speaker 2", "text": t} for i, t in enumerate(texts)],
        "meta": {"roles": {suspect: "Suspect"}} if suspect else {},
    }


ROWS = [
    _conversation("scam-1", "scam", ["Hello?", "This is the IRS. You owe taxes.", "What?", "Pay with a gift card now."],
                  suspect="Speaker 2"),
    # the file names the wrong side here, so the flag (on Speaker 2's turn) does not name the suspect
    _conversation("scam-2", "scam", ["Hi.", "Your parcel is held.", "Okay.", "Read me the code.", "No.", "Then buy a gift card."],
                  suspect="Speaker 1"),
    _conversation("ok-1", "benign", ["Hi, it's the dentist.", "Oh hello.", "Your appointment is Tuesday.", "Thanks!"]),
    _conversation("ok-2", "benign", [f"Line {i} of a long and ordinary chat." for i in range(22)]),
]


@pytest.fixture
def calls(tmp_path: Path) -> Path:
    path = tmp_path / "calls.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def phrase() -> Iterator[PhraseDetector]:
    detector = PhraseDetector()
    registry.register(PhraseDetector.name, lambda: detector)
    yield detector
    registry.unregister(PhraseDetector.name)


def test_json_report_replays_every_turn(calls: Path, phrase: PhraseDetector, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "conversations", str(calls), "-d", "phrase-test", "--window", "3", "--format", "json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1  # one object per file
    report = json.loads(lines[0])
    assert report["n"] == 4
    assert report["turns"] == 4 + 6 + 4 + 22
    assert report["label"] == {"benign": 2, "scam": 2}
    assert report["window"] == 3
    assert report["detectors"] == ["phrase-test"]
    assert report["flagged_any"] == 0.5
    assert report["flagged_last"] == 0.5
    assert report["turns_flagged"] == round(2 / 36, 4)
    assert report["top_probability_p50"] == pytest.approx(0.5)
    assert report["not_assessed"] == 0.0
    assert report["latency_ms_p50"] >= 0
    assert report["by_length"]["1-4"]["n"] == 2
    assert report["by_length"]["5-9"]["flagged_any"] == 1.0
    assert report["by_length"]["20+"]["flagged_any"] == 0.0
    assert report["by_label"]["scam"]["flagged_any"] == 1.0
    assert report["by_label"]["benign"]["flagged_any"] == 0.0
    assert report["by_label"]["benign"]["by_length"]["20+"]["n"] == 1
    # who the first flag names, against the suspect the file names (meta.roles)
    assert report["suspect_named_first"] == 0.5
    assert report["suspect_flagged_n"] == 2
    assert report["by_label"]["scam"]["suspect_named_first"] == 0.5
    assert "suspect_named_first" not in report["by_label"]["benign"]
    # every turn seen once, as the latest turn of a window of at most 3 turns, in turn order
    assert len(phrase.seen) == 36
    assert max(size for _, _, size in phrase.seen) == 3
    ok2 = [index for cid, index, _ in phrase.seen if cid == "ok-2"]
    assert ok2 == list(range(22))
    assert phrase.batches == [36]  # batched across conversations


def test_batch_one_assesses_each_window_alone(calls: Path, phrase: PhraseDetector, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "conversations", str(calls), "-d", "phrase-test", "--batch", "1", "--limit", "2",
                 "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 2
    assert report["label"] == {"scam": 2}
    assert "by_label" not in report  # one label: nothing to break down
    assert set(phrase.batches) == {1}


def test_text_table(calls: Path, phrase: PhraseDetector, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "conversations", str(calls), str(calls), "-d", "phrase-test"]) == 0
    out = capsys.readouterr().out
    assert out.count("calls.jsonl") == 2
    assert "label scam" in out
    assert "20+ turns" in out
    assert "named" in out.splitlines()[0]
    scam_row = next(line for line in out.splitlines() if line.startswith("  label scam"))
    assert "0.500" in scam_row.split()  # the suspect named at the first flag in one of the two scam calls


def test_split_and_ids_select_held_out_conversations(calls: Path, phrase: PhraseDetector, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("# held out\nok-1\nscam-2\n\n", encoding="utf-8")
    assert main(["eval", "conversations", str(calls), "-d", "phrase-test", "--ids", str(ids), "-f", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 2
    assert report["label"] == {"benign": 1, "scam": 1}
    conversations = load_conversations(calls)
    for part in ("train", "dev", "test"):
        chosen = select(conversations, Selection(split=part))
        assert [c.id for c in chosen] == [c.id for c in conversations if split_of(c.id) == part]


def test_user_errors_are_one_sentence(calls: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "conversations", str(tmp_path / "missing.jsonl")]) == 2
    assert "file not found" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n{\"id\": 1}\n", encoding="utf-8")
    assert main(["eval", "conversations", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "Traceback" not in err
    assert main(["eval", "conversations", str(calls), "--split", "holdout"]) == 2
    assert "--split must be one of" in capsys.readouterr().err
    assert main(["eval", "conversations", str(calls), "--format", "xml"]) == 2
    assert main(["eval", "conversations", str(calls), "--ids", str(tmp_path / "none.txt")]) == 2
    assert "file not found" in capsys.readouterr().err


def test_seeded_sample_is_stable(calls: Path) -> None:
    conversations = load_conversations(calls)
    first = select(conversations, Selection(limit=2, sample_seed=3))
    assert [c.id for c in first] == [c.id for c in select(conversations, Selection(limit=2, sample_seed=3))]
    assert [c.id for c in select(conversations, Selection(limit=2))] == ["scam-1", "scam-2"]


def test_conversation_split_is_a_function_of_the_id() -> None:
    ids = [f"conv-{i}" for i in range(2000)]
    split = conversation_split(ids, seed=17)
    assert len(split.train) + len(split.dev) + len(split.test) == 2000
    assert 0.17 < len(split.test) / 2000 < 0.23
    assert 0.12 < len(split.dev) / 2000 < 0.18
    # the same part whatever the order or company an id comes in
    reordered = conversation_split(list(reversed(ids))[:500], seed=17)
    assert set(reordered.test) == set(split.test) & set(reordered.test + reordered.train + reordered.dev)
    assert conversation_split(ids, seed=18).test != split.test
    no_dev = conversation_split(ids, seed=17, dev_share=0.0)
    assert no_dev.dev == () and no_dev.test == split.test
    with pytest.raises(ValueError):
        split_of("x", test_share=0.8, dev_share=0.3)


def test_buckets() -> None:
    assert [bucket_of(n) for n in (1, 4, 5, 9, 10, 19, 20, 40)] == ["1-4", "1-4", "5-9", "5-9", "10-19", "10-19",
                                                                     "20+", "20+"]


def test_mentalmanip_live_counts_any_prefix_and_buckets_the_final_decision() -> None:
    detector = PhraseDetector("gift card")

    def dialogue(cid: str, texts: list[str], manipulative: bool = False) -> LabelledDialogue:
        conversation = Conversation.from_pairs(((f"P{i % 2}", t) for i, t in enumerate(texts)), id=cid)
        return LabelledDialogue(cid, conversation, manipulative, (), ())

    dialogues = [
        dialogue("a", ["Fine."]),
        dialogue("b", ["Buy a gift card.", "No.", "Okay."]),  # flagged at turn 0 only: ever, not final
        dialogue("c", ["Hi.", "Hello.", "A gift card?"]),  # flagged at the final turn
        dialogue("d", [f"Turn {i}." for i in range(11)]),  # longer than the window: whole dialogue added
        dialogue("m", ["Buy a gift card."], manipulative=True),  # not a negative: not replayed
    ]
    live = mentalmanip_live(dialogues, detector, options=ReplayOptions(window=4))
    assert live.ever_flagged_fpr == 0.5
    assert live.fpr_by_turns == {
        "1": {"n": 1, "fpr": 0.0},
        "2-4": {"n": 2, "fpr": 0.5},
        "5-8": {"n": 0, "fpr": None},
        "9+": {"n": 1, "fpr": 0.0},
    }
    assert not any(cid == "m" for cid, _, _ in detector.seen)
    assert ("d", 10, 11) in detector.seen  # the whole dialogue for its final decision
    assert ("d", 10, 4) in detector.seen  # and its live window


def test_replay_keeps_each_conversations_windows_in_turn_order() -> None:
    detector = PhraseDetector()
    conversations = [Conversation.from_pairs([("a", "x"), ("b", "y"), ("a", "z")], id=f"c{i}") for i in range(5)]
    out = replay(conversations, [detector], options=ReplayOptions(window=2, batch=4))
    assert [len(turns) for turns in out] == [3] * 5
    assert [[a.turn for a in turns] for turns in out] == [[0, 1, 2]] * 5
    assert detector.batches == [4, 4, 4, 3]


GASLIGHTING = Path(__file__).resolve().parents[2] / "lab" / "data" / "gaslighting_dialogues.jsonl"


@pytest.mark.slow
def test_default_detectors_on_the_gaslighting_evaluation_dialogues(capsys: pytest.CaptureFixture[str]) -> None:
    """LLM-written gaslighting dialogues (lab/data/gaslighting_dialogues.jsonl: 40 manipulative, half of
    them opened by the other person, and 20 heated but fair ones; an evaluation set, never trained or
    tuned on), replayed live by the default detectors. The bounds sit a little outside what the shipped
    model measures (docs/model-card.md: 21 of 40 flagged, the suspect named first in 16 of 21, 4 of
    20 benign flagged): they guard against a regression, they are not the issue's targets."""
    assert main(["eval", "conversations", str(GASLIGHTING), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert report["label"] == {"benign": 20, "manipulative": 40}
    manipulative, benign = report["by_label"]["manipulative"], report["by_label"]["benign"]
    assert manipulative["flagged_any"] >= 0.45
    assert manipulative["suspect_named_first"] >= 0.7
    assert benign["flagged_any"] <= 0.3


def test_turn_labelled_conversations_are_scored_by_register_and_turn(
    tmp_path: Path, phrase: PhraseDetector, capsys: pytest.CaptureFixture[str]
) -> None:
    def labelled(cid: str, register: str, texts: list[str], marked: list[int]) -> dict[str, object]:
        row = _conversation(cid, "manipulative" if marked else "benign", texts)
        row["meta"] = {"register": register, "manipulative_turns": marked}
        return row

    rows = [
        # the flag lands on the labelled turn (1) and on one that is not (3)
        labelled("a", "scam call", ["Hi.", "Buy a gift card now.", "Why?", "A gift card, I said."], [1]),
        labelled("b", "scam call", ["Hi.", "Read me the code.", "No."], [1]),  # missed
        labelled("c", "emotional support", ["I'm low.", "That sounds hard.", "Thanks."], []),
        labelled("d", "emotional support", ["Any gift card ideas?", "A book."], []),  # a false alarm
    ]
    path = tmp_path / "registers.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    assert main(["eval", "conversations", str(path), "-d", "phrase-test", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out.strip())
    assert report["labelled_turns"] == 2
    assert report["turn_recall"] == 0.5  # a's turn 1 flagged, b's turn 1 not
    assert report["turn_precision"] == round(1 / 3, 4)  # three flagged turns, one of them labelled
    scam, support = report["by_register"]["scam call"], report["by_register"]["emotional support"]
    assert scam["manipulative"]["flagged_any"] == 0.5 and scam["manipulative"]["turn_recall"] == 0.5
    assert support["benign"]["flagged_any"] == 0.5 and support["benign"]["n"] == 2
    assert main(["eval", "conversations", str(path), "-d", "phrase-test"]) == 0
    assert "emotional support: benign" in capsys.readouterr().out
