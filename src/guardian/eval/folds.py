"""Moved to `guardian.corpora.folds` (issue 20); kept so existing imports keep working."""

from guardian.corpora.folds import (
    DEFAULT_FOLDS,
    DEFAULT_SEED,
    conversation_folds,
    mentalmanip_folds,
)

__all__ = ["DEFAULT_FOLDS", "DEFAULT_SEED", "conversation_folds", "mentalmanip_folds"]
