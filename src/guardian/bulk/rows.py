"""The rows of a results table: one per conversation, optionally one per turn.

Rows are what a run promises to write whichever engine runs it, so they hold no
timings (a latency differs run to run) and are compared as plain data in tests.
Findings keep the detector's own fields, so `guardian report` can turn them back
into `Finding`s and highlight their quotes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from guardian.conversation import Conversation
from guardian.findings import Assessment, Finding


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Score(_Row):
    """A technique's or vulnerability's score (a list of these, not a dict: Parquet columns keep one type)."""

    name: str
    score: float


class QuotedTurn(_Row):
    """A turn that a finding quotes, kept with the row so a report can show the quote in place."""

    turn: int
    speaker: str
    text: str


class ConversationRow(_Row):
    """One conversation's verdict: the aggregate of its turns' assessments.

    The conversation is flagged when any turn is (harmless talk around it does not
    dilute it); `probability` is the most suspicious turn's; the manipulator is the
    first flagged turn's. `status` is "error" when the conversation could not be read
    or assessed at all (`errors` says why); detector errors on single turns leave the
    status "ok" and are listed in `errors`.
    """

    id: str
    status: Literal["ok", "error"] = "ok"
    label: str | None = None
    turns: int = 0
    decision: bool = False
    probability: float | None = None
    first_flagged_turn: int | None = None
    manipulator: str | None = None
    techniques: tuple[Score, ...] = ()
    vulnerabilities: tuple[Score, ...] = ()
    findings: tuple[Finding, ...] = ()
    quoted_turns: tuple[QuotedTurn, ...] = ()
    not_assessed_turns: int = 0
    detectors: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


class TurnRow(_Row):
    """One turn's assessment (`--per-turn`)."""

    conversation_id: str
    turn: int
    speaker: str
    text: str
    decision: bool = False
    probability: float | None = None
    manipulator: str | None = None
    techniques: tuple[Score, ...] = ()
    vulnerabilities: tuple[Score, ...] = ()
    findings: tuple[Finding, ...] = ()
    not_assessed: str | None = None
    errors: tuple[str, ...] = ()


class Screened(_Row):
    """What one conversation produced: its row and, with `--per-turn`, its turns' rows."""

    row: ConversationRow
    turns: tuple[TurnRow, ...] = ()


def _scores(scores: dict[str, float]) -> tuple[Score, ...]:
    """Highest first, then by name, so equal inputs give equal rows."""
    return tuple(Score(name=k, score=v) for k, v in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0])))


def _distinct(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """Each finding once (a quote stays in the windows after the turn that raised it): the first
    raised, with the highest score any window gave it."""
    best: dict[tuple[object, ...], Finding] = {}
    for f in findings:
        key = (*f.key, f.detector)
        if key not in best or f.score > best[key].score:
            best[key] = f if key not in best else best[key].model_copy(update={"score": f.score})
    return tuple(best.values())


def _error_text(assessment: Assessment) -> list[str]:
    return [f"turn {assessment.turn}: {e.detector} {e.kind}: {e.message}" for e in assessment.errors]


def conversation_row(
    conversation: Conversation,
    assessments: Sequence[Assessment],
    *,
    label: str | None,
    detectors: Sequence[str],
) -> ConversationRow:
    """The conversation's row from its per-turn assessments (as `assess_turns` returns them)."""
    flagged = [a for a in assessments if a.decision]
    probs = [a.probability for a in assessments if a.probability is not None]
    techniques: dict[str, float] = {}
    vulnerabilities: dict[str, float] = {}
    for a in flagged:
        for t, s in a.techniques.items():
            techniques[t.value] = max(s, techniques.get(t.value, 0.0))
        for v, s in a.vulnerabilities.items():
            vulnerabilities[v.value] = max(s, vulnerabilities.get(v.value, 0.0))
    findings = _distinct(f for a in assessments for f in (*a.findings, *a.history))  # every turn's, once
    quoted = sorted({e.turn for f in findings for e in f.evidence})
    by_index = {t.index: t for t in conversation.turns}
    return ConversationRow(
        id=conversation.id,
        label=label,
        turns=len(conversation.turns),
        decision=bool(flagged),
        probability=max(probs) if probs else None,
        first_flagged_turn=flagged[0].turn if flagged else None,
        manipulator=next((a.manipulator for a in flagged if a.manipulator), None),
        techniques=_scores(techniques),
        vulnerabilities=_scores(vulnerabilities),
        findings=findings,
        quoted_turns=tuple(
            QuotedTurn(turn=i, speaker=by_index[i].speaker, text=by_index[i].text) for i in quoted if i in by_index
        ),
        not_assessed_turns=sum(1 for a in assessments if a.not_assessed is not None),
        detectors=tuple(detectors),
        errors=tuple(dict.fromkeys(e for a in assessments for e in _error_text(a))),
    )


def turn_rows(conversation: Conversation, assessments: Sequence[Assessment]) -> tuple[TurnRow, ...]:
    return tuple(
        TurnRow(
            conversation_id=conversation.id,
            turn=turn.index,
            speaker=turn.speaker,
            text=turn.text,
            decision=a.decision,
            probability=a.probability,
            manipulator=a.manipulator,
            techniques=_scores({t.value: s for t, s in a.techniques.items()}),
            vulnerabilities=_scores({v.value: s for v, s in a.vulnerabilities.items()}),
            findings=a.findings,
            not_assessed=a.not_assessed,
            errors=tuple(_error_text(a)),
        )
        for turn, a in zip(conversation.turns, assessments, strict=True)
    )


def error_row(conversation_id: str, message: str, *, label: str | None = None) -> ConversationRow:
    """The row of a conversation that could not be read or assessed: never a lost conversation."""
    return ConversationRow(id=conversation_id, status="error", label=label, errors=(message,))
