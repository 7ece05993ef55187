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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cachetools import LRUCache

from guardian.agents._screening import (
    Direction,
    MessageTurn,
    Speakers,
    is_flagged,
    log,
    summary,
    to_conversation,
)
from guardian.agents.types import FindingCallback, GuardianEvent
from guardian.conversation import Conversation
from guardian.detectors.base import Detector
from guardian.findings import Assessment, DetectorError
from guardian.language import warm_up as warm_language
from guardian.runner import Run, Runner

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
class Verdict:
    """The outcome of screening one turn."""

    assessment: Assessment
    flagged: bool
    notice: str | None


class DetectorPool:
    """Detectors created once, on first use, and run by one `guardian.runner.Runner`.

    Creation failures are remembered and reported in every assessment (kind
    "unavailable"); CPU-bound detectors are serialised (`serialize=True`: tokenizers are
    not re-entrant); every failure is logged as a warning for the application's logs.
    """

    def __init__(self, specs: Sequence[DetectorSpec] | None, *, timeout_s: float | None,
                 assistant: str | None = None) -> None:
        self._specs = list(specs) if specs is not None else None
        self._timeout_s = timeout_s
        #: The assistant's speaker name: the local model reads its fine-tuned reply head on those turns only.
        self._assistant = assistant
        self._lock = threading.Lock()
        self._runner: Runner | None = None

    def detectors(self) -> list[Detector]:
        return self._ready().detectors

    def _ready(self) -> Runner:
        if self._runner is None:
            with self._lock:
                if self._runner is None:
                    made, unavailable = self._create()
                    self._runner = Runner(made, timeout_s=self._timeout_s, serialize=True, unavailable=unavailable)
        return self._runner

    def _create(self) -> tuple[list[Detector], list[DetectorError]]:
        from guardian.detectors import registry

        specs: list[DetectorSpec] = list(self._specs) if self._specs is not None else list(default_detector_names())
        made: list[Detector] = []
        unavailable: list[DetectorError] = []
        for spec in specs:
            if isinstance(spec, Detector):
                made.append(spec)
                continue
            try:
                # The built-in local model has an operating point for chatbot threads, and a reply head
                # that reads the assistant's turns.
                made.append(registry.create(spec, kind="assistant", replies_by=self._assistant) if spec == "local"
                            else registry.create(spec))
            except Exception as exc:
                log.warning("guardian detector %s is unavailable: %s", spec, exc)
                unavailable.append(DetectorError(detector=spec, kind="unavailable", message=str(exc)))
        if self._specs is None and not made and "keyphrases" not in specs:
            # The default was only a preference: fall back quietly (logged above) to the
            # key phrases, and report a failure only if nothing at all can run.
            unavailable.clear()
            try:
                made.append(registry.create("keyphrases"))
            except Exception as exc:
                unavailable.append(DetectorError(detector="keyphrases", kind="unavailable", message=str(exc)))
        warm_language()  # the identifier every screen consults first (a second to load)
        for d in made:
            # Load models here, once, outside any time limit: otherwise the first turns
            # would be recorded as timeouts while a model loads instead of being screened.
            try:
                d.warm_up()
            except Exception as exc:
                log.warning("guardian detector %s failed to warm up: %s", d.name, exc)
        return made, unavailable

    def warm_up(self) -> None:
        """Create and load the detectors now (the first screen does it otherwise)."""
        self._ready()

    def assess(self, window: Conversation) -> Assessment:
        return _logged(self._ready().run(window), window)

    async def aassess(self, window: Conversation) -> Assessment:
        runner = self._runner if self._runner is not None else await asyncio.to_thread(self._ready)
        return _logged(await runner.arun(window), window)


def _logged(run: Run, window: Conversation) -> Assessment:
    """The run's assessment, each failure logged: the chatbot goes on, its operators should know."""
    for failure in run.failures:
        log.warning("guardian detector %s failed on %s: %s", failure.detector, window.id, failure.message)
    return run.assessment


class ThreadMemory:
    """Turns seen per thread, for callers that send only the newest message each time.

    With a checkpointer the agent state already holds the whole thread and wins;
    without one, turns remembered under the same `thread_id` are put back in front
    so a message is still judged in the context of the thread. Bounded: the least
    recently used threads are forgotten first (a `cachetools.LRUCache` of `max_threads`;
    0 remembers none).
    """

    def __init__(self, *, max_threads: int, max_turns: int) -> None:
        self._threads: LRUCache[str, list[MessageTurn]] = LRUCache(maxsize=max(max_threads, 1))
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
        if thread_id is None or self.max_threads < 1:
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
            self._threads[thread_id] = known[-self.max_turns :]  # the most recent; the least recent may go

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
        self.pool = DetectorPool(detectors, timeout_s=timeout_s, assistant=speakers.assistant)
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
