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
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import orjson
import pytest

from gateway.core.fleet.visibility import NOT_ASKED, Visibility
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
from tests.support.tap import Tap, requests_carrying

BOB = "bob-token"
REFUSED = "the gateway is reviewing too many new callers at once; retry in a second"
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
) -> AsyncIterator[tuple[Visibility, httpx.AsyncClient, grpc.aio.Channel]]:
    a, b = two
    config = kubeconfig(tmp_path / "b.yaml", b.url)
    shared = ("--shared-identity-clusters", "b")  # b trusts the default's tokens (and bob)
    async with gateway(a, "--cluster", f"b={config}", *shared, *flags) as (gw, fleet, client):
        await until(fleet, serves("b"))
        port = gw.app.state.runtime.grpc_port
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield gw.app.state.runtime.visibility, client, channel


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
    async with served(two, tmp_path) as (_visibility, client, channel):
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
    async with served(two, tmp_path) as (_visibility, client, channel):
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

    async with served(two, tmp_path, "--cluster-visibility", "all") as (shown, client, channel):
        assert await _listed(channel, BOB) == ["default", "b"]
        assert await _clusters(client, BOB, "/graphql") == ["default", "b"]
        assert await _clusters(client, None, "/graphql") == ["default", "b"]
        assert await _reviews(client) == {}  # nothing asked
        assert shown.reviews == 0


async def test_a_gateway_of_one_cluster_sends_no_review(
    two: tuple[DemoUpstream, DemoUpstream],
) -> None:
    a, _ = two
    async with gateway(a) as (gw, _fleet, client):
        assert await _clusters(client, BOB, "/graphql") == ["default"]
        missing = await gql(client, CLUSTERS, token=BOB, path="/clusters/nope/graphql", expect=404)
        assert missing["errors"][0]["message"].endswith("clusters you may see: default")
        assert await _reviews(client) == {}
        assert gw.app.state.runtime.visibility.reviews == 0


# -- a caller's token reaches a cluster only when named, or sharing the identity provider ---

CALLERS = ("alice-token", "viewer-token")


def _leaked(tap: Tap) -> dict[str, list[bytes]]:
    """The requests that reached the tapped cluster carrying a caller's token."""
    wire = bytes(tap.from_client)
    return {t: found for t in CALLERS if (found := requests_carrying(wire, t.encode()))}


async def _every_unnamed_way(
    client: httpx.AsyncClient, channel: grpc.aio.Channel, token: str
) -> None:
    """Everything that names no cluster, or only one the gateway does not serve: listings,
    NOT_FOUNDs, fleet calls without a list or with "*", a fleet watch of every cluster."""
    for path in ("/graphql", "/fleet/graphql"):
        assert await _clusters(client, token, path) == ["default"]
    assert await _listed(channel, token) == ["default"]
    missing = await gql(client, CLUSTERS, token=token, path="/clusters/nope/graphql", expect=404)
    assert missing["errors"][0]["message"].endswith("clusters you may see: default")
    for clusters, members in ((None, ["default"]), (["*"], ["default"]), (["nope"], ["nope"])):
        body = await gql(client, FLEET, {"clusters": clusters}, token=token, path="/fleet/graphql")
        assert [m["cluster"] for m in body["data"]["fleet"]] == members
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await leases_pb2_grpc.LeaseServiceStub(channel).List(
            leases_pb2.ListLeasesRequest(namespace=NAMESPACE), metadata=_metadata(token, "nope")
        )
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    resources = resource_pb2_grpc.ResourceServiceStub(channel)
    fields = {"group": "coordination.k8s.io", "version": "v1", "resource": "leases"}
    listed = await resources.List(
        resource_pb2.ListResourcesRequest(**fields, namespace=NAMESPACE, clusters=["*", "nope"]),
        metadata=_metadata(token),
        timeout=10,
    )
    assert [m.cluster for m in listed.clusters] == ["default", "nope"]
    watch = resource_pb2.WatchResourcesRequest(
        **fields, namespace=NAMESPACE, clusters=["*"], timeout_seconds=1
    )
    events = [e async for e in resources.Watch(watch, metadata=_metadata(token), timeout=10)]
    assert {e.cluster for e in events} <= {"default"}


