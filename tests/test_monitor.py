"""The monitor: ordering, de-duplication, failures, risk, resume, and many conversations at once."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from guardian.events import AssessmentReady, ErrorRaised, Event, FindingRaised, TurnAdded
from guardian.monitor import RISK_DECAY, Monitor
from tests.monitor_fakes import (
    AsyncCountingDetector,
    FailingDetector,
    LyingDetector,
    SlowDetector,
    WordDetector,
)

TURNS = [
    ("Ann", "You are stupid, you know that?"),
    ("Ben", "That is not fair."),
    ("Ann", "Only someone stupid would say that."),
    ("Ben", "I am leaving."),
]


def record(monitor: Monitor) -> list[Event]:
    events: list[Event] = []
    monitor.subscribe(events.append)
    return events


def kinds(events: list[Event]) -> list[str]:
    names = {TurnAdded: "turn", AssessmentReady: "assessment", FindingRaised: "finding", ErrorRaised: "error"}
    return [names[type(e)] for e in events]


async def test_added_turns_give_turn_then_findings_then_assessment() -> None:
    monitor = Monitor([WordDetector()], window=10, timeout_s=5)
    events = record(monitor)
    for speaker, text in TURNS:
        await monitor.add_turn("c", speaker, text)
    assert kinds(events) == [
        "turn", "finding", "assessment",
        "turn", "assessment",
        "turn", "finding", "assessment",
        "turn", "assessment",
    ]


async def test_queued_turns_show_at_once_and_are_assessed_in_order() -> None:
    monitor = Monitor([SlowDetector(0.05), WordDetector()], window=10, timeout_s=5, queue_size=2)
    events = record(monitor)
    for speaker, text in TURNS:
        await monitor.submit("c", speaker, text)
    # Every turn is already recorded (and shown) while the first assessments are pending.
    assert [e.turn.index for e in events if isinstance(e, TurnAdded)][:2] == [0, 1]
    await monitor.aclose()
    assert [e.turn.index for e in events if isinstance(e, TurnAdded)] == [0, 1, 2, 3]
    assessed = [(i, e.assessment.turn) for i, e in enumerate(events) if isinstance(e, AssessmentReady)]
    assert [turn for _, turn in assessed] == [0, 1, 2, 3]
    position = {e.turn.index: i for i, e in enumerate(events) if isinstance(e, TurnAdded)}
    assert all(position[turn] < i for i, turn in assessed)
    # A finding comes after the previous turn's assessment and before its own.
    bounds = [-1] + [i for i, _ in assessed]
    for i, e in enumerate(events):
        if isinstance(e, FindingRaised):
            assert bounds[e.turn] < i < bounds[e.turn + 1]


async def test_a_quote_already_alerted_is_not_raised_again() -> None:
    # The detector re-reports turn 0's quote in every later window; only new spans are alerted.
    monitor = Monitor([WordDetector(), WordDetector(name="word-twin")], window=10, timeout_s=5)
    events = record(monitor)
    for speaker, text in TURNS:
        await monitor.add_turn("c", speaker, text)
    raised = [(e.turn, e.finding.evidence[0].turn, e.finding.evidence[0].quote) for e in events if isinstance(e, FindingRaised)]
    assert raised == [(0, 0, "stupid"), (2, 2, "stupid")]
    last = monitor.state("c").assessments[3]
    assert last.findings == ()  # turn 3 says nothing new (issue 46): ...
    assert len(last.history) == 4  # ... and carries the window's earlier findings as history
    assert sum(e.new_findings for e in events if isinstance(e, AssessmentReady)) == 2


async def test_a_failing_and_a_slow_detector_are_reported_and_the_others_stand() -> None:
    monitor = Monitor([SlowDetector(2.0), FailingDetector(), WordDetector()], window=10, timeout_s=0.2)
    events = record(monitor)
    assessment = await monitor.add_turn("c", "Ann", "You are stupid.")
    errors = {(e.detector, e.kind) for e in events if isinstance(e, ErrorRaised)}
    assert errors == {("slow-test", "timeout"), ("failing-test", "error")}
    assert [f.detector for f in assessment.findings] == ["word-test"]
    assert {e.detector for e in assessment.errors} == {"slow-test", "failing-test"}
    assert "model file is corrupt" in next(e.message for e in assessment.errors if e.detector == "failing-test")
    assert assessment.latency_ms < 1500  # the timeout cut the 2 s detector short


def test_the_sync_path_has_the_same_timeouts_and_failures() -> None:
    monitor = Monitor([SlowDetector(2.0), FailingDetector(), WordDetector()], window=10, timeout_s=0.2)
    events = record(monitor)
    try:
        assessment = monitor.add_turn_sync("c", "Ann", "You are stupid.")
        monitor.add_turn_sync("c", "Ben", "Stop it.")
    finally:
        monitor.close()
    assert [f.detector for f in assessment.findings] == ["word-test"]
    assert {(e.detector, e.kind) for e in events if isinstance(e, ErrorRaised) and e.turn == 0} == {
        ("slow-test", "timeout"),
        ("failing-test", "error"),
    }
    assert [e.turn.index for e in events if isinstance(e, TurnAdded)] == [0, 1]


async def test_a_quote_not_in_the_transcript_is_dropped_and_reported() -> None:
    monitor = Monitor([LyingDetector()], window=10, timeout_s=5)
    events = record(monitor)
    assessment = await monitor.add_turn("c", "Ann", "Hello there")
    assert assessment.findings == ()
    assert not [e for e in events if isinstance(e, FindingRaised)]
    assert any(isinstance(e, ErrorRaised) and "not in the transcript" in e.message for e in events)


async def test_risk_keeps_the_peak_and_fades_over_clean_turns() -> None:
    monitor = Monitor([WordDetector(score=0.8)], window=1, timeout_s=5)
    for speaker, text in [("A", "you stupid"), ("B", "ok"), ("A", "fine"), ("B", "stupid!")]:
        await monitor.add_turn("c", speaker, text)
    history = monitor.state("c").risk_history
    assert history[0] == pytest.approx(0.8)
    assert history[1] == pytest.approx(0.8 * RISK_DECAY)
    assert history[2] == pytest.approx(0.8 * RISK_DECAY**2)
    assert history[3] == pytest.approx(0.8)
    assert monitor.risk("c") == pytest.approx(0.8)


async def test_a_broken_subscriber_does_not_stop_the_others() -> None:
    monitor = Monitor([WordDetector()], window=10, timeout_s=5)

    def broken(event: Event) -> None:
        raise ValueError("sink is full")

    monitor.subscribe(broken)
    events = record(monitor)
    await monitor.add_turn("c", "Ann", "stupid")
    assert kinds(events) == ["turn", "finding", "assessment"]


async def test_restore_then_resume_does_not_re_alert_and_assesses_what_was_missed() -> None:
    first = Monitor([WordDetector()], window=10, timeout_s=5)
    events = record(first)
    await first.add_turn("c", "Ann", "You are stupid")
    await first.add_turn("c", "Ben", "No")
    # A crash after turn 2 was logged but before its assessment: drop that assessment.
    await first.add_turn("c", "Ann", "stupid stupid")
    crashed = events[: max(i for i, e in enumerate(events) if isinstance(e, TurnAdded)) + 1]

    second = Monitor([WordDetector()], window=10, timeout_s=5)
    second.restore(crashed)
    replayed = record(second)
    assert second.state("c").unassessed() == [2]
    assert await second.reassess_pending() == 1
    await second.add_turn("c", "Ben", "stupid is as stupid does")
    raised = [(e.turn, e.finding.evidence[0].turn) for e in replayed if isinstance(e, FindingRaised)]
    assert raised == [(2, 2), (3, 3)]  # turn 0's quote was alerted before the crash
    assert [t.index for t in second.conversation("c").turns] == [0, 1, 2, 3]


async def test_restore_rejects_a_log_with_a_gap() -> None:
    monitor = Monitor([WordDetector()], window=10, timeout_s=5)
    events = record(monitor)
    for speaker, text in TURNS:
        await monitor.add_turn("c", speaker, text)
    turns = [e for e in events if isinstance(e, TurnAdded)]
    with pytest.raises(ValueError, match="follows"):
        Monitor([WordDetector()], window=10, timeout_s=5).restore([turns[0], turns[2]])


@pytest.mark.slow  # over ~5 s on a fresh 2-core host: the slow tier
async def test_many_conversations_concurrently_lose_nothing() -> None:
    """1,000 conversations x 20 turns through small bounded queues: every turn, in order, once."""
    detector = AsyncCountingDetector()
    monitor = Monitor([detector], window=5, timeout_s=30, queue_size=4, max_concurrency=128)
    turns: dict[str, list[int]] = defaultdict(list)
    texts: dict[str, list[str]] = defaultdict(list)
    assessed: dict[str, list[int]] = defaultdict(list)

    def sink(event: Event) -> None:
        if isinstance(event, TurnAdded):
            turns[event.conversation_id].append(event.turn.index)
            texts[event.conversation_id].append(event.turn.text)
        elif isinstance(event, AssessmentReady):
            assessed[event.conversation_id].append(event.assessment.turn)

    monitor.subscribe(sink)

    async def talk(n: int) -> None:
        for i in range(20):
            await monitor.submit(f"conv-{n}", "A" if i % 2 else "B", f"message {i} of {n}")

    await asyncio.gather(*(talk(n) for n in range(1000)))
    await monitor.aclose()
    assert len(turns) == 1000
    assert detector.calls == 20_000
    for n in range(1000):
        cid = f"conv-{n}"
        assert turns[cid] == list(range(20))
        assert assessed[cid] == list(range(20))
        assert texts[cid] == [f"message {i} of {n}" for i in range(20)]


async def test_submit_waits_when_the_queue_is_full() -> None:
    monitor = Monitor([SlowDetector(0.2)], window=10, timeout_s=5, queue_size=1)
    await monitor.submit("c", "A", "one")  # taken by the worker at once
    await asyncio.sleep(0.05)
    await monitor.submit("c", "A", "two")  # fills the queue
    third = asyncio.create_task(monitor.submit("c", "A", "three"))
    await asyncio.sleep(0.05)
    assert not third.done()  # back-pressure: the caller waits, nothing is dropped
    await third
    await monitor.aclose()
    assert [t.text for t in monitor.conversation("c").turns] == ["one", "two", "three"]


@pytest.mark.slow  # over ~5 s on a fresh 2-core host: the slow tier
async def test_each_turn_costs_its_window_not_the_whole_conversation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Recording a turn and cutting its window must not copy every earlier turn (which made a
    long conversation quadratic): count the turns put into Conversation objects."""
    from guardian.conversation import Conversation

    copied = [0]
    real_init = Conversation.__init__
    real_copy = Conversation.model_copy

    def counting_init(self: Conversation, **data: object) -> None:
        copied[0] += len(data.get("turns", ()))  # type: ignore[arg-type]
        real_init(self, **data)

    def counting_copy(self: Conversation, *, update: dict[str, object] | None = None, deep: bool = False) -> Conversation:
        copied[0] += len((update or {}).get("turns", ()))  # type: ignore[arg-type]
        return real_copy(self, update=update, deep=deep)

    monkeypatch.setattr(Conversation, "__init__", counting_init)
    monkeypatch.setattr(Conversation, "model_copy", counting_copy)
    monitor = Monitor([WordDetector()], window=10, timeout_s=5, queue_size=8)
    n = 2_000
    for i in range(n):
        await monitor.submit("long", "AB"[i % 2], f"turn {i} is stupid" if i % 7 == 0 else f"turn {i}")
    await monitor.drain()
    monitor_copied = copied[0]
    for i in range(n):
        monitor.add_turn_sync("sync", "A", f"turn {i}")
    await monitor.aclose()
    assert monitor_copied <= 12 * n  # the old append and upto copied n²/2 = 2 million
    assert copied[0] <= 24 * n
    assert [t.index for t in monitor.conversation("long").turns] == list(range(n))
    assert sorted(monitor.state("long").assessments) == list(range(n))
