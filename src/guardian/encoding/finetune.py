"""The training loop shared by every MiniLM fine-tuning in guardian (and its experiment scripts).

Why its own module: the shipped intent model and the experiment scripts
(`lab/intent_finetune.py`, `scripts/local_finetune.py`) must train the same way,
or the figures in docs/ would not describe the product. AdamW with linear
warm-up and decay, length-bucketed batches (less padding: several times faster on
CPU), a bfloat16 autocast forward where the CPU has native bfloat16 (else float32: emulated
bfloat16 made a step 9.6x slower on an AVX2-only CPU) and a float32 loss. Deterministic for a
seed on one torch thread and one kind of CPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np


def class_weights(labels: Sequence[object], *, power: float) -> dict[str, float]:
    """Per-class loss weights (n / (k * count)) ** power, keyed by `str(label)`: rare classes count more.

    `power` 0 is no re-weighting, 1 fully "balanced". It lives here, below both the linear
    face-act trainer (`detectors.intent.train`) and the fine-tuning (`detectors.intent.tuned_train`), so
    neither imports the other for it (it was the fourth import loop of issue 20).
    """
    counts = Counter(str(y) for y in labels)
    n, k = len(labels), len(counts)
    return {c: (n / (k * m)) ** power for c, m in counts.items()}


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
        rng.shuffle(batches)
        yield from batches


def batches_per_epoch(n: int, size: int) -> int:
    return (n + size - 1) // size


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
    on_step: Callable[[int, float], None] | None = None,
    on_epoch: Callable[[int, float], None] | None = None,
    eval_modules: tuple[Any, ...] = (),
    soft: np.ndarray | None = None,
    soft_share: float = 0.0,
    temperature: float = 1.0,
    row_weight: np.ndarray | None = None,
) -> None:
    """AdamW with linear warm-up/decay; bf16 autocast forward on CPUs with native bf16, float32 cross-entropy.

    `row_weight` ((n,), mean 1): each row's share of the loss, on top of the class `weight` (the
    reply head weighs groups of negatives apart: a benign chatbot reply counts more than an
    ordinary turn; `detectors.local.reply_pair_train`).

    With `soft` ((n, classes) probabilities from a teacher, already softened at `temperature`),
    the loss is `(1 - soft_share)` of the weighted cross-entropy with `labels` plus `soft_share`
    of the cross-entropy with the teacher at `temperature` (scaled by its square, so the two
    parts' gradients keep their size whatever the temperature: Hinton et al., 2015).

    `on_step(step, loss)` after every batch (progress bars), `on_epoch(epoch, total_loss)` after
    every epoch. `eval_modules` stay in eval mode while the rest trains (frozen parts whose
    dropout should not fire, e.g. the embeddings).
    """
    import torch

    from guardian.encoding.sentence_encoder import native_bfloat16

    bf16 = native_bfloat16()
    optimizer = torch.optim.AdamW(param_groups, weight_decay=0.01)
    scheduler = warmup_linear(optimizer, epochs * batches_per_epoch(len(train), size))
    rng = np.random.default_rng(seed)
    step = 0
    for epoch in range(epochs):
        model.train()
        for module in eval_modules:
            module.eval()
        total = 0.0
        for b in bucketed_batches(rng, train, size, length):
            inputs = make_batch(b)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(*inputs)
            if row_weight is None:
                loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(labels[b]), weight=weight)
            else:
                per_row = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(labels[b]), weight=weight,
                                                            reduction="none")
                loss = (per_row * torch.from_numpy(np.asarray(row_weight[b], dtype=np.float32))).mean()
            if soft is not None and soft_share > 0:
                taught = torch.nn.functional.cross_entropy(logits.float() / temperature, torch.from_numpy(soft[b]))
                loss = (1.0 - soft_share) * loss + soft_share * temperature**2 * taught
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            total += float(loss.item())
            step += 1
            if on_step is not None:
                on_step(step, float(loss.item()))
        if on_epoch is not None:
            on_epoch(epoch, total)
    model.eval()


def train_pairs(
    pairs: Sequence[tuple[str, str]],
    y: np.ndarray,
    *,
    classes: Sequence[Any],
    config: Any,
    factory: Any,
    class_weight: Sequence[float] | None = None,
    row_weight: np.ndarray | None = None,
    soft: np.ndarray | None = None,
    start: Any = None,
    progress: Callable[[int, int], None] | None = None,
) -> Any:
    """Fine-tune a pair classifier (`encoding.pair_classifier`) on `pairs` with labels `y` (indices into
    `classes`): the encoder's layers at `config.lr`, a fresh head at `config.head_lr` (or `start`'s
    network, `start` a trained one), the word embeddings frozen. Returns `factory.from_network(...)`.
    Deterministic for a seed on one thread. `soft`: a teacher's softened probabilities (`fit`).
    """
    from transformers import AutoTokenizer

    from guardian.encoding.encoders import encoder_path
    from guardian.encoding.pair_classifier import build_network, pad, tokenize_pairs, torch_module

    torch = torch_module()
    tokenizer = AutoTokenizer.from_pretrained(str(encoder_path(config.encoder)), local_files_only=True)
    ids, types = tokenize_pairs(tokenizer, pairs, config.max_len)
    torch.manual_seed(config.seed)
    net = start.network() if start is not None else build_network(len(classes), config)
    total = config.epochs * batches_per_epoch(len(y), config.batch_size)
    weight = torch.tensor(list(class_weight), dtype=torch.float32) if class_weight is not None else None
    fit(
        net,
        [{"params": net.base.encoder.parameters(), "lr": config.lr},
         {"params": net.out.parameters(), "lr": config.head_lr}],
        np.arange(len(y)), epochs=config.epochs, size=config.batch_size, length=lambda i: len(ids[i]),
        make_batch=lambda b: pad(torch, [ids[i] for i in b], [types[i] for i in b]),
        labels=y, seed=config.seed, weight=weight,
        on_step=(lambda step, _loss: progress(step, total)) if progress is not None else None,
        eval_modules=(net.base.embeddings,),
        soft=soft, soft_share=config.soft_share, temperature=config.temperature,
        row_weight=row_weight,
    )
    return factory.from_network(net, classes, config)
