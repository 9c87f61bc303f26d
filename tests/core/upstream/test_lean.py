"""The upstream client's own HTTP/1.1 transport (``gateway.core.upstream.lean``, the default
``--upstream-network lean``) on real sockets: the demo upstream with its fault injection (a
body cut mid-way, 429 with Retry-After, gzip, watches read as they come), small servers of
the test's own for what a real server does at the edges (a connection closed while idle, one
closed as a request is sent on it, slow headers, chunked and content-length bodies split over
many writes, a connection-framed body, interim answers, bytes past an answer's end, half an
answer and then nothing), TLS with the kubeconfig's CA and the gateway's client
certificate, keep-alive reuse and the pool's limit, on both loops the gateway may run on."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvloop

from gateway.core.model.options import ListOptions
from gateway.core.model.registry import POD, REGISTRY
from gateway.core.upstream.adapter import KubeAdapter, Request
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.credentials import ANONYMOUS, Credential
from gateway.core.upstream.lean import READ_WHOLE, LeanTransport
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.sample import make_pods
from tests.core.upstream.upstream_fixtures import EchoServer, Pki, b64, pki, resolve
from tests.core.upstream.upstream_fixtures import write_kubeconfig as kubeconfig
from tests.support.serve_process import free_port

__all__ = ["pki"]  # fixtures

RUNNERS: dict[str, Callable[[Coroutine[Any, Any, None]], None]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}
ADMIN = {"Authorization": "Bearer admin-token"}


@pytest.fixture
async def demo() -> AsyncIterator[DemoUpstream]:
    async with DemoUpstream() as upstream:
        yield upstream


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[str]:
    """A raw TCP server on loopback running ``handler`` per connection; yields its URL."""

    tasks: set[asyncio.Task[None]] = set()

    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                await handler(reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()
            tasks.discard(task)

    server = await asyncio.start_server(guarded, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":", 1)[1]))
    return head


def answer(body: bytes, status: str = "200 OK") -> bytes:
    return b"HTTP/1.1 %b\r\ncontent-length: %d\r\n\r\n%b" % (status.encode(), len(body), body)


def lean(url: str, **kwargs: Any) -> httpx.AsyncClient:
    client = build_http_client(resolve(server=url), **kwargs)
    assert isinstance(client._transport, LeanTransport)  # the default
    return client


# -- keep-alive, and connections the server ends ---------------------------------------------


@pytest.mark.parametrize("loop", RUNNERS)
def test_keep_alive_reuses_connections_and_the_pool_holds_its_limit(loop: str) -> None:
    connections = 0
    held = 0
    gate: asyncio.Event
    both_held: asyncio.Event

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections, held
        connections += 1
        mine = connections
        while True:
            head = await read_request(reader)
            if b"/slow" in head:
                held += 1
                if held == 2:
                    both_held.set()
                await gate.wait()
            writer.write(answer(b'{"n": %d}' % mine))
            await writer.drain()

    async def run() -> None:
        nonlocal gate, both_held
        gate, both_held = asyncio.Event(), asyncio.Event()
        async with serving(handler) as url, lean(url, max_connections=2) as client:
            for _ in range(20):
                assert (await client.get("/api")).json() == {"n": 1}
            assert connections == 1  # one connection, kept alive
            transport = client._transport
            assert isinstance(transport, LeanTransport)
            # Two slow requests hold both connections: a third waits for one, and gives up
            # after its pool timeout with httpx's PoolTimeout.
            slow = [asyncio.create_task(client.get("/slow")) for _ in range(2)]
            async with asyncio.timeout(10):
                await both_held.wait()
            assert transport.idle == 0
            with pytest.raises(httpx.PoolTimeout):
                await client.get("/api", timeout=httpx.Timeout(10, pool=0.2))
            waiting = asyncio.create_task(client.get("/api"))
            gate.set()
            answers = await asyncio.gather(*slow, waiting)
            assert {r.status_code for r in answers} == {200}
            assert connections == 2 and transport.connections == 2

    RUNNERS[loop](run())


async def test_a_request_waiting_for_a_slot_opens_its_own_connection_within_the_limit() -> None:
    """With one connection allowed: the one in use ends (the server says ``Connection:
    close``), and the request waiting for it opens a new one; the pool never holds more than
    its limit open at the server."""
    open_now = peak = 0
    gate = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now, peak
        open_now += 1
        peak = max(peak, open_now)
        try:
            while True:
                head = await read_request(reader)
                if b"/close" in head:
                    await gate.wait()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}"
                    )
                    await writer.drain()
                    return
                writer.write(answer(b"{}"))
                await writer.drain()
        finally:
            open_now -= 1

    async with serving(handler) as url, lean(url, max_connections=1) as client:
        transport = client._transport
        assert isinstance(transport, LeanTransport)
        closing = asyncio.create_task(client.get("/close"))
        waiting = [asyncio.create_task(client.get("/api")) for _ in range(3)]
        gate.set()
        answers = await asyncio.gather(closing, *waiting)
        assert {r.status_code for r in answers} == {200}
        assert transport.connections == 1 and transport.idle == 1
        answers = await asyncio.gather(*(client.get("/api") for _ in range(10)))
        assert {r.status_code for r in answers} == {200}
        assert transport.connections == 1
    assert peak == 1


@pytest.mark.parametrize("loop", RUNNERS)
def test_a_connection_the_server_closed_while_idle_is_not_reused(loop: str) -> None:
    connections = 0

    async def one_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(answer(b"{}"))
        await writer.drain()

    async def run() -> None:
        async with serving(one_answer) as url, lean(url) as client:
            transport = client._transport
            assert isinstance(transport, LeanTransport)
            for i in range(5):
                assert (await client.get("/api")).status_code == 200
                deadline = time.monotonic() + 10
                while transport.connections:  # the loop saw the close: out of the pool
                    assert time.monotonic() < deadline, "the close never reached the client"
                    await asyncio.sleep(0.001)
                assert connections == i + 1
            # Closed after each answer without a word: the next POST too goes on a new one.
            assert (await client.post("/api", content=b"{}")).status_code == 200

    RUNNERS[loop](run())


@pytest.mark.parametrize("loop", RUNNERS)
def test_a_reused_connection_closed_as_a_request_goes_is_retried_when_idempotent(
    loop: str,
) -> None:
    """The server keeps each connection open after its first answer, then closes it at the
    second request without answering (what a server's idle timeout racing a request looks
    like).  A GET (or a PUT, a DELETE) is sent once more on a new connection; a POST is not
    (it may have been acted on) and fails with httpx's RemoteProtocolError."""
    seen: list[bytes] = []

    async def first_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append((await read_request(reader)).split(b" ", 1)[0])
        writer.write(answer(b"{}"))
        await writer.drain()
        seen.append((await read_request(reader)).split(b" ", 1)[0] + b" dropped")

    async def run() -> None:
        async with serving(first_only) as url, lean(url) as client:
            assert (await client.get("/a")).status_code == 200
            assert (await client.get("/a")).status_code == 200  # dropped, then retried
            assert (await client.delete("/a")).status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post("/a", content=b"{}")
        assert seen == [
            b"GET",  # connection 1
            b"GET dropped",
            b"GET",  # connection 2: the retry
            b"DELETE dropped",
            b"DELETE",  # connection 3: the retry
            b"POST dropped",  # not retried
        ]

    RUNNERS[loop](run())


