"""Traces and metrics of screening: OpenTelemetry spans and metrics, Prometheus counters.

Why here and not in `agents/`: the chatbot middleware, `guard()`, `guardian watch` and
`guardian listen` all screen turns, and an operator wants one set of numbers for all of
them. Only `opentelemetry-api` is used, which is a no-op until the application
configures an SDK (the library never configures one: that is the application's call);
Prometheus instruments go to `prometheus_client`'s default registry unless another is
given, and `serve_metrics(port)` exposes them (`guardian watch --metrics-port`).

Spans never carry the screened text unless the operator asks (`trace_text=True`): the
conversations screened are private, and a trace backend is usually shared.

Names (OpenTelemetry / Prometheus):
- span `guardian.screen`: `guardian.surface`, `guardian.direction`, `guardian.detectors`,
  `guardian.latency_ms`, `guardian.decision` (flagged | clean | failed | not_assessed),
  `guardian.probability`, `guardian.techniques`, `guardian.errors`.
- `guardian.screens` / `guardian_screens_total`: screens by surface, direction, decision.
- `guardian.flags` / `guardian_flags_total`: flagged screens by technique (or pattern).
- `guardian.detector.errors` / `guardian_detector_errors_total`: by detector and kind.
- `guardian.screen.duration` / `guardian_screen_latency_seconds`: a latency histogram.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from guardian.findings import Assessment

Decision = Literal["flagged", "clean", "failed", "not_assessed"]

_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def decision_of(assessment: Assessment, *, flagged: bool) -> Decision:
    """One word for the outcome of a screen: a flag wins over a failure of another detector."""
    if flagged:
        return "flagged"
    if assessment.errors:
        return "failed"
    if assessment.not_assessed:
        return "not_assessed"
    return "clean"


def labels_of(assessment: Assessment) -> list[str]:
    """What a flag is counted as: the labels (technique or pattern) of the findings about the
    assessed turn, strongest first; without findings, the techniques scored at 0.5 or more.

    Not every technique score: a model that scores all eleven on every turn would count a
    flag eleven times.
    """
    on_turn = [f for f in assessment.findings if not f.evidence or any(e.turn == assessment.turn for e in f.evidence)]
    if on_turn:
        return list(dict.fromkeys(f.label for f in sorted(on_turn, key=lambda f: -f.score)))
    ranked = sorted(assessment.techniques.items(), key=lambda kv: -kv[1])
    return [t.value for t, score in ranked if score >= 0.5]


class _Prometheus:
    """The Prometheus instruments of one registry (created once: a registry rejects duplicates)."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Histogram

        self.screens = Counter(
            "guardian_screens", "Turns screened by guardian", ["surface", "direction", "decision"], registry=registry
        )
        self.flags = Counter(
            "guardian_flags", "Flagged turns by technique or pattern", ["surface", "direction", "technique"], registry=registry
        )
        self.errors = Counter(
            "guardian_detector_errors", "Detector failures and timeouts", ["surface", "detector", "kind"], registry=registry
        )
        self.latency = Histogram(
            "guardian_screen_latency_seconds",
            "Time to screen one turn",
            ["surface", "direction"],
            buckets=_LATENCY_BUCKETS_S,
            registry=registry,
        )


# Keyed by the registry itself, weakly: keyed by id(), a registry that was garbage-collected
# handed its instruments to the next registry allocated at the same address.
_PROMETHEUS: weakref.WeakKeyDictionary[Any, _Prometheus] = weakref.WeakKeyDictionary()
_PROMETHEUS_LOCK = threading.Lock()


def _prometheus(registry: Any | None) -> _Prometheus | None:
    try:
        import prometheus_client
    except ImportError:  # optional at run time: metrics then go to OpenTelemetry only
        return None
    registry = prometheus_client.REGISTRY if registry is None else registry
    with _PROMETHEUS_LOCK:
        found = _PROMETHEUS.get(registry)
        if found is None:
            found = _PROMETHEUS[registry] = _Prometheus(registry)
        return found


@dataclass(frozen=True, slots=True)
class _OtelInstruments:
    screens: Any
    flags: Any
    errors: Any
    duration: Any


def _otel(meter_provider: Any | None) -> _OtelInstruments:
    from opentelemetry import metrics

    from guardian import __version__

    meter = (meter_provider or metrics.get_meter_provider()).get_meter("guardian", __version__)
    return _OtelInstruments(
        screens=meter.create_counter("guardian.screens", unit="{turn}", description="Turns screened by guardian"),
        flags=meter.create_counter("guardian.flags", unit="{turn}", description="Flagged turns by technique or pattern"),
        errors=meter.create_counter("guardian.detector.errors", unit="{error}", description="Detector failures and timeouts"),
        duration=meter.create_histogram("guardian.screen.duration", unit="s", description="Time to screen one turn"),
    )


