"""Similar labelled examples: a missing example store is a note, never an error."""

from __future__ import annotations

import builtins
from typing import Any

import pytest

from guardian.conversation import Conversation
from guardian.findings import Finding
from guardian.taxonomy import Technique
from guardian.tui.similar import similar_examples

WINDOW = Conversation.from_pairs([("Ann", "You are so stupid.")], id="w")
FINDING = Finding(technique=Technique.SHAMING_OR_BELITTLEMENT, score=0.8, detector="t")


def test_without_the_retrieval_package_the_details_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_retrieval(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("guardian.retrieval"):
            raise ImportError("not installed")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_retrieval)
    result = similar_examples(FINDING, WINDOW)
    assert result.examples == ()
    assert result.note is not None and "not installed" in result.note


@pytest.mark.slow
def test_an_unbuilt_store_points_at_guardian_index() -> None:
    pytest.importorskip("guardian.retrieval.store")
    result = similar_examples(FINDING, WINDOW)  # the data dir is a fresh temp dir (conftest)
    assert result.examples == ()
    assert result.note is not None and "guardian index" in result.note
