"""The HTTP server's own defences: a request-head timeout, an idle timeout from the first
moment a connection is open, and a cap on open connections.

uvicorn alone closes an idle keep-alive connection only after a response (a connection
that never sends a byte stays open for ever), has no deadline for the request head (a
client sending one header byte every few seconds holds its connection for ever, the
"slow loris"), and no cap on connections (``limit_concurrency`` answers 503 but keeps
accepting, so idle connections use up the process's file descriptors and then every
``accept`` fails).  :class:`GuardedHttpProtocol` is uvicorn's own httptools protocol (a
protocol class handed to ``uvicorn.Config(http=...)`` is uvicorn's supported way to
extend it) with those three:

* **idle** (``--http-idle-timeout-seconds``): a connection with no request in progress,
  newly accepted or between two requests, is closed once it has sent nothing for that
  long (uvicorn's keep-alive timer, armed at accept too);
* **request head** (``--http-header-timeout-seconds``): from the first byte of a request
  to the end of its headers; past it the connection is answered ``408`` and closed;
* **cap** (``--http-max-connections``, ``auto``: half the process's open-file limit,
  ``RLIMIT_NOFILE``, at most 16,384): a connection accepted while that many HTTP and
  WebSocket connections are open is answered ``503`` with ``Retry-After`` and closed at
  once; connections already open are served as before.

A response in progress (an SSE or multipart stream) and an upgraded WebSocket are under
neither timeout: a stream lives as long as its subscription, and a WebSocket's dead peer
is found by its pings.  Each kind of closing is counted and logged at most once a minute
(a flood of hostile connections cannot flood the log).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import struct
import time
import zlib
from asyncio import TimerHandle
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.extensions.permessage_deflate import (
    PerMessageDeflate,
    ServerPerMessageDeflateFactory,
)
from websockets.http11 import Request
from websockets.protocol import State as WsState

from gateway.requestid import DETACH
from gateway.settings import Settings

__all__ = [
    "GuardedHttpProtocol",
    "Guards",
    "LeanWebSocketProtocol",
    "default_max_connections",
    "max_connections",
    "server_options",
]

log = logging.getLogger("gateway.http")

#: ``--http-max-connections auto`` never goes above this.
AUTO_CEILING: Final = 16_384
#: ... nor below this (a process with a tiny open-file limit still serves someone).
AUTO_FLOOR: Final = 64
#: Seconds between two log lines about the same kind of closed connection.
LOG_EVERY: Final = 60.0


def default_max_connections(soft_limit: int | None = None) -> int:
    """``auto``: half the process's open-file limit (the other half for gRPC, upstream
    connections and files), at most :data:`AUTO_CEILING`."""
    if soft_limit is None:
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft_limit == resource.RLIM_INFINITY or soft_limit <= 0:
        return AUTO_CEILING
    return max(AUTO_FLOOR, min(AUTO_CEILING, soft_limit // 2))


def max_connections(setting: str) -> int:
    """The cap ``--http-max-connections`` asks for (``auto`` or a number)."""
    return default_max_connections() if setting == "auto" else int(setting)


def _answer(status: bytes, text: str, *extra: bytes) -> bytes:
    body = text.encode() + b"\n"
    return b"".join(
        [
            b"HTTP/1.1 " + status + b"\r\n",
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            *extra,
            b"connection: close\r\n\r\n",
            body,
        ]
    )


#: The answer to a connection over the cap.
OVER_CAP: Final = _answer(
    b"503 Service Unavailable",
    "too many connections to the gateway; retry later",
    b"retry-after: 1\r\n",
)
#: The answer to a request whose head did not arrive in time.
HEAD_TIMEOUT: Final = _answer(b"408 Request Timeout", "the request head took too long")


@dataclass(slots=True)
class _Tally:
    """A count of closed connections of one kind, logged at most every :data:`LOG_EVERY`."""

    what: str
    total: int = 0
    unlogged: int = 0
    logged_at: float = float("-inf")

    def add(self) -> None:
        self.total += 1
        self.unlogged += 1
        now = time.monotonic()
        if now - self.logged_at >= LOG_EVERY:
            log.warning("%s: %d connection(s) since the last such line", self.what, self.unlogged)
            self.unlogged = 0
            self.logged_at = now


@dataclass(slots=True)
class Guards:
    """The limits of one server, shared by its connections, and what they closed."""

    header_timeout: float
    max_connections: int
    refused: _Tally = field(
        default_factory=lambda: _Tally("refused: the HTTP connection cap is reached")
    )
    timed_out: _Tally = field(
        default_factory=lambda: _Tally("closed: the request head was not sent in time")
    )

    def protocol(self) -> type[GuardedHttpProtocol]:
        """The protocol class to hand to ``uvicorn.Config(http=...)``."""
        return type("GuardedHttpProtocol", (GuardedHttpProtocol,), {"guards": self})


class _OneWrite:
    """A connection's transport as one response's cycle sees it.  uvicorn writes a response's
    head (``http.response.start``) and its body (``http.response.body``) in two ``write``
    calls: two system calls and two TCP segments for an answer sent whole.  This holds the
    cycle's first write (the head) back until its next one in the same step of the event
    loop and writes both as one; a head whose body does not follow in that step (a stream)
    goes out on its own at the end of the step, and before a close."""

    __slots__ = ("_armed", "_held", "_loop", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._armed = True
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self.transport.write(held + data)
        elif self._armed:
            self._armed = False
            self._held = data
            self._loop.call_soon(self._flush)
        else:
            self.transport.write(data)

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self.transport.is_closing():
                self.transport.write(held)

    def close(self) -> None:
        self._flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, ...
        return getattr(self.transport, name)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the idle and request-head timeouts and the
    connection cap (see the module's text); made by :meth:`Guards.protocol`."""

    guards: ClassVar[Guards]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused = False
        self._head_timer: TimerHandle | None = None
        #: A request's head has begun and is not complete yet.
        self._in_head = False
        #: Handed over to the WebSocket protocol: none of this connection's business.
        self._upgraded = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.guards.max_connections:
            self._refused = True
            self.guards.refused.add()
            # Written before the client's request arrives: an HTTP/1.1 client reads it as
            # the answer to the request it then sends.
            transport.write(OVER_CAP)
            transport.close()
            return
        super().connection_made(transport)
        # uvicorn arms its keep-alive timer only after a response: arm it at accept too.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._disarm_head()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        # Bytes of a request head that is not complete yet (or bytes before any request,
        # blank lines between requests): the head's deadline runs from now.
        if self._upgraded or self._head_timer is not None or self.transport.is_closing():
            return
        if self._in_head or self.cycle is None or self.cycle.response_complete:
            self._head_timer = self.loop.call_later(
                self.guards.header_timeout, self._head_timed_out
            )

    def handle_websocket_upgrade(self) -> None:
        self._upgraded = True
        super().handle_websocket_upgrade()

    def on_message_begin(self) -> None:
        self._in_head = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_head()
        previous = self.cycle
        super().on_headers_complete()
        cycle = self.cycle  # (an upgrade makes none: the WebSocket protocol writes its own)
        if cycle is not None and cycle is not previous and not self.transport.is_closing():
            cycle.transport = _OneWrite(self.transport, self.loop)  # type: ignore[assignment]

    def _disarm_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        self.guards.timed_out.add()
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(HEAD_TIMEOUT)
        self.transport.close()


