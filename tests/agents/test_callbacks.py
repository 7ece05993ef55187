"""GuardianCallbackHandler observes an existing pipeline without changing it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

from guardian.agents import GuardianCallbackHandler, GuardianEvent
from guardian.conversation import Conversation
from guardian.findings import Assessment
from tests.agents.conftest import BrokenDetector, Lines, ScriptedDetector


def fake(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(content=r) for r in replies]))


def test_observes_chain_without_changing_it(lines: Lines, scripted: ScriptedDetector, tmp_path: Path) -> None:
    events: list[GuardianEvent] = []
    log = tmp_path / "session.jsonl"
    handler = GuardianCallbackHandler(detectors=[scripted], on_finding=events.append, log_path=log)
    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | fake(lines.belittling.text) | StrOutputParser()
    out = chain.invoke({"q": lines.threat.text}, {"callbacks": [handler], "metadata": {"thread_id": "cb1"}})
    assert out == lines.belittling.text  # unchanged
    assert [(r["direction"], r["flagged"], r["thread_id"]) for r in handler.records] == [("input", True, "cb1"), ("output", True, "cb1")]
    assert [e.direction for e in events] == ["input", "output"]
    logged = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert [r["text"] for r in logged] == [lines.threat.text, lines.belittling.text]
    assert logged[1]["assessment"]["techniques"] == {"Rationalization": 0.91}


def test_plain_chain_thread_is_remembered(lines: Lines, scripted: ScriptedDetector) -> None:
    handler = GuardianCallbackHandler(detectors=[scripted])
    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | fake(lines.benign_reply.text, lines.denial.text)
    for question in (lines.benign.text, "Did you say you'd come?"):
        chain.invoke({"q": question}, {"callbacks": [handler], "metadata": {"thread_id": "p"}})
    assert [t.text for t in scripted.windows[-1].turns] == [lines.benign.text, lines.benign_reply.text, "Did you say you'd come?", lines.denial.text]
    assert [r["flagged"] for r in handler.records] == [False, False, False, True]


def test_agent_thread_history_screened_once(lines: Lines, scripted: ScriptedDetector) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    handler = GuardianCallbackHandler(detectors=[scripted])
    agent = create_agent(fake(lines.benign_reply.text, lines.denial.text), checkpointer=InMemorySaver())
    cfg: Any = {"callbacks": [handler], "configurable": {"thread_id": "agent-1"}}
    agent.invoke({"messages": [HumanMessage(lines.benign.text)]}, cfg)
    agent.invoke({"messages": [HumanMessage("Did you say you'd come?")]}, cfg)
    assert [(r["direction"], r["text"]) for r in handler.records] == [
        ("input", lines.benign.text),
        ("output", lines.benign_reply.text),
        ("input", "Did you say you'd come?"),
        ("output", lines.denial.text),
    ]
    assert [r["flagged"] for r in handler.records] == [False, False, False, True]
    assert len(scripted.windows[-1]) == 4  # the reply judged in the context of the whole thread


def test_detector_failure_is_recorded_not_raised(lines: Lines) -> None:
    handler = GuardianCallbackHandler(detectors=[BrokenDetector()])
    model = fake(lines.belittling.text)
    reply = model.invoke([HumanMessage(lines.benign.text)], {"callbacks": [handler]})
    assert reply.content == lines.belittling.text
    assert all(r["assessment"]["errors"][0]["detector"] == "broken-test" for r in handler.records)


class _Monitor:
    """Records what the handler hands over (guardian.monitor.Monitor has the same method)."""

    def __init__(self, detector: ScriptedDetector) -> None:
        self.detector = detector
        self.conversations: dict[str, Conversation] = {}

    def add_turn_sync(self, conversation_id: str, speaker: str, text: str, *, source: str = "text") -> Assessment:
        conversation = self.conversations.get(conversation_id, Conversation(id=conversation_id)).append(speaker, text, source=source)
        self.conversations[conversation_id] = conversation
        return self.detector.analyze(conversation)


def test_feeds_a_monitor_each_turn_once(lines: Lines, scripted: ScriptedDetector) -> None:
    monitor = _Monitor(scripted)
    handler = GuardianCallbackHandler(monitor=monitor)
    model = fake(lines.benign_reply.text, lines.denial.text)
    cfg: Any = {"callbacks": [handler], "metadata": {"thread_id": "m"}}
    history = [HumanMessage(lines.benign.text)]
    history.append(model.invoke(history, cfg))
    history.append(HumanMessage("And tomorrow?"))
    model.invoke(history, cfg)
    turns = monitor.conversations["m"].turns
    assert [(t.speaker, t.text) for t in turns] == [
        ("User", lines.benign.text),
        ("Assistant", lines.benign_reply.text),
        ("User", "And tomorrow?"),
        ("Assistant", lines.denial.text),
    ]
    assert [r["flagged"] for r in handler.records] == [False, False, False, True]


def test_writes_through_a_real_monitor_into_its_session_log(lines: Lines, scripted: ScriptedDetector, tmp_path: Path) -> None:
    from guardian.events import AssessmentReady, TurnAdded
    from guardian.monitor import Monitor
    from guardian.session_log import SessionHeader, SessionLog, read_log

    monitor = Monitor([scripted], window=10, timeout_s=5.0)
    path = tmp_path / "chatbot.jsonl"
    log = SessionLog(path).open(SessionHeader(source="langchain", detectors=(scripted.name,), started=0.0))
    monitor.subscribe(log.write)
    handler = GuardianCallbackHandler(monitor=monitor)
    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | fake(lines.denial.text)
    try:
        chain.invoke({"q": lines.benign.text}, {"callbacks": [handler], "metadata": {"thread_id": "bot-7"}})
    finally:
        monitor.close()
        log.close()
    record = read_log(path)
    turns = [e.turn for e in record.events if isinstance(e, TurnAdded)]
    assert [(t.speaker, t.text, t.source) for t in turns] == [("User", lines.benign.text, "langchain"), ("Assistant", lines.denial.text, "langchain")]
    ready = [e for e in record.events if isinstance(e, AssessmentReady)]
    assert [e.conversation_id for e in ready] == ["bot-7", "bot-7"]
    assert [e.assessment.decision for e in ready] == [False, True]


async def test_async_pipeline_and_concurrent_threads(lines: Lines, scripted: ScriptedDetector) -> None:
    import asyncio

    handler = GuardianCallbackHandler(detectors=[scripted])
    replies = [lines.denial.text if i % 2 else "Sure, here it is." for i in range(30)]
    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | fake(*replies) | StrOutputParser()
    outs = await asyncio.gather(
        *(chain.ainvoke({"q": f"question {i}"}, {"callbacks": [handler], "metadata": {"thread_id": f"t{i}"}}) for i in range(30))
    )
    assert sorted(outs) == sorted(replies)  # unchanged
    assert len(handler.records) == 60
    by_thread: dict[str, list[str]] = {}
    for record in handler.records:
        by_thread.setdefault(record["thread_id"], []).append(record["direction"])
    assert all(directions == ["input", "output"] for directions in by_thread.values()) and len(by_thread) == 30
    assert len(handler.flagged()) == 15
