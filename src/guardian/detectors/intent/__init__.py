"""The intent detector: face acts per utterance, who asks whom, persuasion patterns over turns.

Per-turn path: `detector` (the Detector), `model` (the linear half and the blend),
`tuned` (the fine-tuned half at run time, ONNX int8), `features`, `domain` (the everyday
gate), `patterns`. Training only, never imported by those: `train`, `tuned_train`,
`cache_keys`, `domain_train`, and `cli` (the Typer glue of `guardian train-intent` and
`guardian eval faceacts`). `IntentDetector` is imported on first access, so a training
module does not load the detector by importing this package.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guardian.detectors.intent.detector import IntentDetector

__all__ = ["IntentDetector"]


def __getattr__(name: str) -> Any:
    if name != "IntentDetector":
        raise AttributeError(f"module 'guardian.detectors.intent' has no attribute {name!r}")
    value = import_module("guardian.detectors.intent.detector").IntentDetector
    globals()[name] = value
    return value
