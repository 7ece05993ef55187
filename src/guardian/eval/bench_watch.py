"""`guardian bench --suite watch`: does the terminal UI stay responsive while a detector is slow?

Runs the real `GuardianApp` headless (Textual's `run_test`) in typed-chat mode with the
key-phrase matcher made as slow as a heavy model (it sleeps `delay_s` before each turn).
Per typed turn, from pressing Enter: when the turn is on screen, when its assessment
(highlight, findings) is on screen, and how late a 5 ms timer fires on the app's loop
meanwhile (how long the UI could not react). The first block of turns warms up; each
of `runs` further blocks gives a p50/p95, and the medians of those are reported.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from guardian.conversation import Conversation
from guardian.detectors.base import Detector
from guardian.eval.timing import Figures, percentile
from guardian.findings import Assessment

#: Registered while the suite runs, so `guardian watch`'s own loading path builds it.
DETECTOR_NAME = "keyphrases-delayed"
#: A phrase the key-phrase matcher quotes, so each turn's assessment shows as a highlight.
TYPED = "turn {i}: you are being too sensitive"


class DelayedKeyphrases(Detector):
    """The key-phrase matcher, `delay_s` slower per turn: a heavy model's latency, real findings."""

    name = DETECTOR_NAME
    description = "key phrases after a fixed delay (guardian bench --suite watch)"

    def __init__(self, *, delay_s: float) -> None:
        from guardian.detectors import registry

        self.inner = registry.create("keyphrases")
        self.delay_s = delay_s

    def warm_up(self) -> None:
        self.inner.warm_up()

    def analyze(self, window: Conversation) -> Assessment:
        time.sleep(self.delay_s)
        return self.inner.analyze(window)


def _block_figures(blocks: list[list[float]]) -> Figures:
    """Medians over blocks of each block's p50 and p95 (the first block, the warm-up, left out)."""
    measured = blocks[1:]
    return {
        "p50_ms": round(statistics.median(percentile(b, 0.5) for b in measured), 1),
        "p95_ms": round(statistics.median(percentile(b, 0.95) for b in measured), 1),
        "runs": len(measured),
        "items_per_run": len(measured[0]),
    }


async def _measure(runs: int, *, turns: int, delay_s: float) -> Figures:
    from textual.widgets import Input

    from guardian.detectors import registry
    from guardian.tui.app import GuardianApp
    from guardian.tui.turn_view import TurnView
    from guardian.watch import WatchOptions, prepare

    registry.register(DETECTOR_NAME, lambda: DelayedKeyphrases(delay_s=delay_s))
    try:
        session = prepare(WatchOptions(detectors=(DETECTOR_NAME,), no_log=True), tui=True)
    finally:
        registry.unregister(DETECTOR_NAME)
    app = GuardianApp(session)
    pilot_on_screen: list[list[float]] = []
    lags: list[list[float]] = []
    lag: list[float] = []
    stop = asyncio.Event()

    async def loop_lag() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            await asyncio.sleep(0.005)
            lag.append((time.perf_counter() - began) * 1000 - 5)

    def views() -> list[TurnView]:
        return list(app.screen.query(TurnView))

    async def shown(count: int) -> None:
        while len(views()) < count:
            await asyncio.sleep(0.002)

    async def assessed(index: int) -> None:
        while not views()[index].evidence:
            await asyncio.sleep(0.002)

    async with app.run_test(size=(100, 30)) as pilot:
        probe = asyncio.create_task(loop_lag())
        n = 0
        for _ in range(runs + 1):
            block: list[float] = []
            lag.clear()
            for _ in range(turns):
                app.query_one("#chat-text", Input).value = TYPED.format(i=n)
                began = time.perf_counter()
                await pilot.press("enter")
                await shown(n + 1)
                block.append((time.perf_counter() - began) * 1000)
                await assessed(n)
                n += 1
            pilot_on_screen.append(block)
            lags.append(list(lag) or [0.0])
        stop.set()
        await probe
    samples = [s for s in app.latencies if s.assessment_on_screen_ms is not None]
    by_block = [samples[i * turns : (i + 1) * turns] for i in range(runs + 1)]
    return {
        "detector": f"keyphrases + {delay_s * 1000:.0f} ms per turn",
        "turns_per_run": turns,
        "turn_on_screen": _block_figures([[s.turn_on_screen_ms for s in b] for b in by_block]),
        "assessment_on_screen": _block_figures([[s.assessment_on_screen_ms or 0.0 for s in b] for b in by_block]),
        "pilot_turn_on_screen": _block_figures(pilot_on_screen),
        "ui_loop_lag": _block_figures(lags),
        "note": "from Enter on a typed turn to the frame that shows it (GuardianApp.latencies); pilot_*: "
        "measured by the test pilot, its own waiting for the app included; ui_loop_lag: how late a 5 ms timer fired",
    }


def bench_watch(runs: int, *, turns: int = 10, delay_s: float = 0.3) -> Figures:
    """`guardian watch` input-to-screen latency with a detector that takes `delay_s` per turn."""
    return asyncio.run(_measure(runs, turns=turns, delay_s=delay_s))
