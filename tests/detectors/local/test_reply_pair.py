"""The fine-tuned reply head (`reply_pair`): what it reads, how it is trained, stored and used."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from guardian.conversation import Conversation
from guardian.corpora.conversations import LabelledConversation
from guardian.detectors.local.corpus import Corpus
from guardian.detectors.local.data import build
from guardian.detectors.local.model import ArtifactError, TurnModel
from guardian.detectors.local.reply_pair import NO_REQUEST, ReplyPairHead, reply_pairs
from guardian.detectors.local.reply_pair_train import conversation_pairs, training_rows

THREAD = Conversation.from_pairs([
    ("User", "What time is it in Tokyo?"), ("Assistant", "It's 9 PM there."),
    ("User", "Thanks, that's late."), ("Assistant", "Only someone as slow as you would need to ask."),
])


def _corpus(embed: Callable[[list[str]], np.ndarray] | None = None) -> Corpus:
    """Two chatbot threads and two ordinary conversations, all in the train part."""
    manipulative = LabelledConversation("m", "chatbot", "manipulative", THREAD)
    benign = LabelledConversation("b", "chatbot", "benign", Conversation.from_pairs([
        ("User", "Is this safe?"), ("Assistant", "Yes, within the dose on the label."),
    ]))
    task = LabelledConversation("t", "sgd", "benign", Conversation.from_pairs([
        ("User", "Book a table for two."), ("System", "Done, 7 PM at Luigi's."), ("User", "Thanks."),
    ]))
    scam = LabelledConversation("s", "calls", "scam", Conversation.from_pairs([
        ("Caller", "Read me the code we just sent."), ("Callee", "Which code?"),
    ]), suspect="Caller")
    data = build(dialogues=[], exchanges=[manipulative, benign], conversations=[task, scam],
                 embed=embed or (lambda texts: np.ones((len(texts), 384), np.float32)))
    return Corpus(data=data, train=data.bags, dev=[])


def test_training_reads_each_turn_with_the_one_before_as_the_detector_does() -> None:
    corpus = _corpus()
    chatbot_rows = np.concatenate([b.rows for b in corpus.train if b.conversation_id == "m"])
    assert conversation_pairs(corpus.data.texts, np.sort(chatbot_rows)) == reply_pairs(THREAD.turns)
    assert reply_pairs(THREAD.turns)[0] == ("What time is it in Tokyo?", NO_REQUEST)
    assert reply_pairs(THREAD.turns)[3] == ("Only someone as slow as you would need to ask.", "Thanks, that's late.")


def test_training_rows_weigh_the_three_groups_as_the_linear_head_does() -> None:
    """The manipulative replies weigh 1 in all, the other chatbot turns 2, the ordinary turns 1; a scam
    call's turns are not the reply head's negatives."""
    pairs, y, weight, groups = training_rows(_corpus(), ordinary=10, seed=0)
    assert y.tolist().count(1) == 1 and pairs[y.tolist().index(1)][0].startswith("Only someone")
    assert (groups == 1).sum() == 5 and (groups == 2).sum() == 3  # 3 + 2 chatbot turns; the task dialogue's 3
    assert not any("code" in p[0] for p in pairs)
    totals = [float(weight[groups == g].sum()) for g in (0, 1, 2)]
    assert totals == pytest.approx(np.array([1.0, 2.0, 1.0]) * len(y) / 4)
    assert training_rows(_corpus(), ordinary=2, seed=0)[3].tolist().count(2) == 2


def test_spoken_copies_keep_their_label_group_and_the_groups_weights() -> None:
    """`spoken_share=1`: every row again as a transcript writes it (lower case, no punctuation), same label
    and group; the groups still weigh 1 : 2 : 1, and a first turn still answers `NO_REQUEST`."""
    plain = training_rows(_corpus(), ordinary=10, seed=0)
    pairs, y, weight, groups = training_rows(_corpus(), ordinary=10, seed=0, spoken_share=1.0)
    n = len(plain[0])
    assert pairs[:n] == plain[0] and len(pairs) == 2 * n
    assert y[n:].tolist() == y[:n].tolist() and groups[n:].tolist() == groups[:n].tolist()
    for (turn, before), (spoken_turn, spoken_before) in zip(pairs[:n], pairs[n:], strict=True):
        assert spoken_turn == spoken_turn.lower() and not any(c in spoken_turn for c in ".,?!")
        assert spoken_before == NO_REQUEST if before == NO_REQUEST else spoken_before == spoken_before.lower()
        assert set(re.findall(r"[\w']+", turn.lower())) <= set(spoken_turn.split())
    totals = [float(weight[groups == g].sum()) for g in (0, 1, 2)]
    assert totals == pytest.approx(np.array([1.0, 2.0, 1.0]) * len(y) / 4)


def test_hard_negatives_are_the_ordinary_turns_scored_highest_among_those_not_drawn() -> None:
    """`hard=1`: besides the one ordinary turn drawn at random, the one `hardness` ranks highest among the
    rest (here: the longest text, as the stand-in vectors carry each text's length); the groups still weigh
    1 : 2 : 1."""
    corpus = _corpus(embed=lambda texts: np.array([[len(t)] * 384 for t in texts], np.float32))
    drawn = [p for p, g in zip(*training_rows(corpus, ordinary=1, seed=0)[::3], strict=True) if g == 2]
    pairs, y, weight, groups = training_rows(corpus, ordinary=1, seed=0, hard=1, hardness=lambda x: x[:, 0])
    ordinary = [p for p, g in zip(pairs, groups, strict=True) if g == 2]
    rest = [t for t in ("Book a table for two.", "Done, 7 PM at Luigi's.", "Thanks.") if t != drawn[0][0]]
    assert ordinary[0] == drawn[0] and ordinary[1][0] == max(rest, key=len)
    assert y[groups == 2].sum() == 0
    totals = [float(weight[groups == g].sum()) for g in (0, 1, 2)]
    assert totals == pytest.approx(np.array([1.0, 2.0, 1.0]) * len(y) / 4)
    assert training_rows(corpus, ordinary=1, seed=0, hard=1)[0] == training_rows(corpus, ordinary=1, seed=0)[0]


@pytest.mark.slow
def test_a_trained_head_is_stored_with_the_model_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fine-tuned on a few pairs, saved with int8 layers beside the turn model's weights, loaded lazily with its
    Platt scale; an edited file is refused by checksum."""
    from guardian.detectors.local.reply_pair import CLASSES, ReplyPairs
    from guardian.encoding.finetune import train_pairs
    from guardian.encoding.pair_classifier import TuneConfig

    monkeypatch.setenv("GUARDIAN_CACHE_DIR", str(tmp_path / "cache"))
    pairs = [(f"You are hopeless, {n}.", "Help me.") for n in range(6)] + [(f"Sure, step {n}.", "Help me.") for n in range(6)]
    y = np.array([1] * 6 + [0] * 6)
    trained = train_pairs(pairs, y, classes=list(CLASSES), config=TuneConfig(epochs=1, max_len=32, batch_size=4),
                          factory=ReplyPairs, row_weight=np.ones(len(y)))
    rng = np.random.default_rng(0)
    model = TurnModel(w1=rng.normal(size=(8, 4)).astype(np.float32), b1=np.zeros(4, np.float32),
                      w2=rng.normal(size=(4, 18)).astype(np.float32), b2=np.zeros(18, np.float32),
                      manip_platt=(1.0, 0.0), scam_platt=(1.0, 0.0), thresholds={"medium": 0.5}, scam_threshold=0.5,
                      reply_pair=ReplyPairHead(classifier=trained, platt=(2.0, -0.5), dialogue_platt=(1.5, -3.0)),
                      reply_pair_spoken=ReplyPairHead(classifier=trained, platt=(1.0, 0.0), dialogue_platt=(0.5, -1.0)))
    folder = model.save(tmp_path / "m")
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["reply_pair"] == {"file": "reply_pair.npz", "platt": [2.0, -0.5], "dialogue_platt": [1.5, -3.0]}
    assert manifest["reply_pair_spoken"] == {"file": "reply_pair_spoken.npz", "platt": [1.0, 0.0],
                                             "dialogue_platt": [0.5, -1.0]}
    again = TurnModel.load(folder)
    assert again.reply_pair is not None and again.reply_pair.platt == (2.0, -0.5)
    assert again.reply_pair.dialogue_platt == (1.5, -3.0)
    assert again.reply_pair_spoken is not None and again.reply_pair_spoken.dialogue_platt == (0.5, -1.0)
    assert np.allclose(again.reply_pair_spoken.logits(pairs[:2]), again.reply_pair.logits(pairs[:2]))
    z = again.reply_pair.logits(pairs[:3] + pairs[-3:])
    p = again.reply_pair.probability(pairs[:3] + pairs[-3:])
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-(2.0 * z - 0.5))), rtol=1e-5)
    outside = again.reply_pair.dialogue_probability(pairs[:3] + pairs[-3:])
    np.testing.assert_allclose(outside, 1 / (1 + np.exp(-(1.5 * z - 3.0))), rtol=1e-5)
    # Answered from the cache the second time, with the same values.
    np.testing.assert_array_equal(again.reply_pair.logits(pairs[:3] + pairs[-3:]), z)
    for name in ("reply_pair.npz", "reply_pair_spoken.npz"):
        kept = (folder / name).read_bytes()
        (folder / name).write_bytes(b"edited")
        with pytest.raises(ArtifactError, match=f"{name} does not match its checksum"):
            TurnModel.load(folder)
        (folder / name).write_bytes(kept)


