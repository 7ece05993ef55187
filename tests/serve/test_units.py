"""The small parts without a server: tokens, the rate limit, and the command's refusals."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from guardian.serve.auth import ANONYMOUS, RateLimiter, TokenCheck, bearer, hash_token, new_token


def test_tokens_are_checked_by_their_hash() -> None:
    token = new_token()
    check = TokenCheck([hash_token(token)])
    assert check.required
    assert check.identify(token) == hash_token(token)[7:19]
    assert check.identify(token + "x") is None
    assert check.identify(None) is None
    assert check.identify("") is None
    assert TokenCheck([]).identify(None) == ANONYMOUS
    assert bearer("Bearer abc") == "abc"
    assert bearer("bearer  abc ") == "abc"
    assert bearer("Basic abc") is None
    assert bearer("Bearer") is None
    assert bearer(None) is None


def test_the_rate_limit_is_a_token_bucket() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)
    assert limiter.take("b") == 0.0  # another client has its own bucket
    now[0] = 0.5
    assert limiter.take("a") == 0.0
    assert limiter.take("a") > 0
    assert RateLimiter(rate=0, burst=1).take("a") == 0.0


@pytest.mark.parametrize(
    ("env", "args", "says"),
    [
        ({}, ["--host", "0.0.0.0"], "no tokens are configured"),
        ({"GUARDIAN_SERVE__TOKENS": '["abc"]'}, [], "tokens are stored hashed"),
        ({"GUARDIAN_SERVE__STATE_URL": "postgres://x"}, [], "use sqlite:///path or redis://"),
        ({}, ["--workers", "0"], "--workers must be at least 1"),
    ],
)
def test_the_command_refuses_bad_settings_in_one_sentence(env: dict[str, str], args: list[str], says: str) -> None:
    done = subprocess.run([sys.executable, "-m", "guardian.cli", "serve", *args],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
