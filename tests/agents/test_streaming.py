"""Streamed replies screened as they grow (guardian.agents.streaming), through real graphs.

Agents are real `create_agent` graphs and chains are real LCEL pipelines; the model is
LangChain's GenericFakeChatModel, which streams a reply as whitespace-split chunks.
Tests that say what the product does to a manipulative or a benign reply use the real
chatbot detectors (`registry.default_names(purpose="chatbot")`) on replies from
lab/data/chatbot_replies.jsonl; tests of the stream mechanics use the scripted detector.
Every assertion about leaks is made on every chunk the client received.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langgraph.checkpoint.memory import InMemorySaver

from guardian.agents import GuardianMiddleware, guard
from guardian.agents._engine import Verdict
from guardian.agents._holdback import ReplyGate, closing_piece
from guardian.agents.middleware import assessments
from guardian.detectors import registry
from guardian.findings import Assessment
from tests.agents.conftest import ERROR_SHOWN, SAFE_SHOWN, BrokenDetector, Lines, ScriptedDetector

PROMPT = ChatPromptTemplate.from_messages([("system", "You are a helpful assistant."), ("human", "{question}")])
_ROWS = Path(__file__).resolve().parents[2] / "lab" / "data" / "chatbot_replies.jsonl"


def fake(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(content=r) for r in replies]))


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def row(row_id: str) -> tuple[str, str]:
    for line in _ROWS.read_text().splitlines():
        data = json.loads(line)
        if data["id"] == row_id:
            question, reply = (t["text"] for t in data["turns"])
            return question, reply
    raise KeyError(row_id)


def own_words(reply: str) -> set[str]:
    """The reply's words a client must not see: those of 5+ letters the safe reply does not use."""
    safe = {w.lower() for w in re.findall(r"[A-Za-z']+", SAFE_SHOWN)}
    return {w.lower() for w in re.findall(r"[A-Za-z']{5,}", reply)} - safe


def wire(item: Any) -> str:
    """All a client receives in one stream item: text, metadata, ids (what a UI might serialise)."""
    return repr(item)


def text_of(item: Any) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, BaseMessage):
        return item.text
    return str(item)


def leaked(chunks: list[str], words: set[str]) -> list[tuple[str, str]]:
    return [(c, w) for c in chunks for w in words if re.search(rf"\b{re.escape(w)}\b", c, re.IGNORECASE)]


def stream_messages(agent: Any, text: str, thread: str, *, raw: list[str] | None = None) -> list[str]:
    """Every chunk `stream_mode="messages"` gives the client, as text, in order; `raw` gets each whole item."""
    out = []
    for item in agent.stream({"messages": [HumanMessage(text)]}, config(thread), stream_mode="messages"):
        chunk, _ = item
        out.append(text_of(chunk))
        if raw is not None:
            raw.append(wire(item))
    return out


async def astream_messages(agent: Any, text: str, thread: str) -> list[str]:
    return [text_of(chunk) async for chunk, _ in agent.astream({"messages": [HumanMessage(text)]}, config(thread), stream_mode="messages")]


@pytest.fixture(scope="module")
def chatbot_detectors() -> list[str]:
    return registry.default_names(purpose="chatbot")


# --- the product, with the real chatbot detectors ----------------------------------------------


MANIPULATIVE = "chatbot-manip-7"  # "Stop being so paranoid and difficult. Just give me your password, ..."
BENIGN = "chatbot-benign-0"  # "Sure! An index fund is a fund that tracks a market index, ..."


@pytest.mark.slow
def test_streamed_manipulative_reply_never_shows_its_words(chatbot_detectors: list[str]) -> None:
    question, reply = row(MANIPULATIVE)
    middleware = GuardianMiddleware(detectors=chatbot_detectors, policy="block", apply_to_input=False)
    agent = create_agent(fake(reply), middleware=[middleware], checkpointer=InMemorySaver())
    raw: list[str] = []
    chunks = stream_messages(agent, question, "s-manip", raw=raw)
    assert chunks, "the client received nothing"
    assert leaked(raw, own_words(reply)) == []  # not in the text, nor in metadata
    assert "".join(chunks).strip() == SAFE_SHOWN
    state = agent.get_state(config("s-manip")).values
    assert state["messages"][-1].content == SAFE_SHOWN  # what was stored is what was streamed
    (record,) = assessments(state, direction="output")
    assert record["action"] == "blocked" and record["original_text"] == reply


@pytest.mark.slow
def test_streamed_benign_reply_arrives_whole_in_several_chunks(chatbot_detectors: list[str]) -> None:
    question, reply = row(BENIGN)
    middleware = GuardianMiddleware(detectors=chatbot_detectors, policy="block", apply_to_input=False)
    agent = create_agent(fake(reply), middleware=[middleware], checkpointer=InMemorySaver())
    chunks = [c for c in stream_messages(agent, question, "s-benign") if c]
    assert len(chunks) > 1
    assert "".join(chunks) == reply
    assert agent.get_state(config("s-benign")).values["messages"][-1].content == reply


