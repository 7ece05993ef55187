"""The example store through `chromadb.HttpClient` against a real Chroma server on 127.0.0.1.

The server is chromadb's own `chroma run` (shipped in the chromadb wheel), with its
data in a temp dir; skipped with the reason when that command is not available.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from guardian.corpora.datasets import load_mentalmanip
from guardian.retrieval.store import ExampleStore
from tests.netutil import free_port

pytestmark = [pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = Path(sys.executable).parent / "chroma"
    if not exe.exists():
        found = shutil.which("chroma")
        if found is None:
            pytest.skip("the `chroma` server command (from the chromadb wheel) is not installed")
        exe = Path(found)
    port = free_port()
    data = tmp_path_factory.mktemp("chroma-server")
    proc = subprocess.Popen(
        [str(exe), "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"ANONYMIZED_TELEMETRY": "False", "PATH": "/usr/bin:/bin"},
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None:
                    pytest.skip(f"`chroma run` exited with code {proc.returncode}")
                time.sleep(0.3)
        else:
            pytest.fail("the Chroma server did not start listening within 60 s")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_build_and_query_through_http_client(chroma_server: str) -> None:
    data = load_mentalmanip()
    subset = [d for d in data if d.manipulative][:3] + [d for d in data if not d.manipulative][:2]
    store = ExampleStore(server_url=chroma_server, collection="guardian-test")
    report = store.build(subset)
    assert (report.added, report.total) == (5, 5)
    assert store.build(subset).added == 0
    examples = store.query(subset[0].conversation)
    assert [e.manipulative for e in examples] == [True, True, False]
    assert subset[0].id not in {e.id for e in examples}
    assert store.ready() == (True, None)