# -- bodies ------------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", RUNNERS)
def test_chunked_content_length_and_connection_framed_bodies_split_over_writes(
    loop: str,
) -> None:
    payload = orjson.dumps({"items": [{"n": i, "pad": "x" * 50} for i in range(2000)]})

    async def pieces(writer: asyncio.StreamWriter, data: bytes, size: int) -> None:
        for at in range(0, len(data), size):
            writer.write(data[at : at + size])
            await writer.drain()
            await asyncio.sleep(0)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await read_request(reader)
            if b"/chunked" in head:
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                for at in range(0, len(payload), 7001):
                    part = payload[at : at + 7001]
                    await pieces(writer, b"%x\r\n%b\r\n" % (len(part), part), 1500)
                writer.write(b"0\r\n\r\n")
            elif b"/eof" in head:
                await pieces(writer, b"HTTP/1.1 200 OK\r\n\r\n" + payload, 4096)
                return  # the end of the connection ends the body
            else:
                await pieces(writer, answer(payload), 3000)

    async def run() -> None:
        async with serving(handler) as url, lean(url) as client:
            for path in ("/length", "/chunked", "/length", "/chunked", "/eof", "/length"):
                r = await client.get(path)
                assert r.status_code == 200 and r.content == payload, path
            # Streamed: the body arrives in many chunks, as the server writes it.
            async with client.stream("GET", "/chunked") as r:
                chunks = [chunk async for chunk in r.aiter_raw()]
            assert b"".join(chunks) == payload and len(chunks) > 1

    RUNNERS[loop](run())


@pytest.mark.parametrize("loop", RUNNERS)
def test_an_answer_whole_with_its_head_is_handed_over_whole(loop: str) -> None:
    """An answer whose body came with its head (one write: a small answer nearly always) is
    handed over in memory, its connection already back in the pool; one whose body comes
    later is streamed as before, its connection held until it is read; a gzipped whole
    answer is inflated as httpx inflates it, by the client and by the adapter."""
    pod = orjson.dumps({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})
    packed = gzip.compress(pod)
    connections = 0
    release: asyncio.Event

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            head = await read_request(reader)
            if b"/later" in head:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(pod))
                await writer.drain()
                await release.wait()
                writer.write(pod)
            elif b"/gzip" in head or b"/pods/" in head:
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n%b"
                    % (len(packed), packed)
                )
            else:
                writer.write(answer(pod))

    async def run() -> None:
        nonlocal release
        release = asyncio.Event()
        async with serving(handler) as url:
            transport = LeanTransport()
            try:
                for _ in range(3):
                    r = await transport.handle_async_request(
                        httpx.Request("GET", f"{url}/whole", headers={"Host": "upstream"})
                    )
                    assert r.status_code == 200
                    assert isinstance(r.stream, httpx.ByteStream)
                    assert transport.idle == 1  # back in the pool before the body is read
                    assert r.read() == pod
                later = await transport.handle_async_request(
                    httpx.Request("GET", f"{url}/later", headers={"Host": "upstream"})
                )
                assert not isinstance(later.stream, httpx.ByteStream)
                assert transport.idle == 0  # held by the answer still coming
                release.set()
                assert await later.aread() == pod
                assert transport.idle == 1 and transport.connections == 1
                assert connections == 1  # every request on the one kept-alive connection
            finally:
                await transport.aclose()
            async with lean(url) as client:
                r = await client.get("/gzip")
                assert r.headers["content-encoding"] == "gzip" and r.content == pod
                adapter = KubeAdapter(client)
                assert await adapter.get(POD, "p", namespace="ns") == orjson.loads(pod)
                got = await adapter.get_body(POD, "p", namespace="ns")
                assert got == pod

    RUNNERS[loop](run())


