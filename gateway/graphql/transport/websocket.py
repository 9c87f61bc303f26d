"""GraphQL over WebSocket: ``graphql-transport-ws`` and the legacy ``graphql-ws`` protocol.

The caller's credential comes from the ``connection_init`` payload
(``{"Authorization": "Bearer ..."}`` or ``{"authToken": "..."}``), else from the upgrade
request's ``Authorization`` header.  Each subscription reads its own core stream
(:mod:`gateway.graphql.engine.subscriptions`); each frame wraps the one serialised payload its
shared execution made of the event.
Each connection owns its operation tasks and cancels them when it closes.

When the gateway drains (SIGTERM), each subscription's last ``next`` is
``{"data": null, "extensions": {"reason": "DRAINING", "resumeFrom": <rv>}}`` followed by
``complete`` (:func:`gateway.graphql.engine.subscriptions.drain_payload`), and a new operation gets
an
``error`` with ``extensions.code`` ``DRAINING``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import orjson
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketDisconnected

from gateway.core import ANONYMOUS, Credential, deepjson, errors, refuse_impersonation
from gateway.graphql.engine.execution import RequestError
from gateway.graphql.errors import ApiError, format_exception
from gateway.graphql.resolvers.context import (
    Context,
    credential_from_header,
    credential_from_payload,
)
from gateway.graphql.transport.origins import REFUSAL, origin_allowed
from gateway.requestid import DETACH, Detach, note_event, note_subscription_end, operation_log

if TYPE_CHECKING:
    from gateway.graphql.transport.endpoint import Endpoint

log = logging.getLogger(__name__)

TRANSPORT_WS = "graphql-transport-ws"
LEGACY_WS = "graphql-ws"


def _payload_keys(payload: Any) -> list[Any]:
    """The keys of a ``connection_init`` payload and of its ``headers`` object."""
    if not isinstance(payload, dict):
        return []
    headers = payload.get("headers")
    return [*payload, *(headers if isinstance(headers, dict) else ())]


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class Connection:
    """One WebSocket connection speaking either protocol, once accepted: its ASGI
    ``receive`` and ``send`` (not the ASGI scope, whose headers are read once as it starts,
    nor Starlette's ``WebSocket``)."""

    __slots__ = (
        "_keepalive",
        "_receive",
        "_resolve",
        "_send",
        "app",
        "credential",
        "initialised",
        "legacy",
        "open",
        "operations",
        "protocol",
    )

    def __init__(
        self,
        app: Endpoint,
        receive: Receive,
        send: Send,
        protocol: str,
        resolve: Resolve | None = None,
    ) -> None:
        self.app = app
        #: Finds the endpoint that serves the connection once its caller is known (a
        #: group's, built on first use only for a caller the cluster authenticates).
        self._resolve = resolve
        self._receive = receive
        #: The connection's ASGI ``send``: text frames go straight to it.
        self._send = send
        #: The gateway has not closed it: a frame may be sent.
        self.open = True
        self.protocol = protocol
        self.legacy = protocol == LEGACY_WS
        self.credential: Credential = ANONYMOUS
        self.initialised = False
        self.operations: dict[str, asyncio.Task[None]] = {}
        self._keepalive: asyncio.Task[None] | None = None

    # -- sending -----------------------------------------------------------------------------

    async def send_text(self, text: str) -> None:
        """Send one text frame, straight to the ASGI ``send``, with its answer to a
        connection that is gone: ``WebSocketDisconnect`` (1006).  No lock: the server
        writes each frame whole in one step (uvicorn waits for the transport to be
        writable, then writes), so the operations of a connection never interleave inside
        a frame, and each operation awaits its frames in order.
        """
        if not self.open:
            raise WebSocketDisconnected('Cannot call "send" once a close message has been sent.')
        try:
            await self._send({"type": "websocket.send", "text": text})
        except OSError:
            self.open = False
            raise WebSocketDisconnect(code=1006) from None

    async def close(self, code: int, reason: str) -> None:
        if not self.open:
            raise WebSocketDisconnected('Cannot call "send" once a close message has been sent.')
        self.open = False
        try:
            await self._send({"type": "websocket.close", "code": code, "reason": reason})
        except OSError:
            raise WebSocketDisconnect(code=1006) from None

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_text(orjson.dumps(message).decode())

    def frame(self, op_id: str, payload: str) -> str:
        kind = "data" if self.legacy else "next"
        return f'{{"id":{orjson.dumps(op_id).decode()},"type":"{kind}","payload":{payload}}}'

    async def send_payload(self, op_id: str, payload: str) -> None:
        await self.send_text(self.frame(op_id, payload))

    async def send_error(self, op_id: str, errors: list[dict[str, Any]]) -> None:
        # The legacy protocol's error payload is one error; the new one's is a list.
        payload: Any = errors[0] if self.legacy else errors
        await self.send({"id": op_id, "type": "error", "payload": payload})

    # -- lifecycle ---------------------------------------------------------------------------

    async def serve(self, headers: Headers, release: Release | None = None) -> None:
        """Serve the connection until it closes; ``headers``: its upgrade request's, read
        here once (a credential, headers that may not be sent) and not held after;
        ``release``: awaited last, once its operations ended."""
        init_timer = asyncio.get_running_loop().call_later(
            self.app.limits.connection_init_seconds, self._init_timeout
        )
        try:
            try:
                refuse_impersonation(headers.keys(), "header")
            except errors.Forbidden as exc:
                raise _Close(4403, exc.message[:120]) from None
            try:
                self.credential = credential_from_header(headers.get("authorization"))
            except errors.Unauthorized:
                raise _Close(4401, "Unauthorized: malformed Authorization") from None
            del headers
            while True:
                received = await self._receive()
                if received["type"] == "websocket.disconnect":
                    return  # the client left (or the server is shutting down)
                text: str | None = received.get("text")
                del received
                if text is None:  # a binary message: neither protocol has any
                    raise _Close(4400, "Invalid message received")
                if len(text) > self.app.limits.max_body_bytes:
                    raise _Close(4413, "Message too large")
                try:
                    message = orjson.loads(text)
                except orjson.JSONDecodeError:
                    raise _Close(4400, "Invalid message received") from None
                if not isinstance(message, dict) or not isinstance(message.get("type"), str):
                    raise _Close(4400, "Invalid message received")
                await self.on_message(message, init_timer)
                # not held while the next is awaited (a subscribe's document and variables)
                del text, message
        except _Close as close:
            with contextlib.suppress(Exception):
                await self.close(close.code, close.reason)
        finally:
            init_timer.cancel()
            try:
                await self.aclose()
            finally:
                if release is not None:
                    await release()

    def _init_timeout(self) -> None:
        if not self.initialised:
            task = asyncio.ensure_future(self.close(4408, "Connection initialisation timeout"))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def aclose(self) -> None:
        tasks = list(self.operations.values())
        if self._keepalive is not None:
            tasks.append(self._keepalive)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.operations.clear()

    async def on_message(self, message: dict[str, Any], init_timer: asyncio.TimerHandle) -> None:
        kind = message["type"]
        if kind == "connection_init":
            if self.initialised:
                raise _Close(4429, "Too many initialisation requests")
            payload = message.get("payload")
            if payload is not None and not isinstance(payload, dict):
                raise _Close(4400, "Invalid connection_init payload")
            try:
                refuse_impersonation(_payload_keys(payload), "connection_init key")
            except errors.Forbidden as exc:
                raise _Close(4403, exc.message[:120]) from None
            try:
                from_payload = credential_from_payload(payload)
            except errors.Unauthorized:
                raise _Close(4401, "Unauthorized: malformed credential") from None
            if from_payload.token:
                self.credential = from_payload
            if self._resolve is not None:
                try:
                    self.app = await self._resolve(self.credential)
                except errors.GatewayError as exc:  # 4401, 4404, else 4500
                    code = 4000 + exc.code if exc.code in (401, 404) else 4500
                    raise _Close(code, exc.message[:120]) from None
            self.initialised = True
            init_timer.cancel()
            await self.send({"type": "connection_ack"})
            if self.legacy:
                await self.send({"type": "ka"})
                self._keepalive = asyncio.create_task(self._keepalives())
            return
        if kind == "ping" and not self.legacy:
            await self.send(
                {
                    "type": "pong",
                    **({"payload": message["payload"]} if "payload" in message else {}),
                }
            )
            return
        if kind == "pong" and not self.legacy:
            return
        if kind == "connection_terminate" and self.legacy:
            raise _Close(1000, "Terminated")
        if not self.initialised:
            raise _Close(4401, "Unauthorized")
        op_id = message.get("id")
        if kind in ("subscribe", "start"):
            if not isinstance(op_id, str) or not op_id:
                raise _Close(4400, "Invalid message: an operation needs an id")
            await self.start(op_id, message.get("payload"))
        elif kind in ("complete", "stop"):
            if isinstance(op_id, str):
                task = self.operations.pop(op_id, None)
                if task is not None:
                    task.cancel()
                    if self.legacy:
                        await self.send({"id": op_id, "type": "complete"})
        else:
            raise _Close(4400, f"Unknown message type {kind!r}")

    async def _keepalives(self) -> None:
        while True:
            await asyncio.sleep(self.app.limits.heartbeat_seconds)
            await self.send({"type": "ka"})

    # -- operations --------------------------------------------------------------------------

    async def start(self, op_id: str, payload: Any) -> None:
        if op_id in self.operations:
            if self.legacy:
                self.operations.pop(op_id).cancel()  # the legacy protocol restarts an id
            else:
                raise _Close(4409, f"Subscriber for {op_id} already exists")
        if self.app.drain.draining:
            # The gateway is shutting down: retry on another replica (503, retryAfter).
            await self.send_error(op_id, [format_exception(errors.Draining())])
            return
        if len(self.operations) >= self.app.limits.max_subscriptions:
            error = ApiError(
                f"at most {self.app.limits.max_subscriptions} operations may run on one connection",
                code="TOO_MANY_SUBSCRIPTIONS",
                http_status=429,
            )
            await self.send_error(op_id, [format_exception(error)])
            return
        if not isinstance(payload, dict):
            raise _Close(4400, "Invalid message: the payload must be an object")
        try:
            admitted = self.app.admission.admit(self.app.engine, payload)
        except ApiError as exc:
            await self.send_error(op_id, [format_exception(exc)])
            return
        except RequestError as exc:
            await self.send_error(op_id, exc.errors)
            return
        task = asyncio.create_task(self._run(op_id, admitted.prepared, admitted.variables))
        self.operations[op_id] = task
        task.add_done_callback(lambda t: self._finished(op_id, t))

    def _finished(self, op_id: str, task: asyncio.Task[None]) -> None:
        if self.operations.get(op_id) is task:
            del self.operations[op_id]
        if not task.cancelled() and task.exception() is not None:
            log.debug("websocket operation ended with %r", task.exception())

    async def _run(self, op_id: str, prepared: Any, variables: dict[str, Any] | None) -> None:
        """Run one operation (one coroutine, a subscription's for its lifetime: no frame
        of a helper nor a closure more per idle subscriber)."""
        from gateway.graphql.transport.http import operation_name

        # Counted in flight: a drain waits for a query to answer and for a subscription to
        # send its completion.
        with (
            operation_log("websocket", prepared.kind, operation_name(prepared)),
            self.app.drain.track(),
        ):
            try:  # impersonate mode: authenticated per operation; introspection: always
                credential = await self.app.caller(prepared, self.credential)
            except errors.Unauthorized as exc:
                await self.send_error(op_id, [format_exception(exc)])
                return
            context_of: Callable[[], Context] = functools.partial(self.app.context, credential)
            if prepared.kind != "subscription":
                result = await self.app.engine.execute(prepared, variables, context_of())
                await self.send_payload(op_id, deepjson.dumps(result).decode())
                await self.send({"id": op_id, "type": "complete"})
                return
            sub = self.app.subscriptions.subscribe(prepared, variables, context_of)
            del context_of, credential
            key = (op_id, self.legacy)
            # (partials, not closures: the coroutine then keeps no cells)
            frame = functools.partial(self.frame, op_id)
            try:
                # Frames are built once per item for every subscriber with the same op id.
                # The item sent last is not held while the next is awaited: an idle
                # subscriber would keep it (a snapshot's, rendered for it alone).
                while True:
                    item = sub.next_nowait()
                    if item is None:
                        item = await sub.next_item()
                        if item is None:
                            break
                    note_event()
                    await self.send_text(item.framed(key, frame))
                note_subscription_end(sub.failed)
                if sub.final is not None:
                    await self.send_payload(op_id, sub.final)
                await self.send({"id": op_id, "type": "complete"})
            finally:
                sub.close()


#: Finds the endpoint of a connection from its caller's credential.
Resolve = Callable[[Credential], Awaitable["Endpoint"]]
#: Lets go of what a connection's ``resolve`` took, once the connection ended.
Release = Callable[[], Awaitable[object]]


async def serve(
    app: Endpoint,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    resolve: Resolve | None = None,
    release: Release | None = None,
) -> None:
    """Accept a WebSocket with one of the two protocols and serve it until it closes.

    With ``resolve``, ``app`` only admits the connection (its limits and origins, which are
    every endpoint's) and the endpoint that serves it is ``resolve(credential)``, asked once
    ``connection_init`` has said who the caller is: a group endpoint answers whether the
    group exists only to a caller the cluster authenticates (close 4401 otherwise, 4404
    for a group it does not serve).  ``release`` is awaited once when the connection has
    ended (or at once if it is refused): what ``resolve`` took is kept until then.

    A browser page of a foreign origin (not the gateway's own, not allowed by
    ``--allowed-origins``) is refused: otherwise any web site could subscribe with whatever
    credential the browser attaches.  It is accepted and closed at once with 4403 and a
    reason naming the flag, before any message is read: a refusal before the upgrade is a
    bare HTTP 403 that a browser's script never sees (its ``close`` event says 1006), and
    the close code is what the page's client can show.  The upgrade names the subprotocol
    the page offered, as browsers fail a handshake that names none.

    Once accepted, a connection is served outside this call when the server offers it
    (:data:`gateway.requestid.DETACH`): every check of the upgrade is done by then (the
    middleware's, the origin's, the subprotocol's), and an idle connection holds none of
    the frames of the call.
    """
    try:
        admitted = await _admitted(app, scope, receive, send)
    except BaseException:
        if release is not None:
            await release()
        raise
    if admitted is None:  # refused, closed
        if release is not None:
            await release()
        return
    protocol, headers = admitted
    del admitted
    connection = Connection(app, receive, send, protocol, resolve)
    detach: Detach | None = (scope.get("extensions") or {}).get(DETACH)
    if detach is None:
        await connection.serve(headers, release)
        return

    def detached(direct: Send) -> Coroutine[Any, Any, None]:
        # frames straight to the server's send (counted by the request-id middleware),
        # not through the call's wrappers
        connection._send = direct
        return connection.serve(headers, release)

    try:
        detach(detached)
    except BaseException:  # not detached (closed meanwhile): it never ran
        if release is not None:
            await release()
        raise


async def _admitted(
    app: Endpoint, scope: Scope, receive: Receive, send: Send
) -> tuple[str, Headers] | None:
    """Accept the connection and say with which protocol and upgrade headers, or refuse
    it (``None``: accepted and closed with the reason, or closed)."""
    websocket = WebSocket(scope, receive, send)
    offered = scope.get("subprotocols") or []
    protocol = next((p for p in (TRANSPORT_WS, LEGACY_WS) if p in offered), None)
    if not origin_allowed(
        websocket.headers.get("origin"), websocket.headers.get("host"), app.allowed_origins
    ):
        await websocket.accept(subprotocol=protocol)
        await websocket.close(4403, REFUSAL)
        return None
    if protocol is None:
        await websocket.close(4406, "Subprotocol not acceptable")
        return None
    await websocket.accept(subprotocol=protocol)
    return protocol, websocket.headers
