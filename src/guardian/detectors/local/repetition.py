"""The repetition rule: a speaker who manipulates does it more than once.

Why: a conversation is flagged when one of its turns crosses the threshold, so every turn is one more
chance of a false alarm. A 2 % false-alarm rate per short everyday dialogue became about 20 % per
40-turn conversation (five held-out DailyDialog dialogues joined, `lab/turn_register_stress.py`), and
real phone calls run that long. Manipulation and scams rarely rest on one turn: the turn-labelled
dialogues carry 3.5 manipulative turns each, a scammer asks again and again, while an ordinary
conversation's suspicious turn is mostly a lone sharp remark. So at the quiet sensitivities a turn is
flagged when it reaches the threshold on its own, or when it and another turn *by the same speaker*
within the window both reach the lower repeat threshold. Both thresholds are chosen on the dev part
(`calibration.calibrate`, docs/model-card.md "Long conversations").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Turns apart within which two turns of one speaker count as a repetition: `[monitor] window`'s default,
#: so that calibration (whole conversations) and a live replay (windows of 10) agree.
REPEAT_WINDOW = 10


def same_speaker_pairs(speakers: Sequence[str], *, window: int = REPEAT_WINDOW) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, of turns by one speaker fewer than `window` turns apart: what the rule compares."""
    return [(i, j) for i in range(len(speakers)) for j in range(i + 1, min(len(speakers), i + window))
            if speakers[i] == speakers[j]]


def repeated_turns(scores: np.ndarray, speakers: Sequence[str], floor: float | None, *,
                   window: int = REPEAT_WINDOW) -> set[int]:
    """Turns at or over `floor` with another turn of the same speaker at or over it fewer than `window`
    turns away (both are returned). None: the rule is off."""
    if floor is None:
        return set()
    over = np.asarray(scores) >= floor
    return {k for i, j in same_speaker_pairs(speakers, window=window) if over[i] and over[j] for k in (i, j)}


def repeat_evidence(scores: np.ndarray, speakers: Sequence[str], *, window: int = REPEAT_WINDOW) -> float:
    """The highest repeat threshold at which `repeated_turns` finds a pair: over pairs of one speaker's
    turns fewer than `window` apart, the best lower score of the two (0 when the speaker never repeats)."""
    values = np.asarray(scores, dtype=np.float64)
    return max((float(min(values[i], values[j])) for i, j in same_speaker_pairs(speakers, window=window)),
               default=0.0)
