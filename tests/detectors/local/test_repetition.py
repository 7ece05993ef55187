"""The repetition rule: two suspicious turns of one speaker within the window count, one does not."""

from __future__ import annotations

import numpy as np

from guardian.detectors.local.repetition import (
    REPEAT_MARGIN,
    REPEAT_WINDOW,
    repeat_evidence,
    repeated_turns,
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
    # In one window both pairs sit at .1 and neither stands out; in a replay, A's pair is met at turn 2,
    # before B repeats, so it is A's evidence.
    assert repeated_turns(np.array([0.9, 0.8, 0.1, 0.1]), speakers, 0.05) == set()
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


def test_a_quarrel_cancels_out_and_a_one_sided_pattern_does_not() -> None:
    """Both speakers sharp twice: no pair stands `REPEAT_MARGIN` above the other's, nothing counts. The
    other side calm (or pushing back mildly): the pattern counts."""
    speakers = ["A", "B", "A", "B"]
    quarrel = np.array([0.6, 0.55, 0.5, 0.6])  # A's pair .5, B's .55
    assert repeated_turns(quarrel, speakers, 0.4) == set()
    assert repeated_turns(quarrel, speakers, 0.4, margin=0.0) == {0, 1, 2, 3}
    one_sided = np.array([0.6, 0.2, 0.5, 0.5 - REPEAT_MARGIN])  # B's pair exactly the margin under A's
    assert repeated_turns(one_sided, speakers, 0.4) == {0, 2}
    assert repeat_evidence(one_sided, speakers) == 0.5


def test_evidence_reads_each_window_as_a_live_replay_does() -> None:
    """A's pair early and B's pair more than a window later never share a window: in the replay A's pair
    stands alone when it is said, so calibration must count it (a whole-conversation comparison would
    cancel it)."""
    n = REPEAT_WINDOW + 6
    scores, speakers = np.full(n, 0.1), ["A" if k % 2 == 0 else "B" for k in range(n)]
    scores[[0, 2]] = 0.6
    scores[[n - 3, n - 1]] = 0.6
    assert {speakers[n - 1], speakers[0]} == {"A", "B"}
    assert repeated_turns(scores, speakers, 0.4) == set()  # one window of everything: the two cancel
    assert repeated_turns(scores[:REPEAT_WINDOW], speakers[:REPEAT_WINDOW], 0.4) == {0, 2}
    assert repeat_evidence(scores, speakers) == 0.6
