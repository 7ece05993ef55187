"""Training-only additions to the turn model's corpus: MentalManip turns re-framed as replies to an
ordinary request, and the key-phrase hint that picks which turns of a manipulative dialogue carry it.

Why apart from `train`: the recipe (fit, calibration) reads better without the data tricks. The hint
reads MentalManip's key phrases through the paper's matching rule in `guardian.corpora.keyphrases`,
the same rule the `keyphrases` detector uses, so no detector package imports another.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from guardian.conversation import Conversation
from guardian.corpora.datasets import LabelledDialogue


def reframed_pairs(
    dialogues: Sequence[LabelledDialogue], others: Sequence[Any], *, seed: int
) -> list[tuple[Conversation, float]]:
    """MentalManip turns re-framed as a reply to an ordinary request from another kind of conversation.

    Why: every turn of the assistant and everyday corpora is harmless, so a model can learn "this
    register is harmless" instead of "these words are harmless". A key-phrase turn of a
    manipulative dialogue (positive) and any turn of a non-manipulative one (negative), each
    placed after a user turn of a task dialogue, break that confound. Train part only.
    """
    rng = np.random.default_rng(seed)
    openers = [c.conversation.turns[0].text for c in others if c.kind == "sgd" and c.conversation.turns]
    if not openers:
        return []
    out: list[tuple[Conversation, float]] = []
    for d in dialogues:
        turns = d.conversation.turns
        chosen = [t for t in turns if key_phrase_hint(t.text)] if d.manipulative else list(turns)
        for t in chosen:
            opener = openers[int(rng.integers(len(openers)))]
            conversation = Conversation.from_pairs([("User", opener), ("Assistant", t.text)], id=d.id)
            out.append((conversation, 1.0 if d.manipulative else 0.0))
    return out


def key_phrase_hint(text: str) -> bool:
    """Whether a sentence of `text` matches one of MentalManip's key phrases (the paper's length rule)."""
    from guardian.corpora.keyphrases import match_sentence
    from guardian.grounding import sentences

    return any(match_sentence(s.text) for s in sentences(text))


#: Words a speaker says while thinking, as transcripts write them.
FILLERS = ("uh", "um", "you know", "i mean", "like", "so", "well")


def spoken(text: str, rng: np.random.Generator) -> str:
    """`text` as a transcript of speech writes it: lower case, no punctuation but apostrophes and hyphens,
    a filler before about one word in ten, about one word in thirty said twice.

    Why: every conversation we train on is written, and real telephone transcripts are not; on the
    held-out parts re-written this way, heated but fair arguments were flagged twice as often
    (`lab/turn_register_stress.py`, which replays them with this function)."""
    out: list[str] = []
    for word in re.sub(r"[^\w\s'-]", " ", text.lower()).split():
        if rng.random() < 0.1:
            out.append(FILLERS[int(rng.integers(len(FILLERS)))])
        out.append(word)
        if rng.random() < 1 / 30:
            out.append(word)
    return " ".join(out) or "mm"
