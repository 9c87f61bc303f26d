"""The upstream client's httpcore network layer (``gateway.core.upstream.transport``,
``--upstream-network asyncio``; the default 'lean' transport is tested in test_lean.py) on
real sockets, on
both loops the gateway may run on (asyncio's and uvloop's, the default of ``kube-gateway
serve``): TLS verified with the configured CA, HTTP/1.1 and HTTP/2 by ALPN, the gateway's client
certificate in gateway-identity mode, a pooled connection the server closed, timeouts and
connection errors as httpx's errors, and ``--upstream-network anyio`` keeping httpcore's own."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest
import uvloop

from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.transport import AsyncioBackend, LinearPool
from tests.core.upstream.upstream_fixtures import (
    EchoServer,
    Pki,
    b64,
    pki,
    resolve,
    write_kubeconfig,
)
from tests.support.serve_process import free_port

__all__ = ["pki"]  # fixtures

RUNNERS: dict[str, Callable[[Coroutine[Any, Any, None]], None]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}


def tls_server(pki: Pki) -> EchoServer:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki.path("server.crt"), pki.path("server.key"))
    ctx.load_verify_locations(cadata=pki.ca_pem.decode())
    ctx.verify_mode = ssl.CERT_OPTIONAL  # a client certificate is reported, not required
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return EchoServer(ctx)


def pool_backend(client: httpx.AsyncClient) -> object:
    transport = client._transport
    return transport._pool._network_backend  # type: ignore[attr-defined]


@pytest.mark.parametrize("loop", RUNNERS)
def test_tls_http1_http2_and_client_certificate_on_each_loop(
    loop: str, tmp_path: Path, pki: Pki
) -> None:
    async def run() -> None:
        server = tls_server(pki)
        await server.start()
        try:
            path = write_kubeconfig(
                tmp_path / "c",
                server=server.url,
                cluster={"certificate-authority-data": b64(pki.ca_pem)},
                user={
                    "client-certificate-data": b64(pki.client_cert_pem),
                    "client-key-data": b64(pki.client_key_pem),
                },
            )
            cfg = resolve(kubeconfig=path)
            async with build_http_client(cfg, network="asyncio") as client:
                assert isinstance(pool_backend(client), AsyncioBackend)
                assert type(client._transport._pool) is LinearPool  # type: ignore[attr-defined]
                answers = await asyncio.gather(*(client.get(f"/api/{i}") for i in range(20)))
                assert {r.status_code for r in answers} == {200}
                assert {r.http_version for r in answers} == {"HTTP/1.1"}
                assert [r.json()["path"] for r in answers] == [f"/api/{i}" for i in range(20)]
            async with build_http_client(cfg, http2=True) as client:
                answer = await client.get("/api/v1/pods")
                assert (answer.status_code, answer.http_version) == (200, "HTTP/2")
            assert {seen.client_cn for seen in server.seen} == {None}  # no gateway credential
            server.seen.clear()
            async with build_http_client(cfg, gateway_identity=True, network="asyncio") as client:
                assert (await client.get("/api")).status_code == 200
            assert [seen.client_cn for seen in server.seen] == ["gateway-client"]
        finally:
            await server.close()

    RUNNERS[loop](run())


@pytest.mark.parametrize("loop", RUNNERS)
def test_a_connection_the_server_closed_is_not_reused(loop: str) -> None:
    """The server answers one request per connection and then closes it: the pool sees the
    end of the idle connection and opens a new one, so no request fails."""
    connections = 0

    async def one_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()
        writer.close()

    async def run() -> None:
        server = await asyncio.start_server(one_answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with build_http_client(
                resolve(server=f"http://127.0.0.1:{port}"), network="asyncio"
            ) as client:
                for _ in range(5):
                    assert (await client.get("/api")).status_code == 200
                    # until the server's close reached the client (the loop's state, polled)
                    await _idle_connection_ended(client)
        finally:
            server.close()
            await server.wait_closed()
        assert connections == 5

    RUNNERS[loop](run())


async def _idle_connection_ended(client: httpx.AsyncClient) -> None:
    pool = client._transport._pool  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while not all(c.has_expired() or c.is_closed() for c in pool.connections):
        assert time.monotonic() < deadline, "the server's close never reached the client"
        await asyncio.sleep(0.001)


@pytest.mark.parametrize("loop", RUNNERS)
def test_timeouts_and_refused_connections_are_httpx_errors(loop: str) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            await reader.read()  # never answers; returns when the client goes
        writer.close()

    async def run() -> None:
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with build_http_client(resolve(server=f"http://127.0.0.1:{port}")) as client:
                started = time.monotonic()
                with pytest.raises(httpx.ReadTimeout):
                    await client.get("/api", timeout=0.2)
                assert time.monotonic() - started < 5
        finally:
            server.close()
            await server.wait_closed()
        closed = free_port()  # nothing listens there
        async with build_http_client(resolve(server=f"http://127.0.0.1:{closed}")) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get("/api")

    RUNNERS[loop](run())


async def test_the_anyio_fallback_keeps_httpcores_own_backend(pki: Pki, tmp_path: Path) -> None:
    server = tls_server(pki)
    await server.start()
    try:
        path = write_kubeconfig(
            tmp_path / "c",
            server=server.url,
            cluster={"certificate-authority-data": b64(pki.ca_pem)},
            user={"token": "t"},
        )
        async with build_http_client(resolve(kubeconfig=path), network="anyio") as client:
            backend = pool_backend(client)
            assert not isinstance(backend, AsyncioBackend)
            assert isinstance(backend, httpcore.AsyncNetworkBackend)
            assert (await client.get("/api")).status_code == 200
    finally:
        await server.close()


async def test_httpcore_finds_the_async_library_without_a_failed_import() -> None:
    """httpcore asks which async library runs (``sniffio``) for every lock and event it sets
    up, 4 times per upstream request; without ``sniffio`` installed each ask is a failed
    import that searches the whole path (~25 us, docs/performance.md).  It is a dependency:
    the ask is a look-up in ``sys.modules``."""
    import sys

    from httpcore._synchronization import current_async_library

    assert current_async_library() == "asyncio"
    assert "sniffio" in sys.modules
