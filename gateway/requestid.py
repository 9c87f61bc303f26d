"""Request ids and access lines, for HTTP, WebSocket and gRPC alike.

Every request the gateway serves gets an id:

* the caller's ``X-Request-Id`` (gRPC: ``x-request-id`` metadata) when it is 1-128
  characters of ``A-Z a-z 0-9 . _ : + = / @ -`` starting with a letter or digit,
* else the trace id of a valid W3C ``traceparent``,
* else 32 random hex digits.

The id is returned to the caller (the ``X-Request-Id`` response header, in the WebSocket
handshake response too; gRPC: ``x-request-id`` initial metadata) and is on every log line
written while the request is served (:func:`current_request_id`, read by
:mod:`gateway.logs`), because it lives in a context variable set by
:class:`RequestContext` (a pure ASGI middleware: a ``BaseHTTPMiddleware`` would break
streaming responses) and by the gRPC admission (:mod:`gateway.grpc.admission`).  Tasks
started while serving inherit it; the shared upstream watches and log follows
started by a request keep the id of the request that started them.

Each request ends with one access line on the ``gateway.access`` logger: transport
(``http``, ``sse``, ``multipart``, ``websocket``, ``grpc``), method, path, status,
``duration_ms``, ``bytes`` and, when known, the GraphQL ``operation`` name and
``operation_type``, and ``upstream_ms``: the time its upstream requests took (from each
request sent to its answer read; a stream's until its headers), when it made any.  A
subscription adds ``events`` (delivered) and ``ended``
(``complete``: the server ended it, ``error``: ended with an error, ``cancelled``: the
client left or stopped it).  An SSE or multipart subscription is one request, so one line
says both; a WebSocket connection has a line of its own when it closes, and each operation
on it a line when it ends.  Probes (``/healthz``, ``/readyz``, ``/metrics`` answered
below 400) are logged at debug level.  Access lines never carry a token, an
``Authorization`` value, a query string, GraphQL variables or a user name.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Callable, Coroutine
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.core import UPSTREAM_SECONDS, tracing

__all__ = [
    "DETACH",
    "EXTRA",
    "AccessRecord",
    "RequestContext",
    "current_request_id",
    "note_event",
    "note_operation",
    "note_subscription",
    "note_subscription_end",
    "operation_log",
    "request_id_of",
]

access_log = logging.getLogger("gateway.access")

HEADER: Final = "x-request-id"
#: The attribute a log call may add to its ``extra``: those same fields again (none of them
#: a standard attribute of a record), so the formatters need not find them among the
#: record's ~30 attributes (:func:`gateway.logs.fields_of`; an access line's).
EXTRA: Final = "_extra"
_VALID_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+=/@-]{0,127}")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_PROBES: Final = frozenset({"/healthz", "/readyz", "/metrics"})
#: GraphQL operation names are the caller's words: logged, but never at any length.
_MAX_NAME: Final = 100


def new_request_id() -> str:
    return os.urandom(16).hex()


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a valid W3C ``traceparent`` (version ``ff``, an all-zero trace or
    parent id are invalid)."""
    if not traceparent:
        return None
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None:
        return None
    version, trace_id, parent_id, _ = match.groups()
    if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    return trace_id


def request_id_of(given: str | None, traceparent: str | None = None) -> str:
    """The id of a request: ``given`` when valid, else the ``traceparent``'s trace id,
    else a new one."""
    if given is not None and _VALID_ID.fullmatch(given):
        return given
    return trace_id_of(traceparent) or new_request_id()


@dataclass(slots=True)
class AccessRecord:
    """What one request's access line will say; filled in while it is served."""

    request_id: str
    transport: str
    method: str
    path: str
    started: float = field(default_factory=time.perf_counter)
    status: int | str | None = None
    bytes: int = 0
    finished: bool = False
    operation: str | None = None
    operation_type: str | None = None
    #: ``None`` unless a subscription is served.
    events: int | None = None
    ended: str | None = None
    #: The caller's W3C ``traceparent``, the parent of its operations' spans
    #: (:mod:`gateway.core.process.tracing`); never logged.
    traceparent: str | None = None
    #: Seconds spent in upstream requests while serving it (one item, added to in place).
    upstream: list[float] = field(default_factory=lambda: [0.0])
    #: When it was served (``perf_counter``), for a line logged a little later (a gRPC
    #: call's, once its answer is on its way); ``None``: when the line is logged.
    stopped: float | None = None

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "transport": self.transport,
            "method": self.method,
            "path": self.path,
            "status": self.status,
            "duration_ms": round(((self.stopped or time.perf_counter()) - self.started) * 1000, 3),
            "bytes": self.bytes,
        }
        if self.upstream[0]:
            out["upstream_ms"] = round(self.upstream[0] * 1000, 3)
        if self.operation is not None:
            out["operation"] = self.operation
        if self.operation_type is not None:
            out["operation_type"] = self.operation_type
        if self.events is not None:
            out["events"] = self.events
            out["ended"] = self.ended or ("complete" if self.finished else "cancelled")
        return out

    def logged(self, _: object = None) -> None:
        """Log it at the level its path and status call for (a done callback)."""
        self.log(_level(self))

    def log(self, level: int = logging.INFO) -> None:
        fields = {"request_id": self.request_id, **self.fields()}
        handlers = logging.root.handlers
        if len(handlers) == 1:
            # the handler `gateway.logs.configure` installs writes the line without a
            # record when nothing else would see that record (`write_straight`)
            straight = getattr(handlers[0], "write_straight", None)
            if straight is not None and straight(
                access_log, level, f"{self.method} {self.path} {self.status}", fields
            ):
                return
        access_log.log(
            level, "%s %s %s", self.method, self.path, self.status, extra={**fields, EXTRA: fields}
        )


