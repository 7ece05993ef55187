"""Errors a user can act on. The CLI prints their message as one sentence, no traceback."""

from __future__ import annotations


class GuardianError(Exception):
    """Base class: something the user can fix (exit code 2 in the CLI)."""


class InputError(GuardianError):
    """A transcript, audio file or other input that cannot be read as given."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None) -> None:
        where = ""
        if source is not None:
            where = f"{source}"
            if line is not None:
                where += f", line {line}"
            where += ": "
        super().__init__(f"{where}{message}")
        self.source = source
        self.line = line


class ConfigError(GuardianError):
    """A configuration key with a bad value, or an unknown key."""


class ModelUnavailable(GuardianError):
    """A model or optional dependency is missing; the message says how to get it."""


class DetectorNotFound(GuardianError):
    """A detector name that no installed package registers."""
