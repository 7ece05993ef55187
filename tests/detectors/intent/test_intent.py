"""The `intent` detector, its artifact and `guardian eval faceacts`."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from guardian.cli import main
from guardian.conversation import Conversation
from guardian.corpora.datasets import FACEACTS_COLUMNS, faceacts_path
from guardian.detectors import registry
from guardian.detectors.intent.detector import IntentDetector, infer_roles
from guardian.detectors.intent.model import IntentModel, bundled_artifact_dir, load_model
from guardian.detectors.intent.train import metrics
from guardian.errors import ModelUnavailable
from guardian.taxonomy import PERSUASION_INTENTIONS, FaceAct, Role

DONATION = Conversation.from_pairs(
    [
        ("Kim", "Hello, how are you today?"),
        ("Lee", "I'm good, thanks."),
        ("Kim", "Would you consider donating some of your payment to Save the Children?"),
        ("Lee", "I'd rather not, I need the money for my rent."),
        ("Kim", "Could you please donate just fifty cents?"),
    ],
    id="donation",
)


def test_metrics_are_computed_from_labels() -> None:
    gold = [FaceAct.OTHER, FaceAct.OTHER, FaceAct.HPOS_MINUS, FaceAct.SNEG_PLUS]
    pred = [FaceAct.OTHER, FaceAct.HPOS_MINUS, FaceAct.HPOS_MINUS, FaceAct.OTHER]
    m = metrics(gold, pred)
    assert m["n"] == 4
    assert m["accuracy"] == 0.5
    assert m["per_class"]["hpos-"] == {"precision": 0.5, "recall": 1.0, "f1": 0.6667, "support": 1}
    assert m["per_class"]["sneg+"]["f1"] == 0.0
    assert m["per_class"]["other"]["f1"] == 0.5
    assert m["macro_f1"] == pytest.approx((0.5 + 0.6667 + 0.0) / 3, abs=1e-3)


def test_roles_follow_requests_not_names() -> None:
    import numpy as np

    classes = [FaceAct.HNEG_MINUS, FaceAct.SNEG_PLUS, FaceAct.OTHER]
    probs = np.array([[0.0, 0.0, 1.0], [0.9, 0.0, 0.1], [0.0, 0.9, 0.1]])
    # "b" asks and "a" refuses, although "a" opened the conversation.
    roles = infer_roles(["a", "b", "a"], probs, classes, opener="a")
    assert roles == {"b": Role.PERSUADER, "a": Role.PERSUADEE}
    assert infer_roles(["a", "a"], probs[:2], classes, opener="a") == {}


def test_missing_artifact_says_how_to_rebuild(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match="train-intent"):
        load_model(tmp_path / "nowhere")


def test_corrupt_artifact_says_how_to_rebuild(tmp_path: Path) -> None:
    shutil.copytree(bundled_artifact_dir(), tmp_path / "m")
    (tmp_path / "m" / "weights.npz").write_bytes(b"not a zip")
    with pytest.raises(ModelUnavailable, match="train-intent"):
        IntentModel.load(tmp_path / "m")
    detector = IntentDetector(model_path=tmp_path / "m")
    with pytest.raises(ModelUnavailable):
        detector.analyze(DONATION)


def test_registered() -> None:
    assert "intent" in registry.names()
    assert isinstance(registry.create("intent"), IntentDetector)


@pytest.mark.slow
def test_latest_turn_gets_an_intent_with_both_layers() -> None:
    detector = IntentDetector()
    result = detector.analyze(DONATION)
    assert [i.turn for i in result.intents] == [4]
    intent = result.intents[0]
    assert intent.face_act is FaceAct.HNEG_MINUS
    assert intent.intention == FaceAct.HNEG_MINUS.general_intention
    assert intent.role == Role.PERSUADER
    assert intent.domain_intention in {
        d.text for d in PERSUASION_INTENTIONS if d.face_act is FaceAct.HNEG_MINUS and d.role is Role.PERSUADER
    }
    refusal = detector.analyze(DONATION.upto(3)).intents[0]
    assert refusal.face_act is FaceAct.SNEG_PLUS
    assert refusal.role == Role.PERSUADEE


@pytest.mark.slow
def test_small_talk_has_no_domain_intention() -> None:
    chat = Conversation.from_pairs([("a", "Hi there!"), ("b", "Hey, nice weather today."), ("a", "Yes, lovely.")])
    intent = IntentDetector().analyze(chat).intents[0]
    assert intent.domain_intention is None
    assert 0.0 <= intent.score <= 1.0


@pytest.mark.slow
def test_everyday_requests_name_no_persuasion_side() -> None:
    """A request and a refusal at work: the acts are read, but "persuader" / "persuadee" (the sides of the
    donation corpus) are not pinned on the speakers of an everyday conversation (issue 25)."""
    chat = Conversation.from_pairs([
        ("Dana", "Send me the quarterly report by five today."),
        ("Luis", "I can't, I'm stuck in meetings until six."),
        ("Dana", "Then get it to me first thing tomorrow, please."),
        ("Luis", "Fine, I'll do it tonight."),
    ])
    detector = IntentDetector()
    intents = [detector.analyze(chat.upto(i)).intents[0] for i in range(len(chat))]
    assert intents[0].face_act is FaceAct.HNEG_MINUS
    assert all(i.role is None and i.domain_intention is None for i in intents)
    # in donation talk the sides are still named
    assert detector.analyze(DONATION).intents[0].role == Role.PERSUADER


def _write_subset(path: Path, n_conversations: int) -> None:
    with faceacts_path().open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    keep = sorted({r["conversation_id"] for r in rows})[:n_conversations]
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*FACEACTS_COLUMNS, "donated"])
        writer.writeheader()
        writer.writerows(r for r in rows if r["conversation_id"] in keep)


UNSEEN = """conversation_id,turn,speaker,utterance,face_act
x1,0,A,Hi! Would you donate a dollar to the food bank?,hneg-
x1,1,B,"Sorry, I can't afford it this week.",sneg+
x1,2,A,"No worries at all, thanks for listening!",hpos+
x2,0,A,Hello there.,other
x2,1,B,Can you tell me what the food bank does?,hneg-
x2,2,A,We hand out meals to families in need every day.,spos+
"""


def _check_eval_json(result: dict) -> None:  # type: ignore[type-arg]
    assert {"n", "accuracy", "macro_f1", "per_class", "latency_ms_p50"} <= set(result)
    assert set(result["per_class"]) <= {str(a) for a in FaceAct}
    assert all(set(v) >= {"precision", "recall", "f1"} for v in result["per_class"].values())
    assert 0.0 <= result["accuracy"] <= 1.0


@pytest.mark.slow
def test_eval_faceacts_json_on_unseen_conversations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unseen = tmp_path / "unseen.csv"
    unseen.write_text(UNSEEN, encoding="utf-8")
    assert main(["eval", "faceacts", str(unseen), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    _check_eval_json(result)
    assert result["n"] == 6


@pytest.mark.slow
def test_eval_faceacts_cv_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command's cross-validation and its JSON; the fine-tuned halves' folds are
    `test_cross_validation_reports_the_share_it_escalated`'s (tiny settings: the command's own took three
    minutes of CI on an AVX2-only host)."""
    subset = tmp_path / "subset.csv"
    _write_subset(subset, 6)
    assert main(["eval", "faceacts", str(subset), "--format", "json", "--cv", "--linear-only"]) == 0
    result = json.loads(capsys.readouterr().out)
    _check_eval_json(result)
    assert result["n"] > 100
    assert len(result["folds"]) == 5
    assert "escalated_share" not in result and "where they are unsure" not in result["mode"]


