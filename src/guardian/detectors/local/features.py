"""Features of one turn in the context of the turns before it, speaker-aware.

The turn model judges *this turn, by this speaker*: its input is the turn's own
MiniLM vector beside two views of its context, the turn it answers (the previous
turn, whoever said it) and what the same speaker said recently. Nothing in it
grows with the length of the conversation (no pooling over the whole window, no
position), which is what made the dialogue-level model's score climb as harmless
talk went on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from guardian.conversation import Turn
from guardian.encoding.sentence_encoder import DIM

#: How many earlier turns the "same speaker recently" view looks back over.
OWN_LOOKBACK = 6

#: How many turns (this one included) the "conversation so far" view averages.
CONTEXT_TURNS = 10

#: Feature width: turn, previous turn, own recent turns, turn * previous, two presence flags.
WIDTH = 4 * DIM + 2
#: ... and, with `context=True`, the mean of the last CONTEXT_TURNS turns (a mean: it does not grow).
CONTEXT_WIDTH = WIDTH + DIM

Embed = Callable[[Sequence[str]], np.ndarray]


def turn_rows(
    turns: Sequence[Turn], vectors: np.ndarray, *, rows: Sequence[int] | None = None, context: bool = False
) -> np.ndarray:
    """Feature rows of `turns[i]` for i in `rows` (all by default); `vectors[i]` embeds `turns[i]`."""
    chosen = range(len(turns)) if rows is None else rows
    out = np.zeros((len(chosen), CONTEXT_WIDTH if context else WIDTH), dtype=np.float32)
    for r, i in enumerate(chosen):
        u = vectors[i]
        out[r, :DIM] = u
        if i > 0:
            prev = vectors[i - 1]
            out[r, DIM : 2 * DIM] = prev
            out[r, 3 * DIM : 4 * DIM] = u * prev
            out[r, 4 * DIM] = 1.0
        own = [j for j in range(max(0, i - OWN_LOOKBACK), i) if turns[j].speaker == turns[i].speaker]
        if own:
            out[r, 2 * DIM : 3 * DIM] = vectors[own].mean(axis=0)
            out[r, 4 * DIM + 1] = 1.0
        if context:
            out[r, WIDTH:] = vectors[max(0, i + 1 - CONTEXT_TURNS) : i + 1].mean(axis=0)
    return out


def replace_turn_vector(features: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """The same context with another text in the turn's place (a sentence of it, for evidence)."""
    out = features.copy()
    out[:DIM] = vector
    out[3 * DIM : 4 * DIM] = vector * features[DIM : 2 * DIM]
    return out
