"""What the two fine-tuning experiments (intent_finetune.py, local_finetune.py) share: the
product's own training loop (`guardian.encoding.finetune`), with a per-epoch log line."""

from __future__ import annotations

import sys
import time
from typing import Any

from guardian.encoding.finetune import fit as _fit


def fit(*args: Any, tag: str = "", **kwargs: Any) -> None:
    started = time.time()

    def log(epoch: int, total: float) -> None:
        print(f"{tag} epoch {epoch} loss {total:.1f} {time.time() - started:.0f}s", file=sys.stderr, flush=True)

    _fit(*args, on_epoch=log, **kwargs)
