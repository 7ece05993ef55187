"""What the two fine-tuning experiments (intent_finetune.py, local_finetune.py) share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np


def warmup_linear(optimizer: Any, steps: int, *, warmup: float = 0.06) -> Any:
    """Linear warm-up over the first `warmup` share of `steps`, then linear decay to zero."""
    import torch

    def factor(step: int) -> float:
        return min(1.0, step / max(1.0, warmup * steps)) * max(0.0, (steps - step) / max(1, steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def bucketed_batches(
    rng: np.random.Generator, indices: np.ndarray, size: int, length: Callable[[int], int]
) -> Iterator[list[int]]:
    """One epoch of batches: shuffled, then sorted by length within chunks of 20 batches
    (less padding), the batches of each chunk in random order."""
    perm = rng.permutation(indices)
    for c in range(0, len(perm), size * 20):
        chunk = sorted((int(i) for i in perm[c : c + size * 20]), key=length)
        batches = [chunk[i : i + size] for i in range(0, len(chunk), size)]
        rng.shuffle(batches)  # type: ignore[arg-type]
        yield from batches


def fit(
    model: Any,
    param_groups: list[dict[str, Any]],
    train: np.ndarray,
    *,
    epochs: int,
    size: int,
    length: Callable[[int], int],
    make_batch: Callable[[list[int]], tuple[Any, ...]],
    labels: np.ndarray,
    seed: int,
    weight: Any = None,
    tag: str = "",
) -> None:
    """AdamW with linear warm-up/decay; bf16 autocast forward on CPU, float32 cross-entropy."""
    import sys
    import time

    import torch

    optimizer = torch.optim.AdamW(param_groups, weight_decay=0.01)
    scheduler = warmup_linear(optimizer, epochs * ((len(train) + size - 1) // size))
    rng = np.random.default_rng(seed)
    started = time.time()
    for epoch in range(epochs):
        model.train()
        total = 0.0
        for b in bucketed_batches(rng, train, size, length):
            inputs = make_batch(b)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(*inputs)
            loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(labels[b]), weight=weight)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            total += float(loss.item())
        print(f"{tag} epoch {epoch} loss {total:.1f} {time.time() - started:.0f}s", file=sys.stderr, flush=True)
    model.eval()
