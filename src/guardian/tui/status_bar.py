"""One line of state: source, replay state, detectors, last turn's latency, problems.

`note` says when the latest turn got no verdict ("not assessed: language fr"), so a
quiet transcript is never mistaken for a clean one.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from guardian.terminal_text import terminal_safe


class StatusBar(Static):
    source: reactive[str] = reactive("")
    state: reactive[str] = reactive("starting")
    detectors: reactive[str] = reactive("")
    latency_ms: reactive[float | None] = reactive(None)
    problem: reactive[str] = reactive("")
    note: reactive[str] = reactive("")

    def render(self) -> Text:
        """Plain text, not markup: the source and problems hold file names and input text."""
        parts = [self.state]
        if self.latency_ms is not None:
            parts.append(f"{self.latency_ms:.0f} ms/turn")
        parts.append(self.detectors or "no detectors")
        if self.note:
            parts.append(self.note)
        if self.problem:
            parts.append(f"⚠ {self.problem}")
        parts.append(self.source)
        return Text(terminal_safe(" · ".join(p for p in parts if p), one_line=True))
