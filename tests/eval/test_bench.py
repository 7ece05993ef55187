from __future__ import annotations

import json

import pytest

from guardian.cli import main
from guardian.eval.bench import latency_runs, machine, percentile, run_bench, run_suite


def test_percentile() -> None:
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([5], 0.95) == 5


def test_latency_runs_report_medians_of_runs() -> None:
    calls = iter([[100.0], [1.0, 2.0, 3.0], [2.0, 3.0, 4.0], [3.0, 4.0, 5.0], [1.0, 1.0, 1.0], [9.0, 9.0, 9.0]])
    figures = latency_runs(lambda: next(calls), runs=5)
    assert figures["p50_ms"] == 3.0  # warm-up's 100 ms is not counted
    assert figures["runs"] == 5


@pytest.mark.slow
def test_detect_suite_in_process() -> None:
    figures = run_suite("detect", runs=1)
    assert "error" not in figures, figures
    assert figures["per_turn"]["p50_ms"] > 0
    assert figures["batch_dialogues_per_s"] > 0
    assert figures["peak_rss_mb"] > 0


@pytest.mark.slow
def test_monitor_suite_in_its_own_process() -> None:
    result = run_bench(["monitor"], runs=1)
    assert result["machine"] == machine()
    figures = result["suites"]["monitor"]
    assert "error" not in figures, figures
    assert figures["turns"] == 200
    assert figures["turns_per_s"] > 0


def test_cli_rejects_unknown_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--suite", "nope"]) == 2
    assert "unknown suite 'nope'" in capsys.readouterr().err


def test_cli_prints_one_json_object(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import guardian.eval.bench as bench

    monkeypatch.setattr(bench, "run_bench", lambda names, runs: {"machine": machine(), "suites": {n: {} for n in names}})
    assert main(["bench", "--suite", "detect", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["suites"] == {"detect": {}}


def test_scale_figures_time_every_size() -> None:
    from guardian.eval.bench import SCALE_TURNS, SUITES, scale_figures

    figures = scale_figures((50, 200), runs=1)
    assert figures["detector"] == "keyphrases"
    assert set(figures["seconds"]) == set(figures["per_turn_ms"]) == {"50", "200"}
    assert all(v >= 0 for v in figures["seconds"].values())
    assert SCALE_TURNS == (1_000, 10_000, 100_000) and "scale" in SUITES
