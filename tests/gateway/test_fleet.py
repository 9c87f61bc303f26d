"""Many clusters from one gateway: two demo upstreams served as two clusters.

The default cluster is ``--server``'s; the others come from ``--cluster`` flags or the
files of ``--clusters-dir``, built in the background.  Each is reached at
``/clusters/{name}/graphql`` and answers with its own data; the tests wait for a cluster
through the fleet's own listeners, never by sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from gateway.core.fleet.cluster import Cluster
from gateway.core.fleet.fleet import Fleet
from gateway.core.model.registry import LEASE
from gateway.settings import load
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import (
    ADMIN,
    NAMESPACE,
    Gateway,
    TransportWS,
    data,
    gql,
    serve_app,
    ws_client,
)

LEASES = '{ leases(namespace: "demo") { items { metadata { name } } } }'


def kubeconfig(path: Path, server: str, token: str = ADMIN) -> Path:
    """A kubeconfig of ``server`` with ``token`` (the cluster's identity for the gateway)."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}'}}}}]\n"
        f"users: [{{name: u, user: {{token: '{token}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return path


async def lease(demo: DemoUpstream, name: str) -> None:
    await demo.store.create(
        LEASE, {"metadata": {"name": name}, "spec": {"holderIdentity": name}}, namespace=NAMESPACE
    )


async def until(fleet: Fleet, holds: Callable[[Fleet], bool], timeout: float = 20) -> None:
    """Wait until ``holds(fleet)``, woken by the fleet's own changes."""
    changed = asyncio.Event()

    def heard(name: str, cluster: Cluster | None) -> None:
        changed.set()

    stop = fleet.listen(heard)
    try:
        async with asyncio.timeout(timeout):
            while not holds(fleet):
                await changed.wait()
                changed.clear()
    finally:
        stop()


def serves(*names: str) -> Callable[[Fleet], bool]:
    return lambda fleet: all(n in fleet.names() for n in names)


@contextlib.asynccontextmanager
async def gateway(
    default: DemoUpstream, *flags: str
) -> AsyncIterator[tuple[Gateway, Fleet, httpx.AsyncClient]]:
    base = ["--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0"]
    settings = load([*base, "--server", default.url, "--log-level", "warning", *flags], {})
    async with (
        serve_app(settings) as (url, app),
        httpx.AsyncClient(base_url=url, timeout=10) as client,
    ):
        yield Gateway(url, app, default), app.state.runtime.fleet, client


#: The demo upstreams of these tests know the same tokens: one identity provider, so a
#: caller's token may reach every cluster unasked (listings, "*").
SHARED = ("--shared-identity-clusters", "*")


def names(body: dict[str, Any]) -> set[str]:
    return {item["metadata"]["name"] for item in data(body)["leases"]["items"]}


@pytest.fixture
async def two() -> AsyncIterator[tuple[DemoUpstream, DemoUpstream]]:
    async with DemoUpstream() as a, DemoUpstream() as b:
        await lease(a, "only-in-a")
        await lease(b, "only-in-b")
        yield a, b


