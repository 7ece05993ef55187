"""Bounded agent state: compact records, capped; the full Assessment only on the message.

Numbers stated here (a 200-turn thread, one reply in ten flagged, policy="warn"):
guardian keeps 50 records under 16 KB, adds under 512 bytes per message of the thread,
and the whole serialised checkpoint stays under 300 KB (the same thread unguarded is
about 100 KB; measured 225 KB guarded).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from guardian.agents import GuardianMiddleware
from guardian.agents._screening import assessment_of
from guardian.agents._state import CappedRecords
from guardian.agents.middleware import assessments
from tests.agents.conftest import Lines, ScriptedDetector

TURNS = 200


def _thread(lines: Lines, scripted: ScriptedDetector, *, guarded: bool, **options: Any) -> tuple[InMemorySaver, dict[str, Any]]:
    replies = [lines.belittling.text if i % 10 == 0 else f"Answer {i}: that sounds fine to me." for i in range(TURNS)]
    saver = InMemorySaver()
    middleware = [GuardianMiddleware(detectors=[scripted], policy="warn", **options)] if guarded else []
    agent = create_agent(GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies])), middleware=middleware, checkpointer=saver)
    config = {"configurable": {"thread_id": "long"}}
    for i in range(TURNS):
        agent.invoke({"messages": [HumanMessage(f"Question {i}: is this all right?")]}, config)
    return saver, config


def _size(saver: InMemorySaver, value: Any) -> int:
    return len(saver.serde.dumps_typed(value)[1])


@pytest.mark.slow  # over ~5 s on a fresh 2-core host: the slow tier
def test_200_turn_checkpoint_stays_small(lines: Lines, scripted: ScriptedDetector) -> None:
    saver, config = _thread(lines, scripted, guarded=True)
    checkpoint = saver.get_tuple(config).checkpoint  # type: ignore[union-attr]
    values = checkpoint["channel_values"]
    records = values["guardian"]
    assert len(values["messages"]) == 2 * TURNS
    assert len(records) == 50  # the default cap: the latest 50 screened turns
    latest = {r["direction"]: r for r in records}
    assert latest["output"]["message_id"] == values["messages"][-1].id
    assert latest["input"]["message_id"] == values["messages"][-2].id
    assert _size(saver, records) < 16_000
    total = _size(saver, checkpoint)
    assert total < 300_000, total
    bare, bare_config = _thread(lines, scripted, guarded=False)
    overhead = total - _size(bare, bare.get_tuple(bare_config).checkpoint)  # type: ignore[union-attr]
    assert overhead / (2 * TURNS) < 512, overhead


def test_records_are_compact_and_the_full_assessment_is_on_the_message(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = create_agent(GenericFakeChatModel(messages=iter([AIMessage(lines.denial.text)])),
                         middleware=[GuardianMiddleware(detectors=[scripted], policy="observe")])
    result = agent.invoke({"messages": [HumanMessage(lines.benign.text)]})
    raw = result["guardian"][-1]
    assert set(raw) == {"direction", "decision", "flagged", "action", "probability", "techniques", "evidence", "message_id", "thread_id"}
    assert "assessment" not in raw
    assert (raw["decision"], raw["techniques"], raw["probability"]) == ("flagged", ["Denial"], 0.91)
    (span,) = raw["evidence"]
    assert lines.denial.text[span["start"] : span["end"]] == span["quote"]
    full = assessment_of(result["messages"][-1])
    assert full is not None and full.findings[0].evidence[0].quote == span["quote"]
    # `assessments()` joins the record with its message's metadata (the full Assessment).
    assert assessments(result)[-1]["assessment"]["techniques"] == {"Denial": 0.91}


def test_cap_is_configurable(lines: Lines, scripted: ScriptedDetector) -> None:
    replies = [f"Reply {i}." for i in range(8)]
    agent = create_agent(
        GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies])),
        middleware=[GuardianMiddleware(detectors=[scripted], max_state_records=3)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "cap"}}
    for i in range(8):
        result = agent.invoke({"messages": [HumanMessage(f"Message {i}.")]}, config)
    assert len(result["guardian"]) == 3
    assert {r["message_id"] for r in result["guardian"]} <= {m.id for m in result["messages"][-4:]}


def test_reducer() -> None:
    assert CappedRecords(2)([{"a": 1}], [{"b": 2}, {"c": 3}]) == [{"b": 2}, {"c": 3}]
    assert CappedRecords(0)([{"a": 1}], [{"b": 2}]) == []
    assert CappedRecords(None)(None, [{"b": 2}]) == [{"b": 2}]
