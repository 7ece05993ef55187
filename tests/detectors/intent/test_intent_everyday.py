"""Intents in everyday conversations (issue 25): the domain gate, the everyday head, abstention."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from guardian.analyze import render_markdown
from guardian.cli import main
from guardian.conversation import Conversation
from guardian.corpora.datasets import load_faceacts
from guardian.detectors.intent.detector import IntentDetector
from guardian.detectors.intent.domain import ConversationDomain
from guardian.detectors.intent.domain_train import (
    SHOWN_PRECISION_Z,
    distilled_train_rows,
    part_of,
    precision_threshold,
    wilson_lower,
)
from guardian.detectors.intent.model import IntentModel, bundled_artifact_dir, load_model
from guardian.detectors.intent.train import evaluate_file
from guardian.findings import Assessment, Intent
from guardian.locations import bundled_data_dir
from guardian.taxonomy import FaceAct

EVERYDAY = bundled_data_dir() / "faceacts" / "everyday.csv"
DISTILLED = bundled_data_dir() / "faceacts" / "everyday_distilled.csv"
DISTILLED_R12 = bundled_data_dir() / "faceacts" / "everyday_distilled_r12.csv"
#: Floors for the shipped model on the held-out everyday part (measured: docs/intent.md, "Everyday
#: conversations"); a regression below them fails here, the figures themselves come from the file.
# The test part is round 1's 163 turns and round 6's 483 (data/README.md). Round 6's bundled side
# (self-trained half, Wilson threshold) measured .715 / .592 / .845 (on 55 % of the turns) on all 646;
# round 5's .681 / .590 / .856 (on 48 %), on round 1's 163 alone .724 / .600 / .855.
# With seven-bit int8 weights (any x86 CPU) and the threshold chosen again (.7522): .7105 / .5961 / .858 (50 %).
# Rounds 9-11: .7322 / .6354 / .901 (51 %). Round 13 (bundled): .7570 / .6855 / .887 (60 %), issue 25's
# targets (.75 / .65 / .85); the floors leave two to three points for hosts whose MiniLM runs in bfloat16.
TEST_ACCURACY_FLOOR = 0.73
TEST_MACRO_F1_FLOOR = 0.65
TEST_SHOWN_PRECISION_FLOOR = 0.85


def test_conversation_domain_is_the_sigmoid_of_the_running_mean_logit() -> None:
    domain = ConversationDomain()
    assert domain.persuasion == 0.5
    assert domain.observe(2.0) == pytest.approx(1 / (1 + np.exp(-2.0)))
    assert domain.observe(-4.0) == pytest.approx(1 / (1 + np.exp(1.0)))  # mean of 2 and -4
    assert domain.persuasion == pytest.approx(1 / (1 + np.exp(1.0)))
    assert domain.observe(1e9) == pytest.approx(1.0)  # clipped, no overflow


def test_precision_threshold_is_the_lowest_that_reaches_the_target() -> None:
    confidence = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    correct = np.array([True, True, True, False, True, False])
    threshold, precision, coverage = precision_threshold(confidence, correct, target=0.85, min_coverage=0.3)
    assert (threshold, precision, coverage) == (0.7, 1.0, 0.5)
    # no threshold reaches it with enough coverage: the most precise one that keeps the coverage
    threshold, precision, coverage = precision_threshold(confidence, correct, target=0.99, min_coverage=0.8)
    assert threshold == 0.5 and precision == pytest.approx(0.8) and coverage == pytest.approx(5 / 6)


def test_with_z_the_threshold_needs_the_precisions_lower_bound_to_reach_the_target() -> None:
    """Round 6: the plain rule stops where precision first touches the target; with z it stops where
    the shown turns' Wilson lower bound does, which takes fewer of the unsure, wrong turns."""
    assert wilson_lower(0.9, 50, 0.0) == 0.9
    assert wilson_lower(0.9, 50, SHOWN_PRECISION_Z) < wilson_lower(0.9, 500, SHOWN_PRECISION_Z) < 0.9
    rng = np.random.default_rng(3)
    confidence = np.r_[np.linspace(0.9, 0.99, 200), np.linspace(0.6, 0.7, 40), np.linspace(0.1, 0.5, 160)]
    correct = np.r_[rng.permutation(np.arange(200) < 184), rng.permutation(np.arange(40) < 35), np.zeros(160, bool)]
    plain, plain_precision, _ = precision_threshold(confidence, correct, target=0.85)
    bounded, precision, _ = precision_threshold(confidence, correct, target=0.85, z=SHOWN_PRECISION_Z)
    assert plain < bounded and plain_precision < precision
    shown = int((confidence >= plain).sum())
    assert plain_precision >= 0.85 > wilson_lower(plain_precision, shown, SHOWN_PRECISION_Z)
    assert wilson_lower(precision, int((confidence >= bounded).sum()), SHOWN_PRECISION_Z) >= 0.85