#: Answers a server may send whole in one write: each is read through the lean transport and
#: through httpx's own (httpcore's pool), and the two responses must be the same.
WHOLE_ANSWERS: dict[str, bytes] = {
    "/plain": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nAudit-Id: a-1\r\n"
    b'Content-Length: 11\r\n\r\n{"kind":1}\n',
    "/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nX-A: 2\r\n\r\n"
    b"4\r\n[1,2\r\n2\r\n,3\r\n1\r\n]\r\n0\r\n\r\n",
    "/latin": b"HTTP/1.1 404 Not Found\r\nX-Name: caf\xe9\r\nContent-Length: 2\r\n\r\n{}",
    "/gzip": b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%b"
    % (len(gzip.compress(b"[1]", mtime=0)), gzip.compress(b"[1]", mtime=0)),
    "/gzip-upper": b"HTTP/1.1 200 OK\r\nCONTENT-ENCODING: GZIP\r\nContent-Length: %d\r\n\r\n%b"
    % (len(gzip.compress(b"[3]", mtime=0)), gzip.compress(b"[3]", mtime=0)),
    "/close": b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}",
    "/identity": b"HTTP/1.1 200 OK\r\ncontent-encoding: identity\r\ncontent-length: 3\r\n\r\n[2]",
    "/empty": b"HTTP/1.1 204 No Content\r\nDate: Sun, 29 Nov 2026 06:00:00 GMT\r\n\r\n",
    "/cookies": b'HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nWarning: 299 - "x"\r\n'
    b'WARNING: 299 - "y"\r\nContent-Length: 2\r\n\r\n{}',
    # an interim answer first (103 Early Hints): skipped, its headers no part of the answer
    "/interim": b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    # trailers after a chunked body: no part of the headers (httpx's transport drops them)
    "/trailers": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"2\r\n{}\r\n0\r\nX-Trailer: 1\r\n\r\n",
    # whitespace around a value is no part of it
    "/padded": b"HTTP/1.1 200 OK\r\nX-Pad:  v \t\r\nContent-Length:  2 \r\n\r\n{}",
}


def _seen(response: httpx.Response) -> dict[str, Any]:
    """Everything a reader of a read response can see."""
    return {
        "status": response.status_code,
        "reason": response.reason_phrase,
        "version": response.http_version,
        "raw": response.headers.raw,
        "items": response.headers.multi_items(),
        "encoding": response.headers.encoding,
        "content": response.content,
        "text": response.text,
        "closed": response.is_closed,
        "consumed": response.is_stream_consumed,
        "downloaded": response.num_bytes_downloaded,
        "raw content-encoding": response.headers.get("content-encoding"),
    }


