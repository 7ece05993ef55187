"""The microphone line of `guardian listen`: input level, speech/silence, and mic state.

A user screening a live call needs to see at a glance that the microphone hears
anything at all (a muted or wrong device is the most common failure), and when
the VAD thinks someone is speaking.
"""

from __future__ import annotations

from textual.reactive import reactive
from textual.widgets import Static

FLOOR_DB = -60.0
WIDTH = 24


def bar(level_db: float, *, width: int = WIDTH) -> str:
    """A text bar for a dBFS level between FLOOR_DB (empty) and 0 dBFS (full)."""
    filled = round(width * min(1.0, max(0.0, (level_db - FLOOR_DB) / -FLOOR_DB)))
    return "█" * filled + "░" * (width - filled)


class LevelMeter(Static):
    DEFAULT_CSS = """
    LevelMeter {
        height: 1;
        background: $panel;
        color: $success;
        padding: 0 1;
    }
    """

    levels: reactive[tuple[float, ...]] = reactive((FLOOR_DB,))
    speech: reactive[bool] = reactive(False)
    state: reactive[str] = reactive("starting")
    device: reactive[str] = reactive("")

    def render(self) -> str:
        meters = "  ".join(f"{bar(level)} {level:5.0f} dB" for level in self.levels)
        voice = "speech" if self.speech else "silence"
        return f"{self.state} · {self.device} · {meters} · {voice}"