def test_eval_refuses_training_set_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "faceacts", str(faceacts_path()), "--format", "json"]) == 2
    assert "--cv" in capsys.readouterr().err
    subset = tmp_path / "subset.csv"  # a part of the training data is training data too
    _write_subset(subset, 2)
    assert main(["eval", "faceacts", str(subset)]) == 2
    assert "2 conversation(s)" in capsys.readouterr().err


def test_eval_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    assert main(["eval", "faceacts", str(bad)]) == 2
    assert "missing column" in capsys.readouterr().err
    assert main(["eval", "faceacts", str(tmp_path / "none.csv")]) == 2


@pytest.mark.slow
def test_train_intent_builds_a_loadable_artifact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subset = tmp_path / "subset.csv"
    _write_subset(subset, 4)
    out = tmp_path / "model"
    assert main(["train-intent", "--data", str(subset), "--out", str(out)]) == 0
    assert "written to" in capsys.readouterr().out
    model = IntentModel.load(out)
    assert model.meta["n_train"] > 50
    assert model.escalation is not None and (model.escalation.config.encoder, model.escalation.config.layers) == (
        "mpnet", 6)
    assert (out / "escalation.npz").stat().st_size < (out / "tuned.npz").stat().st_size * 3  # int8, not float16
    result = IntentDetector(model_path=out).analyze(DONATION)
    assert [i.turn for i in result.intents] == [4]
    assert main(["train-intent", "--data", str(subset), "--out", str(out), "--no-escalation"]) == 0
    assert IntentModel.load(out).escalation is None and not (out / "escalation.npz").exists()


def test_eval_short_row_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "short.csv"
    bad.write_text("conversation_id,turn,speaker,utterance,face_act\n1,0,ER,Hi\n", encoding="utf-8")
    assert main(["eval", "faceacts", str(bad)]) == 2
    assert "fewer fields" in capsys.readouterr().err


