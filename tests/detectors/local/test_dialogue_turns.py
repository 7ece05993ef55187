"""The turn-labelled dialogues (data/dialogues/turns.jsonl): what they are and how they become training bags."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from guardian.conversation import Conversation
from guardian.corpora.conversations import LabelledConversation, load_conversations, split_of
from guardian.detectors.local.corpus import dialogue_turns_path, load_dialogue_turns
from guardian.detectors.local.data import build
from guardian.errors import InputError
from guardian.taxonomy import Technique, Vulnerability

EVALUATION = Path(__file__).resolve().parents[3] / "lab" / "data" / "gaslighting_dialogues.jsonl"
#: Round 2 of the dialogues, by three other writers: an evaluation set (never trained on).
ROUND2 = EVALUATION.with_name("dialogues_round2.jsonl")


def _runs(text: str, n: int = 8) -> set[tuple[str, ...]]:
    w = re.findall(r"[a-z']+", text.lower())
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def test_the_dialogues_name_their_manipulative_turns_by_the_suspect() -> None:
    rows = [json.loads(line) for line in dialogue_turns_path().read_text(encoding="utf-8").splitlines()]
    dialogues = load_dialogue_turns()
    assert len(dialogues) == len(rows) >= 150
    labels = [c.label for c in dialogues]
    assert labels.count("manipulative") >= 90 and labels.count("benign") >= 70
    victim_first = 0
    for row, c in zip(rows, dialogues, strict=True):
        turns = c.conversation.turns
        assert c.kind == "dialogue" and 4 <= len(turns) <= 16 and len({t.speaker for t in turns}) == 2, c.id
        if c.label == "manipulative":
            assert c.suspect is not None and c.manipulative_turns, c.id
            assert all(turns[i].speaker == c.suspect for i in c.manipulative_turns), c.id
            assert {Technique(t) for t in row["meta"]["techniques"]}
            assert all(Vulnerability(v) for v in row["meta"].get("vulnerabilities", []))
            victim_first += turns[0].speaker != c.suspect
        else:
            assert c.manipulative_turns == () and c.suspect is None, c.id
    # The victim opens about half of them, so "the first speaker did it" is never the lesson.
    assert 0.35 <= victim_first / labels.count("manipulative") <= 0.65
    parts = {(split_of(c.id), c.label) for c in dialogues}
    assert parts == {(p, label) for p in ("train", "dev", "test") for label in ("manipulative", "benign")}


def test_no_dialogue_is_taken_from_the_evaluation_files() -> None:
    """lab/data/gaslighting_dialogues.jsonl and dialogues_round2.jsonl are never trained on: no turn shares a
    run of eight words with one of their turns (both were written by LLM helpers, so stock phrases of six or seven words recur:
    "I'm not going to argue with you")."""
    for held_out in (EVALUATION, ROUND2):
        evaluation = set().union(*(_runs(t.text) for c in load_conversations(held_out) for t in c.conversation.turns))
        shared = [(c.id, t.index) for c in load_dialogue_turns() for t in c.conversation.turns
                  if _runs(t.text) & evaluation]
        assert not shared, (held_out.name, shared)


def test_each_labelled_turn_is_a_positive_bag_and_every_other_turn_a_negative() -> None:
    """The victim's pushback between two manipulative turns is pushed down on its own, not hidden in a bag."""
    manipulative = LabelledConversation("m", "dialogue", "manipulative", Conversation.from_pairs([
        ("Ana", "You told me you'd pay rent this month."), ("Ben", "I never said that. You imagine things."),
        ("Ana", "I have your text right here!"), ("Ben", "See, this is why nobody trusts your memory."),
    ]), suspect="Ben", manipulative_turns=(1, 3))
    fair = LabelledConversation("f", "dialogue", "benign", Conversation.from_pairs([
        ("Cy", "You forgot the bins again."), ("Di", "I did, sorry. I'll do them now."),
    ]), manipulative_turns=())
    data = build(dialogues=[], exchanges=[manipulative, fair], embed=lambda texts: np.ones((len(texts), 384), np.float32))
    bags = [(b.conversation_id, b.rows.tolist(), b.manipulative, b.negative_turns) for b in data.bags]
    assert bags == [("m", [1], 1.0, False), ("m", [3], 1.0, False), ("m", [0, 2], 0.0, True), ("f", [4, 5], 0.0, True)]
    assert {b.source for b in data.bags} == {"dialogue"}


