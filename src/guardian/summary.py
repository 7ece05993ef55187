"""The conversation in one line per speaker: flagged turns, tactics, since when, risk now (issue 46).

Why a module of its own: the end of `analyze`, its JSON, the reports and the TUI header each
once counted findings their own way (23 "findings" for seven turns, the count rising whenever
a window re-found an old quote). The summary is built from the cards only (at most one per
flagged turn, `guardian.cards`), so it cannot drift: harmless talk adds no card, and a turn is
counted once however many later windows still hold it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from guardian.conversation import Turn
from guardian.findings import FindingCard
from guardian.plain_words import number
from guardian.taxonomy import Vulnerability


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SpeakerSummary(_Frozen):
    """One speaker's record in the conversation so far."""

    speaker: str
    turns: int = Field(ge=0, description="turns this speaker said")
    flagged_turns: tuple[int, ...] = ()
    tactics: tuple[str, ...] = Field(default=(), description="the tactics shown on their cards, most frequent first")
    vulnerabilities: tuple[Vulnerability, ...] = ()
    since: int | None = Field(default=None, description="their first flagged turn")

    def line(self) -> str:
        if not self.flagged_turns:
            return f"{self.speaker}: no flagged turn"
        n = len(self.flagged_turns)
        which = ", ".join(str(t) for t in self.flagged_turns)
        tactics = f": {', '.join(self.tactics)}" if self.tactics else ""
        return f"{self.speaker}: {n} flagged turn{'s' if n > 1 else ''} ({which}) since turn {self.since}{tactics}"


class ConversationSummary(_Frozen):
    """Every speaker's record and the conversation's risk now (the monitor's running risk)."""

    conversation_id: str
    turns: int = Field(ge=0)
    risk: float = Field(ge=0.0, le=1.0, description="the conversation's risk after its latest turn")
    peak_risk: float = Field(ge=0.0, le=1.0)
    speakers: tuple[SpeakerSummary, ...] = ()

    @property
    def flagged(self) -> tuple[SpeakerSummary, ...]:
        """The speakers with flagged turns, the first to be flagged first."""
        return tuple(sorted((s for s in self.speakers if s.flagged_turns), key=lambda s: s.since or 0))

    def line(self) -> str:
        """One line for a header or the end of `analyze`."""
        who = "; ".join(s.line() for s in self.flagged) or "No flagged turn"
        return f"{who}. Risk now {number(self.risk)} (peak {number(self.peak_risk)}), {self.turns} turns."


def summarize(
    conversation_id: str, turns: Sequence[Turn], cards: Iterable[FindingCard], *, risk: float, peak_risk: float
) -> ConversationSummary:
    """The summary of `turns` from their cards (a card for a turn not in `turns` is ignored)."""
    by_speaker: dict[str, list[FindingCard]] = {t.speaker: [] for t in turns}
    known = {t.index for t in turns}
    for card in sorted(cards, key=lambda c: c.turn):
        if card.turn in known:
            by_speaker.setdefault(card.speaker, []).append(card)
    spoken = Counter(t.speaker for t in turns)
    speakers = []
    for speaker, own in by_speaker.items():
        tactics = Counter(label for c in own for label in c.tactics)
        vulns = Counter(v for c in own for v in c.vulnerabilities)
        speakers.append(SpeakerSummary(
            speaker=speaker,
            turns=spoken[speaker],
            flagged_turns=tuple(c.turn for c in own),
            tactics=tuple(label for label, _ in tactics.most_common()),
            vulnerabilities=tuple(v for v, _ in vulns.most_common()),
            since=own[0].turn if own else None,
        ))
    return ConversationSummary(
        conversation_id=conversation_id,
        turns=len(turns),
        risk=max(0.0, min(1.0, risk)),
        peak_risk=max(0.0, min(1.0, peak_risk)),
        speakers=tuple(speakers),
    )


__all__ = ["ConversationSummary", "SpeakerSummary", "summarize"]
