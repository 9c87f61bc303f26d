"""How :class:`~gateway.core.upstream.adapter.KubeAdapter` sends a request upstream.

The adapter builds each httpx request itself (the URL parsed once) and sends a unary one
straight to the transport of a client that adds nothing to it
(:attr:`gateway.core.upstream.client.UpstreamClient.direct`).  These tests pin what that must keep:
the request is exactly what the client's ``build_request`` would build, minus cookies; no
cookie ever travels from one caller's answer into another caller's request; the shortcut is
taken only when the client has no auth flow and no hooks; and httpcore's repeated ``import
sniffio`` no longer scans ``sys.path`` on every request.  A real HTTP server on loopback
answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType

import httpx
import orjson
import pytest

from gateway.core import errors
from gateway.core.model.registry import POD
from gateway.core.process.metrics import Metrics
from gateway.core.upstream.adapter import KubeAdapter, Request
from gateway.core.upstream.client import UpstreamClient, build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential

ALICE = Credential("alice-token")
BOB = Credential("bob-token")


@dataclass
class CookieServer:
    """HTTP/1.1 on loopback: every answer sets a cookie; records each request's headers."""

    status: int = 200
    seen: list[dict[str, str]] = field(default_factory=list)
    port: int = 0
    connections: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")[1:]
                headers = {}
                for line in lines:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                self.seen.append(headers)
                body = orjson.dumps(
                    {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
                    if self.status == 200
                    else {"kind": "Status", "code": self.status, "reason": "NotFound"}
                )
                caller = headers.get("authorization", "").removeprefix("Bearer ")
                writer.write(
                    b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                    b"Set-Cookie: session=%s; Path=/\r\nContent-Length: %d\r\n\r\n%s"
                    % (self.status, caller.encode(), len(body), body)
                )
                await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def cookie_server() -> AsyncIterator[CookieServer]:
    server = CookieServer()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()
        # the client is closed first: each connection's reader sees its end and returns
        await asyncio.gather(*server.connections)
        await listener.wait_closed()


def _client(url: str, kind: str) -> httpx.AsyncClient:
    if kind == "upstream":
        return build_http_client(UpstreamConfig(server=url, source="test"))
    return httpx.AsyncClient(base_url=url)


def _fields(request: httpx.Request) -> tuple[object, ...]:
    headers = sorted((k.lower(), v) for k, v in request.headers.multi_items())
    return (
        request.method,
        str(request.url),
        headers,
        request.content,
        request.extensions.get("timeout"),
    )


REQUESTS: Sequence[Request] = (
    Request("GET", "/api/v1/namespaces/ns/pods/p", []),
    Request(
        "GET",
        "/api/v1/pods",
        [
            ("labelSelector", "app in (a, b),tier!=x"),
            ("fieldSelector", "metadata.name=p,spec.nodeName!="),
            ("limit", "500"),
            ("continue", "eyJ2Ijoi+/=="),
        ],
    ),
    Request("GET", "/api/v1/namespaces/ns/pods", [("watch", "1"), ("labelSelector", "a=é ü")]),
    Request(
        "POST",
        "/api/v1/namespaces/ns/pods",
        [("dryRun", "All"), ("fieldManager", "me")],
        b'{"kind":"Pod"}',
        "application/json",
    ),
    Request(
        "PATCH",
        "/api/v1/namespaces/ns/pods/p/status",
        [],
        b"[]",
        "application/json-patch+json",
    ),
    Request("GET", "/api/v1/namespaces/ns/pods/p/log", [("container", "c")], accept="text/plain"),
)


@pytest.mark.parametrize("base", ["http://127.0.0.1:1", "https://example.test:6443/k8s/c-1/"])
@pytest.mark.parametrize("timeout", [None, 2.5])
@pytest.mark.parametrize("credential", [ALICE, Credential()])
async def test_requests_are_what_the_client_would_build(
    base: str, timeout: float | None, credential: Credential
) -> None:
    async with build_http_client(UpstreamConfig(server=base, source="test")) as http:
        adapter = KubeAdapter(http)
        for req in REQUESTS:
            headers = {"Accept": req.accept, **credential.headers()}
            if req.content_type:
                headers["Content-Type"] = req.content_type
            expected = http.build_request(
                req.method,
                req.path,
                params=tuple(req.params),
                content=req.content,
                headers=headers,
                **({"timeout": timeout} if timeout is not None else {}),
            )
            assert _fields(adapter._httpx_request(req, credential, timeout)) == _fields(expected)


@pytest.mark.parametrize("kind", ["upstream", "plain"])
async def test_no_cookie_goes_from_one_caller_to_another(kind: str) -> None:
    async with cookie_server() as server, _client(server.url, kind) as http:
        adapter = KubeAdapter(http)
        for credential in (ALICE, BOB, ALICE):
            got = await adapter.get(POD, "p", namespace="ns", credential=credential)
            assert got["metadata"]["name"] == "p"
        server.status = 404
        with pytest.raises(errors.NotFound):
            await adapter.get(POD, "p", namespace="ns", credential=BOB)
    assert len(server.seen) == 4
    assert [h.get("authorization") for h in server.seen] == [
        "Bearer alice-token",
        "Bearer bob-token",
        "Bearer alice-token",
        "Bearer bob-token",
    ]
    assert all("cookie" not in h for h in server.seen)
    assert all(h["user-agent"].startswith("kube-gateway/") for h in server.seen) == (
        kind == "upstream"
    )


async def test_a_kept_alive_connection_carries_only_each_callers_own_credential() -> None:
    """Callers one after another on the one kept-alive upstream connection (with and
    without a deadline): each request carries the token of its own caller, none at all for
    an anonymous one, never one a previous request on the connection carried."""
    callers = (ALICE, Credential(), BOB, Credential(), ALICE)
    async with cookie_server() as server, _client(server.url, "upstream") as http:
        adapter = KubeAdapter(http)
        for timeout in (None, 5.0):
            for credential in callers:
                got = await adapter.get(
                    POD, "p", namespace="ns", credential=credential, timeout=timeout
                )
                assert got["metadata"]["name"] == "p"
    assert len(server.connections) == 1  # every request on one connection
    expected = [c.token and f"Bearer {c.token}" for c in callers] * 2
    assert [h.get("authorization") for h in server.seen] == expected


async def test_each_upstream_series_counts_only_its_own_verb_and_code() -> None:
    """The upstream duration series are looked up once each: a request is counted under its
    own verb, resource and code, never under a series another one looked up first."""
    metrics = Metrics()
    async with cookie_server() as server, _client(server.url, "upstream") as http:
        adapter = KubeAdapter(http, metrics=metrics)
        for status, times in ((200, 3), (404, 2), (200, 1)):
            server.status = status
            for _ in range(times):
                with contextlib.suppress(errors.NotFound):
                    await adapter.get(POD, "p", namespace="ns", credential=ALICE)
        await adapter.delete(POD, "p", namespace="ns", credential=ALICE)

    def count(verb: str, code: str) -> float | None:
        return metrics.registry.get_sample_value(
            "kube_gateway_upstream_request_duration_seconds_count",
            {"verb": verb, "resource": "pods", "code": code},
        )

    assert (count("get", "200"), count("get", "404"), count("delete", "200")) == (4, 2, 1)
    assert count("delete", "404") is None


async def test_the_transport_is_used_directly_only_when_the_client_adds_nothing() -> None:
    plain = build_http_client(UpstreamConfig(server="http://127.0.0.1:1", source="test"))
    named = build_http_client(
        UpstreamConfig(server="https://127.0.0.1:1", source="test", tls_server_name="kube.test")
    )
    own = build_http_client(
        UpstreamConfig(server="http://127.0.0.1:1", source="test", token="gateway-token"),
        gateway_identity=True,
    )
    async with plain, named, own:
        assert isinstance(plain, UpstreamClient) and plain.direct is not None
        assert named.direct is None  # its request hook sets the TLS server name
        assert own.direct is None  # its auth flow adds the gateway's token


class _CountingFinder(importlib.abc.MetaPathFinder):
    """Counts the searches for one module name that reach the import system's finders."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.searches = 0

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == self.name:
            self.searches += 1
        return None


async def test_upstream_requests_do_not_search_for_sniffio() -> None:
    finder = _CountingFinder("sniffio")
    sys.meta_path.insert(0, finder)
    try:
        async with cookie_server() as server, _client(server.url, "upstream") as http:
            adapter = KubeAdapter(http)
            for _ in range(5):
                await adapter.get(POD, "p", namespace="ns", credential=ALICE)
    finally:
        sys.meta_path.remove(finder)
    assert len(server.seen) == 5
    assert finder.searches == 0


async def test_a_closed_client_refuses_as_httpx_does() -> None:
    async with cookie_server() as server:
        http = _client(server.url, "upstream")
        adapter = KubeAdapter(http)
        await adapter.get(POD, "p", namespace="ns", credential=ALICE)
        await http.aclose()
        with pytest.raises(RuntimeError, match="client has been closed"):
            await adapter.get(POD, "p", namespace="ns", credential=ALICE)
    assert len(server.seen) == 1
