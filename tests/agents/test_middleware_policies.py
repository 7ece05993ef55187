"""Failure policy, `policy="raise"`, `policy="review"` and the direction options, in real `create_agent` graphs.

The chat model is LangChain's GenericFakeChatModel scripted with MentalManip lines; the
detectors are conftest's scripted double (flags labelled lines) and a detector that raises.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from guardian.agents import GuardianMiddleware
from guardian.agents._screening import DEFAULT_INPUT_BLOCK_REPLY, assessment_of
from guardian.agents.middleware import GuardianScreenError, GuardianViolation, assessments
from guardian.agents.policy import DEFAULT_INPUT_ERROR_REPLY
from guardian.taxonomy import Technique
from tests.agents.conftest import ERROR_SHOWN, SAFE_SHOWN, BrokenDetector, Lines, ScriptedDetector


def fake(*replies: str) -> GenericFakeChatModel:
    """Raises StopIteration (fails the run) when called more often than scripted."""
    return GenericFakeChatModel(messages=iter([AIMessage(content=r) for r in replies]))


def run(agent: Any, text: str, thread: str | None = None) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}} if thread else None
    return agent.invoke({"messages": [HumanMessage(text)]}, config)  # type: ignore[no-any-return]


# --- on_error: a detector that raises ------------------------------------------------------------


def test_on_error_pass_is_fail_open_by_default(lines: Lines) -> None:
    agent = create_agent(fake(lines.belittling.text), middleware=[GuardianMiddleware(detectors=[BrokenDetector()], policy="block")])
    result = run(agent, lines.benign.text)
    assert result["messages"][-1].content == lines.belittling.text  # unscreened, as documented
    assert [(r["decision"], r["action"]) for r in assessments(result)] == [("failed", "observed"), ("failed", "observed")]
    assert assessments(result)[-1]["errors"] == ["broken-test (error)"]


def test_on_error_block_blocks_the_reply(lines: Lines) -> None:
    agent = create_agent(
        fake(lines.benign_reply.text),  # even a harmless reply: it could not be checked
        middleware=[GuardianMiddleware(detectors=[BrokenDetector()], on_error="block", apply_to_input=False)],
    )
    result = run(agent, lines.benign.text)
    reply = result["messages"][-1]
    assert reply.content == ERROR_SHOWN
    (record,) = assessments(result)
    assert (record["decision"], record["action"], record["flagged"]) == ("failed", "blocked", False)
    assert record["original_text"] == lines.benign_reply.text  # kept on the message, never silently dropped
    assessment = assessment_of(reply)
    assert assessment is not None and [e.detector for e in assessment.errors] == ["broken-test"]


def test_on_error_block_refuses_the_user_turn_before_the_model(lines: Lines) -> None:
    agent = create_agent(fake(), middleware=[GuardianMiddleware(detectors=[BrokenDetector()], on_error="block")])  # no reply scripted
    result = run(agent, lines.benign.text)
    assert [m.content for m in result["messages"]] == [lines.benign.text, DEFAULT_INPUT_ERROR_REPLY]


def test_on_error_block_counts_a_timeout(lines: Lines, scripted: ScriptedDetector) -> None:
    import threading

    from guardian.detectors.base import Detector
    from guardian.findings import Assessment

    release = threading.Event()

    class Stuck(Detector):
        name = "stuck-test"

        def analyze(self, window: Any) -> Assessment:
            release.wait(10)
            return self.empty(window)

    mw = GuardianMiddleware(detectors=[Stuck(), scripted], on_error="block", timeout_s=0.05, apply_to_input=False)
    try:
        result = run(create_agent(fake(lines.benign_reply.text), middleware=[mw]), lines.benign.text)
    finally:
        release.set()
    assert result["messages"][-1].content == ERROR_SHOWN
    assert assessments(result)[0]["errors"] == ["stuck-test (timeout)"]


def test_a_flag_wins_over_another_detectors_failure(lines: Lines, scripted: ScriptedDetector) -> None:
    mw = GuardianMiddleware(detectors=[BrokenDetector(), scripted], policy="block", on_error="pass", apply_to_input=False)
    result = run(create_agent(fake(lines.belittling.text), middleware=[mw]), lines.benign.text)
    assert result["messages"][-1].content == SAFE_SHOWN
    assert assessments(result)[0]["decision"] == "flagged"


def test_on_error_raise(lines: Lines) -> None:
    agent = create_agent(fake(lines.benign_reply.text), middleware=[GuardianMiddleware(detectors=[BrokenDetector()], on_error="raise")])
    with pytest.raises(GuardianScreenError) as caught:
        run(agent, lines.benign.text)
    error = caught.value
    assert error.direction == "input"
    assert [e.detector for e in error.assessment.errors] == ["broken-test"]
    assert "could not screen" in str(error) and "corrupt" in str(error)


# --- policy="raise" ----------------------------------------------------------------------------


def test_policy_raise_carries_the_assessment(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = create_agent(fake(lines.belittling.text), middleware=[GuardianMiddleware(detectors=[scripted], policy="raise")])
    with pytest.raises(GuardianViolation) as caught:
        run(agent, lines.benign.text)
    violation = caught.value
    assert not isinstance(violation, GuardianScreenError)
    assert violation.direction == "output"
    assert violation.assessment.techniques == {Technique.RATIONALIZATION: 0.91}
    quote = violation.assessment.findings[0].evidence[0].quote
    assert quote in lines.belittling.text and quote in str(violation)


def test_policy_raise_lets_clean_turns_through(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = create_agent(fake(lines.benign_reply.text), middleware=[GuardianMiddleware(detectors=[scripted], policy="raise")])
    assert run(agent, lines.benign.text)["messages"][-1].content == lines.benign_reply.text


async def test_policy_raise_async_on_the_user_turn(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = create_agent(fake(), middleware=[GuardianMiddleware(detectors=[scripted], policy="raise")])
    with pytest.raises(GuardianViolation) as caught:
        await agent.ainvoke({"messages": [HumanMessage(lines.threat.text)]})
    assert caught.value.direction == "input" and caught.value.assessment.manipulator == "User"


# --- policy="review": interrupt, then approve / edit / reject ------------------------------------


def _review_agent(lines: Lines, scripted: ScriptedDetector, reply: str) -> Any:
    return create_agent(
        fake(reply),
        middleware=[GuardianMiddleware(detectors=[scripted], policy="review")],
        checkpointer=InMemorySaver(),
    )


def _paused(agent: Any, lines: Lines, thread: str) -> dict[str, Any]:
    result = run(agent, lines.benign.text, thread=thread)
    (pending,) = result["__interrupt__"]
    return pending.value  # type: ignore[no-any-return]


def test_review_interrupt_has_the_human_in_the_loop_shape(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = _review_agent(lines, scripted, lines.belittling.text)
    request = _paused(agent, lines, "r-shape")
    assert set(request) == {"action_requests", "review_configs"}
    (action,) = request["action_requests"]
    assert action["name"] == "guardian_review" and "Rationalization" in action["description"]
    assert action["args"]["text"] == lines.belittling.text and action["args"]["direction"] == "output"
    assert action["args"]["techniques"] == ["Rationalization"]
    (evidence,) = action["args"]["evidence"]
    assert lines.belittling.text[evidence["start"] : evidence["end"]] == evidence["quote"]
    assert request["review_configs"] == [{"action_name": "guardian_review", "allowed_decisions": ["approve", "edit", "reject"]}]
    # Nothing reached the user yet: the paused state holds no unscreened reply as the answer.
    state = agent.get_state({"configurable": {"thread_id": "r-shape"}})
    assert state.next  # the graph is waiting


def test_review_approve(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = _review_agent(lines, scripted, lines.belittling.text)
    _paused(agent, lines, "r-approve")
    screened = len(scripted.windows)
    config = {"configurable": {"thread_id": "r-approve"}}
    result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert result["messages"][-1].content == lines.belittling.text
    assert assessments(result, direction="output")[0]["action"] == "approved"
    assert len(scripted.windows) == screened  # on resume the reviewed verdict is reused, not screened again


def test_review_edit(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = _review_agent(lines, scripted, lines.belittling.text)
    _paused(agent, lines, "r-edit")
    edit = {"type": "edit", "edited_action": {"name": "guardian_review", "args": {"text": "I see this upset you. Let's talk."}}}
    result = agent.invoke(Command(resume={"decisions": [edit]}), {"configurable": {"thread_id": "r-edit"}})
    reply = result["messages"][-1]
    assert reply.content == "I see this upset you. Let's talk."
    record = assessments(result, direction="output")[0]
    assert record["action"] == "edited" and record["original_text"] == lines.belittling.text


def test_review_reject(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = _review_agent(lines, scripted, lines.belittling.text)
    _paused(agent, lines, "r-reject")
    decision = {"type": "reject", "message": "belittles the user"}
    result = agent.invoke(Command(resume={"decisions": [decision]}), {"configurable": {"thread_id": "r-reject"}})
    assert result["messages"][-1].content == SAFE_SHOWN
    assert lines.belittling.text not in [m.content for m in result["messages"]]
    record = assessments(result, direction="output")[0]
    assert record["action"] == "rejected" and record["review_reason"] == "belittles the user"


def test_review_of_a_user_turn_offers_no_edit(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = create_agent(fake(), middleware=[GuardianMiddleware(detectors=[scripted], policy="review")], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "r-user"}}
    result = agent.invoke({"messages": [HumanMessage(lines.threat.text)]}, config)
    (pending,) = result["__interrupt__"]
    assert pending.value["review_configs"][0]["allowed_decisions"] == ["approve", "reject"]
    result = agent.invoke(Command(resume={"decisions": [{"type": "reject"}]}), config)
    assert [m.content for m in result["messages"]] == [lines.threat.text, DEFAULT_INPUT_BLOCK_REPLY]
    other = {"configurable": {"thread_id": "r-user-edit"}}
    agent.invoke({"messages": [HumanMessage(lines.threat.text)]}, other)
    edit = {"type": "edit", "edited_action": {"name": "guardian_review", "args": {"text": "x"}}}
    with pytest.raises(ValueError, match="user message takes one of"):  # a user's own words are never rewritten
        agent.invoke(Command(resume={"decisions": [edit]}), other)


def test_review_leaves_clean_replies_alone(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = _review_agent(lines, scripted, lines.benign_reply.text)
    result = run(agent, lines.benign.text, thread="r-clean")
    assert "__interrupt__" not in result and result["messages"][-1].content == lines.benign_reply.text


async def test_review_async(lines: Lines, scripted: ScriptedDetector) -> None:
    agent = _review_agent(lines, scripted, lines.denial.text)
    config = {"configurable": {"thread_id": "r-async"}}
    result = await agent.ainvoke({"messages": [HumanMessage(lines.benign.text)]}, config)
    assert result["__interrupt__"][0].value["action_requests"][0]["args"]["text"] == lines.denial.text
    result = await agent.ainvoke(Command(resume={"decisions": [{"type": "reject"}]}), config)
    assert result["messages"][-1].content == SAFE_SHOWN


# --- directions, LangChain's names and the old alias ------------------------------------------


def test_apply_to_names_and_directions_alias(lines: Lines, scripted: ScriptedDetector) -> None:
    by_name = GuardianMiddleware(detectors=[scripted], policy="block", apply_to_output=False)
    by_alias = GuardianMiddleware(detectors=[scripted], policy="block", directions=["input"])
    assert by_name.directions == by_alias.directions == frozenset({"input"})
    assert (by_name.apply_to_input, by_name.apply_to_output, by_name.apply_to_tool_results) == (True, False, False)
    result = run(create_agent(fake(lines.belittling.text), middleware=[by_name]), lines.benign.text)
    assert result["messages"][-1].content == lines.belittling.text
    with pytest.raises(ValueError, match="either directions"):
        GuardianMiddleware(directions=["input"], apply_to_input=True)


def test_new_options_are_checked() -> None:
    with pytest.raises(ValueError, match="on_error"):
        GuardianMiddleware(on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="policy"):
        GuardianMiddleware(policy="pause")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_state_records"):
        GuardianMiddleware(max_state_records=-1)
