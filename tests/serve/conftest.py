"""The real service in a subprocess (`python -m guardian.cli serve` on 127.0.0.1, a free port).

The full-detector server is started once per session (loading the detectors takes seconds);
tests that need other settings (a rate limit, a store to kill) start a key-phrases-only
server, which is ready in about a second or two.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from platformdirs import user_cache_path

from guardian.serve.auth import hash_token
from tests.netutil import free_port

TOKEN = "test-token-0123456789abcdef0123456789abcdef"
OTHER_TOKEN = "test-token-other-0123456789abcdef012345678"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

pytestmark = [pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]


@dataclass
class Server:
    home: Path
    env: dict[str, str]
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    workers: int = 1
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.home / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 180.0) -> Server:
        self.port = free_port()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "guardian.cli", "serve", "--port", str(self.port), "--workers", str(self.workers)],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"the server was not ready in {timeout:g} s: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, *, timeout: float = 30.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30.0, **kwargs)  # type: ignore[arg-type]


def server_env(home: Path, cache: Path, **serve: object) -> dict[str, str]:
    """An environment with private config/data dirs and `[serve]` settings as GUARDIAN_SERVE__* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDIAN_")}
    env.update(
        GUARDIAN_CONFIG_DIR=str(home / "config"),
        GUARDIAN_DATA_DIR=str(home / "data"),
        GUARDIAN_CACHE_DIR=str(cache),
        GUARDIAN_ENCODERS_DIR=str(user_cache_path("guardian") / "encoders"),
        GUARDIAN_LOG_LEVEL="info",
        GUARDIAN_SERVE__TOKENS=json.dumps([hash_token(TOKEN), hash_token(OTHER_TOKEN)]),
        GUARDIAN_SERVE__RATE_PER_S="0",
        GUARDIAN_SERVE__AUTH_FAILURE_RATE_PER_S="0",  # the session's tests send wrong tokens from one address
    )
    for key, value in serve.items():
        if key == "detectors":
            env["GUARDIAN_DETECTORS"] = json.dumps(value)
        else:
            env[f"GUARDIAN_SERVE__{key.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    return env


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, _session_cache: Path) -> Iterator[Server]:
    """The service with the default detectors, shared by the session's tests."""
    home = tmp_path_factory.mktemp("serve-main")
    srv = Server(home, server_env(home, _session_cache)).start()
    yield srv
    srv.kill()
    log = srv.log.read_text()
    if "Traceback" in log:  # every test's requests went through it: none may have crashed a handler
        pytest.fail("the server logged a traceback:\n" + log[log.index("Traceback") - 500 :][:4000])


@pytest.fixture
def make_server(tmp_path: Path, _session_cache: Path) -> Iterator[object]:
    """Start key-phrase servers with given `[serve]` settings; all are killed after the test."""
    started: list[Server] = []

    def make(home: Path | None = None, *, workers: int = 1, **serve: object) -> Server:
        home = home or tmp_path / f"srv{len(started)}"
        home.mkdir(parents=True, exist_ok=True)
        serve.setdefault("detectors", ["keyphrases"])
        srv = Server(home, server_env(home, _session_cache, **serve), workers=workers)
        started.append(srv)
        return srv.start()

    yield make
    for srv in started:
        srv.kill()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server on 127.0.0.1 (a free port, no persistence), for the session."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; scripts/setup.sh tries)")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("redis-server did not start") from None
            time.sleep(0.05)
    client.close()
    yield f"redis://127.0.0.1:{port}/0"
    proc.kill()
    proc.wait(10)
