"""The upstream client's own HTTP/1.1 transport: httpx's client API over a lean connection pool.

httpx stays the client the project exposes; this is one of its pluggable transports
(``httpx.AsyncBaseTransport``).  The default transport (httpx's ``AsyncHTTPTransport`` over
httpcore's pool, h11, and :mod:`gateway.core.upstream.transport`'s asyncio network) does, for
each small upstream request, several layers of Python: httpx -> httpcore request conversion,
the pool's request queue and its scan of every connection, h11's event state machine, per-read
trace hooks and exception maps.  Measured on the gateway (``tests/bench/bench_rps.py``,
docs/performance.md "per-request cost") that was ~40 % of its CPU on a small GraphQL get.

:class:`LeanTransport` speaks HTTP/1.1 itself: one :class:`asyncio.Protocol` per pooled
connection, on the running loop's own transports and TLS (uvloop's, in C, under ``kube-gateway
serve``); the request head is written in one ``write``; the answer is parsed by ``httptools``
(llhttp, the parser uvicorn uses) as bytes arrive, so a small answer is whole by the time its
headers are: such an answer is handed over in memory (an ``httpx.ByteStream``), its connection
already back in the pool, and only an answer whose body is still coming is streamed.  What it
keeps of httpcore's behaviour:

* keep-alive: a connection goes back to the pool once its answer was read to the end and
  neither side asked to close; idle connections are taken last-in first-out and closed after
  ``keepalive_expiry`` (httpx's 5 s); one the server closed is seen by the loop (end of stream)
  and dropped without a system call;
* a request that failed on a *reused* connection before any byte of an answer came (the server
  closed it as it was taken) is sent once more on a new connection when it is idempotent and
  its body is in memory, as httpcore's stale-connection handling gives;
* an answer is its own bytes only: interim answers (100 Continue, 103 Early Hints) before it
  and trailers after a chunked body are skipped, and bytes past its end (a second answer in
  the same write) close its connection, as nothing of them can belong to the request;
* streaming bodies (watches, large lists, logs): an answer's body is handed on chunk by chunk
  as it arrives; past ``_HIGH_WATER`` bytes unread, the connection stops reading (TCP pushes
  back on the server) until the reader catches up;
* timeouts (httpx's ``connect``/``read``/``write``/``pool`` of the request) and errors as
  httpx's own: ``ConnectError``/``ConnectTimeout``, ``ReadError``/``ReadTimeout``,
  ``RemoteProtocolError`` (a cut body, a malformed answer), ``WriteError``, ``PoolTimeout``;
  header values with a line break or NUL are refused before anything is sent
  (``LocalProtocolError``), as h11 refuses them;
* TLS with the client's ``ssl.SSLContext`` (the CA of the kubeconfig; the gateway's client
  certificate in gateway-identity mode) and the ``sni_hostname`` request extension.

HTTP/2 is not spoken here: with ``--upstream-http2`` the client keeps httpcore's pool.  The
gateway sets no proxy (``trust_env=False``), so none is supported.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import socket
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any, Final

import httptools
import httpx

__all__ = ["READ_WHOLE", "LeanTransport", "encoded_headers", "whole_answer"]

#: Unread body bytes past which a connection stops reading (and resumes below a quarter).
_HIGH_WATER: Final = 256 * 1024
#: Bytes waiting in the transport past which a request body write waits for it to drain.
_WRITE_HIGH_WATER: Final = 64 * 1024
#: Methods sent again on a new connection when a reused one failed before any answer.
_IDEMPOTENT: Final = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
_CRLF: Final = b"\r\n"
#: A request extension: its caller reads the answer whole (``read()``), never as a raw
#: stream, so an answer whole with its head may be given read already (:func:`whole_answer`).
READ_WHOLE: Final = "kube_gateway.read_whole"
#: The most bytes an answer's status line and headers may take (h11's limit is 16 KiB;
#: the apiserver's headers are well under it): an endless head is refused, not buffered.
MAX_HEAD_BYTES: Final = 64 * 1024


class _Stale(Exception):
    """A reused connection ended before any byte of an answer: the request may be retried."""

    def __init__(self, error: httpx.TransportError) -> None:
        super().__init__(str(error))
        self.error = error


class _Connection(asyncio.Protocol):
    """One pooled HTTP/1.1 connection: the loop's transport, the answer being parsed, and the
    state the pool asks about (ended? idle since when?)."""

    __slots__ = (
        "_deadline",
        "_drained",
        "_timer",
        "_timer_at",
        "_waiter",
        "body",
        "buffered",
        "complete",
        "ended",
        "error",
        "head_bytes",
        "headers",
        "idle_since",
        "in_use",
        "keep_alive",
        "parser",
        "pool",
        "reading_paused",
        "reason",
        "received",
        "status",
        "transport",
        "write_paused",
    )

    def __init__(self, pool: LeanTransport) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser: Any = None
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        #: The server ended the connection (or it broke: then ``error`` says how).
        self.ended = False
        self.error: BaseException | None = None
        #: Some byte of the current answer arrived.
        self.received = False
        self.head_bytes = 0
        self.in_use = False
        self.idle_since = 0.0
        self.reading_paused = False
        self.write_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        #: The read deadline of the current wait (the loop's time), if it has one, and the
        #: connection's read timer, when armed, and its time.
        self._deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    # -- the loop's side -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.in_use:  # bytes nobody asked for: the connection is not reusable
            self.ended = True
            self.pool._forget(self)
            if self.transport is not None:
                self.transport.abort()
            return
        self.received = True
        if not self.status:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
            if not self.status and self.head_bytes > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError(
                    f"the upstream's answer head is over {MAX_HEAD_BYTES} bytes"
                )
        except httptools.HttpParserError as exc:
            cause = exc.__context__  # (what a callback of ours raised, if one did)
            self._fail(
                cause
                if isinstance(cause, httpx.RemoteProtocolError)
                else httpx.RemoteProtocolError(f"malformed answer from the upstream: {exc}")
            )
        except httpx.RemoteProtocolError as exc:
            self._fail(exc)
        self._wake()

    def _fail(self, error: httpx.TransportError) -> None:
        self.error = error
        self.ended = True
        if self.transport is not None:
            self.transport.abort()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        if self._timer is not None:  # (it holds this connection until it fires)
            self._timer.cancel()
            self._timer = None
        # the parser holds this connection's bound methods: a cycle the cyclic collector
        # (held off in a served process) would be left to free with the socket's buffers
        self.parser = None
        if exc is not None and self.error is None:
            self.error = exc
        self._wake()
        self.write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if not self.in_use:
            self.pool._forget(self)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # -- httptools' callbacks --------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # bytes past the answer's end: the connection is out of step
            raise httpx.RemoteProtocolError("the upstream sent more than its answer")

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.status:  # (a trailer, after a chunked body, is dropped as httpx drops it)
            self.headers.append((name, value.rstrip(b" \t")))  # (llhttp keeps trailing OWS)

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200 and status != 101:
            # an interim answer (100 Continue, 103 Early Hints): skipped, as httpx skips it
            self.reason = b""
            self.headers = []
            return
        self.status = status
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and not self.reading_paused and self.transport:
            self.reading_paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if not self.status:  # an interim answer's end: the answer is still to come
            return
        self.complete = True
        # (asked now: once the message is over, llhttp answers for the next one)
        self.keep_alive = self.parser.should_keep_alive()

    # -- the request's side ----------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Until the loop delivers something on this connection.

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
        """
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        if timeout is not None:
            self._deadline = due = loop.time() + timeout
            # One timer per connection, re-armed when it fires early, rather than one made
            # and cancelled per wait (asyncio.timeout's, ~9 µs a call on uvloop): a call's
            # deadline on a kept-alive connection is most often later than the last one's.
            if self._timer is None or self._timer_at > due:
                if self._timer is not None:
                    self._timer.cancel()
                self._timer_at = due
                self._timer = loop.call_at(due, self._timed)
        try:
            await waiter
        finally:
            self._waiter = None
            self._deadline = None

    def _timed(self) -> None:
        """The read timer: the waiter's deadline passed (it times out), or lies further on
        (the timer is armed again for it), or nobody waits with one (the timer lapses)."""
        self._timer = None
        due, waiter = self._deadline, self._waiter
        if due is None or waiter is None or waiter.done():
            return
        if due <= self._timer_at:
            waiter.set_exception(TimeoutError())
            return
        self._timer_at = due
        self._timer = asyncio.get_running_loop().call_at(due, self._timed)

    def start(self, method: str) -> None:
        """Ready for a new answer."""
        self.in_use = True
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.reason = b""
        self.headers = []
        self.complete = False
        self.received = False
        self.head_bytes = 0

    def broken(self) -> httpx.TransportError:
        """The error for a connection that ended before its answer did."""
        error = self.error
        if isinstance(error, httpx.TransportError):
            return error
        if error is not None:
            return httpx.ReadError(str(error) or type(error).__name__)
        if self.status:
            return httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )
        return httpx.RemoteProtocolError("Server disconnected without sending a response.")

    def until_eof(self) -> bool:
        """The answer's body ends with the connection (no length, not chunked)."""
        names = {name.lower() for name, _ in self.headers}
        return b"content-length" not in names and b"transfer-encoding" not in names

    def reusable(self) -> bool:
        """The answer was received to its end and read to it (no byte of it left for the
        next request on the connection), and neither side asked to close."""
        return (
            self.complete
            and not self.body
            and self.keep_alive
            and not self.ended
            and self.transport is not None
            and not self.transport.is_closing()
        )

    async def drained(self) -> None:
        while self.write_paused and not self.ended:
            self._drained = asyncio.get_running_loop().create_future()
            try:
                await self._drained
            finally:
                self._drained = None

    def take(self) -> bytes | None:
        """The next body chunk received, if any; reading resumes once most was taken."""
        body = self.body
        if not body:
            return None
        chunk = body.popleft() if len(body) == 1 else b"".join(body)
        body.clear()
        self.buffered = 0
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()
        return chunk

    def close(self) -> None:
        self.ended = True
        if self.transport is not None:
            self.transport.abort()


