"""The Chroma example store deleted or corrupted mid-session: the LLM falls back to zero-shot, nothing is lost."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from guardian.config import LLMSettings
from guardian.conversation import Conversation
from guardian.corpora.datasets import load_mentalmanip
from guardian.detectors.llm.manipulation import LLMDetector
from guardian.retrieval.store import ExampleStore

from .openai_stub import Reply, serve
from .test_llm_detector import answer

pytestmark = [pytest.mark.enable_socket, pytest.mark.allow_hosts(["127.0.0.1"])]


@pytest.mark.parametrize("damage", ["deleted", "corrupted"])
def test_store_lost_mid_session(damage: str, tmp_path: Path, gaslighting: Conversation) -> None:
    data = load_mentalmanip()
    subset = [d for d in data if d.manipulative][:6] + [d for d in data if not d.manipulative][:4]
    path = tmp_path / "chroma"
    store = ExampleStore(path=path)
    store.build(subset, source="mentalmanip_con")
    with serve([Reply(content=answer())]) as stub:
        cfg = LLMSettings(base_url=stub.base_url, samples=1, backoff_s=0.0, max_retries=1, timeout_s=10.0)
        detector = LLMDetector(settings=cfg, store=store)
        first = detector.analyze(gaslighting.upto(1))
        assert first.decision is True
        sent = json.dumps(stub.requests[-1], ensure_ascii=False)
        fragments = [" ".join(d.conversation.turns[0].text.split()[:4]) for d in subset]
        assert any(f in sent for f in fragments), "the first call carried few-shot examples from the store"
        if damage == "deleted":
            shutil.rmtree(path)
        else:
            for f in path.rglob("*.sqlite3"):
                f.write_bytes(b"not a database" * 100)
        later = [detector.analyze(gaslighting.upto(i)) for i in (2, 3)]
    assert [a.turn for a in later] == [2, 3]
    assert all(a.probability is not None for a in later), [a.errors for a in later]
