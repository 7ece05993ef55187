"""The TUI driven by Pilot: replay, typing, pause, follow, finding details, export, responsiveness."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.widgets import Input, Static

from guardian.tui.finding_screen import FindingScreen
from guardian.tui.findings_panel import FindingsPanel
from guardian.tui.help_screen import HelpScreen
from guardian.tui.risk_trend import RiskTrend
from guardian.tui.status_bar import StatusBar
from guardian.tui.turn_view import TurnView
from tests.tui.conftest import AppFactory, GatedWord


async def _until(condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting for the app"
        await asyncio.sleep(0.02)


async def test_replay_shows_turns_highlighted_quotes_findings_and_risk(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await app.wait_until_done()
        await pilot.pause()
        views = list(app.query(TurnView))
        assert [v.turn.speaker for v in views] == ["Jordan", "Mark", "Jordan", "Mark", "Jordan"]
        assert [(e.turn, e.quote) for e in views[1].evidence] == [(1, "stupid")]
        assert [(e.turn, e.quote) for e in views[3].evidence] == [(3, "stupid")]
        assert "stupid" in str(views[1].render())
        panel = app.query_one(FindingsPanel)
        belittling = "Shaming or Belittlement"
        assert [(e.card.turn, e.card.speaker, e.card.tactics) for e in panel.cards] == [
            (3, "Mark", (belittling,)), (1, "Mark", (belittling,))]  # one card per flagged turn, newest first
        assert app.sub_title.startswith("Mark: 2 flagged turns (1, 3) since turn 1: Shaming or Belittlement.")
        assert len(app.query_one(RiskTrend).values) == 5
        assert app.query_one(StatusBar).state == "replay finished"


async def test_each_turn_shows_its_speakers_intent(make_app: AppFactory) -> None:
    app = make_app(detectors=("word-test", "intent-test"))
    async with app.run_test(size=(100, 30)) as pilot:
        await app.wait_until_done()
        await pilot.pause()
        views = list(app.query(TurnView))
        assert "presses the listener to do something (hneg- 0.70)" in str(views[0].render())
        assert "small talk" in str(views[1].render())
        assert app.query_one("#status", StatusBar).detectors == "word-test, intent-test"


async def test_typing_turns_switching_and_naming_speakers(make_app: AppFactory) -> None:
    app = make_app(text=None)
    async with app.run_test() as pilot:
        await pilot.press(*"You", "space", *"are", "space", *"stupid", "enter")
        await _until(lambda: len(app.query(TurnView)) == 1 and app.query_one(TurnView).evidence)
        await pilot.press("f2", "f2")  # back and forth: the next speaker is B again
        await pilot.press(*"ok", "enter")
        await pilot.press(*"Zoe:", "space", *"hello", "enter")
        await pilot.press(*"/name", "space", *"Bea", "enter")  # renames the speaker now up (B)
        await pilot.press(*"hi", "space", *"Zoe", "enter")
        await _until(lambda: len(app.query(TurnView)) == 4)
        await app.session.monitor.drain()
        turns = [(v.turn.speaker, v.turn.text) for v in app.query(TurnView)]
        assert turns == [("A", "You are stupid"), ("B", "ok"), ("Zoe", "hello"), ("Bea", "hi Zoe")]
        assert app.query_one("#chat-text", Input).value == ""
        assert len(app.query_one(FindingsPanel).cards) == 1


async def test_pause_holds_the_replay_and_resume_finishes_it(make_app: AppFactory) -> None:
    app = make_app(instant=False, speed=20.0)
    async with app.run_test() as pilot:
        await pilot.press("p")
        assert app.pacer.paused
        await asyncio.sleep(0.4)
        shown = len(app.query(TurnView))
        assert shown < 5
        assert "paused" in app.query_one(StatusBar).state
        await pilot.press("p")
        await app.wait_until_done()
        await pilot.pause()
        assert len(app.query(TurnView)) == 5


async def test_follow_mode_shows_lines_appended_to_the_file(make_app: AppFactory, tmp_path: Path) -> None:
    app = make_app(text="Jordan: hello\n", follow=True, instant=False)
    async with app.run_test():
        await _until(lambda: len(app.query(TurnView)) == 1)
        with (tmp_path / "chat.txt").open("a", encoding="utf-8") as f:
            f.write("Mark: you are stupid\n")
        await _until(lambda: len(app.query(TurnView)) == 2 and app.query(TurnView)[1].evidence)
        assert app.query_one(StatusBar).state == "following"


async def test_selecting_a_finding_shows_definition_why_and_similar_examples(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await app.wait_until_done()
        await pilot.pause()
        app.query_one(FindingsPanel).focus()
        await pilot.press("down", "enter")  # newest first: the second card is turn 1's
        await _until(lambda: isinstance(app.screen, FindingScreen))
        screen = app.screen
        assert isinstance(screen, FindingScreen) and screen.turn == 1
        await _until(lambda: "You can't do anything right" in str(screen.query_one("#finding-similar", Static).render()))
        body = str(screen.query_one("#finding-text", Static).render())
        assert "make others feel inferior" in body  # the taxonomy's definition
        assert "belittles the listener" in body  # the detector's explanation
        await pilot.press("escape")
        assert not isinstance(app.screen, FindingScreen)


async def test_export_writes_an_html_report(make_app: AppFactory, tmp_path: Path) -> None:
    app = make_app()
    async with app.run_test() as pilot:
        await app.wait_until_done()
        await pilot.pause()
        await pilot.press("f5")
        await pilot.pause()
    page = (tmp_path / "guardian-report-chat.html").read_text(encoding="utf-8")
    assert "<mark>stupid</mark>" in page and "Shaming or Belittlement" in page


async def test_help_and_theme_keys(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test() as pilot:
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        theme = app.theme
        await pilot.press("f4")
        assert app.theme != theme


async def test_the_ui_stays_responsive_while_a_detector_is_still_running(make_app: AppFactory) -> None:
    app = make_app(text=None, detectors=("gated-word-test",), frozen_clock=False)
    async with app.run_test() as pilot:
        await pilot.press(*"stupid", "enter")
        await _until(lambda: len(app.query(TurnView)) == 1)
        # The typed turn is on screen, and keys still work, while the detector has not answered.
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press(*"more", "enter")
        await _until(lambda: len(app.query(TurnView)) == 2)
        assert all(v.assessment is None for v in app.query(TurnView))
        assert not app.session.monitor.state(app.session.conversation_id).assessments
        GatedWord.gate.set()
        await _until(lambda: len(app.latencies) == 2 and app.latencies[1].assessment_on_screen_ms is not None)
        assert app.query(TurnView)[0].evidence
        for sample in app.latencies:
            assert sample.assessment_on_screen_ms is not None
            assert sample.turn_on_screen_ms < sample.assessment_on_screen_ms


async def test_a_resumed_session_shows_what_was_logged(make_app: AppFactory, tmp_path: Path) -> None:
    first = make_app(log=tmp_path / "s.jsonl", no_log=False)
    async with first.run_test():
        await first.wait_until_done()
    first.session.close()
    app = make_app(resume=tmp_path / "s.jsonl", no_log=False)
    async with app.run_test() as pilot:
        await app.wait_until_done()
        await pilot.pause()
        assert len(app.query(TurnView)) == 5  # nothing replayed twice
        assert len(app.query_one(FindingsPanel).cards) == 2


async def test_transcript_control_characters_are_shown_not_sent_to_the_terminal(make_app: AppFactory) -> None:
    """A turn holding `ESC ]0;PWNED BEL`, `ESC [2J` and a right-to-left override once retitled the
    window and cleared the screen; the TUI shows them as inert symbols, quotes still highlighted."""
    from guardian.terminal_text import is_terminal_safe
    from guardian.tui.findings_panel import describe

    hostile = "Jordan: hi\nMark: \x1b]0;PWNED\x07 you are \u202estupid\u202c \x1b[2J\x9b1m\r\n"
    app = make_app(text=hostile)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.wait_until_done()
        await pilot.pause()
        views = list(app.query(TurnView))
        assert views[1].turn.text.startswith("\x1b]0;PWNED")  # the transcript itself is kept exact
        shown = views[1].render()
        assert is_terminal_safe(shown.plain) and "PWNED" in shown.plain
        highlighted = [shown.plain[s.start : s.end] for s in shown.spans if s.start >= len("Mark: ")]
        assert "stupid" in highlighted
        panel = app.query_one(FindingsPanel)
        (entry,) = panel.cards
        assert is_terminal_safe(describe(entry.card).plain)
        assert is_terminal_safe(describe(entry.card, expanded=True).plain)
        panel.focus()
        await pilot.press("enter")
        await _until(lambda: isinstance(app.screen, FindingScreen))
        body = str(app.screen.query_one("#finding-text", Static).render())
        assert "stupid" in body and is_terminal_safe(body)


async def test_x_expands_a_card_to_every_score(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await app.wait_until_done()
        await pilot.pause()
        panel = app.query_one(FindingsPanel)
        panel.focus()
        assert "all scores" not in str(panel.get_option_at_index(0).prompt)
        await pilot.press("x")
        assert panel.expanded == {3}
        assert "all scores: Shaming or Belittlement .80" in str(panel.get_option_at_index(0).prompt)
        await pilot.press("x")
        assert panel.expanded == set()
