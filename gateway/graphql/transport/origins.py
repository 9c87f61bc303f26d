"""Which browser origins may use the gateway.

Its own module because both the HTTP side (:mod:`gateway.graphql.endpoints.server`, CORS) and the
WebSocket upgrade (:mod:`gateway.graphql.transport.websocket`) ask it, and the server imports the
WebSocket transport: here it sits below both, so neither imports the other for it.  A
refused origin is told, on both, which flag lets it in (:data:`REFUSAL`).
"""

from __future__ import annotations

import ipaddress

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
        await _plain(send, 403, f"{REFUSAL} (this page's origin: {origin})", vary=b"Origin")


def host_allowed(host: str | None, allowed: frozenset[str]) -> bool:
    """Whether a request's ``Host`` names the gateway: an IP address (a DNS-rebinding page
    comes with a name of its attacker's), ``localhost``, or a listed name (``*.example.com``
    for any name under it, ``*`` for any)."""
    if "*" in allowed:
        return True
    if not host:
        return False
    name = host.strip().lower()
    if name.startswith("["):  # [::1]:8080
        return True
    name = name.rsplit(":", 1)[0] if name.count(":") == 1 else name
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    if name in allowed:
        return True
    return any(p.startswith("*.") and name.endswith(p[1:]) for p in allowed)


#: Paths answered whatever the Host (probes: a kubelet sends the pod's IP or its own).
_PROBES = frozenset(("/healthz", "/readyz"))


class HostCheck:
    """ASGI middleware: a request (HTTP or WebSocket) whose ``Host`` is not one the gateway
    answers (:func:`host_allowed`) is refused with ``421 Misdirected Request`` before it
    reaches a route.

    The defense against DNS rebinding: a page of ``evil.example`` whose name is made to
    resolve to the gateway's address is same-origin with it in the browser's eyes (its
    requests need no CORS), but its ``Host`` says ``evil.example``.  That matters where a
    request without a credential is served as someone (``--gateway-identity``), which is
    where it is on by default (``--allowed-hosts``).
    """

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in _PROBES:
            await self.app(scope, receive, send)
            return
        if host_allowed(Headers(scope=scope).get("host"), self.allowed):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 4421, "reason": HOST_REFUSAL})
            return
        await _plain(send, 421, HOST_REFUSAL, vary=b"Host")


async def _plain(send: Send, status: int, text: str, *, vary: bytes) -> None:
    """A refusal of a middleware: one line of plain text."""
    body = f"{text}\n".encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"x-content-type-options", b"nosniff"),
                (b"vary", vary),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


#: What a request with a Host the gateway does not answer is told.
HOST_REFUSAL = "Host not served: start the gateway with --allowed-hosts <name>"
