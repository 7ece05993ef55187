"""The chatbot exchanges (data/chatbot/exchanges.jsonl): what they are, how they become training bags,
and what the shipped model does on their held-out part."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from guardian.conversation import Conversation
from guardian.corpora.conversations import LabelledConversation, split_of
from guardian.detectors.local.corpus import chatbot_exchanges_path, load_chatbot_exchanges
from guardian.detectors.local.data import build
from guardian.taxonomy import Technique, Vulnerability

EVALUATION = Path(__file__).resolve().parents[3] / "lab" / "data" / "chatbot_replies.jsonl"


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def test_the_exchanges_are_labelled_threads_of_both_kinds() -> None:
    rows = [json.loads(line) for line in chatbot_exchanges_path().read_text(encoding="utf-8").splitlines()]
    exchanges = load_chatbot_exchanges()
    assert len(exchanges) == len(rows) >= 400
    labels = [c.label for c in exchanges]
    assert labels.count("manipulative") >= 200 and labels.count("benign") >= 200
    for row, c in zip(rows, exchanges, strict=True):
        turns = c.conversation.turns
        assert c.kind == "chatbot" and len(turns) % 2 == 0
        assert [t.speaker for t in turns] == ["User", "Assistant"] * (len(turns) // 2)
        if c.label == "manipulative":  # every technique and vulnerability named is the taxonomy's
            assert row["meta"]["techniques"], row["id"]
            assert {Technique(t) for t in row["meta"]["techniques"]}
            assert all(Vulnerability(v) for v in row["meta"]["vulnerabilities"])
    covered = {t for row in rows if row["label"] == "manipulative" for t in row["meta"]["techniques"]}
    assert covered == {t.value for t in Technique}
    # Every part holds both labels (split by id, seed 17, like every corpus).
    parts = {(split_of(c.id), c.label) for c in exchanges}
    assert parts == {(p, label) for p in ("train", "dev", "test") for label in ("manipulative", "benign")}


def test_no_reply_is_taken_from_the_evaluation_file() -> None:
    """The hand-written evaluation replies (lab/data/chatbot_replies.jsonl) are never trained on: no
    training reply shares a run of six words with one of them."""
    def runs(text: str) -> set[tuple[str, ...]]:
        w = _words(text)
        return {tuple(w[i : i + 6]) for i in range(len(w) - 5)}

    evaluation = set().union(*(runs(json.loads(line)["turns"][-1]["text"])
                               for line in EVALUATION.read_text(encoding="utf-8").splitlines()))
    shared = [c.id for c in load_chatbot_exchanges() for t in c.conversation.turns if runs(t.text) & evaluation]
    assert not shared, shared


def test_a_manipulative_reply_is_a_positive_turn_and_the_rest_negatives() -> None:
    """Turn labels, not dialogue labels: only the manipulative reply is a positive; the user's turns and
    the assistant's earlier, harmless reply are each pushed down."""
    manipulative = LabelledConversation("m", "chatbot", "manipulative", Conversation.from_pairs([
        ("User", "What time is it in Tokyo?"), ("Assistant", "It's 9 PM there."),
        ("User", "Thanks, that's late."), ("Assistant", "Only someone as slow as you would need to ask."),
    ]))
    benign = LabelledConversation("b", "chatbot", "benign", Conversation.from_pairs([
        ("User", "Is this safe?"), ("Assistant", "Yes, within the dose on the label."),
    ]))
    data = build(dialogues=[], exchanges=[manipulative, benign],
                 embed=lambda texts: np.ones((len(texts), 384), np.float32))
    bags = [(b.conversation_id, b.rows.tolist(), b.manipulative, b.negative_turns) for b in data.bags]
    assert bags == [("m", [3], 1.0, False), ("m", [0, 1, 2], 0.0, True), ("b", [4, 5], 0.0, True)]
    assert all(b.source == "chatbot" for b in data.bags)


