"""The local detector: a turn-level manipulation model on CPU (the default everyone gets).

Per-turn path: `detector` (the Detector), `model` (NumPy weights), `features`,
`scam_requests`. Training only, never imported by those: `corpus`, `data`, `augment`, `labels`,
`reply`, `train` (what `guardian train` runs). `LocalModelDetector` is imported on first access,
so importing a training module does not load the detector, and the reverse never happens.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guardian.detectors.local.detector import LocalModelDetector

__all__ = ["LocalModelDetector"]


def __getattr__(name: str) -> Any:
    if name != "LocalModelDetector":
        raise AttributeError(f"module 'guardian.detectors.local' has no attribute {name!r}")
    value = import_module("guardian.detectors.local.detector").LocalModelDetector
    globals()[name] = value
    return value
