"""Structured output: LangChain's parsed answer is used as it is; a failed parse falls back to the text reader.

The real `ChatOpenAI` client talks to the scripted local endpoint (openai_stub), so the
request really goes through `with_structured_output(method="json_schema", include_raw=True)`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage

from guardian.config import LLMSettings
from guardian.conversation import Conversation
from guardian.detectors.llm import client
from guardian.detectors.llm.client import MalformedOutput, read_structured
from guardian.detectors.llm.manipulation import LLMDetector
from guardian.detectors.llm.parsing import ManipulationAnswer

from .openai_stub import Reply, serve

FAST = LLMSettings(samples=1, backoff_s=0.0, max_retries=1, timeout_s=10.0)
ANSWER = {
    "manipulative": True,
    "confidence": 0.8,
    "techniques": ["Denial"],
    "evidence": [{"quote": "You're overreacting, as usual.", "turn": 1, "technique": "Denial"}],
    "explanation": "denies the promise",
}


def _count_text_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    real = client.extract_json

    def spy(text: str) -> dict[str, Any]:
        reads.append(text)
        return real(text)

    monkeypatch.setattr(client, "extract_json", spy)
    return reads


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_a_parsed_answer_is_used_without_reading_the_text_again(
    gaslighting: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _count_text_reads(monkeypatch)
    with serve([Reply(content=json.dumps(ANSWER))]) as stub:
        det = LLMDetector(settings=FAST.model_copy(update={"base_url": stub.base_url}), use_store=False)
        result = det.analyze(gaslighting)
    assert stub.requests[0]["response_format"]["type"] == "json_schema"
    assert result.decision is True and result.errors == ()
    assert [ev.quote for f in result.findings for ev in f.evidence] == ["You're overreacting, as usual."]
    assert reads == []  # LangChain's parsed object was validated as it was


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_a_parsing_error_falls_back_to_the_text_reader(
    gaslighting: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small local server that writes prose around its JSON still gets its answer read."""
    reads = _count_text_reads(monkeypatch)
    prose = f"The answer is {json.dumps(ANSWER)} because of the tone."
    with serve([Reply(content=prose)]) as stub:
        det = LLMDetector(settings=FAST.model_copy(update={"base_url": stub.base_url}), use_store=False)
        result = det.analyze(gaslighting)
    assert "response_format" in stub.requests[0]
    assert len(stub.requests) == 1  # read on the first try, no retry
    assert result.decision is True and result.errors == ()
    assert reads == [prose]


def test_read_structured_prefers_parsed_and_falls_back_on_parsing_error() -> None:
    text = json.dumps(ANSWER)
    parsed = read_structured({"raw": AIMessage(content=text), "parsed": ANSWER, "parsing_error": None}, ManipulationAnswer)
    assert parsed.manipulative is True and parsed.techniques == ["Denial"]
    failed = {
        "raw": AIMessage(content=f"Sure. {text} Hope it helps."),
        "parsed": None,
        "parsing_error": OutputParserException("Invalid json output"),
    }
    assert read_structured(failed, ManipulationAnswer).explanation == "denies the promise"
    garbage = {"raw": AIMessage(content="I cannot answer that."), "parsed": None, "parsing_error": OutputParserException("x")}
    with pytest.raises(MalformedOutput, match="no JSON object"):
        read_structured(garbage, ManipulationAnswer)


def test_a_completed_partial_object_is_not_trusted() -> None:
    """LangChain's JSON parser completes a cut-off object; half an answer must stay an error."""
    cut = '{"manipulative": true, "techniques": ["Denial"], "evidence": ['
    completed = {"manipulative": True, "techniques": ["Denial"], "evidence": []}
    with pytest.raises(MalformedOutput):
        read_structured({"raw": AIMessage(content=cut), "parsed": completed, "parsing_error": None}, ManipulationAnswer)
    length = AIMessage(content=cut, response_metadata={"finish_reason": "length"})
    with pytest.raises(MalformedOutput, match="max_output_tokens"):
        read_structured({"raw": length, "parsed": completed, "parsing_error": None}, ManipulationAnswer)


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
@pytest.mark.parametrize(("model", "structured"), [("gpt-4o-mini", True), ("local-gguf", True), ("gpt-4-turbo", False), ("gpt-3.5-turbo", False)])
def test_models_without_json_schema_are_asked_in_text(model: str, structured: bool) -> None:
    """LangChain turns json_schema into tool calling for these names; guardian asks them in plain text."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    chat = ChatOpenAI(model=model, api_key=SecretStr("not-needed"), base_url="http://127.0.0.1:9/v1")
    assert client.LLMClient(chat, FAST)._structured is structured
