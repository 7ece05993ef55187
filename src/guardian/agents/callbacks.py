"""`GuardianCallbackHandler`: watch an existing pipeline without changing it.

Attach it to any chat model call (`config={"callbacks": [handler]}` or
`model.with_config(callbacks=[...])`). On chat-model start it screens the latest
user turn of the prompt in the context of the prompt's history; on chat-model end
it screens the reply. Nothing in the pipeline changes: results go to `records`,
to `on_finding` callbacks, to a JSON Lines session log (`log_path`, appended and
flushed per record, so a crash loses nothing), or to a guardian monitor
(`monitor=`, anything with `add_turn_sync(conversation_id, speaker, text, source=)`),
which then runs its own detectors and session log.

The conversation id is `thread_id` from the callback metadata: LangGraph agents
put their `configurable.thread_id` there; for a plain chain pass
`config={"metadata": {"thread_id": ...}, "callbacks": [handler]}`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from guardian.agents._engine import DetectorSpec, FindingCallback, GuardianEvent, Screener
from guardian.agents._screening import (
    DEFAULT_NOTICE,
    Direction,
    MessageTurn,
    Speakers,
    is_flagged,
    log,
    message_text,
    to_turns,
)
from guardian.findings import Assessment


class TurnSink(Protocol):
    """What the handler needs from a monitor (guardian.monitor.Monitor fits)."""

    def add_turn_sync(self, conversation_id: str, speaker: str, text: str, *, source: str = ...) -> Assessment: ...


def _key(position: int, speaker: str, text: str) -> str:
    return f"{position}:{speaker}:{hash(text) & 0xFFFFFFFF:08x}"


def _keyed(turns: Sequence[MessageTurn]) -> list[MessageTurn]:
    """Key turns by position and content: a re-sent history keeps its keys even without ids."""
    return [MessageTurn(_key(i, t.speaker, t.text), t.speaker, t.text) for i, t in enumerate(turns)]


class GuardianCallbackHandler(BaseCallbackHandler):
    """Screens chat model inputs and outputs as they pass; observe only, never blocks."""

    raise_error = False  # a failure here must never reach the user's pipeline

    def __init__(
        self,
        *,
        detectors: Sequence[DetectorSpec] | None = None,
        directions: Sequence[Direction] = ("input", "output"),
        threshold: float | None = None,
        window: int = 10,
        on_finding: FindingCallback | Sequence[FindingCallback] | None = None,
        log_path: str | Path | None = None,
        monitor: TurnSink | None = None,
        speakers: tuple[str, str] = ("User", "Assistant"),
        timeout_s: float | None = 5.0,
        max_records: int = 10_000,
        max_threads: int = 10_000,
    ) -> None:
        """Options as for `GuardianMiddleware`, plus where results go.

        Args:
            log_path: append one JSON line per screened turn to this file.
            monitor: hand every turn to this monitor instead of own detectors.
            max_records: how many records `records` keeps in memory (oldest dropped;
                the log file keeps all).
        """
        super().__init__()
        unknown = set(directions) - {"input", "output"}
        if unknown:
            raise ValueError(f"directions must be 'input' and/or 'output', not {sorted(unknown)}")
        self.directions = frozenset(directions)
        self.monitor = monitor
        self.log_path = Path(log_path) if log_path is not None else None
        self.screener = Screener(
            detectors=detectors,
            threshold=threshold,
            window=window,
            speakers=Speakers(*speakers),
            notice=DEFAULT_NOTICE,
            on_finding=on_finding,
            timeout_s=timeout_s,
            max_threads=max_threads,
        )
        self.records: deque[dict[str, Any]] = deque(maxlen=max_records)
        self._pending: dict[UUID, tuple[str | None, list[MessageTurn]]] = {}
        self._lock = threading.Lock()

    def warm_up(self) -> GuardianCallbackHandler:
        """Load the detectors now, so the first call is not slowed (or timed out) by loading."""
        if self.monitor is None:
            self.screener.pool.warm_up()
        return self

    # --- LangChain callback API -------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            thread_id = _thread_id(metadata)
            turns = _keyed(to_turns(messages[0] if messages else [], speakers=self.screener.speakers))
            if len(turns) == 1 and self.monitor is None:
                # A prompt without history (a plain chain): the thread is what this handler saw.
                turns = self.screener.memory.context(thread_id, turns)
            with self._lock:
                self._pending[run_id] = (thread_id, turns)
            self._screen_new_turns(thread_id, turns)
        except Exception:
            log.exception("guardian callback failed on chat model start")

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        with self._lock:
            pending = self._pending.pop(run_id, None)
        if pending is None:
            return
        try:
            thread_id, turns = pending
            text = _reply_text(response)
            if text:
                speaker = self.screener.speakers.assistant
                reply = [*turns, MessageTurn(_key(len(turns), speaker, text), speaker, text)]
                self._screen(thread_id, reply, "output")
        except Exception:
            log.exception("guardian callback failed on chat model end")

    def on_llm_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        with self._lock:
            self._pending.pop(run_id, None)

    # --- screening --------------------------------------------------------------------------

    def _screen_new_turns(self, thread_id: str | None, turns: list[MessageTurn]) -> None:
        seen = {t.key for t in self.screener.memory.turns(thread_id)} if thread_id is not None else set()
        new = [i for i, t in enumerate(turns) if t.key not in seen]
        if self.monitor is not None:  # the monitor keeps the conversation: hand it every new turn
            for i in new:
                self._screen(thread_id, turns[: i + 1], None)
            return
        if new and new[-1] == len(turns) - 1 and turns[-1].speaker == self.screener.speakers.user:
            self._screen(thread_id, turns, "input")
        else:
            self.screener.memory.remember(thread_id, turns)

    def _screen(self, thread_id: str | None, turns: list[MessageTurn], direction: Direction | None) -> None:
        last = turns[-1]
        if self.monitor is not None:
            assessment = self.monitor.add_turn_sync(thread_id or "conversation", last.speaker, last.text, source="langchain")
            flagged = is_flagged(assessment, threshold=self.screener.threshold, speaker=last.speaker)
        elif direction is None or direction not in self.directions:
            self.screener.memory.remember(thread_id, turns)
            return
        else:
            verdict = self.screener.screen(direction, thread_id, turns)
            assessment, flagged = verdict.assessment, verdict.flagged
        self.screener.memory.remember(thread_id, turns)
        direction = direction or ("input" if last.speaker == self.screener.speakers.user else "output")
        record = {
            "type": "guardian.assessment",
            "time": time.time(),
            "thread_id": thread_id,
            "direction": direction,
            "speaker": last.speaker,
            "text": last.text,
            "flagged": flagged,
            "assessment": assessment.model_dump(mode="json"),
        }
        self.records.append(record)
        self._write(record)
        if flagged:
            self.screener.notify(
                GuardianEvent(direction=direction, thread_id=thread_id, assessment=assessment, action="observed", text=last.text)
            )

    def _write(self, record: dict[str, Any]) -> None:
        if self.log_path is None:
            return
        line = json.dumps(record, ensure_ascii=False)
        with self._lock:
            try:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                # owner-only (0600), as guardian's session logs: the file holds every word screened
                fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with os.fdopen(fd, "a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
                    fh.flush()
            except OSError as exc:
                log.warning("guardian could not append to %s: %s", self.log_path, exc)

    def flagged(self) -> list[dict[str, Any]]:
        """The records of flagged turns, oldest first."""
        return [r for r in self.records if r["flagged"]]


def _thread_id(metadata: dict[str, Any] | None) -> str | None:
    value = (metadata or {}).get("thread_id")
    return None if value is None else str(value)


def _reply_text(response: LLMResult) -> str:
    for generations in response.generations:
        for generation in generations:
            if isinstance(generation, ChatGeneration):
                return message_text(generation.message)
            if generation.text.strip():
                return generation.text.strip()
    return ""


__all__ = ["GuardianCallbackHandler", "TurnSink"]
