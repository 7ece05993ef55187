"""guardian inside LangChain: middleware, a runnable wrapper, a callback handler.

The LLM detectors (`LLMDetector`, `CascadeDetector`, `IntentAgent`) live in
`guardian.detectors.llm` beside the other detectors; they are still exported here so
existing imports keep working.

Importing `guardian.agents` stays light: every public name is imported on first
access (PEP 562 `__getattr__`), so `import guardian.agents` loads neither
LangChain nor any model. Teammates adding modules here: add one line to
`_LAZY` and to `__all__`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guardian.agents.callbacks import GuardianCallbackHandler
    from guardian.agents.guard import GuardedRunnable, guard
    from guardian.agents.middleware import GuardianMiddleware, GuardianState
    from guardian.agents.policy import GuardianScreenError, GuardianViolation
    from guardian.agents.types import GuardianEvent
    from guardian.detectors.llm.cascade import CascadeDetector
    from guardian.detectors.llm.client import chat_model_from_settings
    from guardian.detectors.llm.intent import IntentAgent
    from guardian.detectors.llm.manipulation import LLMDetector

_LAZY: dict[str, str] = {
    # name -> module (relative to guardian.agents)
    "GuardianMiddleware": "middleware",
    "GuardianState": "middleware",
    "GuardianViolation": "policy",
    "GuardianScreenError": "policy",
    "GuardianEvent": "types",
    "guard": "guard",
    "GuardedRunnable": "guard",
    "GuardianCallbackHandler": "callbacks",
    # the LLM detectors live in guardian.detectors.llm; still exported here (absolute paths)
    "LLMDetector": "guardian.detectors.llm.manipulation",
    "CascadeDetector": "guardian.detectors.llm.cascade",
    "IntentAgent": "guardian.detectors.llm.intent",
    "chat_model_from_settings": "guardian.detectors.llm.client",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'guardian.agents' has no attribute {name!r}")
    value = getattr(import_module(module if "." in module else f"guardian.agents.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "CascadeDetector",
    "GuardedRunnable",
    "GuardianCallbackHandler",
    "GuardianEvent",
    "GuardianMiddleware",
    "GuardianScreenError",
    "GuardianState",
    "GuardianViolation",
    "IntentAgent",
    "LLMDetector",
    "chat_model_from_settings",
    "guard",
]
