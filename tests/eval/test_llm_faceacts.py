"""`guardian eval faceacts --detector llm`: the LLM intent agent scored on a face-act CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from guardian.cli import main
from guardian.config import LLMSettings
from guardian.corpora.datasets import load_faceacts
from guardian.detectors.llm.intent import LETTERS, OPTIONS
from guardian.errors import ModelUnavailable
from guardian.eval.llm_faceacts import (
    EARLIER_SPEAKER,
    evaluate_file,
    faceact_windows,
    local_intents,
)
from guardian.taxonomy import FaceAct
from tests.detectors.llm.openai_stub import Reply, serve

CFG = LLMSettings(samples=1, backoff_s=0.0, max_retries=0)
HNEG_MINUS = json.dumps({"option": LETTERS[OPTIONS.index(FaceAct.HNEG_MINUS)]})
ROWS = [  # (conversation, turn, speaker, utterance, act, previous)
    ("chat-1", 4, "A", "Can you send me the report by five?", "hneg-", "We are late on the audit."),
    ("chat-1", 5, "B", "No, I'm busy all afternoon.", "sneg+", ""),
    ("chat-1", 6, "A", "You never help when it matters.", "hpos-", ""),
    ("chat-2", 0, "X", "Hello there.", "other", ""),
    ("chat-2", 1, "Y", "Would you mind closing the window?", "hneg-", ""),
]


@pytest.fixture
def faceacts_csv(tmp_path: Path) -> Path:
    out = tmp_path / "acts.csv"
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["conversation_id", "turn", "speaker", "utterance", "face_act", "previous"])
        w.writerows(ROWS)
    return out


def test_windows_end_at_the_turn_and_keep_the_files_turn_numbers(faceacts_csv: Path) -> None:
    rows = load_faceacts(faceacts_csv)
    windows = {w.row: w.window for w in faceact_windows(rows, range(len(rows)), size=3)}
    assert set(windows) == set(range(len(rows)))
    first = windows[0]
    # A stretch that starts mid-way: the turn before it, as the file records it, by an unnamed speaker.
    assert [(t.index, t.speaker, t.text) for t in first.turns] == [
        (3, EARLIER_SPEAKER, "We are late on the audit."), (4, "A", "Can you send me the report by five?")]
    third = windows[2]
    assert [t.index for t in third.turns] == [4, 5, 6] and third.last is not None
    assert third.last.text == "You never help when it matters." and third.id == "chat-1"
    assert [t.text for t in windows[4].turns] == ["Hello there.", "Would you mind closing the window?"]


def test_the_agents_answers_are_scored_against_the_labels(faceacts_csv: Path) -> None:
    model = FakeListChatModel(responses=["The speaker asks for something.", HNEG_MINUS])
    result = evaluate_file(faceacts_csv, model=model, settings=CFG)
    assert result["n"] == 5 and result["unanswered"] == 0
    assert result["accuracy"] == pytest.approx(2 / 5)  # it always says hneg-; two of five are
    assert result["per_class"]["hneg-"]["recall"] == 1.0 and result["per_class"]["other"]["recall"] == 0.0
    assert result["llm_calls"] == 10  # two phases a turn, one sample


def test_unparseable_answers_are_counted_not_guessed(faceacts_csv: Path) -> None:
    # Turn by turn: reasoning, an answer; the third turn's answer is not an option.
    replies = ["r", HNEG_MINUS, "r", HNEG_MINUS, "r", '{"option": "Z"}', "r", HNEG_MINUS, "r", HNEG_MINUS]
    result = evaluate_file(faceacts_csv, model=FakeListChatModel(responses=replies), settings=CFG)
    assert result["unanswered"] == 1 and result["n"] == 4
    assert "asked about 5 of 5 turns, 4 answered" in result["mode"] and result["shown_share"] == 0.8
    with pytest.raises(ModelUnavailable, match="answered none of 5"):
        evaluate_file(faceacts_csv, model=FakeListChatModel(responses=["r", "no idea"]), settings=CFG)


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_eval_faceacts_through_an_endpoint(
    faceacts_csv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve([Reply(content=HNEG_MINUS)]) as stub:
        monkeypatch.setenv("GUARDIAN_LLM__BASE_URL", stub.base_url)
        monkeypatch.setenv("GUARDIAN_LLM__SAMPLES", "1")
        code = main(["eval", "faceacts", str(faceacts_csv), "--detector", "llm", "--limit", "1", "--format", "json"])
        assert code == 0
        report = json.loads(capsys.readouterr().out)
        # One conversation of the two, every turn of it, two requests a turn.
        assert report["n"] in (2, 3) and len(stub.requests) == 2 * report["n"] == report["llm_calls"]
        system = stub.requests[0]["messages"][0]["content"]
        assert "a question asking for information is hneg-" in system
        assert main(["eval", "faceacts", str(faceacts_csv), "--detector", "llm"]) == 0
    text = capsys.readouterr().out
    assert "n=5  accuracy=0.400" in text and "LLM: asked about 5 turns, 0 unanswered, 10 calls" in text
    assert "intents shown for 100.0% of the turns, right 40.0% of the time" in text


def test_eval_faceacts_llm_without_an_endpoint_is_one_sentence(faceacts_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "faceacts", str(faceacts_csv), "--detector", "llm"]) == 2
    err = capsys.readouterr().err
    assert "llm.base_url" in err and "Traceback" not in err
    assert main(["eval", "faceacts", str(faceacts_csv), "--detector", "oracle"]) == 2
    assert "--detector" in capsys.readouterr().err


@pytest.mark.slow
def test_the_cascade_asks_only_about_the_turns_the_local_model_withholds(faceacts_csv: Path) -> None:
    rows = load_faceacts(faceacts_csv)
    local = local_intents(rows, range(len(rows)))
    withheld = sum(not sure for _, sure in local.values())
    model = FakeListChatModel(responses=["The speaker asks for something.", HNEG_MINUS])
    result = evaluate_file(faceacts_csv, detector="cascade", model=model, settings=CFG)
    assert result["n"] == 5 and result["llm_asked"] == withheld and result["llm_calls"] == 2 * withheld
    # Shown: the local act where it is sure, the agent's (always hneg- here) elsewhere.
    shown = [act if sure else FaceAct.HNEG_MINUS for act, sure in (local[i] for i in range(len(rows)))]
    truth = [r.face_act for r in rows]
    assert result["accuracy"] == pytest.approx(sum(s == t for s, t in zip(shown, truth, strict=True)) / 5)
    assert result["shown_share"] == 1.0


@pytest.mark.slow
def test_the_cascade_refuses_the_local_models_training_turns(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDIAN_LLM__BASE_URL", "http://127.0.0.1:9/v1")  # never reached: refused first
    assert main(["eval", "faceacts", "data/faceacts/everyday.csv", "--detector", "cascade", "--split", "train"]) == 2
    err = capsys.readouterr().err
    assert "trained on" in err and "Traceback" not in err


def test_a_repeated_turn_number_still_gets_its_window(tmp_path: Path) -> None:
    out = tmp_path / "dup.csv"
    out.write_text("conversation_id,turn,speaker,utterance,face_act\nc,0,A,Hi.,other\nc,1,B,Give it to me.,hneg-\n"
                   "c,1,B,Now.,hneg-\nc,2,A,No.,sneg+\n", encoding="utf-8")
    rows = load_faceacts(out)
    windows = {w.row: [t.text for t in w.window.turns] for w in faceact_windows(rows, range(4), size=2)}
    assert windows == {0: ["Hi."], 1: ["Hi.", "Give it to me."], 2: ["Hi.", "Now."], 3: ["Give it to me.", "No."]}
    assert [t.text for t in faceact_windows(rows, [3], size=1)[0].window.turns] == ["No."]
