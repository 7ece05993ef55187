"""One line of state: source, replay state, detectors, last turn's latency, problems."""

from __future__ import annotations

from textual.reactive import reactive
from textual.widgets import Static


class StatusBar(Static):
    source: reactive[str] = reactive("")
    state: reactive[str] = reactive("starting")
    detectors: reactive[str] = reactive("")
    latency_ms: reactive[float | None] = reactive(None)
    problem: reactive[str] = reactive("")

    def render(self) -> str:
        parts = [self.source, self.state, f"detectors: {self.detectors or '—'}"]
        if self.latency_ms is not None:
            parts.append(f"last turn {self.latency_ms:.0f} ms")
        if self.problem:
            parts.append(f"⚠ {self.problem}")
        return " · ".join(p for p in parts if p)