_CURRENT: ContextVar[AccessRecord | None] = ContextVar("kube_gateway_request", default=None)


def current_request_id() -> str | None:
    """The id of the request being served (``None`` outside of one)."""
    record = _CURRENT.get()
    return record.request_id if record is not None else None


class _Serving:
    """:func:`serving`'s context manager: a class, not a generator, as it lives as long as
    its request (a gRPC stream's: as long as the subscriber)."""

    __slots__ = ("_spent", "_token", "_traced", "record")

    def __init__(self, record: AccessRecord) -> None:
        self.record = record
        self._token: Token[AccessRecord | None] | None = None
        self._traced: Token[str | None] | None = None
        self._spent: Token[list[float] | None] | None = None

    def __enter__(self) -> AccessRecord:
        record = self.record
        self._token = _CURRENT.set(record)
        self._traced = tracing.CALLER_TRACEPARENT.set(record.traceparent)
        self._spent = UPSTREAM_SECONDS.set(record.upstream)
        return record

    def __exit__(self, *_: object) -> None:
        spent, traced, token = self._spent, self._traced, self._token
        self._spent = self._traced = self._token = None
        # An async generator closed from another context (a finaliser) cannot reset them
        # (all three were set in one context: none can be reset when one cannot).  A plain
        # ``try``, not three ``contextlib.suppress``: this runs once per request.
        try:
            if spent is not None:
                UPSTREAM_SECONDS.reset(spent)
            if traced is not None:
                tracing.CALLER_TRACEPARENT.reset(traced)
            if token is not None:
                _CURRENT.reset(token)
        except ValueError:
            pass


def serving(record: AccessRecord) -> _Serving:
    """``record`` is the request being served inside the block (and its ``traceparent``
    the one the core's operation spans continue)."""
    return _Serving(record)


def _name(name: str | None) -> str | None:
    return name[:_MAX_NAME] if name else None


def note_operation(operation_type: str, name: str | None) -> None:
    """The GraphQL operation the current request runs (its type and name, never its
    variables)."""
    record = _CURRENT.get()
    if record is not None:
        record.operation_type = operation_type
        record.operation = _name(name)


def note_subscription() -> None:
    """The current request serves a subscription: its line counts events."""
    record = _CURRENT.get()
    if record is not None and record.events is None:
        record.events = 0


def note_event() -> None:
    """One event delivered to the current request's subscriber."""
    record = _CURRENT.get()
    if record is not None and record.events is not None:
        record.events += 1


def note_subscription_end(failed: bool) -> None:
    """The server ended the current request's subscription (with an error or not)."""
    record = _CURRENT.get()
    if record is not None:
        record.ended = "error" if failed else "complete"


class _OperationLog:
    """:func:`operation_log`'s context manager: a class, not a generator, as it lives as
    long as its operation (a subscription's: as long as the subscriber)."""

    __slots__ = ("_token", "record")

    def __init__(self, record: AccessRecord) -> None:
        self.record = record
        self._token: Token[AccessRecord | None] | None = None

    def __enter__(self) -> AccessRecord:
        self._token = _CURRENT.set(self.record)
        return self.record

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        record = self.record
        try:
            if kind is None:
                record.finished = True
                record.status = "ok" if record.ended != "error" else "error"
            else:
                cancelled = not issubclass(kind, Exception)
                record.status = "cancelled" if cancelled else "error"
                record.ended = record.ended or ("cancelled" if cancelled else "error")
        finally:
            if self._token is not None:
                _CURRENT.reset(self._token)
                self._token = None
            record.log()


