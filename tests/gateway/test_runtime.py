"""The runtime builders: one cluster built on an exit stack and closed with it, and the
lifespan handing that same cluster to both front ends."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

from gateway.core.config import UpstreamConfig
from gateway.core.credentials import credential_of_token
from gateway.core.metrics import Metrics
from gateway.core.registry import POD
from gateway.runtime import Upstream, build_cluster
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
