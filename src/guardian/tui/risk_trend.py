"""The conversation's risk over time: a sparkline on a fixed 0..1 scale and the current value.

Textual's Sparkline scales to the data's own min and max, which would make a calm
conversation with risk 0.05 look as alarming as one at 0.95; risk needs an
absolute scale, so the bars are drawn here.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.widget import Widget

BLOCKS = " ▁▂▃▄▅▆▇█"
HIGH = 0.5


def sparkline(values: list[float], width: int) -> str:
    """One block character per turn (the latest `width` turns), height proportional to risk."""
    shown = values[-width:] if width > 0 else []
    return "".join(BLOCKS[round(max(0.0, min(1.0, v)) * (len(BLOCKS) - 1))] for v in shown)


class RiskTrend(Widget):
    DEFAULT_CSS = "RiskTrend { height: 1; }"
    COMPONENT_CLASSES: ClassVar[set[str]] = {"risk--label", "risk--low", "risk--high"}

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.values: list[float] = []

    def add(self, risk: float) -> None:
        self.values.append(risk)
        self.set_class(risk >= HIGH, "high")
        self.refresh()

    def render(self) -> Text:
        current = self.values[-1] if self.values else 0.0
        head = "risk "
        tail = f" {current:.2f}"
        width = max(0, self.size.width - len(head) - len(tail))
        text = Text(head, style=self.get_component_rich_style("risk--label"))
        for value, block in zip(self.values[-width:], sparkline(self.values, width), strict=True):
            text.append(block, style=self.get_component_rich_style("risk--high" if value >= HIGH else "risk--low"))
        text.append(" " * (width - min(width, len(self.values))))
        text.append(tail, style=self.get_component_rich_style("risk--high" if current >= HIGH else "risk--label"))
        return text
