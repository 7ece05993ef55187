"""The hold-back gate: which part of a growing reply may be shown yet (pure, no LangChain).

A streamed reply arrives as deltas. Under `block` nothing reaches the client until
the reply so far, up to a sentence end, has been screened in the context of the
turns before it: the gate says what to screen (`due`) and, given the verdict, what to
release (`settle`). A sentence that never ends is not held forever: once the held
tail passes `max_hold_chars`, the complete words in it are screened and released.
A flagged reply stops the gate: nothing more of it is released, whatever follows.

Without `hold` (the `warn` policy, which never hides words) every delta is released
at once and only the whole reply is screened, at the end.

The gate is sans-IO so the sync and async streams, the middleware and `guard()`
share it, and it can be tested with strings and verdicts alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from guardian.agents._engine import Verdict

DEFAULT_MAX_HOLD_CHARS = 200
"""Longest tail held back without a sentence end (characters): bounds the wait for a
sentence that runs on, while a sentence is what the detectors judge best."""

_SENTENCE_END = re.compile(r"(?:[.!?…]+[\"'”’)\]]*\s+)|\n+")
_SPACE = re.compile(r"\s")


@dataclass(slots=True)
class ReplyGate:
    """What of one streamed reply has been released, and what is held."""

    hold: bool
    max_hold_chars: int = DEFAULT_MAX_HOLD_CHARS
    released: str = ""
    pending: str = ""
    paused: bool = False

    @property
    def text(self) -> str:
        """Everything the model has said so far, shown or not."""
        return self.released + self.pending

    def add(self, delta: str) -> str:
        """Take a delta; without hold-back, return it to release now (else "")."""
        if not self.hold:
            self.released += delta
            return delta
        self.pending += delta
        return ""

    def due(self) -> str | None:
        """The reply so far to screen before releasing more, or None while nothing is due."""
        if self.paused or not self.hold or not self.pending:
            return None
        cut = _last_sentence_end(self.pending)
        if cut == 0 and len(self.pending) > self.max_hold_chars:
            cut = _last_space_end(self.pending) or len(self.pending)
        return self.released + self.pending[:cut] if cut else None

    def settle(self, screened: str, verdict: Verdict, *, stop: bool | None = None) -> str:
        """Record the verdict on `screened` (a `due()` text); return what to release.

        A flagged prefix (or, with `stop`, e.g. a failed screen when the operator fails
        closed) pauses the release for good: the rest is held until the whole reply is
        judged, so a reply is blocked or let through on the same verdict as without
        streaming, and no flagged word is shown before that verdict.
        """
        if verdict.flagged if stop is None else stop:
            self.paused = True
            return ""
        piece = screened[len(self.released) :]
        self.released = screened
        self.pending = self.pending[len(piece) :]
        return piece


def closing_piece(shown: str, final: str) -> str:
    """What the client must still receive so that, after `shown`, it reads `final`.

    A reply stopped after a clean prefix was shown cannot be unsent: the replacement
    follows it as its own paragraph.
    """
    if final.startswith(shown):
        return final[len(shown) :]
    return f"\n\n{final}" if shown.strip() else final


def _last_sentence_end(text: str) -> int:
    end = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
    return end


def _last_space_end(text: str) -> int:
    end = 0
    for match in _SPACE.finditer(text):
        end = match.end()
    return end


__all__ = ["DEFAULT_MAX_HOLD_CHARS", "ReplyGate", "closing_piece"]