@pytest.mark.parametrize("loop", RUNNERS)
def test_a_whole_answer_is_what_httpx_gives_once_read(loop: str) -> None:
    """The lean transport builds a whole answer for less (its headers from their bytes; for
    a caller that reads it whole, a body without a content encoding in place as read):
    every answer must read exactly as httpx's own transport gives it once read, a non-ASCII
    header, repeated ones, gzip and ``identity`` encodings and an empty body included; a
    caller that streams it reads the raw bytes; and the adapter takes a list's raw bytes
    from it, as they came, the gzipped one still gzipped."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            target = (await read_request(reader)).split(b" ")[1].decode()
            # (a list's answer is named by its label selector: labelSelector=case%3D/plain)
            case = target.partition("case%3D")[2].partition("&")[0].replace("%2F", "/")
            writer.write(WHOLE_ANSWERS[case or target])

    async def run() -> None:
        async with serving(handler) as url:
            lean_transport = LeanTransport()
            httpx_transport = httpx.AsyncHTTPTransport()
            try:
                for path in WHOLE_ANSWERS:
                    seen = []
                    for transport, extensions in (
                        (httpx_transport, {}),
                        (lean_transport, {}),
                        (lean_transport, {READ_WHOLE: True}),  # given read already
                    ):
                        response = await transport.handle_async_request(
                            httpx.Request("GET", url + path, extensions=extensions)
                        )
                        await response.aread()
                        seen.append(_seen(response))
                    assert seen[0] == seen[1] == seen[2], path
            finally:
                await lean_transport.aclose()
                await httpx_transport.aclose()
            async with lean(url) as client:
                # a caller that did not say it reads whole may read the raw stream
                async with client.stream("GET", "/plain") as response:
                    assert [chunk async for chunk in response.aiter_raw()] == [b'{"kind":1}\n']
                adapter = KubeAdapter(client)
                for path, data in (
                    ("/plain", b'{"kind":1}\n'),
                    ("/chunked", b"[1,2,3]"),
                    ("/gzip", gzip.compress(b"[1]", mtime=0)),
                ):
                    options = ListOptions(label_selector=f"case={path}")
                    body = await adapter.list_body(POD, options=options, gzipped=True)
                    assert (body.data, body.gzipped, body.feed) == (data, path == "/gzip", None)

    RUNNERS[loop](run())


class _Edges:
    """A server of answers at HTTP/1.1's edges, each path's bytes in one write (a gated
    one's rest once ``go`` is set); any other path is answered with itself."""

    def __init__(self) -> None:
        self.peers: list[int] = []  # each connection's port, as it came
        self.go = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.peers.append(writer.get_extra_info("peername")[1])
        while True:
            target = (await read_request(reader)).split(b" ")[1]
            if target == b"/interim":  # two interim answers, then the answer's head
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await writer.drain()
                writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nX-Final: 1\r\nContent-Length: 2\r\n\r\n")
                await writer.drain()
                await self.go.wait()
                writer.write(b"{}")
            elif target == b"/second":
                writer.write(answer(b"{}") + answer(b"bad", "401 Unauthorized"))
            elif target == b"/longer":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}xyz")
            elif target == b"/streamed-second":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
                await writer.drain()
                await self.go.wait()
                writer.write(b"{}" + answer(b"bad", "401 Unauthorized"))
            else:
                writer.write(answer(target))
            await writer.drain()


Get = Callable[[str], Awaitable[httpx.Response]]


async def _edges_served(script: Callable[[_Edges, Get], Awaitable[None]]) -> None:
    """``script`` run with an :class:`_Edges` server and a ``get`` of a path from it on a
    lean transport (its caller reading whole)."""
    edges = _Edges()
    async with serving(edges.handle) as url:
        transport = LeanTransport()

        async def get(path: str) -> httpx.Response:
            return await transport.handle_async_request(
                httpx.Request("GET", url + path, extensions={READ_WHOLE: True})
            )

        try:
            await script(edges, get)
        finally:
            await transport.aclose()


@pytest.mark.parametrize("loop", RUNNERS)
def test_interim_answers_are_skipped(loop: str) -> None:
    """Interim answers (100 Continue, 103 Early Hints) before an answer are skipped, as
    httpx's transport skips them: their status, reason and headers are no part of it, and
    their connection is kept for the next request."""

    async def script(edges: _Edges, get: Get) -> None:
        r = await get("/interim")
        assert (r.status_code, r.reason_phrase, r.headers.raw) == (
            200,
            "OK",
            [(b"X-Final", b"1"), (b"Content-Length", b"2")],
        )
        edges.go.set()
        assert await r.aread() == b"{}"
        assert (await get("/next")).content == b"/next"
        assert len(edges.peers) == 1  # the connection was kept

    RUNNERS[loop](_edges_served(script))


#: Answers with bytes past their end, in the order they are asked for.
PAST_THE_END = ("/second", "/longer", "/streamed-second")


@pytest.mark.parametrize("loop", RUNNERS)
def test_bytes_past_an_answer_are_no_part_of_it(loop: str) -> None:
    """Bytes past an answer's end (a second answer in the write of the first, its body
    whole with its head or streamed; a body longer than its Content-Length) are no part of
    it, and its connection is closed: the next request gets its own answer on a new one."""

    async def script(edges: _Edges, get: Get) -> None:
        for count, path in enumerate(PAST_THE_END, 1):
            edges.go = asyncio.Event()
            r = await get(path)
            edges.go.set()
            await r.aread()
            seen = (r.status_code, r.reason_phrase, r.headers.raw, r.content)
            assert seen == (200, "OK", [(b"content-length", b"2")], b"{}"), path
            assert len(edges.peers) == count
            assert (await get("/next")).content == b"/next"  # its own answer, on a new one
        assert len(edges.peers) == len(PAST_THE_END) + 1

    RUNNERS[loop](_edges_served(script))


