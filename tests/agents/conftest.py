"""Fixtures for the LangChain integration tests: lines from MentalManip and a scripted detector.

The detector under the middleware is a deterministic test double that flags
exactly the lines the tests say are manipulative (taken from labelled MentalManip
dialogues), so these tests check the plumbing - what is screened, in which
context, what each policy does - and never claim anything about accuracy.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import ClassVar

import pytest

from guardian.agents._screening import DEFAULT_SAFE_REPLY, blocked_reply
from guardian.agents.policy import DEFAULT_ERROR_REPLY
from guardian.conversation import Conversation
from guardian.corpora.datasets import load_mentalmanip
from guardian.detectors.base import Detector
from guardian.findings import Assessment, Finding
from guardian.grounding import evidence_for, sentences
from guardian.taxonomy import Technique

#: What the user sees in place of a blocked reply: the safe reply (or, when the screen failed
#: under on_error="block", the error reply), then the "blocked" next steps (issue 46).
SAFE_SHOWN = blocked_reply(DEFAULT_SAFE_REPLY)
ERROR_SHOWN = blocked_reply(DEFAULT_ERROR_REPLY)


@dataclass(frozen=True)
class Line:
    text: str
    technique: Technique | None
    dialogue: str


def _line(dialogue_id: str, turn: int, technique: Technique | None) -> Line:
    dialogues = {d.id: d for d in _dialogues()}
    dialogue = dialogues[dialogue_id]
    if technique is not None:
        assert dialogue.manipulative and technique in dialogue.techniques
    else:
        assert not dialogue.manipulative
    return Line(dialogue.conversation.turn(turn).text, technique, dialogue_id)


_CACHE: list[object] = []


def _dialogues() -> list:  # type: ignore[type-arg]
    if not _CACHE:
        _CACHE.extend(load_mentalmanip())
    return _CACHE  # type: ignore[return-value]


@dataclass(frozen=True)
class Lines:
    """Manipulative lines (by label) and benign ones, all verbatim from data/mentalmanip."""

    belittling: Line  # Rationalization / feigning innocence dialogue: "Don't be so dramatic..."
    denial: Line
    threat: Line  # Intimidation, used as the manipulative *user* message
    benign: Line
    benign_reply: Line

    @property
    def manipulative(self) -> tuple[Line, ...]:
        return (self.belittling, self.denial, self.threat)


@pytest.fixture(scope="session")
def lines() -> Lines:
    return Lines(
        belittling=_line("85515388", 3, Technique.RATIONALIZATION),
        denial=_line("85514735", 1, Technique.DENIAL),
        threat=_line("85514994", 1, Technique.INTIMIDATION),
        benign=_line("85514602", 0, None),
        benign_reply=_line("85514602", 1, None),
    )


class ScriptedDetector(Detector):
    """Flags turns whose text is one of the given lines; records every window it saw."""

    name: ClassVar[str] = "scripted-test"
    description: ClassVar[str] = "test double: flags known lines"

    def __init__(self, flagged: dict[str, Technique | None]) -> None:
        self.flagged = flagged
        self.windows: list[Conversation] = []
        self._lock = threading.Lock()

    def analyze(self, window: Conversation) -> Assessment:
        with self._lock:
            self.windows.append(window)
        last = window.last
        if last is None:
            return self.empty(window)
        if last.text not in self.flagged:
            return Assessment(conversation_id=window.id, turn=last.index, probability=0.04, decision=False, threshold=0.5, detectors=(self.name,))
        technique = self.flagged[last.text] or Technique.INTIMIDATION
        span = sentences(last.text)[0]
        finding = Finding(technique=technique, score=0.91, evidence=(evidence_for(last, span),), speaker=last.speaker, detector=self.name)
        return Assessment(
            conversation_id=window.id,
            turn=last.index,
            probability=0.91,
            decision=True,
            threshold=0.5,
            techniques={technique: 0.91},
            findings=(finding,),
            manipulator=last.speaker,
            detectors=(self.name,),
        )


class BrokenDetector(Detector):
    name: ClassVar[str] = "broken-test"

    def analyze(self, window: Conversation) -> Assessment:
        raise RuntimeError("model file is corrupt")


@pytest.fixture
def scripted(lines: Lines) -> ScriptedDetector:
    return ScriptedDetector({line.text: line.technique for line in lines.manipulative})
