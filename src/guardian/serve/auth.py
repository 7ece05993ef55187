"""Bearer tokens (kept only as SHA-256 hashes) and the rate limits: per token, and on failed
authentication per client address.

Tokens are long random strings (`guardian serve --new-token`), so one SHA-256 is the right
hash: nothing to brute-force, and checking costs microseconds per request. A leaked config
file gives no usable token. With no tokens configured the service accepts every request,
which `guardian serve` allows only on a loopback address.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: What a client sent when there is no token configuration (loopback only): one shared bucket.
ANONYMOUS = "anonymous"


def hash_token(token: str) -> str:
    """The form a token is stored in: 'sha256:<hex>'."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh token (256 random bits, URL-safe)."""
    return "gdn_" + secrets.token_urlsafe(32)


class TokenCheck:
    """Which configured token (by its hash) a presented bearer token is, if any."""

    def __init__(self, hashed: Iterable[str]) -> None:
        self._hashes = tuple(hashed)

    @property
    def required(self) -> bool:
        return bool(self._hashes)

    def identify(self, presented: str | None) -> str | None:
        """The token's id (the first 12 hex digits of its hash: safe to log), or None when refused."""
        if not self._hashes:
            return ANONYMOUS
        if not presented:
            return None
        digest = hash_token(presented)
        found = None
        for known in self._hashes:  # compare with every one, in constant time each
            if hmac.compare_digest(known, digest):
                found = known
        return found[7:19] if found is not None else None


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """A token bucket per client: `rate` requests per second on average, `burst` at once.

    Per process: with several workers or instances each allows the rate (state it in docs,
    divide the rate when that matters). `rate` 0 turns the limit off. At most `max_clients`
    buckets are kept: keyed by client address (failed authentication), anyone could otherwise
    grow the table without end; the least recently seen goes first, and a bucket idle that
    long has refilled anyway, unless one client holds that many addresses at once.
    """

    def __init__(
        self, *, rate: float, burst: int, clock: Callable[[], float] = time.monotonic, max_clients: int = 100_000
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.max_clients = max_clients
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def clients(self) -> int:
        """How many buckets are kept now."""
        return len(self._buckets)

    def take(self, client: str) -> float:
        """0.0 when the request may go ahead, else the seconds to wait before the next one."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            bucket = self._refilled(client, create=True)
            assert bucket is not None
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / self.rate

    def wait(self, client: str) -> float:
        """The seconds `client` must wait before `take` would let it go ahead, taking nothing.

        A client that is not known waits 0 and leaves no bucket behind: asking is free."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            bucket = self._refilled(client, create=False)
        if bucket is None or bucket.tokens >= 1.0:
            return 0.0
        return (1.0 - bucket.tokens) / self.rate

    def _refilled(self, client: str, *, create: bool) -> _Bucket | None:
        now = self._clock()
        bucket = self._buckets.get(client)
        if bucket is None:
            if not create:
                return None
            while len(self._buckets) >= self.max_clients:
                self._buckets.popitem(last=False)
            bucket = self._buckets[client] = _Bucket(float(self.burst), now)
        else:
            self._buckets.move_to_end(client)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) * self.rate)
        bucket.stamp = now
        return bucket
