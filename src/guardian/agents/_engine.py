"""The stateful half of screening: detectors resolved once, per-thread memory, events.

`GuardianMiddleware`, `guard()` and `GuardianCallbackHandler` all hold one
`Screener`. It turns the pure functions of `_screening` into a thread-safe
service: detectors are created lazily on first use (never at import), CPU-bound
detectors are serialised with a per-detector lock (tokenizers are not re-entrant),
async detectors run concurrently with a timeout, and every failure - a detector
that cannot be created, raises or hangs - becomes a `DetectorError` in the
Assessment instead of an exception in the user's chatbot.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from guardian.agents._screening import (
    Direction,
    MessageTurn,
    Speakers,
    failed,
    is_flagged,
    log,
    merge,
    refused,
    run_detector,
    summary,
    to_conversation,
)
from guardian.conversation import Conversation
from guardian.detectors.base import Detector
from guardian.findings import Assessment
from guardian.language import not_assessed_reason
from guardian.language import warm_up as warm_language

DetectorSpec = str | Detector
"""A registered detector name (`guardian detectors` lists them) or a Detector instance."""


def default_detector_names() -> list[str]:
    """The chatbot default, decided by the registry (`registry.default_names(purpose="chatbot")`)."""
    from guardian.detectors import registry

    return registry.default_names(purpose="chatbot")


def anonymous_id(turns: Sequence[MessageTurn]) -> str:
    """The conversation id of a thread the caller gave no `thread_id`: derived from its first
    message, so its input and output screening share one id while other unnamed threads get
    their own (all of them were once "conversation", and detectors' per-conversation state
    leaked between them)."""
    first = turns[0] if turns else None
    seed = f"{first.key}\x00{first.speaker}\x00{first.text}" if first is not None else ""
    return "conversation-" + hashlib.sha256(seed.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class GuardianEvent:
    """What `on_finding` callbacks receive: one screened turn that was flagged."""

    direction: Direction
    thread_id: str | None
    assessment: Assessment
    action: str
    text: str
    message_id: str | None = None
    time: float = field(default_factory=time.time)


FindingCallback = Callable[[GuardianEvent], Any]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of screening one turn."""

    assessment: Assessment
    flagged: bool
    notice: str | None


class DetectorPool:
    """Detectors created once, on first use; creation failures are remembered and reported."""

    def __init__(self, specs: Sequence[DetectorSpec] | None, *, timeout_s: float | None) -> None:
        self._specs = list(specs) if specs is not None else None
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._detectors: list[Detector] | None = None
        self._locks: dict[int, threading.Lock] = {}
        self._unavailable: list[tuple[str, str]] = []
        self._executor: ThreadPoolExecutor | None = None

    def detectors(self) -> list[Detector]:
        if self._detectors is None:
            with self._lock:
                if self._detectors is None:
                    self._detectors = self._create()
        return self._detectors

    def _create(self) -> list[Detector]:
        from guardian.detectors import registry

        specs: list[DetectorSpec] = list(self._specs) if self._specs is not None else list(default_detector_names())
        made: list[Detector] = []
        for spec in specs:
            if isinstance(spec, Detector):
                made.append(spec)
                continue
            try:
                # The built-in local model has an operating point for chatbot threads.
                made.append(registry.create(spec, kind="assistant") if spec == "local" else registry.create(spec))
            except Exception as exc:
                log.warning("guardian detector %s is unavailable: %s", spec, exc)
                self._unavailable.append((spec, str(exc)))
        if self._specs is None and not made and "keyphrases" not in specs:
            # The default was only a preference: fall back quietly (logged above) to the
            # key phrases, and report a failure only if nothing at all can run.
            self._unavailable.clear()
            try:
                made.append(registry.create("keyphrases"))
            except Exception as exc:
                self._unavailable.append(("keyphrases", str(exc)))
        warm_language()  # the identifier every screen consults first (a second to load)
        for d in made:
            self._locks[id(d)] = threading.Lock()
            # Load models here, once, outside any time limit: otherwise the first turns
            # would be recorded as timeouts while a model loads instead of being screened.
            try:
                d.warm_up()
            except Exception as exc:
                log.warning("guardian detector %s failed to warm up: %s", d.name, exc)
        return made

    def warm_up(self) -> None:
        """Create and load the detectors now (the first screen does it otherwise)."""
        self.detectors()

    def _native_async(self, detector: Detector) -> bool:
        return type(detector).aanalyze is not Detector.aanalyze

    def _locked(self, detector: Detector, window: Conversation) -> Assessment:
        if self._native_async(detector):  # network-bound (LLM): no need to serialise
            return run_detector(detector, window)
        with self._locks[id(detector)]:
            return run_detector(detector, window)

    def _missing(self, window: Conversation) -> list[Assessment]:
        return [failed(name, window, message, kind="unavailable") for name, message in self._unavailable]

    def assess(self, window: Conversation) -> Assessment:
        started = time.perf_counter()
        reason = not_assessed_reason(window)
        if reason is not None:
            return refused(reason, window, started=started)
        detectors = self.detectors()
        if self._timeout_s is None:
            parts = [self._locked(d, window) for d in detectors]
        else:
            parts = self._timed(detectors, window, self._timeout_s)
        return merge([*parts, *self._missing(window)], window, started=started)

    def _timed(self, detectors: Sequence[Detector], window: Conversation, timeout_s: float) -> list[Assessment]:
        """Run in worker threads and stop waiting at the deadline: a hung detector costs
        `timeout_s` and a recorded timeout, never a hung chatbot."""
        if self._executor is None:
            with self._lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(
                        max_workers=max(4, 2 * len(detectors)), thread_name_prefix="guardian-detector"
                    )
        futures = [self._executor.submit(self._locked, d, window) for d in detectors]
        deadline = time.monotonic() + timeout_s
        parts: list[Assessment] = []
        for detector, future in zip(detectors, futures, strict=True):
            try:
                parts.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                parts.append(failed(detector, window, f"no answer within {timeout_s:g} s", kind="timeout"))
        return parts

    async def aassess(self, window: Conversation) -> Assessment:
        started = time.perf_counter()
        reason = await asyncio.to_thread(not_assessed_reason, window)
        if reason is not None:
            return refused(reason, window, started=started)
        detectors = await asyncio.to_thread(self.detectors) if self._detectors is None else self._detectors
        parts = await asyncio.gather(*(self._arun(d, window) for d in detectors))
        return merge([*parts, *self._missing(window)], window, started=started)

    async def _arun(self, detector: Detector, window: Conversation) -> Assessment:
        try:
            if self._native_async(detector):
                coro = detector.aanalyze(window)
            else:
                coro = asyncio.to_thread(self._locked, detector, window)
            if self._timeout_s is None:
                return await coro
            return await asyncio.wait_for(coro, timeout=self._timeout_s)
        except TimeoutError:
            return failed(detector, window, f"no answer within {self._timeout_s:g} s", kind="timeout")
        except Exception as exc:
            return failed(detector, window, exc)


