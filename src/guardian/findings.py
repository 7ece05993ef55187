"""What detectors say: findings, intents and the per-turn assessment."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from guardian.conversation import Evidence
from guardian.taxonomy import FaceAct, Technique, Vulnerability


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Finding(_Frozen):
    """One reason to worry, backed by verbatim evidence.

    Exactly one of `technique` (one of the 11) or `pattern` (a derived pattern such
    as ``key_phrase`` or ``persistent_pressure``) names what was found.
    """

    technique: Technique | None = None
    pattern: str | None = None
    score: float = Field(ge=0.0, le=1.0)
    evidence: tuple[Evidence, ...] = ()
    vulnerabilities: tuple[Vulnerability, ...] = ()
    speaker: str | None = None
    detector: str
    explanation: str = ""

    @model_validator(mode="after")
    def _one_label(self) -> Finding:
        if (self.technique is None) == (self.pattern is None):
            raise ValueError("a finding names exactly one of technique or pattern")
        return self

    @property
    def label(self) -> str:
        return self.technique.value if self.technique is not None else str(self.pattern)

    @property
    def turn(self) -> int | None:
        """The turn this finding belongs to: the latest turn it quotes (a pattern quotes the turn
        it reacts to first, e.g. a refusal, then its own); None without evidence."""
        return max((e.turn for e in self.evidence), default=None)

    @property
    def key(self) -> tuple[str, tuple[tuple[int, int, int], ...]]:
        """Identity for de-duplication across turns: what was found, and where."""
        return self.label, tuple((e.turn, e.start, e.end) for e in self.evidence)


class Intent(_Frozen):
    """What a speaker is doing with one turn (seed 002 face acts)."""

    turn: int = Field(ge=0)
    speaker: str
    face_act: FaceAct
    score: float = Field(ge=0.0, le=1.0)
    intention: str
    domain_intention: str | None = None
    role: str | None = None
    detector: str
    #: The model is not sure enough (top probability under its abstention threshold): kept for the
    #: record and the pressure patterns, but renderers show no intent for the turn rather than a wrong one.
    abstained: bool = False


class DetectorError(_Frozen):
    """A detector that failed or timed out; the assessment records it instead of crashing."""

    detector: str
    kind: Literal["error", "timeout", "unavailable"] = "error"
    message: str


VerdictRule = Literal["under", "threshold", "repeated", "scam", "scam_request"]


class Verdict(_Frozen):
    """How the deciding detector read the assessed turn *itself*, in numbers a person can check.

    Why: an assessment's `probability` and `decision` are the window's (its most suspicious turn's),
    so a harmless reply after a put-down read "MANIPULATIVE" with nothing saying which turn or which
    rule. The verdict names the rule that fired on this turn ("turn 3 scored .76, under the medium
    threshold .90, over the repeat threshold .55 as turn 1 did"), or `under` when none did.
    """

    turn: int = Field(ge=0)
    score: float = Field(ge=0.0, le=1.0, description="this turn's own p(manipulation), or its scam score")
    threshold: float = Field(description="the threshold the rule compared against")
    sensitivity: str | None = None
    rule: VerdictRule = "under"
    repeat_threshold: float | None = None
    paired_with: int | None = Field(default=None, description="the same speaker's turn that makes this one a repetition")
    paired_score: float | None = Field(default=None, ge=0.0, le=1.0, description="that turn's own score")

    @property
    def flagged(self) -> bool:
        return self.rule != "under"


CardKind = Literal["manipulation", "scam"]


class FindingCard(_Frozen):
    """One flagged turn as a person reads it: who, the one or two tactics worth showing, the quote
    from that turn, what it targets, and why it fired (`guardian.cards` builds it).

    Every label found on the turn keeps its score in `scores` (for machines and the expanded view);
    `tactics` are the shown ones only.
    """

    turn: int = Field(ge=0)
    speaker: str
    score: float = Field(ge=0.0, le=1.0)
    kind: CardKind = "manipulation"
    tactics: tuple[str, ...] = ()
    scores: dict[str, float] = Field(default_factory=dict)
    quote: Evidence | None = None
    vulnerabilities: tuple[Vulnerability, ...] = ()
    why: str = ""

    @model_validator(mode="after")
    def _own_quote(self) -> FindingCard:
        if self.quote is not None and self.quote.turn != self.turn:
            raise ValueError("a card quotes its own turn only")
        return self


class Assessment(_Frozen):
    """Everything known after one turn: probability, decision, findings, intents.

    `not_assessed` names why a turn got no verdict at all (e.g. "language fr": the
    models read English only); the verdict fields are then empty (probability None,
    decision False, no findings) rather than a guess on input the models cannot read.
    """

    conversation_id: str = "conversation"
    turn: int = Field(ge=-1, description="conversation index of the latest turn assessed; -1 when empty")
    probability: float | None = Field(default=None, ge=0.0, le=1.0)
    decision: bool = False
    threshold: float | None = None
    techniques: dict[Technique, float] = Field(default_factory=dict)
    vulnerabilities: dict[Vulnerability, float] = Field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    intents: tuple[Intent, ...] = ()
    manipulator: str | None = None
    detectors: tuple[str, ...] = ()
    errors: tuple[DetectorError, ...] = ()
    latency_ms: float = 0.0
    not_assessed: str | None = Field(
        default=None, description="why this turn got no verdict (e.g. 'language fr'); None when assessed"
    )
    history: tuple[Finding, ...] = Field(
        default=(), description="findings about earlier turns of the window, carried as context, never new"
    )
    verdict: Verdict | None = Field(default=None, description="how the deciding detector read this turn itself")
    card: FindingCard | None = Field(default=None, description="this turn's card when the turn itself is flagged")

    @classmethod
    def merge(
        cls, parts: Iterable[Assessment], *, conversation_id: str, turn: int, latency_ms: float = 0.0
    ) -> Assessment:
        """Combine several detectors' assessments of the same window.

        The probability is the most confident model's (the maximum): a cheap screen
        must not be able to vote a stronger detector down. The window is "not
        assessed" only when every part says so (one detector's refusal must not
        hide another's verdict).
        """
        parts = list(parts)
        probs = [p.probability for p in parts if p.probability is not None]
        probability = max(probs) if probs else None
        decision = any(p.decision for p in parts)
        techniques: dict[Technique, float] = {}
        vulnerabilities: dict[Vulnerability, float] = {}
        for p in parts:
            for t, s in p.techniques.items():
                techniques[t] = max(s, techniques.get(t, 0.0))
            for v, s in p.vulnerabilities.items():
                vulnerabilities[v] = max(s, vulnerabilities.get(v, 0.0))
        thresholds = [p.threshold for p in parts if p.threshold is not None and p.probability == probability]
        manipulators = [p.manipulator for p in parts if p.manipulator]
        refusals = [p.not_assessed for p in parts]
        verdicts = sorted((p.verdict for p in parts if p.verdict is not None),
                          key=lambda v: (v.flagged, v.score), reverse=True)
        return cls(
            conversation_id=conversation_id,
            turn=turn,
            probability=probability,
            decision=decision,
            threshold=thresholds[0] if thresholds else None,
            techniques=techniques,
            vulnerabilities=vulnerabilities,
            findings=tuple(f for p in parts for f in p.findings),
            intents=tuple(i for p in parts for i in p.intents),
            manipulator=manipulators[0] if manipulators else None,
            detectors=tuple(d for p in parts for d in p.detectors),
            errors=tuple(e for p in parts for e in p.errors),
            latency_ms=latency_ms,
            not_assessed=refusals[0] if refusals and all(refusals) else None,
            history=tuple(f for p in parts for f in p.history),
            verdict=verdicts[0] if verdicts else None,
        )

    def own_findings(self) -> tuple[Finding, ...]:
        """The findings that belong to the assessed turn (`Finding.turn`), or quote nothing."""
        return tuple(f for f in self.findings if f.turn is None or f.turn == self.turn)

    @classmethod
    def refused(
        cls, reason: str, *, conversation_id: str, turn: int, latency_ms: float = 0.0
    ) -> Assessment:
        """The assessment of a turn the detectors were not run on, saying why (`not_assessed`)."""
        return cls(conversation_id=conversation_id, turn=turn, latency_ms=latency_ms, not_assessed=reason)
