"""The key bindings, explained (F1 or ?)."""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("F1 or ?", "this help"),
    ("Enter on a card", "the tactic's definition, why it fired, similar labelled examples"),
    ("x on a card", "expand it to every score and the plain words of each label"),
    ("Tab / Shift+Tab", "move between transcript, findings and the chat box"),
    ("F3, p or space", "pause / resume the replay"),
    ("F2", "switch speaker (typed chat); type `Name: text` to speak as anyone, `/name NEW` to rename"),
    ("F4", "light / dark theme"),
    ("F5 or e", "export a report (HTML) of this session"),
    ("Ctrl+Q or q", "quit (the session log keeps everything: `guardian watch --resume LOG`)"),
)

INTRO = (
    "guardian reads the conversation turn by turn. After each turn the detectors look at "
    "the recent turns; highlighted words in the transcript are the quoted evidence of a "
    "finding, listed on the right with the tactic, a confidence bar, the vulnerability it "
    "targets and the detector that raised it. The risk line shows the conversation's risk "
    "over time (a flagged turn fades out over the following clean turns)."
)


def help_text() -> Group:
    """Plain Rich renderables: cheap to build, so opening help never stalls the screen."""
    keys = Table.grid(padding=(0, 2))
    keys.add_column(style="bold", no_wrap=True)
    keys.add_column()
    for key, what in KEYS:
        keys.add_row(key, what)
    return Group(
        Text("guardian watch\n", style="bold"),
        Text(INTRO + "\n"),
        keys,
        Text("\nEscape closes this help.", style="dim"),
    )


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,f1,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Static(help_text())
