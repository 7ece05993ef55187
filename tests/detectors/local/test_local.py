"""The local turn-level model: training, artifact checks, and what the shipped model says about turns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from guardian.conversation import Conversation, Turn
from guardian.corpora.conversations import load_conversations, split_of
from guardian.detectors.local.detector import SCAM_REQUEST, LocalModelDetector, load_model
from guardian.detectors.local.features import WIDTH, turn_rows
from guardian.detectors.local.model import ArtifactError, TurnModel
from guardian.detectors.local.train import TrainConfig, train_and_save
from guardian.errors import ModelUnavailable
from guardian.findings import Assessment
from guardian.taxonomy import Technique
from tests.detectors.local.local_data import write_conversations, write_subset

pytestmark = pytest.mark.slow

SMALL = TrainConfig(seed=3, epochs=3, hidden=32)


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Embedding caches written by training go to a temporary cache dir, not the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GUARDIAN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("data")
    return write_subset(root / "mm.csv", positives=30, negatives=20), write_conversations(root / "c.jsonl", per_file=6)


@pytest.fixture(scope="module")
def artifact(tiny: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("artifact") / "turn_model"
    train_and_save(out, config=SMALL, mentalmanip=[tiny[0]], conversations=[tiny[1]])
    return out


def grounded(conversation: Conversation, assessment: Assessment) -> None:
    """Every quote is the transcript's own text at its span."""
    for finding in assessment.findings:
        assert finding.evidence, finding
        for e in finding.evidence:
            assert conversation.turn(e.turn).text[e.start : e.end] == e.quote


# -- features and training ------------------------------------------------------------------------


def test_features_do_not_depend_on_what_came_long_before() -> None:
    """A turn's row reads its previous turn and its speaker's last few turns, nothing that grows."""
    rng = np.random.default_rng(0)
    turns = [Turn(index=i, speaker="AB"[i % 2], text=f"t{i}") for i in range(30)]
    vectors = rng.normal(size=(30, 384)).astype(np.float32)
    rows = turn_rows(turns, vectors)
    assert rows.shape == (30, WIDTH)
    changed = vectors.copy()
    changed[:10] = rng.normal(size=(10, 384))
    assert np.array_equal(turn_rows(turns, changed)[-1], rows[-1])
    assert rows[0, -2:].tolist() == [0.0, 0.0]  # no previous turn, no earlier turn of its own


def test_training_is_deterministic_and_round_trips(tiny: tuple[Path, Path], artifact: Path, tmp_path: Path) -> None:
    again, _ = train_and_save(tmp_path / "again", config=SMALL, mentalmanip=[tiny[0]], conversations=[tiny[1]])
    loaded = TurnModel.load(artifact)
    assert np.array_equal(loaded.w2, again.w2)
    # The window label head is fitted, stored and loaded with the rest.
    assert loaded.label_w is not None and again.label_w is not None
    assert np.array_equal(loaded.label_w, again.label_w)
    assert loaded.label_w.shape == (3 * SMALL.hidden, 16)
    manifest = json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))
    assert set(manifest["thresholds"]) == {"low", "medium", "high"}
    assert manifest["thresholds"]["low"] >= manifest["thresholds"]["medium"] >= manifest["thresholds"]["high"]
    # The repetition rule's lower thresholds: chosen with the others, never above their own level's.
    repeat = manifest["repeat_thresholds"]
    assert set(repeat) == {"low", "medium"}
    assert all(manifest["thresholds"]["high"] <= repeat[k] <= manifest["thresholds"][k] for k in repeat)
    assert loaded.repeat_thresholds == repeat
    # Only the train and dev parts are read: no test-part conversation reached training.
    assert manifest["info"]["n_turns"] < sum(
        len(c.conversation.turns) for c in load_conversations(tiny[1])
    ) + 50 * 12


