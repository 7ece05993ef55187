"""guardian: a conversational safety assistant.

It watches a conversation and, after every turn, says whether someone is being
manipulated, by which tactic, aimed at which vulnerability, and quotes the words.

Importing guardian changes nothing in the process: thread and offline settings are applied
when guardian starts work (the CLI, a detector, a model load; see `guardian._env`).
"""

from __future__ import annotations

from guardian.conversation import Conversation, Evidence, Turn
from guardian.findings import Assessment, DetectorError, Finding, Intent

__version__ = "0.1.0"

__all__ = [
    "Assessment",
    "Conversation",
    "DetectorError",
    "Evidence",
    "Finding",
    "Intent",
    "Turn",
    "__version__",
]
