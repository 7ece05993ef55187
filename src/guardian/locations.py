"""Every path guardian reads or writes outside the repo, in one place."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_path, user_config_path, user_data_path

APP = "guardian"


def config_dir() -> Path:
    return Path(os.environ.get("GUARDIAN_CONFIG_DIR") or user_config_path(APP))


def config_file() -> Path:
    return Path(os.environ.get("GUARDIAN_CONFIG_FILE") or config_dir() / "config.toml")


def cache_dir() -> Path:
    return Path(os.environ.get("GUARDIAN_CACHE_DIR") or user_cache_path(APP))


def encoders_dir() -> Path:
    """Encoders unpacked from their wheels (a pure function of the installed packages, so
    shareable between caches; `GUARDIAN_ENCODERS_DIR` moves it, e.g. for a test run)."""
    return Path(os.environ.get("GUARDIAN_ENCODERS_DIR") or cache_dir() / "encoders")


def data_dir() -> Path:
    return Path(os.environ.get("GUARDIAN_DATA_DIR") or user_data_path(APP))


def package_dir() -> Path:
    return Path(__file__).resolve().parent


def bundled_data_dir() -> Path:
    """The labelled data the project carries (repo `data/`), found from the source tree."""
    env = os.environ.get("GUARDIAN_TRAINING_DATA")
    if env:
        return Path(env)
    return package_dir().parent.parent / "data"
