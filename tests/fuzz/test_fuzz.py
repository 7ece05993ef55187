"""Bad input never escapes as anything but a documented InputError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardian.conversation import Conversation
from guardian.errors import InputError
from guardian.grounding import ground
from guardian.readers import InputFormat, decode, parse_transcript

HERE = Path(__file__).resolve().parent

_line_ish = st.one_of(
    st.text(max_size=80),
    st.builds(lambda n, t: f"{n}: {t}", st.text(max_size=12), st.text(max_size=40)),
    st.builds(lambda t: f"[12/03/24, 21:15] Ann: {t}", st.text(max_size=30)),
    st.just("WEBVTT"),
    st.just("00:00:01.000 --> 00:00:02.000"),
    st.just("00:00:01,000 --> 00:00:02,000"),
    st.builds(lambda t: '{"speaker": "A", "text": ' + t + "}", st.text(max_size=20)),
    st.just("<v Ann>hi</v>"),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(_line_ish, max_size=12), st.sampled_from(list(InputFormat)), st.text(max_size=20))
def test_readers_raise_only_input_errors(lines: list[str], fmt: InputFormat, quote: str) -> None:
    try:
        conv = parse_transcript("\n".join(lines), input_format=fmt)
    except InputError:
        return
    assert isinstance(conv, Conversation)
    assert all(t.text.strip() for t in conv.turns)
    ev = ground(conv, quote)
    if ev is not None:
        assert conv.turn(ev.turn).text[ev.start : ev.end] == ev.quote


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes(data: bytes) -> None:
    try:
        parse_transcript(decode(data, source="x"), source="x")
    except InputError as exc:
        message = str(exc)
    else:
        return
    assert message.startswith("x")


@pytest.mark.slow
def test_atheris_bounded_run(tmp_path: Path) -> None:
    import resource

    # libFuzzer's memory check reads the process's peak RSS, which Linux carries over from this
    # (forked) test process into the fuzzer: the limit is what the fuzz target may add on top of it.
    inherited = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    proc = subprocess.run(
        [sys.executable, str(HERE / "fuzz_readers.py"), "-max_total_time=15", f"-rss_limit_mb={inherited + 2048}",
         "-print_final_stats=1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done" in proc.stderr or "stat::number_of_executed_units" in proc.stderr