class _Body(httpx.AsyncByteStream):
    """An answer's body as it arrives; closing it gives the connection back (or closes it)."""

    __slots__ = ("_closed", "_conn", "_read")

    def __init__(self, conn: _Connection, read: float | None) -> None:
        self._conn: _Connection | None = conn
        self._read = read
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            return
        while True:
            chunk = conn.take()
            if chunk is not None:
                yield chunk
                continue
            if conn.complete:
                return
            if conn.ended:
                if conn.error is None and conn.until_eof():
                    return  # an answer framed by the end of the connection
                raise conn.broken()
            try:
                await conn.wait(self._read)
            except TimeoutError:
                raise httpx.ReadTimeout("timed out reading the upstream's answer") from None

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        # httpx's response and its bound stream are a cycle the cyclic collector frees
        # (held off in a served process: a long-lived watch's answer reaches the oldest
        # generation): without this reference the connection, its transport and buffers are
        # freed as soon as the connection closes, not with that cycle
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.pool._release(conn)


class LeanTransport(httpx.AsyncBaseTransport):
    """An HTTP/1.1 transport with a keep-alive pool, for one upstream (see the module).

    Args:
        ssl_context: verifies ``https`` upstreams (and presents the client certificate it
            holds, if any).
        max_connections: the most connections open at once; a request past it waits for
            one (the request's ``pool`` timeout).
        keepalive_expiry: an idle connection older than this is closed, not reused.
    """

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None = None,
        *,
        max_connections: int = 512,
        keepalive_expiry: float = 5.0,
    ) -> None:
        self._ssl = ssl_context
        self._max = max_connections
        self._expiry = keepalive_expiry
        #: Idle connections, the most recently used last.
        self._idle: list[_Connection] = []
        self._open = 0
        self._waiting: collections.deque[asyncio.Future[_Connection | None]] = collections.deque()
        self._closed = False

    # -- the pool ----------------------------------------------------------------------------

    @property
    def connections(self) -> int:
        """Connections open (idle or in use)."""
        return self._open

    @property
    def idle(self) -> int:
        return len(self._idle)

    def _forget(self, conn: _Connection) -> None:
        """An idle connection ended on the server's side: out of the pool."""
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)
            self._gone()

    def _gone(self) -> None:
        """One connection fewer: a request waiting for one may open its own."""
        self._open -= 1
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _release(self, conn: _Connection) -> None:
        conn.in_use = False
        if self._closed or not conn.reusable():
            conn.close()
            self._gone()
            return
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                conn.in_use = True
                waiter.set_result(conn)
                return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    async def _acquire(
        self, url: httpx.URL, timeouts: dict[str, float | None], sni: str | None, fresh: bool
    ) -> tuple[_Connection, bool]:
        """A connection for one request, and whether it was used before."""
        idle = self._idle
        if idle:
            now = time.monotonic()
            while idle and now - idle[0].idle_since > self._expiry:
                idle.pop(0).close()
                self._gone()
            while idle and not fresh:
                conn = idle.pop()
                if not conn.ended and not conn.transport.is_closing():  # type: ignore[union-attr]
                    conn.in_use = True
                    return conn, True
                conn.close()
                self._gone()
        if self._open >= self._max:
            waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                async with asyncio.timeout(timeouts.get("pool")):
                    got = await waiter
            except BaseException as exc:
                # (a slot or a connection handed over as this request went, its timeout
                # due in the same turn of the loop included, goes on to the next)
                if waiter.done() and not waiter.cancelled():
                    got = waiter.result()
                    if got is None:
                        self._open += 1
                        self._gone()
                    else:
                        self._release(got)
                if isinstance(exc, TimeoutError):
                    raise httpx.PoolTimeout("no upstream connection became free in time") from None
                raise
            if got is not None:
                return got, True
        # (a free slot: ours, as a connection of the pool's count, from here on)
        self._open += 1
        try:
            return await self._connect(url, timeouts.get("connect"), sni), False
        except BaseException:
            self._gone()
            raise

    async def _connect(self, url: httpx.URL, timeout: float | None, sni: str | None) -> _Connection:
        loop = asyncio.get_running_loop()
        host = url.host
        tls = url.scheme == "https"
        port = url.port or (443 if tls else 80)
        if tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self),
                    host,
                    port,
                    ssl=self._ssl if tls else None,
                    server_hostname=(sni or host) if tls else None,
                    family=socket.AF_UNSPEC,
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except (OSError, EOFError) as exc:  # ssl.SSLError and ConnectionError are OSErrors
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from None
        conn.in_use = True
        return conn

    # -- one request -------------------------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"the upstream transport speaks http(s), not {url}")
        head = _head(request)
        stream = request.stream
        content = stream._stream if isinstance(stream, httpx.ByteStream) else None
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        sni = request.extensions.get("sni_hostname")
        if isinstance(sni, bytes):
            sni = sni.decode("ascii")
        retry = content is not None and request.method in _IDEMPOTENT
        fresh = False
        while True:
            conn, reused = await self._acquire(url, timeouts, sni, fresh)
            try:
                return await self._exchange(conn, request, head, content, timeouts)
            except _Stale as stale:
                if not (reused and retry):
                    raise stale.error from None
                fresh = True  # once more, on a new connection

    async def _exchange(
        self,
        conn: _Connection,
        request: httpx.Request,
        head: bytes,
        content: bytes | None,
        timeouts: dict[str, float | None],
    ) -> httpx.Response:
        conn.start(request.method)
        transport = conn.transport
        assert transport is not None
        try:
            try:
                if content is not None:
                    transport.write(head + content if len(content) < 65536 else head)
                    if len(content) >= 65536:
                        transport.write(content)
                    if conn.write_paused:
                        await _write_wait(conn, timeouts.get("write"))
                else:
                    transport.write(head)
                    chunked = "content-length" not in request.headers
                    async for chunk in request.stream:  # type: ignore[union-attr]
                        if chunk:
                            transport.write(
                                b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk
                            )
                            if conn.write_paused:
                                await _write_wait(conn, timeouts.get("write"))
                    if chunked:
                        transport.write(b"0\r\n\r\n")
            except (OSError, RuntimeError) as exc:
                raise httpx.WriteError(str(exc) or type(exc).__name__) from None
            read = timeouts.get("read")
            while not conn.status:
                if conn.ended:
                    error = conn.broken()
                    raise error if conn.received else _Stale(error)
                try:
                    await conn.wait(read)
                except TimeoutError:
                    raise httpx.ReadTimeout("timed out waiting for the upstream's answer") from None
            if request.method == "HEAD":
                conn.complete = True
                conn.ended = True  # the parser would read the next answer as this one's body
            elif conn.complete:
                # The whole answer came with its head (a small one nearly always does): its
                # body in memory and the connection back in the pool now, so that reading
                # the answer is no walk through httpx's async byte-stream layers.
                answer = whole_answer(
                    conn.status,
                    conn.reason,
                    conn.headers,
                    conn.take() or b"",
                    read=bool(request.extensions.get(READ_WHOLE)),
                )
                self._release(conn)
                return answer
        except BaseException:
            conn.in_use = False
            conn.close()
            self._gone()
            raise
        return httpx.Response(
            conn.status,
            headers=encoded_headers(conn.headers),
            stream=_Body(conn, read),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": conn.reason},
        )

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
            self._open -= 1
        for waiter in self._waiting:
            if not waiter.done():
                waiter.cancel()
        self._waiting.clear()
        await asyncio.sleep(0)  # let the loop run the closes


