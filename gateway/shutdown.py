"""Graceful shutdown on the HTTP side: the drain's gate in front of the application, and
the uvicorn server that drains before it shuts down.

uvicorn's own shutdown (on SIGTERM/SIGINT) stops listening, closes every WebSocket at once
with 1012 and then waits for HTTP responses in progress: a subscription would end without
its resume point.  :class:`DrainingServer` therefore takes the first signal for the
gateway's drain (:class:`gateway.core.process.drain.Drain`) and lets uvicorn shut down only once
the drain is over; the process then exits 0 (a second signal stops at once, uvicorn's way).
"""

from __future__ import annotations

import logging
from types import FrameType

import orjson
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.core import Drain, errors

log = logging.getLogger(__name__)

#: Paths served while draining: probes and metrics.
ALWAYS = frozenset({"/healthz", "/readyz", "/metrics"})


def refusal() -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Headers and body of the answer to new work while draining: 503 with
    ``Retry-After`` and a GraphQL error body (``extensions.code`` ``DRAINING``)."""
    error = errors.Draining()
    body = orjson.dumps(
        {
            "errors": [
                {
                    "message": error.message,
                    "extensions": {
                        "code": "DRAINING",
                        "httpStatus": error.status_code,
                        "reason": error.reason,
                        "retryAfter": error.retry_after,
                    },
                }
            ]
        }
    )
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(int(error.retry_after or 1)).encode()),
        (b"connection", b"close"),
    ]
    return headers, body


class DrainGate:
    """ASGI middleware: while draining, refuses new requests (503 + ``Retry-After``; probes
    and ``/metrics`` still answer) and new WebSockets (closed with 1013 at once); counts the
    requests in flight, so the drain waits for them (a stream until it wrote its
    completion)."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or scope["path"] in ALWAYS:
            await self.app(scope, receive, send)
            return
        if self.drain.draining:
            await self._refuse(scope, receive, send)
            return
        if kind == "websocket":
            # A connection outlives its subscriptions: its operations are counted instead.
            await self.app(scope, receive, send)
            return
        with self.drain.track():
            await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            # Accepted, then closed with 1013 "Try Again Later" (retryable for WebSocket
            # clients, graphql-ws's included).  A 503 denial response would do, but uvicorn's
            # WebSocket implementation logs it as an error.  The upgrade names the
            # subprotocol offered: browsers fail a handshake that names none, and their
            # script would see 1006 instead of 1013.
            await receive()  # websocket.connect
            offered = scope.get("subprotocols") or []
            await send({"type": "websocket.accept", "subprotocol": offered[0] if offered else None})
            await send({"type": "websocket.close", "code": 1013, "reason": "draining"})
            return
        headers, body = refusal()
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class DrainingServer(uvicorn.Server):
    """uvicorn that drains the gateway on the first SIGTERM/SIGINT before shutting down."""

    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self.drain = drain
        self._draining = False
        drain.on_drained(self._drained)

    def _drained(self) -> None:
        self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.started and not self.should_exit and not self._draining:
            self._draining = self.drain.request()
            if self._draining:
                return
        # Before serving, or a second signal while draining: uvicorn's own way, at once.
        super().handle_exit(sig, frame)
