"""`guardian serve`: the HTTP/WebSocket service for chat platforms and call centres (docs/serve.md)."""

from __future__ import annotations

__all__ = ["create_app"]


def __getattr__(name: str) -> object:
    if name == "create_app":  # FastAPI loads only when the service is used
        from guardian.serve.app import create_app

        return create_app
    raise AttributeError(name)