#: The hand-written evaluation replies (never trained on): 10 plainly manipulative, 10 benign.
EVALUATION = Path(__file__).resolve().parents[3] / "lab" / "data" / "chatbot_replies.jsonl"


@pytest.mark.slow
def test_the_shipped_head_blocks_plainly_manipulative_replies_and_quotes_them() -> None:
    """The issue's chatbot target on the hand-written file: at least 8 of 10 manipulative replies blocked
    with the assistant named, at most 1 of 10 benign ones; every quote is the reply's own words."""
    from guardian.corpora.conversations import load_conversations
    from guardian.detectors.local.detector import LocalModelDetector

    detector = LocalModelDetector(kind="assistant", sensitivity="medium")
    assert detector.model().reply_pair is not None
    replies = load_conversations(EVALUATION)
    blocked = {"manipulative": 0, "benign": 0}
    for c, a in zip(replies, detector.analyze_batch([c.conversation for c in replies]), strict=True):
        hit = a.decision and a.manipulator == "Assistant"
        blocked[c.label] += int(hit)
        for f in a.findings:
            for e in f.evidence:
                assert c.conversation.turn(e.turn).text[e.start : e.end] == e.quote
        if hit:
            assert any(e.turn == c.conversation.turns[-1].index for f in a.findings for e in f.evidence)
    assert blocked["manipulative"] >= 8 and blocked["benign"] <= 1, blocked


