"""The repetition rule: two suspicious turns of one speaker within the window count, one does not."""

from __future__ import annotations

import numpy as np

from guardian.detectors.local.repetition import REPEAT_WINDOW, repeat_evidence, repeated_turns


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
