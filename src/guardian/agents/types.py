"""The public types of the chatbot integration: what callbacks receive, and the option names.

`GuardianMiddleware`, `guard()` and `GuardianCallbackHandler` share these; they live in
a public module (rather than the private screening engine) so an application can
import and type against them (`from guardian.agents import GuardianEvent`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from guardian.findings import Assessment

Direction = Literal["input", "output"]
"""`input`: what the user says, screened before the model sees it (a user socially
engineering the bot). `output`: what the model says, screened before the user sees it
(a bot manipulating its user)."""

Policy = Literal["observe", "warn", "block"]


@dataclass(frozen=True, slots=True)
class GuardianEvent:
    """What `on_finding` callbacks receive: one screened turn that was flagged."""

    direction: Direction
    thread_id: str | None
    assessment: Assessment
    action: str
    text: str
    message_id: str | None = None
    time: float = field(default_factory=time.time)


FindingCallback = Callable[[GuardianEvent], Any]

__all__ = ["Direction", "FindingCallback", "GuardianEvent", "Policy"]
