"""The one place detectors run over windows.

`guardian analyze`, the live monitor and the chatbot integration all ask the same
question - "what do these detectors say about the latest turn of this window?" -
and all need the same answers to the awkward parts, so they are decided here once:

- detectors read each turn normalised (`guardian.normalise`: NFKC, invisible characters
  removed, look-alike letters and leetspeak folded), so "Υоu'rе оvеrrеасting" or
  "y0u'r3 0v3rr34ct1ng" is read as what it says; every quote they return is mapped back
  onto the turn as written, so evidence stays verbatim on the user's own text. A window
  with nothing to normalise is passed on as the very same object;
- a window the models cannot read (not English: `guardian.language`, judged on the
  normalised text the detectors would read) is not given to the detectors; its
  assessment says why (`not_assessed`) and carries no verdict;
- each detector answers under its own time limit (`timeout_s`); a detector that
  raises, hangs or could not be created becomes a `DetectorError` in the assessment,
  never an exception, and the other detectors' verdicts stand;
- the per-detector assessments are merged (`Assessment.merge`);
- every quote is grounded: a finding whose evidence is not the window's own words at
  the turn and span it names is dropped, and the drop is recorded as an error;
- a finding belongs to the turn it quotes: only the latest turn's are the assessment's
  `findings`, earlier turns' are carried as `history` (never re-reported as new), and a
  flagged latest turn gets its one card (`guardian.cards`);
- many windows at once (`run_batch`) go to each detector's `analyze_batch` (one
  encoder pass for the local model); a batch that fails is retried window by window
  so one bad window costs only its own verdict.

The blocking (`run`) and async (`arun`) entry points differ only in how they wait for
the detectors (worker threads with a deadline, or `asyncio.wait_for`); calling one
detector, turning a failure into an error and finishing the window's assessment
(`_finish`) are shared.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from guardian.cards import card_for, split_by_turn
from guardian.conversation import Conversation, Evidence
from guardian.detectors.base import Detector
from guardian.findings import Assessment, DetectorError, Finding
from guardian.language import not_assessed_reason
from guardian.normalise import Normalised, normalise

_T = TypeVar("_T")

Outcome = Assessment | DetectorError
"""One detector's answer on one window: its assessment, or why there is none."""


@dataclass(frozen=True, slots=True)
class Run:
    """One window's merged assessment, and the failures the runner recorded in it.

    `failures` are the errors this runner added (a detector that raised, timed out or
    could not be created, a quote that was not in the transcript); errors a detector
    reported inside its own assessment are in `assessment.errors` only. The monitor
    announces `failures` as events; everyone else reads the assessment.
    """

    assessment: Assessment
    failures: tuple[DetectorError, ...] = ()


def describe(exc: BaseException) -> str:
    """`Type: first line of the message`: enough to act on, never a traceback or a page of text."""
    text = str(exc).strip()
    message = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def grounded(finding: Finding, window: Conversation) -> bool:
    """Whether every quote of `finding` is the window's own words at the turn and span it names."""
    for evidence in finding.evidence:
        try:
            text = window.turn(evidence.turn).text
        except KeyError:
            return False
        if text[evidence.start : evidence.end] != evidence.quote:
            return False
    return True


@dataclass(frozen=True, slots=True)
class DetectorView:
    """What the detectors read of one window, and how to map their quotes back.

    `maps` holds only the turns whose text normalisation changed (by conversation index);
    with none, `window` is the caller's own window object.
    """

    window: Conversation
    maps: dict[int, Normalised]

    def restore(self, outcome: Outcome) -> Outcome:
        """`outcome` with every quote moved from the normalised text back onto the original."""
        if not self.maps or isinstance(outcome, DetectorError):
            return outcome
        findings = tuple(self._finding(f) for f in outcome.findings)
        history = tuple(self._finding(f) for f in outcome.history)
        card = outcome.card
        if card is not None and card.quote is not None:
            card = card.model_copy(update={"quote": self._evidence(card.quote)})
        return outcome.model_copy(update={"findings": findings, "history": history, "card": card})

    def _finding(self, finding: Finding) -> Finding:
        evidence = tuple(self._evidence(e) for e in finding.evidence)
        if all(new is old for new, old in zip(evidence, finding.evidence, strict=True)):
            return finding
        return finding.model_copy(update={"evidence": evidence})

    def _evidence(self, evidence: Evidence) -> Evidence:
        mapping = self.maps.get(evidence.turn)
        # A quote that is not the normalised text at its span is not mapped: grounding, on the
        # original window, then keeps it if it is the user's own words there, and drops it if not.
        if mapping is None or mapping.text[evidence.start : evidence.end] != evidence.quote:
            return evidence
        start, end = mapping.original_span(evidence.start, evidence.end)
        if end <= start:
            return evidence
        return Evidence(turn=evidence.turn, quote=mapping.original[start:end], start=start, end=end)