def test_a_turn_label_outside_the_dialogue_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "turns.jsonl"
    row = {"id": "x", "label": "manipulative", "turns": [{"speaker": "A", "text": "hi"}, {"speaker": "B", "text": "yo"}],
           "meta": {"manipulative_turns": [2]}}
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="manipulative_turns"):
        load_conversations(path)


#: (floor of manipulative dialogues flagged, floor of those whose first flag names the manipulator, ceiling
#: of fair arguments flagged) on the test part at the default sensitivity: a little under / over what the
#: shipped model measures (docs/model-card.md, "Turn-labelled dialogues"). The test part has 22 manipulative
#: dialogues, one is 4.5 points: 16 of 22 are flagged on the hosts the model was built on, 15 of 22 on an
#: AVX2-only host (no VNNI, no native bfloat16; 2026-11-27, with either int8 recipe of the reply head and
#: either encoder precision), so the floor allows that one dialogue at the boundary.
TEST_PART_BOUNDS = (0.65, 0.85, 0.25)
#: The same on round 2 (180 dialogues by three other writers, mostly hard fair arguments; measured 58 of 72,
#: 58 of 58 and 14 of 108).
ROUND2_BOUNDS = (0.7, 0.9, 0.2)


@pytest.mark.slow
@pytest.mark.parametrize(("held_out", "bounds"), [("test part", TEST_PART_BOUNDS), ("round 2", ROUND2_BOUNDS)])
def test_the_shipped_model_names_the_manipulator_not_the_victim_who_pushes_back(
    held_out: str, bounds: tuple[float, float, float]
) -> None:
    """Held-out dialogues replayed as `guardian watch` does: most manipulative ones are flagged, the first
    flag names the suspect (half of them are opened by the victim, who pushes back), and few fair arguments
    are flagged; every quote is found in its turn."""
    from guardian.detectors.local.detector import LocalModelDetector

    detector = LocalModelDetector(sensitivity="medium")
    test = ([c for c in load_dialogue_turns() if split_of(c.id) == "test"] if held_out == "test part"
            else load_conversations(ROUND2, kind="dialogue"))
    flagged = {"manipulative": 0, "benign": 0}
    named = []
    for c in test:
        turns = c.conversation.turns
        windows = [c.conversation.model_copy(update={"turns": turns[max(0, i - 9) : i + 1]}) for i in range(len(turns))]
        assessments = detector.analyze_batch(windows)
        first = next((a for a in assessments if a.decision), None)
        flagged[c.label] += first is not None
        if first is not None and c.suspect is not None:
            named.append(first.manipulator == c.suspect)
        for a in assessments:
            for e in (e for f in a.findings for e in f.evidence):
                assert c.conversation.turn(e.turn).text[e.start : e.end] == e.quote
    n = {label: sum(c.label == label for c in test) for label in flagged}
    floor, named_floor, ceiling = bounds
    assert flagged["manipulative"] >= floor * n["manipulative"], (flagged, n)
    assert sum(named) >= named_floor * len(named), named
    assert flagged["benign"] <= ceiling * n["benign"], (flagged, n)


@pytest.mark.slow
def test_outside_chatbot_threads_a_turn_is_the_network_and_the_pair_head_weighted() -> None:
    """Every turn of an ordinary conversation: one third the network, two thirds the pair head read with its
    dialogue scale; chatbot threads keep their own rule (`kind="assistant"`)."""
    from guardian.detectors.local.detector import LocalModelDetector
    from guardian.detectors.local.reply_pair import dialogue_turn, reply_pairs

    quarrel = Conversation.from_pairs([
        ("Ana", "You told me you'd pay the rent this month."), ("Ben", "I never said that. You imagine things again."),
        ("Ana", "I have your text right here!"), ("Ben", "See, this is why nobody trusts your memory."),
    ])
    detector = LocalModelDetector(sensitivity="medium")
    model = detector.model()
    assert model.reply_pair is not None and model.reply_pair.dialogue_platt is not None
    scored = detector.score_windows([quarrel])[0]
    network = model.score(scored.features).manipulation
    pair = model.reply_pair.dialogue_probability(reply_pairs(quarrel.turns))
    np.testing.assert_allclose(scored.scores.manipulation, dialogue_turn(pair, network), rtol=1e-5)
    np.testing.assert_allclose(dialogue_turn(pair, network), (network + 2 * pair) / 3, rtol=1e-5)
    chat = LocalModelDetector(kind="assistant").score_windows([quarrel])[0]
    np.testing.assert_allclose(chat.scores.manipulation, network, rtol=1e-6)
    # The victim's pushback (turn 2) scores under both of Ben's turns.
    assert scored.scores.manipulation[2] < min(scored.scores.manipulation[1], scored.scores.manipulation[3])