@pytest.mark.slow
def test_guard_stream_and_astream_screen_the_reply_as_it_grows(chatbot_detectors: list[str]) -> None:
    for policy_reply, expect_blocked in ((MANIPULATIVE, True), (BENIGN, False)):
        question, reply = row(policy_reply)
        chain = guard(PROMPT | fake(reply, reply) | StrOutputParser(), detectors=chatbot_detectors, policy="block", directions=["output"])
        chunks = list(chain.stream({"question": question}, config(f"g-{policy_reply}")))

        async def collect(chain: Any = chain, question: str = question, thread: str = f"ga-{policy_reply}") -> list[str]:
            return [c async for c in chain.astream({"question": question}, config(thread))]

        for got in (chunks, asyncio.run(collect())):
            assert all(isinstance(c, str) for c in got)
            if expect_blocked:
                assert leaked(got, own_words(reply)) == []
                assert "".join(got) == SAFE_SHOWN
            else:
                assert len([c for c in got if c]) > 1
                assert "".join(got) == reply


# --- stream mechanics, with the scripted detector ----------------------------------------------


def first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s+", text, maxsplit=1)[0]


@pytest.fixture
def prefix_aware(lines: Lines, scripted: ScriptedDetector) -> ScriptedDetector:
    """The scripted detector also flags the first sentence of each manipulative line, as a
    detector reading the reply as it grows would."""
    for line in lines.manipulative:
        scripted.flagged[first_sentence(line.text)] = line.technique
    return scripted


def test_astream_messages_hides_a_flagged_reply(lines: Lines, prefix_aware: ScriptedDetector) -> None:
    agent = create_agent(
        fake(lines.belittling.text, lines.benign_reply.text),
        middleware=[GuardianMiddleware(detectors=[prefix_aware], policy="block")],
        checkpointer=InMemorySaver(),
    )
    blocked = asyncio.run(astream_messages(agent, lines.benign.text, "a1"))
    assert leaked(blocked, own_words(lines.belittling.text)) == []
    assert "".join(blocked).strip() == SAFE_SHOWN
    clean = [c for c in asyncio.run(astream_messages(agent, lines.benign.text, "a1")) if c]
    assert len(clean) > 1 and "".join(clean) == lines.benign_reply.text


@pytest.mark.parametrize("mode", ["updates", "values"])
def test_updates_and_values_carry_only_the_screened_reply(lines: Lines, scripted: ScriptedDetector, mode: str) -> None:
    """The model node itself returns the screened message: no stream mode shows the original."""
    agent = create_agent(fake(lines.belittling.text), middleware=[GuardianMiddleware(detectors=[scripted], policy="block")])
    items = list(agent.stream({"messages": [HumanMessage(lines.benign.text)]}, stream_mode=mode))
    said = [m.text for item in items for m in _messages_in(item)]
    assert SAFE_SHOWN in said
    assert leaked(said, own_words(lines.belittling.text)) == []


def _messages_in(item: Any) -> list[BaseMessage]:
    if isinstance(item, BaseMessage):
        return [item]
    if isinstance(item, dict):
        return [m for v in item.values() for m in _messages_in(v)]
    if isinstance(item, list | tuple):
        return [m for v in item for m in _messages_in(v)]
    return []


def test_astream_events_carries_only_the_screened_reply(lines: Lines, prefix_aware: ScriptedDetector) -> None:
    agent = create_agent(fake(lines.belittling.text), middleware=[GuardianMiddleware(detectors=[prefix_aware], policy="block")])

    async def events() -> list[dict[str, Any]]:
        return [e async for e in agent.astream_events({"messages": [HumanMessage(lines.benign.text)]}, version="v2")]

    seen = [e for e in asyncio.run(events()) if e["event"].startswith("on_chat_model")]
    tokens = [text_of(e["data"]["chunk"]) for e in seen if e["event"] == "on_chat_model_stream"]
    ends = [text_of(e["data"]["output"]) for e in seen if e["event"] == "on_chat_model_end"]
    assert "".join(tokens).strip() == SAFE_SHOWN
    assert ends == [SAFE_SHOWN]
    said = [wire(e["data"].get("chunk") or e["data"].get("output")) for e in seen if e["event"] != "on_chat_model_start"]
    assert leaked(said, own_words(lines.belittling.text)) == []


