from __future__ import annotations

from collections.abc import Iterator

import pytest

from guardian.conversation import Conversation
from guardian.detectors import registry
from guardian.detectors.base import Detector
from guardian.detectors.keyphrases import KeyPhraseDetector
from guardian.errors import DetectorNotFound, GuardianError
from guardian.findings import Assessment


class _Echo(Detector):
    name = "echo-test"

    def analyze(self, window: Conversation) -> Assessment:
        return self.empty(window)


@pytest.fixture
def echo() -> Iterator[None]:
    registry.register("echo-test", _Echo)
    yield
    registry.unregister("echo-test")


def test_builtins_come_from_entry_points() -> None:
    assert "keyphrases" in registry.names()
    assert isinstance(registry.create("keyphrases"), KeyPhraseDetector)
    ep = registry._entry_points()["keyphrases"]
    assert ep.group == registry.GROUP


def test_runtime_registration(echo: None) -> None:
    assert "echo-test" in registry.names()
    assert [d.name for d in registry.create_many("keyphrases, echo-test")] == ["keyphrases", "echo-test"]


def test_unknown_name_lists_what_is_installed() -> None:
    with pytest.raises(DetectorNotFound, match=r"no detector named 'nope' \(installed: .*keyphrases"):
        registry.create("nope")


def test_factory_must_produce_a_detector() -> None:
    registry.register("bad-test", lambda: object())
    try:
        with pytest.raises(GuardianError, match="did not produce a guardian Detector"):
            registry.create("bad-test")
    finally:
        registry.unregister("bad-test")


def test_default_names_respect_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from guardian.config import settings

    assert registry.default_names()[0] == "keyphrases"
    monkeypatch.setenv("GUARDIAN_DETECTORS", '["keyphrases"]')
    settings.cache_clear()
    assert registry.default_names() == ["keyphrases"]


def test_the_default_detector_set_is_decided_in_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """watch and the chatbot integration ask the registry, so they cannot drift apart."""
    from guardian.agents._engine import default_detector_names as chatbot_defaults
    from guardian.watch import default_detector_names as watch_defaults

    monkeypatch.setattr(registry, "names", lambda: ["keyphrases", "local", "intent"])
    assert watch_defaults() == registry.default_names()
    assert chatbot_defaults() == registry.default_names(purpose="chatbot") == ["local"]
    monkeypatch.setattr(registry, "names", lambda: ["keyphrases", "intent"])
    assert chatbot_defaults() == ["keyphrases"]
    with pytest.raises(ValueError, match="purpose"):
        registry.default_names(purpose="archive")


def test_a_bulk_run_leaves_the_intent_model_out_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    """`guardian analyze ARCHIVE --out` asks the registry too: the local defaults less intent
    (docs/bulk.md), and the configured detectors as they are."""
    from guardian.bulk.screen import resolve_options
    from guardian.config import settings

    monkeypatch.setattr(registry, "names", lambda: ["keyphrases", "local", "intent"])
    assert registry.default_names(purpose="bulk") == ["keyphrases", "local"]
    assert resolve_options(detectors=None, window=None, per_turn=False).detectors == ("keyphrases", "local")
    assert resolve_options(detectors="local,intent", window=None, per_turn=False).detectors == ("local", "intent")
    monkeypatch.setenv("GUARDIAN_DETECTORS", '["keyphrases", "intent"]')
    settings.cache_clear()
    assert registry.default_names(purpose="bulk") == ["keyphrases", "intent"]
