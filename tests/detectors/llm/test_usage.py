"""Token counting: LangChain's usage metadata where the model reports it, an estimate where it does not."""

from __future__ import annotations

import json

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage

from guardian.config import LLMSettings
from guardian.detectors.llm.client import LLMClient
from guardian.detectors.llm.parsing import ManipulationAnswer

FAST = LLMSettings(samples=1, backoff_s=0.0, max_retries=0, timeout_s=10.0)
REPLY = json.dumps({"manipulative": False})
PROMPT = [HumanMessage(content="x" * 400)]


def test_reported_usage_is_what_the_budget_counts() -> None:
    reply = AIMessage(
        content=REPLY,
        usage_metadata={"input_tokens": 900, "output_tokens": 34, "total_tokens": 934},
        response_metadata={"model_name": "served-model"},
    )
    client = LLMClient(GenericFakeChatModel(messages=iter([reply, reply])), FAST)
    _, first = client.ask(PROMPT, ManipulationAnswer)
    _, second = client.ask(PROMPT, ManipulationAnswer)
    assert (first.calls, first.tokens) == (1, 934)
    assert (second.calls, second.tokens) == (1, 934)  # one meter per call, not a running total


def test_a_model_without_usage_is_charged_an_estimate() -> None:
    client = LLMClient(GenericFakeChatModel(messages=iter([AIMessage(content=REPLY)])), FAST)
    _, used = client.ask(PROMPT, ManipulationAnswer)
    assert used.calls == 1
    assert used.tokens == 400 // 4 + len(REPLY) // 4  # ~4 characters a token, prompt and reply
