"""Small, deterministic detectors for monitor, watch and TUI tests (registered via registry.register)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import ClassVar

from guardian.conversation import Conversation
from guardian.detectors.base import Detector
from guardian.findings import Assessment, Finding
from guardian.grounding import ground_in_turn
from guardian.taxonomy import Technique, Vulnerability


class WordDetector(Detector):
    """Flags every turn in the window that contains `word` (so later windows re-find earlier quotes)."""

    name: ClassVar[str] = "word-test"
    description: ClassVar[str] = "flags a fixed word (tests)"

    def __init__(self, word: str = "stupid", *, technique: Technique = Technique.SHAMING_OR_BELITTLEMENT,
                 name: str | None = None, score: float = 0.8) -> None:
        self.word = word
        self.technique = technique
        self.score = score
        if name is not None:
            self.name = name  # type: ignore[misc]

    def analyze(self, window: Conversation) -> Assessment:
        last = window.last
        if last is None:
            return self.empty(window)
        findings = []
        for turn in window.turns:
            evidence = ground_in_turn(turn, self.word)
            if evidence is not None:
                findings.append(
                    Finding(
                        technique=self.technique,
                        score=self.score,
                        evidence=(evidence,),
                        vulnerabilities=(Vulnerability.LOW_SELF_ESTEEM,),
                        speaker=turn.speaker,
                        detector=self.name,
                        explanation=f"the word {self.word!r} belittles the listener",
                    )
                )
        hit = any(f.evidence[0].turn == last.index for f in findings)
        return Assessment(
            conversation_id=window.id,
            turn=last.index,
            probability=self.score if hit else 0.1,
            decision=hit,
            findings=tuple(findings),
            detectors=(self.name,),
        )


class AsyncCountingDetector(Detector):
    """Native async (no thread per call): cheap enough for thousands of turns."""

    name: ClassVar[str] = "count-test"

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def analyze(self, window: Conversation) -> Assessment:
        with self._lock:
            self.calls += 1
        return self.empty(window)

    async def aanalyze(self, window: Conversation) -> Assessment:
        await asyncio.sleep(0)
        return self.analyze(window)


class SlowDetector(Detector):
    """Sleeps `delay` seconds per turn (a stand-in for a heavy model)."""

    name: ClassVar[str] = "slow-test"

    def __init__(self, delay: float = 0.3) -> None:
        self.delay = delay

    def analyze(self, window: Conversation) -> Assessment:
        time.sleep(self.delay)
        return self.empty(window)


class FailingDetector(Detector):
    name: ClassVar[str] = "failing-test"

    def analyze(self, window: Conversation) -> Assessment:
        raise RuntimeError("model file is corrupt")


class LyingDetector(Detector):
    """Returns a quote that is not in the transcript (must be dropped by the monitor)."""

    name: ClassVar[str] = "lying-test"

    def analyze(self, window: Conversation) -> Assessment:
        from guardian.conversation import Evidence

        last = window.last
        if last is None:
            return self.empty(window)
        fake = Evidence(turn=last.index, quote="x" * 5, start=0, end=5)
        if last.text[:5] == fake.quote:
            return self.empty(window)
        finding = Finding(technique=Technique.DENIAL, score=0.9, evidence=(fake,), detector=self.name)
        return Assessment(conversation_id=window.id, turn=last.index, findings=(finding,), detectors=(self.name,))


class EchoIntentDetector(Detector):
    """Says a turn with a question presses the listener (hneg-); anything else is small talk."""

    name: ClassVar[str] = "intent-test"

    def analyze(self, window: Conversation) -> Assessment:
        from guardian.findings import Intent
        from guardian.taxonomy import FaceAct

        last = window.last
        if last is None:
            return self.empty(window)
        act = FaceAct.HNEG_MINUS if "?" in last.text else FaceAct.OTHER
        intent = Intent(turn=last.index, speaker=last.speaker, face_act=act, score=0.7,
                        intention=act.general_intention, detector=self.name)
        return Assessment(conversation_id=window.id, turn=last.index, intents=(intent,), detectors=(self.name,))
