"""Process defaults (offline, no telemetry, one torch thread) apply where guardian starts work.

`import guardian` leaves the environment alone (tests/test_exported_members.py); the CLI and
loading a detector or a model fill in what the user has not set, unless GUARDIAN_KEEP_ENV says
not to.
"""

from __future__ import annotations

import os

import pytest

from guardian._env import OPT_OUT, PROCESS_DEFAULTS, apply_process_defaults


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """None of the defaults set; monkeypatch puts the test process's own values back afterwards."""
    for key in [*PROCESS_DEFAULTS, OPT_OUT]:
        monkeypatch.setenv(key, "placeholder")  # recorded, so whatever apply sets is undone
        monkeypatch.delenv(key)
    return monkeypatch


@pytest.mark.usefixtures("bare_env")
def test_defaults_fill_in_what_is_unset() -> None:
    apply_process_defaults()
    assert {k: os.environ[k] for k in PROCESS_DEFAULTS} == PROCESS_DEFAULTS


def test_a_value_the_user_set_is_kept(bare_env: pytest.MonkeyPatch) -> None:
    bare_env.setenv("OMP_NUM_THREADS", "4")
    apply_process_defaults()
    assert os.environ["OMP_NUM_THREADS"] == "4"
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_opt_out_leaves_the_environment_alone(bare_env: pytest.MonkeyPatch) -> None:
    bare_env.setenv(OPT_OUT, "1")
    before = dict(os.environ)
    apply_process_defaults()
    assert dict(os.environ) == before


@pytest.mark.usefixtures("bare_env")
def test_the_cli_applies_them() -> None:
    from guardian.cli import main

    assert main(["detectors"]) == 0
    assert os.environ["ORT_DISABLE_TELEMETRY"] == "1"
    assert os.environ["HF_HUB_OFFLINE"] == "1"


@pytest.mark.usefixtures("bare_env")
def test_loading_a_detector_applies_them() -> None:
    from guardian.detectors import registry

    registry.factory("keyphrases")
    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert os.environ["TRANSFORMERS_OFFLINE"] == "1"
