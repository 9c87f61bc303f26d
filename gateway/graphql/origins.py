"""Which browser origins may use the gateway.

Its own module because both the HTTP side (:mod:`gateway.graphql.server`, CORS) and the
WebSocket upgrade (:mod:`gateway.graphql.websocket`) ask it, and the server imports the
WebSocket transport: here it sits below both, so neither imports the other for it.  A
refused origin is told, on both, which flag lets it in (:data:`REFUSAL`).
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send


def origin_allowed(origin: str | None, host: str | None, allowed: frozenset[str]) -> bool:
    """Whether a browser page from ``origin`` may use the gateway: no ``Origin`` (not a
    browser), the gateway's own origin (GraphiQL), or one of the allowed origins."""
    if not origin:
        return True
    if "*" in allowed or origin in allowed:
        return True
    _, _, netloc = origin.partition("://")
    return bool(host) and netloc == host


#: What a refused browser origin is told, on a CORS preflight and a WebSocket alike: the
#: flag that lets its pages in.
REFUSAL = "Origin not allowed: start the gateway with --allowed-origins <origin>"


class PreflightRefusal:
    """ASGI middleware: a CORS preflight (``OPTIONS`` with ``Origin`` and
    ``Access-Control-Request-Method``) from an origin the gateway does not allow is
    answered ``403`` with a plain-text body naming ``--allowed-origins``.

    Without it, a gateway with no allowed origins routes the preflight to the endpoints,
    which answer ``405``, and one with some has Starlette's CORS middleware answer ``400
    Disallowed CORS origin``: neither tells the person at the browser's console what to
    change.  The answer carries no ``Access-Control-Allow-*`` header, so the browser still
    refuses the request (a conformant CORS refusal); allowed origins go on to the CORS
    middleware unchanged.
    """

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "OPTIONS":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if (
            origin is None
            or "access-control-request-method" not in headers
            or origin_allowed(origin, headers.get("host"), self.allowed)
        ):
            await self.app(scope, receive, send)
            return
        body = f"{REFUSAL} (this page's origin: {origin})\n".encode()
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"vary", b"Origin"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
