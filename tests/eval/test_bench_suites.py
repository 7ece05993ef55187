"""The `index` and `watch` bench suites (issue 20: the lab's bench scripts became suites) run at tiny sizes."""

from __future__ import annotations

import pytest

from guardian.cli import main
from guardian.eval.bench import SUITES


def test_every_suite_is_named_in_bench_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.replace("│", " ").split())
    for name in SUITES:
        assert f" {name} |" in shown, name


def test_watch_suite_times_typed_turns_and_their_assessments() -> None:
    from guardian.detectors import registry
    from guardian.eval.bench_watch import DETECTOR_NAME, bench_watch

    figures = bench_watch(1, turns=2, delay_s=0.05)
    assert figures["turn_on_screen"]["runs"] == 1 and figures["turn_on_screen"]["items_per_run"] == 2
    # the assessment shows after the detector's delay, never before the turn itself
    assert figures["assessment_on_screen"]["p50_ms"] >= 50
    assert figures["assessment_on_screen"]["p50_ms"] >= figures["turn_on_screen"]["p50_ms"]
    assert figures["ui_loop_lag"]["p50_ms"] >= 0
    assert DETECTOR_NAME not in registry.names()  # registered only while the session loads


@pytest.mark.slow
def test_index_suite_builds_a_temporary_store_and_queries_it() -> None:
    from guardian.eval.bench_index import bench_index

    figures = bench_index(1, dialogues=12, queries=2)
    assert figures["dialogues"] == figures["stored"] == 12
    assert figures["second_build_added"] == 0  # the second build finds everything stored
    for key in ("query_k3", "query_k3_technique_filter", "query_k3_technique_filter_chroma_only"):
        assert figures[key]["items_per_run"] == 2 and figures[key]["p50_ms"] > 0, key
