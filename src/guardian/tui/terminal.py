"""Noticing that the terminal has gone (window closed, SSH dropped, tmux killed).

When the terminal hangs up without a SIGHUP reaching guardian (measured: `tmux kill-server`
with `make run` in the pane), Textual's input thread reads end-of-file in a tight loop and the
app, now invisible, burns a whole core for as long as it lives. A hung-up terminal refuses
`tcgetattr` (EIO) while a live one answers it, so the app polls that and quits; the session
log already holds every turn, so quitting loses nothing.
"""

from __future__ import annotations

import os
import sys


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
