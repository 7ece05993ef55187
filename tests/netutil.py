"""Helpers for the few tests that run a real server on loopback."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 nobody is listening on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