async def test_each_cluster_answers_with_its_own_data(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    config = kubeconfig(tmp_path / "b.yaml", b.url)
    async with gateway(a, "--cluster", f"b={config}", *SHARED) as (_, fleet, client):
        await until(fleet, serves("b"))
        assert fleet.names() == ["default", "b"]
        default = names(await gql(client, LEASES))
        assert "only-in-a" in default and "only-in-b" not in default
        assert names(await gql(client, LEASES, path="/clusters/default/graphql")) == default
        other = names(await gql(client, LEASES, path="/clusters/b/graphql"))
        assert "only-in-b" in other and "only-in-a" not in other

        # A name the gateway does not serve: 404, naming the served ones.
        missing = await gql(client, LEASES, path="/clusters/nope/graphql", expect=404)
        error = missing["errors"][0]
        assert error["extensions"]["code"] == "NOT_FOUND"
        assert error["message"] == (
            'cluster "nope" is not served by this gateway; clusters you may see: default, b'
        )
        settings = await client.get("/clusters/nope/graphql/graphiql.json")
        assert settings.status_code == 404
        assert (await client.get("/clusters/b/graphql/graphiql.json")).status_code == 200
        ws_url = client.base_url.copy_with(scheme="ws", path="/clusters/nope/graphql")
        async with connect(str(ws_url), subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404


async def test_a_cluster_of_the_directory_is_served_live_and_its_removal_ends_subscribers(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    (clusters / ".hidden").write_text("not a cluster")
    async with gateway(a, "--clusters-dir", str(clusters)) as (served, fleet, client):
        assert fleet.names() == ["default"]
        kubeconfig(tmp_path / "staged", b.url).rename(clusters / "b")  # whole, at once
        await until(fleet, serves("b"))
        other = names(await gql(client, LEASES, path="/clusters/b/graphql"))
        assert "only-in-b" in other and "only-in-a" not in other

        async with ws_client(served, path="/clusters/b/graphql") as ws:
            op = await ws.subscribe(
                'subscription { watchLeases(namespace: "demo") '
                "{ type object { metadata { name } } } }"
            )
            await next_lease(ws, op, "only-in-b")  # the initial events are b's
            await lease(b, "while-subscribed")
            await next_lease(ws, op, "while-subscribed")
            (clusters / "b").unlink()
            final = await ws.recv()
            assert final["id"] == op and final["type"] == "next", final
            error = final["payload"]["errors"][0]
            assert error["extensions"]["code"] == "CLUSTER_REMOVED"
            assert error["message"] == 'cluster "b" was removed from this gateway'
            assert (await ws.recv())["type"] == "complete"
        assert fleet.names() == ["default"]
        await gql(client, LEASES, path="/clusters/b/graphql", expect=404)


async def next_lease(ws: TransportWS, op: str, name: str) -> None:
    """Read ``op``'s events up to the one of lease ``name`` (none of cluster a's on the way)."""
    while True:
        event = (await ws.next(op))["data"]["watchLeases"]
        seen = (event.get("object") or {}).get("metadata", {}).get("name")
        assert seen != "only-in-a"
        if seen == name:
            return


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_a_broken_or_unreachable_cluster_delays_no_other(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    port = _closed_port()
    flags = [
        *("--cluster", f"broken={tmp_path / 'missing.yaml'}"),
        *("--cluster", f"down={kubeconfig(tmp_path / 'down', f'http://127.0.0.1:{port}')}"),
        *("--cluster", f"b={kubeconfig(tmp_path / 'b', b.url)}"),
        *SHARED,
    ]
    async with gateway(a, *flags) as (_, fleet, client):
        await until(fleet, serves("down", "b"))
        other = names(await gql(client, LEASES, path="/clusters/b/graphql"))
        assert "only-in-b" in other
        assert await fleet.get("b").readiness.ready()
        assert not await fleet.get("down").readiness.ready()
        unreachable = await gql(client, LEASES, path="/clusters/down/graphql")
        assert unreachable["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
        # The broken one is not served (it is retried meanwhile): 404 naming the others the
        # caller may see (not "down": it cannot say it knows the caller).
        missing = await gql(client, LEASES, path="/clusters/broken/graphql", expect=404)
        message = missing["errors"][0]["message"]
        assert message.startswith('cluster "broken" is not served by this gateway; clusters')
        assert set(message.split("clusters you may see: ")[1].split(", ")) == {"default", "b"}


CLUSTERS = "{ clusters { name server version ready servedResources } }"


async def test_the_clusters_query_lists_the_served_clusters_on_every_endpoint(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    config = kubeconfig(tmp_path / "b.yaml", b.url)
    async with gateway(a, "--cluster", f"b={config}", *SHARED) as (_, fleet, client):
        await until(fleet, serves("b"))
        for path in ("/graphql", "/clusters/b/graphql", "/clusters/default/graphql"):
            listed = data(await gql(client, CLUSTERS, path=path))["clusters"]
            assert [c["name"] for c in listed] == ["default", "b"]
            default, other = listed
            assert default["server"] == a.url and other["server"] == b.url
            assert default["ready"] and other["ready"]
            # b's kubeconfig carries the gateway's identity: its version is asked with it;
            # the default's (no identity) without a credential, refused by the demo.
            assert other["version"] == "v1.36.3"
            assert default["version"] is None
            assert default["servedResources"] == 5  # discovery off: the built-in ones
            assert other["servedResources"] >= 5


async def test_demo_clusters_serve_each_its_own_demo_upstream() -> None:
    flags = ["--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--demo"]
    settings = load([*flags, "--demo-clusters", "2", "--log-level", "warning"], {})
    async with (
        serve_app(settings) as (url, app),
        httpx.AsyncClient(base_url=url, timeout=10) as client,
    ):
        fleet: Fleet = app.state.runtime.fleet
        await until(fleet, serves("demo-2"))
        assert fleet.names() == ["default", "demo-2"]
        assert fleet.get("demo-2").demo and fleet.get("demo-2").server != fleet.get().server
        endpoints = Gateway(url, app, None)._mounted("/clusters/{name}/graphql")  # type: ignore[arg-type]
        live = endpoints.served["demo-2"].live
        await live.wait_ready()
        query = "{ namespaces { items { metadata { name } } } }"
        listed = data(await gql(client, query, path="/clusters/demo-2/graphql"))
        assert "demo-2" in {n["metadata"]["name"] for n in listed["namespaces"]["items"]}
        await app.state.runtime.live_schema.wait_ready()
        default = data(await gql(client, query))["namespaces"]["items"]
        assert "demo-2" not in {n["metadata"]["name"] for n in default}
