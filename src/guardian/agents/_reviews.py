"""The review path of `GuardianMiddleware(policy="review")`: pause for a person, resume once.

LangGraph's `interrupt()` re-runs the hook from its start when the graph resumes, so the
verdict the reviewer saw is held here by message id and handed back instead of screening
the turn a second time (a second screen could disagree, or cost an LLM call again).
"""

from __future__ import annotations

import threading

from cachetools import LRUCache
from langgraph.types import interrupt

from guardian.agents import review as _review
from guardian.agents._actions import Job
from guardian.agents._engine import Verdict
from guardian.agents._screening import message_text, summary
from guardian.agents._state import compact

#: Verdicts waiting for a reviewer; a run that is never resumed must not hold memory forever.
MAX_HELD = 1024


class Reviews:
    """Verdicts of turns paused for review, least recently held dropped first (thread-safe)."""

    def __init__(self, *, max_held: int = MAX_HELD) -> None:
        self._held: LRUCache[str, Verdict] = LRUCache(maxsize=max_held)
        self._lock = threading.Lock()

    def hold(self, job: Job, verdict: Verdict) -> None:
        """Keep the verdict a reviewer is about to see (turns without a message id cannot be found again)."""
        if job.message.id:
            with self._lock:
                self._held[str(job.message.id)] = verdict

    def take(self, job: Job) -> Verdict | None:
        """On resume the hook runs again: the verdict the reviewer saw, not a second screen."""
        key = str(job.message.id) if job.message.id else None
        with self._lock:
            return self._held.pop(key, None) if key else None

    def ask(self, job: Job, verdict: Verdict, injection: list[dict[str, object]]) -> _review.Reviewed:
        """Pause the graph (LangGraph `interrupt()`); on resume this returns the reviewer's decision."""
        record = compact(verdict.assessment, direction=job.direction, flagged=True, action="review",
                         message_id=job.message.id, thread_id=job.thread_id, speaker=job.speaker)
        if injection:
            record["injection"] = injection
        request = _review.review_request(
            direction=job.direction,
            text=message_text(job.message),
            summary=verdict.notice or summary(verdict.assessment, direction=job.screen_direction),
            record=record,
            speaker=job.speaker,
        )
        reviewed = _review.read_decision(interrupt(request), direction=job.direction)
        with self._lock:
            self._held.pop(str(job.message.id), None)
        return reviewed

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)
