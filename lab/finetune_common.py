"""What the lab's fine-tuning experiments share: the product's own training loop
(`guardian.encoding.finetune`) with a per-epoch log line, and their `--name value` options."""

from __future__ import annotations

import sys
import time
from typing import Any

from guardian.encoding.finetune import fit as _fit


def option(argv: list[str], name: str, default: str) -> str:
    """The value after `name` in `argv`, else `default`."""
    return argv[argv.index(name) + 1] if name in argv else default


def fit(*args: Any, tag: str = "", **kwargs: Any) -> None:
    started = time.time()

    def log(epoch: int, total: float) -> None:
        print(f"{tag} epoch {epoch} loss {total:.1f} {time.time() - started:.0f}s", file=sys.stderr, flush=True)

    _fit(*args, on_epoch=log, **kwargs)


def train_half_and_save(x: list[tuple[str, str]], y: list[Any], *, start: Any, epochs: int, lr: float, seed: int,
                        out: Any, started: float) -> None:
    """Fine-tune an everyday half from `start` (a `TunedFaceActs`) on pairs `x` with acts `y`, logging every
    20 steps, and save it as OUT/tuned.npz: the tail the round-7 and round-8 scripts share."""
    from dataclasses import replace

    from guardian.detectors.intent.tuned_train import train_tuned

    half = train_tuned(x, y, config=replace(start.config, epochs=epochs, lr=lr, seed=seed), start=start,
                       progress=lambda s, n: print(f"step {s}/{n} {time.time() - started:.0f} s", flush=True)
                       if s % 20 == 0 else None)
    out.mkdir(parents=True, exist_ok=True)
    half.save(out)
    print(f"trained on {len(x)} pairs in {time.time() - started:.0f} s -> {out}", flush=True)
