"""The live monitor: conversation state, detectors after every turn, events to subscribers.

Every sink (the TUI, `guardian watch --headless`, the session log, a chatbot
middleware) sees the same stream of events, so the monitor is the only place
that decides ordering, de-duplication and the conversation's risk:

- turns of one conversation are assessed strictly in order; a turn's `TurnAdded`
  is emitted at once (so a UI can show it before any detector answers), its
  errors, new findings and `AssessmentReady` follow when the detectors are done;
- detectors run concurrently on the window (the last `window` turns), each under
  its own timeout, by the one runner (`guardian.runner`, shared with `analyze` and the
  chatbot integration); a failing or slow detector, or a quote that is not in the
  transcript, becomes an `ErrorRaised` event and the others' verdicts stand;
- a window the models cannot read (not English: `guardian.language`) is not given
  to the detectors; its assessment says why (`not_assessed`) and carries no verdict;
- a finding belongs to the turn it quotes (the runner carries earlier turns' findings as
  the assessment's `history`); one already alerted in this conversation (same label, same
  quoted span) is not raised again;
- `submit` puts turns on a bounded per-conversation queue and waits when it is
  full (back-pressure): a turn is never dropped silently.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from guardian.conversation import Conversation, Turn
from guardian.detectors.base import Detector
from guardian.events import AssessmentReady, ErrorRaised, Event, FindingRaised, TurnAdded
from guardian.findings import Assessment, Finding
from guardian.runner import Run, Runner, describe

log = logging.getLogger(__name__)

Subscriber = Callable[[Event], None]
FindingKey = tuple[Any, ...]

#: How much of the previous risk survives one clean turn. A flagged turn keeps the
#: conversation at risk for a few turns instead of vanishing at the next "ok".
RISK_DECAY = 0.8


def finding_key(finding: Finding, *, turn: int) -> FindingKey:
    """What makes two findings the same alert: the label and the quoted spans.

    A finding without evidence can only be told apart by the turn it was raised on.
    """
    if finding.evidence:
        return finding.key
    return (finding.label, ("turn", turn))


def turn_score(assessment: Assessment) -> float:
    """One turn's contribution to risk: the manipulation probability, else the strongest finding."""
    if assessment.probability is not None:
        return assessment.probability
    return max((f.score for f in assessment.findings), default=0.0)


def risk_series(assessments: Iterable[Assessment], *, decay: float = RISK_DECAY) -> list[float]:
    """The conversation's risk after each assessment, as the live monitor keeps it (`analyze` and
    its summary use the same, so a transcript and its live replay end at the same risk)."""
    risk, out = 0.0, []
    for assessment in assessments:
        risk = max(turn_score(assessment), decay * risk)
        out.append(risk)
    return out


@dataclass
class ConversationState:
    """Everything the monitor remembers about one conversation.

    Turns are kept in a list (turn i at position i), so recording a turn and cutting its
    window cost O(1) and O(window): appending to the immutable `Conversation` copied every
    earlier turn, which made a long conversation quadratic.
    """

    id: str
    turns: list[Turn] = field(default_factory=list)
    seen: set[FindingKey] = field(default_factory=set)
    risk: float = 0.0
    risk_history: list[float] = field(default_factory=list)
    assessments: dict[int, Assessment] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    sync_order: threading.Lock = field(default_factory=threading.Lock, repr=False)
    async_order: asyncio.Lock | None = field(default=None, repr=False)
    queue: asyncio.Queue[int] | None = field(default=None, repr=False)
    worker: asyncio.Task[None] | None = field(default=None, repr=False)
    _whole: Conversation | None = field(default=None, repr=False)

    @property
    def conversation(self) -> Conversation:
        """The whole conversation so far (built again only after turns were added)."""
        whole = self._whole
        if whole is None or len(whole.turns) != len(self.turns):
            whole = Conversation(id=self.id, turns=tuple(self.turns))
            self._whole = whole
        return whole

    def window(self, index: int, size: int) -> Conversation:
        """The `size` turns that end with turn `index`, in O(size)."""
        end = index + 1
        return Conversation(id=self.id, turns=tuple(self.turns[max(0, end - size) : end]))

    def unassessed(self) -> list[int]:
        return [t.index for t in self.turns if t.index not in self.assessments]


