"""guardian.telemetry: what one screen counts, and `guardian watch --metrics-port` serving it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from guardian.conversation import Evidence
from guardian.findings import Assessment, DetectorError, Finding
from guardian.taxonomy import Technique
from guardian.telemetry import Telemetry, decision_of, labels_of

from .netutil import free_port

ROOT = Path(__file__).resolve().parents[1]


def _flagged() -> Assessment:
    quote = Evidence(turn=1, quote="Know your place.", start=0, end=16)
    return Assessment(
        conversation_id="c",
        turn=1,
        probability=0.8,
        decision=True,
        techniques={Technique.INTIMIDATION: 0.8, Technique.DENIAL: 0.3},
        findings=(Finding(technique=Technique.INTIMIDATION, score=0.8, evidence=(quote,), detector="local"),),
        latency_ms=12.0,
    )


def test_decision_and_labels() -> None:
    flagged = _flagged()
    assert decision_of(flagged, flagged=True) == "flagged"
    assert labels_of(flagged) == ["Intimidation"]  # the finding's label, not every technique score
    scored_only = Assessment(conversation_id="c", turn=0, techniques={Technique.DENIAL: 0.7, Technique.INTIMIDATION: 0.2})
    assert labels_of(scored_only) == ["Denial"]
    failed = Assessment(conversation_id="c", turn=0, errors=(DetectorError(detector="llm", kind="timeout", message="slow"),))
    assert decision_of(failed, flagged=False) == "failed"
    assert decision_of(Assessment.refused("language fr", conversation_id="c", turn=0), flagged=False) == "not_assessed"
    assert decision_of(Assessment(conversation_id="c", turn=0), flagged=False) == "clean"


def test_record_counts_without_a_span() -> None:
    reader = InMemoryMetricReader()
    registry = CollectorRegistry()
    telemetry = Telemetry(meter_provider=MeterProvider(metric_readers=[reader]), prometheus_registry=registry)
    telemetry.record(_flagged(), surface="watch", direction="turn", flagged=True)
    labels = {"surface": "watch", "direction": "turn"}
    assert registry.get_sample_value("guardian_screens_total", {**labels, "decision": "flagged"}) == 1
    assert registry.get_sample_value("guardian_flags_total", {**labels, "technique": "Intimidation"}) == 1
    assert registry.get_sample_value("guardian_flags_total", {**labels, "technique": "Denial"}) is None
    assert registry.get_sample_value("guardian_screen_latency_seconds_sum", labels) == pytest.approx(0.012)
    data = reader.get_metrics_data()
    names = {m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}
    assert {"guardian.screens", "guardian.flags", "guardian.screen.duration"} <= names


def test_each_new_registry_counts_from_zero() -> None:
    # Registries made and dropped one after another reuse addresses; the instruments of a dropped
    # one must never be handed to the next (this failed once in CI, keyed by id()).
    for _ in range(50):
        registry = CollectorRegistry()
        Telemetry(prometheus_registry=registry).record(_flagged(), surface="watch", direction="turn", flagged=True)
        assert registry.get_sample_value("guardian_screens_total", {"surface": "watch", "direction": "turn", "decision": "flagged"}) == 1
        del registry


def test_without_an_sdk_nothing_is_recorded_and_nothing_breaks() -> None:
    # The API's default providers are no-ops: a screen costs a few calls, no exporter is needed.
    telemetry = Telemetry(prometheus=False)
    with telemetry.screen(surface="middleware", direction="output", text="secret words") as span:
        span.assessed(_flagged(), flagged=True)
    assert not span.span.is_recording()


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_watch_metrics_port_serves_prometheus_metrics(tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "guardian.cli", "watch", str(ROOT / "examples" / "gaslighting.txt"), "--headless",
           "--instant", "--no-log", "--detectors", "keyphrases", "--metrics-port", str(port)]
    code = (
        "import urllib.request\n"
        "from guardian.cli import main\n"
        f"rc = main({cmd[3:]!r})\n"
        f"page = urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=5).read().decode()\n"
        "print('RC', rc)\n"
        "print(page)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = done.stdout
    assert "RC 0" in page
    turns = sum(1 for line in (ROOT / "examples" / "gaslighting.txt").read_text().splitlines() if line.strip())
    screened = [line for line in page.splitlines() if line.startswith("guardian_screens_total{") and 'surface="watch"' in line]
    assert screened and sum(float(line.rsplit(" ", 1)[1]) for line in screened) == turns
    assert "guardian_screen_latency_seconds_bucket" in page


def test_metrics_port_out_of_range_is_one_sentence() -> None:
    from guardian.errors import GuardianError
    from guardian.tui.launch import serve_metrics_on

    with pytest.raises(GuardianError, match="from 1 to 65535"):
        serve_metrics_on(70000)
