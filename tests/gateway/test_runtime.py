"""The runtime builders: one cluster built on an exit stack and closed with it, and the
lifespan handing that same cluster to both front ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import AsyncExitStack
from pathlib import Path

from gateway.core.fleet.fleet import Fleet
from gateway.core.model.registry import POD
from gateway.core.process.metrics import Metrics
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import credential_of_token
from gateway.runtime import FleetBuilder, Upstream, build_cluster
from gateway.settings import load
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, Gateway, serve_app


async def test_a_cluster_is_built_on_a_stack_and_closed_with_it(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(ADMIN)
    async with DemoUpstream() as demo:
        settings = load(
            ["--watch-max-queue", "8", "--discovery-token-file", str(token), "--shared-watches"],
            {},
        )
        upstream = Upstream(UpstreamConfig(server=demo.url, source="tests", token=ADMIN))
        async with AsyncExitStack() as stack:
            cluster = await build_cluster(stack, settings, upstream, metrics=Metrics())
            assert cluster.watches.max_queue == 8
            assert cluster.reloader is not None and not cluster.demo
            assert cluster.watches.shared is not None
            assert await cluster.readiness.ready()
            pods = await cluster.adapter.list(
                POD, namespace="demo", credential=credential_of_token(ADMIN)
            )
            assert pods["items"]
            clients = {
                cluster.adapter.http,
                cluster.adapter.stream_http,
                cluster.reloader.adapter.http,
                cluster.watches.shared.adapter.http,
            }
            assert len(clients) == 4  # requests, streams, discovery, shared watches
            assert not any(client.is_closed for client in clients)
        assert all(client.is_closed for client in clients)


async def test_both_front_ends_are_handed_the_cluster_the_lifespan_built(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(ADMIN)
    async with DemoUpstream() as demo:
        # As `kube-gateway serve` reads them: the flag reaches the hub both front ends use.
        flags = ["--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0"]
        flags += ["--server", demo.url, "--discovery-token-file", str(token)]
        settings = load([*flags, "--watch-max-queue", "8", "--log-level", "warning"], {})
        async with serve_app(settings) as (url, app):
            served = Gateway(url, app, demo)
            runtime = app.state.runtime
            assert served.graphql.cluster is runtime.cluster
            assert served.groups.live is runtime.live_schema is not None
            assert runtime.cluster.watches.max_queue == 8


class _Said(logging.Handler):
    """The gateway's "left out" lines, and an event set at each."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[logging.LogRecord] = []
        self.changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "left out" in record.getMessage():
            self.lines.append(record)
            self.changed.set()


async def test_a_bad_clusters_dir_file_is_logged_once_per_change_not_at_every_rescan(
    tmp_path: Path,
) -> None:
    (tmp_path / "Bad_Name").write_text("not a cluster")
    builder = FleetBuilder(load([], {}), Fleet(), Metrics())
    said = _Said()
    logger = logging.getLogger("gateway")
    logger.addHandler(said)
    following = asyncio.create_task(builder.follow_dir(tmp_path, rescan_seconds=0.05))
    try:
        # Time passing is the stimulus: about 30 rescans find the same file.
        await asyncio.sleep(1.5)
        assert [r.levelno for r in said.lines] == [logging.ERROR], said.lines
        assert "Bad_Name" in said.lines[0].getMessage()
        # A change is said again, once: the new file's line, not the old one's.
        said.changed.clear()
        (tmp_path / "Another_Bad").write_text("not a cluster either")
        async with asyncio.timeout(20):
            await said.changed.wait()
        await asyncio.sleep(1.0)  # more rescans
        assert len(said.lines) == 2, said.lines
        assert "Another_Bad" in said.lines[1].getMessage()
    finally:
        logger.removeHandler(said)
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
        await builder.aclose()
