"""Fixtures for the demo upstream tests: a running server, clients and watch readers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest

from kube_gateway_demo import DemoUpstream

ADMIN = {"Authorization": "Bearer admin-token"}
_counter = itertools.count()


class WatchReader:
    """Reads a watch response event by event (never sleeps: every read is bounded)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next event."""
        async with asyncio.timeout(timeout):
            while True:
                line = await anext(self._lines)
                if line.strip():
                    event: dict[str, Any] = orjson.loads(line)
                    return event

    async def take(self, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """The next ``count`` events."""
        return [await self.next(timeout) for _ in range(count)]

    async def rest(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Every event until the server ends the stream."""
        out = []
        async with asyncio.timeout(timeout):
            async for line in self._lines:
                if line.strip():
                    out.append(orjson.loads(line))
        return out


@pytest.fixture
async def demo() -> AsyncIterator[DemoUpstream]:
    """A seeded demo upstream on a free loopback port."""
    async with DemoUpstream() as upstream:
        yield upstream


@pytest.fixture
async def client(demo: DemoUpstream) -> AsyncIterator[httpx.AsyncClient]:
    """An admin client of ``demo``."""
    async with httpx.AsyncClient(base_url=demo.url, headers=ADMIN, timeout=10.0, verify=False) as c:
        yield c


@pytest.fixture
async def client_for(
    demo: DemoUpstream,
) -> AsyncIterator[Callable[[str | None], httpx.AsyncClient]]:
    """A factory of clients with a given bearer token (None: no Authorization header)."""
    clients: list[httpx.AsyncClient] = []

    def make(token: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        c = httpx.AsyncClient(base_url=demo.url, headers=headers, timeout=10.0, verify=False)
        clients.append(c)
        return c

    yield make
    for c in clients:
        await c.aclose()


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Unique, valid object names."""
    return lambda prefix: f"{prefix}-{next(_counter)}"


@pytest.fixture
def open_watch(
    client: httpx.AsyncClient,
) -> Callable[..., contextlib.AbstractAsyncContextManager[WatchReader]]:
    """``async with open_watch(path, **params) as w``: a watch stream on ``path``."""

    @contextlib.asynccontextmanager
    async def _open(path: str, **params: Any) -> AsyncIterator[WatchReader]:
        params.setdefault("watch", "1")
        async with client.stream("GET", path, params=params) as resp:
            yield WatchReader(resp)

    return _open


def pod_manifest(name: str, namespace: str = "demo", **spec: Any) -> dict[str, Any]:
    """A minimal valid pod."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "test"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], **spec},
    }
    return body


@pytest.fixture
def pod() -> Callable[..., dict[str, Any]]:
    """The pod manifest builder."""
    return pod_manifest
