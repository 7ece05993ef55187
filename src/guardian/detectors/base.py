"""The one interface every detector implements.

A detector looks at a window of the conversation (the last N turns, original
indices kept) and returns an Assessment of its latest turn. Only `analyze` is
abstract; the async twin runs it in a worker thread unless a detector has a
native async path (LLM calls do).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from guardian.conversation import Conversation
from guardian.findings import Assessment


class Detector(ABC):
    """Base class for built-in and third-party detectors (entry point group `guardian.detectors`)."""

    name: ClassVar[str]
    #: Human-readable one-liner shown by `guardian detectors` and the TUI status bar.
    description: ClassVar[str] = ""

    @abstractmethod
    def analyze(self, window: Conversation) -> Assessment:
        """Assess the latest turn of `window` in the context of the turns before it."""

    async def aanalyze(self, window: Conversation) -> Assessment:
        return await asyncio.to_thread(self.analyze, window)

    def analyze_batch(self, windows: Sequence[Conversation]) -> list[Assessment]:
        """One Assessment per window, in order (whole files, evaluation).

        The default loops over `analyze`; a model that is cheaper per item in a
        batch (one padded encoder pass, one sparse matrix) overrides it.
        """
        return [self.analyze(w) for w in windows]

    def warm_up(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Load heavy resources now rather than on the first turn (the TUI calls this)."""

    def absorb(self, other: Detector) -> bool:
        """Whether this detector already runs `other` as one of its parts and takes it over: the
        runner then runs `other` only inside this one, so a turn is not screened twice by one model
        nor given two intents (a composite such as the cascade overrides this)."""
        return False

    def empty(self, window: Conversation) -> Assessment:
        """The assessment of a window with nothing to say (no turns, or nothing found)."""
        last = window.last
        return Assessment(
            conversation_id=window.id,
            turn=last.index if last is not None else -1,
            detectors=(self.name,),
        )
