"""Noticing that the terminal has gone (window closed, SSH dropped, tmux killed).

When the terminal hangs up without a SIGHUP reaching guardian (measured: `tmux kill-server`
with `make run` in the pane), Textual's input thread reads end-of-file in a tight loop and the
app, now invisible, burns a whole core for as long as it lives. A hung-up terminal refuses
`tcgetattr` (EIO) while a live one answers it, so the app polls that and quits; the session
log already holds every turn, so quitting loses nothing. `HangupWatch` is the backstop for when
the event loop itself is stuck writing to the dead terminal.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable


def controlling_fd() -> int | None:
    """The terminal's file descriptor to watch, or None when guardian is not on a terminal."""
    stream = sys.__stdin__
    if stream is None:
        return None
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return None
    return fd if os.isatty(fd) else None


def terminal_gone(fd: int) -> bool:
    """True once the terminal behind `fd` has hung up (or the descriptor was closed)."""
    import termios

    try:
        termios.tcgetattr(fd)
    except (termios.error, OSError):
        return True
    return False


class HangupWatch:
    """A daemon thread that notices a hung-up terminal even when the app's event loop is stuck.

    Textual's writer thread dies on the first write to a hung-up terminal (EIO), after which
    its bounded queue fills and the next screen write blocks the event loop for good: measured
    with `tmux kill-server` under load, 1 run in 3-4 hung forever. So the check cannot live only
    in the event loop. On hang-up this thread calls `on_hangup` (ask the app to exit); if the
    process is still here `grace_s` later, it calls `on_stuck` (guardian: end the process — the
    session log is flushed per event, so every turn seen is already on disk).
    """

    def __init__(
        self,
        fd: int,
        *,
        on_hangup: Callable[[], None],
        on_stuck: Callable[[], None],
        interval_s: float = 0.25,
        grace_s: float = 3.0,
    ) -> None:
        self.fd = fd
        self.on_hangup = on_hangup
        self.on_stuck = on_stuck
        self.interval_s = interval_s
        self.grace_s = grace_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="guardian-hangup-watch", daemon=True)

    def start(self) -> HangupWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        """The app ended on its own: nothing left to watch."""
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            if terminal_gone(self.fd):
                break
        else:
            return
        # Never block this thread on the app: its loop may be the thing that is stuck.
        threading.Thread(target=self.on_hangup, name="guardian-hangup-exit", daemon=True).start()
        if not self._stopped.wait(self.grace_s):
            self.on_stuck()
