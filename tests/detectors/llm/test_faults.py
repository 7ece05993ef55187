"""A failing LLM endpoint mid-session: the session goes on, the failure is visible, every turn is logged,
and the API key never leaks into errors, logs or the session log (canary key)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import SecretStr

from guardian.config import LLMSettings
from guardian.detectors.keyphrases import KeyPhraseDetector
from guardian.detectors.llm.manipulation import LLMDetector
from guardian.events import AssessmentReady, TurnAdded
from guardian.monitor import Monitor
from guardian.session_log import SessionHeader, SessionLog, read_log

from .openai_stub import Reply, serve

CANARY = "sk-canary-7f3a9c0e-do-not-print"
TURNS = [
    ("Maya", "You said you'd pick me up at six."),
    ("Daniel", "I never said that. You're overreacting, as usual."),
    ("Maya", "I can show you the message."),
    ("Daniel", "Know your place."),
]


@pytest.mark.enable_socket
@pytest.mark.allow_hosts(["127.0.0.1"])
@pytest.mark.parametrize(
    "replies",
    [
        [Reply(status=500, body=f'{{"error": "boom for key {CANARY}"}}')],
        [Reply(status=429)],
        [Reply(content="this is not JSON at all {")],
        [Reply(content='{"manipulative": true, "techniques": ["Denial"], "quotes": [')],
    ],
    ids=["http500", "http429", "garbage", "truncated-json"],
)
def test_llm_failures_keep_the_session_going(
    replies: list[Reply], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "session.jsonl"
    with serve(replies) as stub:
        cfg = LLMSettings(
            base_url=stub.base_url, api_key=SecretStr(CANARY), samples=1, backoff_s=0.0, max_retries=1, timeout_s=5.0
        )
        llm = LLMDetector(settings=cfg, use_store=False)
        monitor = Monitor([KeyPhraseDetector(), llm], window=10, timeout_s=20.0)
        log = SessionLog(path).open(SessionHeader(source="test", detectors=("keyphrases", "llm"), started=0.0))
        monitor.subscribe(log.write)
        try:
            assessments = [monitor.add_turn_sync("call", speaker, text) for speaker, text in TURNS]
        finally:
            monitor.close()
            log.close()
        assert stub.requests, "the endpoint was really called"
        assert all(r.get("model") for r in stub.requests)
    # the session continued: every turn assessed, the key-phrase detector's verdicts stand
    assert [a.turn for a in assessments] == [0, 1, 2, 3]
    assert any(f.detector == "keyphrases" for a in assessments for f in a.findings)
    # the failure is visible in every assessment
    assert all(any(e.detector == "llm" for e in a.errors) for a in assessments)
    # the session log has every turn and the errors
    record = read_log(path)
    assert [e.turn.text for e in record.events if isinstance(e, TurnAdded)] == [t for _, t in TURNS]
    assert sum(isinstance(e, AssessmentReady) for e in record.events) == len(TURNS)
    logged = [e.assessment for e in record.events if isinstance(e, AssessmentReady)]
    assert all(any(err.detector == "llm" for err in a.errors) for a in logged)
    # the canary key never appears anywhere a user or a log could see it
    assert CANARY not in path.read_text()
    assert CANARY not in caplog.text
    for a in assessments:
        for e in a.errors:
            assert CANARY not in e.message
