"""One line of state: source, replay state, detectors, last turn's latency, problems.

`note` says when the latest turn got no verdict ("not assessed: language fr"), so a
quiet transcript is never mistaken for a clean one.
"""

from __future__ import annotations

from textual.reactive import reactive
from textual.widgets import Static


class StatusBar(Static):
    source: reactive[str] = reactive("")
    state: reactive[str] = reactive("starting")
    detectors: reactive[str] = reactive("")
    latency_ms: reactive[float | None] = reactive(None)
    problem: reactive[str] = reactive("")
    note: reactive[str] = reactive("")

    def render(self) -> str:
        parts = [self.state]
        if self.latency_ms is not None:
            parts.append(f"{self.latency_ms:.0f} ms/turn")
        parts.append(self.detectors or "no detectors")
        if self.note:
            parts.append(self.note)
        if self.problem:
            parts.append(f"⚠ {self.problem}")
        parts.append(self.source)
        return " · ".join(p for p in parts if p)
