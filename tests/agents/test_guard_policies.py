"""guard(runnable): `on_error`, `policy="raise"` and spans, as for the middleware (issue 22)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from guardian.agents import guard
from guardian.agents.policy import (
    DEFAULT_INPUT_ERROR_REPLY,
    GuardianScreenError,
    GuardianViolation,
)
from guardian.telemetry import Telemetry
from tests.agents.conftest import ERROR_SHOWN, BrokenDetector, Lines, ScriptedDetector

PROMPT = ChatPromptTemplate.from_messages([("system", "You are a helpful assistant."), ("human", "{question}")])


def fake(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(content=r) for r in replies]))


def test_on_error_block(lines: Lines) -> None:
    chain = guard(PROMPT | fake(lines.benign_reply.text) | StrOutputParser(), detectors=[BrokenDetector()], on_error="block", directions=["output"])
    assert chain.invoke({"question": lines.benign.text}) == ERROR_SHOWN
    refusing = guard(PROMPT | fake() | StrOutputParser(), detectors=[BrokenDetector()], on_error="block")
    assert refusing.invoke({"question": lines.benign.text}) == DEFAULT_INPUT_ERROR_REPLY


def test_on_error_pass_is_the_default(lines: Lines) -> None:
    chain = guard(PROMPT | fake(lines.belittling.text) | StrOutputParser(), detectors=[BrokenDetector()], policy="block")
    assert chain.invoke({"question": lines.benign.text}) == lines.belittling.text


async def test_policy_raise_and_on_error_raise(lines: Lines, scripted: ScriptedDetector) -> None:
    chain = guard(PROMPT | fake(lines.belittling.text) | StrOutputParser(), detectors=[scripted], policy="raise")
    with pytest.raises(GuardianViolation) as caught:
        await chain.ainvoke({"question": lines.benign.text})
    assert caught.value.direction == "output" and caught.value.assessment.decision
    broken = guard(PROMPT | fake() | StrOutputParser(), detectors=[BrokenDetector()], on_error="raise")
    with pytest.raises(GuardianScreenError):
        broken.invoke({"question": lines.benign.text})


def test_review_is_the_middlewares_only() -> None:
    with pytest.raises(ValueError, match="policy must be one of"):
        guard(fake(), policy="review")  # type: ignore[arg-type]


def test_spans_from_guard(lines: Lines, scripted: ScriptedDetector) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(tracer_provider=provider, prometheus_registry=CollectorRegistry())
    chain: Any = guard(PROMPT | fake(lines.denial.text) | StrOutputParser(), detectors=[scripted], telemetry=telemetry)
    chain.invoke({"question": lines.benign.text})
    decided = [(s.attributes["guardian.surface"], s.attributes["guardian.direction"], s.attributes["guardian.decision"]) for s in exporter.get_finished_spans()]
    assert decided == [("guard", "input", "clean"), ("guard", "output", "flagged")]
