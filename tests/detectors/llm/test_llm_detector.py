"""The LLM detector: parsing, self-consistency votes, grounding and failure handling.

Chat models are LangChain's own fakes, or the real `ChatOpenAI` client against a
scripted local endpoint (openai_stub) for HTTP failures: 500, 429, 400, timeouts.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage

from guardian.config import LLMSettings
from guardian.conversation import Conversation
from guardian.detectors.llm.client import MalformedOutput, extract_json
from guardian.detectors.llm.manipulation import LLMDetector
from guardian.detectors.llm.parsing import ManipulationAnswer
from guardian.taxonomy import Technique, Vulnerability

from .openai_stub import Reply, serve

FAST = LLMSettings(samples=1, backoff_s=0.0, max_retries=2, timeout_s=10.0)


def answer(
    manipulative: bool = True,
    *,
    quote: str = "You're overreacting, as usual.",
    technique: str = "Denial",
    turn: int | None = 1,
    **extra: Any,
) -> str:
    body: dict[str, Any] = {
        "manipulative": manipulative,
        "confidence": 0.8,
        "techniques": [technique] if manipulative else [],
        "vulnerabilities": ["Naivete"] if manipulative else [],
        "manipulator": "Daniel" if manipulative else None,
        "evidence": [{"quote": quote, "turn": turn, "technique": technique}] if manipulative else [],
        "explanation": "denies the promise",
    }
    body.update(extra)
    return json.dumps(body)


def detector(responses: list[str], **cfg: Any) -> tuple[LLMDetector, FakeListChatModel]:
    model = FakeListChatModel(responses=responses)
    return LLMDetector(model=model, settings=FAST.model_copy(update=cfg), use_store=False), model


# -- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"manipulative": true}',
        'Sure! Here is my answer:\n```json\n{"manipulative": true}\n```\nHope it helps.',
        'The answer is {"manipulative": "Yes"} because of the tone.',
        '```\n{"manipulative": "yes", "confidence": 85}\n```',
        'noise {not json} then {"manipulative": true, "techniques": "Denial, Evasion"}',
    ],
)
def test_json_is_found_in_sloppy_replies(text: str) -> None:
    parsed = ManipulationAnswer.model_validate(extract_json(text))
    assert parsed.manipulative is True
    assert parsed.confidence is None or 0 <= parsed.confidence <= 1


@pytest.mark.parametrize("text", ["Yes.", "I think it is manipulative", "{\"other\": 1", ""])
def test_no_json_is_malformed(text: str) -> None:
    with pytest.raises((MalformedOutput, ValueError)):
        ManipulationAnswer.model_validate(extract_json(text))


def test_labels_are_parsed_through_the_taxonomy(gaslighting: Conversation) -> None:
    det, _ = detector([answer(technique="playing victim role", vulnerabilities=["O_R", "bogus"])])
    result = det.analyze(gaslighting)
    assert result.techniques == {Technique.PLAYING_THE_VICTIM: 1.0}
    assert set(result.vulnerabilities) == {Vulnerability.OVER_RESPONSIBILITY}


# -- votes and grounding --------------------------------------------------------------------


def test_majority_vote_over_samples(gaslighting: Conversation) -> None:
    det, _ = detector([answer(), answer(False), answer()], samples=3)
    result = det.analyze(gaslighting)
    assert det.usage.calls == 3
    assert result.decision is True
    assert result.probability == pytest.approx(2 / 3)
    assert result.techniques == {Technique.DENIAL: pytest.approx(2 / 3)}
    assert result.manipulator == "Daniel"
    [finding] = result.findings
    assert finding.detector == "llm" and finding.technique is Technique.DENIAL
    [ev] = finding.evidence
    assert gaslighting.turn(ev.turn).text[ev.start : ev.end] == ev.quote


def test_minority_yes_is_not_a_finding(gaslighting: Conversation) -> None:
    det, _ = detector([answer(False), answer(), answer(False)], samples=3)
    result = det.analyze(gaslighting)
    assert result.decision is False
    assert result.probability == pytest.approx(1 / 3)
    assert result.findings == () and result.techniques == {}


def test_ungrounded_quotes_are_dropped_and_counted(gaslighting: Conversation) -> None:
    fabricated = answer(quote="I will ruin your life")
    det, _ = detector([fabricated, answer()], samples=2)
    result = det.analyze(gaslighting)
    quotes = [ev.quote for f in result.findings for ev in f.evidence]
    assert "I will ruin your life" not in " ".join(quotes)
    assert quotes == ["You're overreacting, as usual."]
    [error] = result.errors
    assert error.detector == "llm" and "1 quote(s)" in error.message


def test_quote_with_speaker_prefix_and_curly_quotes_grounds(gaslighting: Conversation) -> None:
    det, _ = detector([answer(quote="Daniel: You\u2019re overreacting", turn=None)])
    [finding] = det.analyze(gaslighting).findings
    assert finding.evidence[0].quote == "You're overreacting"
    assert finding.evidence[0].turn == 1


def test_evidence_in_an_earlier_turn_keeps_its_turn(gaslighting: Conversation) -> None:
    det, _ = detector([answer(quote="Know your place", turn=3), answer(quote="I never said that", turn=1)], samples=2)
    result = det.analyze(gaslighting)
    turns = sorted(ev.turn for f in result.findings for ev in f.evidence)
    assert turns == [1, 3]


def test_reply_without_techniques_still_quotes(gaslighting: Conversation) -> None:
    det, _ = detector([answer(techniques=[])])
    [finding] = det.analyze(gaslighting).findings
    assert finding.pattern == "llm_manipulation" and finding.evidence


def test_async_twin_agrees(gaslighting: Conversation) -> None:
    sync_det, _ = detector([answer()] * 3, samples=3)
    async_det, _ = detector([answer()] * 3, samples=3)
    a = sync_det.analyze(gaslighting)
    b = asyncio.run(async_det.aanalyze(gaslighting))
    assert [f.key for f in a.findings] == [f.key for f in b.findings]
    assert a.probability == b.probability


def test_prompt_carries_definitions_and_the_transcript(gaslighting: Conversation) -> None:
    seen: list[Any] = []

    class Recording(FakeListChatModel):
        def _call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
            seen.append(messages)
            return super()._call(messages, *args, **kwargs)

    det = LLMDetector(model=Recording(responses=[answer()]), settings=FAST, use_store=False)
    det.analyze(gaslighting)
    system, human = (m.content for m in seen[0])
    assert Technique.INTIMIDATION.definition in system
    assert Vulnerability.LOW_SELF_ESTEEM.definition in system
    assert "[turn 3] Daniel: You always do this. Know your place." in human


# -- failures -------------------------------------------------------------------------------


def test_no_endpoint_is_unavailable_without_network(gaslighting: Conversation) -> None:
    det = LLMDetector()  # default settings: nothing configured (sockets are disabled in tests)
    result = det.analyze(gaslighting)
    assert result.probability is None and result.findings == ()
    [error] = result.errors
    assert error.kind == "unavailable" and "llm.base_url" in error.message


def test_non_json_is_retried_then_reported(gaslighting: Conversation) -> None:
    det, _ = detector(["I cannot answer that."], max_retries=2)
    result = det.analyze(gaslighting)
    assert result.probability is None
    [error] = result.errors
    assert error.kind == "unavailable" and "JSON" in error.message
    assert det.usage.calls == 3  # first try + 2 retries


def test_one_garbled_reply_is_retried(gaslighting: Conversation) -> None:
    det, _ = detector(["not json at all", answer()], max_retries=1)
    result = det.analyze(gaslighting)
    assert result.decision is True and result.errors == ()
    assert det.usage.calls == 2


class _TimesOut:
    """A message iterator whose every item is a timeout (a generator would stop after one)."""

    def __init__(self) -> None:
        self.calls = 0

    def __iter__(self) -> _TimesOut:
        return self

    def __next__(self) -> AIMessage:
        self.calls += 1
        raise TimeoutError("read timed out")


def test_timeout_from_any_chat_model(gaslighting: Conversation) -> None:
    flaky = _TimesOut()
    model = GenericFakeChatModel(messages=flaky)
    det = LLMDetector(model=model, settings=FAST, use_store=False)
    result = det.analyze(gaslighting)
    [error] = result.errors
    assert error.kind == "timeout"
    assert "timed out" in error.message
    assert flaky.calls == 3  # first try + 2 retries, then the detector gives up on this turn


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_http_500_then_success_with_real_client(gaslighting: Conversation) -> None:
    with serve([Reply(status=500), Reply(status=503), Reply(content=answer())]) as stub:
        det = LLMDetector(settings=FAST.model_copy(update={"base_url": stub.base_url, "structured": "text"}), use_store=False)
        result = det.analyze(gaslighting)
    assert result.decision is True and result.errors == ()
    assert len(stub.requests) == 3
    assert det.usage.calls == 3 and det.usage.failed_calls == 2
    assert det.usage.tokens == 120  # the server's own usage figure for the one success


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
@pytest.mark.parametrize(("status", "kind"), [(500, "unavailable"), (429, "unavailable")])
def test_http_errors_exhaust_retries_and_are_recorded(gaslighting: Conversation, status: int, kind: str) -> None:
    with serve([Reply(status=status)]) as stub:
        det = LLMDetector(settings=FAST.model_copy(update={"base_url": stub.base_url}), use_store=False)
        result = det.analyze(gaslighting)
    assert len(stub.requests) == 3
    assert result.probability is None
    [error] = result.errors
    assert error.kind == kind
    assert ("rate-limited" if status == 429 else "server error") in error.message


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_http_timeout_with_real_client(gaslighting: Conversation) -> None:
    cfg = FAST.model_copy(update={"timeout_s": 0.3, "max_retries": 1})
    with serve([Reply(delay_s=2.0, content=answer())]) as stub:
        det = LLMDetector(settings=cfg.model_copy(update={"base_url": stub.base_url}), use_store=False)
        result = det.analyze(gaslighting)
    [error] = result.errors
    assert error.kind == "timeout"
    assert len(stub.requests) == 2


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_schema_request_falls_back_to_text(gaslighting: Conversation) -> None:
    """A server that rejects `response_format` is asked again in plain text, and from then on."""
    with serve([Reply(content=answer(), reject_response_format=True)]) as stub:
        det = LLMDetector(settings=FAST.model_copy(update={"base_url": stub.base_url, "samples": 2}), use_store=False)
        result = det.analyze(gaslighting)
    assert result.decision is True and result.errors == ()
    sent = ["response_format" in r for r in stub.requests]
    assert sent == [True, False, False]
    assert stub.requests[0]["response_format"]["type"] == "json_schema"
    wire = stub.requests[0]["response_format"]["json_schema"]["schema"]
    assert wire["properties"]["techniques"]["items"]["enum"] == [t.value for t in Technique]


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_ungrounded_quote_from_endpoint(gaslighting: Conversation) -> None:
    with serve([Reply(content=answer(quote="Give me your bank password"))]) as stub:
        det = LLMDetector(settings=FAST.model_copy(update={"base_url": stub.base_url}), use_store=False)
        result = det.analyze(gaslighting)
    assert all(ev.quote != "Give me your bank password" for f in result.findings for ev in f.evidence)
    assert any("not found in the transcript" in e.message for e in result.errors)


def test_a_reply_cut_at_the_token_limit_says_so() -> None:
    from guardian.detectors.llm.client import parse_reply

    cut = '{"manipulative": true, "techniques": ["Denial"], "evidence": [{"turn": 1, "quote": "I never'
    inner = '{"manipulative": true, "evidence": [{"turn": 1, "quote": "x"}], "reasoning": "'
    for text in (cut, inner):
        message = AIMessage(content=text, response_metadata={"finish_reason": "length"})
        with pytest.raises(MalformedOutput, match="max_output_tokens"):
            parse_reply(message, ManipulationAnswer)
    with pytest.raises(MalformedOutput, match="no JSON object"):  # not cut: the usual message
        parse_reply(AIMessage(content=cut, response_metadata={"finish_reason": "stop"}), ManipulationAnswer)
