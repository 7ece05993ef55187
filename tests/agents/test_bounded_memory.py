"""The middleware's in-memory maps stay bounded (issue 20: cachetools LRU caches, same limits as before)."""

from __future__ import annotations

from langchain_core.messages import AIMessage

from guardian.agents._actions import Job
from guardian.agents._engine import ThreadMemory, Verdict
from guardian.agents._reviews import Reviews
from guardian.agents._screening import MessageTurn
from guardian.findings import Assessment


def _turn(key: str) -> MessageTurn:
    return MessageTurn(key, "User", f"text {key}")


def test_thread_memory_forgets_the_least_recently_used_thread() -> None:
    memory = ThreadMemory(max_threads=2, max_turns=3)
    memory.remember("a", [_turn("a1")])
    memory.remember("b", [_turn("b1")])
    memory.remember("a", [_turn("a2")])  # "a" is now the most recent
    memory.remember("c", [_turn("c1")])
    assert sorted(memory.threads()) == ["a", "c"]
    assert [t.key for t in memory.turns("a")] == ["a1", "a2"]


def test_thread_memory_keeps_the_latest_turns_and_replaces_by_key() -> None:
    memory = ThreadMemory(max_threads=5, max_turns=3)
    memory.remember("t", [_turn(str(i)) for i in range(5)])
    memory.remember("t", [MessageTurn("4", "User", "replaced")])
    assert [(t.key, t.text) for t in memory.turns("t")] == [("2", "text 2"), ("3", "text 3"), ("4", "replaced")]
    assert [t.key for t in memory.context("t", [_turn("5")])] == ["2", "3", "4", "5"]


def test_thread_memory_of_size_zero_remembers_nothing() -> None:
    memory = ThreadMemory(max_threads=0, max_turns=3)
    memory.remember("t", [_turn("1")])
    assert memory.threads() == []
    assert memory.context("t", [_turn("2")]) == [_turn("2")]


def _job(message_id: str) -> Job:
    return Job("output", "thread", 0, AIMessage(content="reply", id=message_id), [MessageTurn(message_id, "Assistant", "reply")])


def test_reviews_hold_a_bounded_number_of_verdicts_and_hand_each_back_once() -> None:
    reviews = Reviews(max_held=2)
    verdicts = {k: Verdict(Assessment(turn=i), True, None) for i, k in enumerate(("m1", "m2", "m3"))}
    for key, verdict in verdicts.items():
        reviews.hold(_job(key), verdict)
    assert len(reviews) == 2
    assert reviews.take(_job("m1")) is None  # the oldest went first
    assert reviews.take(_job("m3")) is verdicts["m3"]
    assert reviews.take(_job("m3")) is None  # handed back once: a later screen is a new one
