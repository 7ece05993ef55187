"""Text normalised for detectors (issue 47 item 3): disguised words read as written, quotes verbatim.

The disguises are the ones a hostile user tried on examples/gaslighting.txt: Cyrillic
look-alike letters, leetspeak and zero-width characters inside words. The key-phrase
detector is the cheap judge (the local model's figure is the slow test at the end).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.conversation import Conversation
from guardian.detectors.keyphrases import KeyPhraseDetector
from guardian.normalise import normalise
from guardian.runner import Runner, detector_view

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gaslighting.txt"

_HOMOGLYPHS = str.maketrans({"a": "а", "e": "е", "o": "о", "c": "с", "p": "р", "y": "у", "x": "х", "i": "і"})
_LEET = str.maketrans({"o": "0", "e": "3", "a": "4", "i": "1"})


def homoglyphs(text: str) -> str:
    """Latin letters swapped for their Cyrillic look-alikes (a reader sees no difference)."""
    return text.translate(_HOMOGLYPHS)


def leet(text: str) -> str:
    return text.translate(_LEET)


def zero_width(text: str) -> str:
    """A zero-width space in the middle of every word of four letters or more."""
    return " ".join(w[: len(w) // 2] + "\u200b" + w[len(w) // 2 :] if len(w) >= 4 else w for w in text.split(" "))


DISGUISES = {"homoglyphs": homoglyphs, "leet": leet, "zero_width": zero_width}


def example(disguise: str | None = None) -> Conversation:
    """examples/gaslighting.txt, Daniel's turns disguised (Maya's left as written)."""
    pairs = []
    for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
        speaker, text = line.split(": ", 1)
        if disguise is not None and speaker == "Daniel":
            text = DISGUISES[disguise](text)
        pairs.append((speaker, text))
    return Conversation.from_pairs(pairs, id="gaslighting")


# --- the normalisation itself ---------------------------------------------------------------


@pytest.mark.parametrize("disguise", sorted(DISGUISES))
def test_each_disguise_reads_as_the_original_line(disguise: str) -> None:
    for turn in example().turns:
        if turn.speaker == "Daniel":
            assert normalise(DISGUISES[disguise](turn.text)).text == turn.text


def test_plain_ascii_is_returned_untouched() -> None:
    text = "Maya: You said you'd pick me up at six. I waited an hour!"
    n = normalise(text)
    assert not n.changed and n.text is text and n.original_span(3, 9) == (3, 9)


@pytest.mark.parametrize(
    "text",
    [
        "It was $500 in 2024, due 4pm on the 10th.",
        "Call 555-0100 or write to anna@example.com about the mp3 and b2b deal b4 5pm.",
        "US$1,250.00 by 3/4, that's 1st and 2nd.",
        "привет, как дела?",  # real Cyrillic is not "folded" into Latin nonsense
    ],
)
def test_numbers_prices_addresses_and_real_cyrillic_are_unchanged(text: str) -> None:
    assert normalise(text).text == text


def test_leetspeak_folds_inside_words_only() -> None:
    assert normalise("y0u l1ke th@t, 1d10t? m3 t00").text == "you like that, idiot? me too"
    assert normalise("Y0U'R3 W1LD").text == "YOU'RE WILD"


def test_nfkc_and_invisible_controls() -> None:
    # full-width letters, a ligature, a soft hyphen, a bidi override and a variation selector
    assert normalise("Ｋｎｏｗ your ﬁne place\u00ad\u202e\ufe0f").text == "Know your fine place"


def test_spans_map_back_to_verbatim_slices() -> None:
    original = "Ｋｎｏｗ уоur рlасе, over\u200breacting ﬁne café"
    n = normalise(original)
    for word in ("Know", "your place", "overreacting", "fine", "café"):
        start = n.text.index(word)
        a, b = n.original_span(start, start + len(word))
        assert normalise(original[a:b]).text == word  # the slice is the disguised word itself
    start = n.text.index("overreacting")
    assert original[slice(*n.original_span(start, start + 12))] == "over\u200breacting"


# --- through the runner ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def runner() -> Runner:
    return Runner([KeyPhraseDetector()])


@pytest.mark.parametrize("disguise", sorted(DISGUISES))
def test_disguised_example_scores_like_the_original(disguise: str, runner: Runner) -> None:
    """Same findings with the same scores on the same turns; each quote is a verbatim slice of the
    DISGUISED turn at its span, and reads (normalised) as the original's quote."""
    original, disguised = example(), example(disguise)
    found = 0
    for turn in disguised.turns:
        got = runner.assess(disguised.window(4, ending_at=turn.index))
        want = runner.assess(original.window(4, ending_at=turn.index))
        assert got.probability == want.probability
        assert [(f.label, f.score) for f in got.findings] == [(f.label, f.score) for f in want.findings]
        for mine, theirs in zip(got.findings, want.findings, strict=True):
            for evidence, plain in zip(mine.evidence, theirs.evidence, strict=True):
                found += 1
                assert evidence.turn == plain.turn
                assert disguised.turn(evidence.turn).text[evidence.start : evidence.end] == evidence.quote
                assert evidence.quote != plain.quote  # the user's disguised words, not a cleaned copy
                assert normalise(evidence.quote).text == plain.quote
    assert found >= 2  # "You're overreacting", "Know your place", "If you really loved me" ...


def test_an_untouched_window_is_passed_on_as_itself() -> None:
    window = example()
    view = detector_view(window)
    assert view.window is window and not view.maps
    disguised = example("homoglyphs")
    view = detector_view(disguised)
    for before, after in zip(disguised.turns, view.window.turns, strict=True):
        assert (after is before) == (before.speaker == "Maya")


# --- the real local model -------------------------------------------------------------------


@pytest.mark.slow
def test_local_model_reads_homoglyphs_as_the_original() -> None:
    """Turn 3 of the example ("Honestly, nobody else would put up with you. Know your place.") in
    Cyrillic look-alikes scored p .18 against the original's .76 before normalisation."""
    from guardian.detectors import registry

    runner = Runner([registry.create("local")])
    original = runner.assess(example().window(4, ending_at=3))
    disguised = runner.assess(example("homoglyphs").window(4, ending_at=3))
    assert original.probability is not None and disguised.probability is not None
    assert abs(disguised.probability - original.probability) <= 0.05
