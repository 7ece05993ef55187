"""Process defaults (offline, no telemetry, one torch thread) apply where guardian starts work.

`import guardian` leaves the environment alone (tests/test_exported_members.py); the CLI and
loading a detector or a model fill in what the user has not set; GUARDIAN_KEEP_THREAD_SETTINGS
leaves the thread settings alone, never the offline and telemetry ones.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from guardian._env import (
    OPT_OUT,
    PRIVACY_DEFAULTS,
    PROCESS_DEFAULTS,
    THREAD_DEFAULTS,
    apply_process_defaults,
)


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


def test_opt_out_leaves_the_threads_alone_but_not_privacy(bare_env: pytest.MonkeyPatch) -> None:
    bare_env.setenv(OPT_OUT, "1")
    apply_process_defaults()
    assert not any(k in os.environ for k in THREAD_DEFAULTS)
    assert {k: os.environ[k] for k in PRIVACY_DEFAULTS} == PRIVACY_DEFAULTS


def _fresh(code: str, **env: str) -> str:
    """What a fresh interpreter prints, with none of the defaults in its environment but `env`."""
    clean = {k: v for k, v in os.environ.items() if k not in PROCESS_DEFAULTS and k != OPT_OUT}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_importing_guardian_keeps_the_hosts_thread_setting() -> None:
    code = "import guardian, os; print(os.environ.get('OMP_NUM_THREADS'))"
    assert _fresh(code, OMP_NUM_THREADS="3") == "3"
    assert _fresh(code) == "None"


@pytest.mark.slow  # over ~5 s on a fresh 2-core host: the slow tier
def test_the_cli_sets_one_thread_unless_told_to_keep_the_hosts() -> None:
    code = (
        "import os, sys; from guardian.cli import main; sys.stdout = open(os.devnull, 'w'); main(['detectors']); "
        "sys.stdout = sys.__stdout__; print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('ORT_DISABLE_TELEMETRY'))"
    )
    assert _fresh(code) == "1 1"
    assert _fresh(code, **{OPT_OUT: "1"}) == "None 1"
    assert _fresh(code, OMP_NUM_THREADS="3") == "3 1"


def test_telemetry_is_off_before_onnxruntime_loads_even_when_opted_out() -> None:
    """The intent model's onnxruntime half loads through one guarded function: an import hook
    records the environment at the moment onnxruntime is first imported."""
    code = (
        "import os, sys, importlib.abc\n"
        "seen = []\n"
        "class Hook(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'onnxruntime' and not seen: seen.append(os.environ.get('ORT_DISABLE_TELEMETRY'))\n"
        "sys.meta_path.insert(0, Hook())\n"
        "from guardian.detectors.intent.tuned import _onnxruntime\n"
        "_onnxruntime()\n"
        "print(seen)"
    )
    assert _fresh(code, **{OPT_OUT: "1"}) == "['1']"


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
