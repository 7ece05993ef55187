"""The findings panel: one card per flagged turn, newest first (issue 46).

Each card shows the speaker, the one or two tactics worth showing with a confidence bar, the
quote from that turn and what it targets, as `guardian analyze` prints it (`card_view`); `x`
expands the highlighted card to every score and the plain words of each label, Enter or a
click opens the details of its top finding. Findings that flag no turn (a key phrase alone)
stay in the transcript's highlights and the session log, not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from guardian.card_view import BAR_WIDTH, card_text, confidence_bar
from guardian.findings import Finding, FindingCard
from guardian.tui.messages import FindingChosen

__all__ = ["BAR_WIDTH", "CardEntry", "FindingsPanel", "confidence_bar", "describe"]

#: Quotes longer than this are cut in the narrow panel (the expanded card shows them whole).
QUOTE_CHARS = 120


@dataclass(frozen=True, slots=True)
class CardEntry:
    """A card and the findings of its turn (the details screen opens the top one)."""

    card: FindingCard
    findings: tuple[Finding, ...]

    @property
    def top(self) -> Finding | None:
        shown = self.card.tactics[0] if self.card.tactics else None
        ranked = sorted(self.findings, key=lambda f: (f.label != shown, -f.score))
        return ranked[0] if ranked else None


def describe(card: FindingCard, *, expanded: bool = False) -> Text:
    """A card in a few short lines, so it fits the 80-column layout's narrow panel."""
    return card_text(card, expanded=expanded, quote_chars=QUOTE_CHARS)


class FindingsPanel(OptionList):
    """An OptionList of cards, newest first; `x` expands or folds the highlighted one."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("x", "expand", "Expand card")]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Flagged turns"
        self.border_subtitle = "x expands"
        self.cards: list[CardEntry] = []
        self.expanded: set[int] = set()

    def add_card(self, card: FindingCard, findings: tuple[Finding, ...] = ()) -> None:
        """Show `card` on top; a newer card of the same turn (a resumed session) replaces the old."""
        following = self.highlighted in (None, 0)
        self.cards = [CardEntry(card, findings), *(e for e in self.cards if e.card.turn != card.turn)]
        self._rebuild()
        self.border_title = f"Flagged turns ({len(self.cards)})"
        if following:  # keep the newest in view unless the user is reading an older one
            self.highlighted = 0
        elif self.highlighted is not None:
            self.highlighted = min(len(self.cards) - 1, self.highlighted + 1)

    def _rebuild(self) -> None:
        highlighted = self.highlighted
        self.clear_options()
        self.add_options(
            Option(describe(e.card, expanded=e.card.turn in self.expanded), id=f"card-{e.card.turn}")
            for e in self.cards
        )
        if highlighted is not None and self.cards:
            self.highlighted = min(highlighted, len(self.cards) - 1)

    def action_expand(self) -> None:
        if self.highlighted is None or not self.cards:
            return
        turn = self.cards[self.highlighted].card.turn
        self.expanded ^= {turn}
        self._rebuild()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        entry = self.cards[event.option_index]
        if entry.top is not None:
            self.post_message(FindingChosen(entry.top, entry.card.turn))
