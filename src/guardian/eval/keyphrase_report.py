"""How the key-phrase matcher does as a detector on a MentalManip-format file.

The paper used it as a recall-oriented filter for annotation; this report says
how many manipulative vs non-manipulative dialogues it fires on, i.e. its
precision if used alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from guardian.corpora.datasets import load_mentalmanip
from guardian.detectors.keyphrases import KeyPhraseDetector


@dataclass(frozen=True, slots=True)
class KeyPhraseReport:
    n: int
    manipulative: int
    non_manipulative: int
    fired_manipulative: int
    fired_non_manipulative: int
    precision: float
    recall: float
    base_rate: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def keyphrase_report(path: str | Path) -> KeyPhraseReport:
    detector = KeyPhraseDetector()
    dialogues = load_mentalmanip(path)
    fired = {True: 0, False: 0}
    totals = {True: 0, False: 0}
    for d in dialogues:
        totals[d.manipulative] += 1
        if any(detector.findings_for_turn(t) for t in d.conversation.turns):
            fired[d.manipulative] += 1
    hits = fired[True] + fired[False]
    n = len(dialogues)
    return KeyPhraseReport(
        n=n,
        manipulative=totals[True],
        non_manipulative=totals[False],
        fired_manipulative=fired[True],
        fired_non_manipulative=fired[False],
        precision=round(fired[True] / hits, 4) if hits else 0.0,
        recall=round(fired[True] / totals[True], 4) if totals[True] else 0.0,
        base_rate=round(totals[True] / n, 4) if n else 0.0,
    )
