"""One turn of the transcript: speaker in their colour, evidence spans highlighted, intent below."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.widget import Widget

from guardian.conversation import Evidence, Turn
from guardian.findings import Assessment
from guardian.terminal_text import terminal_safe

#: Speakers cycle through this many colours (styled in guardian.tcss, so themes restyle them).
SPEAKER_COLOURS = 4


class TurnView(Widget):
    """Renders from its data on every refresh, so a theme change recolours it."""

    DEFAULT_CSS = "TurnView { height: auto; }"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        *(f"turn--speaker-{i}" for i in range(SPEAKER_COLOURS)),
        "turn--highlight",
        "turn--intent",
        "turn--risk",
    }

    def __init__(self, turn: Turn, *, speaker_slot: int) -> None:
        super().__init__(id=f"turn-{turn.index}", classes="turn")
        self.turn = turn
        self.speaker_slot = speaker_slot % SPEAKER_COLOURS
        self.evidence: list[Evidence] = []
        self.assessment: Assessment | None = None
        self.risk: float | None = None

    def highlight(self, evidence: Evidence) -> None:
        if evidence.turn == self.turn.index and evidence not in self.evidence:
            self.evidence.append(evidence)
            self.add_class("flagged")
            self.refresh(layout=True)

    def assess(self, assessment: Assessment, risk: float) -> None:
        self.assessment = assessment
        self.risk = risk
        self.refresh(layout=True)

    @property
    def flagged(self) -> bool:
        """Quoted evidence in this turn, or a verdict on it that cites no quote."""
        if self.evidence:
            return True
        a = self.assessment
        return a is not None and a.decision and any(not f.evidence for f in a.findings)

    def render(self) -> Text:
        style = self.get_component_rich_style
        text = Text()
        speaker = terminal_safe(self.turn.speaker, one_line=True)
        text.append(f"{speaker}: ", style=style(f"turn--speaker-{self.speaker_slot}"))
        body = Text(terminal_safe(self.turn.text))  # same length: the evidence spans still fit
        for e in self.evidence:
            body.stylize(style("turn--highlight"), e.start, e.end)
        text.append_text(body)
        if self.flagged:
            text.append(f"  ⚑ {self.risk or 0.0:.2f}", style=style("turn--risk"))
        if self.assessment is not None and self.assessment.not_assessed is not None:
            reason = terminal_safe(self.assessment.not_assessed, one_line=True)
            text.append(f"  (not assessed: {reason})", style=style("turn--intent"))
        for intent in self.assessment.intents if self.assessment is not None else ():
            if intent.turn == self.turn.index and not intent.abstained:
                intention = terminal_safe(intent.intention, one_line=True)
                text.append(f"\n  ↳ {intention} ({intent.face_act.value} {intent.score:.2f})",
                            style=style("turn--intent"))
        return text
