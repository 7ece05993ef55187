"""What happens to a screened turn: the policy, the failure policy, and the exceptions they raise.

Kept apart from the middleware so `guard()` and `GuardianMiddleware` decide the same
way: a flag under each policy, and a screen that failed (a detector raised, timed out
or could not load, recorded in the Assessment's `errors`) under each `on_error`.

The default `on_error="pass"` is fail-open, as before: a broken detector never breaks
the chatbot, the message passes, and the failure is recorded and counted. A platform
that must not show an unscreened reply chooses `"block"` (fail-closed: the safe reply
/ refusal / withheld tool result) or `"raise"` (`GuardianScreenError`, for the
application to handle).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from guardian.agents._screening import Direction, summary
from guardian.findings import Assessment

AgentPolicy = Literal["observe", "warn", "block", "review", "raise"]
"""`observe` annotates; `warn` also appends a notice; `block` replaces a flagged reply
(refuses a flagged user turn, withholds a flagged tool result); `review` pauses the graph
for a person (`interrupt()`, HumanInTheLoopMiddleware's request shape); `raise` raises
`GuardianViolation` (LangChain's `exit_behavior="error"`)."""

OnError = Literal["pass", "block", "raise"]
"""What a failed screen does: `pass` (fail-open, the default), `block` (fail-closed) or
`raise` (`GuardianScreenError`)."""

Action = Literal["observed", "warned", "blocked", "review", "raise"]

POLICIES: tuple[str, ...] = ("observe", "warn", "block", "review", "raise")
ON_ERROR: tuple[str, ...] = ("pass", "block", "raise")

_ON_FLAG: dict[str, Action] = {"observe": "observed", "warn": "warned", "block": "blocked", "review": "review", "raise": "raise"}
_ON_FAILURE: dict[str, Action] = {"pass": "observed", "block": "blocked", "raise": "raise"}

DEFAULT_ERROR_REPLY = (
    "I'm sorry, I can't send a reply right now: it could not be checked for manipulation. "
    "Please try again in a moment."
)
DEFAULT_INPUT_ERROR_REPLY = (
    "I can't continue with this request right now: the message could not be checked. "
    "Please try again in a moment."
)


class GuardianViolation(Exception):
    """`policy="raise"`: a screened turn was flagged. Carries the Assessment.

    LangChain's `exit_behavior="error"` convention (`ModelCallLimitExceededError`,
    `PIIDetectionError`): the agent run stops with this exception and the application
    decides what the user sees.
    """

    def __init__(self, assessment: Assessment, *, direction: str, message_id: str | None = None) -> None:
        self.assessment = assessment
        self.direction = direction
        self.message_id = message_id
        super().__init__(self._describe())

    def _describe(self) -> str:
        return "guardian: " + summary(assessment=self.assessment, direction="output" if self.direction == "output" else "input")


class GuardianScreenError(GuardianViolation):
    """`on_error="raise"`: the screen failed (a detector raised, timed out or is unavailable),
    so the turn could not be checked. `assessment.errors` says which and why."""

    def _describe(self) -> str:
        causes = "; ".join(f"{e.detector} ({e.kind}): {e.message}" for e in self.assessment.errors)
        return f"guardian could not screen this {self.direction} turn: {causes or 'unknown error'}"


def failed_screen(assessment: Assessment, *, flagged: bool) -> bool:
    """A screen that did not reach a verdict it can stand on: some detector failed and nothing flagged.

    A flag from a detector that did answer wins: the turn is handled as flagged.
    """
    return not flagged and bool(assessment.errors)


def decide(assessment: Assessment, *, flagged: bool, policy: AgentPolicy, on_error: OnError) -> Action:
    """The action for one screened turn (the caller carries it out)."""
    if flagged:
        return _ON_FLAG[policy]
    if failed_screen(assessment, flagged=flagged):
        return _ON_FAILURE[on_error]
    return "observed"


def check_options(*, policy: str, on_error: str, allowed: Sequence[str] = POLICIES) -> None:
    """One plain sentence for a wrong option (the constructor's ValueError)."""
    if policy not in allowed:
        names = ", ".join(repr(p) for p in allowed)
        raise ValueError(f"policy must be one of {names}, not {policy!r}")
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be 'pass', 'block' or 'raise', not {on_error!r}")


def chosen_directions(directions: Sequence[Direction] | None, apply_to_input: bool | None, apply_to_output: bool | None) -> frozenset[Direction]:
    """LangChain's spelling (apply_to_input/apply_to_output) or the older `directions=`, not both."""
    if directions is not None:
        if apply_to_input is not None or apply_to_output is not None:
            raise ValueError("give either directions= or apply_to_input/apply_to_output, not both")
        unknown = set(directions) - {"input", "output"}
        if unknown:
            raise ValueError(f"directions must be 'input' and/or 'output', not {sorted(unknown)}")
        return frozenset(directions)
    chosen: list[Direction] = []
    if apply_to_input is not False:
        chosen.append("input")
    if apply_to_output is not False:
        chosen.append("output")
    return frozenset(chosen)


__all__ = [
    "DEFAULT_ERROR_REPLY",
    "DEFAULT_INPUT_ERROR_REPLY",
    "AgentPolicy",
    "GuardianScreenError",
    "GuardianViolation",
    "OnError",
    "check_options",
    "chosen_directions",
    "decide",
    "failed_screen",
]
