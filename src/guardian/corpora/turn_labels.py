"""Turn labels: which turn manipulates, by which techniques, aimed at which vulnerabilities, with what words.

MentalManip labels whole dialogues, so a model trained on it alone has to guess the turn. These
labels name it (docs/labelling.md says how they were made). They are stored in the conversation
schema of `data/conversations/` (one conversation a line) with, in `meta`:

- `manipulative_turns`: the 0-based indices of the manipulative turns (as before);
- `turn_labels`: one object per manipulative turn, `{turn, techniques, vulnerabilities, span, quote}`,
  `span` the character offsets of `quote` in that turn's text (verbatim, so a model's evidence and a
  user's highlight agree with what a person would point to);
- `gold` (MentalManip rows): the dialogue's own labels, which bind the turn labels (`check_labels`).

`labelled_turns` is the one way training and evaluation read any labelled source turn by turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from guardian.conversation import Turn
from guardian.taxonomy import Technique, Vulnerability


@dataclass(frozen=True, slots=True)
class TurnLabel:
    """One manipulative turn: its techniques, the vulnerabilities they aim at, and the words that carry it."""

    turn: int
    techniques: tuple[Technique, ...]
    vulnerabilities: tuple[Vulnerability, ...]
    #: Character offsets of `quote` in the turn's text.
    span: tuple[int, int]
    quote: str

    def to_json(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "techniques": [t.value for t in self.techniques],
            "vulnerabilities": [v.value for v in self.vulnerabilities],
            "span": list(self.span),
            "quote": self.quote,
        }


@dataclass(frozen=True, slots=True)
class Gold:
    """A MentalManip dialogue's own labels (empty tuples where the annotators listed none)."""

    manipulative: bool
    techniques: tuple[Technique, ...] = ()
    vulnerabilities: tuple[Vulnerability, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelledTurn:
    """A turn with the turns before it and its label (None: not manipulative)."""

    conversation_id: str
    kind: str
    context: tuple[Turn, ...]
    turn: Turn
    label: TurnLabel | None

    @property
    def manipulative(self) -> bool:
        return self.label is not None


def find_span(text: str, quote: str) -> tuple[int, int] | None:
    """Where `quote` stands verbatim in `text` (first place), else None; an empty quote is never found."""
    quote = quote.strip()
    if not quote:
        return None
    start = text.find(quote)
    return None if start < 0 else (start, start + len(quote))


def parse_turn_label(raw: Mapping[str, Any], turns: Sequence[Turn]) -> TurnLabel:
    """A stored or answered turn label, its quote located in its turn; ValueError says what is wrong."""
    if not isinstance(raw, Mapping):
        raise ValueError("a turn label must be an object")
    n = raw.get("turn")
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n < len(turns):
        raise ValueError(f"turn {n!r} is not a turn of the conversation (0-{len(turns) - 1})")
    techniques = tuple(dict.fromkeys(Technique.parse(str(t)) for t in raw.get("techniques") or ()))
    if not techniques:
        raise ValueError(f"turn {n}: a manipulative turn needs at least one technique")
    vulnerabilities = tuple(dict.fromkeys(Vulnerability.parse(str(v)) for v in raw.get("vulnerabilities") or ()))
    quote = str(raw.get("quote") or "").strip()
    found = find_span(turns[n].text, quote)
    if found is None:
        raise ValueError(f"turn {n}: the quote {quote[:60]!r} is not found verbatim in the turn's text")
    span = found
    stored = raw.get("span")
    if stored is not None:
        try:
            start, end = (int(x) for x in stored)
        except (TypeError, ValueError):
            raise ValueError(f"turn {n}: span {stored!r} is not [start, end]") from None
        if turns[n].text[start:end] != quote:
            raise ValueError(f"turn {n}: span {stored} does not hold the quote")
        span = (start, end)
    return TurnLabel(n, techniques, vulnerabilities, span, quote)


def check_labels(labels: Sequence[TurnLabel], gold: Gold) -> list[str]:
    """What breaks the binding of a MentalManip dialogue's gold labels (empty: nothing)."""
    problems: list[str] = []
    if not gold.manipulative:
        if labels:
            problems.append("a dialogue labelled not manipulative has manipulative turns")
        return problems
    if not labels:
        problems.append("a manipulative dialogue has no manipulative turn")
    if len({lab.turn for lab in labels}) != len(labels):
        problems.append("a turn is labelled twice")
    if gold.techniques:
        extra = {t for lab in labels for t in lab.techniques} - set(gold.techniques)
        if extra:
            problems.append(f"techniques outside the gold list: {', '.join(sorted(extra))}")
    if gold.vulnerabilities:
        extra_v = {v for lab in labels for v in lab.vulnerabilities} - set(gold.vulnerabilities)
        if extra_v:
            problems.append(f"vulnerabilities outside the gold list: {', '.join(sorted(extra_v))}")
    return problems


def parse_gold(raw: Mapping[str, Any] | None) -> Gold | None:
    if not raw:
        return None
    return Gold(
        bool(raw.get("manipulative")),
        tuple(Technique.parse(str(t)) for t in raw.get("techniques") or ()),
        tuple(Vulnerability.parse(str(v)) for v in raw.get("vulnerabilities") or ()),
    )


def labelled_turns(
    conversations: Iterable[Any], *, context: int | None = None
) -> Iterator[LabelledTurn]:
    """Every turn of every turn-labelled conversation with the turns before it (`context` of them, all for None).

    A conversation without turn labels (`manipulative_turns` None) is skipped: its turns were never
    judged one by one. A turn in `manipulative_turns` without a detailed label (the older files) gets
    a label with no technique and an empty span.
    """
    for c in conversations:
        marked = c.manipulative_turns
        if marked is None:
            continue
        details = {lab.turn: lab for lab in (c.turn_labels or ())}
        turns = c.conversation.turns
        for i, turn in enumerate(turns):
            label = details.get(i)
            if label is None and i in marked:
                label = TurnLabel(i, (), (), (0, 0), "")
            start = 0 if context is None else max(0, i - context)
            yield LabelledTurn(c.id, c.kind, tuple(turns[start:i]), turn, label)
