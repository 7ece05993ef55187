"""`guardian serve`: check the settings, then run uvicorn with the app factory.

Everything a user can get wrong (no tokens on a public address, a store that cannot be
opened, a bad state_url) is one sentence before uvicorn starts. uvicorn handles SIGTERM and
Ctrl-C: it stops accepting, waits up to `[serve] shutdown_timeout_s` for requests in flight,
then the app's shutdown drains the turns being assessed and closes the store.
"""

from __future__ import annotations

import ipaddress
import logging
import os

from guardian.config import settings
from guardian.errors import GuardianError, InputError


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_server(*, host: str | None, port: int | None, workers: int) -> None:
    import uvicorn

    from guardian.serve.state import open_store

    config = settings().serve
    host = host if host is not None else config.host
    port = port if port is not None else config.port
    if workers < 1:
        raise InputError("--workers must be at least 1")
    if not config.tokens and not is_loopback(host):
        raise InputError(
            f"no tokens are configured, so guardian serve listens on loopback only (not {host}); "
            "add [serve] tokens (guardian serve --new-token) to serve other machines"
        )
    store = open_store(config.state_url)  # a bad path or an unreachable Redis: say so now
    try:
        store.ping()
    except Exception as exc:
        raise GuardianError(
            f"the conversation store {config.state_url or 'in the data dir'} does not answer ({exc})"
        ) from None
    finally:
        store.close()
    # each worker builds the app from the settings (the factory), and the Host check trusts the address
    # the server is bound to: the command line's --host must reach them too
    os.environ["GUARDIAN_SERVE__HOST"] = host
    settings.cache_clear()
    level = settings().log_level
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("guardian.serve").setLevel(min(logging.INFO, logging.getLevelName(level.upper())))
    uvicorn.run(
        "guardian.serve.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=False,  # its lines carry query strings (a WebSocket ?token=); ours do not
        log_level=level,
        timeout_graceful_shutdown=int(config.shutdown_timeout_s),
        # longer than the idle timeout of the load balancers in front (60 s is usual): a server that
        # closes an idle connection first races the client's next request on it (a reset, not a 5xx)
        timeout_keep_alive=75,
        ws_max_size=config.max_request_bytes,
        lifespan="on",
    )
