"""httpcore's network layer for the upstream client, on asyncio's own transports.

httpx's connection pool (httpcore) talks to the network through a pluggable *network backend*.
Its default on asyncio is anyio's: a socket stream and, for ``https``, anyio's ``TLSStream``,
which runs TLS in Python over ``ssl.MemoryBIO``.  Measured on the gateway at 32 concurrent small
requests (``tests/bench/bench_rps.py``, py-spy; docs/performance.md), that layer held about a
third of the gateway's CPU: every request makes the pool ask each pooled connection whether the
server closed it (``has_expired`` -> ``get_extra_info("is_readable")``), and anyio answers by
building dictionaries of every attribute of the TLS and socket layers and polling the socket;
each read and write then goes through anyio's stream layers.

:class:`AsyncioBackend` gives httpcore the same network through the running loop's own
transports (``loop.create_connection`` and ``loop.start_tls``: uvloop's, in C, when the gateway
runs on uvloop, as it does by default): TLS in the loop's SSL protocol, reads from a buffer the
loop fills, writes straight to the transport, and "has the server closed this idle
connection?" answered from state the loop keeps (end of stream seen, bytes waiting, transport
closing), with no system call.  Everything above it is unchanged: httpx's client and
httpcore's pool, HTTP/1.1 (h11) and HTTP/2 (h2, chosen by ALPN from the ``ssl_object``), the
timeouts, and the errors (httpcore's ``ConnectError``, ``ReadError``, ``ReadTimeout`` ... that
httpx maps to its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Iterable, Iterator
from typing import Any, cast

import httpcore
import httpx

__all__ = ["AsyncioBackend", "LinearPool", "use_asyncio_backend"]

#: Above this many bytes waiting in the transport, a write waits for the buffer to drain.
_HIGH_WATER = 64 * 1024


@contextlib.contextmanager
def _mapped(timeout_error: type[Exception], os_error: type[Exception]) -> Iterator[None]:
    try:
        yield
    except TimeoutError as exc:  # asyncio.timeout's (TimeoutError on Python >= 3.11)
        raise timeout_error(str(exc) or type(exc).__name__) from exc
    except (OSError, EOFError) as exc:  # ssl.SSLError and ConnectionError are OSErrors
        raise os_error(str(exc) or type(exc).__name__) from exc


def _deadline(timeout: float | None) -> asyncio.Timeout:
    return asyncio.timeout(timeout)


class _Protocol(asyncio.Protocol):
    """What the loop delivers on one connection: received bytes, end of stream, loss, and
    the transport's write flow control."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.lost: BaseException | None = None
        self.paused = False
        self._reader: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.lost = exc
        self._wake_reader()
        self.paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _wake_reader(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)

    async def readable(self) -> None:
        """Once bytes are waiting or the stream has ended."""
        self._reader = asyncio.get_running_loop().create_future()
        try:
            await self._reader
        finally:
            self._reader = None

    async def drained(self) -> None:
        """Once the transport takes writes again (or the connection is gone)."""
        while self.paused and self.lost is None:
            self._drained = asyncio.get_running_loop().create_future()
            try:
                await self._drained
            finally:
                self._drained = None


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection: an asyncio transport and its :class:`_Protocol`."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        protocol = self._protocol
        if not protocol.buffer and not protocol.eof:
            with _mapped(httpcore.ReadTimeout, httpcore.ReadError):
                if timeout is None:
                    await protocol.readable()
                else:
                    async with _deadline(timeout):
                        await protocol.readable()
        buffer = protocol.buffer
        if buffer:
            if len(buffer) <= max_bytes:
                data = bytes(buffer)
                buffer.clear()
            else:
                data = bytes(buffer[:max_bytes])
                del buffer[:max_bytes]
            return data
        if protocol.lost is not None:  # the connection broke rather than ended
            raise httpcore.ReadError(str(protocol.lost) or type(protocol.lost).__name__)
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        protocol = self._protocol
        if protocol.lost is not None or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        with _mapped(httpcore.WriteTimeout, httpcore.WriteError):
            self._transport.write(buffer)
            if protocol.paused or self._transport.get_write_buffer_size() > _HIGH_WATER:
                if timeout is None:
                    await protocol.drained()
                else:
                    async with _deadline(timeout):
                        await protocol.drained()
        if protocol.lost is not None:
            raise httpcore.WriteError(str(protocol.lost) or "the connection was lost")

    async def aclose(self) -> None:
        # As anyio does: close, let the loop run the close (the socket is released in a
        # callback the close schedules), then abort what is left (a TLS transport would
        # otherwise wait for the server's close_notify).
        transport = self._transport
        if transport.is_closing():
            return
        transport.close()
        await asyncio.sleep(0)
        transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
                async with _deadline(timeout):
                    transport = await loop.start_tls(
                        self._transport,
                        self._protocol,
                        ssl_context,
                        server_side=False,
                        server_hostname=server_hostname,
                    )
        except BaseException:
            self._transport.close()
            raise
        if transport is None:  # pragma: no cover - the loop closed the connection meanwhile
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        # (uvloop's TLS transport is one in kind, not an asyncio.Transport subclass)
        return AsyncioStream(transport, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # Asked of every idle pooled connection on each request: has the server closed
            # it (or sent bytes nobody asked for)?  The loop reads every connection as data
            # comes, so its state answers without a system call.
            protocol = self._protocol
            return bool(protocol.buffer) or protocol.eof or self._transport.is_closing()
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        return None


def _set_options(
    transport: asyncio.Transport, options: Iterable[httpcore.SOCKET_OPTION] | None
) -> None:
    sock = transport.get_extra_info("socket")
    for option in options or ():
        sock.setsockopt(*option)


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend on the running asyncio loop's transports."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
            async with _deadline(timeout):
                # asyncio sets TCP_NODELAY on TCP connections, as anyio does.
                transport, protocol = await loop.create_connection(
                    _Protocol,
                    host,
                    port,
                    local_addr=(local_address, 0) if local_address else None,
                    family=socket.AF_UNSPEC,
                )
            _set_options(transport, socket_options)
        return AsyncioStream(transport, protocol)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
            async with _deadline(timeout):
                transport, protocol = await loop.create_unix_connection(_Protocol, path)
            _set_options(transport, socket_options)
        return AsyncioStream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class LinearPool(httpcore.AsyncConnectionPool):
    """httpcore's connection pool, with its bookkeeping linear in the pooled connections.

    On every request (and every response closed) the pool walks its connections to drop the
    closed and expired ones and to close surplus idle ones; for each idle connection httpcore
    1.0 counts every pooled connection again through a list of ``is_idle()`` calls, so each
    request cost a number of calls that grew with the square of the connections (at 32
    concurrent, about a quarter of the gateway's CPU on a small GraphQL get).  The count
    is the length of the pool's list, so this asks for it directly; the idle connections a
    queued request may close are listed only when it needs one.  Decisions are the same as
    httpcore 1.0's, in the same order (``use_asyncio_backend`` uses this class only with
    httpcore 1.0, whose method this follows).
    """

    def _assign_requests_to_connections(self) -> list[httpcore.AsyncConnectionInterface]:
        closing: list[httpcore.AsyncConnectionInterface] = []
        connections = self._connections
        for connection in list(connections):
            if connection.is_closed():
                connections.remove(connection)
            elif connection.has_expired() or (
                connection.is_idle() and len(connections) > self._max_keepalive_connections
            ):
                connections.remove(connection)
                closing.append(connection)

        for pool_request in self._requests:
            if not pool_request.is_queued():
                continue
            origin = pool_request.request.url.origin
            available = next(
                (c for c in connections if c.can_handle_request(origin) and c.is_available()),
                None,
            )
            if available is not None:
                pool_request.assign_to_connection(available)
            elif len(connections) < self._max_connections:
                connection = self.create_connection(origin)
                connections.append(connection)
                pool_request.assign_to_connection(connection)
            elif (idle := next((c for c in connections if c.is_idle()), None)) is not None:
                connections.remove(idle)
                closing.append(idle)
                connection = self.create_connection(origin)
                connections.append(connection)
                pool_request.assign_to_connection(connection)
        return closing


def use_asyncio_backend(transport: httpx.AsyncHTTPTransport) -> bool:
    """Make ``transport``'s connection pool open its connections with :class:`AsyncioBackend`
    (before it has opened any).  False, and nothing changed, when this httpx does not keep
    an httpcore pool where this version does."""
    pool = getattr(transport, "_pool", None)
    if not isinstance(pool, httpcore.AsyncConnectionPool) or not hasattr(pool, "_network_backend"):
        return False
    pool._network_backend = AsyncioBackend()
    if type(pool) is httpcore.AsyncConnectionPool and httpcore.__version__.startswith("1.0."):
        pool.__class__ = LinearPool  # same state, the linear bookkeeping
    return True
