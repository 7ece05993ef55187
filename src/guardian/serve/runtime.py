"""What the routes share (one `Runtime` per app, so per uvicorn worker) and the error they raise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guardian.config import ServeSettings
from guardian.detectors.base import Detector
from guardian.monitor import Monitor
from guardian.serve.auth import ANONYMOUS, RateLimiter, TokenCheck, bearer
from guardian.serve.conversations import Conversations
from guardian.serve.metrics import ServeMetrics
from guardian.serve.schemas import TurnIn
from guardian.serve.state import StateStore


class ServiceError(Exception):
    """An answer other than success: HTTP status, stable code, one sentence."""

    def __init__(self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


@dataclass
class Runtime:
    """What the routes share; one per app (so per uvicorn worker)."""

    config: ServeSettings
    metrics: ServeMetrics
    tokens: TokenCheck
    limiter: RateLimiter
    #: failed authentications per client address: a wrong token costs a guesser time, not us
    failures: RateLimiter
    store: StateStore | None = None
    detectors: list[Detector] = field(default_factory=list)
    monitor: Monitor | None = None
    conversations: Conversations | None = None
    status: str = "starting"
    failure: str | None = None
    calls: Any = None  # guardian.serve.audio.CallHub, created on the first call

    def require(self) -> Conversations:
        if self.conversations is None:
            if self.status == "failed":
                raise ServiceError(503, "unavailable", f"the detectors could not start ({self.failure})")
            raise ServiceError(503, "starting", "the detectors are still loading; retry in a few seconds",
                               headers={"Retry-After": "2"})
        return self.conversations

    def admit(self, authorization: str | None, *, token: str | None = None, address: str | None = None) -> str:
        """The client's id after the token check and the rate limits; raises ServiceError.

        `address` is the client's network address: failed authentications are limited per
        address, and while one is held back even a right token waits (429), so a guesser
        never learns which of its guesses would have passed."""
        if not self.tokens.required:
            return self._limited(ANONYMOUS)
        where = address or "unknown"
        held = self.failures.wait(where)
        if held > 0:
            raise ServiceError(429, "rate_limited",
                               f"too many failed authentications from this address; retry in {held:.2f} s",
                               headers={"Retry-After": str(max(1, round(held)))})
        client = self.tokens.identify(bearer(authorization) or token)
        if client is None:
            self.failures.take(where)
            raise ServiceError(401, "unauthorized", "send a valid token as 'Authorization: Bearer <token>'",
                               headers={"WWW-Authenticate": "Bearer"})
        return self._limited(client)

    def _limited(self, client: str) -> str:
        wait = self.limiter.take(client)
        if wait > 0:
            raise ServiceError(429, "rate_limited", f"too many requests for this token; retry in {wait:.2f} s",
                               headers={"Retry-After": str(max(1, round(wait)))})
        return client


def check_screen(rt: Runtime, turns: int) -> None:
    """A whole conversation is screened in one request, and its time grows with its turns (3,000 took
    27 s of one worker): past the cap the client sends it in parts, or turn by turn."""
    limit = rt.config.max_screen_turns
    if turns > limit:
        raise ServiceError(413, "too_many_turns",
                           f"the conversation has {turns} turns and the limit is {limit} (serve.max_screen_turns); "
                           f"screen it in parts of at most {limit} turns or post its turns to "
                           "/v1/conversations/{id}/turns")


def check_turn(rt: Runtime, turn: TurnIn) -> None:
    limit = rt.config.max_turn_chars
    if len(turn.text) > limit:
        raise ServiceError(422, "turn_too_long",
                           f"the turn is {len(turn.text)} characters; the limit is {limit} (serve.max_turn_chars)")
