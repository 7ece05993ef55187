"""The cascade: the local model screens every turn, the LLM is asked only where it helps.

Why: the local model answers in milliseconds for free; an LLM costs seconds and
money. The LLM is consulted when the local probability falls in the uncertain
band (`llm.band`), or (with `llm.confirm_flagged`) when the local model flags the
turn, and only while the conversation's budget (`llm.max_calls` requests,
`llm.max_tokens` tokens) lasts. When the LLM answers, its vote decides the turn
(it is the second opinion asked precisely because the screen was unsure); when it
fails after its retries, or is not configured, or the budget is spent, the local
verdict stands and the Assessment carries the reason as a DetectorError.

If the `local` detector is not installed (or its model is missing) the cascade
degrades to the LLM alone, within the same budget.

With `llm.intents` on, intents follow the same policy: the local intent model (the
`intent` detector, found through the registry like `local`) reads every turn, and the
LLM intent agent is asked only about a latest turn whose intent the local model
withholds (its abstention threshold), within the same budget. Where the local model is
sure it is right 86 % of the time; where it withholds, 56 % (held-out everyday turns,
docs/intent.md "With an LLM endpoint (cascade)"), which is where an LLM that reads the labelling guidelines helps.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

from cachetools import LRUCache

from guardian.config import LLMSettings
from guardian.conversation import Conversation
from guardian.detectors.base import Detector
from guardian.detectors.llm.client import Usage
from guardian.detectors.llm.manipulation import LLMDetector, Opinion
from guardian.findings import Assessment, DetectorError, Intent

MAX_TRACKED_CONVERSATIONS = 4096

log = logging.getLogger(__name__)


class CascadeDetector(Detector):
    """Local screen on every turn; LLM second opinion in the uncertain band, within budget."""

    name: ClassVar[str] = "cascade"
    description: ClassVar[str] = "local model on every turn, LLM second opinion on uncertain/flagged turns"

    def __init__(
        self,
        *,
        local: Detector | None = None,
        llm: LLMDetector | None = None,
        settings: LLMSettings | None = None,
        local_name: str = "local",
        intent: Detector | None = None,
        intent_name: str = "intent",
    ) -> None:
        from guardian.config import settings as load

        self.cfg = settings or (llm.cfg if llm is not None else load().llm)
        self._llm = llm
        self._local = local
        self._local_name = local_name
        self._local_checked = local is not None
        self.local_missing: str | None = None
        self._intent = intent
        self._intent_name = intent_name
        self._intent_checked = intent is not None
        self.intent_missing: str | None = None
        # A conversation's spend, the least recently screened conversation forgotten first.
        self._budgets: LRUCache[str, Usage] = LRUCache(maxsize=MAX_TRACKED_CONVERSATIONS)
        self._lock = threading.RLock()
        self.usage = Usage()  # everything spent by this detector, for eval reports
        self._pool: ThreadPoolExecutor | None = None  # reads the turn's intent beside the screen (llm.intents)
        self.consulted = 0

    # -- parts ------------------------------------------------------------------------------

    @property
    def llm(self) -> LLMDetector:
        if self._llm is None:
            self._llm = LLMDetector(settings=self.cfg)
        return self._llm

    def local(self) -> Detector | None:
        if not self._local_checked:
            self._local_checked = True
            from guardian.detectors import registry

            try:
                self._local = registry.create(self._local_name)
            except Exception as exc:  # not installed, or its model missing: degrade, do not fail
                self.local_missing = f"local detector unavailable ({exc}); the LLM screens alone"
        return self._local

    def intent(self) -> Detector | None:
        """The local intent model, run by the cascade only when `llm.intents` is on."""
        if not self.cfg.intents:
            return None
        if not self._intent_checked:
            self._intent_checked = True
            from guardian.detectors import registry

            try:
                self._intent = registry.create(self._intent_name)
            except Exception as exc:  # not installed, or its model missing: the LLM reads every turn's intent
                self.intent_missing = f"local intent detector unavailable ({exc}); the LLM intent agent reads every turn"
        return self._intent

    def absorb(self, other: Detector) -> bool:
        """Take over a `local` (or, with `llm.intents`, an `intent`) detector named beside the cascade,
        which runs it anyway: one pass of each model per turn, one intent per turn, and the caller's
        instance (e.g. the chatbot's local model with its assistant operating point) is the one used."""
        with self._lock:
            if other.name == self._local_name and (self._local is None or self._local is other):
                self._local, self._local_checked, self.local_missing = other, True, None
                return True
            if self.cfg.intents and other.name == self._intent_name and (self._intent is None or self._intent is other):
                self._intent, self._intent_checked, self.intent_missing = other, True, None
                return True
        return False

    def warm_up(self) -> None:
        for part in (self.local(), self.intent()):
            if part is not None:
                part.warm_up()

    def budget(self, conversation_id: str) -> Usage:
        with self._lock:
            used = self._budgets.get(conversation_id) or Usage()
            self._budgets[conversation_id] = used
            return used

    # -- policy -----------------------------------------------------------------------------

    def wants_llm(self, screen: Assessment | None) -> bool:
        if screen is None or screen.probability is None:
            return True
        low, high = self.cfg.band
        if low <= screen.probability <= high:
            return True
        return self.cfg.confirm_flagged and screen.decision

    def samples_allowed(self, used: Usage, *, calls_per_sample: int = 1, stands: str = "verdict") -> tuple[int, str | None]:
        """How many samples the budget still allows (0 with the reason when it is spent); the intent
        agent spends two calls a sample (reason, then select)."""
        samples = (self.cfg.max_calls - used.calls) // calls_per_sample
        if samples <= 0 or used.tokens >= self.cfg.max_tokens:
            return 0, (
                f"LLM budget for this conversation spent ({used.calls}/{self.cfg.max_calls} calls, "
                f"{used.tokens}/{self.cfg.max_tokens} tokens); the local {stands} stands"
            )
        return min(self.cfg.samples, samples), None

    # -- Detector ---------------------------------------------------------------------------

    def _screen(self, window: Conversation) -> tuple[Assessment | None, list[DetectorError]]:
        local = self.local()
        if local is None:
            return None, [DetectorError(detector=self.name, kind="unavailable", message=self.local_missing or "")]
        try:
            screen = local.analyze(window)
        except Exception as exc:
            return None, [DetectorError(detector=self.name, kind="error", message=f"local detector failed: {exc}")]
        if screen.probability is None and any(e.kind == "unavailable" for e in screen.errors):
            return None, list(screen.errors)
        return screen, []

    def _plan(self, window: Conversation, screen: Assessment | None) -> tuple[int, DetectorError | None]:
        if not self.wants_llm(screen):
            return 0, None
        if self.llm.unavailable is not None:
            return 0, DetectorError(detector=self.llm.name, kind="unavailable", message=self.llm.unavailable)
        samples, why = self.samples_allowed(self.budget(window.id))
        if samples == 0:
            return 0, DetectorError(detector=self.llm.name, kind="unavailable", message=why or "")
        return samples, None

    def _workers(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="guardian-cascade-intent")
            return self._pool

    def analyze(self, window: Conversation) -> Assessment:
        started = time.perf_counter()
        if window.last is None:
            return self.empty(window)
        # The intent model reads the turn while the manipulation screen does (they share only the
        # encoder, which has its own lock); the LLM parts stay in order, so the budget is spent as before.
        reading = self._workers().submit(self._local_intent, window) if self.cfg.intents else None
        screen, errors = self._screen(window)
        samples, skip = self._plan(window, screen)
        opinion = self.llm.consult(window, samples=samples) if samples else None
        combined = self._combine(window, screen, errors, skip, opinion, started)
        if reading is None:
            return combined
        return self._with_intents(window, combined, *self._agent_intent(window, *reading.result()), started)

    async def aanalyze(self, window: Conversation) -> Assessment:
        started = time.perf_counter()
        if window.last is None:
            return self.empty(window)
        reading = asyncio.ensure_future(asyncio.to_thread(self._local_intent, window)) if self.cfg.intents else None
        screen, errors = await asyncio.to_thread(self._screen, window)
        samples, skip = self._plan(window, screen)
        opinion = await self.llm.aconsult(window, samples=samples) if samples else None
        combined = self._combine(window, screen, errors, skip, opinion, started)
        if reading is None:
            return combined
        second = await asyncio.to_thread(self._agent_intent, window, *await reading)
        return self._with_intents(window, combined, *second, started)

    # -- intents (llm.intents) --------------------------------------------------------------

    def _local_intent(self, window: Conversation) -> tuple[Assessment | None, list[DetectorError]]:
        """The local intent model's assessment of the latest turn (None when it is missing or failed, said why)."""
        detector = self.intent()
        if detector is None:
            return None, [DetectorError(detector=self.name, kind="unavailable", message=self.intent_missing or "")]
        try:
            return detector.analyze(window), []
        except Exception as exc:
            return None, [DetectorError(detector=self.name, kind="error", message=f"local intent detector failed: {exc}")]

    def _agent_intent(self, window: Conversation, local: Assessment | None,
                      errors: list[DetectorError]) -> tuple[Assessment | None, Intent | None, list[DetectorError]]:
        """(the local intent model's assessment, the LLM agent's intent where the local one is
        withheld, what failed): blocking, run in a worker thread by `aanalyze`."""
        errors = list(errors)
        last = window.last
        assert last is not None
        if local is not None and any(i.turn == last.index and not i.abstained for i in local.intents):
            return local, None, errors  # the local model is sure: no call
        if self.llm.unavailable is not None:
            return local, None, [*errors, DetectorError(detector=self.llm.name, kind="unavailable", message=self.llm.unavailable)]
        samples, why = self.samples_allowed(self.budget(window.id), calls_per_sample=2, stands="intent")
        if samples == 0:
            return local, None, [*errors, DetectorError(detector=self.llm.name, kind="unavailable", message=why or "")]
        from guardian.detectors.llm.intent import IntentAgent

        agent = IntentAgent(self.llm.client, samples=samples, detector=self.name)
        intent, failure = agent.analyze(window)
        with self._lock:
            self.budget(window.id).add(agent.usage)
            self.usage.add(agent.usage)
        if failure is not None:
            errors.append(DetectorError(detector=self.llm.name, kind="timeout" if failure.kind == "timeout" else "error",
                                        message=f"intent agent: {failure}"))
        return local, intent, errors

    def _with_intents(self, window: Conversation, combined: Assessment, local: Assessment | None,
                      second: Intent | None, errors: list[DetectorError], started: float) -> Assessment:
        """The cascade's assessment with the local intents and pressure patterns, and the LLM's
        intent for a turn the local model withheld (the withheld one stays, marked abstained,
        for the record and the patterns; renderers show the LLM's)."""
        base = self._relabel(local, source="intent") if local is not None else None
        intents = (*combined.intents, *(base.intents if base is not None else ()), *((second,) if second else ()))
        return combined.model_copy(update={
            "intents": intents,
            "findings": (*combined.findings, *(base.findings if base is not None else ())),
            "errors": (*combined.errors, *(base.errors if base is not None else ()), *errors),
            "latency_ms": (time.perf_counter() - started) * 1000,
        })

    def _combine(
        self,
        window: Conversation,
        screen: Assessment | None,
        errors: list[DetectorError],
        skip: DetectorError | None,
        opinion: Opinion | None,
        started: float,
    ) -> Assessment:
        last = window.last
        assert last is not None
        if skip is not None:
            errors.append(skip)
        base = self._relabel(screen) if screen is not None else self.empty(window)
        if opinion is not None:
            with self._lock:
                self.budget(window.id).add(opinion.usage)
                self.usage.add(opinion.usage)
                self.consulted += 1
        second = self.llm.assessment(window, opinion, detector=self.name) if opinion is not None else None
        if second is not None:
            errors.extend(second.errors)
        latency = (time.perf_counter() - started) * 1000
        if second is None or second.probability is None:  # not asked, or failed: the screen stands
            return base.model_copy(update={"errors": (*base.errors, *errors), "latency_ms": latency})
        if base.decision and not second.decision:
            # The LLM reads the transcript, so a turn can tell it what to answer; a local flag is lowered
            # only under the stated policy, and the record says so either way.
            if not self.cfg.may_clear_flags:
                log.warning("cascade: the LLM called turn %d of %s not manipulative; the local flag (p %.2f) stands "
                            "(llm.may_clear_flags is off)", last.index, window.id, base.probability or 0.0)
                return base.model_copy(update={
                    "findings": (*base.findings, *second.findings),
                    "errors": (*base.errors, *errors),
                    "latency_ms": latency,
                })
            log.warning("cascade: the LLM cleared turn %d of %s that the local model flagged (p %.2f; "
                        "llm.may_clear_flags is on)", last.index, window.id, base.probability or 0.0)
        techniques = dict(second.techniques)
        vulnerabilities = dict(second.vulnerabilities)
        findings = second.findings
        probability = second.probability
        if second.decision:  # both readings of a manipulative turn are kept
            for t, s in base.techniques.items():
                techniques[t] = max(s, techniques.get(t, 0.0))
            for v, s in base.vulnerabilities.items():
                vulnerabilities[v] = max(s, vulnerabilities.get(v, 0.0))
            findings = (*base.findings, *second.findings)
            if base.decision and not self.cfg.may_clear_flags:  # the LLM may raise a flagged score, never lower it
                probability = max(probability, base.probability or 0.0)
        return Assessment(
            conversation_id=window.id,
            turn=last.index,
            probability=probability,
            decision=second.decision,
            threshold=second.threshold,
            techniques=techniques if second.decision else {},
            vulnerabilities=vulnerabilities if second.decision else {},
            findings=findings,
            intents=base.intents,
            manipulator=second.manipulator or (base.manipulator if second.decision else None),
            detectors=(self.name,),
            errors=(*base.errors, *errors),
            latency_ms=latency,
        )

    def _relabel(self, screen: Assessment, *, source: str = "local") -> Assessment:
        """A local assessment as the cascade's own (findings name the cascade, say where from)."""
        findings = tuple(
            f.model_copy(update={"detector": self.name, "explanation": f"{source}: {f.explanation}".rstrip(": ")})
            for f in screen.findings
        )
        intents = tuple(i.model_copy(update={"detector": self.name}) for i in screen.intents)
        return screen.model_copy(update={"findings": findings, "intents": intents, "detectors": (self.name,)})
