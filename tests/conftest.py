"""Shared fixtures: every test runs with an empty user config and private cache/data dirs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from platformdirs import user_cache_path

from guardian._env import apply_process_defaults
from guardian.config import settings
from guardian.conversation import Conversation

REPO = Path(__file__).resolve().parent.parent

# The test process starts as guardian's own processes do (one OpenMP thread) before any test imports torch:
# otherwise torch keeps two threads in the main thread while the intent model's encoder thread has one, and a
# float32 MiniLM vector differs in its last bit with the thread count (1.2e-7), so rows that must be equal
# to the bit (bulk batched vs alone) depended on which test imported torch first (an AVX2-only host, 2026-11-27).
apply_process_defaults()


@pytest.fixture(scope="session")
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the run: the user's own cache (stale models from experiments) never leaks in."""
    return tmp_path_factory.mktemp("guardian-cache")


@pytest.fixture(autouse=True)
def _isolated_settings(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, _session_cache: Path
) -> Iterator[None]:
    home = tmp_path_factory.mktemp("guardian-home")
    monkeypatch.setenv("GUARDIAN_CONFIG_DIR", str(home / "config"))
    monkeypatch.setenv("GUARDIAN_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("GUARDIAN_CACHE_DIR", str(_session_cache))
    # unpacked from the installed wheels, nothing trained: one copy shared by every run
    monkeypatch.setenv("GUARDIAN_ENCODERS_DIR", str(user_cache_path("guardian") / "encoders"))
    for key in ("GUARDIAN_CONFIG_FILE", "GUARDIAN_DETECTORS"):
        monkeypatch.delenv(key, raising=False)
    settings.cache_clear()
    yield
    settings.cache_clear()


@pytest.fixture
def gaslighting() -> Conversation:
    return Conversation.from_pairs(
        [
            ("Maya", "You said you'd pick me up at six. I waited an hour."),
            ("Daniel", "I never said that. You're overreacting, as usual."),
            ("Maya", "You texted me this morning."),
            ("Daniel", "You always do this. Know your place."),
        ],
        id="gaslighting",
    )
