"""`guardian listen` in the terminal: the `watch` app plus a level meter and the mic state.

Everything else (transcript, findings, risk trend, reports) is the watch app's;
turns arrive from the audio pipeline through the same monitor.
"""

from __future__ import annotations

from textual.app import ComposeResult

from guardian.audio.listen import AudioWatchSession
from guardian.audio.pipeline import (
    AudioError,
    AudioEvent,
    LevelMeasured,
    MicStateChanged,
    TurnHeard,
)
from guardian.tui.app import GuardianApp
from guardian.tui.level_meter import LevelMeter
from guardian.tui.status_bar import StatusBar


class ListenApp(GuardianApp):
    def __init__(self, session: AudioWatchSession) -> None:
        super().__init__(session)
        self.audio_session = session
        self.heard: list[TurnHeard] = []
        session.on_audio = self.on_audio_event

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, StatusBar):
                yield LevelMeter(id="level")
            yield widget

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pause":
            return False  # a live call cannot be paused; the recording keeps its own time
        return super().check_action(action, parameters)

    def on_audio_event(self, event: AudioEvent) -> None:
        """Called on the app's event loop by the session's pump for every audio event."""
        meter = self.query_one(LevelMeter)
        if isinstance(event, LevelMeasured):
            meter.levels = event.levels_db
            meter.speech = event.speech
        elif isinstance(event, MicStateChanged):
            meter.state = event.state
            meter.device = event.source
        elif isinstance(event, AudioError):
            meter.state = "error"
            self.query_one(StatusBar).problem = event.message
        elif isinstance(event, TurnHeard):
            self.heard.append(event)