class Telemetry:
    """Where screens are reported. The default reports to the global OpenTelemetry providers
    (no-op unless the application set an SDK) and to Prometheus' default registry.
    """

    def __init__(
        self,
        *,
        tracer_provider: Any | None = None,
        meter_provider: Any | None = None,
        prometheus_registry: Any | None = None,
        prometheus: bool = True,
        trace_text: bool = False,
    ) -> None:
        """Args:
        tracer_provider / meter_provider: OpenTelemetry providers; default the global ones
            (looked up on first use, so an SDK configured after this object still counts).
        prometheus_registry: a `prometheus_client.CollectorRegistry`; default the global one.
        prometheus: record Prometheus metrics at all.
        trace_text: put the screened text on the span (off: conversations are private).
        """
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.prometheus_registry = prometheus_registry
        self.prometheus = prometheus
        self.trace_text = trace_text
        self._instruments: _OtelInstruments | None = None
        self._tracer: Any = None

    def _otel_instruments(self) -> _OtelInstruments:
        if self._instruments is None:
            self._instruments = _otel(self.meter_provider)
        return self._instruments

    def tracer(self) -> Any:
        if self._tracer is None:
            from opentelemetry import trace

            from guardian import __version__

            provider = self.tracer_provider or trace.get_tracer_provider()
            self._tracer = provider.get_tracer("guardian", __version__)
        return self._tracer

    @contextmanager
    def screen(self, *, surface: str, direction: str, speaker: str | None = None, text: str | None = None) -> Iterator[Screen]:
        """A span around one screen; call `.assessed(...)` on what it yields once the verdict is known."""
        attributes: dict[str, Any] = {"guardian.surface": surface, "guardian.direction": direction}
        if speaker is not None:
            attributes["guardian.speaker"] = speaker
        if self.trace_text and text is not None:
            attributes["guardian.text"] = text
        with self.tracer().start_as_current_span("guardian.screen", attributes=attributes) as span:
            yield Screen(self, span, surface, direction, time.perf_counter())

    def record(self, assessment: Assessment, *, surface: str, direction: str, flagged: bool, seconds: float | None = None) -> None:
        """Count one screen in the metrics (no span): what `watch`/`listen` report per assessed turn."""
        if seconds is None:
            seconds = (assessment.latency_ms or 0.0) / 1000.0
        decision = decision_of(assessment, flagged=flagged)
        labels = labels_of(assessment) if flagged else []
        otel = self._otel_instruments()
        base = {"guardian.surface": surface, "guardian.direction": direction}
        otel.screens.add(1, {**base, "guardian.decision": decision})
        otel.duration.record(seconds, base)
        for label in labels or (["unspecified"] if flagged else []):
            otel.flags.add(1, {**base, "guardian.technique": label})
        for error in assessment.errors:
            otel.errors.add(1, {"guardian.surface": surface, "guardian.detector": error.detector, "guardian.error.kind": error.kind})
        prom = _prometheus(self.prometheus_registry) if self.prometheus else None
        if prom is not None:
            prom.screens.labels(surface, direction, decision).inc()
            prom.latency.labels(surface, direction).observe(seconds)
            for label in labels or (["unspecified"] if flagged else []):
                prom.flags.labels(surface, direction, label).inc()
            for error in assessment.errors:
                prom.errors.labels(surface, error.detector, error.kind).inc()


@dataclass(frozen=True, slots=True)
class Screen:
    """One open `guardian.screen` span."""

    telemetry: Telemetry
    span: Any
    surface: str
    direction: str
    started: float

    def assessed(self, assessment: Assessment, *, flagged: bool) -> None:
        """Put the verdict on the span and count it; never the text (see `Telemetry.trace_text`)."""
        seconds = time.perf_counter() - self.started
        decision = decision_of(assessment, flagged=flagged)
        span = self.span
        if span.is_recording():
            span.set_attribute("guardian.decision", decision)
            span.set_attribute("guardian.detectors", list(assessment.detectors))
            span.set_attribute("guardian.latency_ms", round(seconds * 1000.0, 3))
            span.set_attribute("guardian.techniques", labels_of(assessment))
            if assessment.probability is not None:
                span.set_attribute("guardian.probability", assessment.probability)
            if assessment.errors:
                span.set_attribute("guardian.errors", [f"{e.detector}: {e.kind}" for e in assessment.errors])
            if assessment.not_assessed:
                span.set_attribute("guardian.not_assessed", assessment.not_assessed)
        self.telemetry.record(assessment, surface=self.surface, direction=self.direction, flagged=flagged, seconds=seconds)


def serve_metrics(port: int, *, addr: str = "127.0.0.1") -> None:
    """Expose the default Prometheus registry on http://addr:port/metrics (a daemon thread).

    Loopback by default: the numbers say what was flagged, which is for the operator.
    """
    from prometheus_client import start_http_server

    _prometheus(None)  # register the instruments so the page lists them from the first scrape
    start_http_server(port, addr=addr)


__all__ = ["Decision", "Screen", "Telemetry", "decision_of", "labels_of", "serve_metrics"]
