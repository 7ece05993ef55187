"""The per-speaker summary in the service's answers (issue 46): every turn's answer, the
conversation GET and `POST /v1/screen` carry it, built from the cards so it does not drift, and
the answers stay versioned and backward compatible (fields added, none removed).

The app runs in process (Starlette's TestClient, a private SQLite file) with the word detector
of tests/monitor_fakes.py, which flags "stupid": ready at once and deterministic.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from starlette.testclient import TestClient

from guardian.config import ServeSettings
from guardian.conversation import Turn
from guardian.events import AssessmentReady, TurnAdded, to_dict
from guardian.findings import Assessment
from guardian.locations import package_dir
from guardian.serve.app import create_app
from guardian.serve.auth import hash_token
from guardian.serve.schemas import API_VERSION, AssessmentEvent, ConversationOut
from guardian.serve.state import SQLiteStore, StoredTurn
from tests.monitor_fakes import WordDetector
from tests.serve.conftest import AUTH, TOKEN
from tests.test_cards import CHAT

pytestmark = [pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]

SCHEMAS = package_dir() / "schema"
SERVICE_FIELDS = ("api_version", "summary")


def _schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    return loaded


@contextmanager
def served(tmp_path: Path) -> Iterator[tuple[TestClient, SQLiteStore]]:
    """The app in process with the word detector, a token required, its detectors loaded."""
    store = SQLiteStore(tmp_path / f"serve-{uuid.uuid4().hex[:6]}.sqlite3")
    config = ServeSettings(rate_per_s=0, tokens=[hash_token(TOKEN)])
    app = create_app(config, store=store, detectors=[WordDetector()])
    with TestClient(app, base_url="http://127.0.0.1:8787", headers=AUTH) as http:
        deadline = time.monotonic() + 30
        while app.state.guardian.status != "ok":
            assert time.monotonic() < deadline, app.state.guardian.failure
            time.sleep(0.01)
        yield http, store


def _post_chat(http: TestClient, cid: str) -> list[dict[str, Any]]:
    answers = []
    for turn in CHAT.turns:
        answer = http.post(f"/v1/conversations/{cid}/turns", json={"speaker": turn.speaker, "text": turn.text})
        assert answer.status_code == 200, answer.text
        answers.append(answer.json())
    return answers


def _daniel(summary: dict[str, Any]) -> dict[str, Any]:
    """Daniel's record; before he has said anything, an empty one."""
    empty: dict[str, Any] = {"speaker": "Daniel", "flagged_turns": [], "tactics": [], "since": None}
    return next((s for s in summary["speakers"] if s["speaker"] == "Daniel"), empty)


def test_each_turn_answers_with_the_summary_after_it(tmp_path: Path) -> None:
    with served(tmp_path) as (http, _):
        answers = _post_chat(http, "c1")
    for index, answer in enumerate(answers):
        AssessmentEvent.model_validate(answer)  # the documented model: extra fields forbidden
        assert (answer["api_version"], answer["schema_version"]) == (API_VERSION, 2)
        assert answer["summary"]["turns"] == index + 1
        assert answer["summary"]["risk"] == pytest.approx(answer["risk"])
    # the summary grows with the cards: turn 1's put-down, then turn 3's; harmless turns add nothing
    assert [_daniel(a["summary"])["flagged_turns"] for a in answers] == [[], [1], [1], [1, 3], [1, 3], [1, 3]]
    last = _daniel(answers[-1]["summary"])
    assert (last["since"], last["tactics"]) == (1, ["Shaming or Belittlement"])
    maya = next(s for s in answers[-1]["summary"]["speakers"] if s["speaker"] == "Maya")
    assert maya["flagged_turns"] == [] and maya["turns"] == 3


def test_a_turn_answer_is_still_the_watch_event_plus_the_services_fields(tmp_path: Path) -> None:
    """Backward compatible: take away what version 2 added and the watch event line remains."""
    with served(tmp_path) as (http, _):
        answers = _post_chat(http, "c2")
    schema = _schema("watch-event.schema.json")
    for answer in answers:
        jsonschema.validate({k: v for k, v in answer.items() if k not in SERVICE_FIELDS}, schema)


