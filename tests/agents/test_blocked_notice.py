"""A blocked chatbot reply tells the user what happened and how to go on (issue 46): the
notice they see instead carries the "blocked" next steps of resources/plain_words.toml.

LangChain's GenericFakeChatModel plays the model; the scripted detector from conftest flags
the MentalManip lines the tests call manipulative.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from guardian.agents import GuardianMiddleware, guard
from guardian.agents import _screening as screening
from guardian.agents._screening import DEFAULT_INPUT_BLOCK_REPLY, DEFAULT_SAFE_REPLY, blocked_reply
from guardian.agents.middleware import assessments
from guardian.agents.policy import DEFAULT_ERROR_REPLY
from guardian.plain_words import plain_words
from tests.agents.conftest import BrokenDetector, Lines, ScriptedDetector

PROMPT = ChatPromptTemplate.from_messages([("system", "You are a helpful assistant."), ("human", "{question}")])
STEPS = plain_words().next_steps("blocked")


def fake(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(content=r) for r in replies]))


def run(agent: Any, text: str, thread: str | None = None) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}} if thread else None
    result: dict[str, Any] = agent.invoke({"messages": [HumanMessage(text)]}, config)
    return result


def steps_of(text: str) -> list[str]:
    """The next-step lines of a notice, in order."""
    return [line[2:] for line in text.splitlines() if line.startswith("- ")]


def test_the_blocked_steps_are_package_data() -> None:
    assert STEPS, "plain_words.toml has no [steps] blocked"
    shown = blocked_reply("Held back.")
    assert shown.startswith("Held back.\n\n")
    assert steps_of(shown) == list(STEPS)
    assert blocked_reply("Held back.", next_steps=False) == "Held back."


def test_a_blocked_agent_reply_shows_the_safe_reply_then_the_next_steps(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = create_agent(fake(lines.belittling.text), middleware=[GuardianMiddleware(detectors=[scripted], policy="block")])
    result = run(agent, lines.benign.text)
    reply = result["messages"][-1]
    assert isinstance(reply, AIMessage) and isinstance(reply.content, str)
    assert reply.content.startswith(DEFAULT_SAFE_REPLY + "\n\n")
    assert steps_of(reply.content) == list(STEPS)
    assert lines.belittling.text not in reply.content
    (record,) = assessments(result, direction="output")
    assert record["action"] == "blocked" and record["original_text"] == lines.belittling.text


async def test_the_async_hooks_show_the_same_steps(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = create_agent(fake(lines.belittling.text), middleware=[GuardianMiddleware(detectors=[scripted], policy="block")])
    result = await agent.ainvoke({"messages": [HumanMessage(lines.benign.text)]})
    assert result["messages"][-1].content == blocked_reply(DEFAULT_SAFE_REPLY)


def test_an_application_safe_reply_gets_the_steps_and_next_steps_false_leaves_it_alone(
    lines: Lines, scripted: ScriptedDetector
) -> None:
    own = GuardianMiddleware(detectors=[scripted], policy="block", safe_reply="That reply was held back.")
    bare = GuardianMiddleware(detectors=[scripted], policy="block", safe_reply="That reply was held back.", next_steps=False)
    shown = run(create_agent(fake(lines.belittling.text), middleware=[own]), lines.benign.text)["messages"][-1].content
    alone = run(create_agent(fake(lines.belittling.text), middleware=[bare]), lines.benign.text)["messages"][-1].content
    assert shown == blocked_reply("That reply was held back.")
    assert alone == "That reply was held back."


def test_a_reply_blocked_because_the_screen_failed_shows_the_steps(lines: Lines) -> None:
    mw = GuardianMiddleware(detectors=[BrokenDetector()], policy="block", on_error="block", apply_to_input=False)
    reply = run(create_agent(fake(lines.benign_reply.text), middleware=[mw]), lines.benign.text)["messages"][-1]
    assert reply.content == blocked_reply(DEFAULT_ERROR_REPLY)


def test_a_reviewer_rejected_reply_shows_the_steps(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = create_agent(fake(lines.belittling.text), middleware=[GuardianMiddleware(detectors=[scripted], policy="review")],
                         checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "steps-reject"}}
    agent.invoke({"messages": [HumanMessage(lines.benign.text)]}, config)
    result = agent.invoke(Command(resume={"decisions": [{"type": "reject", "message": "belittles"}]}), config)
    assert result["messages"][-1].content == blocked_reply(DEFAULT_SAFE_REPLY)


def test_a_refused_user_turn_is_not_given_the_reply_steps(lines: Lines, scripted: ScriptedDetector) -> None:
    """The steps speak of the chatbot's held-back reply; a refused user message is another notice."""
    agent = create_agent(fake(), middleware=[GuardianMiddleware(detectors=[scripted], policy="block")])
    result = run(agent, lines.threat.text)
    assert result["messages"][-1].content == DEFAULT_INPUT_BLOCK_REPLY


def test_guard_block_shows_the_steps_for_string_and_message_replies(lines: Lines, scripted: ScriptedDetector) -> None:
    text = guard(PROMPT | fake(lines.belittling.text) | StrOutputParser(), detectors=[scripted], policy="block")
    message = guard(PROMPT | fake(lines.belittling.text), detectors=[scripted], policy="block")
    bare = guard(PROMPT | fake(lines.belittling.text) | StrOutputParser(), detectors=[scripted], policy="block",
                 next_steps=False)
    assert text.invoke({"question": lines.benign.text}) == blocked_reply(DEFAULT_SAFE_REPLY)
    reply = message.invoke({"question": lines.benign.text})
    assert isinstance(reply, AIMessage) and reply.content == blocked_reply(DEFAULT_SAFE_REPLY)
    assert bare.invoke({"question": lines.benign.text}) == DEFAULT_SAFE_REPLY


def test_guard_stream_ends_with_the_steps(lines: Lines, scripted: ScriptedDetector) -> None:
    """A reply flagged only as a whole may have shown its clean first sentence; the notice and
    its steps follow it, and nothing of the flagged rest."""
    chain = guard(PROMPT | fake(lines.belittling.text) | StrOutputParser(), detectors=[scripted], policy="block")
    said = "".join(chain.stream({"question": lines.benign.text}))
    assert said.endswith(blocked_reply(DEFAULT_SAFE_REPLY))
    assert "loyal" not in said


def test_edited_steps_in_the_data_change_the_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wording lives in plain_words.toml, not in the integrations: change the data, the notice follows."""
    words = plain_words()
    edited = dataclasses.replace(words, steps=MappingProxyType({**words.steps, "blocked": ("Ask a person.",)}))
    monkeypatch.setattr(screening, "plain_words", lambda: edited)
    assert blocked_reply("Held back.") == "Held back.\n\n- Ask a person."
