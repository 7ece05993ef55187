"""Offline by default: the commands make no network connection and no DNS lookup.

strace sees what Python-level socket patches cannot: connections opened from
native code (onnxruntime's telemetry, HTTP clients written in C or Rust).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GUARDIAN = Path(sys.executable).parent / "guardian"
EXAMPLE = REPO / "examples" / "gaslighting.txt"
CANARY = "sk-guardian-canary-0123456789abcdef"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("strace") is None, reason="strace is installed by `make setup` (Debian package)"),
]

# Internet-family sockets only: unix sockets (nscd, dbus) are local.
_NET = re.compile(r"(connect|sendto|sendmsg)\(.*sa_family=AF_INET6?\b")


@pytest.fixture(scope="module")
def models_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fresh model cache for the module's commands: the first builds the int8 files and unpacks the
    encoders under strace like a new user's first run; the others reuse them (each build took about 40 s of
    CI on an AVX2-only host)."""
    return tmp_path_factory.mktemp("privacy-models")


def _clean_env(home: Path, models: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORT_", "HF_", "TRANSFORMERS_", "GUARDIAN_"))}
    env.pop("ANONYMIZED_TELEMETRY", None)
    env.update(
        GUARDIAN_CONFIG_DIR=str(home / "config"),
        GUARDIAN_DATA_DIR=str(home / "data"),
        GUARDIAN_CACHE_DIR=str(models / "cache"),
        GUARDIAN_ENCODERS_DIR=str(models / "encoders"),
        GUARDIAN_LLM__API_KEY=CANARY,
        HOME=str(home),
    )
    return env


def _traced(args: list[str], home: Path, models: Path, *, stdin: str | None = None) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    trace = home / "net.trace"
    proc = subprocess.run(
        ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace), str(GUARDIAN), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(home, models),
        input=stdin,
        check=False,
        cwd=home,
    )
    lines = trace.read_text(errors="replace").splitlines() if trace.exists() else []
    return proc, [ln for ln in lines if _NET.search(ln)]


def test_analyze_makes_no_network_connection(tmp_path: Path, models_home: Path) -> None:
    proc, net = _traced(["analyze", str(EXAMPLE), "--format", "json"], tmp_path, models_home)
    assert proc.returncode == 0, proc.stderr
    assert net == [], net
    assert CANARY not in proc.stdout + proc.stderr


def test_watch_headless_makes_no_network_connection(tmp_path: Path, models_home: Path) -> None:
    log = tmp_path / "session.jsonl"
    proc, net = _traced(["watch", str(EXAMPLE), "--headless", "--instant", "--log", str(log)], tmp_path, models_home)
    assert proc.returncode == 0, proc.stderr
    assert net == [], net
    assert '"type"' in proc.stdout
    for text in (proc.stdout, proc.stderr, log.read_text()):
        assert CANARY not in text


@pytest.mark.slow
def test_listen_fast_makes_no_network_connection(tmp_path: Path, models_home: Path) -> None:
    clip = REPO / "tests" / "data" / "speech" / "85514533_composed_mark_sassy.mp3"
    log = tmp_path / "call.jsonl"
    proc, net = _traced(["listen", "--audio", str(clip), "--fast", "--headless", "--log", str(log)], tmp_path, models_home)
    assert proc.returncode == 0, proc.stderr
    assert net == [], net
    assert '"type": "turn"' in proc.stdout or '"type":"turn"' in proc.stdout
    for text in (proc.stdout, proc.stderr, log.read_text()):
        assert CANARY not in text