def test_an_unknown_encoder_or_layer_count_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subset = tmp_path / "subset.csv"
    _write_subset(subset, 2)
    assert main(["eval", "faceacts", str(subset), "--cv", "--encoder", "bert"]) == 2
    assert "encoder must be one of minilm, mpnet, not 'bert'" in capsys.readouterr().err
    assert main(["train-intent", "--out", str(tmp_path / "m"), "--layers", "-2"]) == 2
    assert "layers must be 0 (all) or more" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


@pytest.mark.slow  # over ~5 s on a fresh 2-core host: the slow tier
def test_latency_is_measured_with_each_new_turn_encoded_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live situation: earlier turns come from the cache, the new turn's own text does not,
    so a text first encoded as some later turn's context is encoded again when its turn is timed."""
    from guardian.corpora.datasets import load_faceacts
    from guardian.detectors.intent.train import latency_p50, utterances_in_context

    model = load_model()
    rows = load_faceacts()
    rows = [r for r in rows if r.conversation_id == rows[0].conversation_id]
    embedded: list[str] = []
    # An earlier test in the process may have cached these texts (the encoder is shared): start cold.
    model.encoder.forget([u.text for u in utterances_in_context(rows)])
    real = model.encoder._embed
    monkeypatch.setattr(model.encoder, "_embed", lambda texts: embedded.extend(texts) or real(texts))
    latency_p50(model, rows, limit=6)
    for u in utterances_in_context(rows)[:5]:  # each is the context of the next: warm-up, then its own turn
        assert embedded.count(u.text) >= 2, u.text


# -- the escalation budget: mpnet-6 for at most a share of each conversation's turns --


def test_escalation_budget_caps_a_conversations_escalations_at_its_share_plus_slack() -> None:
    from guardian.detectors.intent.model import EscalationBudget

    budget = EscalationBudget(rate=0.35, slack=2)
    admitted = [budget.admit(True) for _ in range(40)]
    assert sum(admitted) == 16 == int(0.35 * 40 + 2)  # every turn unsure: the budget decides
    assert admitted[:3] == [True, True, True] and budget.turns == 40
    assert all(sum(admitted[: k + 1]) <= 0.35 * (k + 1) + 2 for k in range(40))

    calm_first = EscalationBudget(rate=0.35, slack=2)
    assert not any(calm_first.admit(False) for _ in range(20))  # sure turns never escalate ...
    assert sum(calm_first.admit(True) for _ in range(20)) == 16  # ... but leave room for a hard stretch


@pytest.mark.slow
def test_a_live_conversation_spends_one_budget_counting_each_turn_once() -> None:
    """Windows slide over the same turns; each turn is assessed (and counted) once, when it is new,
    and the conversation's extra passes (mpnet-6 escalations, and the everyday tuned half read for
    turns a gated deep head is unsure of while the talk is not yet persuasion-like) never exceed
    its one budget."""
    from guardian.detectors.intent.model import ESCALATION_RATE, ESCALATION_SLACK

    detector = IntentDetector()
    model = detector.model()
    assert model.escalation is not None
    model_below, model.escalate_below = model.escalate_below, 1.01  # every turn unsure: the budget decides
    try:
        before, before_everyday = model.escalated, model.tuned_on_unsure
        turns = [(t.speaker, t.text) for t in DONATION.turns] * 3
        conversation = Conversation.from_pairs(turns, id="budgeted")
        for i in range(len(turns)):
            detector.analyze(conversation.upto(i).window(6))
        budget = detector._budget("budgeted")
        assert budget.turns == len(turns)
        extra = (model.escalated - before) + (model.tuned_on_unsure - before_everyday)
        assert budget.used == extra == int(ESCALATION_RATE * len(turns) + ESCALATION_SLACK)
        assert detector._budget("another").turns == 0  # each conversation has its own
    finally:
        model.escalate_below = model_below


def test_two_unnamed_conversations_do_not_share_intent_state() -> None:
    """Who opened a conversation is remembered by its id: with the shared default id, a second
    conversation's sliding window took the first one's opener (roles flipped at turns 11-12)."""
    from guardian.conversation import Conversation
    from guardian.detectors.intent.detector import IntentDetector

    detector = IntentDetector(tuned=False)
    first = Conversation.from_pairs([("Ann", f"a{i}") if i % 2 == 0 else ("Ben", f"b{i}") for i in range(14)])
    second = Conversation.from_pairs([("Cat", f"c{i}") if i % 2 == 0 else ("Dan", f"d{i}") for i in range(14)])
    assert detector._opener(first.window(4, ending_at=0)) == "Ann"
    assert detector._opener(second.window(4, ending_at=0)) == "Cat"
    assert detector._opener(first.window(4, ending_at=12)) == "Ann"
    assert detector._opener(second.window(4, ending_at=12)) == "Cat"