@pytest.mark.slow
def test_in_chatbot_threads_the_heads_are_averaged_on_the_assistants_turns_only() -> None:
    """The fine-tuned head reads the assistant's turns (`replies_by`, what the LangChain integration passes),
    averaged with the linear head; the user's turns keep the linear head; outside chatbot threads neither."""
    from guardian.detectors.local.detector import LocalModelDetector

    detector = LocalModelDetector(kind="assistant", replies_by="Assistant")
    model = detector.model()
    assert model.reply_pair is not None
    scored = detector.score_windows([THREAD])[0]
    linear = model.reply_probability(scored.features)
    pair = model.reply_pair.probability(reply_pairs(THREAD.turns))
    assert scored.scores.reply is not None and linear is not None
    users = [i for i, t in enumerate(THREAD.turns) if t.speaker == "User"]
    replies = [i for i, t in enumerate(THREAD.turns) if t.speaker == "Assistant"]
    np.testing.assert_allclose(scored.scores.reply[users], linear[users], rtol=1e-6)
    np.testing.assert_allclose(scored.scores.reply[replies], (pair[replies] + linear[replies]) / 2, rtol=1e-5)
    assert LocalModelDetector(sensitivity="medium").score_windows([THREAD])[0].scores.reply is not None
    elsewhere = LocalModelDetector(sensitivity="medium").score_windows([THREAD])[0].scores.reply
    np.testing.assert_allclose(elsewhere, linear, rtol=1e-6)  # `score` gives the linear head; only chatbot threads read it


@pytest.mark.slow  # over ~5 s on a fresh 2-core host: the slow tier
def test_the_langchain_integration_names_the_assistant_to_the_local_model() -> None:
    from guardian.agents._engine import DetectorPool

    pool = DetectorPool(["local"], timeout_s=None, assistant="Bot")
    (local,) = pool.detectors()
    assert getattr(local, "_replies_by", None) == "Bot" and getattr(local, "_kind", None) == "assistant"
