"""Conversations with state: the monitor in memory, the store on disk (or in Redis).

One turn is handled under its conversation's lock (FIFO, so concurrent posts keep their
arrival order and never interleave): answer a known idempotency key from the store; make
sure the monitor holds exactly what the store holds (reload it when another worker or
instance appended, or after a restart or an eviction); assess the turn with the monitor;
commit it with its events; only then answer. The monitor's state is a cache of the store:
whenever they could disagree (a failed commit, a conflict) the conversation is dropped from
memory and rebuilt from the store on its next turn.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from guardian.conversation import Turn
from guardian.events import Event, from_dict, to_dict
from guardian.findings import FindingCard
from guardian.monitor import ConversationState, Monitor
from guardian.serve.metrics import ServeMetrics
from guardian.serve.schemas import API_VERSION, TurnIn
from guardian.serve.state import Conflict, StateStore, StoredTurn
from guardian.summary import ConversationSummary, summarize

log = logging.getLogger("guardian.serve")

T = TypeVar("T")

#: Attempts at one turn when other workers keep appending to the same conversation first
#: (SQLite shared by `--workers`; Redis instances take the conversation's lock instead).
ATTEMPTS = 20
#: How long a conversation's lock across instances lives if its holder dies.
LOCK_TTL_S = 30.0


class IdempotencyMismatch(Exception):
    """The idempotency key was used before for a different turn."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    response: dict[str, Any]
    replayed: bool


def request_hash(turn: TurnIn) -> str:
    body = json.dumps(turn.model_dump(mode="json", exclude={"idempotency_key"}), sort_keys=True)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def state_summary(state: ConversationState) -> ConversationSummary:
    """The summary after the monitor's latest turn, from its cards (`guardian.summary`): the
    same inputs `stored_summary` reads back from the store, so a turn's answer and a later GET
    agree."""
    with state.lock:
        turns = list(state.turns)
        cards = [a.card for _, a in sorted(state.assessments.items()) if a.card is not None]
        risks = [round(r, 6) for r in state.risk_history]  # as the event line writes `risk`
    return summarize(state.id, turns, cards, risk=risks[-1] if risks else 0.0, peak_risk=max(risks, default=0.0))


def stored_summary(conversation_id: str, events: Iterable[dict[str, Any]]) -> ConversationSummary:
    """The summary of a stored conversation, rebuilt from its events rather than read from the
    latest answer: a conversation stored before api_version 2 (answers without `summary`, version-1
    assessments without cards) still gets one, with no flagged turn where no card was stored."""
    turns: list[Turn] = []
    cards: list[FindingCard] = []
    risks: list[float] = []
    for event in events:
        if event.get("type") == "turn":
            turns.append(Turn.model_validate(event["turn"]))
        elif event.get("type") == "assessment":
            card = event.get("assessment", {}).get("card")
            if card is not None:
                cards.append(FindingCard.model_validate(card))
            risk = event.get("risk")
            risks.append(float(risk) if isinstance(risk, int | float) else 0.0)
    return summarize(conversation_id, turns, cards, risk=risks[-1] if risks else 0.0, peak_risk=max(risks, default=0.0))


def answer(event: dict[str, Any], summary: ConversationSummary) -> dict[str, Any]:
    """A turn's answer: its assessment event (a copy: the stored event stays the watch line the
    monitor restores from) with the api version and the conversation's summary after it."""
    return {**event, "api_version": API_VERSION, "summary": summary.model_dump(mode="json")}


