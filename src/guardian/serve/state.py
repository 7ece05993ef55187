"""Where the service keeps conversations: SQLite (WAL, the default) or Redis (several instances).

A turn is acknowledged only after its row is committed here, so a crash (kill -9) never loses
an acknowledged turn. Each stored turn carries the monitor's events for it (turn, findings,
assessment, errors, in the `guardian watch --headless` schema), which is all `Monitor.restore`
needs to rebuild a conversation after a restart or an eviction, without running detectors.

`append` is the one write and it is atomic: it refuses a turn whose index is not the next one
(`Conflict`: another instance appended first; the caller reloads and retries) and returns the
stored answer for an idempotency key already used in that conversation (`Replay`), so a
retried request is never counted twice, even across instances.

The calls are blocking (sqlite3, redis-py); the service runs them in a worker thread.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from guardian.errors import ConfigError

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """One acknowledged turn: its index, its events and the answer the client was given."""

    index: int
    events: tuple[Json, ...]
    response: Json


@dataclass(frozen=True, slots=True)
class Replay:
    """An idempotency key already used in this conversation: the stored answer and request."""

    request_hash: str
    response: Json


class Conflict(Exception):
    """The turn's index is taken: another instance (or worker) appended to the conversation first."""


class StateStore(Protocol):
    """What the service needs from a store; SQLite and Redis implement it."""

    def count(self, conversation_id: str) -> int: ...

    def lookup(self, conversation_id: str, key: str) -> Replay | None: ...

    def append(
        self,
        conversation_id: str,
        turn: StoredTurn,
        *,
        idempotency_key: str | None,
        request_hash: str,
    ) -> Replay | None:
        """Store the turn (None), or return the answer already stored for `idempotency_key`.

        Raises Conflict when `turn.index` is not the conversation's next index."""
        ...

    def turns(self, conversation_id: str) -> list[StoredTurn]: ...

    def try_lock(self, conversation_id: str, owner: str, *, ttl_s: float) -> bool:
        """Take the conversation's lock across instances (True), or say another holds it.

        Only a store shared by several instances needs it (Redis); it expires after
        `ttl_s` so a crashed instance cannot hold a conversation forever."""
        ...

    def unlock(self, conversation_id: str, owner: str) -> None: ...

    def delete(self, conversation_id: str) -> bool: ...

    def conversations(self) -> int: ...

    def ping(self) -> None: ...

    def close(self) -> None: ...


def open_store(url: str | None) -> StateStore:
    """The store a `[serve] state_url` names; None is SQLite in guardian's data directory."""
    if url is None:
        from guardian import locations

        return SQLiteStore(locations.data_dir() / "serve.sqlite3")
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = unquote(parsed.path)
        if parsed.netloc not in ("", "localhost") or not path:
            raise ConfigError(f"serve.state_url {url!r}: write sqlite:///relative/path or sqlite:////absolute/path")
        return SQLiteStore(Path(path[1:] if path.startswith("/") else path))
    if parsed.scheme in ("redis", "rediss", "unix"):
        return RedisStore(url)
    raise ConfigError(f"serve.state_url {url!r}: use sqlite:///path or redis://host:port/db")


