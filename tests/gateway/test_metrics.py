"""``/metrics``: exact counts of operations, upstream calls and watches, scraped over HTTP.

Traffic goes through both front ends of one gateway (GraphQL over HTTP, gRPC on the same
process's gRPC port); the scrape is parsed with prometheus-client's own parser.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.grpc.gen.kubegateway.v1 import leases_pb2, leases_pb2_grpc, pods_pb2, pods_pb2_grpc
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, ALICE, Gateway, gql, serve_gateway
from tests.support.tap import Tap

AUTH = (("authorization", f"Bearer {ADMIN}"),)
Sample = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: httpx.AsyncClient) -> Sample:
    # A scraper the cluster allows (see the last tests).
    response = await client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    assert ADMIN not in response.text  # no token in any label or value
    out: Sample = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Sample, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
async def served() -> AsyncIterator[tuple[Gateway, grpc.aio.Channel]]:
    async with DemoUpstream() as demo, serve_gateway(demo) as gateway:
        port = gateway.app.state.runtime.grpc_port
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield gateway, channel


async def test_operations_upstream_calls_and_watches_are_counted_exactly(
    served: tuple[Gateway, grpc.aio.Channel],
) -> None:
    gateway, channel = served
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        before = await scrape(client)
        assert value(before, "kube_gateway_operations_total") == 0

        for _ in range(2):
            await gql(client, '{ pods(namespace: "demo") { items { metadata { name } } } }')
        missing = await gql(client, '{ pod(namespace: "demo", name: "nope") { kind } }')
        assert missing["errors"][0]["extensions"]["code"] == "NOT_FOUND"
        refused = await gql(client, '{ leases(namespace: "demo", limit: -1) { kind } }')
        assert refused["errors"]

        pods = pods_pb2_grpc.PodServiceStub(channel)
        listed = await pods.List(pods_pb2.ListPodsRequest(namespace="demo"), metadata=AUTH)
        name = listed.items[0].metadata.name
        await pods.Get(pods_pb2.GetPodRequest(namespace="demo", name=name), metadata=AUTH)

        leases = leases_pb2_grpc.LeaseServiceStub(channel)
        watch = leases.Watch(leases_pb2.WatchLeasesRequest(namespace="demo"), metadata=AUTH)
        await anext(aiter(watch))  # the first ADDED: the subscription is open
        during = await scrape(client)
        watch.cancel()

        # The server learns of the cancel asynchronously: scrape until the subscription is
        # gone (every scrape is a real request; bounded).
        for _ in range(500):
            after = await scrape(client)
            if value(after, "kube_gateway_subscriptions") == 0:
                break

    ops = "kube_gateway_operations_total"
    assert (
        value(after, ops, transport="graphql", operation="List", resource="pods", outcome="ok") == 2
    )
    assert (
        value(after, ops, transport="graphql", operation="Get", resource="pods", outcome="NotFound")
        == 1
    )
    assert (
        value(
            after,
            ops,
            transport="graphql",
            operation="List",
            resource="leases.coordination.k8s.io",
            outcome="InvalidParameter",
        )
        == 1
    )
    assert value(after, ops, transport="grpc", operation="List", resource="pods", outcome="ok") == 1
    assert value(after, ops, transport="grpc", operation="Get", resource="pods", outcome="ok") == 1
    graphql_list = value(
        after,
        "kube_gateway_operation_duration_seconds_count",
        transport="graphql",
        operation="List",
        resource="pods",
    )
    assert graphql_list == 2

    # Upstream: 3 lists of pods (2 GraphQL, 1 gRPC), one 404 and one 200 get; the refused
    # lease list never left the gateway.
    up = "kube_gateway_upstream_request_duration_seconds_count"
    assert value(after, up, verb="list", resource="pods", code="200") == 3
    assert value(after, up, verb="get", resource="pods", code="404") == 1
    assert value(after, up, verb="get", resource="pods", code="200") == 1
    assert value(after, up, verb="list", resource="leases.coordination.k8s.io", code="200") == 1

    # The watch: open while scraped, one upstream watch, then gone.
    assert value(during, "kube_gateway_subscriptions") == 1
    assert value(during, "kube_gateway_upstream_watches") == 1
    assert value(during, "kube_gateway_watch_events_delivered_total") >= 1
    assert value(after, "kube_gateway_subscriptions") == 0


async def test_readiness_asks_the_upstream_once_and_shows_nothing_of_it() -> None:
    asked: list[bytes] = []

    async def not_ready(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 2\r\n\r\nno")
        await writer.drain()
        writer.close()

    upstream = await asyncio.start_server(not_ready, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{upstream.sockets[0].getsockname()[1]}"
    try:
        async with (
            DemoUpstream() as demo,
            serve_gateway(demo, server=url) as gateway,
            httpx.AsyncClient(base_url=gateway.url, timeout=10) as client,
        ):
            probes = await asyncio.gather(*(client.get("/readyz") for _ in range(3)))
    finally:
        upstream.close()
    assert [p.status_code for p in probes] == [503, 503, 503]
    assert all(p.json() == {"status": "upstream not ready"} for p in probes)
    assert len(asked) == 1  # concurrent probes share one question
    assert asked[0].startswith(b"GET /readyz ")


async def test_a_held_event_loop_shows_in_the_lag_histogram(
    served: tuple[Gateway, grpc.aio.Channel],
) -> None:
    """Work that holds the event loop (here the test itself, sharing the gateway's loop)
    shows as lag: the stall every caller waited behind."""
    gateway, _ = served
    async with httpx.AsyncClient(base_url=gateway.url) as client:
        before = await scrape(client)
        time.sleep(0.3)  # noqa: ASYNC251  (holding the loop is the point)
        # the sampler's timer is overdue now: it runs at the scrape's first await
        after = await scrape(client)
    name = "kube_gateway_event_loop_lag_seconds_bucket"
    over = value(after, name, le="+Inf") - value(after, name, le="0.25")
    over_before = value(before, name, le="+Inf") - value(before, name, le="0.25")
    assert over - over_before >= 1


async def test_metrics_are_served_to_callers_the_cluster_allows_and_no_one_else(
    demo: DemoUpstream,
) -> None:
    """``/metrics`` names every cluster and served resource: by default it is served to
    callers the default cluster allows ``get`` on the non-resource URL ``/metrics`` (a
    SelfSubjectAccessReview with their own token, as Kubernetes components do), refused
    to anyone else, anonymous callers without asking the cluster anything."""
    async with Tap.before(demo.url) as tap, serve_gateway(demo, tap.url) as gateway:
        reviews = b"selfsubjectaccessreviews"
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
            before = tap.from_client.count(reviews)
            started = time.perf_counter()
            anonymous = [await client.get("/metrics") for _ in range(50)]
            anonymous_s = (time.perf_counter() - started) / 50
            assert tap.from_client.count(reviews) == before  # nothing asked upstream
            for refused in anonymous:
                assert refused.status_code == 401, refused.text
                assert refused.headers["www-authenticate"] == "Bearer"
                assert 'nonResourceURLs: ["/metrics"]' in refused.text
                assert "kube_gateway" not in refused.text and "leases" not in refused.text

            def bearer(token: str) -> dict[str, str]:
                return {"Authorization": f"Bearer {token}"}

            # A token the cluster rejects, and one it knows but does not allow: refused.
            unknown = await client.get("/metrics", headers=bearer("not-a-demo-token"))
            assert unknown.status_code == 401 and "kube_gateway" not in unknown.text
            alice = await client.get("/metrics", headers=bearer(ALICE))
            assert alice.status_code == 403 and "kube_gateway" not in alice.text
            assert "this caller may not" in alice.text
            # A scraper the cluster allows is served; its answer is kept, not asked again.
            asked = tap.from_client.count(reviews)
            for _ in range(5):
                scraped = await client.get("/metrics", headers=bearer(ADMIN))
                assert scraped.status_code == 200
                assert "kube_gateway_operations_total" in scraped.text
            assert tap.from_client.count(reviews) == asked + 1
    print(f"anonymous /metrics refused in {anonymous_s * 1000:.1f} ms each, nothing asked")


async def test_metrics_access_anyone_serves_every_caller(demo: DemoUpstream) -> None:
    async with (
        serve_gateway(demo, metrics_access="anyone") as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=30) as client,
    ):
        scraped = await client.get("/metrics")
        assert scraped.status_code == 200 and "kube_gateway_operations_total" in scraped.text


async def test_a_list_refused_over_the_cap_is_counted_as_refused() -> None:
    """A small GraphQL list is handed on undecoded and projected by the field's completion
    (``LargeLists.projected_here``): a refusal found there (more items than the cap) is
    still the list operation's outcome, not ``ok``."""
    query = '{ pods(namespace: "demo") { items { metadata { name } } } }'
    async with (
        DemoUpstream() as demo,
        serve_gateway(demo, max_list_items=1) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as client,
    ):
        refused = await gql(client, query)
        assert refused["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"
        after = await scrape(client)
    ops = "kube_gateway_operations_total"
    labels = {"transport": "graphql", "operation": "List", "resource": "pods"}
    assert value(after, ops, **labels, outcome="RequestEntityTooLarge") == 1
    assert value(after, ops, **labels, outcome="ok") == 0