def test_the_conversation_get_summary_is_the_last_turns(tmp_path: Path) -> None:
    with served(tmp_path) as (http, _):
        answers = _post_chat(http, "c3")
        got = http.get("/v1/conversations/c3")
    assert got.status_code == 200, got.text
    body = got.json()
    ConversationOut.model_validate(body)
    assert body["api_version"] == API_VERSION
    assert body["summary"] == answers[-1]["summary"] == body["latest"]["summary"]
    assert body["summary"]["peak_risk"] == pytest.approx(max(a["risk"] for a in answers))


def test_an_idempotent_replay_answers_the_same_summary(tmp_path: Path) -> None:
    turn = {"speaker": "Daniel", "text": "You are stupid."}
    with served(tmp_path) as (http, _):
        first = http.post("/v1/conversations/c4/turns", json=turn, headers={"Idempotency-Key": "k1"})
        again = http.post("/v1/conversations/c4/turns", json=turn, headers={"Idempotency-Key": "k1"})
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert again.json() == first.json()
    assert _daniel(again.json()["summary"])["flagged_turns"] == [0]


def test_screen_answers_the_summary_the_risk_and_what_to_do(tmp_path: Path) -> None:
    body = {"id": "s1", "turns": [{"speaker": t.speaker, "text": t.text} for t in CHAT.turns]}
    with served(tmp_path) as (http, _):
        answer = http.post("/v1/screen", json=body)
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    jsonschema.validate(doc, _schema("analyze.schema.json"))
    assert doc["schema_version"] == 2
    assert _daniel(doc["summary"])["flagged_turns"] == [1, 3]
    assert len(doc["risk"]) == len(CHAT.turns) and doc["summary"]["risk"] == pytest.approx(doc["risk"][-1])
    assert doc["next_steps"]["manipulation"]


def test_a_conversation_stored_before_version_2_still_gets_a_summary(tmp_path: Path) -> None:
    """An answer stored by an older service has no `summary` and its assessment no card: the GET
    rebuilds the summary from the stored events, and the old answer still reads."""
    with served(tmp_path) as (http, store):
        turn = Turn(index=0, speaker="Daniel", text="You are stupid.")
        assessment = Assessment(conversation_id="old", turn=0, probability=0.8, decision=True)
        events = (to_dict(TurnAdded(conversation_id="old", turn=turn)),
                  to_dict(AssessmentReady(conversation_id="old", assessment=assessment, risk=0.8)))
        old = {k: v for k, v in events[1].items() if k != "schema_version"}  # a version-1 line
        store.append("old", StoredTurn(index=0, events=events, response=old), idempotency_key=None, request_hash="h")
        got = http.get("/v1/conversations/old")
        later = http.post("/v1/conversations/old/turns", json={"speaker": "Maya", "text": "That hurt."})
    assert got.status_code == 200, got.text
    body = got.json()
    ConversationOut.model_validate(body)
    assert "summary" not in body["latest"]
    assert body["summary"]["turns"] == 1 and body["summary"]["risk"] == pytest.approx(0.8)
    assert _daniel(body["summary"])["flagged_turns"] == []  # no card was stored: nothing is made up
    assert later.status_code == 200, later.text
    assert later.json()["summary"]["turns"] == 2


def test_the_events_socket_sends_the_same_summary_as_the_http_answer(tmp_path: Path) -> None:
    with served(tmp_path) as (http, _), http.websocket_connect(
        "ws://127.0.0.1:8787/v1/conversations/c5/events", headers=AUTH
    ) as ws:
        ws.send_text(json.dumps({"speaker": "Daniel", "text": "You are stupid."}))
        sent = []
        while not sent or sent[-1]["type"] != "assessment":
            sent.append(ws.receive_json())
        ws.close()  # leaving without a close frame cancels the server's reader in the test client
        got = http.get("/v1/conversations/c5").json()
    pushed = sent[-1]
    AssessmentEvent.model_validate(pushed)
    assert pushed["api_version"] == API_VERSION
    assert pushed["summary"] == got["latest"]["summary"] == got["summary"]
    assert _daniel(pushed["summary"])["flagged_turns"] == [0]


def test_the_openapi_document_describes_the_summary(tmp_path: Path) -> None:
    with served(tmp_path) as (http, _):
        doc = http.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert "ConversationSummary" in schemas
    for name in ("AssessmentEvent", "ConversationOut"):
        assert {"api_version", "summary"} <= set(schemas[name]["properties"]), name
    screen = doc["paths"]["/v1/screen"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert screen["$ref"].endswith("/AnalyzeReport")