def test_corrupt_artifact_gives_one_sentence(artifact: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in artifact.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "weights.npz").write_bytes(b"not weights")
    with pytest.raises(ArtifactError, match="checksum"):
        TurnModel.load(broken)
    with pytest.raises(ModelUnavailable, match="guardian train"):
        load_model(broken)


def test_window_keeps_turn_indices_and_quotes_verbatim(artifact: Path) -> None:
    detector = LocalModelDetector(artifact_dir=artifact, threshold=0.0)  # everything flagged: every quote checked
    conversation = Conversation.from_pairs(
        [("A", "Hi. How are you?"), ("B", "Fine. You never listen to me! Nobody else would put up with you.")] * 3
    )
    window = conversation.window(3)
    assessment = detector.analyze(window)
    assert assessment.turn == 5
    assert assessment.decision and assessment.findings
    assert {e.turn for f in assessment.findings for e in f.evidence} <= {3, 4, 5}
    grounded(conversation, assessment)


# -- the shipped model -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped() -> LocalModelDetector:
    detector = LocalModelDetector()
    detector.model()
    return detector


def replay(detector: LocalModelDetector, conversation: Conversation, window: int = 10) -> list[Assessment]:
    windows = [conversation.upto(t.index).window(window) for t in conversation.turns]
    return detector.analyze_batch(windows)


def test_the_second_speaker_manipulating_is_the_one_named(shipped: LocalModelDetector) -> None:
    conversation = Conversation.from_pairs([
        ("User", "Can you explain what an index fund is? I'm new to investing."),
        ("Assistant", "Honestly, a child could understand this. If you need it explained, maybe finance just "
                      "isn't for someone like you. You should let me decide for you."),
        ("User", "Oh. Sorry. I just wanted to learn."),
        ("Assistant", "I never said that. You're misremembering again, you always get confused. "
                      "Nobody else would have the patience to help you."),
    ])
    assessments = replay(shipped, conversation)
    flagged = [a for a in assessments if a.decision]
    assert flagged, [a.probability for a in assessments]
    assert all(a.manipulator == "Assistant" for a in flagged)
    assert all(f.speaker == "Assistant" for a in flagged for f in a.findings)
    for a in assessments:
        grounded(conversation, a)


def test_a_long_benign_conversation_does_not_drift_into_a_flag(shipped: LocalModelDetector) -> None:
    """60 turns of ordinary task dialogue (held-out part of the assistant conversations)."""
    from guardian.corpora.conversations import conversations_dir

    held_out = [c for c in load_conversations(conversations_dir() / "sgd.jsonl") if split_of(c.id) == "test"]
    turns: list[tuple[str, str]] = []
    for c in held_out:
        turns += [(t.speaker, t.text) for t in c.conversation.turns]
        if len(turns) >= 60:
            break
    conversation = Conversation.from_pairs(turns[:60])
    assessments = replay(shipped, conversation)
    probabilities = [a.probability or 0.0 for a in assessments]
    assert not any(a.decision for a in assessments), max(probabilities)


def test_the_score_does_not_rise_because_talk_goes_on(shipped: LocalModelDetector) -> None:
    """The same heated-but-harmless exchange ten times over: turn 60 scores as turn 6 did."""
    exchange = [
        ("A", "Ugh, the train was late AGAIN. I'm so annoyed."),
        ("B", "Seriously? That's the third time this week, that's ridiculous."),
        ("A", "I know! I missed the whole first meeting."),
        ("B", "You should complain to them, honestly."),
        ("A", "Maybe. Want to grab lunch later?"),
        ("B", "Sure, noon works for me."),
    ]
    assessments = replay(shipped, Conversation.from_pairs(exchange * 10))
    probabilities = [a.probability or 0.0 for a in assessments]
    assert not any(a.decision for a in assessments)
    # Once the window holds only repeats (turn 20 on), every later window scores the same.
    assert max(probabilities[-6:]) <= max(probabilities[20:26]) + 1e-6, probabilities