# --- SQLite -------------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    conversation_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    events TEXT NOT NULL,
    response TEXT NOT NULL,
    idempotency_key TEXT,
    request_hash TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (conversation_id, idx)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS turns_idempotency
    ON turns (conversation_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
"""


class SQLiteStore:
    """One file, write-ahead log: readers never block the writer; several processes may share it.

    `synchronous=NORMAL` in WAL mode survives a process crash (kill -9) with every committed
    transaction; only a power cut may lose the last few (set `durable=True` for FULL).
    """

    def __init__(self, path: Path, *, durable: bool = False) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _create_private(path)
            self._db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the conversation store {path} ({exc})") from None
        self._lock = threading.Lock()

    def count(self, conversation_id: str) -> int:
        with self._lock:
            row = self._db.execute(
                "SELECT COALESCE(MAX(idx) + 1, 0) FROM turns WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()
        return int(row[0])

    def lookup(self, conversation_id: str, key: str) -> Replay | None:
        with self._lock:
            row = self._db.execute(
                "SELECT request_hash, response FROM turns WHERE conversation_id = ? AND idempotency_key = ?",
                (conversation_id, key),
            ).fetchone()
        return Replay(row[0], json.loads(row[1])) if row else None

    def append(
        self, conversation_id: str, turn: StoredTurn, *, idempotency_key: str | None, request_hash: str
    ) -> Replay | None:
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")  # the write lock first: check and insert are one step across processes
            try:
                if idempotency_key is not None:
                    row = db.execute(
                        "SELECT request_hash, response FROM turns WHERE conversation_id = ? AND idempotency_key = ?",
                        (conversation_id, idempotency_key),
                    ).fetchone()
                    if row:
                        db.execute("ROLLBACK")
                        return Replay(row[0], json.loads(row[1]))
                (count,) = db.execute(
                    "SELECT COALESCE(MAX(idx) + 1, 0) FROM turns WHERE conversation_id = ?", (conversation_id,)
                ).fetchone()
                if count != turn.index:
                    db.execute("ROLLBACK")
                    raise Conflict(f"turn {turn.index} of {conversation_id!r}: the store holds {count} turns")
                db.execute(
                    "INSERT INTO turns VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        conversation_id,
                        turn.index,
                        json.dumps(list(turn.events), ensure_ascii=False),
                        json.dumps(turn.response, ensure_ascii=False),
                        idempotency_key,
                        request_hash,
                        time.time(),
                    ),
                )
                db.execute("COMMIT")
            except sqlite3.Error:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return None

    def turns(self, conversation_id: str) -> list[StoredTurn]:
        with self._lock:
            rows = self._db.execute(
                "SELECT idx, events, response FROM turns WHERE conversation_id = ? ORDER BY idx", (conversation_id,)
            ).fetchall()
        return [StoredTurn(i, tuple(json.loads(e)), json.loads(r)) for i, e, r in rows]

    def try_lock(self, conversation_id: str, owner: str, *, ttl_s: float) -> bool:
        return True  # one machine: workers that race are caught by `append`'s Conflict and retry

    def unlock(self, conversation_id: str, owner: str) -> None:
        return None

    def delete(self, conversation_id: str) -> bool:
        with self._lock:
            cursor = self._db.execute("DELETE FROM turns WHERE conversation_id = ?", (conversation_id,))
        return cursor.rowcount > 0

    def conversations(self) -> int:
        with self._lock:
            (n,) = self._db.execute("SELECT COUNT(DISTINCT conversation_id) FROM turns").fetchone()
        return int(n)

    def ping(self) -> None:
        with self._lock:
            self._db.execute("SELECT 1").fetchone()

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _create_private(path: Path) -> None:
    """Create the database file owner-only (0600) before SQLite opens it: it holds every word of
    every conversation, and sqlite3 would create it world-readable under the usual umask. SQLite
    gives its -wal and -shm files the database's mode. An existing file is left as it is."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    os.close(fd)


# --- Redis --------------------------------------------------------------------------------------

# KEYS: turns list, idempotency hash, conversation set. ARGV: index, row, key ('' = none), id.
_APPEND = """
if ARGV[3] ~= '' then
  local hit = redis.call('HGET', KEYS[2], ARGV[3])
  if hit then return {1, redis.call('LINDEX', KEYS[1], tonumber(hit))} end
end
local n = redis.call('LLEN', KEYS[1])
if n ~= tonumber(ARGV[1]) then return {2, tostring(n)} end
redis.call('RPUSH', KEYS[1], ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[2], ARGV[3], tostring(n)) end
redis.call('SADD', KEYS[3], ARGV[4])
return {0, ''}
"""


_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisStore:
    """Conversations in Redis, for several instances behind a load balancer.

    A conversation is a list of JSON rows (one per turn) and a hash of idempotency keys;
    `append` is one Lua script, so its checks and writes are atomic on the server.
    Persistence across a Redis restart is Redis's own (appendonly), configured there.
    """

    def __init__(self, url: str, *, prefix: str = "guardian:") -> None:
        import redis

        self.prefix = prefix
        try:
            # Any: redis-py's annotations mix its sync and async return types
            self._redis: Any = redis.Redis.from_url(url, socket_timeout=10.0, socket_connect_timeout=5.0)
        except ValueError as exc:
            raise ConfigError(f"serve.state_url {url!r} is not a Redis URL ({exc})") from None
        self._append = self._redis.register_script(_APPEND)
        self._unlock = self._redis.register_script(_UNLOCK)

    def _keys(self, conversation_id: str) -> tuple[str, str]:
        return f"{self.prefix}conv:{conversation_id}:turns", f"{self.prefix}conv:{conversation_id}:idem"

    def count(self, conversation_id: str) -> int:
        return int(self._redis.llen(self._keys(conversation_id)[0]))

    def lookup(self, conversation_id: str, key: str) -> Replay | None:
        turns, idem = self._keys(conversation_id)
        hit = self._redis.hget(idem, key)
        if hit is None:
            return None
        row = self._redis.lindex(turns, int(hit))
        return _replay(row) if row is not None else None

    def append(
        self, conversation_id: str, turn: StoredTurn, *, idempotency_key: str | None, request_hash: str
    ) -> Replay | None:
        turns, idem = self._keys(conversation_id)
        row = json.dumps(
            {"index": turn.index, "events": list(turn.events), "response": turn.response, "request_hash": request_hash},
            ensure_ascii=False,
        )
        status, value = self._append(
            keys=[turns, idem, f"{self.prefix}conversations"],
            args=[turn.index, row, idempotency_key or "", conversation_id],
        )
        if int(status) == 1:
            return _replay(value)
        if int(status) == 2:
            raise Conflict(f"turn {turn.index} of {conversation_id!r}: the store holds {int(value)} turns")
        return None

    def turns(self, conversation_id: str) -> list[StoredTurn]:
        rows = self._redis.lrange(self._keys(conversation_id)[0], 0, -1)
        out = []
        for raw in rows:
            data = json.loads(raw)
            out.append(StoredTurn(int(data["index"]), tuple(data["events"]), data["response"]))
        return out

    def try_lock(self, conversation_id: str, owner: str, *, ttl_s: float) -> bool:
        key = f"{self.prefix}lock:{conversation_id}"
        return bool(self._redis.set(key, owner, nx=True, px=max(1, int(ttl_s * 1000))))

    def unlock(self, conversation_id: str, owner: str) -> None:
        self._unlock(keys=[f"{self.prefix}lock:{conversation_id}"], args=[owner])

    def delete(self, conversation_id: str) -> bool:
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(*self._keys(conversation_id))
        pipe.srem(f"{self.prefix}conversations", conversation_id)
        removed, _ = pipe.execute()
        return int(removed) > 0

    def conversations(self) -> int:
        return int(self._redis.scard(f"{self.prefix}conversations"))

    def ping(self) -> None:
        self._redis.ping()

    def close(self) -> None:
        self._redis.close()


def _replay(raw: bytes | str) -> Replay:
    data = json.loads(raw)
    return Replay(str(data["request_hash"]), data["response"])
