from __future__ import annotations

import pytest

from guardian.conversation import Conversation
from guardian.detectors.keyphrases import (
    KeyPhraseDetector,
    load_phrases,
    match_sentence,
    required_fraction,
    tokens,
)


def test_all_175_phrases_load() -> None:
    phrases = load_phrases()
    assert len(phrases) == 175
    assert all(p.tokens for p in phrases)


@pytest.mark.parametrize(("length", "p"), [(1, 1.0), (4, 1.0), (5, 0.9), (6, 0.9), (7, 0.8), (10, 0.8), (11, 0.7), (13, 0.7)])
def test_length_adaptive_percentage_table_2(length: int, p: float) -> None:
    assert required_fraction(length) == p


def test_contractions_and_lemmas_meet_the_papers_present_tense() -> None:
    assert tokens("You're overreacting") == tokens("you are overreact")
    assert tokens("I didn't say that") == tokens("i do not say that")
    assert tokens("You can’t") == ["you", "can", "not"]


@pytest.mark.parametrize(
    ("sentence", "phrase"),
    [
        # seed 000 Appendix B.1 examples, as people actually say them
        ("You made me do this!", "you make me do this"),
        ("How could you do this to me?", "how could you do this to me"),
        ("Know your place.", "know your place"),
        ("You shouldn't feel that way.", "you should not feel that way"),
        ("What more do you want from me?", "what more do you want"),
        ("Watch your step, friend.", "watch your step"),
        ("You always do this.", "you always do this"),
        ("You're too sensitive.", "you are too sensitive"),
        ("It wasn't intentional.", "it was not intentional"),
        ("You don't love me.", "you do not love me"),
        ("You'd do it if you loved me.", "you would do it if you love me"),
        ("It's all in the past now.", "it is all in the past"),
    ],
)
def test_paper_examples_match(sentence: str, phrase: str) -> None:
    assert phrase in {p.text for p in load_phrases()}
    assert phrase in [m.phrase.text for m in match_sentence(sentence)]


def test_partial_match_threshold() -> None:
    # An 11+ token phrase needs 70% of its tokens; a 4-token phrase needs all of them.
    long_phrases = [p for p in load_phrases() if len(p.tokens) > 10]
    phrase = long_phrases[0]
    keep = phrase.tokens[: int(len(phrase.tokens) * 0.7 + 0.999)]
    assert phrase.text in [m.phrase.text for m in match_sentence(" ".join(keep))]
    too_few = phrase.tokens[: int(len(phrase.tokens) * 0.7) - 1]
    assert phrase.text not in [m.phrase.text for m in match_sentence(" ".join(too_few))]
    assert match_sentence("You always") == [] or all(
        len(m.phrase.tokens) <= 2 for m in match_sentence("You always")
    )


def test_benign_sentences_do_not_match() -> None:
    for sentence in ["Nice weather today.", "Could you pass the salt?", "See you at six."]:
        assert match_sentence(sentence) == []


def test_detector_quotes_the_matched_sentence_of_the_last_turn() -> None:
    conv = Conversation.from_pairs(
        [("A", "Where were you?"), ("B", "Relax. You're overreacting again, as always. Fine.")]
    )
    assessment = KeyPhraseDetector().analyze(conv)
    assert assessment.turn == 1
    assert len(assessment.findings) == 1
    finding = assessment.findings[0]
    assert finding.pattern == "key_phrase"
    assert finding.speaker == "B"
    (ev,) = finding.evidence
    assert ev.quote == "You're overreacting again, as always."
    assert conv.turn(1).text[ev.start : ev.end] == ev.quote
    assert assessment.manipulator == "B"
    # earlier turns are assessed when they are the last of their own window
    assert KeyPhraseDetector().analyze(conv.upto(0)).findings == ()


@pytest.mark.parametrize("hidden", ["\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\ufeff", "\u202e"])
def test_zero_width_characters_do_not_hide_a_key_phrase_and_the_quote_stays_verbatim(hidden: str) -> None:
    """Issue 21 item 11: a format character inside a word split it for the tokenizer and hid the phrase."""
    said = f"I never said that. You're over{hidden}reacting, as usual."
    conv = Conversation.from_pairs([("Maya", "I waited an hour."), ("Daniel", said)])
    findings = KeyPhraseDetector().analyze(conv).findings
    assert findings, hidden
    evidence = findings[0].evidence[0]
    assert evidence.quote == f"You're over{hidden}reacting, as usual."
    assert conv.turns[1].text[evidence.start : evidence.end] == evidence.quote


def test_full_width_letters_match_after_nfkc() -> None:
    assert tokens("Ｙｏｕ're overreacting") == tokens("you are overreact")


def test_the_token_index_finds_what_scoring_every_phrase_finds() -> None:
    """The shipped phrases go through a token index with precomputed counts; scoring all 175 is the rule."""
    import random

    phrases = load_phrases()
    rng = random.Random(7)
    sentences = []
    for phrase in phrases:  # around each phrase's threshold: all, one fewer, shuffled with filler
        words = list(phrase.tokens)
        sentences.append(" ".join(words))
        sentences.append(" ".join(words[:-1]))
        sentences.append(" ".join([*rng.sample(words, k=max(1, len(words) - 2)), "you", "the", "today"]))
    matched = 0
    for sentence in sentences:
        indexed, scanned = match_sentence(sentence), match_sentence(sentence, phrases)
        assert [(m.phrase.text, m.coverage) for m in indexed] == [(m.phrase.text, m.coverage) for m in scanned]
        matched += bool(indexed)
    assert matched > len(phrases)  # the check compared real matches, not empty lists
