"""`guardian analyze`'s turn loop: batched detectors, isolated failures, progress."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from guardian.analyze import BATCH, assess_turns
from guardian.conversation import Conversation
from guardian.detectors.base import Detector
from guardian.findings import Assessment


class _Fussy(Detector):
    """Batches always fail; one window (the one ending at turn `bad`) fails on its own too."""

    name: ClassVar[str] = "fussy"

    def __init__(self, bad: int) -> None:
        self.bad = bad
        self.batches = 0

    def analyze(self, window: Conversation) -> Assessment:
        last = window.turns[-1].index
        if last == self.bad:
            raise RuntimeError("boom")
        return Assessment(conversation_id=window.id, turn=last, probability=0.25, detectors=(self.name,))

    def analyze_batch(self, windows: Sequence[Conversation]) -> list[Assessment]:
        self.batches += 1
        raise ValueError("batch path broken")


class _Counting(Detector):
    name: ClassVar[str] = "counting"

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def analyze(self, window: Conversation) -> Assessment:  # pragma: no cover - the batch path is used
        raise AssertionError("analyze_batch should have been used")

    def analyze_batch(self, windows: Sequence[Conversation]) -> list[Assessment]:
        self.sizes.append(len(windows))
        return [Assessment(conversation_id=w.id, turn=w.turns[-1].index, detectors=(self.name,)) for w in windows]


def _conversation(n: int) -> Conversation:
    return Conversation.from_pairs([("A" if i % 2 else "B", f"turn number {i}") for i in range(n)], id="c")


def test_a_failing_window_costs_only_its_own_verdict() -> None:
    conv = _conversation(10)
    results = assess_turns(conv, [_Fussy(bad=4), _Counting()], window=3)
    assert [a.turn for a in results] == list(range(10))
    assert [bool(a.errors) for a in results] == [i == 4 for i in range(10)]
    assert "boom" in results[4].errors[0].message
    assert results[3].probability == 0.25
    assert set(results[4].detectors) >= {"counting"}


def test_windows_go_to_detectors_in_batches_with_progress() -> None:
    conv = _conversation(2 * BATCH + 5)
    counting = _Counting()
    seen: list[int] = []
    results = assess_turns(conv, [counting], window=10, progress=seen.append)
    assert counting.sizes == [BATCH, BATCH, 5]
    assert seen == [BATCH, 2 * BATCH, 2 * BATCH + 5]
    assert len(results) == len(conv.turns)


def test_assessing_every_turn_costs_linear_time() -> None:
    """Each turn's window is cut without copying the turns before it (a 100,000-turn
    transcript never finished when it was)."""
    from tests.monitor_fakes import WordDetector
    from tests.test_conversation import CountingTurns, long_conversation

    n = 5_000
    conversation = long_conversation(n)
    assessments = assess_turns(conversation, [WordDetector()], window=10)
    assert [a.turn for a in assessments] == list(range(n))
    assert CountingTurns.read <= 20 * n  # the old `upto(i).window(w)` read n²/2 = 12.5 million