def operation_log(transport: str, operation_type: str, name: str | None) -> _OperationLog:
    """Log one operation of a connection (a WebSocket's) when the block ends.

    The line has the connection's request id; ``ended`` is ``cancelled`` when the block is
    cancelled (the client stopped the operation or left), ``error`` when it raises or
    :func:`note_subscription_end` says so, else ``complete``.
    """
    parent = _CURRENT.get()
    return _OperationLog(
        AccessRecord(
            request_id=parent.request_id if parent is not None else new_request_id(),
            transport=transport,
            method=operation_type,
            path=parent.path if parent is not None else "",
            operation=_name(name),
            operation_type=operation_type,
            events=0 if operation_type == "subscription" else None,
            traceparent=parent.traceparent if parent is not None else None,
        )
    )


_STREAM_TYPES: Final = ((b"text/event-stream", "sse"), (b"multipart/mixed", "multipart"))
#: The response header that echoes the request id, encoded once.
_HEADER_NAME: Final = HEADER.encode()

#: The ASGI scope extension (``scope["extensions"][DETACH]``) through which an accepted
#: WebSocket connection is served outside its ASGI call (:mod:`gateway.httpserver`'s
#: ``LeanWebSocketProtocol`` offers it).  ``detach(serve)`` calls ``serve(send)`` with the
#: server's own ``send`` (the one to use from then on) and runs the coroutine it returns as
#: a task of the server's (uvicorn's shutdown waits for it), in the context of the call (its
#: request id); the call may return at once, and the connection stays open until that task
#: ends.  An idle connection then holds no frame of the middleware stack, and its frames
#: go out through none of the middlewares' ``send`` wrappers: a middleware that must see
#: them wraps the extension (:class:`RequestContext` does, to count them).  Used once.
DETACH: Final = "kube-gateway.websocket.detach"
#: What :data:`DETACH` is.
Detach = Callable[[Callable[[Send], Coroutine[Any, Any, None]]], "asyncio.Task[None]"]


def _level(record: AccessRecord) -> int:
    probe = record.path in _PROBES and isinstance(record.status, int) and record.status < 400
    level = logging.DEBUG if probe else logging.INFO
    if isinstance(record.status, int) and record.status >= 500:
        level = logging.WARNING
    return level


class RequestContext:
    """Pure ASGI middleware: the request id, its response header, the access line.

    A WebSocket connection served outside its ASGI call (:data:`DETACH`) has its line
    written when the task that serves it ends, not when the call returns; its frames are
    still counted here (the connection sends through this middleware's ``send``).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = traceparent = None
        for name, value in scope["headers"]:  # one pass, the first of each (Headers.get's)
            if name == _HEADER_NAME:
                if given is None:
                    given = value.decode("latin-1")
            elif name == b"traceparent" and traceparent is None:
                traceparent = value.decode("latin-1")
        record = AccessRecord(
            request_id=request_id_of(given, traceparent),
            transport=kind,
            method=scope.get("method", "GET"),
            path=scope.get("path", ""),
            traceparent=traceparent,
        )
        echoed = (_HEADER_NAME, record.request_id.encode())

        async def sending(message: Message) -> None:
            t = message["type"]
            if t == "websocket.send":  # first: one per subscription event
                record.bytes += len(message.get("bytes") or b"") + len(message.get("text") or "")
            elif t == "http.response.body":
                record.bytes += len(message.get("body", b""))
                if not message.get("more_body", False):
                    record.finished = True
            elif t in ("http.response.start", "websocket.accept", "websocket.http.response.start"):
                response_headers = [*message.get("headers", []), echoed]
                message = {**message, "headers": response_headers}
                record.status = message.get("status", 101)
                for k, v in response_headers:
                    if k.lower() == b"content-type":
                        for media, transport in _STREAM_TYPES:
                            if v.startswith(media):
                                record.transport = transport
                        break
            elif t == "websocket.close" and record.status is None:
                record.status = 403  # refused before the upgrade
            await send(message)

        detached: list[asyncio.Task[None]] = []
        extensions = scope.get("extensions") if kind == "websocket" else None
        offered: Detach | None = extensions.get(DETACH) if extensions else None
        if extensions is not None and offered is not None:

            def detach(serve: Callable[[Send], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
                def counted_serve(direct: Send) -> Coroutine[Any, Any, None]:
                    async def counted(message: Message) -> None:
                        if message["type"] == "websocket.send":  # its frames, counted
                            text, data = message.get("text"), message.get("bytes")
                            record.bytes += len(text) if text is not None else len(data or b"")
                        await direct(message)

                    return serve(counted)

                task = offered(counted_serve)
                detached.append(task)
                return task

            extensions[DETACH] = detach

        with serving(record):
            try:
                await self.app(scope, receive, sending)
            except BaseException:
                if record.status is None:
                    record.status = 500
                raise
            finally:
                if detached:  # the connection is still served: its line when it ends
                    detached[0].add_done_callback(record.logged)
                else:
                    record.log(_level(record))
