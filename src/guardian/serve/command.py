"""`guardian serve`: the command's body (a fresh token, or the server), kept beside the service.

The command line only declares the options; FastAPI and uvicorn load only when the server runs.
"""

from __future__ import annotations


def run_serve_command(*, host: str | None, port: int | None, workers: int, new_token: bool) -> str | None:
    """Run the server until it stops; with `new_token`, return the text that hands out a token instead."""
    from guardian.serve.auth import hash_token
    from guardian.serve.auth import new_token as make_token

    if new_token:
        token = make_token()
        return (f"token (give it to the client; it is not stored): {token}\n"
                f"config.toml (only its hash is kept):\n[serve]\ntokens = [\"{hash_token(token)}\"]")
    from guardian.serve.server import run_server

    run_server(host=host, port=port, workers=workers)
    return None
