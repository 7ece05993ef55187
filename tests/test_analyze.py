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
