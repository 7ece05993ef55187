"""Fine-tuning of the tuned half (training only; the per-turn path reads `tuned`, never this).

`train_tuned` fine-tunes the encoder's layers and a head on (utterance | context) pairs with the
shared loop of `guardian.encoding.finetune`; `train_tuned_cached` reuses a model trained before on
the same inputs (`cache_keys.training_key`), and trains a distillation teacher first when the
config names one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from guardian.detectors.intent.cache_keys import training_key
from guardian.detectors.intent.tuned import (
    TUNED_FILE,
    TuneConfig,
    TunedFaceActs,
    softmax,
)
from guardian.encoding.finetune import batches_per_epoch
from guardian.errors import ModelUnavailable
from guardian.taxonomy import FaceAct


def train_tuned(
    pairs: Sequence[tuple[str, str]],
    labels: Sequence[FaceAct],
    *,
    config: TuneConfig | None = None,
    teacher: np.ndarray | None = None,
    progress: Callable[[int, int], None] | None = None,
    start: TunedFaceActs | None = None,
) -> TunedFaceActs:
    """Fine-tune the encoder's layers and a head on `pairs`. Deterministic for a seed on one thread.

    `start`: go on from that fine-tuned model (its layers, head and classes; `labels` must be among
    them) instead of the shipped encoder with a fresh head: the everyday half learns everyday
    conventions on top of what the persuasion half knows (issue 25).

    `teacher`: another model's logits for `pairs` (columns in `FaceAct` order of the classes
    present); the student then also learns from them, as `config.soft_share` and
    `config.temperature` say (`finetune.fit`).
    """
    from guardian.encoding.finetune import class_weights, train_pairs

    config = config or start.config if start is not None else config or TuneConfig()
    assert config is not None
    if start is not None:
        start = start.with_classes(set(labels))
    classes = list(start.classes) if start is not None else sorted(set(labels), key=list(FaceAct).index)
    y = np.array([classes.index(a) for a in labels])
    weights = class_weights(labels, power=config.class_weight_power)
    soft = None
    if teacher is not None:
        if teacher.shape != (len(y), len(classes)):
            raise ValueError(f"teacher logits are {teacher.shape}, not {(len(y), len(classes))}")
        soft = softmax(teacher, temperature=config.temperature)
    model: TunedFaceActs = train_pairs(
        pairs, y, classes=classes, config=config, factory=TunedFaceActs,
        class_weight=[weights.get(str(c), 1.0) for c in classes], soft=soft, start=start, progress=progress,
    )
    return model


def train_tuned_cached(
    pairs: Sequence[tuple[str, str]],
    labels: Sequence[FaceAct],
    *,
    config: TuneConfig,
    folder: Path | None,
    progress: Callable[[int, int], None] | None = None,
) -> TunedFaceActs:
    """`train_tuned` (after the teacher, when the config names one), or the model a run with
    exactly these inputs saved in `folder` before (None: no cache).

    Why: `guardian eval faceacts --cv` fine-tunes in five folds (an hour on two cores); when
    only inference or the linear half changed, the fold models are the same and need not be
    trained again, and a teacher (45 min for mpnet-6) serves every student trained from it.
    A file that cannot be read or written only costs the training time.
    """
    target = folder / training_key(pairs, labels, config) if folder is not None else None
    if target is not None and (target / TUNED_FILE).is_file():
        try:
            model = TunedFaceActs.load(target)
        except ModelUnavailable:
            pass
        else:
            if progress is not None:  # done, in the units a training run reports (one part of a bar may be cached)
                steps = config.epochs * batches_per_epoch(len(pairs), config.batch_size)
                progress(steps, steps)
            return model
    teacher_config = config.teacher_config()
    logits = None
    if teacher_config is not None:
        teacher = train_tuned_cached(pairs, labels, config=teacher_config, folder=folder,
                                     progress=part_progress(progress, 0, 2))
        logits = teacher.logits(pairs)
    model = train_tuned(pairs, labels, config=config, teacher=logits,
                        progress=part_progress(progress, 1, 2) if teacher_config is not None else progress)
    if target is not None:
        try:
            model.save(target)
        except OSError:
            pass
    return model


def part_progress(progress: Callable[[int, int], None] | None, part: int, parts: int) -> Callable[[int, int], None] | None:
    """Progress over `parts` equal parts from one part's (step, total)."""
    if progress is None:
        return None
    report = progress
    return lambda step, total: report(part * total + step, parts * total)
