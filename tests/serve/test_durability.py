"""Acknowledged turns survive kill -9 and restart; SIGTERM drains the turns in flight."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import threading
import time

import httpx
import pytest

from tests.serve.conftest import AUTH, Server

pytestmark = [pytest.mark.slow, pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]


def _load(server: Server, *, conversations: int, turns: int, acked: dict[str, list[str]],
          stop: threading.Event) -> None:
    """Post turns to many conversations at once; record each acknowledged turn's text by index."""

    async def one(cid: str) -> None:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as http:
            for i in range(turns):
                if stop.is_set():
                    return
                text = f"{cid} says turn {i}"
                try:
                    answer = await http.post(f"/v1/conversations/{cid}/turns", json={"speaker": f"S{i % 2}", "text": text})
                except httpx.TransportError:
                    return
                if answer.status_code != 200:
                    return
                if answer.json()["turn"] != len(acked[cid]):
                    acked.setdefault("!misnumbered", []).append(cid)
                    return
                acked[cid].append(text)

    async def all_of_them() -> None:
        await asyncio.gather(*(one(cid) for cid in acked))

    for n in range(conversations):
        acked[f"load-{n}"] = []
    asyncio.run(all_of_them())


def check_everything_acknowledged_is_there(server: Server, acked: dict[str, list[str]]) -> int:
    with server.client(headers=AUTH) as http:
        total = 0
        for cid, texts in acked.items():
            got = http.get(f"/v1/conversations/{cid}")
            stored = [t["text"] for t in got.json()["turns"]] if got.status_code == 200 else []
            # every acknowledged turn, in order; at most one more (stored, its answer lost in the kill)
            assert stored[: len(texts)] == texts, cid
            assert len(stored) - len(texts) in (0, 1), cid
            total += len(texts)
            nxt = http.post(f"/v1/conversations/{cid}/turns", json={"speaker": "S", "text": "after the restart"})
            assert nxt.json()["turn"] == len(stored)
    return total


def kill_mid_load(make_server, **settings: object) -> None:
    srv = make_server(**settings)
    acked: dict[str, list[str]] = {}
    stop = threading.Event()
    loader = threading.Thread(target=_load, args=(srv,), kwargs={
        "conversations": 20, "turns": 200, "acked": acked, "stop": stop})
    loader.start()
    deadline = time.monotonic() + 60
    while sum(len(v) for v in list(acked.values())) < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    srv.kill()  # SIGKILL in the middle of the load
    stop.set()
    loader.join(60)
    assert acked.pop("!misnumbered", []) == []  # every answer named the index its turn got
    assert sum(len(v) for v in acked.values()) >= 100
    srv.start()  # same home, same store
    assert check_everything_acknowledged_is_there(srv, acked) >= 100


def test_kill_9_mid_load_loses_no_acknowledged_turn_sqlite(make_server, tmp_path) -> None:
    kill_mid_load(make_server)
    assert (tmp_path / "srv0" / "data" / "serve.sqlite3").is_file()


def test_kill_9_mid_load_loses_no_acknowledged_turn_redis(make_server, redis_url: str) -> None:
    kill_mid_load(make_server, state_url=redis_url)


def test_the_monitor_state_is_restored_after_a_restart(make_server, tmp_path) -> None:
    """A finding already raised is not raised again, and the risk carries on, after a restart."""
    home = tmp_path / "home"
    srv = make_server(home)
    turn = {"speaker": "D", "text": "You're overreacting, as usual."}
    with srv.client(headers=AUTH) as http:
        first = http.post("/v1/conversations/r1/turns", json=turn).json()
    assert first["new_findings"] >= 1
    srv.kill()
    srv.start()
    with srv.client(headers=AUTH) as http:
        calm = http.post("/v1/conversations/r1/turns", json={"speaker": "M", "text": "Fine."}).json()
    assert calm["turn"] == 1
    assert calm["risk"] > 0  # the decayed risk of turn 0, not a fresh start
    assert calm["risk"] == pytest.approx(0.8 * first["risk"], abs=1e-3)


def test_sigterm_drains_the_turns_in_flight(make_server, tmp_path) -> None:
    srv = make_server()
    answers: list[httpx.Response | Exception] = []

    async def burst() -> None:
        async with httpx.AsyncClient(base_url=srv.url, headers=AUTH, timeout=30) as http:
            async def one(i: int) -> None:
                try:
                    answers.append(await http.post(f"/v1/conversations/g{i % 5}/turns",
                                                   json={"speaker": "A", "text": f"turn {i}"}))
                except httpx.TransportError as exc:
                    answers.append(exc)

            await asyncio.gather(*(one(i) for i in range(100)))

    runner = threading.Thread(target=asyncio.run, args=(burst(),))
    runner.start()
    deadline = time.monotonic() + 30
    while len(answers) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    # uvicorn shuts down gracefully, then re-raises the signal: the exit status says SIGTERM
    assert srv.terminate() in (0, -signal.SIGTERM)
    runner.join(60)
    ok = [a for a in answers if isinstance(a, httpx.Response) and a.status_code == 200]
    assert ok, answers[:3]
    db = sqlite3.connect(tmp_path / "srv0" / "data" / "serve.sqlite3")
    stored = {row[0] for row in db.execute("SELECT json_extract(response, '$.assessment.conversation_id') || '#' || idx FROM turns")}
    for answer in ok:
        body = answer.json()
        assert f"{body['conversation_id']}#{body['turn']}" in stored
    log = srv.log.read_text()
    assert "Application shutdown complete" in log
    assert "Traceback" not in log


def test_conversations_evicted_from_memory_come_back_from_the_store(make_server) -> None:
    srv = make_server(max_live_conversations=2)
    with srv.client(headers=AUTH) as http:
        first = http.post("/v1/conversations/e0/turns", json={"speaker": "D", "text": "Know your place."}).json()
        for cid in ("e1", "e2", "e3"):
            http.post(f"/v1/conversations/{cid}/turns", json={"speaker": "A", "text": "Hello."})
        gauge = [line for line in http.get("/metrics").text.splitlines()
                 if line.startswith("guardian_open_conversations ")]
        assert gauge == ["guardian_open_conversations 2.0"]
        again = http.post("/v1/conversations/e0/turns", json={"speaker": "M", "text": "Fine."}).json()
    assert first["risk"] > 0
    assert again["turn"] == 1
    assert again["risk"] == pytest.approx(0.8 * first["risk"], abs=1e-3)