def server_options(settings: Settings) -> dict[str, Any]:
    """The ``uvicorn.Config`` arguments that carry the HTTP limits of ``settings``."""
    guards = Guards(
        header_timeout=settings.http_header_timeout_seconds,
        max_connections=max_connections(settings.http_max_connections),
    )
    return {
        "http": guards.protocol(),
        "timeout_keep_alive": settings.http_idle_timeout_seconds,
        # uvicorn's own WebSocket protocol, holding less per connection
        "ws": LeanWebSocketProtocol,
        # permessage-deflate when the client offers it (--no-ws-compression: never)
        "ws_per_message_deflate": settings.ws_compression,
    }


# -- WebSocket connections --------------------------------------------------------------------


class _Inbox:
    """What uvicorn's WebSocket protocol queues for the application's ``receive``: its
    ``asyncio.Queue`` without the three deques and the ``Event`` a queue allocates up front
    (about 3 KB per connection, most of an idle subscriber's queue).  One reader at a time
    (the connection's ``receive``), and rarely more than one message waiting: uvicorn stops
    reading the socket while one is queued.  ``get`` is no coroutine: a reader waits on a
    future that the next message is handed to (no frame of its own while idle)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._waiter: asyncio.Future[Any] | None = None

    def put_nowait(self, item: Any) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():  # (a reader cancelled: kept for the next)
            waiter.set_result(item)
        else:
            self._items.append(item)

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)

    def get(self) -> asyncio.Future[Any]:
        """The next message, as a future (done when one is waiting already)."""
        waiter = asyncio.get_running_loop().create_future()
        if self._items:
            waiter.set_result(self._items.pop(0))
        else:
            self._waiter = waiter
        return waiter


class _Writable:
    """uvicorn's ``writable`` flag (``asyncio.Event``'s ``set``/``clear``/``wait``) with a
    future made only while a sender waits for the transport to drain, not a deque per
    connection."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = True
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> bool:
        if self._set:
            return True
        waiter = self._waiter
        if waiter is None or waiter.done():
            waiter = self._waiter = asyncio.get_running_loop().create_future()
        await waiter
        return True


