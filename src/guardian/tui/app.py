"""The `guardian watch` terminal app.

The app never runs a detector on its own thread: turns go to the monitor from
workers, detectors run in threads under the monitor, and the monitor's events
come back as messages. So typing, scrolling and pausing stay responsive while a
slow detector works, and the latency from a typed turn to the screen is measured
(`latencies`) rather than guessed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header

from guardian.events import AssessmentReady, ErrorRaised, Event, FindingRaised, TurnAdded
from guardian.findings import FindingCard
from guardian.report import ReportFormat, render
from guardian.summary import summarize
from guardian.terminal_text import terminal_safe
from guardian.tui.chat_input import ChatInput
from guardian.tui.finding_screen import FindingScreen
from guardian.tui.findings_panel import FindingsPanel
from guardian.tui.help_screen import HelpScreen
from guardian.tui.messages import FindingChosen, MonitorEvent
from guardian.tui.risk_trend import RiskTrend
from guardian.tui.similar import SimilarLookup, similar_examples
from guardian.tui.status_bar import StatusBar
from guardian.tui.terminal import controlling_fd, terminal_gone
from guardian.tui.transcript import Transcript
from guardian.watch import WatchSession
from guardian.watch_sources import Pacer


@dataclass(frozen=True, slots=True)
class LatencySample:
    """Milliseconds from pressing Enter on a typed turn to the turn, then its assessment, on screen."""

    turn: int
    turn_on_screen_ms: float
    assessment_on_screen_ms: float | None = None


class GuardianApp(App[None]):
    # Absolute, so that subclasses in other modules (e.g. the audio app) find it too.
    CSS_PATH = str(Path(__file__).with_name("guardian.tcss"))
    TITLE = "guardian"
    #: Seconds between checks that the terminal is still there (see guardian.tui.terminal).
    TERMINAL_CHECK_S: ClassVar[float] = 1.0
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]  # noqa: RUF012 - Textual declares it so
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1,question_mark", "help", "Help"),
        Binding("f2", "switch_speaker", "Speaker"),
        Binding("f3,p,space", "pause", "Pause"),
        Binding("f4", "toggle_theme", "Theme"),
        Binding("f5,e", "export", "Export"),
        Binding("ctrl+q,q", "quit", "Quit"),
    ]

    def __init__(self, session: WatchSession, *, similar: SimilarLookup = similar_examples) -> None:
        super().__init__()
        self.session = session
        self.similar = similar
        self._terminal_fd: int | None = None
        self.pacer = Pacer(interval=session.interval)
        self.events: list[Event] = []
        self.latencies: list[LatencySample] = []
        self.source_done = False
        self._typed_at: list[float] = []
        self._typed_turns: dict[int, float] = {}
        self._warned: set[tuple[str | None, str]] = set()
        self._peak = 0.0
        self._cards_seen = False
        self.sub_title = terminal_safe(session.source_label, one_line=True)
        self._unsubscribe = session.monitor.subscribe(self._forward)

    # --- layout ---------------------------------------------------------------------------------

    @property
    def chat_mode(self) -> bool:
        return self.session.make_source is None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◉")
        with Horizontal(id="body"):
            yield Transcript(id="transcript")
            with Vertical(id="side"):
                yield FindingsPanel(id="findings")
                yield RiskTrend(id="risk")
        yield StatusBar(id="status")
        if self.chat_mode:
            yield ChatInput(id="chat")
        yield Footer()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "switch_speaker":
            return self.chat_mode
        if action == "pause":
            return not self.chat_mode
        return True

    def on_mount(self) -> None:
        status = self.query_one(StatusBar)
        status.source = self.session.source_label
        status.detectors = ", ".join(self.session.monitor.detector_names)
        for problem in self.session.problems:
            self._show_event(problem)
        for event in self.session.restored:
            self._show_event(event)
        if self.chat_mode:
            self.query_one("#chat-text").focus()
        self._terminal_fd = controlling_fd()
        if self._terminal_fd is not None:
            self.set_interval(self.TERMINAL_CHECK_S, self._quit_if_terminal_gone)
        self.run_session()

    async def _quit_if_terminal_gone(self) -> None:
        if self._terminal_fd is not None and terminal_gone(self._terminal_fd):
            self._terminal_fd = None
            await self.action_quit()

    # --- the session --------------------------------------------------------------------------

    @work(group="session", exit_on_error=False)
    async def run_session(self) -> None:
        status = self.query_one(StatusBar)
        status.state = "resuming" if self.session.restored else "watching"
        await self.session.monitor.reassess_pending()
        if self.chat_mode:
            status.state = "typed chat"
            self.source_done = True
            return
        status.state = {"follow": "following", "stream": "reading"}.get(self.session.mode, "replaying")
        await self.session.pump(self.pacer)
        await self.session.monitor.drain()
        self.source_done = True
        status.state = "input ended" if self.session.mode == "stream" else "replay finished"

    async def wait_until_done(self) -> None:
        """For tests and benchmarks: the source is exhausted and every turn is assessed."""
        while not self.source_done:
            await asyncio.sleep(0.01)
        await self.session.monitor.drain()

    def _forward(self, event: Event) -> None:
        # Called by the monitor on this app's event loop; the handler runs as a message.
        self.post_message(MonitorEvent(event))

    def on_monitor_event(self, message: MonitorEvent) -> None:
        self._show_event(message.event)

    def _show_event(self, event: Event) -> None:
        self.events.append(event)
        transcript = self.query_one(Transcript)
        if isinstance(event, TurnAdded):
            transcript.add_turn(event.turn)
            typed = self._typed_at.pop(0) if event.turn.source == "typed" and self._typed_at else None
            if typed is not None:
                self._typed_turns[event.turn.index] = typed
                self.call_after_refresh(self._turn_on_screen, event.turn.index, typed)
        elif isinstance(event, FindingRaised):
            for evidence in event.finding.evidence:
                transcript.highlight(evidence)
        elif isinstance(event, AssessmentReady):
            transcript.assess(event.assessment, event.risk)
            card = event.assessment.card
            if card is not None:
                self.query_one(FindingsPanel).add_card(card, event.assessment.own_findings())
            self._summarize(event.assessment.turn, event.risk, card)
            self.query_one(RiskTrend).add(event.risk)
            status = self.query_one(StatusBar)
            status.latency_ms = event.assessment.latency_ms
            reason = event.assessment.not_assessed
            status.note = f"not assessed: {reason}" if reason is not None else ""
            typed = self._typed_turns.pop(event.assessment.turn, None)
            if typed is not None:
                self.call_after_refresh(self._assessment_on_screen, event.assessment.turn, typed)
        elif isinstance(event, ErrorRaised):
            what = event.detector or "input"
            self.query_one(StatusBar).problem = f"{what}: {event.kind}"
            if (event.detector, event.kind) not in self._warned:
                self._warned.add((event.detector, event.kind))
                self.notify(terminal_safe(f"{what}: {event.message}"), title=event.kind, severity="warning",
                            timeout=6, markup=False)

    def _summarize(self, turn: int, risk: float, card: FindingCard | None) -> None:
        """The per-speaker summary line in the header, from the panel's cards (`guardian.summary`)."""
        self._peak = max(self._peak, risk)
        if card is None and not self._cards_seen:
            return
        self._cards_seen = True
        turns = self.session.monitor.conversation(self.session.conversation_id).turns
        cards = [e.card for e in self.query_one(FindingsPanel).cards]
        summary = summarize(self.session.conversation_id, turns, cards, risk=risk, peak_risk=self._peak)
        self.sub_title = terminal_safe(f"{summary.line()}", one_line=True)

    def _turn_on_screen(self, index: int, typed: float) -> None:
        self.latencies.append(LatencySample(index, (time.perf_counter() - typed) * 1000))

    def _assessment_on_screen(self, index: int, typed: float) -> None:
        for i, sample in enumerate(self.latencies):
            if sample.turn == index:
                self.latencies[i] = LatencySample(
                    index, sample.turn_on_screen_ms, (time.perf_counter() - typed) * 1000
                )

    # --- typed chat --------------------------------------------------------------------------

    def on_chat_input_said(self, message: ChatInput.Said) -> None:
        self._typed_at.append(time.perf_counter())
        self.submit_typed(message.speaker, message.text)

    @work(group="typed")
    async def submit_typed(self, speaker: str, text: str) -> None:
        await self.session.monitor.submit(self.session.conversation_id, speaker, text, source="typed")

    # --- actions ---------------------------------------------------------------------------------

    def on_finding_chosen(self, message: FindingChosen) -> None:
        window = self.session.monitor.conversation(self.session.conversation_id)
        self.push_screen(
            FindingScreen(message.finding, message.turn, window.upto(message.turn), lookup=self.similar)
        )

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_switch_speaker(self) -> None:
        if self.chat_mode:
            self.query_one(ChatInput).switch_speaker()

    def action_pause(self) -> None:
        paused = self.pacer.toggle()
        status = self.query_one(StatusBar)
        if paused:
            status.state = "paused (p to resume)"
        elif not self.source_done:
            status.state = "replaying"

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_export(self) -> Path:
        path = self.export_report()
        self.notify(f"report written to {path}", title="export", timeout=8)
        return path

    def export_report(self, *, fmt: ReportFormat = ReportFormat.HTML) -> Path:
        suffix = {ReportFormat.HTML: "html", ReportFormat.MARKDOWN: "md", ReportFormat.JSON: "json"}[fmt]
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.session.conversation_id)
        path = self.session.export_dir / f"guardian-report-{safe}.{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(self.events, fmt=fmt, title=f"guardian report: {self.session.source_label}"),
                        encoding="utf-8")
        return path

    async def action_quit(self) -> None:
        self._unsubscribe()
        self.exit()
