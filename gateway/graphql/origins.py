"""Which browser origins may use the gateway.

Its own module because both the HTTP side (:mod:`gateway.graphql.server`, CORS) and the
WebSocket upgrade (:mod:`gateway.graphql.websocket`) ask it, and the server imports the
WebSocket transport: here it sits below both, so neither imports the other for it.
"""

from __future__ import annotations


def origin_allowed(origin: str | None, host: str | None, allowed: frozenset[str]) -> bool:
    """Whether a browser page from ``origin`` may use the gateway: no ``Origin`` (not a
    browser), the gateway's own origin (GraphiQL), or one of the allowed origins."""
    if not origin:
        return True
    if "*" in allowed or origin in allowed:
        return True
    _, _, netloc = origin.partition("://")
    return bool(host) and netloc == host
