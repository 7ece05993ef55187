"""The LLM detectors: an OpenAI-compatible model's second opinion, and the cascade in front of it.

`manipulation` (`LLMDetector`: few-shot prompt, self-consistency votes, grounded quotes),
`parsing` (the answer schema and the vote), `intent` (the two-phase intent agent),
`cascade` (`CascadeDetector`: the local model first, the LLM only in its uncertain band),
`client` (the chat-model client, usage and failures), `prompting` (prompt files, fencing).
Names are imported on first access, so importing the package loads no LangChain.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guardian.detectors.llm.cascade import CascadeDetector
    from guardian.detectors.llm.manipulation import LLMDetector

_LAZY = {"LLMDetector": "manipulation", "CascadeDetector": "cascade"}

__all__ = ["CascadeDetector", "LLMDetector"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'guardian.detectors.llm' has no attribute {name!r}")
    value = getattr(import_module(f"guardian.detectors.llm.{module}"), name)
    globals()[name] = value
    return value
