"""Typing a conversation: who is speaking, and what they say.

F2 switches between the speakers; `Name: text` speaks as Name (adding them);
`/name NEW` renames the current speaker for the turns still to come.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Input, Label

from guardian.readers import parse_line


class ChatInput(Horizontal):
    DEFAULT_CSS = """
    ChatInput { height: 3; }
    ChatInput > Label { width: auto; padding: 1 1 0 1; }
    ChatInput > Input { width: 1fr; }
    """

    @dataclass
    class Said(Message):
        speaker: str
        text: str

    def __init__(self, speakers: list[str] | None = None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.speakers = list(speakers or ["A", "B"])
        self.current = 0
        self.history: list[str] = []

    @property
    def speaker(self) -> str:
        return self.speakers[self.current]

    def compose(self) -> ComposeResult:
        yield Label(self._label(), id="chat-speaker")
        yield Input(placeholder="type a turn and press Enter (F2: switch speaker, F1: help)", id="chat-text")

    def _label(self) -> str:
        return f"{self.speaker}:"

    def _refresh_label(self) -> None:
        self.query_one("#chat-speaker", Label).update(self._label())

    def switch_speaker(self) -> str:
        self.current = (self.current + 1) % len(self.speakers)
        self._refresh_label()
        return self.speaker

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        value = event.value.strip()
        event.input.clear()
        if not value:
            return
        if value.startswith("/name "):
            new = value.removeprefix("/name ").strip()
            if new:
                old = self.speakers[self.current]
                self.speakers[self.current] = new
                self.history = [new if name == old else name for name in self.history]
                self._refresh_label()
            return
        parsed = parse_line(value)
        if parsed is not None and parsed[1].strip():
            name, value = parsed[0], parsed[1].strip()
            if name not in self.speakers:
                self.speakers.append(name)
            self.current = self.speakers.index(name)
            self._refresh_label()
        self.post_message(self.Said(self.speaker, value))
        self.history.append(self.speaker)
        self._answer()

    def _answer(self) -> None:
        """Hand the floor to whoever spoke last before this speaker (a reply), else the next name."""
        others = [s for s in reversed(self.history) if s != self.speaker and s in self.speakers]
        if others:
            self.current = self.speakers.index(others[0])
            self._refresh_label()
        elif len(self.speakers) > 1:
            self.switch_speaker()
