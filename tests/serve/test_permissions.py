"""Files that hold transcripts are the owner's only (issue 47 item 6): the service's SQLite store
(with its -wal and -shm) and session logs, created 0600 whatever the umask allows."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from guardian.serve.state import SQLiteStore, StoredTurn, open_store
from guardian.session_log import SessionHeader, SessionLog


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask (022), under which a plainly created file is world-readable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("open_umask")
def test_the_state_store_and_its_wal_files_are_created_owner_only(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "new" / "serve.sqlite3")
    store.append("c", StoredTurn(0, ({"type": "turn"},), {"turn": 0}), idempotency_key=None, request_hash="h")
    made = [tmp_path / "new" / name for name in ("serve.sqlite3", "serve.sqlite3-wal", "serve.sqlite3-shm")]
    assert {p.name: oct(_mode(p)) for p in made if p.exists()} == {p.name: "0o600" for p in made}
    store.close()
    default = open_store(None)  # serve.sqlite3 in the data dir
    assert _mode(Path(default.path)) == 0o600  # type: ignore[attr-defined]
    default.close()


@pytest.mark.usefixtures("open_umask")
def test_session_logs_are_created_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "sessions" / "s.jsonl"
    SessionLog(path).open(SessionHeader("t", ("keyphrases",), 0.0)).close()
    assert _mode(path) == 0o600
    from guardian.agents.callbacks import GuardianCallbackHandler

    handler = GuardianCallbackHandler(detectors=["keyphrases"], log_path=tmp_path / "agent" / "log.jsonl")
    handler._write({"type": "probe"})  # the line every screened turn appends
    assert _mode(tmp_path / "agent" / "log.jsonl") == 0o600
