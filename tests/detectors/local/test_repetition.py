"""The repetition rule: two suspicious turns of one speaker within the window count, one does not."""

from __future__ import annotations

import numpy as np

from guardian.detectors.local.repetition import (
    REPEAT_MARGIN,
    REPEAT_WINDOW,
    repeat_evidence,
    repeated_turns,
    standing_pairs,
)


def test_two_turns_of_one_speaker_over_the_floor_are_both_returned() -> None:
    scores = np.array([0.1, 0.5, 0.2, 0.6, 0.1])
    speakers = ["A", "B", "A", "B", "A"]
    assert repeated_turns(scores, speakers, 0.4) == {1, 3}
    assert repeat_evidence(scores, speakers) == 0.5


def test_one_suspicious_turn_or_two_speakers_is_not_a_repetition() -> None:
    speakers = ["A", "B", "A", "B"]
    assert repeated_turns(np.array([0.9, 0.1, 0.2, 0.1]), speakers, 0.4) == set()
    # Over the floor, but said by different people: a quarrel, not a pattern of one speaker.
    assert repeated_turns(np.array([0.9, 0.8, 0.1, 0.1]), speakers, 0.4) == set()
    assert repeat_evidence(np.array([0.9, 0.8, 0.1, 0.1]), speakers, margin=0.0) == 0.1
    # Over a floor of .05, A repeats first (turn 2); B's pair at the same level is an answer in kind.
    assert repeated_turns(np.array([0.9, 0.8, 0.1, 0.1]), speakers, 0.05) == {0, 2}
    assert repeat_evidence(np.array([0.9, 0.8, 0.1, 0.1]), speakers) == 0.1


def test_turns_a_window_apart_do_not_pair_and_none_turns_the_rule_off() -> None:
    n = REPEAT_WINDOW + 1
    scores = np.zeros(n)
    scores[0] = scores[n - 1] = 0.9
    speakers = ["A"] * n
    assert repeated_turns(scores, speakers, 0.4) == set()
    scores[n - 2] = 0.9  # within the window of turn 0
    assert repeated_turns(scores, speakers, 0.4) == {0, n - 2, n - 1}
    assert repeated_turns(scores, speakers, None) == set()
    assert repeat_evidence(scores, speakers) == 0.9


def test_the_one_who_answers_in_kind_is_not_blamed() -> None:
    """A is sharp twice, then B answers twice as sharply (within `REPEAT_MARGIN`): only A's pair counts.
    B sharper by the margin or more: B's pair counts too. Without a margin, every pair counts."""
    speakers = ["A", "B", "A", "B"]
    in_kind = np.array([0.6, 0.55, 0.5, 0.58])  # A's pair .5 by turn 2; B's .55 at turn 3
    assert repeated_turns(in_kind, speakers, 0.4) == {0, 2}
    assert repeated_turns(in_kind, speakers, 0.4, margin=0.0) == {0, 1, 2, 3}
    sharper = np.array([0.6, 0.5 + REPEAT_MARGIN, 0.5, 0.8])
    assert repeated_turns(sharper, speakers, 0.4) == {0, 1, 2, 3}
    assert repeat_evidence(in_kind, speakers) == 0.5


def test_a_pair_stands_or_not_alike_in_a_live_window_and_in_a_whole_transcript() -> None:
    """What calibration reads of a whole conversation is what a live window of `REPEAT_WINDOW` turns
    ending at the pair's second turn sees: the rule does not depend on how long the window is."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(4, 40))
        scores = rng.random(n)
        speakers = [str(s) for s in rng.choice(["A", "B", "C"], size=n, p=[0.45, 0.45, 0.1])]
        whole = {(i, j) for i, j, _ in standing_pairs(scores, speakers)}
        for j in range(n):
            start = max(0, j + 1 - REPEAT_WINDOW)
            live = {(start + i, start + k) for i, k, _ in standing_pairs(scores[start: j + 1], speakers[start: j + 1])
                    if start + k == j}
            assert live == {p for p in whole if p[1] == j}