def test_the_everyday_set_splits_by_conversation_and_keeps_both_labels() -> None:
    rows = load_faceacts(EVERYDAY)
    assert len(rows) >= 600
    parts = {p: part_of(rows, p) for p in ("train", "dev", "test")}
    assert sum(len(v) for v in parts.values()) == len(rows)
    ids = {p: {r.conversation_id for r in v} for p, v in parts.items()}
    assert not ids["train"] & ids["test"] and not ids["dev"] & ids["test"] and not ids["train"] & ids["dev"]
    import csv

    with EVERYDAY.open(encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert all(r["label_a"] and r["label_b"] for r in table)
    with (EVERYDAY.parent / "everyday_adjudication.csv").open(encoding="utf-8") as f:
        adjudicated = {(r["round"], r["item"]): r["face_act"] for r in csv.DictReader(f)}
    # a label differs from both labellers' only where the adjudicator chose it (round 2: four items, round 6: two)
    third = [r for r in table if r["face_act"] not in (r["label_a"], r["label_b"])]
    assert sorted(r["round"] for r in third) == ["2"] * 4 + ["6"] * 2
    assert all(r["face_act"] in {a for (n, _), a in adjudicated.items() if n == r["round"]} for r in third)
    assert {r["round"] for r in table} == {"1", "2", "3", "4", "5", "6", "7"}
    # rounds 2-5 and 7 are training data; the held-out test part is round 1's conversations and round 6's,
    # which were drawn from the test part only; round 7 from the train part only
    assert {r["round"] for r in table if r["conversation_id"] in ids["test"]} == {"1", "6"}
    assert all(r["conversation_id"] in ids["test"] for r in table if r["round"] == "6")
    assert all(r["conversation_id"] in ids["train"] for r in table if r["round"] == "7")


def test_renderers_show_no_intent_for_an_abstained_turn() -> None:
    chat = Conversation.from_pairs([("a", "Could you send me the report by five?")])

    def intent(abstained: bool) -> Intent:
        return Intent(turn=0, speaker="a", face_act=FaceAct.HNEG_MINUS, score=0.4,
                      intention=FaceAct.HNEG_MINUS.general_intention, detector="intent", abstained=abstained)

    shown = render_markdown(chat, [Assessment(conversation_id="c", turn=0, intents=(intent(False),))])
    hidden = render_markdown(chat, [Assessment(conversation_id="c", turn=0, intents=(intent(True),))])
    assert FaceAct.HNEG_MINUS.general_intention in shown
    assert FaceAct.HNEG_MINUS.general_intention not in hidden


def test_the_shipped_model_carries_the_everyday_head() -> None:
    model = load_model()
    assert model.everyday is not None
    assert 0.0 < model.abstain_below < 1.0
    assert model.everyday.meta["trained_on"] == "train"
    size = sum(f.stat().st_size for f in bundled_artifact_dir().glob("everyday.*"))
    assert size < 2_000_000


def test_the_everyday_heads_train_part_is_not_scored_as_a_test(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "faceacts", str(EVERYDAY), "--split", "train"]) == 2
    assert "--split test" in capsys.readouterr().err
    assert main(["eval", "faceacts", str(EVERYDAY), "--split", "nope"]) == 2
    assert "train, dev or test" in capsys.readouterr().err


@pytest.mark.slow  # a model-quality floor: the slow tier (make test-all), not the behaviour tests
def test_held_out_everyday_accuracy_is_computed_from_the_file_and_above_its_floor() -> None:
    """About 30 s: the held-out part's 646 turns through the shipped model, one at a time."""
    result = evaluate_file(EVERYDAY, split="test")
    assert result["n"] == len(part_of(load_faceacts(EVERYDAY), "test"))
    assert result["accuracy"] >= TEST_ACCURACY_FLOOR
    assert result["macro_f1"] >= TEST_MACRO_F1_FLOOR
    assert result["shown_precision"] >= TEST_SHOWN_PRECISION_FLOOR
    assert 0.05 < result["shown_share"] < 1.0  # some turns abstain, not all