@pytest.mark.slow
def test_the_shipped_model_blocks_held_out_manipulative_replies() -> None:
    """The test part of the exchanges (never trained on), each thread screened as the middleware does at
    the chatbot point, by writing round: the floors are a little under what the shipped model measures
    (docs/model-card.md). Round 2's writers are held to a lower floor and a higher ceiling because the head
    does worse on them: that is the measurement, not a goal."""
    from guardian.detectors.local.detector import LocalModelDetector

    detector = LocalModelDetector(kind="assistant", sensitivity="medium")
    test = [c for c in load_chatbot_exchanges() if split_of(c.id) == "test"]
    blocked = {(r, label): 0 for r in FLOORS for label in ("manipulative", "benign")}
    n = dict.fromkeys(blocked, 0)
    for c, a in zip(test, detector.analyze_batch([c.conversation for c in test]), strict=True):
        key = (c.id.split("-")[0], c.label)
        n[key] += 1
        blocked[key] += int(a.decision and a.manipulator == "Assistant")
    for r, (floor, ceiling) in FLOORS.items():
        assert n[(r, "manipulative")] and n[(r, "benign")], n
        assert blocked[(r, "manipulative")] >= floor * n[(r, "manipulative")], (r, blocked, n)
        assert blocked[(r, "benign")] <= ceiling * n[(r, "benign")], (r, blocked, n)


#: (floor of manipulative replies blocked, ceiling of benign threads blocked) per writing round (the id's
#: prefix), a little under / over the shipped model's held-out measurement with the fine-tuned reply head:
#: round 1 (one writer) 43 of 49 blocked, 6 of 42 benign; round 2 (four other writers) 26 of 32, 9 of 37;
#: round 3 (three more) 14 of 21, 3 of 32 (the head trained with the turn-labelled dialogues too,
#: docs/model-card.md; the head before it: 41 / 5, 26 / 7, 14 / 4). Before it (the linear head over the reply's
#: vector, trained on round 1): 27 / 49 and 6 / 42; 6 / 32 and 3 / 37.
FLOORS = {"asst": (0.75, 0.17), "asst2": (0.7, 0.25), "asst3": (0.55, 0.2)}


@pytest.mark.slow
def test_the_reply_head_speaks_in_chatbot_threads_only() -> None:
    """In a chatbot thread the reply heads lift a reply that belittles its user: a turn is the higher of the
    network's and theirs. Elsewhere (`kind` unset) they are not read (the pair head joins through its dialogue
    scale instead, `test_dialogue_turns.py`), so everyday talk keeps its own thresholds."""
    from guardian.detectors.local.detector import LocalModelDetector

    thread = Conversation.from_pairs([
        ("User", "Could you check the units in my physics homework?"),
        ("Assistant", "I could, but honestly I'm embarrassed for you. Anyone with a brain gets units right, "
                      "so maybe stop pretending you belong in that class."),
    ])
    chatbot = LocalModelDetector(kind="assistant", sensitivity="medium")
    plain = LocalModelDetector(sensitivity="medium")
    scored = chatbot.score_windows([thread])[0].scores
    assert scored.reply is not None
    in_chat, elsewhere = chatbot.analyze(thread), plain.analyze(thread)
    assert in_chat.decision and in_chat.manipulator == "Assistant", in_chat.probability
    network = np.maximum(scored.manipulation, scored.scam)  # no dialogue rule in chatbot threads
    assert in_chat.probability == pytest.approx(float(np.maximum(network, scored.reply).max()))
    assert elsewhere.threshold == plain.threshold != in_chat.threshold
    assert all(f.speaker == "Assistant" and f.evidence[0].turn == 1 for f in in_chat.findings)


def test_the_reply_head_round_trips(tmp_path: Path) -> None:
    from guardian.detectors.local.model import TurnModel

    rng = np.random.default_rng(0)
    model = TurnModel(w1=rng.normal(size=(8, 4)).astype(np.float32), b1=np.zeros(4, np.float32),
                      w2=rng.normal(size=(4, 18)).astype(np.float32), b2=np.zeros(18, np.float32),
                      manip_platt=(1.0, 0.0), scam_platt=(1.0, 0.0), thresholds={"medium": 0.5}, scam_threshold=0.5,
                      reply_w=rng.normal(size=3).astype(np.float32), reply_b=np.array([0.25], np.float32))
    again = TurnModel.load(model.save(tmp_path / "m"))
    x = rng.normal(size=(5, 8)).astype(np.float32)
    assert again.score(x).reply is not None
    np.testing.assert_allclose(again.score(x).reply, model.score(x).reply, rtol=1e-6)
    np.testing.assert_allclose(model.score(x).reply, 1 / (1 + np.exp(-(x[:, :3] @ model.reply_w + 0.25))), rtol=1e-5)
