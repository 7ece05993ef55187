"""Out of scope, said plainly: a conversation that is not English gets "not assessed: language X"."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import ClassVar

import pytest

from guardian.agents._engine import DetectorPool
from guardian.agents._screening import assess, is_flagged
from guardian.analyze import assess_turns
from guardian.cli import main
from guardian.conversation import Conversation
from guardian.detectors.base import Detector
from guardian.findings import Assessment
from guardian.language import MIN_LETTERS, _has_letters, identify, not_assessed_reason, text_reason
from guardian.monitor import Monitor

FRENCH = [
    ("Claire", "Tu m'avais promis de venir me chercher à six heures. J'ai attendu une heure."),
    ("Marc", "Je n'ai jamais dit ça. Tu exagères, comme d'habitude."),
    ("Claire", "Tu m'as envoyé un message ce matin."),
]
GERMAN = [
    ("Anna", "Du hast versprochen, mich um sechs Uhr abzuholen. Ich habe eine Stunde gewartet."),
    ("Jonas", "Das habe ich nie gesagt. Du übertreibst wie immer."),
]
ENGLISH_WITH_FRENCH = [
    ("Maya", "We had a lovely dinner, and the crème brûlée was the best part, honestly."),
    ("Daniel", "I agree, c'est la vie. Shall we go back there next Friday?"),
]


class AlwaysFlags(Detector):
    """Flags every window: a refused window must not reach it."""

    name: ClassVar[str] = "always-test"

    def __init__(self) -> None:
        self.calls = 0

    def analyze(self, window: Conversation) -> Assessment:
        self.calls += 1
        last = window.last
        assert last is not None
        return Assessment(conversation_id=window.id, turn=last.index, probability=0.99, decision=True,
                          detectors=(self.name,))


def _conversation(pairs: list[tuple[str, str]], cid: str = "c") -> Conversation:
    return Conversation.from_pairs(pairs, id=cid)


def test_french_and_german_are_not_assessed_english_with_a_french_word_is() -> None:
    assert not_assessed_reason(_conversation(FRENCH)) == "language fr"
    assert not_assessed_reason(_conversation(GERMAN)) == "language de"
    assert not_assessed_reason(_conversation(ENGLISH_WITH_FRENCH)) is None


@pytest.mark.parametrize("text", ["ok", "hi", "Oui.", "Merci!", "Danke schön", "lol idk", ""])
def test_short_text_counts_as_english(text: str) -> None:
    assert text_reason(text) is None


@pytest.mark.parametrize("letters", [0, 1, 19, 20, 21, 400])
def test_the_letter_count_stops_early_but_decides_as_a_full_count(letters: int) -> None:
    text = "1 2, " * 50 + "é" * letters + " 3." * 30
    assert _has_letters(text, MIN_LETTERS) is (sum(ch.isalpha() for ch in text) >= MIN_LETTERS)


def test_the_line_by_line_walk_ranks_exactly_as_py3langid() -> None:
    """guardian walks a window line by line and remembers the walks; py3langid walks it whole.
    Same languages, same probabilities to the bit, on windows that share lines as a conversation's do,
    cut anywhere, upper case, accents, emoji, lines without features, and no text at all."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    from guardian.language import _load

    plain = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    ours = _load()
    assert type(ours) is not LanguageIdentifier  # the walk under test is really the one in use
    lines = [text for pairs in (FRENCH, GERMAN, ENGLISH_WITH_FRENCH) for _, text in pairs]
    lines += ["OK", "", "   ", "LEAVE ME ALONE. NOW.", "\u4f60\u597d\uff0c\u6211\u5f88\u597d\u3002 \U0001f600", "a\nb\n\nc"]
    texts = ["\n".join(lines[i : i + n]) for n in (1, 3, 6) for i in range(len(lines))]
    texts += [t[cut:] for t in texts[-4:] for cut in (1, 7, 30)] + ["", "\n\n"]
    for _ in range(2):  # the second pass reads every line's walk from memory
        for text in texts:
            ranked = plain.rank(text)
            assert ours.rank(text) == ranked, text
            guess = identify(text)  # read from the scores, not from a ranking
            assert (guess.language, guess.confidence) == ranked[0]
            assert guess.english == next(p for code, p in ranked if code == "en")


def test_analyze_runs_no_detector_on_a_french_window() -> None:
    detector = AlwaysFlags()
    out = assess_turns(_conversation(FRENCH), [detector], window=10)
    # the first turn alone is long enough to tell
    assert [a.not_assessed for a in out] == ["language fr"] * 3
    assert all(a.probability is None and not a.decision and not a.findings for a in out)
    assert detector.calls == 0
    english = assess_turns(_conversation(ENGLISH_WITH_FRENCH), [detector], window=10)
    assert all(a.not_assessed is None and a.decision for a in english)


def test_monitor_says_not_assessed_sync_and_async() -> None:
    detector = AlwaysFlags()
    monitor = Monitor([detector], window=10, timeout_s=5, queue_size=8)
    try:
        for speaker, text in GERMAN:
            sync = monitor.add_turn_sync("de", speaker, text)
        assert sync.not_assessed == "language de" and not sync.decision and sync.probability is None
        assert monitor.risk("de") == 0.0

        async def run() -> Assessment:
            result = None
            for speaker, text in FRENCH:
                result = await monitor.add_turn("fr", speaker, text)
            assert result is not None
            return result

        result = asyncio.run(run())
        assert result.not_assessed == "language fr"
        assert detector.calls == 0
    finally:
        monitor.close()


def test_chatbot_screening_is_not_flagged_on_a_french_thread() -> None:
    detector = AlwaysFlags()
    window = _conversation(FRENCH)
    assessment = assess([detector], window)
    assert assessment.not_assessed == "language fr"
    assert not is_flagged(assessment)
    pool = DetectorPool([detector], timeout_s=None)
    assert pool.assess(window).not_assessed == "language fr"
    assert asyncio.run(pool.aassess(window)).not_assessed == "language fr"
    assert detector.calls == 0
    assert pool.assess(_conversation(ENGLISH_WITH_FRENCH)).decision


def test_analyze_cli_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chat = tmp_path / "fr.txt"
    chat.write_text("\n".join(f"{s}: {t}" for s, t in FRENCH) + "\n", encoding="utf-8")
    assert main(["analyze", str(chat), "-d", "keyphrases"]) == 0
    assert "not assessed: language fr" in capsys.readouterr().out
    assert main(["analyze", str(chat), "-d", "keyphrases", "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {a["not_assessed"] for a in doc["assessments"]} == {"language fr"}


def test_merge_keeps_a_refusal_only_when_every_part_refuses() -> None:
    refused = Assessment.refused("language fr", conversation_id="c", turn=0)
    verdict = Assessment(conversation_id="c", turn=0, probability=0.2, detectors=("x",))
    assert Assessment.merge([refused, refused], conversation_id="c", turn=0).not_assessed == "language fr"
    assert Assessment.merge([refused, verdict], conversation_id="c", turn=0).not_assessed is None
