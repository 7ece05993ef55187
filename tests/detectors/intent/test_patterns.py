"""Pressure patterns: the rules on hand-written conversations.

Two layers: the rules alone, fed hand-assigned face acts (fast, exact), and the
whole `intent` detector with the shipped model on the same kind of conversations
(slow): each pattern fires on a pressure conversation, none on a polite negotiation.
"""

from __future__ import annotations

import pytest

from guardian.conversation import Conversation
from guardian.detectors.intent.patterns import (
    CRITICISM_AFTER_REFUSAL,
    GUILT_APPEAL,
    PERSISTENT_PRESSURE,
    derive_patterns,
    patterns_at,
)
from guardian.findings import Intent
from guardian.taxonomy import FaceAct, Vulnerability

PRESSURE = [
    ("Sam", "Hi! Would you donate a few dollars to the shelter today?", FaceAct.HNEG_MINUS),
    ("Alex", "No thanks, I can't afford it right now.", FaceAct.SNEG_PLUS),
    ("Sam", "Come on, can you just give one dollar? Please?", FaceAct.HNEG_MINUS),
    ("Alex", "I said no. I really don't want to.", FaceAct.SNEG_PLUS),
    ("Sam", "Wow, you are really selfish and heartless.", FaceAct.HPOS_MINUS),
    ("Alex", "That's not fair.", FaceAct.OTHER),
    ("Sam", "You spend money on coffee every day, don't you? Children are starving while you sit there.",
     FaceAct.HPOS_MINUS),
]

POLITE = [
    ("Sam", "Hi! Would you like to donate to the shelter today?", FaceAct.HNEG_MINUS),
    ("Alex", "Sorry, not this time, money is tight this month.", FaceAct.SNEG_PLUS),
    ("Sam", "No problem at all, I completely understand.", FaceAct.HPOS_PLUS),
    ("Alex", "Thanks for understanding. What does the shelter do?", FaceAct.HNEG_MINUS),
    ("Sam", "It gives beds and meals to people who lost their homes.", FaceAct.SPOS_PLUS),
    ("Alex", "That sounds like a good cause.", FaceAct.HPOS_PLUS),
    ("Sam", "Thank you for listening, have a great day!", FaceAct.HPOS_PLUS),
]


def _conv(rows: list[tuple[str, str, FaceAct]], cid: str) -> tuple[Conversation, list[Intent]]:
    conv = Conversation.from_pairs([(s, t) for s, t, _ in rows], id=cid)
    intents = [
        Intent(turn=i, speaker=s, face_act=a, score=0.9, intention=a.general_intention, detector="intent")
        for i, (s, _, a) in enumerate(rows)
    ]
    return conv, intents


def _verbatim(conv: Conversation, findings: list) -> None:
    for f in findings:
        assert f.evidence
        for ev in f.evidence:
            assert conv.turn(ev.turn).text[ev.start : ev.end] == ev.quote


def test_persistent_pressure_fires_on_a_repeated_request() -> None:
    conv, intents = _conv(PRESSURE, "p")
    found = patterns_at(conv, intents, 2)
    assert [f.pattern for f in found] == [PERSISTENT_PRESSURE]
    f = found[0]
    assert f.speaker == "Sam"
    # a finding quotes its own turn only; the refusal it answers is named, not quoted
    assert [e.turn for e in f.evidence] == [2]
    assert f.evidence[0].quote.startswith("Come on, can you just give one dollar?")
    assert "refused at turn 1" in f.explanation
    _verbatim(conv, found)


def test_first_request_is_not_pressure() -> None:
    conv, intents = _conv(PRESSURE, "p")
    assert patterns_at(conv, intents, 0) == []


def test_criticism_after_refusal_fires() -> None:
    conv, intents = _conv(PRESSURE, "p")
    found = patterns_at(conv, intents, 4)
    assert [f.pattern for f in found] == [CRITICISM_AFTER_REFUSAL]
    assert [e.quote for e in found[0].evidence] == ["Wow, you are really selfish and heartless."]
    assert found[0].evidence[0].turn == 4 and "refused at turn 3" in found[0].explanation
    _verbatim(conv, found)


def test_guilt_appeal_fires_on_spending_and_suffering() -> None:
    conv, intents = _conv(PRESSURE, "p")
    found = {f.pattern: f for f in patterns_at(conv, intents, 6)}
    assert GUILT_APPEAL in found
    guilt = found[GUILT_APPEAL]
    assert guilt.evidence[-1].quote == "You spend money on coffee every day, don't you?"
    assert guilt.vulnerabilities == (Vulnerability.OVER_RESPONSIBILITY,)
    _verbatim(conv, list(found.values()))


