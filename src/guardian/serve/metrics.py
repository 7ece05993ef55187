"""Prometheus metrics of one service process (`GET /metrics`).

Each app has its own registry (no process-wide globals), so tests and several apps in one
process never share counters. With `--workers N` each worker counts its own requests: scrape
them through one port per worker or read the sum of what the load balancer sees.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from guardian.events import AssessmentReady, ErrorRaised, Event, FindingRaised

__all__ = ["CONTENT_TYPE_LATEST", "ServeMetrics"]

#: Latency buckets (seconds): a turn takes tens of milliseconds, an audio utterance about a second.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "guardian_requests", "HTTP requests and WebSocket sessions", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "guardian_request_seconds", "time to answer a request", ["method", "route"], buckets=BUCKETS, registry=r
        )
        self.turns = Counter("guardian_turns", "turns assessed (retries answered from the store excluded)", registry=r)
        self.assessment = Histogram(
            "guardian_assessment_seconds", "detector time per turn (the monitor's latency)", buckets=BUCKETS, registry=r
        )
        self.flags = Counter("guardian_flags", "new findings raised, by technique or pattern", ["technique"], registry=r)
        self.flagged_turns = Counter("guardian_flagged_turns", "turns whose decision is manipulation", registry=r)
        self.errors = Counter("guardian_errors", "detector, input and service errors", ["kind"], registry=r)
        self.open_conversations = Gauge(
            "guardian_open_conversations", "conversations held in memory by this process", registry=r
        )
        self.open_calls = Gauge("guardian_open_calls", "audio calls streaming now", registry=r)
        self.open_streams = Gauge("guardian_open_streams", "event WebSockets connected now", registry=r)

    def observe(self, event: Event) -> None:
        """A monitor subscriber: flags, errors and assessment time as they happen."""
        if isinstance(event, FindingRaised):
            self.flags.labels(event.finding.label).inc()
        elif isinstance(event, ErrorRaised):
            self.errors.labels(event.kind).inc()
        elif isinstance(event, AssessmentReady):
            self.turns.inc()
            self.assessment.observe(event.assessment.latency_ms / 1000)
            if event.assessment.decision:
                self.flagged_turns.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