#: Header lines as clients send them (``Upgrade: websocket``, ``Host: ...``), each kept
#: once for every connection that sends it; bounded, as a client can send anything.  Only
#: of these headers: never a credential (``Authorization``, ``Cookie``) nor a line each
#: connection makes its own (``Sec-WebSocket-Key``).
_HEADERS: dict[tuple[bytes, bytes], tuple[bytes, bytes]] = {}
_HEADERS_MAX: Final = 1024
_SHARED_HEADERS: Final = frozenset(
    (
        b"host",
        b"upgrade",
        b"connection",
        b"origin",
        b"user-agent",
        b"pragma",
        b"cache-control",
        b"accept-encoding",
        b"accept-language",
        b"sec-websocket-version",
        b"sec-websocket-protocol",
        b"sec-websocket-extensions",
    )
)


#: permessage-deflate as uvicorn offers it (12-bit windows, ``memLevel`` 5), without context
#: takeover either way (RFC 7692 7.1.1): each message is compressed and decompressed on its
#: own, so an idle connection holds no zlib state (~45 KB per connection with takeover:
#: deflate's window, hash chains and pending buffer, inflate's state and window); one
#: factory for every connection.
DEFLATE: Final = (
    ServerPerMessageDeflateFactory(
        server_max_window_bits=12,
        client_max_window_bits=12,
        server_no_context_takeover=True,
        client_no_context_takeover=True,
        compress_settings={"memLevel": 5},
    ),
)