def test_guilt_appeal_needs_hesitation_or_criticism() -> None:
    rows = [
        ("Sam", "Children are dying of hunger while you scroll your phone.", FaceAct.OTHER),
        ("Alex", "Oh, that's sad.", FaceAct.HPOS_PLUS),
    ]
    conv, intents = _conv(rows, "g")
    assert derive_patterns(conv, intents) == []
    rows[0] = (rows[0][0], rows[0][1], FaceAct.HPOS_MINUS)
    conv, intents = _conv(rows, "g")
    assert [f.pattern for f in derive_patterns(conv, intents)] == [GUILT_APPEAL]


def test_an_everyday_guilt_trip_makes_affection_the_price_of_compliance() -> None:
    rows = [
        ("Maya", "You said you'd pick me up at six.", FaceAct.HPOS_MINUS),
        ("Daniel", "If you really loved me, you would stop checking my phone.", FaceAct.HNEG_MINUS),
    ]
    conv, intents = _conv(rows, "love")
    found = derive_patterns(conv, intents)
    assert [f.pattern for f in found] == [GUILT_APPEAL]
    assert found[0].evidence[-1].quote == "If you really loved me, you would stop checking my phone."
    _verbatim(conv, found)
    unsure = [intents[0], intents[1].model_copy(update={"score": 0.34})]  # the act agrees, however unsure
    assert [(f.pattern, f.score) for f in derive_patterns(conv, unsure)] == [(GUILT_APPEAL, 0.5)]
    rows[1] = (rows[1][0], rows[1][1], FaceAct.OTHER)  # not pressing: only words, no act
    conv, intents = _conv(rows, "love")
    assert derive_patterns(conv, intents) == []


def test_nothing_fires_on_a_polite_negotiation() -> None:
    conv, intents = _conv(POLITE, "polite")
    assert derive_patterns(conv, intents) == []


def test_low_confidence_acts_do_not_count() -> None:
    conv, intents = _conv(PRESSURE, "p")
    weak = [i.model_copy(update={"score": 0.3}) for i in intents]
    assert derive_patterns(conv, weak) == []


def test_refusal_outside_horizon_is_forgotten() -> None:
    rows = PRESSURE[:2] + [("Sam", "Okay.", FaceAct.OTHER), ("Alex", "Yes.", FaceAct.OTHER)] * 5 + [PRESSURE[2]]
    conv, intents = _conv(rows, "h")
    assert patterns_at(conv, intents, len(rows) - 1) == []


def test_own_refusal_does_not_count() -> None:
    rows = [
        ("Sam", "Can you help me move on Saturday?", FaceAct.HNEG_MINUS),
        ("Sam", "I can't do it alone, I won't manage.", FaceAct.SNEG_PLUS),
        ("Sam", "Could you come at nine?", FaceAct.HNEG_MINUS),
    ]
    conv, intents = _conv(rows, "own")
    assert derive_patterns(conv, intents) == []


# --- the whole detector, real model -------------------------------------------------------------


@pytest.fixture(scope="module")
def detector():  # type: ignore[no-untyped-def]
    from guardian.detectors.intent.detector import IntentDetector

    return IntentDetector()


def _run(detector, rows: list[tuple[str, str, FaceAct]]) -> list:  # type: ignore[no-untyped-def]
    conv = Conversation.from_pairs([(s, t) for s, t, _ in rows])
    found = []
    for t in conv.turns:
        found.extend(detector.analyze(conv.upto(t.index)).findings)
    _verbatim(conv, found)
    return found


@pytest.mark.slow
def test_detector_fires_each_pattern_on_pressure(detector) -> None:  # type: ignore[no-untyped-def]
    patterns = {f.pattern for f in _run(detector, PRESSURE)}
    assert patterns == {PERSISTENT_PRESSURE, CRITICISM_AFTER_REFUSAL, GUILT_APPEAL}


@pytest.mark.slow
def test_detector_is_quiet_on_polite_negotiation(detector) -> None:  # type: ignore[no-untyped-def]
    assert _run(detector, POLITE) == []


def test_explicit_put_down_counts_as_criticism_even_if_the_model_misses_it() -> None:
    rows = [*PRESSURE[:4], ("Sam", "Wow. Honestly, you are so selfish.", FaceAct.HPOS_PLUS)]
    conv, intents = _conv(rows, "putdown")
    found = patterns_at(conv, intents, 4)
    assert [f.pattern for f in found] == [CRITICISM_AFTER_REFUSAL]
    assert found[0].evidence[-1].quote == "Honestly, you are so selfish."
    assert found[0].score == pytest.approx(0.6 * 0.9)
    # The same words without a preceding refusal are not this pattern.
    conv, intents = _conv(rows[4:], "alone")
    assert patterns_at(conv, intents, 0) == []
