"""The two-phase intent agent (seed 002 Appendix E) with LangChain's fake chat model."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from pydantic import Field

from guardian.config import LLMSettings
from guardian.conversation import Conversation
from guardian.detectors.llm.client import LLMClient
from guardian.detectors.llm.intent import LETTERS, OPTIONS, IntentAgent, IntentChoice
from guardian.detectors.llm.manipulation import LLMDetector
from guardian.taxonomy import FaceAct

CFG = LLMSettings(samples=1, backoff_s=0.0, max_retries=0)
REASONING = "The speaker denies the promise and blames the listener: an implied criticism."


class Recording(FakeListChatModel):
    seen: list[Any] = Field(default_factory=list)

    def _call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        self.seen.append(messages)
        return super()._call(messages, *args, **kwargs)


def test_two_phases_and_the_answer(gaslighting: Conversation) -> None:
    letter = LETTERS[OPTIONS.index(FaceAct.HPOS_MINUS)]
    model = Recording(responses=[REASONING, json.dumps({"option": f"({letter})"})])
    agent = IntentAgent(LLMClient(model, CFG))
    intent, error = agent.analyze(gaslighting)
    assert error is None and intent is not None
    assert intent.face_act is FaceAct.HPOS_MINUS and intent.turn == 3 and intent.speaker == "Daniel"
    assert intent.intention == f"Daniel {FaceAct.HPOS_MINUS.general_intention}"
    reason, select = model.seen
    assert "Let's think step by step." in reason[-1].content
    assert all(f"({x})" in reason[-1].content for x in LETTERS[: len(OPTIONS)])
    # Phase two sees phase one's reasoning as the model's own turn, then the selection question.
    assert isinstance(select[-2], AIMessage) and select[-2].content == REASONING
    assert isinstance(select[-1], HumanMessage) and "the answer is" in select[-1].content
    assert agent.usage.calls == 2


def test_votes_over_samples(gaslighting: Conversation) -> None:
    a, b = LETTERS[0], LETTERS[3]
    replies = [REASONING, json.dumps({"option": a}), REASONING, json.dumps({"option": b}), REASONING, json.dumps({"option": b})]
    agent = IntentAgent(LLMClient(FakeListChatModel(responses=replies), CFG), samples=3)
    intent, _ = agent.analyze(gaslighting)
    assert intent is not None and intent.face_act is OPTIONS[3] and round(intent.score, 2) == 0.67


def test_an_option_outside_the_list_is_malformed(gaslighting: Conversation) -> None:
    agent = IntentAgent(LLMClient(FakeListChatModel(responses=[REASONING, '{"option": "Z"}']), CFG))
    intent, error = agent.analyze(gaslighting)
    assert intent is None and error is not None and error.kind == "malformed"


def test_detector_adds_the_intent_when_enabled(gaslighting: Conversation) -> None:
    verdict = json.dumps({"manipulative": False})
    model = FakeListChatModel(responses=[verdict, REASONING, json.dumps({"option": "A"})])
    det = LLMDetector(model=model, settings=CFG.model_copy(update={"intents": True}), use_store=False)
    result = det.analyze(gaslighting)
    [intent] = result.intents
    assert intent.detector == "llm" and intent.face_act is OPTIONS[0]
    assert det.usage.calls == 3


@pytest.mark.parametrize(("answer", "act"), [
    ("H", FaceAct.HNEG_MINUS), ("(D)", FaceAct.HPOS_MINUS), ("hpos-", FaceAct.HPOS_MINUS),
    ("(D) hpos-", FaceAct.HPOS_MINUS), ("HPOS+", FaceAct.HPOS_PLUS), ("The answer is sneg+", FaceAct.SNEG_PLUS),
    ("other", FaceAct.OTHER), ("(A) spos+, not spos-", FaceAct.SPOS_PLUS),
])
def test_the_answer_may_be_the_letter_or_the_acts_code(answer: str, act: FaceAct) -> None:
    """The options show both; "hpos-" must not be read as its first letter (H is hneg-)."""
    assert OPTIONS[LETTERS.index(IntentChoice.model_validate({"option": answer}).option)] is act


@pytest.mark.parametrize("answer", ["Z", "spos+ or spos-", ""])
def test_no_option_or_two_codes_are_malformed(answer: str) -> None:
    with pytest.raises(ValueError, match="option must be one of"):
        IntentChoice.model_validate({"option": answer})
