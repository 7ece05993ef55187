"""One card per flagged turn: the unit a person reads (issue 46).

A detector reports every flagged turn of its window, so before cards the same quote came back
at each later turn under a new label. The runner keeps only the assessed turn's findings as
new (`Assessment.findings`; earlier turns' go to `history`), and this module turns them into
at most one card: the speaker, the one or two tactics worth showing, the quote from that turn,
the vulnerability it targets, and why it fired, in plain words. Pure functions of an
assessment and its turn, so the monitor, `analyze`, the reports and the TUI all show the same.
"""

from __future__ import annotations

from guardian.conversation import Evidence, Turn
from guardian.findings import Assessment, Finding, FindingCard, Verdict
from guardian.plain_words import number, plain_words
from guardian.taxonomy import Vulnerability

#: A second tactic is shown only from this score up (the technique heads' scores are spread over
#: eleven labels, so the top one of a flagged turn is often .2-.4; a second at .12 is noise to a
#: reader). Every score stays in the card's `scores`.
SHOWN_CONFIDENCE = 0.25
#: At most this many tactics on a card.
MAX_SHOWN = 2
#: Supporting evidence, not a tactic: shown as a tactic only when nothing else was found.
SUPPORTING = frozenset({"key_phrase"})
SCAM = "scam_request"


def turn_flagged(assessment: Assessment) -> bool:
    """Whether the assessed turn itself is flagged: the deciding detector's verdict on it when it
    gave one, else the detectors' decision backed by a finding on this turn."""
    if assessment.not_assessed is not None:
        return False
    if assessment.verdict is not None and assessment.verdict.turn == assessment.turn:
        return assessment.verdict.flagged
    return assessment.decision and any(f.turn == assessment.turn for f in assessment.findings)


def card_for(assessment: Assessment, turn: Turn) -> FindingCard | None:
    """The card of `turn` (the assessed one), or None when the turn itself is not flagged."""
    if turn.index != assessment.turn:
        raise ValueError(f"turn {turn.index} is not the assessed turn {assessment.turn}")
    if not turn_flagged(assessment):
        return None
    own = [f for f in assessment.own_findings() if f.turn == turn.index]
    scores: dict[str, float] = {}
    for f in own:
        scores[f.label] = max(f.score, scores.get(f.label, 0.0))
    verdict = assessment.verdict
    scam = SCAM in scores or (verdict is not None and verdict.rule in ("scam", "scam_request"))
    ranked = sorted(scores, key=lambda label: (label != SCAM if scam else False, -scores[label]))
    tactics = [label for label in ranked if label not in SUPPORTING] or ranked[:1]
    shown = tactics[:1] + [label for label in tactics[1:MAX_SHOWN] if scores[label] >= SHOWN_CONFIDENCE]
    top = next((f for f in sorted(own, key=lambda f: -f.score) if shown and f.label == shown[0]), None)
    score = verdict.score if verdict is not None else max(scores.values(), default=0.0)
    return FindingCard(
        turn=turn.index,
        speaker=turn.speaker,
        score=score,
        kind="scam" if scam else "manipulation",
        tactics=tuple(shown),
        scores=scores,
        quote=_quote(top, own, turn.index),
        vulnerabilities=_vulnerabilities(top, assessment),
        why=why(verdict, turn=turn.index, speaker=turn.speaker, score=score),
    )


def _quote(top: Finding | None, own: list[Finding], turn: int) -> Evidence | None:
    """The top tactic's quote from this turn, else any finding's quote from this turn."""
    for finding in ([top] if top is not None else []) + own:
        for evidence in finding.evidence:
            if evidence.turn == turn:
                return evidence
    return None


def _vulnerabilities(top: Finding | None, assessment: Assessment) -> tuple[Vulnerability, ...]:
    """The top tactic's targeted vulnerabilities, strongest first by the assessment's scores, at most two."""
    if top is None:
        return ()
    return tuple(sorted(top.vulnerabilities, key=lambda v: -assessment.vulnerabilities.get(v, 0.0))[:2])


def why(verdict: Verdict | None, *, turn: int, speaker: str, score: float) -> str:
    """The decision in words, with the numbers it compared ("turn 3 scored .93, over the medium
    threshold .90"), never a bare number against an invisible rule."""
    words = plain_words().why
    if verdict is None or not verdict.flagged:
        return words["decision"].format(turn=turn, score=number(score))
    return words[verdict.rule].format(
        turn=turn,
        speaker=speaker,
        score=number(verdict.score),
        threshold=number(verdict.threshold),
        sensitivity=verdict.sensitivity or "configured",
        repeat=number(verdict.repeat_threshold) if verdict.repeat_threshold is not None else "?",
        other=verdict.paired_with if verdict.paired_with is not None else "?",
        other_score=number(verdict.paired_score) if verdict.paired_score is not None else "?",
    )


def split_by_turn(findings: tuple[Finding, ...], *, turn: int) -> tuple[tuple[Finding, ...], tuple[Finding, ...]]:
    """(the findings that belong to `turn` or quote nothing, those about earlier turns)."""
    own = tuple(f for f in findings if f.turn is None or f.turn == turn)
    return own, tuple(f for f in findings if f.turn is not None and f.turn != turn)


__all__ = ["MAX_SHOWN", "SHOWN_CONFIDENCE", "card_for", "split_by_turn", "turn_flagged", "why"]
