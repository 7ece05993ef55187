"""Progress bars on stderr for long work (training, embedding, evaluation), one library: tqdm."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

#: Progress callback: (step description, steps done, steps total).
Progress = Callable[[str, int, int], None]


def tqdm_progress(description: str) -> Progress:
    """A Progress callback drawing one tqdm bar per kind of step (the step's first word), created lazily."""
    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def update(step: str, done: int, total: int) -> None:
        kind = step.split(" ")[0] if step else ""
        if kind not in bars:
            label = f"{description}: {kind}" if kind else description
            bars[kind] = tqdm(total=total, desc=label, file=sys.stderr, leave=True)
        bar = bars[kind]
        if step:
            bar.set_postfix_str(step, refresh=False)
        bar.n = done
        bar.refresh()
        if done >= total:
            bar.close()

    return update
