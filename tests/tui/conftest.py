"""Build the real GuardianApp on a prepared session, with test detectors and a frozen latency clock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from guardian.conversation import Conversation
from guardian.detectors import registry
from guardian.findings import Finding
from guardian.monitor import Monitor
from guardian.tui.app import GuardianApp
from guardian.tui.similar import SimilarExamples
from guardian.watch import WatchOptions, prepare
from tests.monitor_fakes import EchoIntentDetector, SlowDetector, WordDetector

CHAT = """\
Jordan: Did you move my keys? I left them on the hook.
Mark: I never touched them. You are so stupid sometimes.
Jordan: Please don't talk to me like that.
Mark: Only a stupid person loses keys twice. Honestly.
Jordan: I am going to look again.
"""

AppFactory = Callable[..., GuardianApp]


def fake_similar(finding: Finding, window: Conversation) -> SimilarExamples:
    return SimilarExamples(("[Shaming or Belittlement] Person1: You can't do anything right.",))


class SlowWord(WordDetector):
    """A word detector that takes 300 ms, like a heavier model."""

    def analyze(self, window: Conversation):  # type: ignore[no-untyped-def]
        SlowDetector(0.3).analyze(window)
        return super().analyze(window)


class GatedWord(WordDetector):
    """A word detector that answers only when the test opens the gate (a detector 'still running')."""

    gate = threading.Event()

    def analyze(self, window: Conversation):  # type: ignore[no-untyped-def]
        if not self.gate.wait(timeout=10):
            raise TimeoutError("gate never opened")
        return super().analyze(window)


@pytest.fixture(autouse=True)
def _test_detectors() -> Iterator[None]:
    registry.register("word-test", WordDetector)
    registry.register("slow-word-test", SlowWord)
    registry.register("gated-word-test", GatedWord)
    registry.register("intent-test", EchoIntentDetector)
    GatedWord.gate.clear()
    yield
    GatedWord.gate.set()
    for name in ("word-test", "slow-word-test", "gated-word-test", "intent-test"):
        registry.unregister(name)


@pytest.fixture
def make_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AppFactory:
    monkeypatch.chdir(tmp_path)

    def make(
        *,
        text: str | None = CHAT,
        detectors: tuple[str, ...] = ("word-test",),
        frozen_clock: bool = True,
        **options: object,
    ) -> GuardianApp:
        file = None
        if text is not None:
            Path("chat.txt").write_text(text, encoding="utf-8")
            file = "chat.txt"
        opts = {"file": file, "instant": True, "detectors": detectors, "no_log": True, "export_dir": tmp_path}
        opts.update(options)
        clock = (lambda: 0.0) if frozen_clock else None

        def monitor(ds):  # type: ignore[no-untyped-def]
            if clock is None:
                return Monitor(ds, window=10, timeout_s=10)
            return Monitor(ds, window=10, timeout_s=10, clock=clock)

        session = prepare(WatchOptions(**opts), tui=True, monitor_factory=monitor)  # type: ignore[arg-type]
        return GuardianApp(session, similar=fake_similar)

    return make