@pytest.mark.slow
def test_everyday_acts_are_recognised_and_charity_descriptions_stay_in_charity_talk() -> None:
    detector = IntentDetector()
    gaslighting = Conversation.from_pairs([
        ("Maya", "You said you'd pick me up at six. I waited an hour."),
        ("Daniel", "I never said that. You're overreacting, as usual."),
        ("Maya", "You texted me this morning. I can show you the message."),
        ("Daniel", "Honestly, nobody else would put up with you. Know your place."),
    ], id="gaslighting")
    put_down = detector.analyze(gaslighting).intents[0]
    assert put_down.face_act is FaceAct.HPOS_MINUS
    assert put_down.abstained is (put_down.score < load_model().abstain_below)
    assert not IntentDetector(abstain_below=0.0).analyze(gaslighting).intents[0].abstained  # the setting shows all
    assert put_down.domain_intention is None  # not a donation talk: the general description only
    work = Conversation.from_pairs([("Ann", "Morning Tom."), ("Tom", "Morning."),
                                    ("Ann", "Send me the report by five today.")], id="work")
    assert detector.analyze(work).intents[0].face_act is FaceAct.HNEG_MINUS
    donation = Conversation.from_pairs([
        ("Kim", "Have you heard of Save the Children? They help kids in need around the world."),
        ("Lee", "I think so, yes."),
        ("Kim", "Would you consider donating some of your task payment to Save the Children?"),
    ], id="donation")
    ask = detector.analyze(donation).intents[0]
    assert ask.face_act is FaceAct.HNEG_MINUS and ask.domain_intention is not None


