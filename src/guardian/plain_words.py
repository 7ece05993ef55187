"""Plain words for the person on the receiving end: one line per tactic, vulnerability and
pattern, why a turn fired, and what to do next, kept as package data
(`resources/plain_words.toml`) beside the taxonomy.

Why data, not code: the wording is edited by people who read it aloud to someone in a hard
conversation, not by people changing detectors; a test pins that every label has its line.
Loaded once per process (`plain_words()`), like faster-whisper's small assets.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Literal

from guardian import locations
from guardian.taxonomy import Technique, Vulnerability

StepKind = Literal["manipulation", "scam", "blocked"]


@dataclass(frozen=True, slots=True)
class PlainWords:
    """The loaded file: lines by technique, vulnerability and pattern; templates; steps by kind."""

    techniques: Mapping[Technique, str]
    vulnerabilities: Mapping[Vulnerability, str]
    patterns: Mapping[str, str]
    why: Mapping[str, str]
    steps: Mapping[str, tuple[str, ...]]

    def label(self, label: str) -> str:
        """The line for a technique's display name or a pattern's name ("" when unknown: a plug-in's)."""
        try:
            return self.techniques[Technique(label)]
        except ValueError:
            return self.patterns.get(label, "")

    def vulnerability(self, vulnerability: Vulnerability) -> str:
        return self.vulnerabilities[vulnerability]

    def next_steps(self, kind: StepKind) -> tuple[str, ...]:
        return self.steps.get(kind, ())


def resource_path() -> str:
    return str(locations.package_dir() / "resources" / "plain_words.toml")


@cache
def plain_words() -> PlainWords:
    """The package's plain words, read once; a missing line is an error, never a blank card."""
    with open(resource_path(), "rb") as fh:
        data = tomllib.load(fh)
    techniques = {Technique(k): str(v) for k, v in data["techniques"].items()}
    vulnerabilities = {Vulnerability(k): str(v) for k, v in data["vulnerabilities"].items()}
    missing = [t.value for t in Technique if t not in techniques] + [
        v.value for v in Vulnerability if v not in vulnerabilities]
    if missing:
        raise ValueError(f"{resource_path()}: no plain words for {', '.join(missing)}")
    return PlainWords(
        techniques=MappingProxyType(techniques),
        vulnerabilities=MappingProxyType(vulnerabilities),
        patterns=MappingProxyType({str(k): str(v) for k, v in data["patterns"].items()}),
        why=MappingProxyType({str(k): str(v) for k, v in data["why"].items()}),
        steps=MappingProxyType({str(k): tuple(str(s) for s in v) for k, v in data["steps"].items()}),
    )


def number(value: float) -> str:
    """A score as people read it on a card: .93 (two places, no leading zero), 1.00 at the top."""
    text = f"{value:.2f}"
    return text[1:] if text.startswith("0") else text


__all__ = ["PlainWords", "StepKind", "number", "plain_words", "resource_path"]
