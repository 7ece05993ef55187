"""The `keyphrases` detector: MentalManip's key-phrase matcher (seed 000, section 3.2 and Table 2).

A sentence matches a key phrase when it contains at least P% of the phrase's
tokens, with P = 100/90/80/70% for phrases of <=4/<=6/<=10/>10 tokens. The
paper's phrases are lemmatised and in the present tense ("you be overreact"
style is avoided by expanding contractions and lemmatising both sides), so
"You're overreacting" matches "you are overreact". Cheap, always on, and it
quotes itself: the evidence is the matched sentence.

Matching reads a normalised copy of each sentence (NFKC, format characters such as
zero-width spaces and bidi controls removed), so "over\u200breacting" cannot hide a
phrase; sentences are still cut from the original text, so the quote is verbatim.
The phrases and the matching rule live in `guardian.corpora.keyphrases`.
"""

from __future__ import annotations

from typing import ClassVar

from guardian.conversation import Conversation, Turn
from guardian.corpora.keyphrases import (
    KeyPhrase,
    PhraseMatch,
    load_phrases,
    match_sentence,
    normalised,
    required_fraction,
    tokens,
)
from guardian.detectors.base import Detector
from guardian.findings import Assessment, Finding
from guardian.grounding import evidence_for, sentences

# The matcher's names, importable from here as before the rule moved to guardian.corpora.
__all__ = [
    "PATTERN",
    "KeyPhrase",
    "KeyPhraseDetector",
    "PhraseMatch",
    "load_phrases",
    "match_sentence",
    "normalised",
    "required_fraction",
    "tokens",
]

PATTERN = "key_phrase"


class KeyPhraseDetector(Detector):
    """Flags sentences that carry one of MentalManip's 175 manipulative key phrases."""

    name: ClassVar[str] = "keyphrases"
    description: ClassVar[str] = "MentalManip's 175 key phrases, length-adaptive match (cheap, always on)"

    #: A key phrase alone is weak evidence (see docs/keyphrases.md for its measured precision).
    base_score: ClassVar[float] = 0.5

    def warm_up(self) -> None:
        load_phrases()

    def findings_for_turn(self, turn: Turn) -> list[Finding]:
        findings = []
        for span in sentences(turn.text):
            matches = match_sentence(span.text)
            if not matches:
                continue
            best = matches[0]
            phrases = ", ".join(f"“{m.phrase.text}”" for m in matches[:3])
            findings.append(
                Finding(
                    pattern=PATTERN,
                    score=round(self.base_score * best.coverage, 4),
                    evidence=(evidence_for(turn, span),),
                    speaker=turn.speaker,
                    detector=self.name,
                    explanation=f"matches the manipulative key phrase {phrases}",
                )
            )
        return findings

    def analyze(self, window: Conversation) -> Assessment:
        last = window.last
        if last is None:
            return self.empty(window)
        findings = self.findings_for_turn(last)
        return Assessment(
            conversation_id=window.id,
            turn=last.index,
            findings=tuple(findings),
            manipulator=last.speaker if findings else None,
            detectors=(self.name,),
        )