def detector_view(window: Conversation) -> DetectorView:
    """The window as detectors read it: each turn's text normalised (`guardian.normalise`).

    Turns with nothing to normalise are the same objects; a window with none is itself.
    """
    maps: dict[int, Normalised] = {}
    turns = []
    for turn in window.turns:
        mapping = normalise(turn.text)
        if mapping.changed:
            maps[turn.index] = mapping
            turn = turn.model_copy(update={"text": mapping.text})
        turns.append(turn)
    if not maps:
        return DetectorView(window, maps)
    return DetectorView(window.model_copy(update={"turns": tuple(turns)}), maps)


def native_async(detector: Detector) -> bool:
    """Whether the detector has its own `aanalyze` (network-bound, e.g. an LLM) rather than the
    default that runs `analyze` in a thread."""
    return type(detector).aanalyze is not Detector.aanalyze


def _without_absorbed(detectors: Sequence[Detector]) -> list[Detector]:
    """The detectors less those another one of them runs as a part (`Detector.absorb`)."""
    kept: list[Detector] = []
    for d in detectors:
        if not any(other is not d and other.absorb(d) for other in detectors):
            kept.append(d)
    return kept


class Runner:
    """Runs a fixed list of detectors over windows.

    Options:
        timeout_s: each detector's time limit per window (None: wait as long as it takes,
            and run the detectors one after another in the caller's thread). In a batch a
            detector gets `timeout_s` per window of the batch.
        serialize: let only one thread at a time into each detector that is not natively
            async (tokenizers and some models are not re-entrant). The chatbot integration
            serialises; the monitor does not (its turns are ordered per conversation).
        unavailable: detectors that could not be created; every assessment records them.
        clock: where latency is read from (tests inject one).
    """

    def __init__(
        self,
        detectors: Sequence[Detector],
        *,
        timeout_s: float | None = None,
        serialize: bool = False,
        unavailable: Sequence[DetectorError] = (),
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.detectors = _without_absorbed(detectors)
        self.timeout_s = timeout_s
        self.serialize = serialize
        self.unavailable = tuple(unavailable)
        self._clock = clock
        self._locks = {id(d): threading.Lock() for d in self.detectors}
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()

    # --- entry points ---------------------------------------------------------------------

    def assess(self, window: Conversation) -> Assessment:
        """The merged assessment of the latest turn of `window` (blocking)."""
        return self.run(window).assessment

    async def aassess(self, window: Conversation) -> Assessment:
        """The merged assessment of the latest turn of `window` (async)."""
        return (await self.arun(window)).assessment

    def assess_batch(self, windows: Sequence[Conversation]) -> list[Assessment]:
        """One merged assessment per window, the detectors batched over the windows."""
        return [run.assessment for run in self.run_batch(windows)]

    def run(self, window: Conversation) -> Run:
        began = self._clock()
        view = detector_view(window)
        reason = not_assessed_reason(view.window)
        if reason is not None:
            return _refused(window, reason, latency_ms=(self._clock() - began) * 1000)
        if self.timeout_s is None:
            outcomes = [self._call(d, view.window) for d in self.detectors]
        else:
            pool = self._pool()
            futures = [pool.submit(self._call, d, view.window) for d in self.detectors]
            deadline = time.monotonic() + self.timeout_s
            outcomes = []
            for detector, future in zip(self.detectors, futures, strict=True):
                try:
                    outcomes.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
                except FutureTimeout:
                    outcomes.append(self._timeout(detector))
        restored = [view.restore(o) for o in outcomes]
        return self._finish(window, restored, latency_ms=(self._clock() - began) * 1000)

    async def arun(self, window: Conversation) -> Run:
        began = self._clock()
        view = detector_view(window)
        reason = await asyncio.to_thread(not_assessed_reason, view.window)
        if reason is not None:
            return _refused(window, reason, latency_ms=(self._clock() - began) * 1000)
        outcomes = await asyncio.gather(*(self._acall(d, view.window) for d in self.detectors))
        restored = [view.restore(o) for o in outcomes]
        return self._finish(window, restored, latency_ms=(self._clock() - began) * 1000)

    def run_batch(self, windows: Sequence[Conversation]) -> list[Run]:
        """Each window's run, the detectors one after another, each over all windows at once.

        Windows may come from different conversations (evaluation batches across them);
        each conversation's windows must be in turn order, as detectors that remember a
        conversation (the intent model) expect. A window's latency is its share of the
        batch's time.
        """
        read = [detector_view(window) for window in windows]
        reasons = [not_assessed_reason(view.window) for view in read]
        live = [n for n, reason in enumerate(reasons) if reason is None]
        views = [read[n].window for n in live]
        outcomes: list[list[Outcome]] = [[] for _ in views]
        latency = [0.0] * len(views)
        for detector in self.detectors if views else ():
            started = self._clock()
            results = self._batch(detector, views)
            share = (self._clock() - started) * 1000 / len(views)
            for row, result in enumerate(results):
                outcomes[row].append(read[live[row]].restore(result))
                latency[row] += share
        runs: dict[int, Run] = {
            n: self._finish(windows[n], outcomes[row], latency_ms=latency[row]) for row, n in enumerate(live)
        }
        return [
            runs[n] if reason is None else _refused(window, reason, latency_ms=0.0)
            for n, (window, reason) in enumerate(zip(windows, reasons, strict=True))
        ]

    def close(self) -> None:
        """Stop the worker threads (a detector still running is left to finish on its own)."""
        with self._executor_lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = None

    # --- one detector -----------------------------------------------------------------------

    def _call(self, detector: Detector, window: Conversation) -> Outcome:
        """`detector.analyze(window)`; a raise becomes a DetectorError."""
        try:
            return self._exclusive(detector, partial(detector.analyze, window))
        except Exception as exc:  # a detector bug must not lose the other detectors' verdicts
            return DetectorError(detector=detector.name, kind="error", message=describe(exc))

    async def _acall(self, detector: Detector, window: Conversation) -> Outcome:
        pending: Awaitable[Outcome]
        try:
            if native_async(detector):
                pending = detector.aanalyze(window)
            else:
                pending = asyncio.to_thread(self._call, detector, window)
            if self.timeout_s is None:
                return await pending
            return await asyncio.wait_for(pending, timeout=self.timeout_s)
        except TimeoutError:
            return self._timeout(detector)
        except Exception as exc:
            return DetectorError(detector=detector.name, kind="error", message=describe(exc))

    def _batch(self, detector: Detector, views: Sequence[Conversation]) -> list[Outcome]:
        """The detector's outcomes on `views`; when the batch fails, window by window."""
        budget = None if self.timeout_s is None else self.timeout_s * len(views)
        try:
            results = self._bounded(partial(self._exclusive, detector, partial(detector.analyze_batch, views)), budget)
            if len(results) == len(views):
                return list(results)
        except FutureTimeout:
            return [self._timeout(detector) for _ in views]
        except Exception:  # isolated below, window by window
            pass
        out: list[Outcome] = []
        for view in views:
            try:
                out.append(self._bounded(partial(self._call, detector, view), self.timeout_s))
            except FutureTimeout:
                out.append(self._timeout(detector))
        return out

    def _exclusive(self, detector: Detector, work: Callable[[], _T]) -> _T:
        if not self.serialize or native_async(detector):
            return work()
        lock = self._locks.get(id(detector))
        if lock is None:  # a detector added to `detectors` after construction
            lock = self._locks.setdefault(id(detector), threading.Lock())
        with lock:
            return work()

    def _bounded(self, work: Callable[[], _T], budget: float | None) -> _T:
        """`work()`, in a worker thread when it has a time limit (raises FutureTimeout past it)."""
        if budget is None:
            return work()
        return self._pool().submit(work).result(timeout=budget)

    def _timeout(self, detector: Detector) -> DetectorError:
        return DetectorError(detector=detector.name, kind="timeout", message=f"no answer within {self.timeout_s:g} s")

    def _pool(self) -> ThreadPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=max(4, 2 * len(self.detectors)), thread_name_prefix="guardian-detector"
                )
            return self._executor

    # --- one window ---------------------------------------------------------------------------

    def _finish(self, window: Conversation, outcomes: Sequence[Outcome], *, latency_ms: float) -> Run:
        """Merge the outcomes, record failures, drop findings that are not grounded in `window`.

        Errors and detector names keep the detectors' order; the detectors that could not be
        created come after them, then the dropped quotes.
        """
        parts: list[Assessment] = []
        failures: list[DetectorError] = []
        errors: list[DetectorError] = []
        names: list[str] = []
        for outcome in outcomes:
            if isinstance(outcome, DetectorError):
                failures.append(outcome)
                errors.append(outcome)
                names.append(outcome.detector)
            else:
                parts.append(outcome)
                errors.extend(outcome.errors)
                names.extend(outcome.detectors)
        for missing in self.unavailable:
            failures.append(missing)
            errors.append(missing)
            names.append(missing.detector)
        findings: list[Finding] = []
        for finding in (f for part in parts for f in part.findings):
            if grounded(finding, window):
                findings.append(finding)
                continue
            dropped = DetectorError(
                detector=finding.detector,
                kind="error",
                message=f"dropped a {finding.label} finding whose quote is not in the transcript",
            )
            failures.append(dropped)
            errors.append(dropped)
            names.append(finding.detector)
        latest = _latest(window)
        merged = Assessment.merge(parts, conversation_id=window.id, turn=latest, latency_ms=round(latency_ms, 3))
        # A finding belongs to the turn it quotes: the latest turn's are new, earlier turns' are history.
        own, earlier = split_by_turn(tuple(findings), turn=latest)
        merged = merged.model_copy(
            update={"findings": own, "history": (*merged.history, *earlier), "errors": tuple(errors),
                    "detectors": tuple(dict.fromkeys(names))}
        )
        last = window.last
        if last is not None:
            merged = merged.model_copy(update={"card": card_for(merged, last)})
        return Run(merged, tuple(failures))


def _latest(window: Conversation) -> int:
    last = window.last
    return last.index if last is not None else -1


def _refused(window: Conversation, reason: str, *, latency_ms: float) -> Run:
    return Run(
        Assessment.refused(reason, conversation_id=window.id, turn=_latest(window), latency_ms=round(latency_ms, 3))
    )


__all__ = ["DetectorView", "Outcome", "Run", "Runner", "describe", "detector_view", "grounded", "native_async"]
