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


def repeated_turns(scores: np.ndarray, speakers: Sequence[str], floor: float | None, *,
                   window: int = REPEAT_WINDOW) -> set[int]:
    """Turns at or over `floor` with another turn of the same speaker at or over it fewer than `window`
    turns away (both are returned). None: the rule is off."""
    if floor is None:
        return set()
    over: list[int] = np.flatnonzero(np.asarray(scores) >= floor).tolist()
    out: set[int] = set()
    for k, i in enumerate(over):
        for j in over[k + 1:]:
            if j - i >= window:
                break
            if speakers[i] == speakers[j]:
                out.update((i, j))
    return out


def repeat_evidence(scores: np.ndarray, speakers: Sequence[str], *, window: int = REPEAT_WINDOW) -> float:
    """The highest repeat threshold at which `repeated_turns` finds a pair: over pairs of one speaker's
    turns fewer than `window` apart, the best lower score of the two (0 when the speaker never repeats)."""
    best = 0.0
    values = np.asarray(scores, dtype=np.float64)
    for i in range(len(values)):
        for j in range(i + 1, min(len(values), i + window)):
            if speakers[i] == speakers[j]:
                best = max(best, float(min(values[i], values[j])))
    return best