def _keeps_triples() -> bool:
    """Does this httpx keep a ``Headers``' items as ``(name, lowered name, value)`` in
    ``_list`` beside its ``_encoding``, and a ``Response``'s body read in ``_content``
    (httpx 0.28's layout)?"""
    headers = httpx.Headers([(b"X-Probe", b"1")])
    response = httpx.Response(200, headers=headers, stream=httpx.ByteStream(b"x"))
    response.read()
    return (
        vars(headers) == {"_list": [(b"X-Probe", b"x-probe", b"1")], "_encoding": None}
        and getattr(response, "_content", None) == b"x"
        and response.num_bytes_downloaded == 1
    )


#: httpx's own layout is known (else every answer and request is built the public way).
_TRIPLES: Final = _keeps_triples()


def encoded_headers(raw: list[tuple[bytes, bytes]]) -> httpx.Headers:
    """``httpx.Headers(raw)`` for names and values that are bytes already: the same items
    (each name beside its lowered form, as httpx keeps them) without httpx's per-item
    normalisation, which for bytes changes nothing."""
    if not _TRIPLES:
        return httpx.Headers(raw)
    headers = httpx.Headers.__new__(httpx.Headers)
    headers._list = [(name, name.lower(), value) for name, value in raw]
    headers._encoding = None
    return headers


