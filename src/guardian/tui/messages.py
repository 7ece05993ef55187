"""Messages the TUI passes around (custom events as dataclass messages, posting's habit)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from guardian.events import Event
from guardian.findings import Finding


@dataclass
class MonitorEvent(Message):
    """A monitor event delivered to the app's message queue."""

    event: Event


@dataclass
class FindingChosen(Message):
    """The user selected a finding in the panel."""

    finding: Finding
    turn: int
