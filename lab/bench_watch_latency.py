"""Input-to-screen latency of `guardian watch` with a 300 ms detector (a benchmark, prints JSON).

Runs the real GuardianApp headless (Textual's run_test) in typed-chat mode with one
detector that sleeps 300 ms per turn and then flags a word. For each typed turn it
records, from pressing Enter: when the turn is on screen, when its assessment
(highlight, findings, risk) is on screen, and how long a key press (F1: help
screen) takes to show while the detector is still busy.

    .venv/bin/python lab/bench_watch_latency.py [--turns 20] [--delay 0.3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 1),
        "p95": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 1),
        "max": round(ordered[-1], 1),
    }


async def main(turns: int, delay: float) -> dict[str, object]:
    os.environ.setdefault("GUARDIAN_DATA_DIR", tempfile.mkdtemp(prefix="guardian-bench-"))
    from tests.monitor_fakes import WordDetector
    from textual.widgets import Input

    from guardian.conversation import Conversation
    from guardian.detectors import registry
    from guardian.tui.app import GuardianApp
    from guardian.tui.turn_view import TurnView
    from guardian.watch import WatchOptions, prepare

    def views(app: GuardianApp) -> list[TurnView]:
        return list(app.screen.query(TurnView))

    class SlowWord(WordDetector):
        name = "slow-word"

        def analyze(self, window: Conversation):  # type: ignore[no-untyped-def]
            time.sleep(delay)
            return super().analyze(window)

    registry.register("slow-word", SlowWord)
    session = prepare(WatchOptions(detectors=("slow-word",), no_log=True), tui=True)
    app = GuardianApp(session)
    on_screen: list[float] = []
    assessed: list[float] = []
    lags: list[float] = []
    stop = asyncio.Event()

    async def loop_lag() -> None:
        """How late a 5 ms timer fires on the app's loop: how long the UI could not react."""
        while not stop.is_set():
            began = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append((time.perf_counter() - began) * 1000 - 5)

    async with app.run_test(size=(100, 30)) as pilot:
        probe = asyncio.create_task(loop_lag())

        async def until(condition, since: float) -> float:  # type: ignore[no-untyped-def]
            while not condition():
                await asyncio.sleep(0.002)
            return (time.perf_counter() - since) * 1000

        for i in range(turns):
            app.query_one("#chat-text", Input).value = f"turn {i}: you are stupid"
            began = time.perf_counter()
            await pilot.press("enter")
            on_screen.append(await until(lambda n=i: len(views(app)) == n + 1, began))
            assessed.append(await until(lambda n=i: bool(views(app)) and views(app)[n].evidence != [], began))
        stop.set()
        await probe
        internal = [s for s in app.latencies if s.assessment_on_screen_ms is not None]
    return {
        "benchmark": "guardian watch input-to-screen latency (typed chat, Textual run_test, headless)",
        "detector_delay_ms": delay * 1000,
        "turns": turns,
        "note": "app_*: from the submitted turn to the frame that shows it (GuardianApp.latencies); "
        "pilot_*: from Pilot's Enter key press, including Pilot's own waiting for the app to idle",
        "app_turn_on_screen_ms": _summary([s.turn_on_screen_ms for s in internal]),
        "app_assessment_on_screen_ms": _summary([s.assessment_on_screen_ms or 0.0 for s in internal]),
        "pilot_turn_on_screen_ms": _summary(on_screen),
        "pilot_assessment_on_screen_ms": _summary(assessed),
        "ui_loop_lag_ms": _summary(lags),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.3)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.turns, args.delay)), indent=2))