@pytest.mark.parametrize("loop", RUNNERS)
def test_a_stalled_or_cancelled_read_closes_its_connection(loop: str) -> None:
    """Half an answer, then nothing: the read times out at its own deadline (not at the
    timer an earlier request left on the kept-alive connection), and the connection is
    closed, never pooled with the rest of an answer to come; so is one whose caller is
    cancelled mid-answer; the next request gets its own answer on a new connection."""
    stalled: asyncio.Event
    gone: asyncio.Event
    closed: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = writer.get_extra_info("peername")[1]
        while True:
            target = (await read_request(reader)).split(b" ")[1]
            if target.startswith(b"/half"):
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Le"
                    if target == b"/half-head"
                    else b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}"
                )
                await writer.drain()
                stalled.set()
                assert await reader.read() == b""  # nothing more: the client closes
                closed.append(port)
                gone.set()
                return
            writer.write(answer(b"%d" % port))
            await writer.drain()

    async def run() -> None:
        nonlocal stalled, gone
        async with serving(handler) as url, lean(url) as client:
            transport = client._transport
            assert isinstance(transport, LeanTransport)
            for half, cancel in (
                ("/half-head", False),
                ("/half-body", False),
                ("/half-head", True),
            ):
                stalled, gone = asyncio.Event(), asyncio.Event()
                port = int((await client.get("/port", timeout=0.2)).content)  # a 0.2 s timer
                started = time.monotonic()
                if cancel:
                    task = asyncio.create_task(client.get(half, timeout=30))
                    await stalled.wait()
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
                elif half == "/half-head":
                    with pytest.raises(httpx.ReadTimeout):
                        await client.get(half, timeout=1.0)
                else:
                    async with client.stream("GET", half, timeout=1.0) as r:
                        with pytest.raises(httpx.ReadTimeout):
                            await r.aread()
                if not cancel:  # its own deadline, not the 0.2 s one
                    assert 0.9 <= time.monotonic() - started < 5
                async with asyncio.timeout(10):
                    await gone.wait()
                assert closed[-1] == port  # the connection the request was sent on
                assert transport.connections == transport.idle == 0
                assert int((await client.get("/port", timeout=5)).content) != port

    RUNNERS[loop](run())


@pytest.mark.parametrize("loop", RUNNERS)
def test_an_answer_closed_unread_leaves_no_bytes_to_the_next_request(loop: str) -> None:
    """An answer whose caller closes it with body bytes come but not read (its end already
    received) leaves nothing to the request its connection goes to next, a request waiting
    for a connection of a full pool included: that request's answer is its own bytes only."""
    gate: asyncio.Event
    sent: asyncio.Event
    secret = b"the first caller's body"

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            target = (await read_request(reader)).split(b" ")[1]
            if target == b"/first":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(secret))
                await writer.drain()
                await gate.wait()
                writer.write(secret)
                await writer.drain()
                sent.set()
            elif target == b"/sync":  # answered once the first body was written
                await sent.wait()
                writer.write(answer(b"sync"))
            else:
                writer.write(answer(target))
            await writer.drain()

    async def run() -> None:
        nonlocal gate, sent
        async with serving(handler) as url:
            transport, other = LeanTransport(max_connections=1), LeanTransport()

            def get(on: LeanTransport, path: str) -> asyncio.Task[httpx.Response]:
                return asyncio.create_task(
                    on.handle_async_request(httpx.Request("GET", url + path))
                )

            try:
                for waiting in (True, False):  # for the pool's one connection, or not
                    gate, sent = asyncio.Event(), asyncio.Event()
                    first = await get(transport, "/first")
                    assert not isinstance(first.stream, httpx.ByteStream)  # its body to come
                    second = get(transport, "/second") if waiting else None
                    gate.set()
                    # the first body is written before the sync answer, on loopback: once
                    # that answer is read, the first body has reached its connection
                    assert (await get(other, "/sync")).read() == b"sync"
                    await first.aclose()  # its body unread
                    r = await (second or get(transport, "/second"))
                    assert (r.status_code, await r.aread()) == (200, b"/second")
            finally:
                await transport.aclose()
                await other.aclose()

    RUNNERS[loop](run())


@pytest.mark.parametrize("loop", RUNNERS)
def test_a_connection_freed_as_a_waiter_times_out_stays_in_the_pool(loop: str) -> None:
    """A request waiting for a full pool's connection whose pool timeout comes due in the
    loop's turn that the connection is handed to it: the connection is not lost with it
    (in use by nobody, the pool's slot taken for good); the next request is served on it."""
    gate: asyncio.Event

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            target = (await read_request(reader)).split(b" ")[1]
            if target == b"/first":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
                await writer.drain()
                await gate.wait()
                writer.write(b"{}")
            else:
                writer.write(answer(target))
            await writer.drain()

    async def run() -> None:
        nonlocal gate
        gate = asyncio.Event()
        async with serving(handler) as url:
            transport = LeanTransport(max_connections=1)

            def get(path: str, pool: float) -> asyncio.Task[httpx.Response]:
                request = httpx.Request("GET", url + path, extensions={"timeout": {"pool": pool}})
                return asyncio.create_task(transport.handle_async_request(request))

            try:
                first = await get("/first", 5)
                gate.set()
                assert b"".join([chunk async for chunk in first.stream]) == b"{}"  # (held)
                # in one turn of the loop: the second request starts waiting (its pool
                # timeout, of 0, due at once), then the first gives the connection back
                second = get("/second", 0)
                freed = asyncio.create_task(first.aclose())
                with contextlib.suppress(httpx.PoolTimeout):
                    assert (await second).read() == b"/second"
                await freed
                assert transport.connections == 1
                assert (await get("/third", 5)).read() == b"/third"
            finally:
                await transport.aclose()

    RUNNERS[loop](run())


