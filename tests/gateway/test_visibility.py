"""The clusters a caller may see: those that authenticate it, everywhere names are shown.

Two demo upstreams are two clusters of one gateway (``default`` and ``b``); bob's token is
known on ``b`` only, the administrator's on both.  Bob is shown ``b`` alone in the GraphQL
``clusters`` query (every endpoint), gRPC ``ListClusters``, every ``NOT_FOUND`` naming
clusters and a fleet call's default set, while a cluster he names is still asked (its own
answer shows).  The reviews behind it are counted on the gateway's own ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import orjson
import pytest

from gateway.core.fleet import Fleet
from gateway.grpc.gen.kubegateway.v1 import (
    cluster_pb2,
    cluster_pb2_grpc,
    leases_pb2,
    leases_pb2_grpc,
    resource_pb2,
    resource_pb2_grpc,
)
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.auth import DEFAULT_TOKENS, TokenGrant
from tests.gateway.test_fleet import gateway, kubeconfig, lease, serves, until
from tests.gateway.test_fleet_graphql import LEASES as FLEET
from tests.support.graphql import ADMIN, NAMESPACE, data, gql

BOB = "bob-token"
CLUSTERS = "{ clusters { name server } }"
REVIEWS = re.compile(
    r'kube_gateway_upstream_request_duration_seconds_count\{code="(\d+)",'
    r'resource="selfsubjectreviews.authentication.k8s.io",verb="create"\} ([0-9.]+)'
)


@pytest.fixture
async def two() -> AsyncIterator[tuple[DemoUpstream, DemoUpstream]]:
    """Cluster b knows bob (everything there); cluster default does not."""
    tokens = {**DEFAULT_TOKENS, BOB: TokenGrant("bob", "*", cluster_scoped=True)}
    async with DemoUpstream() as a, DemoUpstream(tokens=tokens) as b:
        await lease(a, "only-in-a")
        await lease(b, "only-in-b")
        yield a, b


@contextlib.asynccontextmanager
async def served(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path, *flags: str
) -> AsyncIterator[tuple[Fleet, httpx.AsyncClient, grpc.aio.Channel]]:
    a, b = two
    config = kubeconfig(tmp_path / "b.yaml", b.url)
    async with gateway(a, "--cluster", f"b={config}", *flags) as (gw, fleet, client):
        await until(fleet, serves("b"))
        port = gw.app.state.runtime.grpc_port
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield fleet, client, channel


def _metadata(token: str | None, cluster: str | None = None) -> tuple[tuple[str, str], ...]:
    out = [("authorization", f"Bearer {token}")] if token else []
    if cluster is not None:
        out.append(("x-kube-cluster", cluster))
    return tuple(out)


async def _listed(channel: grpc.aio.Channel, token: str | None) -> list[str]:
    answer = await cluster_pb2_grpc.ClusterServiceStub(channel).ListClusters(
        cluster_pb2.ListClustersRequest(), metadata=_metadata(token), timeout=10
    )
    return [c.name for c in answer.clusters]


async def _clusters(client: httpx.AsyncClient, token: str | None, path: str) -> list[str]:
    return [
        c["name"] for c in data(await gql(client, CLUSTERS, token=token, path=path))["clusters"]
    ]


async def _reviews(client: httpx.AsyncClient) -> dict[str, float]:
    """SelfSubjectReviews the gateway sent, by answer code (its own /metrics)."""
    scraper = {"Authorization": f"Bearer {ADMIN}"}  # /metrics: for callers RBAC allows
    text = (await client.get("/metrics", headers=scraper)).text
    return {code: float(count) for code, count in REVIEWS.findall(text)}


async def test_a_caller_is_shown_only_the_clusters_that_authenticate_it(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    async with served(two, tmp_path) as (_fleet, client, channel):
        # the clusters query, on every endpoint, and ListClusters
        for path in ("/graphql", "/clusters/b/graphql", "/fleet/graphql"):
            assert await _clusters(client, BOB, path) == ["b"]
            assert await _clusters(client, ADMIN, path) == ["default", "b"]
        assert await _listed(channel, BOB) == ["b"]
        assert await _listed(channel, ADMIN) == ["default", "b"]
        assert await _listed(channel, None) == []  # no credential: no cluster knows it

        # NOT_FOUND names the clusters the caller may see: /clusters/{name}/graphql...
        refusal = 'cluster "nope" is not served by this gateway; clusters you may see: '
        for token, shown in ((BOB, "b"), (ADMIN, "default, b"), (None, "none")):
            missing = await gql(
                client, CLUSTERS, token=token, path="/clusters/nope/graphql", expect=404
            )
            assert missing["errors"][0]["message"] == refusal + shown
        # ... gRPC's x-kube-cluster ...
        leases = leases_pb2_grpc.LeaseServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await leases.List(
                leases_pb2.ListLeasesRequest(namespace=NAMESPACE), metadata=_metadata(BOB, "nope")
            )
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
        assert unknown.value.details() == refusal + "b"
        # ... and a fleet call naming it
        body = await gql(client, FLEET, {"clusters": ["nope"]}, token=BOB, path="/fleet/graphql")
        assert body["data"]["fleet"][0]["error"] == {"code": "NOT_FOUND", "message": refusal + "b"}

        # A fleet query's default set, and "*", are the clusters bob may see: no
        # UNAUTHENTICATED from a cluster that never heard of him.
        for clusters in (None, ["*"]):
            members = data(
                await gql(client, FLEET, {"clusters": clusters}, token=BOB, path="/fleet/graphql")
            )["fleet"]
            assert [m["cluster"] for m in members] == ["b"]
            assert {i["metadata"]["name"] for i in members[0]["leases"]["items"]} >= {"only-in-b"}
        everyone = data(await gql(client, FLEET, token=ADMIN, path="/fleet/graphql"))["fleet"]
        assert [m["cluster"] for m in everyone] == ["default", "b"]
        # A cluster bob names is asked all the same: its own answer shows.
        named = await gql(
            client, FLEET, {"clusters": ["default", "b"]}, token=BOB, path="/fleet/graphql"
        )
        assert [m["cluster"] for m in named["data"]["fleet"]] == ["default", "b"]
        (error,) = named["errors"]
        assert error["path"] == ["fleet", 0, "leases"]
        assert error["extensions"]["code"] == "UNAUTHENTICATED"
        # gRPC fleet calls alike
        resources = resource_pb2_grpc.ResourceServiceStub(channel)
        request = resource_pb2.ListResourcesRequest(
            group="coordination.k8s.io", version="v1", resource="leases", namespace=NAMESPACE
        )
        request.clusters.append("*")
        listed = await resources.List(request, metadata=_metadata(BOB), timeout=10)
        assert [m.cluster for m in listed.clusters] == ["b"]
        assert "only-in-b" in {
            orjson.loads(i.json)["metadata"]["name"] for i in listed.clusters[0].list.items
        }
        del request.clusters[:]
        request.clusters.extend(["default", "nope"])
        listed = await resources.List(request, metadata=_metadata(BOB), timeout=10)
        default, nope = listed.clusters
        assert default.error.code == grpc.StatusCode.UNAUTHENTICATED.value[0]
        assert nope.error.message == refusal + "b"


async def test_concurrent_callers_share_one_review_per_cluster_and_all_shows_every_cluster(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    async with served(two, tmp_path) as (fleet, client, channel):
        before = await _reviews(client)
        shown = await asyncio.gather(
            *(_clusters(client, BOB, "/graphql") for _ in range(10)),
            *(_listed(channel, BOB) for _ in range(10)),
        )
        assert all(names == ["b"] for names in shown)
        after = await _reviews(client)
        # one review per cluster for twenty concurrent requests: b said 201, default 401
        assert after.get("201", 0) - before.get("201", 0) == 1
        assert after.get("401", 0) - before.get("401", 0) == 1
        # kept: asking again sends none
        assert await _listed(channel, BOB) == ["b"]
        assert await _reviews(client) == after

    async with served(two, tmp_path, "--cluster-visibility", "all") as (fleet, client, channel):
        assert await _listed(channel, BOB) == ["default", "b"]
        assert await _clusters(client, BOB, "/graphql") == ["default", "b"]
        assert await _clusters(client, None, "/graphql") == ["default", "b"]
        assert await _reviews(client) == {}  # nothing asked
        assert fleet.visibility.reviews == 0


async def test_a_gateway_of_one_cluster_sends_no_review(
    two: tuple[DemoUpstream, DemoUpstream],
) -> None:
    a, _ = two
    async with gateway(a) as (_gw, fleet, client):
        assert await _clusters(client, BOB, "/graphql") == ["default"]
        missing = await gql(client, CLUSTERS, token=BOB, path="/clusters/nope/graphql", expect=404)
        assert missing["errors"][0]["message"].endswith("clusters you may see: default")
        assert await _reviews(client) == {}
        assert fleet.visibility.reviews == 0
