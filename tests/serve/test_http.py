"""The service over real HTTP: auth, limits, idempotency, concurrency, schemas, operations."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import httpx
import jsonschema
import pytest

from guardian.locations import package_dir
from tests.serve.conftest import AUTH, OTHER_TOKEN, Server

pytestmark = [pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]

SCHEMAS = package_dir() / "schema"


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


def _cid() -> str:
    return "c-" + uuid.uuid4().hex[:12]


def test_a_turn_answers_the_watch_assessment_event(server: Server) -> None:
    cid = _cid()
    with server.client(headers=AUTH) as http:
        first = http.post(f"/v1/conversations/{cid}/turns", json={"speaker": "Maya", "text": "You said six. I waited."})
        second = http.post(
            f"/v1/conversations/{cid}/turns",
            json={"speaker": "Daniel", "text": "I never said that. You're overreacting, as usual. Know your place."},
        )
    assert first.status_code == 200, first.text
    assert second.status_code == 200, second.text
    schema = _schema("watch-event.schema.json")
    for answer in (first.json(), second.json()):
        # the watch event line, plus what the service adds since api_version 2 (tests/serve/test_summary.py)
        jsonschema.validate({k: v for k, v in answer.items() if k not in ("api_version", "summary")}, schema)
        assert answer["api_version"] == 2 and answer["summary"]["conversation_id"] == cid
        assert answer["type"] == "assessment"
        assert answer["conversation_id"] == cid
    assert (first.json()["turn"], second.json()["turn"]) == (0, 1)
    found = second.json()["assessment"]["findings"]
    assert any(e["quote"] for f in found for e in f["evidence"]), found
    assert set(second.json()["assessment"]["detectors"]) >= {"keyphrases", "local"}


def test_auth_is_refused_without_a_valid_token(server: Server) -> None:
    body = {"speaker": "A", "text": "hello"}
    with server.client() as http:
        missing = http.post(f"/v1/conversations/{_cid()}/turns", json=body)
        wrong = http.post(f"/v1/conversations/{_cid()}/turns", json=body, headers={"Authorization": "Bearer nope"})
        basic = http.post(f"/v1/conversations/{_cid()}/turns", json=body, headers={"Authorization": "Basic eDp5"})
        other = http.post(f"/v1/conversations/{_cid()}/turns", json=body,
                          headers={"Authorization": f"Bearer {OTHER_TOKEN}"})
        get = http.get(f"/v1/conversations/{_cid()}")
    for refused in (missing, wrong, basic, get):
        assert refused.status_code == 401
        assert refused.json()["error"] == "unauthorized"
        assert refused.headers["www-authenticate"] == "Bearer"
    assert other.status_code == 200


def test_limits_answer_413_and_422_with_one_sentence(server: Server) -> None:
    with server.client(headers=AUTH) as http:
        big = http.post(f"/v1/conversations/{_cid()}/turns", content=b"{" + b" " * 1_100_000 + b"}",
                        headers={"content-type": "application/json"})

        def streamed():  # no Content-Length: the limit holds while reading
            for _ in range(40):
                yield b" " * 50_000

        chunked = http.post(f"/v1/conversations/{_cid()}/turns", content=streamed(),
                            headers={"content-type": "application/json"})
        long_turn = http.post(f"/v1/conversations/{_cid()}/turns", json={"speaker": "A", "text": "x" * 20_001})
        missing = http.post(f"/v1/conversations/{_cid()}/turns", json={"speaker": "A"})
        extra = http.post(f"/v1/conversations/{_cid()}/turns", json={"speaker": "A", "text": "hi", "mood": 1})
        not_json = http.post(f"/v1/conversations/{_cid()}/turns", content=b"speaker=A",
                             headers={"content-type": "application/json"})
        bad_id = http.post("/v1/conversations/has%20space/turns", json={"speaker": "A", "text": "hi"})
    assert big.status_code == 413
    assert chunked.status_code == 413
    assert "max_request_bytes" in big.json()["message"]
    assert long_turn.status_code == 422
    assert long_turn.json()["message"] == "the turn is 20001 characters; the limit is 20000 (serve.max_turn_chars)"
    for answer, where in ((missing, "text"), (extra, "mood"), (bad_id, "conversation_id")):
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == "invalid"
        assert where in answer.json()["message"]
        assert "\n" not in answer.json()["message"]
    assert not_json.status_code == 422


def test_an_idempotent_retry_answers_the_stored_assessment_and_counts_once(server: Server) -> None:
    cid = _cid()
    turn = {"speaker": "Daniel", "text": "You always do this."}
    with server.client(headers=AUTH) as http:
        first = http.post(f"/v1/conversations/{cid}/turns", json=turn, headers={"Idempotency-Key": "k-1"})
        retry = http.post(f"/v1/conversations/{cid}/turns", json=turn, headers={"Idempotency-Key": "k-1"})
        other = http.post(f"/v1/conversations/{cid}/turns", json=turn, headers={"Idempotency-Key": "k-2"})
        misuse = http.post(f"/v1/conversations/{cid}/turns", json={**turn, "text": "something else"},
                           headers={"Idempotency-Key": "k-1"})
        stored = http.get(f"/v1/conversations/{cid}").json()
    assert first.status_code == retry.status_code == 200
    assert retry.json() == first.json()
    assert retry.headers.get("idempotent-replayed") == "true"
    assert "idempotent-replayed" not in first.headers
    assert other.json()["turn"] == 1
    assert misuse.status_code == 409
    assert misuse.json()["error"] == "idempotency_mismatch"
    assert [t["index"] for t in stored["turns"]] == [0, 1]


async def test_concurrent_posts_to_one_conversation_are_serialised(server: Server) -> None:
    cid = _cid()
    n = 24
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=60) as http:
        answers = await asyncio.gather(*(
            http.post(f"/v1/conversations/{cid}/turns", json={"speaker": f"S{i % 2}", "text": f"message number {i}"},
                      headers={"Idempotency-Key": f"m{i}"})
            for i in range(n)
        ))
        # every retry at once again: nothing is counted twice
        retries = await asyncio.gather(*(
            http.post(f"/v1/conversations/{cid}/turns", json={"speaker": f"S{i % 2}", "text": f"message number {i}"},
                      headers={"Idempotency-Key": f"m{i}"})
            for i in range(n)
        ))
        stored = (await http.get(f"/v1/conversations/{cid}")).json()
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers if a.status_code != 200]
    indices = sorted(a.json()["turn"] for a in answers)
    assert indices == list(range(n))
    assert [r.json() for r in retries] == [a.json() for a in answers]
    texts = {t["index"]: t["text"] for t in stored["turns"]}
    assert len(stored["turns"]) == n
    for i, answer in enumerate(answers):  # each answer is about the turn it sent
        assert texts[answer.json()["turn"]] == f"message number {i}"
    # a sequence posted one after another keeps its order
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=60) as http:
        for i in range(3):
            answer = await http.post(f"/v1/conversations/{cid}/turns", json={"speaker": "S", "text": f"then {i}"})
            assert answer.json()["turn"] == n + i


def test_get_and_delete_a_conversation(server: Server) -> None:
    cid = _cid()
    with server.client(headers=AUTH) as http:
        assert http.get(f"/v1/conversations/{cid}").status_code == 404
        http.post(f"/v1/conversations/{cid}/turns", json={"speaker": "A", "text": "Hello there.", "start": 1.5, "end": 2.0})
        last = http.post(f"/v1/conversations/{cid}/turns", json={"speaker": "B", "text": "Know your place."}).json()
        got = http.get(f"/v1/conversations/{cid}")
        assert got.status_code == 200
        body = got.json()
        assert [(t["speaker"], t["text"]) for t in body["turns"]] == [("A", "Hello there."), ("B", "Know your place.")]
        assert body["turns"][0]["start"] == 1.5
        assert body["latest"] == last
        assert body["risk"] == last["risk"]
        assert http.delete(f"/v1/conversations/{cid}").status_code == 204
        assert http.get(f"/v1/conversations/{cid}").status_code == 404
        again = http.post(f"/v1/conversations/{cid}/turns", json={"speaker": "A", "text": "New start."})
        assert again.json()["turn"] == 0  # nothing of the deleted conversation is left in memory either
        assert again.json()["risk"] <= 0.5


def test_screen_is_the_analyze_report_and_stores_nothing(server: Server) -> None:
    turns = [
        {"speaker": "Maya", "text": "You said you'd pick me up at six."},
        {"speaker": "Daniel", "text": "I never said that. You're overreacting, as usual."},
    ]
    with server.client(headers=AUTH) as http:
        answer = http.post("/v1/screen", json={"id": "screen-1", "turns": turns})
        empty = http.post("/v1/screen", json={"turns": []})
        stored = http.get("/v1/conversations/screen-1")
    assert answer.status_code == 200, answer.text
    jsonschema.validate(answer.json(), _schema("analyze.schema.json"))
    assert [a["turn"] for a in answer.json()["assessments"]] == [0, 1]
    assert empty.status_code == 422
    assert stored.status_code == 404


def test_operations_endpoints(server: Server) -> None:
    with server.client() as http:
        assert http.get("/healthz").json()["status"] == "ok"
        ready = http.get("/readyz").json()
        assert ready["status"] == "ok"
        assert "local" in ready["detectors"]
        assert http.get("/docs").status_code == 200
        paths = http.get("/openapi.json").json()["paths"]
        assert "/v1/conversations/{conversation_id}/turns" in paths
        assert "/v1/screen" in paths
        http.post(f"/v1/conversations/{_cid()}/turns", json={"speaker": "A", "text": "Know your place."}, headers=AUTH)
        metrics = http.get("/metrics").text
    assert 'guardian_requests_total{method="POST",route="/v1/conversations/{conversation_id}/turns",status="200"}' in metrics
    assert "guardian_request_seconds_bucket" in metrics
    assert 'guardian_flags_total{technique="key_phrase"}' in metrics
    assert "guardian_open_conversations" in metrics
    assert 'guardian_requests_total{method="POST",route="/v1/conversations/{conversation_id}/turns",status="401"}' in metrics


def test_logs_carry_no_transcript_text(server: Server) -> None:
    secret = "zebra-marmalade-" + uuid.uuid4().hex
    cid = _cid()
    with server.client(headers=AUTH) as http:
        assert http.post(f"/v1/conversations/{cid}/turns", json={"speaker": "A", "text": secret}).status_code == 200
    log = Path(server.log).read_text()
    assert cid in log
    assert secret not in log
    assert "test-token" not in log


def test_the_rate_limit_is_per_token(make_server) -> None:
    srv = make_server(rate_per_s=0.5, rate_burst=3)
    with srv.client() as http:
        codes = [
            http.post(f"/v1/conversations/{_cid()}/turns", json={"speaker": "A", "text": "hi"}, headers=AUTH).status_code
            for _ in range(4)
        ]
        refused = http.post(f"/v1/conversations/{_cid()}/turns", json={"speaker": "A", "text": "hi"}, headers=AUTH)
        other = http.post(f"/v1/conversations/{_cid()}/turns", json={"speaker": "A", "text": "hi"},
                          headers={"Authorization": f"Bearer {OTHER_TOKEN}"})
    assert codes == [200, 200, 200, 429]
    assert refused.status_code == 429
    assert refused.json()["error"] == "rate_limited"
    assert int(refused.headers["retry-after"]) >= 1
    assert other.status_code == 200


def test_log_text_on_writes_the_words(make_server) -> None:
    srv = make_server(log_text=True)
    with srv.client(headers=AUTH) as http:
        http.post(f"/v1/conversations/{_cid()}/turns", json={"speaker": "A", "text": "visible-words-here"})
    assert "visible-words-here" in srv.log.read_text()


def test_the_example_client_runs_against_the_server(server: Server) -> None:
    import subprocess
    import sys

    from tests.serve.conftest import TOKEN

    example = Path(__file__).resolve().parent.parent.parent / "examples" / "serve_client.py"
    done = subprocess.run([sys.executable, str(example), server.url], env={**server.env, "GUARDIAN_TOKEN": TOKEN},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "stored: 4 turns" in done.stdout
    assert "event: assessment" in done.stdout
    assert "FLAG" in done.stdout or "key_phrase" in done.stdout
