"""What the manipulation agent's answers mean: the JSON schema, its lenient reading, the vote.

Why apart from `manipulation`: the detector (prompting, sampling, the LLM calls) and the reading
of what comes back change for different reasons; every answer field is validated leniently
(models write "yes", "0.8", a bare string for a list) and every quote is grounded against the
transcript, so a quote that is not there verbatim is counted (`ungrounded`), never shown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from guardian.conversation import Conversation, Evidence
from guardian.detectors.llm.prompting import unescape
from guardian.grounding import ground
from guardian.taxonomy import Technique, Vulnerability

# -- the answer schema ----------------------------------------------------------------------

def _as_bool(value: Any) -> Any:
    if isinstance(value, str):
        word = value.strip().strip(".").lower()
        if word in ("yes", "true", "y", "a", "manipulative"):
            return True
        if word in ("no", "false", "n", "b", "not manipulative", "none"):
            return False
    return value


class QuotedEvidence(BaseModel):
    model_config = ConfigDict(extra="ignore")

    quote: str
    turn: int | None = None
    technique: str | None = None


class ManipulationAnswer(BaseModel):
    """What one sample must say. Lenient where small models are sloppy, strict on the decision."""

    model_config = ConfigDict(extra="ignore")

    manipulative: bool
    confidence: float | None = Field(default=None)
    techniques: list[str] = Field(default_factory=list)
    vulnerabilities: list[str] = Field(default_factory=list)
    manipulator: str | None = None
    evidence: list[QuotedEvidence] = Field(default_factory=list)
    explanation: str = ""

    _bool = field_validator("manipulative", mode="before")(_as_bool)

    @classmethod
    def response_schema(cls) -> dict[str, Any]:
        """The JSON schema sent as `response_format`: closed label sets and bounded lengths.

        Servers that compile the schema into a grammar (llama.cpp, vLLM) then cannot
        ramble past the token limit; parsing stays lenient (this class) either way.
        """
        techniques = {"type": "string", "enum": [t.value for t in Technique]}
        return {
            "type": "object",
            "properties": {
                "manipulative": {"type": "boolean"},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "techniques": {"type": "array", "items": techniques, "maxItems": 3},
                "vulnerabilities": {
                    "type": "array",
                    "items": {"type": "string", "enum": [v.value for v in Vulnerability]},
                    "maxItems": 2,
                },
                "manipulator": {"type": ["string", "null"], "maxLength": 40},
                "evidence": {
                    "type": "array",
                    "maxItems": 2,
                    "items": {
                        "type": "object",
                        "properties": {
                            "quote": {"type": "string", "maxLength": 160},
                            "turn": {"type": "integer", "minimum": 0},
                            "technique": techniques,
                        },
                        "required": ["quote", "turn"],
                    },
                },
                "explanation": {"type": "string", "maxLength": 200},
            },
            "required": ["manipulative", "techniques", "evidence"],
        }

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, value: Any) -> Any:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        return min(1.0, max(0.0, number / 100 if number > 1 else number))

    @field_validator("techniques", "vulnerabilities", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            return [v for v in (p.strip() for p in value.split(",")) if v]
        return [str(v) for v in value if v] if isinstance(value, list) else value

    @field_validator("evidence", mode="before")
    @classmethod
    def _evidence(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            return [{"quote": value}]
        if isinstance(value, list):
            return [{"quote": v} if isinstance(v, str) else v for v in value if v]
        return value

    @field_validator("manipulator", mode="before")
    @classmethod
    def _manipulator(cls, value: Any) -> Any:
        return None if value in ("", "null", "none", "None") else value


def _parse_all(labels: Sequence[str], parse: Any) -> list[Any]:
    out = []
    for label in labels:
        try:
            out.append(parse(label))
        except ValueError:
            continue
    return list(dict.fromkeys(out))


# -- the vote -------------------------------------------------------------------------------


@dataclass
class Vote:
    """Self-consistency result over the samples that answered."""

    samples: int
    yes: int
    techniques: dict[Technique, float]
    vulnerabilities: dict[Vulnerability, float]
    manipulator: str | None
    evidence: list[tuple[Evidence, Technique | None]]
    ungrounded: int
    explanation: str

    @property
    def probability(self) -> float:
        return self.yes / self.samples if self.samples else 0.0

    @property
    def decision(self) -> bool:
        return self.yes * 2 > self.samples


def vote(answers: Sequence[ManipulationAnswer], window: Conversation) -> Vote:
    """Majority decision; labels and quotes from the answers on the winning side only."""
    yes = sum(a.manipulative for a in answers)
    decision = yes * 2 > len(answers)
    side = [a for a in answers if a.manipulative == decision]
    tech_votes: Counter[Technique] = Counter()
    vuln_votes: Counter[Vulnerability] = Counter()
    speakers: Counter[str] = Counter()
    evidence: dict[tuple[int, int, int], tuple[Evidence, Technique | None]] = {}
    ungrounded = 0
    last = window.last
    for answer in answers:
        for item in answer.evidence:  # grounding is checked on every sample, counted once each
            found = ground_quote(window, item.quote, turn=item.turn)
            if found is None:
                ungrounded += 1
                continue
            if answer.manipulative and decision:
                technique = _parse_all([item.technique or ""], Technique.parse)
                evidence.setdefault((found.turn, found.start, found.end), (found, technique[0] if technique else None))
    for answer in side:
        tech_votes.update(_parse_all(answer.techniques, Technique.parse))
        vuln_votes.update(_parse_all(answer.vulnerabilities, Vulnerability.parse))
        if answer.manipulator and answer.manipulator in window.speakers:
            speakers[answer.manipulator] += 1
    techniques: dict[Technique, float] = {}
    vulnerabilities: dict[Vulnerability, float] = {}
    if decision:
        n = len(answers)
        techniques = {t: c / n for t, c in tech_votes.items() if c * 2 >= len(side)}
        vulnerabilities = {v: c / n for v, c in vuln_votes.items() if c * 2 >= len(side)}
    manipulator = speakers.most_common(1)[0][0] if decision and speakers else None
    if decision and manipulator is None and last is not None and evidence:
        manipulator = window.turn(next(iter(evidence.values()))[0].turn).speaker
    explanation = next((a.explanation for a in side if a.explanation), "")
    return Vote(len(answers), yes, techniques, vulnerabilities, manipulator, list(evidence.values()), ungrounded, explanation)


def ground_quote(window: Conversation, quote: str, *, turn: int | None = None) -> Evidence | None:
    """A quote from the model, located verbatim (escaped forms mapped back first)."""
    quote = quote.strip().strip('"').strip()
    if not quote:
        return None
    return ground(window, quote, turn=turn) or ground(window, unescape(quote), turn=turn)