class ThreadMemory:
    """Turns seen per thread, for callers that send only the newest message each time.

    With a checkpointer the agent state already holds the whole thread and wins;
    without one, turns remembered under the same `thread_id` are put back in front
    so a message is still judged in the context of the thread. Bounded: the least
    recently used threads are forgotten first.
    """

    def __init__(self, *, max_threads: int, max_turns: int) -> None:
        self._threads: OrderedDict[str, list[MessageTurn]] = OrderedDict()
        self._lock = threading.Lock()
        self.max_threads = max_threads
        self.max_turns = max_turns

    def context(self, thread_id: str | None, turns: Sequence[MessageTurn]) -> list[MessageTurn]:
        """Remembered turns missing from `turns`, then `turns`."""
        if thread_id is None:
            return list(turns)
        with self._lock:
            remembered = list(self._threads.get(thread_id, ()))
        present = {t.key for t in turns}
        return [t for t in remembered if t.key not in present] + list(turns)

    def remember(self, thread_id: str | None, turns: Iterable[MessageTurn]) -> None:
        if thread_id is None:
            return
        with self._lock:
            known = self._threads.pop(thread_id, [])
            index = {t.key: i for i, t in enumerate(known)}
            for turn in turns:
                if turn.key in index:
                    known[index[turn.key]] = turn  # a replaced (blocked) reply
                else:
                    index[turn.key] = len(known)
                    known.append(turn)
            self._threads[thread_id] = known[-self.max_turns :]
            while len(self._threads) > self.max_threads:
                self._threads.popitem(last=False)

    def turns(self, thread_id: str) -> list[MessageTurn]:
        with self._lock:
            return list(self._threads.get(thread_id, ()))

    def threads(self) -> list[str]:
        with self._lock:
            return list(self._threads)


class Screener:
    """Screen the latest turn of a thread and tell the application about findings."""

    def __init__(
        self,
        *,
        detectors: Sequence[DetectorSpec] | None,
        threshold: float | None,
        window: int,
        speakers: Speakers,
        notice: str,
        on_finding: FindingCallback | Sequence[FindingCallback] | None,
        timeout_s: float | None,
        max_threads: int,
    ) -> None:
        self.pool = DetectorPool(detectors, timeout_s=timeout_s)
        self.threshold = threshold
        self.window = window
        self.speakers = speakers
        self.notice = notice
        if on_finding is None:
            self.callbacks: list[FindingCallback] = []
        elif callable(on_finding):
            self.callbacks = [on_finding]
        else:
            self.callbacks = list(on_finding)
        self.memory = ThreadMemory(max_threads=max_threads, max_turns=max(4 * window, 64))

    def _window(self, thread_id: str | None, turns: Sequence[MessageTurn]) -> Conversation:
        conversation = to_conversation(turns, conversation_id=thread_id or anonymous_id(turns))
        return conversation.window(self.window)

    def _verdict(self, assessment: Assessment, direction: Direction, speaker: str) -> Verdict:
        flagged = is_flagged(assessment, threshold=self.threshold, speaker=speaker)
        notice = self.notice.format(summary=summary(assessment, direction=direction)) if flagged else None
        return Verdict(assessment, flagged, notice)

    def screen(self, direction: Direction, thread_id: str | None, turns: Sequence[MessageTurn]) -> Verdict:
        """Assess the last of `turns` in the context of the turns before it."""
        return self._verdict(self.pool.assess(self._window(thread_id, turns)), direction, turns[-1].speaker)

    async def ascreen(self, direction: Direction, thread_id: str | None, turns: Sequence[MessageTurn]) -> Verdict:
        return self._verdict(await self.pool.aassess(self._window(thread_id, turns)), direction, turns[-1].speaker)

    def notify(self, event: GuardianEvent) -> None:
        """Call every `on_finding` callback; a failing callback is logged, never raised."""
        for callback in self.callbacks:
            try:
                result = callback(event)
                if asyncio.iscoroutine(result):
                    result.close()
                    log.warning("guardian on_finding callback %r is async; pass a plain function", callback)
            except Exception:
                log.exception("guardian on_finding callback %r failed", callback)


__all__ = [
    "DetectorPool",
    "DetectorSpec",
    "FindingCallback",
    "GuardianEvent",
    "Screener",
    "ThreadMemory",
    "Verdict",
    "default_detector_names",
]
