"""The cross-validation folds every model experiment shares.

One definition, so the local model, the intent features and any ablation are
compared on exactly the same held-out dialogues.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.model_selection import StratifiedKFold

from guardian.corpora.datasets import LabelledDialogue

DEFAULT_FOLDS = 5
DEFAULT_SEED = 17


def mentalmanip_folds(
    dialogues: Sequence[LabelledDialogue], *, k: int = DEFAULT_FOLDS, seed: int = DEFAULT_SEED
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified k folds by dialogue (train indices, test indices)."""
    labels = np.array([int(d.manipulative) for d in dialogues])
    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return [(tr, te) for tr, te in splitter.split(np.zeros(len(labels)), labels)]


def conversation_folds(
    conversation_ids: Sequence[str], *, k: int = DEFAULT_FOLDS, seed: int = DEFAULT_SEED
) -> list[tuple[np.ndarray, np.ndarray]]:
    """k folds that keep each conversation whole (face acts: never split by utterance)."""
    unique = sorted(set(conversation_ids))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(unique))
    fold_of = {unique[j]: i % k for i, j in enumerate(order)}
    ids = np.array([fold_of[c] for c in conversation_ids])
    return [(np.flatnonzero(ids != f), np.flatnonzero(ids == f)) for f in range(k)]