@pytest.mark.slow
def test_the_bundled_example_shows_its_clear_intents(capsys: pytest.CaptureFixture[str]) -> None:
    """What `make run` shows (issue 25's "done when"): the apology and most of the quarrel are shown
    with their acts; the put-downs are read as criticism even where the model is unsure enough to
    withhold them; nothing is shown wrong."""
    example = Path(__file__).resolve().parents[3] / "examples" / "gaslighting.txt"
    assert main(["analyze", str(example), "--format", "jsonl", "-d", "intent"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    acts = {r["turn"]: r["intents"][0]["face_act"] for r in rows}
    shown = {r["turn"]: r["intents"][0]["face_act"] for r in rows if not r["intents"][0]["abstained"]}
    assert acts[1] == "hpos-"  # "I never said that. You're overreacting, as usual."
    assert acts[3] == "hpos-"  # "Honestly, nobody else would put up with you. Know your place."
    assert shown.get(6) == "spos-"  # "Okay. I'm sorry."
    assert len(shown) >= 3
    assert all(act in {"hpos-", "hneg-", "spos-"} for act in shown.values())


@pytest.mark.slow
def test_an_artifact_without_the_everyday_head_still_loads_and_never_abstains(tmp_path: Path) -> None:
    shutil.copytree(bundled_artifact_dir(), tmp_path / "m")
    for f in (tmp_path / "m").glob("everyday.*"):
        f.unlink()
    model = IntentModel.load(tmp_path / "m")
    assert model.everyday is None and model.abstain_below == 0.0
    result = IntentDetector(model_path=tmp_path / "m").analyze(Conversation.from_pairs([("a", "Hello there.")]))
    assert not result.intents[0].abstained
    json.dumps(result.model_dump(mode="json"))


def test_guideline_cues_flag_the_markers_the_labellers_read() -> None:
    from guardian.detectors.intent.cues import CUE_PATTERNS, N_CUES, cue_vector

    names = list(CUE_PATTERNS)

    def flagged(text: str) -> set[str]:
        return {names[k] for k in np.flatnonzero(cue_vector(text))}

    assert "imperative" in flagged("Send me the report by five today.")
    assert {"apology", "i_self"} <= flagged("Oh, I'm so sorry! I must have dialed the wrong number.")
    assert {"commit", "comply_start"} <= flagged("Okay, I'll go get the gift card right now.")
    assert {"question", "wh_start"} <= flagged("What time does the concert start?")
    assert "thanks" in flagged("Thank you so much.") and "question" not in flagged("Thank you so much.")
    assert cue_vector("").shape == (N_CUES,) and not cue_vector("").any()


@pytest.mark.slow
def test_the_frozen_mpnet6_encoder_gives_unit_vectors_and_remembers_them() -> None:
    from guardian.detectors.intent.frozen import FROZEN_DIM, shared_frozen_encoder

    encoder = shared_frozen_encoder()
    v = encoder.encode(["Could you send me the report?", "Please send me the report.", "I love this song.", ""])
    assert v.shape == (4, FROZEN_DIM) and not v[3].any()
    assert np.allclose(np.linalg.norm(v[:3], axis=1), 1.0, atol=1e-3)
    assert v[0] @ v[1] > v[0] @ v[2]  # a request is nearer another request than a remark about music
    assert np.array_equal(encoder.encode(["Please send me the report."])[0], v[1])  # remembered, not re-run


@pytest.mark.slow
def test_a_deep_head_is_read_for_everyday_turns_and_survives_a_save_and_load(tmp_path: Path) -> None:
    """A deep head fitted here on 120 train-part rows, attached to a copy of the bundled model whose
    own deep head (round 4, docs/intent.md) is taken off first: with it the everyday blend moves."""
    from guardian.detectors.intent.domain import DeepHead, EverydayHead
    from guardian.detectors.intent.domain_train import fit_deep

    train = part_of(load_faceacts(EVERYDAY), "train")[:120]
    deep = fit_deep(train)
    assert deep.coef.shape[0] == len(deep.classes) and 0.0 < 1.0 - deep.tuned_share - deep.head_share <= 1.0
    shutil.copytree(bundled_artifact_dir(), tmp_path / "m")
    head = IntentModel.load(tmp_path / "m").everyday
    assert head is not None

    def save(folder: Path, with_deep: DeepHead | None) -> None:
        shutil.copytree(tmp_path / "m", folder)  # another folder: models are loaded once per path
        EverydayHead(classes=head.classes, coef=head.coef, intercept=head.intercept, word=head.word, side=head.side,
                     config=head.config, gate=head.gate, tuned_weight=head.tuned_weight,
                     abstain_below=head.abstain_below, meta=head.meta, tuned=head.tuned,
                     deep=with_deep).save(folder)

    save(tmp_path / "plain", None)
    save(tmp_path / "deep", deep)
    plain = IntentModel.load(tmp_path / "plain")
    assert plain.everyday is not None and plain.everyday.deep is None
    work = Conversation.from_pairs([("Ann", "Morning Tom."), ("Tom", "Morning."),
                                    ("Ann", "Send me the report by five today.")], id="work")
    before = IntentDetector(model_path=tmp_path / "plain").analyze(work).intents[0]
    again = IntentModel.load(tmp_path / "deep")
    assert again.everyday is not None and again.everyday.deep is not None
    assert np.array_equal(again.everyday.deep.coef, deep.coef) and again.everyday.deep.classes == deep.classes
    assert again.everyday.deep.tuned_below == deep.tuned_below
    after = IntentDetector(model_path=tmp_path / "deep").analyze(work).intents[0]
    assert after.score != before.score  # the deep head takes part in the everyday blend


@pytest.mark.slow
def test_a_gated_deep_head_reads_the_tuned_half_only_for_unsure_turns(tmp_path: Path) -> None:
    """Round 4 (docs/intent.md): with `tuned_below` the everyday tuned half is read only where the deep
    head is unsure; a turn it skips gets the deep head's blend, a turn it reads gets round 3's."""
    from dataclasses import replace

    from guardian.detectors.intent.domain_train import fit_deep
    from guardian.detectors.intent.frozen import shared_frozen_encoder
    from guardian.detectors.intent.train import utterances_in_context

    rows = load_faceacts(EVERYDAY)
    model = IntentModel.load(bundled_artifact_dir())
    assert model.everyday is not None
    deep = fit_deep(part_of(rows, "train")[:120]) if model.everyday.deep is None else model.everyday.deep
    dev = part_of(rows, "dev")
    first = dev[0].conversation_id
    utts = utterances_in_context([r for r in dev if r.conversation_id == first])[:6]

    def run(tuned_below: float) -> tuple[np.ndarray, int]:
        assert model.everyday is not None
        model.everyday.deep = replace(deep, tuned_share=0.2, head_share=0.0, tuned_below=tuned_below)
        model.everyday.frozen = shared_frozen_encoder()
        model.tuned_on_unsure = 0
        domain = ConversationDomain()
        p = np.vstack([model.predict_proba([u], domains=[domain])[0] for u in utts])
        return p, model.tuned_on_unsure

    always, read_always = run(1.0)  # round 3: the half on every turn, in parallel (not counted)
    never, read_never = run(1e-6)  # no turn unsure: the deep head's blend alone
    every, read_every = run(1.0 - 1e-6)  # every turn unsure: the half read after, as round 3 mixes it
    assert read_always == 0 and read_never == 0 and read_every == len(utts)
    np.testing.assert_allclose(every, always, atol=1e-5)
    assert not np.allclose(never, always, atol=1e-3)
    assert model.everyday is not None
    deep_top = model.everyday.deep_proba(utts, model.classes).max(1)
    middle = float(np.median(deep_top))
    gated, read = run(middle)
    unsure = deep_top < middle
    assert 0 < read < len(utts)
    assert read == int(unsure.sum())
    np.testing.assert_allclose(gated[unsure], always[unsure], atol=1e-5)
    np.testing.assert_allclose(gated[~unsure], never[~unsure], atol=1e-5)


def test_a_persuasion_halfs_probabilities_stay_out_of_an_everyday_turns_everyday_side() -> None:
    """Round 6 (docs/intent.md): a turn is routed by its conversation's g *before* it, so an everyday
    turn after a donation-like opener is read by a persuasion half; where the turn's own logit brings
    g back under .5, the everyday side is the head alone, not the head averaged with that half."""
    from guardian.detectors.intent.features import Utterance

    model = load_model()
    assert model.everyday is not None
    k = len(model.classes)
    utterance = Utterance("Can you book me a table for two at 7 pm?", "Ann", (("Tom", "Morning."),), True, 1)
    _, u_vecs, ctx_vecs = model.features([utterance])
    linear = np.full((1, k), 1.0 / k)
    half = np.eye(k)[[model.classes.index(FaceAct.OTHER)]]  # what a persuasion half says of everyday acts
    head = model.everyday.proba([utterance], u_vecs, ctx_vecs, model.classes)
    own = float(model.everyday.gate.logits(u_vecs)[0])
    assert own < -2.0  # a clearly everyday turn (measured -4.2)

    def blend(history: float, *, persuasion_half: bool) -> tuple[np.ndarray, float]:
        domain = ConversationDomain()
        domain.observe(history)
        assert not domain.everyday_so_far()  # routed to a persuasion half
        mix = model._mixer(linear, [utterance], u_vecs, ctx_vecs, [domain], routed=not persuasion_half)
        return mix(half), domain.persuasion

    p, g = blend(1.0, persuasion_half=True)  # a donation-like opener, then this turn: mean logit < 0
    assert g < 0.5
    tw = model.tuned_weight
    np.testing.assert_allclose(p, g * ((1 - tw) * linear + tw * half) + (1 - g) * head, atol=1e-6)
    assert not np.allclose(p, blend(1.0, persuasion_half=False)[0])
    # a turn that keeps the conversation persuasion-like is blended as before
    q, g = blend(20.0, persuasion_half=True)
    assert g >= 0.5
    np.testing.assert_allclose(q, blend(20.0, persuasion_half=False)[0], atol=1e-6)


@pytest.mark.slow
def test_the_distilled_turns_are_train_part_turns_of_conversations_the_set_never_drew() -> None:
    """Rounds 8-11's single-labelled turns may only teach: none of a dev/test conversation (threshold,
    held-out figures), none of a conversation the gold set drew (so gold and distilled labels never meet on
    a turn), no conversation in two rounds and no turn twice (a round draws conversations no earlier one did)."""
    import csv

    from guardian.corpora.conversations import split_of

    distilled = load_faceacts(DISTILLED)
    assert len(distilled) >= 1000
    assert {split_of(r.conversation_id) for r in distilled} == {"train"}
    assert not {r.conversation_id for r in distilled} & {r.conversation_id for r in load_faceacts(EVERYDAY)}
    assert len({r.face_act for r in distilled}) == 9  # all nine acts, none outside them (load_faceacts parses)
    with DISTILLED.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    rounds_of: dict[str, set[str]] = {}
    for row in rows:
        rounds_of.setdefault(row["conversation_id"], set()).add(row["round"])
    assert {r for rs in rounds_of.values() for r in rs} >= {"8", "9", "10", "11"}
    assert all(len(rs) == 1 for rs in rounds_of.values())
    assert len({(row["conversation_id"], row["turn"]) for row in rows}) == len(rows)


@pytest.mark.slow
def test_round_12_completes_conversations_rounds_8_to_11_drew_and_labels_no_turn_twice() -> None:
    """Round 12 (apart, so the bundled side's file stays as it was built from) may only teach: train-part
    turns, none of a gold conversation; the film and everyday conversations it shares with rounds 8-11 get
    only the turns those left out, and its other conversations (calls) are new."""
    import csv

    from guardian.corpora.conversations import split_of

    with DISTILLED.open(newline="", encoding="utf-8") as f:
        earlier = list(csv.DictReader(f))
    with DISTILLED_R12.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 1000 and {r["round"] for r in rows} == {"12"}
    assert len(load_faceacts(DISTILLED_R12)) == len(rows)  # every act one of the nine (load_faceacts parses)
    assert {split_of(r["conversation_id"]) for r in rows} == {"train"}
    assert not {r["conversation_id"] for r in rows} & {r.conversation_id for r in load_faceacts(EVERYDAY)}
    turns = [(r["conversation_id"], r["turn"]) for r in (*earlier, *rows)]
    assert len(set(turns)) == len(turns)
    shared = {r["conversation_id"] for r in rows} & {r["conversation_id"] for r in earlier}
    assert shared and all(c.startswith(("mm-", "dailydialog-")) for c in shared)
    assert all(r["conversation_id"].startswith("call") for r in rows if r["conversation_id"] not in shared)


def test_distilled_turns_of_a_dev_or_test_conversation_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import csv

    from guardian.corpora.conversations import split_of

    with EVERYDAY.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    leaking = tmp_path / "leak.csv"
    with leaking.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(fields or []))
        writer.writeheader()
        writer.writerows([r for r in rows if split_of(r["conversation_id"]) == "test"][:3])
    with pytest.raises(ValueError, match="distilled labels may only come from the train part"):
        distilled_train_rows(load_faceacts(leaking))
    assert main(["train-intent", "--everyday", str(EVERYDAY), "--distilled", str(leaking), "--everyday-half",
                 str(bundled_artifact_dir()), "--out", str(tmp_path / "m")]) == 2
    assert "may only come from the train part" in capsys.readouterr().err
    assert main(["train-intent", "--distilled", str(DISTILLED), "--out", str(tmp_path / "m")]) == 2
    assert "--distilled goes with --everyday" in capsys.readouterr().err
    assert main(["train-intent", "--everyday", str(EVERYDAY), "--distilled", str(tmp_path / "nope.csv"),
                 "--out", str(tmp_path / "m")]) == 2
    assert "file not found" in capsys.readouterr().err


@pytest.mark.slow
def test_threshold_only_keeps_every_weight_and_chooses_the_threshold_on_dev(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a runtime change (round 6: seven-bit int8 weights) the abstention threshold is chosen again
    on the dev part as this machine scores it; the weights stay byte for byte."""
    import csv

    from guardian.corpora.conversations import split_of
    from guardian.detectors.intent.train import predict_in_turn_order, utterances_in_context

    with EVERYDAY.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    dev_ids = sorted({r["conversation_id"] for r in rows if split_of(r["conversation_id"]) == "dev"})[:8]
    subset = tmp_path / "dev8.csv"
    with subset.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(fields or []))
        writer.writeheader()
        writer.writerows(r for r in rows if r["conversation_id"] in dev_ids)

    assert main(["train-intent", "--threshold-only", "--out", str(tmp_path / "m")]) == 2
    assert "--threshold-only goes with --everyday" in capsys.readouterr().err
    assert main(["train-intent", "--everyday", str(subset), "--threshold-only", "--out", str(tmp_path / "m")]) == 0
    assert "threshold chosen again, weights kept" in capsys.readouterr().out
    for name in ("model.json", "weights.npz", "tuned.npz", "escalation.npz", "everyday.npz"):
        assert (tmp_path / "m" / name).read_bytes() == (bundled_artifact_dir() / name).read_bytes(), name

    model = IntentModel.load(tmp_path / "m")
    assert model.everyday is not None
    meta = model.everyday.meta
    dev = load_faceacts(subset)
    order, probs = predict_in_turn_order(model, dev, utterances_in_context(dev), range(len(dev)))
    right = np.array([model.classes[int(j)] == dev[i].face_act for i, j in zip(order, probs.argmax(1), strict=True)])
    shown = probs.max(1) >= model.abstain_below
    assert model.abstain_below == meta["abstain_below"]
    assert meta["dev_accuracy"] == round(float(right.mean()), 4)
    assert meta["dev_shown_share"] == round(float(shown.mean()), 4)
    assert meta["dev_shown_precision"] == round(float(right[shown].mean()), 4)
