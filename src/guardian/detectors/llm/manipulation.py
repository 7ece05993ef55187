"""The manipulation agent: an LLM's second opinion with few-shot examples, votes and quotes.

Prompt: seed 000 Appendix C's few-shot detection question (two manipulative and
one non-manipulative labelled example, here the nearest ones from the Chroma
store rather than random ones) extended as in seed 001 Appendix A with a tactic
and a supporting quote, asked for as one JSON object. Self-consistency (seed 001
section 4.1): `samples` independent answers, majority vote on the decision,
techniques kept when at least half of the agreeing answers name them. Every quote
is grounded against the transcript; one that is not found verbatim is dropped
and counted (`ungrounded`), never shown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from guardian.config import LLMSettings
from guardian.conversation import Conversation
from guardian.detectors.base import Detector
from guardian.detectors.llm.client import (
    LLMClient,
    LLMFailure,
    Usage,
    chat_model_from_settings,
    endpoint_configured,
)
from guardian.detectors.llm.parsing import ManipulationAnswer, Vote, vote
from guardian.detectors.llm.prompting import (
    Fence,
    Prompt,
    fenced,
    fenced_text,
    new_fence_token,
    render,
    technique_definitions,
    vulnerability_definitions,
)
from guardian.findings import Assessment, DetectorError, Finding
from guardian.taxonomy import Technique, Vulnerability

log = logging.getLogger(__name__)


# -- the prompt -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Shot:
    """A worked example: a labelled dialogue's text and its answer."""

    text: str
    manipulative: bool
    techniques: tuple[Technique, ...] = ()
    vulnerabilities: tuple[Vulnerability, ...] = ()

    def answer(self) -> str:
        import json

        return json.dumps(
            {
                "manipulative": self.manipulative,
                "techniques": [t.value for t in self.techniques],
                "vulnerabilities": [v.value for v in self.vulnerabilities],
            }
        )


def build_messages(window: Conversation, shots: Sequence[Shot] = (), *, token: str | None = None) -> list[BaseMessage]:
    """System instructions, fenced examples with their answers, the fenced transcript, the task."""
    token = token or new_fence_token(window.as_text(), *(s.text for s in shots))
    system = render(
        Prompt.MANIPULATION_SYSTEM,
        techniques=technique_definitions(),
        vulnerabilities=vulnerability_definitions(),
    )
    parts: list[str] = []
    if shots:
        parts.append(f"Here are {len(shots)} labelled examples (not the conversation to analyse):")
        for i, shot in enumerate(shots, start=1):
            parts.append(fenced_text(shot.text, Fence(token, f"EXAMPLE {i}")))
            parts.append(f"Answer for example {i}: {shot.answer()}")
    target = Fence(token, "TRANSCRIPT")
    parts.append(fenced(window, target))
    last = window.last
    parts.append(render(Prompt.MANIPULATION_TASK, label="TRANSCRIPT", turn=str(last.index if last else 0)))
    return [SystemMessage(content=system), HumanMessage(content="\n\n".join(parts))]


# -- the detector ---------------------------------------------------------------------------


@dataclass
class Opinion:
    """An LLM consultation: the vote, what it cost, and what went wrong."""

    vote: Vote | None
    usage: Usage = field(default_factory=Usage)
    error: LLMFailure | None = None
    malformed: int = 0
    latency_ms: float = 0.0
    shots: int = 0


