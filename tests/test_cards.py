"""Findings belong to a turn: one card per flagged turn, quoting that turn only (issue 46)."""

from __future__ import annotations

from typing import ClassVar

from guardian.agents.tool_results import INJECTION_PATTERN
from guardian.analyze import assess_turns
from guardian.cards import card_for, turn_flagged
from guardian.conversation import Conversation
from guardian.detectors.base import Detector
from guardian.detectors.intent.patterns import (
    CRITICISM_AFTER_REFUSAL,
    GUILT_APPEAL,
    PERSISTENT_PRESSURE,
)
from guardian.detectors.keyphrases import PATTERN as KEY_PHRASE
from guardian.detectors.local.detector import SCAM_REQUEST
from guardian.findings import Assessment, Finding, Verdict
from guardian.grounding import ground_in_turn
from guardian.plain_words import plain_words
from guardian.taxonomy import Technique, Vulnerability
from tests.monitor_fakes import WordDetector

#: Like the bundled example: the same speaker's put-downs at turns 1 and 3, then talk that is not.
CHAT = Conversation.from_pairs(
    [
        ("Maya", "You said you'd pick me up at six."),
        ("Daniel", "I never said that. You are stupid."),
        ("Maya", "You texted me this morning."),
        ("Daniel", "Honestly, only a stupid person would wait."),
        ("Maya", "That is not fair."),
        ("Daniel", "Calm down."),
    ],
    id="c",
)


def test_an_assessment_reports_only_its_own_turns_findings() -> None:
    """WordDetector re-finds every earlier quote in its window, as the local model does: before
    issue 46 turn 3's assessment re-reported turn 1's quote, turn 5's both."""
    assessments = assess_turns(CHAT, [WordDetector()], window=10)
    for a in assessments:
        assert all(e.turn == a.turn for f in a.findings for e in f.evidence), a.turn
    assert [a.turn for a in assessments if a.findings] == [1, 3]
    # the earlier turn's finding is carried, not lost
    assert [e.turn for f in assessments[3].history for e in f.evidence] == [1]
    assert [e.turn for f in assessments[5].history for e in f.evidence] == [1, 3]


def test_one_card_per_flagged_turn_quoting_that_turn() -> None:
    assessments = assess_turns(CHAT, [WordDetector()], window=10)
    cards = [a.card for a in assessments if a.card is not None]
    assert [(c.turn, c.speaker) for c in cards] == [(1, "Daniel"), (3, "Daniel")]
    for card in cards:
        assert card.quote is not None and card.quote.turn == card.turn
        assert CHAT.turn(card.turn).text[card.quote.start : card.quote.end] == card.quote.quote
        assert card.tactics == ("Shaming or Belittlement",)
        assert card.vulnerabilities == (Vulnerability.LOW_SELF_ESTEEM,)


class _Repeating(Detector):
    """Flags the latest turn by the repetition rule, quoting it, with context findings on earlier turns."""

    name: ClassVar[str] = "repeating"

    def analyze(self, window: Conversation) -> Assessment:
        last = window.turns[-1]
        own = ground_in_turn(last, last.text.split(".")[0])
        assert own is not None
        findings = [
            Finding(technique=t, score=s, evidence=(own,), vulnerabilities=(Vulnerability.OVER_RESPONSIBILITY,),
                    detector=self.name)
            for t, s in ((Technique.DENIAL, 0.4), (Technique.ACCUSATION, 0.3), (Technique.EVASION, 0.12))
        ]
        earlier = ground_in_turn(window.turns[0], window.turns[0].text)
        assert earlier is not None
        findings.append(Finding(technique=Technique.INTIMIDATION, score=0.9, evidence=(earlier,), detector=self.name))
        verdict = Verdict(turn=last.index, score=0.76, threshold=0.9, sensitivity="medium", rule="repeated",
                          repeat_threshold=0.55, paired_with=1, paired_score=0.61)
        return Assessment(conversation_id=window.id, turn=last.index, probability=0.76, decision=True,
                          threshold=0.9, findings=tuple(findings), verdict=verdict, detectors=(self.name,))


def test_a_card_shows_two_tactics_at_most_and_says_why_it_fired() -> None:
    [*_, a] = assess_turns(Conversation(id="c", turns=CHAT.turns[:4]), [_Repeating()], window=10)
    card = a.card
    assert card is not None
    assert card.tactics == ("Denial", "Accusation")  # Evasion .12 is under the shown bar, kept in scores
    assert card.scores["Evasion"] == 0.12
    assert "Intimidation" not in card.scores  # turn 0's finding is history, not this card's
    assert [f.label for f in a.history] == ["Intimidation"]
    assert card.why == (
        "turn 3 scored .76, under the medium threshold .90 but over the repeat threshold .55, "
        "as Daniel's turn 1 did (.61): a second suspicious turn by the same speaker"
    )


def test_an_unflagged_turn_gets_no_card_even_in_a_flagged_window() -> None:
    verdict = Verdict(turn=4, score=0.1, threshold=0.9, rule="under")
    a = Assessment(turn=4, probability=0.76, decision=True, verdict=verdict)
    assert not turn_flagged(a)
    assert card_for(a, CHAT.turn(4)) is None


def test_every_label_has_plain_words_and_every_kind_steps() -> None:
    words = plain_words()
    for technique in Technique:
        assert words.label(technique.value)
    for vulnerability in Vulnerability:
        assert words.vulnerability(vulnerability)
    for pattern in (KEY_PHRASE, SCAM_REQUEST, PERSISTENT_PRESSURE, CRITICISM_AFTER_REFUSAL, GUILT_APPEAL,
                    INJECTION_PATTERN):
        assert words.label(pattern), pattern
    for kind in ("manipulation", "scam", "blocked"):
        assert 1 <= len(words.next_steps(kind)) <= 4  # type: ignore[arg-type]
    steps = " ".join(s for kind in ("manipulation", "scam", "blocked") for s in words.next_steps(kind))  # type: ignore[arg-type]
    assert not any(ch.isdigit() for ch in steps)  # no phone numbers: the user's locale is not known
    assert "you feel" not in steps.lower() and "you should feel" not in steps.lower()
    assert words.label("Denial") == "refuses to admit what they said or did, so that you doubt your own memory"