async def test_a_large_body_is_read_with_bounded_buffering() -> None:
    """A reader that does not read: the transport stops reading past its high-water mark, so
    the server's writes back up instead of the gateway's memory filling."""
    total = 64 * 1024 * 1024
    sent = 0
    blocked = asyncio.Event()

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await read_request(reader)
        writer.transport.set_write_buffer_limits(high=1024 * 1024)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % total)
        block = b"x" * 65536
        while sent < total:
            writer.write(block)
            sent += len(block)
            if writer.transport.get_write_buffer_size() >= 1024 * 1024:
                blocked.set()  # the kernel's buffers are full: the client is not reading
            await writer.drain()

    async with serving(flood) as url, lean(url) as client, client.stream("GET", "/big") as r:
        async with asyncio.timeout(30):
            await blocked.wait()  # the server's buffer filled: the client stopped reading
        assert sent < 16 * 1024 * 1024  # kernel buffers + the transport's high water
        got = 0
        async for chunk in r.aiter_raw():
            got += len(chunk)
        assert got == total


async def test_gzip_from_the_demo_upstream_is_inflated(demo: DemoUpstream) -> None:
    await demo.store.bulk_create(POD, make_pods(200, "zipped"), namespace="zipped")
    async with lean(demo.url, network="lean") as client:
        path = "/api/v1/namespaces/zipped/pods"
        r = await client.get(path, headers=ADMIN)
        assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
        assert len(r.json()["items"]) == 200
        async with client.stream("GET", path, headers=ADMIN) as raw:
            zipped = b"".join([chunk async for chunk in raw.aiter_raw()])
        assert orjson.loads(gzip.decompress(zipped))["kind"] == "PodList"


# -- errors ------------------------------------------------------------------------------------


async def test_demo_faults_cut_body_429_and_refused(demo: DemoUpstream) -> None:
    async with lean(demo.url) as client:
        path = "/api/v1/namespaces/default/pods"
        demo.faults.drop_connections(1, verb="list")
        with pytest.raises(httpx.RemoteProtocolError, match="complete message body"):
            await client.get(path, headers=ADMIN)
        assert demo.faults.dropped_requests == 1
        demo.faults.fail_requests(1, status=429, verb="list", retry_after=3)
        r = await client.get(path, headers=ADMIN)
        assert (r.status_code, r.headers["retry-after"]) == (429, "3")
        assert r.json()["details"]["retryAfterSeconds"] == 3
        assert (await client.get(path, headers=ADMIN)).json()["kind"] == "PodList"
        # A watch cut mid-body after some events: the events came, then the error.
        demo.faults.drop_connections(1, verb="watch", after_bytes=10)
        async with client.stream("GET", f"{path}?watch=1", headers=ADMIN) as r:
            got = b""
            with pytest.raises(httpx.RemoteProtocolError):
                async for chunk in r.aiter_raw():
                    got += chunk
            assert len(got) == 10
    async with lean(f"http://127.0.0.1:{free_port()}") as client:
        with pytest.raises(httpx.ConnectError):
            await client.get("/api")


async def test_a_watch_is_read_as_events_come(demo: DemoUpstream) -> None:
    async with lean(demo.url) as client:
        path = "/api/v1/namespaces/default/configmaps"
        listed = (await client.get(path, headers=ADMIN)).json()
        rv = listed["metadata"]["resourceVersion"]
        async with client.stream("GET", f"{path}?watch=1&resourceVersion={rv}", headers=ADMIN) as r:
            lines = r.aiter_lines()
            for i in range(3):
                created = await client.post(
                    path,
                    headers=ADMIN,
                    json={"metadata": {"name": f"lean-{i}"}, "data": {"i": str(i)}},
                )
                assert created.status_code == 201
                async with asyncio.timeout(10):
                    event = orjson.loads(await anext(lines))
                assert (event["type"], event["object"]["metadata"]["name"]) == (
                    "ADDED",
                    f"lean-{i}",
                )