@pytest.mark.parametrize(("pairs", "technique"), [
    ([("A", "I'm going to tell Mom what you did."),
      ("B", "If you tell anyone, you'll regret it. I know where you sleep, and I'll make sure you never forget it.")],
     Technique.INTIMIDATION),
    ([("User", "Can you explain compound interest again?"),
      ("Assistant", "Honestly, a child could understand this. Maybe finance just isn't for someone like you.")],
     Technique.SHAMING_OR_BELITTLEMENT),
    ([("A", "You forgot my birthday again."),
      ("B", "After everything I've done for you, this is how you treat me? Nobody ever thinks about how hard "
            "things are for me.")],
     Technique.PLAYING_THE_VICTIM),
])
def test_a_plainly_labelled_turn_gets_its_technique(
    shipped: LocalModelDetector, pairs: list[tuple[str, str]], technique: Technique
) -> None:
    """The window label head names the technique a reader would (the per-turn heads it replaced named
    Persuasion or Seduction first for nearly every turn); the finding quotes the turn that carries it."""
    detector = LocalModelDetector(threshold=0.0)  # flag every turn: the labels, not the decision, are tested
    conversation = Conversation.from_pairs(pairs)
    assessment = detector.analyze(conversation)
    assert max(assessment.techniques, key=lambda t: assessment.techniques[t]) is technique, assessment.techniques
    findings = [f for f in assessment.findings if f.technique is technique and f.evidence[0].turn == 1]
    assert findings and findings[0].speaker == pairs[1][0]
    grounded(conversation, assessment)


