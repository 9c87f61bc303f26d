"""``DemoUpstream``: the demo API server running in-process on a loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Mapping
from types import TracebackType
from typing import ClassVar, Self

import uvicorn

from gateway.core.model.registry import Registry
from kube_gateway_demo.app import DemoApp
from kube_gateway_demo.auth import ADMIN_TOKEN, DEFAULT_TOKENS, TokenGrant
from kube_gateway_demo.catalog import DEMO_REGISTRY
from kube_gateway_demo.faults import Faults
from kube_gateway_demo.http import install_log_filter
from kube_gateway_demo.inprocess import DemoStore
from kube_gateway_demo.sample import seed

#: The demo server's lifespan messages: warnings and errors only.
_QUIET = logging.getLogger("kube_gateway_demo.lifespan")
_QUIET.setLevel(logging.WARNING)


class _Server(uvicorn.Server):
    """A uvicorn server that ends long-lived responses before it waits for connections."""

    def __init__(self, config: uvicorn.Config, app: DemoApp) -> None:
        super().__init__(config)
        self._demo_app = app

    async def serve_until(
        self, stop: asyncio.Event, sockets: list[socket.socket], started: asyncio.Event
    ) -> None:
        """Serve until ``stop`` is set, then shut down without uvicorn's polling delays."""
        config = self.config
        if not config.loaded:
            config.load()
        self.lifespan = config.lifespan_class(config)
        # Its lifespan's "Waiting for application startup" / "startup complete" lines would
        # read as the gateway's own, twice: only its warnings and errors are said.
        self.lifespan.logger = _QUIET
        await self.startup(sockets=sockets)
        if self.should_exit:
            return
        await self.on_tick(0)
        started.set()
        ticker = asyncio.create_task(self._tick(), name="demo-upstream-date")
        try:
            await stop.wait()
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
            await self._quick_shutdown()

    async def _tick(self) -> None:
        counter = 0
        while True:
            await asyncio.sleep(1.0)
            counter += 10
            await self.on_tick(counter)

    async def _quick_shutdown(self) -> None:
        self._demo_app.close()
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.config.timeout_graceful_shutdown or 5)
        while self.server_state.connections or self.server_state.tasks:
            if loop.time() > deadline:
                for t in list(self.server_state.tasks):
                    t.cancel()
                break
            await asyncio.sleep(0.005)
        for server in self.servers:
            await server.wait_closed()
        await self.lifespan.shutdown()


class DemoUpstream:
    """A Kubernetes-compatible API server for the registry's resources, on ``127.0.0.1``.

    ``async with DemoUpstream() as demo:`` starts uvicorn in the running event loop on a free
    port and stops it (ending open watches and log follows) on exit.

    Args:
        registry: the served resources (:data:`~kube_gateway_demo.catalog.DEMO_REGISTRY`, the
            gateway's seeds and more, by default); a resource without
            kind-specific behaviour in the demo is served generically from its schema.
        schema_types: schema definition ids by registry key, for resources whose kind is
            not the one :func:`gateway.core.model.schema.kind_type` finds (tests).
        tokens: accepted bearer tokens; ``None`` means :data:`~kube_gateway_demo.DEFAULT_TOKENS`
            (``admin-token``, ``viewer-token``, ``alice-token``).  Requests without a known
            token get 401, as from an apiserver with anonymous auth disabled.
        seed: populate the sample cluster (namespaces ``default``, ``kube-system``, ``demo``;
            objects of the gateway's five resources, so their registry entries must be served).
        animate: keep the sample data changing every ~1.5 s (a lifespan-owned task).
        history: changes kept per resource for watch resumption and consistent pagination.
        bookmark_interval: seconds between progress BOOKMARKs on watches that allow them.
        host: interface to bind.
        port: port to bind (0: a free one).
        max_body_bytes: request bodies larger than this answer 413.

    Attributes:
        admin_token: the administrator's token among the default ones
            (:data:`~kube_gateway_demo.auth.ADMIN_TOKEN`): a gateway in demo mode takes it
            for its own identity, so the gateway itself holds no demo token.
        store: the cluster state, for in-process reads and writes (:class:`DemoStore`).
        faults: the fault switchboard (:class:`Faults`).
        app: the ASGI application.
    """

    admin_token: ClassVar[str] = ADMIN_TOKEN

    def __init__(
        self,
        tokens: Mapping[str, TokenGrant] | None = None,
        *,
        registry: Registry = DEMO_REGISTRY,
        schema_types: Mapping[str, str] | None = None,
        seed: bool = True,
        animate: bool = False,
        history: int = 1000,
        bookmark_interval: float = 60.0,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = 3 * 1024 * 1024,
        animate_interval: float = 1.5,
    ) -> None:
        self.store = DemoStore(registry, schema_types=schema_types, history=history)
        self.faults = Faults(self.store.storage.compact)
        self.tokens: Mapping[str, TokenGrant] = DEFAULT_TOKENS if tokens is None else tokens
        self.app = DemoApp(
            self.store,
            self.faults,
            self.tokens,
            bookmark_interval=bookmark_interval,
            max_body_bytes=max_body_bytes,
            animate=animate,
            animate_interval=animate_interval,
        )
        self._seed = seed
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._url: str | None = None
        self._stop = asyncio.Event()

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:43121``.

        Raises:
            RuntimeError: before the server started.
        """
        if self._url is None:
            raise RuntimeError("the demo upstream is not running")
        return self._url

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Seed (if asked), bind and serve; returns once the server accepts connections."""
        if self._task is not None:
            raise RuntimeError("already started")
        install_log_filter()
        if self._seed:
            await seed(self.store)
        # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on sockets that say so, and
        # without it every small response waits ~40 ms for a delayed ACK.
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._port))
        port = sock.getsockname()[1]
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._url = f"http://{host}:{port}"
        self.app.server_address = f"{host}:{port}"
        config = uvicorn.Config(
            # log_config/log_level None: an in-process server leaves the host's logging alone
            self.app,
            lifespan="on",
            log_config=None,
            log_level=None,
            ws="none",
            timeout_graceful_shutdown=5,
            timeout_keep_alive=30,
            server_header=False,
        )
        self._server = _Server(config, self.app)
        started = asyncio.Event()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._serve(sock, started), name="demo-upstream")
        waiter = asyncio.create_task(started.wait())
        done, _ = await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiter
            task, self._task = self._task, None
            await task  # re-raises the startup failure
            raise RuntimeError("the demo upstream stopped during startup")

    async def _serve(self, sock: socket.socket, started: asyncio.Event) -> None:
        server = self._server
        assert server is not None
        try:
            await server.serve_until(self._stop, [sock], started)
        finally:
            sock.close()

    async def stop(self) -> None:
        """End every stream, stop accepting, wait for connections to close, run shutdown."""
        server, task = self._server, self._task
        if server is None or task is None:
            return
        self._stop.set()
        try:
            await task
        finally:
            self._task = None
            self._server = None
            self._url = None
