"""The conversation model: turns, windows and verbatim evidence.

These types cross every module boundary (readers, detectors, monitor, sinks),
so they are frozen pydantic models: immutable, typed, and JSON round-trippable.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterable, Iterator

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Turn(_Frozen):
    """One utterance. `index` is its position in the whole conversation, kept in windows."""

    index: int = Field(ge=0)
    speaker: str
    text: str
    start: float | None = None
    end: float | None = None
    source: str = "text"


class Evidence(_Frozen):
    """A quote found verbatim in one turn: `turn`'s text[start:end] == quote."""

    turn: int = Field(ge=0)
    quote: str = Field(min_length=1)
    start: int = Field(ge=0)
    end: int = Field(ge=0)

    @model_validator(mode="after")
    def _span_matches_quote(self) -> Evidence:
        if self.end - self.start != len(self.quote):
            raise ValueError("evidence span length must equal the quote length")
        return self


class Conversation(_Frozen):
    """An ordered list of turns; windows keep the original turn indices."""

    id: str = Field(default_factory=lambda: new_conversation_id())
    turns: tuple[Turn, ...] = ()

    @classmethod
    def from_pairs(
        cls, pairs: Iterable[tuple[str, str]], *, id: str | None = None, source: str = "text"
    ) -> Conversation:
        """A conversation of (speaker, text) pairs; without an `id`, one of its own (`new_conversation_id`)."""
        turns = tuple(
            Turn(index=i, speaker=speaker, text=text, source=source)
            for i, (speaker, text) in enumerate(pairs)
        )
        return cls(id=id if id is not None else new_conversation_id(), turns=turns)

    def __len__(self) -> int:
        return len(self.turns)

    def __iter__(self) -> Iterator[Turn]:  # type: ignore[override]
        return iter(self.turns)

    @property
    def speakers(self) -> tuple[str, ...]:
        """Speakers in order of first appearance."""
        seen: dict[str, None] = {}
        for turn in self.turns:
            seen.setdefault(turn.speaker, None)
        return tuple(seen)

    @property
    def last(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    def _end(self, index: int) -> int:
        """How many turns have a conversation index <= `index`, in O(1) for the usual
        contiguous indices and O(log n) otherwise (turns are in index order)."""
        turns = self.turns
        if not turns:
            return 0
        pos = index - turns[0].index
        if pos < 0:
            return 0
        if pos < len(turns) and turns[pos].index == index:
            return pos + 1
        return bisect.bisect_right(turns, index, key=_index_of)

    def turn(self, index: int) -> Turn:
        """The turn whose conversation index is `index` (not the position in a window)."""
        end = self._end(index)
        if end and self.turns[end - 1].index == index:
            return self.turns[end - 1]
        raise KeyError(f"turn {index} is not in this conversation window")

    def window(self, size: int | None, *, ending_at: int | None = None) -> Conversation:
        """The last `size` turns (all turns when size is None), or the `size` turns that end
        with conversation index `ending_at`.

        `window(size, ending_at=i)` costs O(size), where `upto(i).window(size)` copies every
        turn before `i`: assessing each turn of a long transcript that way was quadratic.
        """
        end = len(self.turns) if ending_at is None else self._end(ending_at)
        begin = 0 if size is None else max(0, end - size)
        if begin == 0 and end == len(self.turns):
            return self
        return self.model_copy(update={"turns": self.turns[begin:end]})

    def upto(self, index: int) -> Conversation:
        """Turns up to and including conversation index `index` (for a window of them, use
        `window(size, ending_at=index)`, which does not copy the earlier turns)."""
        return self.window(None, ending_at=index)

    def append(
        self,
        speaker: str,
        text: str,
        *,
        start: float | None = None,
        end: float | None = None,
        source: str = "text",
    ) -> Conversation:
        index = self.turns[-1].index + 1 if self.turns else 0
        turn = Turn(index=index, speaker=speaker, text=text, start=start, end=end, source=source)
        return self.model_copy(update={"turns": (*self.turns, turn)})

    def as_text(self) -> str:
        """`Speaker: text` lines, the MentalManip layout the models were trained on."""
        return "\n".join(f"{t.speaker}: {t.text}" for t in self.turns)


def new_conversation_id() -> str:
    """A fresh id for a conversation whose caller named none.

    Detectors keep per-conversation state by id (who opened it, the intent model's
    escalation budget, cached turns); every unnamed conversation once shared the id
    "conversation", so two of them changed each other's results.
    """
    return f"conversation-{uuid.uuid4().hex[:12]}"


def _index_of(turn: Turn) -> int:
    return turn.index
