"""The gateway served by uvicorn on a loopback port, in
process, against a seeded demo upstream, and small real clients for its transports.

Nothing here mocks the gateway: requests go over real sockets to the real application,
which calls the demo upstream over real sockets with the caller's token.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from starlette.applications import Starlette
from websockets.asyncio.client import ClientConnection, connect

from gateway.app import create_app
from gateway.httpserver import server_options
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream

ADMIN = "admin-token"
VIEWER = "viewer-token"
ALICE = "alice-token"
NAMESPACE = "demo"
_names = itertools.count()


def unique(prefix: str) -> str:
    """A DNS-1123 name no other test uses."""
    return f"{prefix}-{next(_names)}"


class _Server(uvicorn.Server):
    """uvicorn that reports when it listens (no polling) and never touches signals."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


@dataclass
class Gateway:
    """The running gateway."""

    url: str
    app: Starlette
    demo: DemoUpstream

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/graphql"

    @property
    def graphql(self) -> Any:
        """The GraphQLApp mounted at /graphql (for its subscriptions and limits)."""
        return self._mounted("/graphql")

    @property
    def groups(self) -> Any:
        """The GroupEndpoint mounted at /apis/{group}/graphql (for the schemas it follows)."""
        return self._mounted("/apis/{group}/graphql")

    def _mounted(self, path: str) -> Any:
        for route in self.app.routes:
            if getattr(route, "path", None) == path:
                return route.app  # type: ignore[attr-defined]
        raise LookupError(f"no {path} route")


@contextlib.asynccontextmanager
async def serve_app(settings: Settings, port: int = 0) -> AsyncIterator[tuple[str, Starlette]]:
    """Serve ``create_app(settings)`` with uvicorn on a loopback port (a free one, unless
    ``port`` says which: a gateway started again where a client will reconnect) until the
    block exits; yields the base URL and the application."""
    app = create_app(settings)
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP
    # (socket.socket() leaves it 0), and without it every response waits ~40 ms for a
    # delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_config=None,
        log_level=None,
        timeout_graceful_shutdown=2,
        **server_options(settings),  # the command's timeouts and connection cap
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    ready = asyncio.create_task(server.ready.wait())
    done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if ready not in done:
        ready.cancel()
        await task
        sock.close()
        raise RuntimeError("the gateway did not start")
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        await task
        sock.close()


@contextlib.asynccontextmanager
async def serve_gateway(
    demo: DemoUpstream, server: str | None = None, *, port: int = 0, **more: Any
) -> AsyncIterator[Gateway]:
    """Serve the gateway app against ``demo`` until the block exits.

    ``server`` is the upstream URL the gateway calls, when not ``demo.url`` itself (a
    :class:`~tests.support.tap.Tap` in front of it); ``port``: see :func:`serve_app`;
    ``more``: further settings.
    """
    settings = Settings(
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        server=server or demo.url,
        log_level="warning",
        **more,
    )
    async with serve_app(settings, port) as (url, app):
        yield Gateway(url, app, demo)


@contextlib.asynccontextmanager
async def with_and_without_workers(demo: DemoUpstream) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """``demo`` through a gateway with two list workers and one with none (the same
    answers compared)."""
    async with (
        serve_gateway(demo, list_workers="2") as workers,
        serve_gateway(demo, list_workers="0") as plain,
    ):
        yield workers, plain


def list_workers_of(gateway: Gateway) -> Any:
    """The list workers of ``gateway``'s cluster (it has some)."""
    lists = gateway.app.state.runtime.cluster.adapter.large_lists
    assert lists.workers is not None
    return lists.workers


@pytest.fixture
async def demo() -> AsyncIterator[DemoUpstream]:
    async with DemoUpstream() as upstream:
        yield upstream


@pytest.fixture
async def gateway(demo: DemoUpstream) -> AsyncIterator[Gateway]:
    async with serve_gateway(demo) as gw:
        yield gw


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the gateway that calls as the demo admin."""
    async with httpx.AsyncClient(
        base_url=gateway.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10
    ) as c:
        yield c


async def gql(
    client: httpx.AsyncClient,
    query: str,
    variables: dict[str, Any] | None = None,
    *,
    token: str | None = ADMIN,
    expect: int = 200,
    path: str = "/graphql",
) -> dict[str, Any]:
    """POST one operation; returns the decoded response (asserting the HTTP status)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {"Authorization": ""}
    response = await client.post(
        path, json={"query": query, "variables": variables}, headers=headers
    )
    assert response.status_code == expect, response.text
    body: dict[str, Any] = response.json()
    return body


def data(body: dict[str, Any]) -> dict[str, Any]:
    """The data of a response that must have no errors."""
    assert "errors" not in body, body["errors"]
    result: dict[str, Any] = body["data"]
    return result


def error_of(body: dict[str, Any]) -> dict[str, Any]:
    """The only error of a response."""
    assert len(body.get("errors") or []) == 1, body
    error: dict[str, Any] = body["errors"][0]
    return error


class TransportWS:
    """A graphql-transport-ws client over the ``websockets`` library."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    async def recv(self, timeout: float = 10) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                message: dict[str, Any] = orjson.loads(await self.ws.recv())
                if message.get("type") not in ("ping", "pong", "ka"):
                    return message

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(orjson.dumps(message).decode())

    async def subscribe(self, query: str, variables: dict[str, Any] | None = None) -> str:
        op_id = str(next(self._ids))
        kind = "start" if self.ws.subprotocol == "graphql-ws" else "subscribe"
        await self.send(
            {"id": op_id, "type": kind, "payload": {"query": query, "variables": variables}}
        )
        return op_id

    async def next(self, op_id: str, timeout: float = 10) -> dict[str, Any]:
        """The next payload of ``op_id`` (fails on complete or error)."""
        message = await self.recv(timeout)
        assert message.get("id") == op_id, message
        assert message["type"] in ("next", "data"), message
        payload: dict[str, Any] = message["payload"]
        return payload


@contextlib.asynccontextmanager
async def ws_client(
    gateway: Gateway,
    protocol: str = "graphql-transport-ws",
    payload: dict[str, Any] | None = None,
    path: str = "/graphql",
) -> AsyncIterator[TransportWS]:
    """A connected and acknowledged WebSocket client (admin token in connection_init)."""
    url = gateway.url.replace("http://", "ws://") + path
    async with connect(url, subprotocols=[protocol]) as ws:  # type: ignore[list-item]
        client = TransportWS(ws)
        await client.send(
            {
                "type": "connection_init",
                "payload": payload if payload is not None else {"Authorization": f"Bearer {ADMIN}"},
            }
        )
        ack = await client.recv()
        assert ack["type"] == "connection_ack", ack
        yield client


class SSE:
    """Reads a graphql-sse (distinct connections) response event by event."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self.comments = 0

    async def event(self, timeout: float = 10) -> tuple[str, Any]:
        name, data_lines = "", []
        async with asyncio.timeout(timeout):
            while True:
                line = await anext(self._lines)
                if line.startswith(":"):
                    self.comments += 1
                    continue
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data_lines.append(line[5:].strip())
                elif line == "" and name:
                    raw = "\n".join(data_lines)
                    return name, orjson.loads(raw) if raw else None

    async def heartbeat(self, timeout: float = 10) -> None:
        """Wait for the next comment line (a heartbeat)."""
        async with asyncio.timeout(timeout):
            while True:
                line = await anext(self._lines)
                if line.startswith(":"):
                    self.comments += 1
                    return