class Conversations:
    def __init__(
        self,
        monitor: Monitor,
        store: StateStore,
        *,
        metrics: ServeMetrics,
        max_live: int,
        log_text: bool = False,
    ) -> None:
        self.monitor = monitor
        self.store = store
        self.metrics = metrics
        self.max_live = max_live
        self.log_text = log_text
        # id -> turns the monitor holds, LRU order. Not a cachetools.LRUCache: eviction must skip the
        # conversations a turn is being handled in (they may exceed max_live) and forget the monitor's state.
        self._live: OrderedDict[str, int] = OrderedDict()
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._pending: dict[str, list[dict[str, Any]]] = {}
        # One thread for the store: sqlite3 wants one writer, and the order of writes is the order asked.
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="guardian-store")
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        monitor.subscribe(self._collect)

    # --- plumbing --------------------------------------------------------------------------

    async def io(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._io, lambda: fn(*args, **kwargs))

    def _collect(self, event: Event) -> None:
        buffer = self._pending.get(event.conversation_id or "")
        if buffer is not None:
            buffer.append(to_dict(event))

    @asynccontextmanager
    async def locked(self, conversation_id: str) -> AsyncIterator[None]:
        """The conversation's lock (created on demand, removed when nobody waits for it), and
        then the store's lock across instances (Redis; a no-op for SQLite)."""
        lock, users = self._locks.get(conversation_id, (asyncio.Lock(), 0))
        self._locks[conversation_id] = (lock, users + 1)
        self._in_flight += 1
        self._idle.clear()
        try:
            async with lock, self._shared(conversation_id):
                yield
        finally:
            lock, users = self._locks[conversation_id]
            if users <= 1:
                del self._locks[conversation_id]
            else:
                self._locks[conversation_id] = (lock, users - 1)
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    @asynccontextmanager
    async def _shared(self, conversation_id: str) -> AsyncIterator[None]:
        owner = uuid.uuid4().hex
        delay = 0.002
        while not await self.io(self.store.try_lock, conversation_id, owner, ttl_s=LOCK_TTL_S):
            await asyncio.sleep(delay * (0.5 + random.random()))  # another instance holds it: back off
            delay = min(0.1, delay * 2)
        try:
            yield
        finally:
            await self.io(self.store.unlock, conversation_id, owner)

    async def drain(self) -> None:
        """Wait until no turn is being handled (graceful shutdown)."""
        await self._idle.wait()

    def _evict(self, conversation_id: str) -> None:
        self._live.pop(conversation_id, None)
        self.monitor.forget(conversation_id)
        self.metrics.open_conversations.set(len(self._live))

    async def _load(self, conversation_id: str) -> int:
        """Make the monitor hold what the store holds; returns the number of turns."""
        stored = await self.io(self.store.count, conversation_id)
        if self._live.get(conversation_id) == stored:
            self._live.move_to_end(conversation_id)
            return int(stored)
        turns: list[StoredTurn] = await self.io(self.store.turns, conversation_id)
        self.monitor.forget(conversation_id)
        events = [from_dict(e, source="store") for t in turns for e in t.events]
        self.monitor.restore(events)
        self._live[conversation_id] = len(turns)
        self._live.move_to_end(conversation_id)
        excess = len(self._live) - self.max_live
        for oldest in [c for c in self._live if c not in self._locks][: max(0, excess)]:
            self._evict(oldest)  # least recently used first; busy ones stay
        self.metrics.open_conversations.set(len(self._live))
        return len(turns)

    # --- the operations --------------------------------------------------------------------

    async def add_turn(
        self, conversation_id: str, turn: TurnIn, *, idempotency_key: str | None, source: str = "text"
    ) -> TurnResult:
        digest = request_hash(turn)
        async with self.locked(conversation_id):
            if idempotency_key is not None:
                hit = await self.io(self.store.lookup, conversation_id, idempotency_key)
                if hit is not None:
                    return self._replayed(hit.request_hash, digest, hit.response)
            for _ in range(ATTEMPTS):
                index = await self._load(conversation_id)
                self._pending[conversation_id] = []
                try:
                    await self.monitor.add_turn(
                        conversation_id, turn.speaker, turn.text, start=turn.start, end=turn.end, source=source
                    )
                    events = self._pending[conversation_id]
                except BaseException:
                    self._evict(conversation_id)
                    raise
                finally:
                    self._pending.pop(conversation_id, None)
                event = next(e for e in reversed(events) if e["type"] == "assessment")
                response = answer(event, state_summary(self.monitor.state(conversation_id)))
                stored = StoredTurn(index=index, events=tuple(events), response=response)
                try:
                    hit = await self.io(
                        self.store.append, conversation_id, stored, idempotency_key=idempotency_key, request_hash=digest
                    )
                except Conflict:
                    self._evict(conversation_id)  # another worker got there first: reload, assess again
                    await asyncio.sleep(random.random() * 0.01)
                    continue
                except BaseException:
                    self._evict(conversation_id)  # not stored: memory must not keep what the store lacks
                    raise
                if hit is not None:  # the same key was stored by another worker meanwhile
                    self._evict(conversation_id)
                    return self._replayed(hit.request_hash, digest, hit.response)
                self._live[conversation_id] = index + 1
                self._log_turn(conversation_id, index, turn, response)
                return TurnResult(response, replayed=False)
            raise Conflict(f"conversation {conversation_id!r} kept changing under {ATTEMPTS} attempts")

    @staticmethod
    def _replayed(stored_hash: str, digest: str, response: dict[str, Any]) -> TurnResult:
        if stored_hash != digest:
            raise IdempotencyMismatch
        return TurnResult(response, replayed=True)

    def _log_turn(self, conversation_id: str, index: int, turn: TurnIn, response: dict[str, Any]) -> None:
        assessment = response["assessment"]
        if self.log_text:
            log.info("turn %s#%d %s: %r decision=%s", conversation_id, index, turn.speaker, turn.text,
                     assessment["decision"])
        else:
            log.info("turn %s#%d chars=%d decision=%s findings=%d", conversation_id, index, len(turn.text),
                     assessment["decision"], len(assessment["findings"]))

    async def get(self, conversation_id: str) -> list[StoredTurn]:
        return list(await self.io(self.store.turns, conversation_id))

    async def delete(self, conversation_id: str) -> bool:
        async with self.locked(conversation_id):
            removed = bool(await self.io(self.store.delete, conversation_id))
            self._evict(conversation_id)
        return removed

    async def aclose(self) -> None:
        await self.drain()
        self._io.shutdown(wait=True)
