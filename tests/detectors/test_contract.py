"""The contract every registered detector passes, built-in or plug-in (one parametrised table)."""

from __future__ import annotations

import asyncio

import pytest

from guardian.conversation import Conversation
from guardian.detectors import registry
from guardian.findings import Assessment

DETECTORS = registry.names()

LONG = Conversation.from_pairs(
    [
        ("A" if i % 2 == 0 else "B", text)
        for i, text in enumerate(
            [
                "Where were you last night?",
                "I never said I'd be home. You're overreacting, as usual.",
                "You promised. I waited for hours.",
                "After everything I've done for you, this is how you treat me?",
                "I just want the truth.",
                "If you keep pushing me, you'll regret it. Know your place.",
            ]
            * 10
        )
    ],
    id="long",
)

CASES = {
    "empty": Conversation(id="empty"),
    "one_turn": Conversation.from_pairs([("A", "You always do this to me!")], id="one"),
    "long": LONG,
    "unicode": Conversation.from_pairs(
        [
            ("Zoë", "Tu es trop sensible 😤 — « arrête » ! 你总是这样。"),
            ("עמית", "אתה תמיד עושה את זה. You're too sensitive, e\u0301motionally."),
            ("Zoë", "\u200b\u00a0"),
            ("עמית", "İstanbul ǅ ß ﬁ… you made me do this!!!"),
        ],
        id="unicode",
    ),
    "blank_turn": Conversation.from_pairs([("A", "Hi"), ("B", "")], id="blank"),
}


def _check(name: str, conv: Conversation, assessment: Assessment) -> None:
    assert isinstance(assessment, Assessment)
    assert assessment.turn == (conv.last.index if conv.last else -1)
    assert name in assessment.detectors
    if assessment.probability is not None:
        assert 0.0 <= assessment.probability <= 1.0
    for finding in assessment.findings:
        assert 0.0 <= finding.score <= 1.0
        assert finding.detector == name
        for ev in finding.evidence:
            turn = conv.turn(ev.turn)  # evidence points into the window it was given
            assert turn.text[ev.start : ev.end] == ev.quote, "evidence must be verbatim"
    for intent in assessment.intents:
        conv.turn(intent.turn)
    if not conv.turns:
        assert assessment.findings == ()


@pytest.fixture(scope="module", params=DETECTORS)
def detector_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("case", sorted(CASES))
def test_contract(detector_name: str, case: str) -> None:
    detector = registry.create(detector_name)
    conv = CASES[case]
    window = conv.window(10) if case == "long" else conv
    _check(detector_name, window, detector.analyze(window))


def test_async_twin_agrees(detector_name: str) -> None:
    detector = registry.create(detector_name)
    window = LONG.window(10)
    sync = detector.analyze(window)
    result = asyncio.run(detector.aanalyze(window))
    _check(detector_name, window, result)
    assert [f.key for f in result.findings] == [f.key for f in sync.findings]


def test_every_turn_of_a_long_conversation(detector_name: str) -> None:
    detector = registry.create(detector_name)
    for turn in LONG.turns[:12]:
        window = LONG.upto(turn.index).window(10)
        _check(detector_name, window, detector.analyze(window))


def test_batch_agrees_with_one_at_a_time(detector_name: str) -> None:
    """`analyze_batch` (eval, whole files) gives each window the Assessment `analyze` would."""
    detector = registry.create(detector_name)
    windows = [CASES[case] for case in sorted(CASES)] + [LONG.window(10)]
    batch = detector.analyze_batch(windows)
    assert len(batch) == len(windows)
    for window, assessment in zip(windows, batch, strict=True):
        _check(detector_name, window, assessment)
        single = detector.analyze(window)
        assert assessment.decision == single.decision
        assert [f.key for f in assessment.findings] == [f.key for f in single.findings]
        if single.probability is not None:
            assert assessment.probability == pytest.approx(single.probability, abs=1e-5)
