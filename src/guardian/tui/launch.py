"""Where a prepared session meets its app: `guardian watch` and `guardian listen` start here.

`guardian.watch` and `guardian.audio.listen` build sessions (source, detectors, monitor,
log) and run them headless; the Textual apps in `guardian.tui` display a session. This
module sits above both and wires one to the other, so the session modules never import
an app and the apps import sessions only: the graph points one way (issue 20).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import IO, TYPE_CHECKING, Any

from guardian.errors import GuardianError
from guardian.events import AssessmentReady, Event
from guardian.terminal_text import terminal_safe
from guardian.tui.terminal import HangupWatch, controlling_fd
from guardian.watch import WatchOptions, WatchSession, prepare, run_headless

if TYPE_CHECKING:  # the apps (Textual) and audio load only when used: headless runs skip them
    from textual.app import App

    from guardian.audio.listen import ListenOptions


def _reattach_terminal() -> IO[bytes]:
    """`… | guardian watch -` with a TUI: keep the pipe for turns, give the TUI the terminal's keyboard."""
    data_fd = os.dup(0)
    tty = os.open("/dev/tty", os.O_RDONLY)
    os.dup2(tty, 0)
    os.close(tty)
    return os.fdopen(data_fd, "rb", buffering=0)


class _Metrics:
    """Counts each assessed turn of a session in guardian's metrics (`guardian.telemetry`)."""

    def __init__(self, surface: str) -> None:
        from guardian.telemetry import Telemetry

        self.surface = surface
        self.telemetry = Telemetry()

    def __call__(self, event: Event) -> None:
        if isinstance(event, AssessmentReady):
            assessment = event.assessment
            self.telemetry.record(assessment, surface=self.surface, direction="turn", flagged=assessment.decision)


def serve_metrics_on(port: int | None) -> None:
    """`--metrics-port`: serve Prometheus metrics on 127.0.0.1:PORT/metrics (before the slow start,
    so a port in use is said at once)."""
    if port is None:
        return
    if not 0 < port < 65536:
        raise GuardianError(f"--metrics-port must be a port number from 1 to 65535, not {port}")
    from guardian.telemetry import serve_metrics

    try:
        serve_metrics(port)
    except OSError as exc:
        raise GuardianError(f"cannot serve metrics on port {port} ({exc.strerror or exc})") from None


def run_watch(options: WatchOptions, *, metrics_port: int | None = None) -> int:
    """The CLI entry of `guardian watch`: JSON Lines when asked or when stdout is not a terminal, else the TUI."""
    headless = options.headless or not sys.stdout.isatty()
    stdin: IO[bytes] | None = None
    if not headless and options.file == "-":
        try:
            stdin = _reattach_terminal()
        except OSError:
            headless = True  # no terminal to type into: fall back to JSON Lines
    serve_metrics_on(metrics_port)
    session = prepare(options, tui=not headless, stdin=stdin)
    if metrics_port is not None:
        session.monitor.subscribe(_Metrics("watch"))
    if headless:
        return asyncio.run(run_headless(session))
    from guardian.tui.app import GuardianApp

    return run_tui(GuardianApp(session), session)


def run_tui(app: App[Any], session: WatchSession) -> int:
    """Run a session's TUI to the end, then close the session and say where its log is."""
    fd = controlling_fd()
    watch = None
    if fd is not None:

        def ask_to_exit() -> None:
            try:
                app.call_from_thread(app.exit)
            except RuntimeError:  # the app already stopped
                pass

        def give_up() -> None:
            # The terminal is gone and the app is stuck writing to it: every event is already
            # flushed to the session log, so end here (128 + SIGHUP, as a hang-up would).
            os._exit(129)

        watch = HangupWatch(fd, on_hangup=ask_to_exit, on_stuck=give_up).start()
    try:
        app.run()
    finally:
        if watch is not None:
            watch.stop()
        session.close()
    if session.log is not None:
        print(f"session log: {terminal_safe(str(session.log.path), one_line=True)}", file=sys.stderr)
    return 0


def run_listen(options: ListenOptions, *, headless: bool, metrics_port: int | None = None) -> int:
    """The CLI entry of `guardian listen`: JSON Lines when asked or when stdout is not a terminal, else the TUI."""
    from guardian.audio.listen import prepare_listen, run_listen_headless

    headless = headless or not sys.stdout.isatty()
    serve_metrics_on(metrics_port)
    session = prepare_listen(options)
    if metrics_port is not None:
        session.monitor.subscribe(_Metrics("listen"))
    if headless:
        return asyncio.run(run_listen_headless(session))
    from guardian.tui.listen_app import ListenApp

    return run_tui(ListenApp(session), session)
