"""The repetition rule: a speaker who manipulates does it more than once.

Why: a conversation is flagged when one of its turns crosses the threshold, so every turn is one more
chance of a false alarm. A 2 % false-alarm rate per short everyday dialogue became about 20 % per
40-turn conversation (five held-out DailyDialog dialogues joined, `lab/turn_register_stress.py`), and
real phone calls run that long. Manipulation and scams rarely rest on one turn: the turn-labelled
dialogues carry 3.5 manipulative turns each, a scammer asks again and again, while an ordinary
conversation's suspicious turn is mostly a lone sharp remark. So at the quiet sensitivities a turn is
flagged when it reaches the threshold on its own, or when it and another turn *by the same speaker*
within the window both reach the lower repeat threshold. Both thresholds are chosen on the dev part
(`calibration.calibrate`, docs/model-card.md "Operating points").

Someone who answers in kind is not the one to blame: a pair counts only when its lower score stands
`REPEAT_MARGIN` above every pair the other side completed in the `REPEAT_WINDOW` turns up to it. So
the person pushing back twice, as sharply, after a gaslighter's second jab is not named; the first to
repeat is. (A whole-window comparison was measured first and dropped: in a long window one quarrel
cancelled every pair, so the rule depended on the window's length, and MentalManip's heated
manipulators went unflagged.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Turns apart within which two turns of one speaker count as a repetition: `[monitor] window`'s default,
#: so that calibration (whole conversations) and a live replay (windows of 10) agree.
REPEAT_WINDOW = 10
#: How far a speaker's pair must stand above the other side's earlier pairs. Chosen on the dev part
#: (`lab/turn_long_rules.py --pairs .90/.30/M,... --part dev`): the smallest margin at which the dev false
#: alarms (heated-but-fair dialogues, everyday talk) are lowest, with no dev manipulative dialogue or
#: scam call lost.
REPEAT_MARGIN = 0.1


def same_speaker_pairs(speakers: Sequence[str], *, window: int = REPEAT_WINDOW) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, of turns by one speaker fewer than `window` turns apart: what the rule compares."""
    return [(i, j) for i in range(len(speakers)) for j in range(i + 1, min(len(speakers), i + window))
            if speakers[i] == speakers[j]]


def standing_pairs(scores: np.ndarray, speakers: Sequence[str], *, window: int = REPEAT_WINDOW,
                   margin: float = REPEAT_MARGIN) -> list[tuple[int, int, float]]:
    """(i, j, lower score) of the same-speaker pairs whose lower score is at least `margin` above the lower
    score of every pair another speaker completed among the `window` turns ending at j (what the other
    side had said by then; the same in a live window and a whole transcript); every pair when `margin`
    <= 0 (the rule as first shipped)."""
    values = np.asarray(scores, dtype=np.float64)
    pairs = [(i, j, float(min(values[i], values[j]))) for i, j in same_speaker_pairs(speakers, window=window)]
    if margin <= 0:
        return pairs
    return [(i, j, low) for i, j, low in pairs
            if all(low - other >= margin - 1e-9 for k, l_, other in pairs
                   if speakers[k] != speakers[i] and l_ <= j and k > j - window)]


def repeated_turns(scores: np.ndarray, speakers: Sequence[str], floor: float | None, *,
                   window: int = REPEAT_WINDOW, margin: float = REPEAT_MARGIN) -> set[int]:
    """Turns at or over `floor` with another turn of the same speaker at or over it fewer than `window`
    turns away, the pair standing `margin` above any other speaker's (both turns are returned). None:
    the rule is off."""
    if floor is None:
        return set()
    return {k for i, j, low in standing_pairs(scores, speakers, window=window, margin=margin) if low >= floor
            for k in (i, j)}


def window_evidence(scores: np.ndarray, speakers: Sequence[str], *, window: int = REPEAT_WINDOW,
                    margin: float = REPEAT_MARGIN) -> list[tuple[float, int | None]]:
    """Per turn, what a live replay's window of `window` turns ending there (as `guardian watch` assesses
    it) holds: the best lower score of a standing pair, and that pair's first turn ((0.0, None) when none).
    A pair stands or not by the turns up to its second one; in a later window the other side's earlier
    turns may have slid out and it can stand there, so each window is read on its own."""
    values = np.asarray(scores, dtype=np.float64)
    out: list[tuple[float, int | None]] = []
    for end in range(len(values)):
        start = max(0, end + 1 - window)
        best: tuple[float, int | None] = (0.0, None)
        for i, _, low in standing_pairs(values[start: end + 1], speakers[start: end + 1], window=window,
                                        margin=margin):
            if low > best[0]:
                best = (low, start + i)
        out.append(best)
    return out


def repeat_evidence(scores: np.ndarray, speakers: Sequence[str], *, window: int = REPEAT_WINDOW,
                    margin: float = REPEAT_MARGIN) -> float:
    """The highest repeat threshold at which a live replay meets a standing pair in some window
    (`window_evidence`; 0 when no speaker repeats): what calibration reads of a whole dev conversation."""
    return max((low for low, _ in window_evidence(scores, speakers, window=window, margin=margin)), default=0.0)
