"""The key bindings, explained (F1 or ?)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# guardian watch

guardian reads the conversation turn by turn. After each turn the detectors look at
the recent turns; **highlighted words** in the transcript are the quoted evidence of
a finding, listed on the right with the tactic, a confidence bar, the vulnerability
it targets and the detector that raised it. The risk line shows the conversation's
risk over time (a flagged turn fades out over the following clean turns).

| key | what it does |
|---|---|
| F1 or ? | this help |
| Enter on a finding | the tactic's definition, why it fired, similar labelled examples |
| Tab / Shift+Tab | move between transcript, findings and the chat box |
| F3, p or space | pause / resume the replay |
| F2 | switch speaker (typed chat); type `Name: text` to speak as anyone, `/name NEW` to rename |
| F4 | light / dark theme |
| F5 or e | export a report (HTML) of this session |
| Ctrl+Q or q | quit (the session log keeps everything: `guardian watch --resume LOG`) |

Press Escape to close.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,f1,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Markdown(HELP)