def whole_answer(
    status: int, reason: bytes, raw: list[tuple[bytes, bytes]], body: bytes, *, read: bool
) -> httpx.Response:
    """An answer whose body came whole with its head (``Response(stream=ByteStream(body))``)
    for less: its headers are :func:`encoded_headers` with the encoding httpx would find
    (``ascii`` when every name and value is).  ``read`` (the request said :data:`READ_WHOLE`):
    a body without ``Content-Encoding`` is in place as ``read()`` leaves it (the response
    closed, its stream consumed), where httpx's read walks its decoder and chunker layers for
    the same bytes; one with an encoding, or not ``read``, is left for httpx to read."""
    headers = encoded_headers(raw)
    answer = httpx.Response(
        status,
        headers=headers,
        stream=httpx.ByteStream(body),
        extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
    )
    if not _TRIPLES:
        return answer
    if b"".join(itertools.chain.from_iterable(raw)).isascii():
        answer.headers.encoding = "ascii"  # what httpx would find, without its two passes
    if read and all(name != b"content-encoding" for _, name, _ in answer.headers._list):
        answer._content = body
        answer._num_bytes_downloaded = len(body)
        answer.is_stream_consumed = answer.is_closed = True
    return answer


async def _write_wait(conn: _Connection, timeout: float | None) -> None:
    try:
        async with asyncio.timeout(timeout):
            await conn.drained()
    except TimeoutError:
        raise httpx.WriteTimeout("timed out writing to the upstream") from None
    if conn.ended and conn.error is not None:
        raise OSError(str(conn.error) or "the connection was lost")


def _head(request: httpx.Request) -> bytes:
    """The request line and headers, checked as h11 checks them (no line break or NUL in a
    header, so no caller's value can add a header or a request)."""
    lines = [b"%b %b HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)]
    lines += [b"%b: %b" % pair for pair in request.headers.raw]
    if not isinstance(request.stream, httpx.ByteStream) and not (
        "content-length" in request.headers or "transfer-encoding" in request.headers
    ):
        lines.append(b"Transfer-Encoding: chunked")
    lines += [b"", b""]
    head = _CRLF.join(lines)
    count = len(lines) - 1
    if head.count(b"\n") != count or head.count(b"\r") != count or b"\0" in head:
        raise httpx.LocalProtocolError("a header value holds a line break or a NUL byte")
    return head
