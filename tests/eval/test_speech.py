"""Speech metrics: WER and speaker attribution scoring."""

from __future__ import annotations

import pytest

from guardian.eval.speech import speaker_word_accuracy, word_errors, words


def test_words_normalise_case_punctuation_and_small_numbers() -> None:
    assert words("Pick me up at 6, Tom's car -- OK?") == ["pick", "me", "up", "at", "six", "tom's", "car", "ok"]


def test_wer_counts_substitutions_deletions_insertions() -> None:
    result = word_errors("the cat sat on the mat", "the cat sat on mat today")
    assert result.reference_words == 6
    assert result.errors == 2  # one deletion, one insertion
    assert result.wer == pytest.approx(2 / 6)
    assert word_errors("same words", "Same words!").errors == 0


def test_speaker_accuracy_uses_the_best_name_mapping() -> None:
    ref = [("Maya", "one two three"), ("Dan", "four five")]
    assert speaker_word_accuracy(ref, [("Speaker 2", "one two three"), ("Speaker 1", "four five")]) == 1.0
    # one word given to the wrong voice
    assert speaker_word_accuracy(ref, [("S1", "one two"), ("S2", "three four five")]) == pytest.approx(0.8)
    # everything merged into one speaker: only the larger speaker's words can be right
    assert speaker_word_accuracy(ref, [("S1", "one two three four five")]) == pytest.approx(0.6)
    # missing words count as wrong
    assert speaker_word_accuracy(ref, [("S1", "one two three")]) == pytest.approx(0.6)


def test_a_line_that_looks_like_options_is_still_spoken(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """MentalManip has turns like "-- He killed people --"; espeak-ng must not read them as flags."""
    from guardian.eval.speech import synthesize_dialogue

    synth = synthesize_dialogue(
        [("A", "-- He killed people --"), ("B", "-v is not a voice here.")], {"A": "en-us+m3", "B": "en-gb+f3"}, tmp_path
    )
    assert synth.mono.stat().st_size > 16000 * 2  # more than a second of 16-bit audio
