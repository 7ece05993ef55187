"""Spans, metrics and LangSmith-visible verdicts from a real `create_agent` run.

Captured with the OpenTelemetry SDK's InMemorySpanExporter and InMemoryMetricReader (the
providers are passed in, so the global ones stay untouched) and a private Prometheus
registry; the LangSmith side is a plain LangChain callback handler, which is what
LangSmith's tracer is.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from guardian.agents import GuardianMiddleware
from guardian.telemetry import Telemetry
from tests.agents.conftest import BrokenDetector, Lines, ScriptedDetector


class Captured:
    def __init__(self, *, trace_text: bool = False) -> None:
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.registry = CollectorRegistry()
        self.telemetry = Telemetry(
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(metric_readers=[self.reader]),
            prometheus_registry=self.registry,
            trace_text=trace_text,
        )

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


def _agent(reply: str, detectors: list[Any], captured: Captured, **options: Any) -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage(content=reply)]))
    return create_agent(model, middleware=[GuardianMiddleware(detectors=detectors, telemetry=captured.telemetry, **options)])


def test_one_span_per_screen_with_the_verdict_and_never_the_text(lines: Lines, scripted: ScriptedDetector) -> None:
    captured = Captured()
    _agent(lines.belittling.text, [scripted], captured, policy="block").invoke({"messages": [HumanMessage(lines.benign.text)]})
    spans = {s.attributes["guardian.direction"]: s for s in captured.spans.get_finished_spans() if s.name == "guardian.screen"}
    assert set(spans) == {"input", "output"}
    out = spans["output"].attributes
    assert out["guardian.decision"] == "flagged" and tuple(out["guardian.techniques"]) == ("Rationalization",)
    assert tuple(out["guardian.detectors"]) == ("scripted-test",)
    assert out["guardian.probability"] == 0.91 and out["guardian.latency_ms"] >= 0
    assert out["guardian.surface"] == "middleware" and out["guardian.speaker"] == "Assistant"
    assert spans["input"].attributes["guardian.decision"] == "clean"
    for span in spans.values():
        for value in span.attributes.values():
            assert lines.belittling.text not in str(value) and lines.benign.text not in str(value)


def test_trace_text_puts_the_text_on_the_span(lines: Lines, scripted: ScriptedDetector) -> None:
    captured = Captured(trace_text=True)
    _agent(lines.belittling.text, [scripted], captured).invoke({"messages": [HumanMessage(lines.benign.text)]})
    texts = {s.attributes["guardian.direction"]: s.attributes.get("guardian.text") for s in captured.spans.get_finished_spans()}
    assert texts == {"input": lines.benign.text, "output": lines.belittling.text}


def test_metrics_count_screens_flags_and_latency(lines: Lines, scripted: ScriptedDetector) -> None:
    captured = Captured()
    _agent(lines.belittling.text, [scripted], captured, policy="warn").invoke({"messages": [HumanMessage(lines.benign.text)]})
    screens = {(p.attributes["guardian.direction"], p.attributes["guardian.decision"]): p.value for p in captured.points("guardian.screens")}
    assert screens == {("input", "clean"): 1, ("output", "flagged"): 1}
    flags = {p.attributes["guardian.technique"]: p.value for p in captured.points("guardian.flags")}
    assert flags == {"Rationalization": 1}
    (latency,) = [p for p in captured.points("guardian.screen.duration") if p.attributes["guardian.direction"] == "output"]
    assert latency.count == 1 and latency.sum >= 0
    registry = captured.registry
    assert registry.get_sample_value("guardian_screens_total", {"surface": "middleware", "direction": "output", "decision": "flagged"}) == 1
    assert registry.get_sample_value("guardian_flags_total", {"surface": "middleware", "direction": "output", "technique": "Rationalization"}) == 1
    assert registry.get_sample_value("guardian_screen_latency_seconds_count", {"surface": "middleware", "direction": "output"}) == 1


def test_errors_are_counted_by_detector(lines: Lines) -> None:
    captured = Captured()
    _agent(lines.benign_reply.text, [BrokenDetector()], captured).invoke({"messages": [HumanMessage(lines.benign.text)]})
    errors = [(p.attributes["guardian.detector"], p.attributes["guardian.error.kind"], p.value) for p in captured.points("guardian.detector.errors")]
    assert errors == [("broken-test", "error", 2)]
    decisions = {p.attributes["guardian.decision"] for p in captured.points("guardian.screens")}
    assert decisions == {"failed"}
    assert captured.registry.get_sample_value("guardian_detector_errors_total", {"surface": "middleware", "detector": "broken-test", "kind": "error"}) == 2


class RunRecorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    def on_chain_start(self, serialized: Any, inputs: Any, *, tags: list[str] | None = None, metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if kwargs.get("name") == "guardian":
            self.runs.append({"inputs": inputs, "tags": tags or [], "metadata": metadata or {}, "parent": kwargs.get("parent_run_id")})


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_verdicts_are_child_runs_with_metadata_and_tags(lines: Lines, scripted: ScriptedDetector, mode: str) -> None:
    captured = Captured()
    recorder = RunRecorder()
    agent = _agent(lines.belittling.text, [scripted], captured, policy="block")
    config = {"callbacks": [recorder], "configurable": {"thread_id": f"ls-{mode}"}}
    message = {"messages": [HumanMessage(lines.benign.text)]}
    if mode == "sync":
        agent.invoke(message, config)
    else:
        await agent.ainvoke(message, config)
    by_direction = {run["metadata"]["guardian_direction"]: run for run in recorder.runs}
    assert set(by_direction) == {"input", "output"}
    flagged = by_direction["output"]
    assert flagged["metadata"]["guardian_decision"] == "flagged" and flagged["metadata"]["guardian_action"] == "blocked"
    assert {"guardian", "guardian:flagged", "guardian:blocked", "guardian:technique:Rationalization"} <= set(flagged["tags"])
    assert flagged["parent"] is not None  # a child of the hook's run, where LangSmith shows it
    assert flagged["inputs"]["techniques"] == ["Rationalization"]
    assert "guardian:clean" in by_direction["input"]["tags"]


def test_no_child_run_without_callbacks(lines: Lines, scripted: ScriptedDetector) -> None:
    from guardian.agents import tracing

    assert tracing._config({"decision": "clean"}) is None  # outside a run: nothing to attach to