async def test_a_token_never_reaches_a_cluster_not_named_nor_sharing_the_identity_provider(
    tmp_path: Path,
) -> None:
    """Cluster c is a kubeconfig dropped into --clusters-dir, behind a recording proxy: the
    tokens of callers who never name it never reach it, whatever they ask; named, it is
    asked with the caller's token; listed in --shared-identity-clusters, it is reviewed."""
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    async with DemoUpstream() as a, DemoUpstream() as c, Tap.before(c.url) as tap:
        kubeconfig(tmp_path / "staged", tap.url).rename(clusters / "c")
        async with gateway(a, "--clusters-dir", str(clusters)) as (gw, fleet, client):
            await until(fleet, serves("c"))
            port = gw.app.state.runtime.grpc_port
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                for token in CALLERS:
                    await _every_unnamed_way(client, channel, token)
                assert _leaked(tap) == {}
                # the tap is on c's path: the gateway's own identity went through it
                assert requests_carrying(bytes(tap.from_client), ADMIN.encode())

                # named, c is asked with the caller's token, and answers for itself
                named = await gql(
                    client, FLEET, {"clusters": ["c"]}, token="alice-token", path="/fleet/graphql"
                )
                assert named["data"]["fleet"][0]["leases"] is not None
                assert list(_leaked(tap)) == ["alice-token"]
                query = '{ leases(namespace: "demo") { items { metadata { name } } } }'
                data(await gql(client, query, token="viewer-token", path="/clusters/c/graphql"))
                assert list(_leaked(tap)) == ["alice-token", "viewer-token"]
                # reading the schema of the cluster it addresses reviews the caller there
                schema = "{ __schema { queryType { name } } }"
                body = await gql(client, schema, token="alice-token", path="/clusters/c/graphql")
                assert data(body)["__schema"]["queryType"]["name"] == "Query"
                assert requests_carrying(bytes(tap.from_client), b"alice-token")[-1] == (
                    b"POST /apis/authentication.k8s.io/v1/selfsubjectreviews HTTP/1.1"
                )

        # shared: c is reviewed with the caller's token, shown, and part of "*"
        before = len(requests_carrying(bytes(tap.from_client), b"viewer-token"))
        flags = ("--clusters-dir", str(clusters), "--shared-identity-clusters", "c")
        async with gateway(a, *flags) as (gw, fleet, client):
            await until(fleet, serves("c"))
            assert await _clusters(client, "viewer-token", "/graphql") == ["default", "c"]
            reviews = requests_carrying(bytes(tap.from_client), b"viewer-token")[before:]
            assert reviews == [b"POST /apis/authentication.k8s.io/v1/selfsubjectreviews HTTP/1.1"]
            body = await gql(client, FLEET, token="viewer-token", path="/fleet/graphql")
            assert [m["cluster"] for m in data(body)["fleet"]] == ["default", "c"]


# -- a flood of fresh tokens costs a bounded number of reviews --------------------------


async def test_a_flood_of_random_tokens_is_refused_while_a_known_caller_is_served(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    """Every fresh token would cost a SelfSubjectReview per cluster; they share one budget
    (--max-new-caller-reviews 5: 25 at once, then 5 a second), so 400 random tokens send a
    bounded number of reviews and get RESOURCE_EXHAUSTED past it, while the administrator,
    whom a review authenticated before, is answered every time."""
    async with served(two, tmp_path, "--max-new-caller-reviews", "5") as (_, client, channel):
        assert await _listed(channel, ADMIN) == ["default", "b"]  # admin is known now
        before = sum((await _reviews(client)).values())
        outcomes: dict[str, int] = {}
        latencies: list[float] = []
        stop = asyncio.Event()

        async def known_caller() -> None:
            while not stop.is_set():
                started = time.perf_counter()
                assert await _clusters(client, ADMIN, "/graphql") == ["default", "b"]
                assert await _listed(channel, ADMIN) == ["default", "b"]
                latencies.append(time.perf_counter() - started)

        async def stranger(i: int) -> None:
            token = f"random-{secrets.token_hex(8)}-{i}"
            if i % 10 == 9:  # a name not served: a NOT_FOUND either way, never a failure
                body = await gql(
                    client, CLUSTERS, token=token, path="/clusters/nope/graphql", expect=404
                )
                told = body["errors"][0]["message"].split("clusters you may see: ")[1]
                outcome = {"none": "not found", NOT_ASKED: "not found, none asked"}[told]
            elif i % 2:  # gRPC ListClusters
                try:
                    assert await _listed(channel, token) == []
                    outcome = "answered"
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                    assert exc.details() == REFUSED
                    outcome = "RESOURCE_EXHAUSTED"
            else:
                body = await gql(client, CLUSTERS, token=token, path="/graphql")
                if "errors" in body:
                    error = body["errors"][0]
                    assert error["message"] == REFUSED
                    outcome = error["extensions"]["code"]
                else:
                    assert body["data"]["clusters"] == []  # no cluster knows a random token
                    outcome = "answered"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

        task = asyncio.create_task(known_caller())
        started = time.perf_counter()
        for batch in range(8):
            await asyncio.gather(*(stranger(batch * 50 + i) for i in range(50)))
        elapsed = time.perf_counter() - started
        stop.set()
        await task
        sent = sum((await _reviews(client)).values()) - before
        print(
            f"400 random tokens in {elapsed:.1f} s: {outcomes}, {sent:.0f} reviews sent; "
            f"known caller: {len(latencies)} answers, slowest {max(latencies) * 1000:.0f} ms"
        )
        assert sent <= 25 + 5 * elapsed + 2  # the burst, the rate (and one in flight)
        # each stranger answered cost a review per cluster; the others sent none
        assert outcomes.get("answered", 0) + outcomes.get("not found", 0) <= sent / 2
        assert outcomes.get("RESOURCE_EXHAUSTED", 0) >= 360 - sent
        assert outcomes.get("not found, none asked", 0) >= 1
        assert len(latencies) >= 2
        assert max(latencies) < 5.0  # two calls each, beside 50 strangers at once
