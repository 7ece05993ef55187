from __future__ import annotations

from pathlib import Path

import pytest

from guardian.config import load_settings, settings
from guardian.errors import ConfigError


def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    monkeypatch.setenv("GUARDIAN_CONFIG_FILE", str(path))
    settings.cache_clear()


def test_defaults() -> None:
    s = load_settings()
    assert s.monitor.window == 10
    assert s.llm.api_key is None


def test_toml_file_and_env_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _config(tmp_path, monkeypatch, '[monitor]\nwindow = 4\n[llm]\nmodel = "m1"\n')
    assert load_settings().monitor.window == 4
    monkeypatch.setenv("GUARDIAN_MONITOR__WINDOW", "6")
    assert load_settings().monitor.window == 6
    assert load_settings().llm.model == "m1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("colour = 1\n", "unknown configuration key 'colour'"),
        ("[llm]\nsamples = 'many'\n", "configuration key 'llm.samples'"),
        ("[monitor]\nwindow = 0\n", "configuration key 'monitor.window'"),
        ("[monitor\n", "is not valid TOML"),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str) -> None:
    _config(tmp_path, monkeypatch, text)
    with pytest.raises(ConfigError, match=message) as info:
        load_settings()
    assert "\n" not in str(info.value)


def test_api_key_is_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDIAN_LLM__API_KEY", "sk-canary-123")
    s = load_settings()
    assert "sk-canary-123" not in repr(s) and "sk-canary-123" not in s.model_dump_json()
    assert s.llm.api_key is not None and s.llm.api_key.get_secret_value() == "sk-canary-123"


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("GUARDIAN_MAX_TRANSCRIPT_MB", "-1", "'max_transcript_mb': Input should be greater than 0"),
        ("GUARDIAN_MAX_TRANSCRIPT_MB", "0", "'max_transcript_mb': Input should be greater than 0"),
        ("GUARDIAN_MAX_TURN_CHARS", "-5", "'max_turn_chars': Input should be greater than 0"),
        ("GUARDIAN_MONITOR__DETECTOR_TIMEOUT_S", "-1", "'monitor.detector_timeout_s': Input should be greater than 0"),
        ("GUARDIAN_LLM__BAND", "[0.3", 'error parsing value for field "llm"'),
        ("GUARDIAN_CONFIG_FILE", "/no/such/guardian.toml", "GUARDIAN_CONFIG_FILE='/no/such/guardian.toml' is not a file"),
    ],
)
def test_bad_values_are_config_errors_not_silence(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, message: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert message in str(caught.value)