class Monitor:
    """Holds many conversations (keyed by id) and runs the detectors after each turn."""

    def __init__(
        self,
        detectors: Sequence[Detector],
        *,
        window: int | None = None,
        timeout_s: float | None = None,
        queue_size: int | None = None,
        max_concurrency: int = 64,
        clock: Callable[[], float] = time.perf_counter,
        risk_decay: float = RISK_DECAY,
    ) -> None:
        if window is None or timeout_s is None or queue_size is None:
            from guardian.config import settings

            section = settings().monitor
            window = section.window if window is None else window
            timeout_s = section.detector_timeout_s if timeout_s is None else timeout_s
            queue_size = section.queue_size if queue_size is None else queue_size
        self.detectors = list(detectors)
        self.window = window
        self.timeout_s = timeout_s
        self.queue_size = queue_size
        self.max_concurrency = max_concurrency
        self.risk_decay = risk_decay
        self._clock = clock
        self._states: dict[str, ConversationState] = {}
        self._states_lock = threading.Lock()
        self._subscribers: list[Subscriber] = []
        self._semaphore: asyncio.Semaphore | None = None
        self._runner = Runner(self.detectors, timeout_s=timeout_s, clock=clock)

    # --- subscribers ------------------------------------------------------------------------

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call `subscriber(event)` for every event; returns the function that unsubscribes."""
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def publish(self, event: Event) -> None:
        """Send an event that did not come from a detector (e.g. an unreadable input line)."""
        self._emit(event)

    def _emit(self, event: Event) -> None:
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:  # a broken sink must not stop the others or the monitor
                log.exception("monitor subscriber %r failed", subscriber)

    # --- state --------------------------------------------------------------------------------

    @property
    def detector_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.detectors)

    @property
    def conversation_ids(self) -> list[str]:
        return list(self._states)

    def state(self, conversation_id: str) -> ConversationState:
        with self._states_lock:
            state = self._states.get(conversation_id)
            if state is None:
                state = ConversationState(conversation_id)
                self._states[conversation_id] = state
            return state

    def conversation(self, conversation_id: str) -> Conversation:
        return self.state(conversation_id).conversation

    def risk(self, conversation_id: str) -> float:
        return self.state(conversation_id).risk

    def forget(self, conversation_id: str) -> bool:
        """Drop a conversation's state (a service evicting an idle one, or deleting it for privacy).

        Its queued turns, if any, are abandoned: call it only when none are pending (after
        `drain`, or for conversations fed through `add_turn`). Returns whether it was held.
        """
        with self._states_lock:
            state = self._states.pop(conversation_id, None)
        if state is not None and state.worker is not None:
            state.worker.cancel()
        return state is not None

    def restore(self, events: Iterable[Event]) -> None:
        """Rebuild state from a session log (resume) without re-running detectors or emitting."""
        for event in events:
            if isinstance(event, TurnAdded):
                state = self.state(event.conversation_id)
                expected = len(state.turns)
                if event.turn.index != expected:
                    raise ValueError(
                        f"conversation {event.conversation_id!r}: turn {event.turn.index} follows "
                        f"{expected} turns in the log"
                    )
                state.turns.append(event.turn)
            elif isinstance(event, AssessmentReady):
                state = self.state(event.conversation_id)
                state.assessments[event.assessment.turn] = event.assessment
                state.risk = event.risk
                state.risk_history.append(event.risk)
            elif isinstance(event, FindingRaised):
                self.state(event.conversation_id).seen.add(finding_key(event.finding, turn=event.turn))

    # --- intake: async ------------------------------------------------------------------------

    async def add_turn(
        self,
        conversation_id: str,
        speaker: str,
        text: str,
        *,
        start: float | None = None,
        end: float | None = None,
        source: str = "text",
    ) -> Assessment:
        """Record a turn, emit it, and assess it (after any earlier turn of the same conversation)."""
        state = self.state(conversation_id)
        turn = self._record(state, speaker, text, start=start, end=end, source=source)
        return await self.assess(conversation_id, turn.index)

    async def assess(self, conversation_id: str, index: int) -> Assessment:
        """Assess turn `index` (already recorded) with all detectors; used for resumed turns too."""
        state = self.state(conversation_id)
        if state.async_order is None:
            state.async_order = asyncio.Lock()
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
        async with state.async_order, self._semaphore:
            return self._finish(state, await self._runner.arun(state.window(index, self.window)))

    async def reassess_pending(self) -> int:
        """Assess every recorded turn that has no assessment yet (a resumed log); returns how many."""
        count = 0
        for conversation_id in self.conversation_ids:
            for index in self.state(conversation_id).unassessed():
                await self.assess(conversation_id, index)
                count += 1
        return count

    # --- intake: queued, with back-pressure ---------------------------------------------------

    async def submit(
        self,
        conversation_id: str,
        speaker: str,
        text: str,
        *,
        start: float | None = None,
        end: float | None = None,
        source: str = "text",
    ) -> Turn:
        """Record a turn now (its `TurnAdded` goes out at once) and queue its assessment.

        Waits while the conversation's queue is full (back-pressure on the producer);
        the turn is never dropped. Assessments run in turn order, one conversation's
        turns never overtaking each other.
        """
        state = self.state(conversation_id)
        if state.queue is None:
            state.queue = asyncio.Queue(maxsize=self.queue_size)
            state.worker = asyncio.create_task(self._consume(conversation_id, state.queue))
        turn = self._record(state, speaker, text, start=start, end=end, source=source)
        await state.queue.put(turn.index)
        return turn

    async def _consume(self, conversation_id: str, queue: asyncio.Queue[int]) -> None:
        while True:
            index = await queue.get()
            try:
                await self.assess(conversation_id, index)
            except Exception as exc:  # keep consuming: the turn is reported, never lost silently
                log.exception("assessing turn %s of %s failed", index, conversation_id)
                self._emit(
                    ErrorRaised(conversation_id=conversation_id, turn=index, kind="error", message=describe(exc))
                )
            finally:
                queue.task_done()

    async def drain(self) -> None:
        """Wait until every queued turn has been assessed."""
        for state in list(self._states.values()):
            if state.queue is not None:
                await state.queue.join()

    async def aclose(self) -> None:
        """Drain the queues, then stop the workers."""
        await self.drain()
        workers = [s.worker for s in self._states.values() if s.worker is not None]
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for state in self._states.values():
            state.worker = None
            state.queue = None
        self._runner.close()

    # --- intake: sync (callbacks, scripts, threads without an event loop) ------------------

    def add_turn_sync(
        self,
        conversation_id: str,
        speaker: str,
        text: str,
        *,
        start: float | None = None,
        end: float | None = None,
        source: str = "text",
    ) -> Assessment:
        """The blocking twin of `add_turn`: the same runner, its detectors in worker threads
        under the same timeouts."""
        state = self.state(conversation_id)
        with state.sync_order:
            turn = self._record(state, speaker, text, start=start, end=end, source=source)
            return self._finish(state, self._runner.run(state.window(turn.index, self.window)))

    def close(self) -> None:
        self._runner.close()

    # --- the shared core ------------------------------------------------------------------------

    def _record(
        self,
        state: ConversationState,
        speaker: str,
        text: str,
        *,
        start: float | None,
        end: float | None,
        source: str,
    ) -> Turn:
        with state.lock:
            turn = Turn(index=len(state.turns), speaker=speaker, text=text, start=start, end=end, source=source)
            state.turns.append(turn)
        self._emit(TurnAdded(conversation_id=state.id, turn=turn))
        return turn

    def _finish(self, state: ConversationState, run: Run) -> Assessment:
        """Record the runner's assessment in the conversation and announce it: the runner's
        failures, the findings not alerted before in this conversation, then the assessment."""
        conversation_id = state.id
        merged = run.assessment
        index = merged.turn
        fresh: list[Finding] = []
        with state.lock:
            for finding in merged.findings:
                key = finding_key(finding, turn=index)
                if key not in state.seen:
                    state.seen.add(key)
                    fresh.append(finding)
            state.risk = max(turn_score(merged), self.risk_decay * state.risk)
            state.risk_history.append(state.risk)
            state.assessments[index] = merged
            risk = state.risk
        for error in run.failures:
            self._emit(ErrorRaised.from_detector(error, conversation_id=conversation_id, turn=index))
        for finding in fresh:
            self._emit(FindingRaised(conversation_id=conversation_id, turn=index, finding=finding))
        self._emit(
            AssessmentReady(conversation_id=conversation_id, assessment=merged, risk=risk, new_findings=len(fresh))
        )
        return merged
