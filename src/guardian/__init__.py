"""guardian: a conversational safety assistant.

It watches a conversation and, after every turn, says whether someone is being
manipulated, by which tactic, aimed at which vulnerability, and quotes the words.
"""

from __future__ import annotations

from guardian._env import apply_offline_defaults

apply_offline_defaults()

from guardian.conversation import Conversation, Evidence, Turn  # noqa: E402
from guardian.findings import Assessment, DetectorError, Finding, Intent  # noqa: E402

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
