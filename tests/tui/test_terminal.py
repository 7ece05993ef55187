"""Noticing a terminal that hung up (the TUI would otherwise spin on end-of-file forever)."""

from __future__ import annotations

import io
import os
import pty

import pytest

from guardian.tui import terminal


def test_a_live_terminal_is_not_gone_and_a_hung_up_one_is() -> None:
    master, slave = pty.openpty()
    try:
        assert not terminal.terminal_gone(slave)
        os.close(master)  # what closing the window / killing tmux does to the terminal
        assert terminal.terminal_gone(slave)
    finally:
        os.close(slave)


def test_no_terminal_means_nothing_to_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.__stdin__", io.StringIO("piped"))
    assert terminal.controlling_fd() is None
    monkeypatch.setattr("sys.__stdin__", None)
    assert terminal.controlling_fd() is None


async def test_the_app_quits_when_its_terminal_hangs_up(make_app, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from guardian.tui import app as app_module

    master, slave = pty.openpty()
    monkeypatch.setattr(app_module, "controlling_fd", lambda: slave)
    monkeypatch.setattr(app_module.GuardianApp, "TERMINAL_CHECK_S", 0.05)
    app = make_app()
    try:
        async with app.run_test() as pilot:
            await app.wait_until_done()
            await pilot.pause(0.2)
            assert app.is_running
            os.close(master)
            for _ in range(100):
                if not app.is_running:
                    break
                await pilot.pause(0.05)
            assert not app.is_running
    finally:
        os.close(slave)


def test_the_watchdog_asks_the_app_to_exit_then_gives_up_if_it_is_stuck() -> None:
    """The backstop for an event loop blocked on a dead terminal (Textual's writer queue)."""
    import threading

    master, slave = pty.openpty()
    asked, stuck = threading.Event(), threading.Event()
    watch = terminal.HangupWatch(slave, on_hangup=asked.set, on_stuck=stuck.set, interval_s=0.02, grace_s=0.2)
    try:
        watch.start()
        assert not asked.wait(0.1)  # a live terminal: nothing happens
        os.close(master)
        assert asked.wait(2.0)
        assert stuck.wait(2.0)  # nobody called stop(): the app never finished
    finally:
        os.close(slave)


def test_the_watchdog_stands_down_when_the_app_ends_in_time() -> None:
    import threading

    master, slave = pty.openpty()
    stuck = threading.Event()
    watch = terminal.HangupWatch(slave, on_hangup=lambda: watch.stop(), on_stuck=stuck.set, interval_s=0.02, grace_s=0.3)
    try:
        watch.start()
        os.close(master)
        assert not stuck.wait(0.8)
    finally:
        os.close(slave)
