"""Train / dev / test parts of the labelled conversations, by conversation, from the id alone.

Training and every held-out check must agree on which conversations are held out,
even when they read different files, in a different order, in different processes.
So the part is a pure function of the conversation id: a SHA-1 of "seed:id" read
as a number in [0, 1) puts the id in `test` below `test_share`, in `dev` below
`test_share + dev_share`, else in `train`. Nothing is stored; adding or removing
conversations never moves the others. (`guardian.corpora.conversations.split_of`
uses the same hash and shares.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from guardian.corpora.conversations import position

Part = Literal["train", "dev", "test"]
PARTS: tuple[Part, ...] = ("train", "dev", "test")

DEFAULT_SEED = 17
#: Share of conversations held out for the final figures.
TEST_SHARE = 0.20
#: Share held out for tuning (thresholds, early stopping); the rest is `train`.
DEV_SHARE = 0.15


_position = position


def split_of(
    conversation_id: str, *, seed: int = DEFAULT_SEED, test_share: float = TEST_SHARE, dev_share: float = DEV_SHARE
) -> Part:
    """The part `conversation_id` belongs to: the same answer for the same id, seed and shares."""
    if test_share < 0.0 or dev_share < 0.0 or test_share + dev_share > 1.0:
        raise ValueError("test_share and dev_share must be non-negative and add up to at most 1")
    position = _position(conversation_id, seed)
    if position < test_share:
        return "test"
    if position < test_share + dev_share:
        return "dev"
    return "train"


@dataclass(frozen=True, slots=True)
class ConversationSplit:
    """The ids of each part, in the order they were given."""

    train: tuple[str, ...]
    dev: tuple[str, ...]
    test: tuple[str, ...]

    def part(self, name: Part) -> tuple[str, ...]:
        return {"train": self.train, "dev": self.dev, "test": self.test}[name]


def conversation_split(
    ids: Iterable[str], *, seed: int = DEFAULT_SEED, test_share: float = TEST_SHARE, dev_share: float = DEV_SHARE
) -> ConversationSplit:
    """Split conversation ids into train / dev / test with `split_of` (duplicates kept once)."""
    parts: dict[Part, list[str]] = {p: [] for p in PARTS}
    for conversation_id in dict.fromkeys(ids):
        parts[split_of(conversation_id, seed=seed, test_share=test_share, dev_share=dev_share)].append(conversation_id)
    return ConversationSplit(train=tuple(parts["train"]), dev=tuple(parts["dev"]), test=tuple(parts["test"]))