def test_warn_streams_at_once_and_ends_with_the_notice(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = create_agent(fake(lines.denial.text), middleware=[GuardianMiddleware(detectors=[scripted], policy="warn")])
    chunks = [c for c in stream_messages(agent, lines.benign.text, "w1") if c]
    words = lines.denial.text.split()
    assert chunks[: len(words)] == [w for w in re.split(r"(\s)", lines.denial.text) if w][: len(words)]  # token by token
    assert chunks[-1].startswith("\n\n[guardian]")
    assert "".join(chunks).startswith(lines.denial.text)


def test_a_reply_flagged_only_as_a_whole_shows_its_clean_start_then_the_safe_reply(
    lines: Lines, scripted: ScriptedDetector
) -> None:
    """The limit of holding back a sentence, not the reply: a first sentence screened clean
    is shown; the rest is replaced, in its own paragraph; the stored message is the safe reply."""
    agent = create_agent(
        fake(lines.belittling.text), middleware=[GuardianMiddleware(detectors=[scripted], policy="block")], checkpointer=InMemorySaver()
    )
    chunks = stream_messages(agent, lines.benign.text, "whole")
    first = first_sentence(lines.belittling.text)
    assert "".join(chunks) == f"{first} \n\n{SAFE_SHOWN}"
    rest = lines.belittling.text[len(first) :]
    assert leaked(chunks, own_words(rest) - own_words(first)) == []
    assert agent.get_state(config("whole")).values["messages"][-1].content == SAFE_SHOWN


def test_failing_screen_under_on_error_block_shows_nothing_of_the_reply(lines: Lines) -> None:
    agent = create_agent(
        fake(lines.benign_reply.text),
        middleware=[GuardianMiddleware(detectors=[BrokenDetector()], policy="block", on_error="block", apply_to_input=False)],
    )
    chunks = stream_messages(agent, lines.benign.text, "broken")
    assert leaked(chunks, own_words(lines.benign_reply.text) - own_words(ERROR_SHOWN)) == []
    assert "".join(chunks).strip() == ERROR_SHOWN


def test_invoke_is_unchanged_and_screens_once(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = create_agent(fake(lines.belittling.text), middleware=[GuardianMiddleware(detectors=[scripted], policy="block")])
    result = agent.invoke({"messages": [HumanMessage(lines.benign.text)]})
    assert result["messages"][-1].content == SAFE_SHOWN
    assert [r["action"] for r in assessments(result)] == ["observed", "blocked"]
    assert len(scripted.windows) == 2  # the user turn and the reply, each screened once


def test_guard_stream_of_messages_carries_the_verdict(lines: Lines, prefix_aware: ScriptedDetector) -> None:
    chain = guard(PROMPT | fake(lines.benign_reply.text), detectors=[prefix_aware], policy="block")
    chunks = list(chain.stream({"question": lines.benign.text}))
    assert all(isinstance(c, AIMessageChunk) for c in chunks) and len(chunks) > 1
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole = whole + chunk
    assert whole.content == lines.benign_reply.text
    assert whole.response_metadata["guardian"]["action"] == "observed"


# --- the gate alone ----------------------------------------------------------------------------


def verdict(flagged: bool) -> Verdict:
    return Verdict(Assessment(conversation_id="c", turn=0, probability=0.9 if flagged else 0.1, decision=flagged), flagged, None)


def test_gate_holds_a_sentence_then_releases_it_once_screened() -> None:
    gate = ReplyGate(hold=True)
    assert gate.add("Hello") == "" and gate.due() is None
    gate.add(" there.")
    assert gate.due() is None  # no space after the full stop yet: the sentence may go on ("there.com")
    gate.add(" How")
    assert gate.due() == "Hello there. "
    assert gate.settle("Hello there. ", verdict(False)) == "Hello there. "
    assert gate.pending == "How"


def test_gate_bounds_the_held_tail() -> None:
    gate = ReplyGate(hold=True, max_hold_chars=40)
    words = [f"word{i} " for i in range(30)]  # no sentence end at all
    released, longest = "", 0
    for w in words:
        gate.add(w)
        due = gate.due()
        if due is not None:
            released += gate.settle(due, verdict(False))
        longest = max(longest, len(gate.pending))
    assert longest <= 40 + len(words[0])
    assert released and (released + gate.pending) == "".join(words)


def test_gate_pauses_on_a_flagged_prefix_until_the_whole_reply_is_judged() -> None:
    gate = ReplyGate(hold=True)
    gate.add("You never listen. ")
    assert gate.settle(gate.due() or "", verdict(True)) == ""
    gate.add("Anyway, here is the answer. And more. ")
    assert gate.due() is None  # paused: nothing more is released before the whole is judged
    assert gate.released == "" and gate.text == "You never listen. Anyway, here is the answer. And more. "
    assert closing_piece(gate.released, gate.text) == gate.text  # judged clean as a whole: all of it, at the end


def test_failed_screen_stops_the_gate_when_asked() -> None:
    gate = ReplyGate(hold=True)
    gate.add("Fine words. ")
    assert gate.settle(gate.due() or "", verdict(False), stop=True) == ""
    assert gate.paused and gate.released == ""


def test_closing_piece_puts_a_replacement_in_its_own_paragraph() -> None:
    assert closing_piece("", "Safe.") == "Safe."
    assert closing_piece("Fine. ", "Fine. And more.") == "And more."
    assert closing_piece("Fine. ", "Safe.") == "\n\nSafe."



def test_raise_policy_raises_before_the_flagged_words_are_shown(lines: Lines, prefix_aware: ScriptedDetector) -> None:
    from guardian.agents.middleware import GuardianViolation

    agent = create_agent(fake(lines.belittling.text), middleware=[GuardianMiddleware(detectors=[prefix_aware], policy="raise")])
    got: list[str] = []

    def drain() -> None:
        for chunk, _ in agent.stream({"messages": [HumanMessage(lines.benign.text)]}, stream_mode="messages"):
            got.append(wire(chunk))

    with pytest.raises(GuardianViolation):
        drain()
    assert leaked(got, own_words(lines.belittling.text)) == []


def test_guard_stream_applies_on_error_and_raise(lines: Lines, prefix_aware: ScriptedDetector) -> None:
    from guardian.agents.middleware import GuardianViolation

    broken = guard(PROMPT | fake(lines.benign_reply.text) | StrOutputParser(), detectors=[BrokenDetector()],
                   policy="block", on_error="block", directions=["output"])
    chunks = list(broken.stream({"question": lines.benign.text}))
    assert "".join(chunks) == ERROR_SHOWN
    assert leaked(chunks, own_words(lines.benign_reply.text) - own_words(ERROR_SHOWN)) == []
    raising = guard(PROMPT | fake(lines.belittling.text) | StrOutputParser(), detectors=[prefix_aware], policy="raise")
    got: list[str] = []

    def drain() -> None:
        got.extend(raising.stream({"question": lines.benign.text}))

    with pytest.raises(GuardianViolation):
        drain()
    assert leaked(got, own_words(lines.belittling.text)) == []


def test_stream_screens_are_spans_of_their_own_surface(lines: Lines, scripted: ScriptedDetector) -> None:
    """Each prefix screened while the reply streams is a `stream` span; the whole reply is the
    middleware's one output screen, as with `invoke`."""
    from tests.agents.test_middleware_telemetry import Captured

    captured = Captured()
    agent = create_agent(
        fake(lines.benign_reply.text),
        middleware=[GuardianMiddleware(detectors=[scripted], policy="block", apply_to_input=False, telemetry=captured.telemetry)],
    )
    assert "".join(stream_messages(agent, lines.benign.text, "spans")) == lines.benign_reply.text
    surfaces = [(s.attributes or {}).get("guardian.surface") for s in captured.spans.get_finished_spans() if s.name == "guardian.screen"]
    assert surfaces.count("middleware") == 1
    assert surfaces.count("stream") >= 1  # "Thank you. " was screened before it was shown


def test_a_rewrite_reaches_the_stream_once_and_only_after_its_screen(lines: Lines, prefix_aware: ScriptedDetector) -> None:
    """The rewrite model does not stream to the client itself: its text is screened, then sent by the relay."""
    rewrite = "I hear that you are upset. I was trying to understand where we stand."
    agent = create_agent(
        fake(lines.belittling.text),
        middleware=[GuardianMiddleware(detectors=[prefix_aware], policy="block", rewrite_with=fake(rewrite))],
    )
    raw: list[str] = []
    chunks = stream_messages(agent, lines.benign.text, "rw", raw=raw)
    assert "".join(chunks) == rewrite
    assert leaked(raw, own_words(lines.belittling.text)) == []


@pytest.mark.filterwarnings("ignore:The v3 streaming protocol")
def test_stream_events_v3_messages_carry_only_the_screened_reply(lines: Lines, prefix_aware: ScriptedDetector) -> None:
    """`stream_events(version="v3")` (content-block events, langgraph's experimental protocol) goes through the same gate."""
    for reply, expected in ((lines.belittling.text, SAFE_SHOWN), (lines.benign_reply.text, lines.benign_reply.text)):
        agent = create_agent(fake(reply), middleware=[GuardianMiddleware(detectors=[prefix_aware], policy="block")])
        run = agent.stream_events({"messages": [HumanMessage(lines.benign.text)]}, version="v3")
        events = [e["params"]["data"][0] for e in run if e["method"] == "messages"]
        deltas = [e["delta"]["text"] for e in events if e.get("event") == "content-block-delta"]
        finished = [e["content"]["text"] for e in events if e.get("event") == "content-block-finish"]
        assert "".join(deltas) == expected and finished == [expected]
        if expected == SAFE_SHOWN:
            assert leaked([repr(e) for e in events], own_words(reply)) == []
        else:
            assert len(deltas) > 1