@pytest.mark.parametrize("loop", RUNNERS)
def test_slow_headers_time_out_while_a_neighbour_is_served(loop: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_request(reader)
        if b"/slow" in head:
            writer.write(b"HTTP/1.1 200 OK\r\n")  # the status line, then nothing
            await writer.drain()
            await reader.read()  # until the client goes
            return
        writer.write(answer(b"{}"))
        await writer.drain()

    async def run() -> None:
        async with serving(handler) as url, lean(url) as client:
            slow = asyncio.create_task(client.get("/slow", timeout=0.5))
            started = time.monotonic()
            assert (await client.get("/fast")).status_code == 200
            assert time.monotonic() - started < 5
            with pytest.raises(httpx.ReadTimeout):
                await slow
            assert time.monotonic() - started < 10

    RUNNERS[loop](run())


@pytest.mark.parametrize("loop", RUNNERS)
def test_read_deadlines_on_one_kept_alive_connection(loop: str) -> None:
    """A connection's read timer outlives the wait that armed it: a later wait with a later
    deadline is not cut at the earlier one's time, and one with an earlier deadline than
    the timer's is cut at its own."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = writer.get_extra_info("peername")[1]  # the answer says which connection
        while True:
            head = await read_request(reader)
            if b"/never" in head:
                writer.write(b"HTTP/1.1 200 OK\r\n")  # the status line, then nothing
                await writer.drain()
                await reader.read()
                return
            if b"/late" in head:
                await asyncio.sleep(0.6)
            writer.write(answer(b"%d" % port))
            await writer.drain()

    async def run() -> None:
        async with serving(handler) as url, lean(url) as client:
            first = (await client.get("/fast", timeout=0.2)).content
            started = time.monotonic()
            # past the first call's deadline, within its own
            assert (await client.get("/late", timeout=10.0)).content == first
            assert time.monotonic() - started >= 0.6
            assert (await client.get("/fast", timeout=30.0)).content == first
            started = time.monotonic()
            with pytest.raises(httpx.ReadTimeout):
                await client.get("/never", timeout=0.3)
            # its own deadline, not an earlier timer's
            assert 0.25 <= time.monotonic() - started < 3
            assert (await client.get("/fast", timeout=1.0)).content != first  # a new one

    RUNNERS[loop](run())


async def test_malformed_answers_and_line_breaks_in_headers_are_protocol_errors() -> None:
    requests = 0

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        await read_request(reader)
        requests += 1
        writer.write(b"HTTP/1.1 abc nonsense\r\n\x00\r\n\r\n")
        await writer.drain()

    async with serving(garbage) as url, lean(url) as client:
        with pytest.raises(httpx.RemoteProtocolError, match="malformed"):
            await client.get("/api")
        with pytest.raises(httpx.LocalProtocolError):
            await client.get("/api", headers={"Authorization": "Bearer a\r\nX-Evil: 1"})
        assert requests == 1  # the second was refused before anything was sent


async def test_an_endless_answer_head_is_refused_while_a_neighbour_is_served() -> None:
    """A server whose answer's head never ends: refused past MAX_HEAD_BYTES, quickly, with
    httpx's RemoteProtocolError; nothing like its size is buffered; another request beside
    it on the same client is served."""
    sent = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        head = await read_request(reader)
        if b"/endless" not in head:
            writer.write(answer(b"{}"))
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 OK\r\nX-Endless: ")
        while sent < 64 * 1024 * 1024:
            writer.write(b"a" * 16384)
            sent += 16384
            await writer.drain()

    async with serving(handler) as url, lean(url) as client:
        endless = asyncio.create_task(client.get("/endless"))
        started = time.monotonic()
        assert (await client.get("/fine")).status_code == 200
        with pytest.raises(httpx.RemoteProtocolError, match="head is over"):
            await endless
        assert time.monotonic() - started < 10
        assert sent < 16 * 1024 * 1024  # stopped reading (and closed) early


# -- TLS ---------------------------------------------------------------------------------------


def tls_server(pki: Pki) -> EchoServer:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki.path("server.crt"), pki.path("server.key"))
    ctx.load_verify_locations(cadata=pki.ca_pem.decode())
    ctx.verify_mode = ssl.CERT_OPTIONAL  # a client certificate is reported, not required
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    server = EchoServer(ctx)
    ctx.sni_callback = lambda _obj, name, _ctx: server.sni.append(name)
    return server


@pytest.mark.parametrize("loop", RUNNERS)
def test_tls_with_the_kubeconfig_ca_client_certificate_and_server_name(
    loop: str, tmp_path: Path, pki: Pki
) -> None:
    user = {
        "client-certificate-data": b64(pki.client_cert_pem),
        "client-key-data": b64(pki.client_key_pem),
    }
    cluster = {"certificate-authority-data": b64(pki.ca_pem)}

    async def run() -> None:
        server = tls_server(pki)
        await server.start()
        try:
            cfg = resolve(
                kubeconfig=kubeconfig(tmp_path / "c", server=server.url, cluster=cluster, user=user)
            )
            async with build_http_client(cfg) as client:
                assert isinstance(client._transport, LeanTransport)
                answers = await asyncio.gather(*(client.get(f"/api/{i}") for i in range(20)))
                assert [r.json()["path"] for r in answers] == [f"/api/{i}" for i in range(20)]
                assert {r.http_version for r in answers} == {"HTTP/1.1"}
            assert {seen.client_cn for seen in server.seen} == {None}  # no gateway credential
            server.seen.clear()
            async with build_http_client(cfg, gateway_identity=True) as client:
                assert isinstance(client._transport, LeanTransport)
                assert (await client.get("/api")).status_code == 200
            assert [seen.client_cn for seen in server.seen] == ["gateway-client"]
            # HTTP/2 asked for: httpcore's pool speaks it (the lean transport does not).
            async with build_http_client(cfg, http2=True) as client:
                assert not isinstance(client._transport, LeanTransport)
                assert (await client.get("/api")).http_version == "HTTP/2"
            # A server name other than the URL's host: sent as SNI and verified.
            named = dict(cluster, **{"tls-server-name": "localhost"})
            path = kubeconfig(tmp_path / "n", server=server.url, cluster=named, user=user)
            async with build_http_client(resolve(kubeconfig=path)) as client:
                assert isinstance(client._transport, LeanTransport)
                assert (await client.get("/api")).status_code == 200
            assert server.sni[-1] == "localhost"
            # Another CA: the handshake fails, as httpx's ConnectError.
            other = {"certificate-authority-data": b64(pki.other_ca_pem)}
            path = kubeconfig(tmp_path / "o", server=server.url, cluster=other, user=user)
            async with build_http_client(resolve(kubeconfig=path)) as client:
                with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await client.get("/api")
        finally:
            await server.close()

    RUNNERS[loop](run())


# -- memory ------------------------------------------------------------------------------------


def _connections_alive() -> int:
    return sum(1 for o in gc.get_objects() if type(o).__name__ == "_Connection")


@pytest.mark.parametrize("loop", RUNNERS)
def test_closed_connections_are_freed_without_the_cyclic_collector(
    loop: str, tmp_path: Path, pki: Pki
) -> None:
    """A served process holds the cyclic collector off (and a long watch's answer reaches its
    oldest generation): a connection that closed, with its transport, TLS state and buffers,
    must be freed as soon as it closes, not with the cycles of httpx's answers.  Upstreams
    coming and going (a fleet's clusters) and watches ending would otherwise pile them up."""
    cluster = {"certificate-authority-data": b64(pki.ca_pem)}

    async def run() -> None:
        server = tls_server(pki)
        await server.start()
        path = kubeconfig(tmp_path / "c", server=server.url, cluster=cluster, user={})
        gc.collect()
        gc.disable()
        try:
            before = _connections_alive()
            async with DemoUpstream(seed=False) as demo:
                for i in range(30):  # an upstream each time, closed after a few answers
                    for cfg in (resolve(server=demo.url), resolve(kubeconfig=path)):
                        async with build_http_client(cfg) as client:
                            answers = await asyncio.gather(*(client.get("/api") for _ in range(3)))
                            assert all(r.status_code < 500 for r in answers), i
                            async with client.stream("GET", "/api") as streamed:
                                await streamed.aread()
            assert _connections_alive() - before == 0
        finally:
            gc.enable()
            await server.close()

    RUNNERS[loop](run())


# -- request construction ----------------------------------------------------------------------

PATHS = [
    "/api/v1/namespaces/team-a/pods/pod-00",
    "/apis/apps/v1/namespaces/n/deployments/web/status",
    "/api/v1/namespaces/n/pods/a b",  # not plain: parsed, as before
    "/api/v1/namespaces/n/pods/caf\u00e9",
    "/api/v1/namespaces/n/pods/x%2Fy",
    "/api/v1/namespaces/n/pods/x?y",
    "/api",
]
PARAMS: list[list[tuple[str, str]]] = [
    [],
    [("limit", "10")],
    [("labelSelector", "app in (a, b),!tier"), ("fieldSelector", "status.phase!=Running")],
    [("continue", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzfQ=="), ("limit", "500")],
    [("watch", "1"), ("resourceVersion", "12345"), ("allowWatchBookmarks", "true")],
    [("labelSelector", "k=\u00e9t\u00e9&x=1#frag")],
    [("fieldManager", "kubectl client-side-apply"), ("dryRun", "All")],
]


@pytest.mark.parametrize("server", ["https://127.0.0.1:6443", "https://h.example:443/k8s/c-1"])
async def test_the_request_factory_builds_what_the_adapter_built_before(server: str) -> None:
    """The adapter's requests on the gateway's client (``UpstreamClient.requests``) are the
    ones it built before with httpx's parsing (what it still does for any other client): the
    same URL, headers, body and timeouts, for plain paths (not parsed again) and any other
    (parsed)."""
    ours = build_http_client(resolve(server=server))
    before = httpx.AsyncClient(base_url=ours.base_url, headers=ours.headers, timeout=ours.timeout)
    adapter = KubeAdapter(ours, REGISTRY)
    for path in PATHS:
        for params in PARAMS:
            for method, content, timeout in (
                ("GET", None, None),
                ("PATCH", b'{"a":1}', 3.0),
                ("POST", None, 7.5),
                ("DELETE", None, None),
            ):
                for credential in (Credential(token="abc.def-ghi"), ANONYMOUS):
                    req = Request(method, path, params, content, "application/json-patch+json")
                    new = adapter._httpx_request(req, credential, timeout, ours)
                    old = adapter._httpx_request(req, credential, timeout, before)
                    assert str(new.url) == str(old.url), (path, params)
                    assert new.url.raw_path == old.url.raw_path
                    assert new.url.netloc == old.url.netloc and new.url.scheme == old.url.scheme
                    assert sorted(new.headers.multi_items()) == sorted(old.headers.multi_items())
                    assert (new.method, new.content) == (old.method, old.content)
                    assert new.extensions == old.extensions
    await ours.aclose()
    await before.aclose()
