"""Training bags for the turn model: which turns, with which (weak) labels.

MentalManip labels whole dialogues, so its turns come as *bags*: a manipulative
dialogue has at least one manipulative turn, a non-manipulative one has none
(multiple-instance learning). The other kinds of conversation give stronger
labels: every turn of an ordinary conversation is a negative, the victim's turns
of a scam call are negatives, and the scammer's turns form a positive bag for
both manipulation and the scam-request head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from guardian.conversation import Conversation
from guardian.corpora.conversations import LabelledConversation
from guardian.corpora.datasets import LabelledDialogue
from guardian.detectors.local.features import turn_rows
from guardian.detectors.local.model import TECHNIQUES, VULNERABILITIES
from guardian.detectors.local.reply_pair import NO_REQUEST

__all__ = ["TECHNIQUES", "VULNERABILITIES", "Bag", "TrainingSet", "build"]


@dataclass
class Bag:
    """Turns (rows into the feature matrix) that share one label.

    `manipulative`: 1 / 0 for the bag, None when the bag says nothing about it.
    `scam`: likewise for the scam-request head. `techniques`/`vulnerabilities`:
    multi-hot label rows of a manipulative MentalManip dialogue, else None.
    `negative_turns`: the bag's turns are each known to be harmless (not just the bag).
    """

    rows: np.ndarray
    source: str
    conversation_id: str
    manipulative: float | None
    scam: float | None = None
    techniques: np.ndarray | None = None
    vulnerabilities: np.ndarray | None = None
    negative_turns: bool = False
    #: The conversation's label as its source gives it ("manipulative", "benign", "scam").
    label: str = ""
    weight: float = 1.0


@dataclass
class TrainingSet:
    features: np.ndarray
    bags: list[Bag] = field(default_factory=list)
    #: The text of each feature row's turn.
    texts: list[str] = field(default_factory=list)
    #: Who said each feature row's turn (the calibration's repetition rule counts a speaker's turns).
    speakers: list[str] = field(default_factory=list)


def _multi_hot(chosen: Sequence[object], labels: Sequence[object]) -> np.ndarray:
    return np.array([1.0 if x in chosen else 0.0 for x in labels], dtype=np.float32)


def build(
    *,
    dialogues: Sequence[LabelledDialogue],
    label_only: Sequence[LabelledDialogue] = (),
    conversations: Sequence[LabelledConversation] = (),
    embed: Callable[[Sequence[str]], np.ndarray],
    context: bool = False,
    hint: Callable[[str], bool] | None = None,
    pairs: Sequence[tuple[Conversation, float]] = (),
    exchanges: Sequence[LabelledConversation] = (),
) -> TrainingSet:
    """Feature rows for every turn and the bags over them.

    `hint(text)`: whether a turn of a manipulative MentalManip dialogue carries one of the
    paper's key phrases; such turns form one more positive bag ("one of these is it"), the weak
    turn hints that tell the model which words of a manipulative dialogue manipulate.

    `exchanges`: conversations labelled turn by turn (source: their kind): user -> assistant threads
    whose last reply is manipulative or benign ("chatbot"), and dialogues naming their manipulative
    turns (`manipulative_turns`, "dialogue"). Each manipulative turn is a positive bag of one turn
    (a turn label, not a dialogue label): a chatbot thread's last one unless the file names others;
    the other turns, and every turn of a benign conversation, are negatives one by one.
    """
    chunks: list[np.ndarray] = []
    bags: list[Bag] = []
    texts: list[str] = []
    speakers: list[str] = []
    offset = 0

    def add(conversation: Conversation) -> np.ndarray:
        nonlocal offset
        turns = conversation.turns
        x = turn_rows(turns, embed([t.text for t in turns]), context=context)
        chunks.append(x)
        texts.extend(t.text for t in turns)
        speakers.extend(t.speaker for t in turns)
        rows = np.arange(offset, offset + len(turns))
        offset += len(turns)
        return rows

    def add_hints(d: LabelledDialogue, rows: np.ndarray) -> None:
        if hint is None or not d.manipulative:
            return
        hinted = rows[[i for i, t in enumerate(d.conversation.turns) if hint(t.text)]]
        if len(hinted):
            bags.append(Bag(rows=hinted, source="mentalmanip_hint", conversation_id=d.id, label="manipulative",
                            manipulative=1.0))

    for d in dialogues:
        rows = add(d.conversation)
        add_hints(d, rows)
        bags.append(Bag(
            rows=rows,
            source="mentalmanip",
            conversation_id=d.id,
            label="manipulative" if d.manipulative else "benign",
            manipulative=1.0 if d.manipulative else 0.0,
            scam=None,
            techniques=_multi_hot(d.techniques, TECHNIQUES) if d.manipulative and d.techniques else None,
            vulnerabilities=(
                _multi_hot(d.vulnerabilities, VULNERABILITIES) if d.manipulative and d.vulnerabilities else None
            ),
        ))
    for d in label_only:
        if not (d.manipulative and (d.techniques or d.vulnerabilities)):
            continue
        rows = add(d.conversation)
        add_hints(d, rows)
        bags.append(Bag(
            rows=rows, source="mentalmanip_maj", conversation_id=d.id, manipulative=None,
            techniques=_multi_hot(d.techniques, TECHNIQUES) if d.techniques else None,
            vulnerabilities=_multi_hot(d.vulnerabilities, VULNERABILITIES) if d.vulnerabilities else None,
        ))
    for c in conversations:
        rows = add(c.conversation)
        said_by = np.array([t.speaker for t in c.conversation.turns])
        if c.label == "scam" and c.scammer is not None:
            mine = rows[said_by == c.scammer]
            other = rows[said_by != c.scammer]
            if len(mine):
                bags.append(Bag(rows=mine, source=c.kind, conversation_id=c.id, label=c.label,
                                manipulative=1.0, scam=1.0))
            if len(other):
                bags.append(Bag(rows=other, source=c.kind, conversation_id=c.id, label=c.label,
                                manipulative=0.0, scam=0.0, negative_turns=True))
        else:
            bags.append(Bag(rows=rows, source=c.kind, conversation_id=c.id, label=c.label,
                            manipulative=0.0, scam=0.0, negative_turns=True))
    for c in exchanges:
        rows = add(c.conversation)
        marked = np.zeros(len(rows), bool)
        if c.label == "manipulative":
            marked[list(c.manipulative_turns) if c.manipulative_turns is not None else [-1]] = True
        for r in rows[marked]:
            bags.append(Bag(rows=np.array([r]), source=c.kind, conversation_id=c.id, label=c.label,
                            manipulative=1.0))
        if (~marked).any():
            bags.append(Bag(rows=rows[~marked], source=c.kind, conversation_id=c.id, label=c.label,
                            manipulative=0.0, scam=0.0, negative_turns=True))
    for conversation, label in pairs:
        rows = add(conversation)
        bags.append(Bag(rows=rows[-1:], source="augment", conversation_id=conversation.id,
                        label="manipulative" if label else "benign", manipulative=label))
    features = np.vstack(chunks) if chunks else np.zeros((0, 0), np.float32)
    return TrainingSet(features=features, bags=bags, texts=texts, speakers=speakers)


def by_conversation(bags: Sequence[Bag]) -> dict[tuple[str, str], list[Bag]]:
    """Bags grouped by (source, conversation id), in first-seen order."""
    groups: dict[tuple[str, str], list[Bag]] = {}
    for b in bags:
        groups.setdefault((b.source, b.conversation_id), []).append(b)
    return groups


def conversation_pairs(texts: Sequence[str], rows: np.ndarray) -> list[tuple[str, str]]:
    """(turn, turn before) of each row of one conversation (its rows are consecutive in the corpus; the
    smallest is its first turn), as the detector reads a window (`reply_pair.reply_pairs`)."""
    first = int(rows.min())
    return [(texts[int(r)], texts[int(r) - 1] if int(r) > first else NO_REQUEST) for r in rows]
