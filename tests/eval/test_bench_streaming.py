"""The streaming figures of `guardian bench --suite middleware`, on a tiny run (key phrases, fast)."""

from __future__ import annotations

import json
import math

from guardian.eval.bench_middleware import _call_groups
from guardian.eval.bench_streaming import bench_streaming


def test_streaming_figures_are_measured_and_json_safe() -> None:
    figures = bench_streaming(_call_groups(3, 2), detectors=["keyphrases"], token_ms=1.0, max_calls=3)
    json.dumps(figures, allow_nan=False)
    assert figures["runs"] == 2 and all(0 < n <= 3 for n in figures["calls_per_run"])
    ttft = figures["added_time_to_first_token_ms"]["p50"]
    assert ttft is not None and math.isfinite(ttft)
    hold = figures["hold_back"]
    assert hold["chars_max"] >= 0
    if hold["ms_p50"] is not None:  # some reply streamed through unchanged
        assert hold["ms_p50"] >= 0 and hold["chars_p50"] >= 0