class LLMDetector(Detector):
    """LLM second opinion over any OpenAI-compatible endpoint (or any chat model passed in)."""

    name: ClassVar[str] = "llm"
    description: ClassVar[str] = "LLM second opinion (OpenAI-compatible endpoint; off until llm.base_url is set)"

    def __init__(
        self,
        *,
        model: BaseChatModel | None = None,
        settings: LLMSettings | None = None,
        store: Any | None = None,
        samples: int | None = None,
        use_store: bool = True,
    ) -> None:
        from guardian.config import settings as load

        self.cfg = settings or load().llm
        if samples is not None:
            self.cfg = self.cfg.model_copy(update={"samples": samples})
        self._model = model
        self._client: LLMClient | None = None
        self._store = store
        self._use_store = use_store
        self._store_checked = store is not None
        self.unavailable: str | None = None
        self.usage = Usage()  # everything this detector spent, for eval reports
        self.consulted = 0
        if model is None and not endpoint_configured(self.cfg):
            self.unavailable = "no LLM endpoint configured (set llm.base_url, or GUARDIAN_LLM__BASE_URL)"

    @property
    def client(self) -> LLMClient:
        if self._client is None:
            self._client = LLMClient(self._model or chat_model_from_settings(self.cfg), self.cfg)
        return self._client

    def _shots(self, window: Conversation, *, exclude_split: int | None = None) -> list[Shot]:
        pos, neg = self.cfg.few_shot
        if not self._use_store or pos + neg == 0:
            return []
        if not self._store_checked:
            self._store_checked = True
            try:
                from guardian.retrieval.store import ExampleStore

                store = ExampleStore.from_settings()
                ok, _ = store.ready()
                self._store = store if ok else None
            except Exception:  # no store is a zero-shot prompt, not a failure
                self._store = None
        if self._store is None:
            return []
        try:
            examples = self._store.query(window, manipulative=pos, other=neg, exclude_split=exclude_split)
        except Exception as exc:  # store deleted or corrupted mid-session: go on zero-shot
            log.warning("example store unavailable (%s: %s); answering without examples", type(exc).__name__, exc)
            self._store = None
            return []
        return [Shot(e.text, e.manipulative, e.techniques, e.vulnerabilities) for e in examples]

    # -- consulting ---------------------------------------------------------------------

    def consult(self, window: Conversation, *, samples: int | None = None) -> Opinion:
        started = time.perf_counter()
        shots = self._shots(window)
        messages = build_messages(window, shots)
        answers: list[ManipulationAnswer] = []
        usage = Usage()
        error: LLMFailure | None = None
        malformed = 0
        for _ in range(samples or self.cfg.samples):
            try:
                answer, used = self.client.ask(messages, ManipulationAnswer)
            except LLMFailure as exc:
                usage.add(getattr(exc, "usage", Usage()))
                error = exc
                if exc.kind == "malformed":
                    malformed += 1
                    continue  # one garbled sample; the others may still answer
                break  # the endpoint is failing: do not spend the remaining samples on it
            usage.add(used)
            answers.append(answer)
        return self._opinion(window, answers, usage, error, started, len(shots), malformed)

    async def aconsult(self, window: Conversation, *, samples: int | None = None) -> Opinion:
        started = time.perf_counter()
        shots = await asyncio.to_thread(self._shots, window)
        messages = build_messages(window, shots)
        results = await asyncio.gather(
            *(self.client.aask(messages, ManipulationAnswer) for _ in range(samples or self.cfg.samples)),
            return_exceptions=True,
        )
        answers: list[ManipulationAnswer] = []
        usage = Usage()
        error: LLMFailure | None = None
        malformed = 0
        for result in results:
            if isinstance(result, LLMFailure):
                usage.add(getattr(result, "usage", Usage()))
                error = error or result
                malformed += result.kind == "malformed"
            elif isinstance(result, BaseException):
                raise result
            else:
                answers.append(result[0])
                usage.add(result[1])
        return self._opinion(window, answers, usage, error, started, len(shots), malformed)

    def _opinion(
        self,
        window: Conversation,
        answers: list[ManipulationAnswer],
        usage: Usage,
        error: LLMFailure | None,
        started: float,
        shots: int,
        malformed: int = 0,
    ) -> Opinion:
        self.usage.add(usage)
        self.consulted += 1
        return Opinion(
            vote=vote(answers, window) if answers else None,
            usage=usage,
            error=error,
            malformed=malformed,
            latency_ms=(time.perf_counter() - started) * 1000,
            shots=shots,
        )

    # -- the Detector interface ---------------------------------------------------------

    def analyze(self, window: Conversation) -> Assessment:
        if self.unavailable is not None:
            return self.unavailable_assessment(window)
        if window.last is None:
            return self.empty(window)
        return self._with_intent(window, self.assessment(window, self.consult(window)))

    async def aanalyze(self, window: Conversation) -> Assessment:
        if self.unavailable is not None:
            return self.unavailable_assessment(window)
        if window.last is None:
            return self.empty(window)
        assessment = self.assessment(window, await self.aconsult(window))
        return await asyncio.to_thread(self._with_intent, window, assessment)

    def _with_intent(self, window: Conversation, assessment: Assessment) -> Assessment:
        """Add the intent agent's reading of the latest turn when `llm.intents` is on."""
        if not self.cfg.intents:
            return assessment
        from guardian.detectors.llm.intent import IntentAgent

        agent = IntentAgent(self.client, samples=self.cfg.samples, detector=self.name)
        intent, error = agent.analyze(window)
        self.usage.add(agent.usage)
        update: dict[str, Any] = {}
        if intent is not None:
            update["intents"] = (*assessment.intents, intent)
        if error is not None:
            update["errors"] = (*assessment.errors, DetectorError(detector=self.name, message=f"intent agent: {error}"))
        return assessment.model_copy(update=update) if update else assessment

    def unavailable_assessment(self, window: Conversation) -> Assessment:
        error = DetectorError(detector=self.name, kind="unavailable", message=self.unavailable or "")
        return self.empty(window).model_copy(update={"errors": (error,)})

    def assessment(self, window: Conversation, opinion: Opinion, *, detector: str | None = None) -> Assessment:
        """An Assessment of the latest turn from an opinion; failures become DetectorErrors."""
        name = detector or self.name
        last = window.last
        turn = last.index if last is not None else -1
        errors: list[DetectorError] = []
        if opinion.error is not None:
            kind = "timeout" if opinion.error.kind == "timeout" else "error"
            if opinion.vote is None:
                kind = "unavailable" if opinion.error.kind != "timeout" else "timeout"
            errors.append(DetectorError(detector=self.name, kind=kind, message=str(opinion.error)))
        v = opinion.vote
        if v is None:
            return Assessment(conversation_id=window.id, turn=turn, detectors=(name,), errors=tuple(errors), latency_ms=opinion.latency_ms)
        if v.ungrounded:
            errors.append(
                DetectorError(
                    detector=self.name,
                    kind="error",
                    message=f"{v.ungrounded} quote(s) from the LLM were not found in the transcript and were dropped",
                )
            )
        findings = self._findings(v, name)
        return Assessment(
            conversation_id=window.id,
            turn=turn,
            probability=v.probability,
            decision=v.decision,
            threshold=0.5,
            techniques=v.techniques,
            vulnerabilities=v.vulnerabilities,
            findings=findings,
            manipulator=v.manipulator,
            detectors=(name,),
            errors=tuple(errors),
            latency_ms=opinion.latency_ms,
        )

    def _findings(self, v: Vote, name: str) -> tuple[Finding, ...]:
        if not v.decision:
            return ()
        vulns = tuple(sorted(v.vulnerabilities, key=lambda x: -v.vulnerabilities[x]))
        explanation = f"LLM, {v.yes}/{v.samples} votes manipulative" + (f": {v.explanation}" if v.explanation else "")
        findings: list[Finding] = []
        for technique, score in sorted(v.techniques.items(), key=lambda kv: -kv[1]):
            quotes = tuple(ev for ev, t in v.evidence if t is technique or t is None)
            findings.append(
                Finding(
                    technique=technique,
                    score=round(score, 4),
                    evidence=quotes,
                    vulnerabilities=vulns,
                    speaker=v.manipulator,
                    detector=name,
                    explanation=explanation,
                )
            )
        if not findings and v.evidence:
            findings.append(
                Finding(
                    pattern="llm_manipulation",
                    score=round(v.probability, 4),
                    evidence=tuple(ev for ev, _ in v.evidence),
                    vulnerabilities=vulns,
                    speaker=v.manipulator,
                    detector=name,
                    explanation=explanation,
                )
            )
        return tuple(findings)
