"""The two stores behind one contract (SQLite file, a real redis-server), and two instances sharing Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from guardian.errors import ConfigError
from guardian.serve.state import (
    Conflict,
    RedisStore,
    SQLiteStore,
    StateStore,
    StoredTurn,
    open_store,
)
from tests.serve.conftest import AUTH

pytestmark = [pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]


def _turn(index: int, text: str = "hi") -> StoredTurn:
    return StoredTurn(index=index, events=({"type": "turn", "turn": {"index": index, "text": text}},),
                      response={"type": "assessment", "turn": index, "text": text})


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    if request.param == "sqlite":
        made: StateStore = SQLiteStore(tmp_path / "s.sqlite3")
    else:
        made = RedisStore(request.getfixturevalue("redis_url"), prefix=f"t{uuid.uuid4().hex[:8]}:")
    yield made
    made.close()


def test_append_in_order_with_idempotency_keys(store: StateStore) -> None:
    assert store.count("c") == 0
    assert store.append("c", _turn(0, "a"), idempotency_key="k0", request_hash="h0") is None
    assert store.append("c", _turn(1, "b"), idempotency_key=None, request_hash="h1") is None
    with pytest.raises(Conflict):
        store.append("c", _turn(1, "again"), idempotency_key=None, request_hash="h")
    with pytest.raises(Conflict):
        store.append("c", _turn(5), idempotency_key=None, request_hash="h")
    replay = store.append("c", _turn(2, "x"), idempotency_key="k0", request_hash="other")
    assert replay is not None and replay.request_hash == "h0" and replay.response["text"] == "a"
    hit = store.lookup("c", "k0")
    assert hit is not None and hit.response["text"] == "a"
    assert store.lookup("c", "nope") is None
    assert store.lookup("other", "k0") is None  # keys belong to their conversation
    assert [t.index for t in store.turns("c")] == [0, 1]
    assert store.turns("c")[1].events[0]["turn"]["text"] == "b"
    assert store.count("c") == 2
    assert store.conversations() == 1
    assert store.delete("c") is True
    assert store.delete("c") is False
    assert store.turns("c") == [] and store.count("c") == 0
    assert store.lookup("c", "k0") is None
    store.ping()


def test_the_sqlite_file_is_in_wal_mode_and_survives_reopening(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite3")
    store.append("c", _turn(0), idempotency_key=None, request_hash="h")
    store.close()
    again = open_store(f"sqlite:///{tmp_path}/s.sqlite3")
    assert again.count("c") == 1
    again.close()
    import sqlite3

    assert sqlite3.connect(tmp_path / "s.sqlite3").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_bad_state_urls_are_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="use sqlite:///path or redis://"):
        open_store("postgres://x")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot open the conversation store"):
        open_store(f"sqlite:///{tmp_path}/file/sub/s.sqlite3")


@pytest.mark.slow
async def test_two_instances_sharing_redis_keep_one_conversation_whole(make_server, redis_url: str) -> None:
    a = make_server(state_url=redis_url)
    b = make_server(state_url=redis_url)
    cid = "shared-" + uuid.uuid4().hex[:8]
    async with httpx.AsyncClient(headers=AUTH, timeout=30) as http:
        async def post(i: int) -> httpx.Response:
            srv = a if i % 2 else b
            return await http.post(f"{srv.url}/v1/conversations/{cid}/turns",
                                   json={"speaker": "S", "text": f"n{i}"}, headers={"Idempotency-Key": f"i{i}"})

        answers = await asyncio.gather(*(post(i) for i in range(30)))
        retries = await asyncio.gather(*(post(i) for i in range(30)))
        stored = (await http.get(f"{a.url}/v1/conversations/{cid}")).json()
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers if r.status_code != 200]
    assert sorted(r.json()["turn"] for r in answers) == list(range(30))
    assert [r.json() for r in retries] == [r.json() for r in answers]
    texts = [t["text"] for t in stored["turns"]]
    assert sorted(texts) == sorted(f"n{i}" for i in range(30)) and len(texts) == 30
    for i, r in enumerate(answers):
        assert texts[r.json()["turn"]] == f"n{i}"


@pytest.mark.slow
async def test_two_workers_sharing_the_sqlite_file_keep_one_conversation_whole(make_server) -> None:
    srv = make_server(workers=2)
    cid = "workers-" + uuid.uuid4().hex[:8]
    limits = httpx.Limits(max_connections=30)  # many connections: uvicorn's workers each take some
    async with httpx.AsyncClient(base_url=srv.url, headers=AUTH, timeout=60, limits=limits) as http:
        async def post(i: int) -> httpx.Response:
            while True:  # a worker still loading its detectors answers 503 + Retry-After
                answer = await http.post(f"/v1/conversations/{cid}/turns", json={"speaker": "S", "text": f"w{i}"},
                                         headers={"Idempotency-Key": f"w{i}"})
                if answer.status_code != 503:
                    return answer
                await asyncio.sleep(0.2)

        answers = await asyncio.gather(*(post(i) for i in range(30)))
        stored = (await http.get(f"/v1/conversations/{cid}")).json()
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers if r.status_code != 200]
    assert sorted(r.json()["turn"] for r in answers) == list(range(30))
    texts = [t["text"] for t in stored["turns"]]
    for i, r in enumerate(answers):
        assert texts[r.json()["turn"]] == f"w{i}"
    assert "Started parent process" in srv.log.read_text()  # two worker processes really ran