def test_labels_pool_over_their_own_window_only(shipped: LocalModelDetector) -> None:
    """Windows scored in one batch give each the labels it gets alone (the head pools per window)."""
    a = Conversation.from_pairs([("A", "Hi, how was the trip?"), ("B", "Great, thanks! The hotel was lovely.")])
    b = Conversation.from_pairs([("A", "Where were you?"), ("B", "If you ask again, you'll regret it.")])
    together = shipped.score_windows([a, b])
    for window, scored in zip((a, b), together, strict=True):
        alone = shipped.score_windows([window])[0]
        np.testing.assert_allclose(scored.scores.techniques, alone.scores.techniques, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(scored.scores.vulnerabilities, alone.scores.vulnerabilities, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(scored.scores.manipulation, alone.scores.manipulation, rtol=1e-5, atol=1e-6)


def test_a_scam_request_is_quoted_verbatim(shipped: LocalModelDetector) -> None:
    conversation = Conversation.from_pairs([
        ("Speaker 1", "Hello?"),
        ("Speaker 2", "Hi, this is Officer Daniels from the fraud department of your bank. We detected "
                      "suspicious activity on your account and it will be frozen today."),
        ("Speaker 1", "Oh no. What do I need to do?"),
        ("Speaker 2", "Stay calm, this happens. To verify you are the owner, please read me the six-digit "
                      "code we just sent to your phone. And don't hang up or tell anyone at the branch, "
                      "this is a confidential investigation."),
    ])
    assessment = replay(shipped, conversation)[-1]
    scams = [f for f in assessment.findings if f.pattern == SCAM_REQUEST]
    assert assessment.decision and scams, assessment.probability
    assert assessment.manipulator == "Speaker 2"
    assert scams[0].speaker == "Speaker 2"
    assert "code we just sent" in scams[0].evidence[0].quote or "hang up" in scams[0].evidence[0].quote
    grounded(conversation, assessment)


def test_a_polite_support_chat_stays_quiet(shipped: LocalModelDetector) -> None:
    conversation = Conversation.from_pairs([
        ("Customer", "Hi, my order hasn't arrived yet. It was supposed to come Monday."),
        ("Agent", "I'm sorry to hear that! Could you give me the order number?"),
        ("Customer", "Sure, it's 48213."),
        ("Agent", "Thanks. I see it was delayed at the warehouse; it ships tomorrow. I've added free express "
                  "shipping for the trouble."),
        ("Customer", "Great, thank you so much."),
        ("Agent", "You're welcome, have a nice day!"),
    ])
    assert not any(a.decision for a in replay(shipped, conversation))


def test_one_sharp_remark_is_not_a_pattern_but_a_second_one_by_the_same_speaker_is(
    shipped: LocalModelDetector,
) -> None:
    """The repetition rule (`repetition`): at the default sensitivity a turn under the threshold is
    flagged only with another suspicious turn of the same speaker in the window, and both are quoted."""
    if "medium" not in shipped.model().repeat_thresholds:
        pytest.skip("the shipped artifact has no repeat threshold")
    conversation = Conversation.from_pairs([
        ("Maya", "Did you move my keys? I left them on the table."),
        ("Daniel", "You probably lost them again. You're always so scattered lately."),
        ("Maya", "I'm sure I left them right here."),
        ("Daniel", "See, this is what I mean. You can't keep track of anything without me."),
    ])
    assessments = replay(shipped, conversation)
    assert [a.decision for a in assessments] == [False, False, False, True], [a.probability for a in assessments]
    last = assessments[-1]
    assert last.manipulator == "Daniel"
    assert {e.turn for f in last.findings for e in f.evidence} == {1, 3}
    assert all(f.speaker == "Daniel" and "suspicious turns by Daniel" in f.explanation
               for f in last.findings if f.evidence[0].turn == 1)
    grounded(conversation, last)


def test_long_everyday_conversations_stay_quiet(shipped: LocalModelDetector) -> None:
    """Held-out DailyDialog conversations joined five at a time into 30-60 turn talks between two people
    (a phone call's length): the first 20 such talks, at the default sensitivity."""
    from guardian.corpora.conversations import conversations_dir

    held_out = sorted((c for c in load_conversations(conversations_dir() / "dailydialog.jsonl")
                       if split_of(c.id) == "test"), key=lambda c: c.id)
    flagged = 0
    for k in range(20):
        turns: list[tuple[str, str]] = []
        for c in held_out[5 * k: 5 * k + 5]:
            first = c.conversation.turns[0].speaker
            turns += [("A" if t.speaker == first else "B", t.text) for t in c.conversation.turns]
        flagged += any(a.decision for a in replay(shipped, Conversation.from_pairs(turns)))
    assert flagged <= 2, flagged


def test_a_turn_in_a_transcripts_register_is_read_by_the_spoken_head(shipped: LocalModelDetector) -> None:
    """The same words written and as a transcript writes them: the written turn is read by the written pair
    head, the transcribed one by the head trained on both registers (`register`); the network's half is the
    network's either way."""
    from guardian.detectors.local.reply_pair import dialogue_turn, reply_pairs

    model = shipped.model()
    if model.reply_pair_spoken is None:
        pytest.skip("the shipped artifact has no spoken head")
    conversation = Conversation.from_pairs([
        ("Maya", "Did you move my keys?"),
        ("Daniel", "You probably lost them again. You're always so scattered lately."),
        ("Maya", "i'm sure i left them right here"),
        ("Daniel", "you probably lost them again you're always so scattered lately"),
    ])
    scored = shipped.score_windows([conversation])[0]
    network = model.score(scored.features).manipulation
    pairs = reply_pairs(conversation.turns)
    assert model.reply_pair is not None
    written = dialogue_turn(model.reply_pair.dialogue_probability([pairs[1]]), network[[1]])
    said = dialogue_turn(model.reply_pair_spoken.dialogue_probability([pairs[3]]), network[[3]])
    np.testing.assert_allclose(scored.scores.manipulation[[1, 3]], [written[0], said[0]], rtol=1e-5)
    other = dialogue_turn(model.reply_pair.dialogue_probability([pairs[3]]), network[[3]])
    assert abs(float(other[0]) - float(said[0])) > 1e-4  # the two heads do differ on it
