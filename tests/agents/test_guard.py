"""guard(runnable): the middleware's policies around plain LCEL chains."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda

from guardian.agents import GuardianEvent, guard
from guardian.agents._screening import DEFAULT_INPUT_BLOCK_REPLY
from guardian.agents.guard import assessment_of
from tests.agents.conftest import SAFE_SHOWN, BrokenDetector, Lines, ScriptedDetector

PROMPT = ChatPromptTemplate.from_messages([("system", "You are a helpful assistant."), ("human", "{question}")])


def fake(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(content=r) for r in replies]))


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def test_block_replaces_string_reply(lines: Lines, scripted: ScriptedDetector) -> None:
    chain = guard(PROMPT | fake(lines.belittling.text) | StrOutputParser(), detectors=[scripted], policy="block")
    assert chain.invoke({"question": lines.benign.text}) == SAFE_SHOWN


def test_observe_annotates_message_reply(lines: Lines, scripted: ScriptedDetector) -> None:
    events: list[GuardianEvent] = []
    chain = guard(PROMPT | fake(lines.denial.text), detectors=[scripted], on_finding=events.append)
    reply = chain.invoke({"question": lines.benign.text}, config("g1"))
    assert isinstance(reply, AIMessage) and reply.content == lines.denial.text
    assessment = assessment_of(reply)
    assert assessment is not None and assessment.decision and assessment.conversation_id == "g1"
    assert [(e.direction, e.action) for e in events] == [("output", "observed")]


def test_warn_appends_to_string(lines: Lines, scripted: ScriptedDetector) -> None:
    chain = guard(PROMPT | fake(lines.belittling.text) | StrOutputParser(), detectors=[scripted], policy="warn")
    out = chain.invoke({"question": lines.benign.text})
    assert out.startswith(lines.belittling.text) and "\n\n[guardian]" in out


def test_block_user_turn_skips_the_runnable(lines: Lines, scripted: ScriptedDetector) -> None:
    calls: list[Any] = []
    chain = guard(RunnableLambda(lambda x: calls.append(x) or "ok"), detectors=[scripted], policy="block")
    refusal = chain.invoke(lines.threat.text)
    assert calls == []
    assert refusal.content == DEFAULT_INPUT_BLOCK_REPLY  # a lambda's OutputType is not str: a message
    parser_chain = guard(PROMPT | fake() | StrOutputParser(), detectors=[scripted], policy="block")
    assert parser_chain.invoke({"question": lines.threat.text}) == DEFAULT_INPUT_BLOCK_REPLY


def test_thread_context_for_string_runnables(lines: Lines, scripted: ScriptedDetector) -> None:
    chain = guard(PROMPT | fake(lines.benign_reply.text, lines.denial.text) | StrOutputParser(), detectors=[scripted])
    chain.invoke({"question": lines.benign.text}, config("t"))
    chain.invoke({"question": "Did you promise to come?"}, config("t"))
    assert [t.text for t in scripted.windows[-1].turns] == [
        lines.benign.text,
        lines.benign_reply.text,
        "Did you promise to come?",
        lines.denial.text,
    ]
    assert [t.text for t in chain.history("t")][-1] == lines.denial.text
    assert chain.history("other") == []


def test_message_list_input_is_the_thread(lines: Lines, scripted: ScriptedDetector) -> None:
    chain = guard(fake("Noted."), detectors=[scripted], directions=["input"], policy="block")
    history = [HumanMessage(lines.benign.text), AIMessage(lines.benign_reply.text), HumanMessage(lines.threat.text)]
    assert chain.invoke(history).content == DEFAULT_INPUT_BLOCK_REPLY
    assert [t.text for t in scripted.windows[-1].turns] == [lines.benign.text, lines.benign_reply.text, lines.threat.text]


def test_failure_passes_reply_through(lines: Lines) -> None:
    chain = guard(PROMPT | fake(lines.belittling.text) | StrOutputParser(), detectors=[BrokenDetector()], policy="block")
    assert chain.invoke({"question": lines.benign.text}) == lines.belittling.text


async def test_ainvoke_and_concurrent_threads(lines: Lines, scripted: ScriptedDetector) -> None:
    replies = [lines.belittling.text if i % 2 else "Glad to help." for i in range(40)]
    chain = guard(PROMPT | fake(*replies) | StrOutputParser(), detectors=[scripted], policy="block")
    outs = await asyncio.gather(*(chain.ainvoke({"question": f"hi from {i}"}, config(f"c{i}")) for i in range(40)))
    assert sorted(outs).count(SAFE_SHOWN) == 20
    for i in range(40):
        users = [t.text for t in chain.history(f"c{i}") if t.speaker == "User"]
        assert users == [f"hi from {i}"]


def test_options_are_keyword_only(scripted: ScriptedDetector) -> None:
    with pytest.raises(TypeError):
        guard(fake(), [scripted])  # type: ignore[misc]
    with pytest.raises(ValueError, match="policy"):
        guard(fake(), policy="loud")  # type: ignore[arg-type]


def test_stream_yields_only_the_screened_reply(lines: Lines, scripted: ScriptedDetector) -> None:
    """`stream` releases a sentence once the reply so far is screened (guardian.agents.streaming):
    a reply flagged from its first sentence on shows none of its words. The scripted detector
    flags whole lines only, so it is told the first sentence too, as a detector reading it would."""
    scripted.flagged[lines.belittling.text.split(". ")[0] + "."] = lines.belittling.technique
    chain = guard(PROMPT | fake(lines.belittling.text) | StrOutputParser(), detectors=[scripted], policy="block")
    chunks = list(chain.stream({"question": lines.benign.text}))
    assert chunks == [SAFE_SHOWN]  # no token of the manipulative reply leaks out


def test_calls_without_a_thread_id_are_separate_conversations(lines: Lines, scripted: ScriptedDetector) -> None:
    """Without a thread_id every screened window was conversation "conversation", so detectors'
    per-conversation state (the intent model's opener, budget, cache) leaked between callers."""
    chain = guard(PROMPT | fake(lines.benign.text, lines.benign.text) | StrOutputParser(), detectors=[scripted])
    chain.invoke({"question": lines.benign.text})
    chain.invoke({"question": lines.denial.text})
    ids = [w.id for w in scripted.windows]
    assert len(ids) == 4 and "conversation" not in ids
    assert ids[0] == ids[1] and ids[2] == ids[3]  # one call's input and reply: one conversation
    assert ids[0] != ids[2]
