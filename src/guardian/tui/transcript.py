"""The transcript pane: a scrolling column of TurnViews that follows the newest turn."""

from __future__ import annotations

from textual.containers import VerticalScroll

from guardian.conversation import Evidence, Turn
from guardian.findings import Assessment
from guardian.tui.turn_view import TurnView


class Transcript(VerticalScroll):
    """Keeps one TurnView per turn index; speakers get colour slots in order of appearance."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Transcript"
        self._views: dict[int, TurnView] = {}
        self._speakers: dict[str, int] = {}

    def add_turn(self, turn: Turn) -> TurnView:
        slot = self._speakers.setdefault(turn.speaker, len(self._speakers))
        view = TurnView(turn, speaker_slot=slot)
        self._views[turn.index] = view
        self.mount(view)
        self.scroll_end(animate=False)
        return view

    def view(self, index: int) -> TurnView | None:
        return self._views.get(index)

    def highlight(self, evidence: Evidence) -> None:
        view = self._views.get(evidence.turn)
        if view is not None:
            view.highlight(evidence)

    def assess(self, assessment: Assessment, risk: float) -> None:
        view = self._views.get(assessment.turn)
        if view is not None:
            view.assess(assessment, risk)
            self.scroll_end(animate=False)