def _header(line: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    found = _HEADERS.get(line)
    if found is not None:
        return found
    if (
        len(_HEADERS) < _HEADERS_MAX
        and len(line[0]) + len(line[1]) <= 256
        and line[0].lower() in _SHARED_HEADERS
    ):
        _HEADERS[line] = line
    return line


def _text_frame_head(size: int, first: int = 0x81) -> bytes:
    """RFC 6455 head of an unmasked, final text frame of ``size`` bytes (a server's);
    ``first``: its first byte (0xC1: compressed, RSV1 set)."""
    if size < 126:
        return bytes((first, size))
    if size < 65_536:
        return struct.pack("!BBH", first, 126, size)
    return struct.pack("!BBQ", first, 127, size)


#: Compressed text frames of the last messages sent, by text and window: without context
#: takeover a message compresses to the same bytes on every connection, so a fan-out's
#: event is compressed once for all its subscribers, not once per subscriber.
_DEFLATED: dict[tuple[str, int], bytes] = {}
_DEFLATED_ENTRIES: Final = 32
_DEFLATED_MAX_TEXT: Final = 256 * 1024
_SYNC_TAIL: Final = b"\x00\x00\xff\xff"


def _deflated_frame(text: str, extension: PerMessageDeflate) -> bytes:
    """The whole frame of ``text`` compressed as ``extension`` (no context takeover on the
    server's side) compresses it: what ``websockets`` would write, made once per text."""
    key = (text, extension.local_max_window_bits)
    found = _DEFLATED.get(key)
    if found is not None:
        return found
    encoder = zlib.compressobj(
        wbits=-extension.local_max_window_bits, **extension.compress_settings
    )
    data = encoder.compress(text.encode()) + encoder.flush(zlib.Z_SYNC_FLUSH)
    if data.endswith(_SYNC_TAIL):
        data = data[:-4]
    frame = _text_frame_head(len(data), 0xC1) + data
    if len(text) <= _DEFLATED_MAX_TEXT:
        if len(_DEFLATED) >= _DEFLATED_ENTRIES:
            del _DEFLATED[next(iter(_DEFLATED))]
        _DEFLATED[key] = frame
    return frame


class LeanWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol (``websockets``' sans-I/O one, uvicorn's default) with
    less held per open connection and less work per text frame sent.

    * its receive queue and ``writable`` flag are :class:`_Inbox` and :class:`_Writable`;
    * the upgrade's request headers (already copied into the ASGI scope) and the 101
      response are let go once the handshake is answered (~4 KB that uvicorn and
      ``websockets`` keep for the connection's lifetime);
    * a text frame of an open connection with no extension negotiated
      (``permessage-deflate`` refused or not offered) is framed here, two to ten bytes of
      head and the payload in one ``write``, rather than through ``websockets``' frame
      objects (~1.6 µs less per frame);
    * permessage-deflate is :data:`DEFLATE`: without context takeover, so an idle
      connection that negotiated it holds no zlib state, and a text compresses to the same
      frame on every connection: it is compressed once (:func:`_deflated_frame`) for all
      the subscribers a fan-out sends it to.  Any other extension: ``websockets`` frames.

    * once accepted, the connection can be served outside its ASGI call
      (:data:`gateway.requestid.DETACH`, offered in the scope's extensions): the
      application hands a coroutine over, the protocol runs it as a task of the server's
      (``server_state.tasks``: uvicorn's shutdown waits for it as for an ASGI call), the
      ASGI call returns and its frames (uvicorn's, every middleware's, the router's, the
      endpoint's) and the ASGI scope are let go while the connection stays open; the
      connection is closed when that task ends, as when an ASGI call returns.

    Every other message, and every state check before a frame is written (the transport
    writable, the connection not lost, not closing), is uvicorn's.  Its attributes (uvicorn's
    and these) are slots, not an instance dictionary (~1.6 KB for some forty attributes;
    an attribute a later uvicorn adds still goes to one).
    """

    __slots__ = (
        # uvicorn's, and ours (detached)
        "app",
        "app_state",
        "asgi_version",
        "client",
        "close_sent",
        "close_timeout",
        "close_timer",
        "config",
        "conn",
        "connections",
        "curr_msg_data_type",
        "default_headers",
        "detached",
        "disconnected",
        "frames",
        "handshake_complete",
        "handshake_initiated",
        "initial_response",
        "last_ping_rtt",
        "logger",
        "loop",
        "pending_ping_payload",
        "ping_interval",
        "ping_sent_at",
        "ping_timeout",
        "ping_timer",
        "pong_timer",
        "queue",
        "read_paused",
        "request",
        "response",
        "root_path",
        "scheme",
        "scope",
        "server",
        "tasks",
        "transport",
        "writable",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Served outside its ASGI call (:meth:`detach`).
        self.detached = False
        self.queue = _Inbox()  # type: ignore[assignment]
        self.writable = _Writable()  # type: ignore[assignment]
        if self.conn.available_extensions:  # permessage-deflate (--ws-compression)
            self.conn.available_extensions = DEFLATE

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        # uvicorn copied the headers into the scope; the parser's frame holds the request
        # for the connection's lifetime.
        event.headers.clear()
        scope = getattr(self, "scope", None)
        if scope is not None:  # the header lines every connection sends, once
            scope["headers"] = [_header(line) for line in scope["headers"]]
            scope["extensions"][DETACH] = self.detach

    def detach(self, serve: Callable[[Any], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
        """Serve the accepted connection with ``serve(send)`` (a coroutine that ends when
        the connection should close; ``send``: this protocol's own), in a task of its own
        made in the caller's context; the ASGI call may return at once.  Once per
        connection, once accepted."""
        # (A connection lost meanwhile is detached all the same: its task reads the
        # disconnect already queued and ends.)
        if self.detached or not self.handshake_complete:
            raise RuntimeError("only an accepted connection is detached, and once")
        self.detached = True
        task = self.loop.create_task(serve(self.send))
        task.add_done_callback(self._detached_done)
        self.tasks.add(task)
        # Not needed once accepted (uvicorn reads it before the handshake only).
        self.scope["extensions"].pop(DETACH, None)
        self.scope = None  # type: ignore[assignment]
        return task

    def _detached_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled():
            exc = task.exception()
            if exc is not None and not isinstance(exc, ClientDisconnected):
                self.logger.error("Exception in ASGI application\n", exc_info=exc)
        if self.close_timer is None:  # as when an ASGI call returns
            self.transport.close()

    async def run_asgi(self) -> None:
        """uvicorn's, but a detached connection is not closed when the call returns."""
        try:
            result = await self.app(self.scope, self.receive, self.send)
        except ClientDisconnected:
            pass
        except BaseException:
            self.logger.exception("Exception in ASGI application\n")
            self.send_500_response()
        else:
            if not self.handshake_complete:
                self.logger.error("ASGI callable returned without completing handshake.")
                self.send_500_response()
            elif result is not None:
                self.logger.error("ASGI callable should return None, but returned '%s'.", result)
        if not self.detached and self.close_timer is None:
            self.transport.close()

    async def send(self, message: Any) -> None:
        extensions = self.conn.extensions
        deflate = extensions[0] if len(extensions) == 1 else None
        if (
            message["type"] == "websocket.send"
            and self.handshake_complete
            and not self.close_sent
            and self.initial_response is None
            and (
                not extensions
                or (isinstance(deflate, PerMessageDeflate) and deflate.local_no_context_takeover)
            )
        ):
            text = message.get("text")
            if text is not None and message.get("bytes") is None:
                if not self.writable.is_set():
                    await self.writable.wait()
                if self.disconnected or self.conn.state is not WsState.OPEN:
                    raise ClientDisconnected()
                if not self.close_sent:
                    if isinstance(deflate, PerMessageDeflate):
                        self.transport.write(_deflated_frame(text, deflate))
                    else:
                        data = text.encode()
                        self.transport.write(_text_frame_head(len(data)) + data)
                    return
        accepting = not self.handshake_complete
        await super().send(message)
        if accepting and self.handshake_complete:
            # answered (101, or refused): uvicorn reads the response no more
            self.response = None  # type: ignore[assignment]
