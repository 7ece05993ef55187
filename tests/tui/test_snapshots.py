"""Snapshots of the main screens (pytest-textual-snapshot; update with --snapshot-update)."""

from __future__ import annotations

from textual.pilot import Pilot

from tests.tui.conftest import AppFactory


async def _replayed(pilot: Pilot) -> None:
    await pilot.app.wait_until_done()  # type: ignore[attr-defined]
    await pilot.pause()


async def _finding_open(pilot: Pilot) -> None:
    await _replayed(pilot)
    pilot.app.query_one("#findings").focus()
    await pilot.press("enter")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def test_main_screen_80x24(snap_compare, make_app: AppFactory) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=_replayed)


def test_main_screen_wide_light(snap_compare, make_app: AppFactory) -> None:  # type: ignore[no-untyped-def]
    async def light(pilot: Pilot) -> None:
        await _replayed(pilot)
        await pilot.press("f4")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(130, 32), run_before=light)


def test_finding_details(snap_compare, make_app: AppFactory) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(100, 30), run_before=_finding_open)


def test_help_screen(snap_compare, make_app: AppFactory) -> None:  # type: ignore[no-untyped-def]
    async def help_open(pilot: Pilot) -> None:
        await _replayed(pilot)
        await pilot.press("f1")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=help_open)


def test_typed_chat(snap_compare, make_app: AppFactory) -> None:  # type: ignore[no-untyped-def]
    async def typed(pilot: Pilot) -> None:
        await pilot.press(*"Ann:", "space", *"you", "space", *"are", "space", *"stupid", "enter")
        await pilot.press(*"no", "enter")
        await pilot.app.session.monitor.drain()  # type: ignore[attr-defined]
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(make_app(text=None), terminal_size=(80, 24), run_before=typed)


def test_findings_panel_with_an_expanded_card(snap_compare, make_app: AppFactory) -> None:  # type: ignore[no-untyped-def]
    async def expanded(pilot: Pilot) -> None:
        await _replayed(pilot)
        pilot.app.query_one("#findings").focus()
        await pilot.press("x")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(130, 32), run_before=expanded)
