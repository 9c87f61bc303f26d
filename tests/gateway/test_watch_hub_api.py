"""The shared watch hub through both front ends of ``kube-gateway serve``, over real sockets:
large snapshots on every transport, one upstream watch for many subscribers, budgets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest

from gateway.grpc.gen.kubegateway.v1 import (
    common_pb2,
    leases_pb2,
    leases_pb2_grpc,
    pods_pb2,
    pods_pb2_grpc,
)
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, SSE, Gateway, gql, serve_app, ws_client

AUTH = (("authorization", f"Bearer {ADMIN}"),)
STEP = 60.0
BIG = 5000

WATCH_PODS = """subscription($ns: String) {
  watchPods(namespace: $ns) { type object { metadata { name } } }
}"""
WATCH_LEASES = """subscription($ns: String, $labels: String) {
  watchLeases(namespace: $ns, labelSelector: $labels) { type object { metadata { name } } }
}"""


@contextlib.asynccontextmanager
async def gateway_with(demo: DemoUpstream, **settings: Any) -> AsyncIterator[Gateway]:
    config = Settings(
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        server=demo.url,
        log_level="warning",
        **settings,
    )
    async with serve_app(config) as (url, app):
        yield Gateway(url, app, demo)


@contextlib.asynccontextmanager
async def grpc_channel(gw: Gateway) -> AsyncIterator[grpc.aio.Channel]:
    port = gw.app.state.runtime.grpc_port
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]
    )
    try:
        yield channel
    finally:
        await channel.close()


def _lease(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"holderIdentity": "a"}}


async def test_a_namespace_of_5000_pods_arrives_whole_on_every_transport_then_changes(
    demo: DemoUpstream,
) -> None:
    await demo.store.bulk_create(
        "pods",
        (
            {
                "metadata": {"name": f"p{i:05}", "labels": {"i": str(i)}},
                "spec": {"containers": [{"name": "c", "image": "img"}]},
            }
            for i in range(BIG)
        ),
        namespace="big",
    )
    expected = {f"p{i:05}" for i in range(BIG)}
    async with gateway_with(demo) as gw, grpc_channel(gw) as channel:

        async def over_ws() -> set[str]:
            async with ws_client(gw) as ws:
                op = await ws.subscribe(WATCH_PODS, {"ns": "big"})
                seen = set()
                for _ in range(BIG):
                    event = (await ws.next(op, timeout=STEP))["data"]["watchPods"]
                    assert event["type"] == "ADDED"
                    seen.add(event["object"]["metadata"]["name"])
                ready[0].set()
                await live.wait()
                event = (await ws.next(op, timeout=STEP))["data"]["watchPods"]
                assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "late")
                return seen

        async def over_sse() -> set[str]:
            async with (
                httpx.AsyncClient(base_url=gw.url, timeout=STEP) as client,
                client.stream(
                    "POST",
                    "/graphql",
                    json={"query": WATCH_PODS, "variables": {"ns": "big"}},
                    headers={"Accept": "text/event-stream", "Authorization": f"Bearer {ADMIN}"},
                ) as response,
            ):
                sse = SSE(response)
                seen = set()
                for _ in range(BIG):
                    name, payload = await sse.event(timeout=STEP)
                    assert name == "next", payload
                    seen.add(payload["data"]["watchPods"]["object"]["metadata"]["name"])
                ready[1].set()
                await live.wait()
                _, payload = await sse.event(timeout=STEP)
                assert payload["data"]["watchPods"]["object"]["metadata"]["name"] == "late"
                return seen

        async def over_grpc() -> set[str]:
            stub = pods_pb2_grpc.PodServiceStub(channel)
            call = stub.Watch(pods_pb2.WatchPodsRequest(namespace="big"), metadata=AUTH)
            events = call.__aiter__()
            seen = set()
            async with asyncio.timeout(STEP):
                for _ in range(BIG):
                    event = await anext(events)
                    assert event.type == common_pb2.WatchEvent.ADDED
                    seen.add(event.pod.metadata.name)
                ready[2].set()
                await live.wait()
                event = await anext(events)
            assert event.pod.metadata.name == "late"
            call.cancel()
            return seen

        live = asyncio.Event()
        ready = [asyncio.Event() for _ in range(3)]
        readers = [asyncio.create_task(f()) for f in (over_ws, over_sse, over_grpc)]
        # every reader took its whole snapshot: only then the change, a live event for all
        async with asyncio.timeout(STEP * 3):
            await asyncio.gather(*(r.wait() for r in ready))
        await demo.store.create(
            "pods",
            {"metadata": {"name": "late"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
            namespace="big",
        )
        live.set()
        results = await asyncio.gather(*readers)
    assert all(seen == expected for seen in results)
    assert demo.faults.watch_requests == 1  # one upstream watch behind all three


async def test_1000_subscribers_over_graphql_and_grpc_share_one_upstream_watch(
    demo: DemoUpstream,
) -> None:
    await demo.store.create("leases", _lease("one", fan="out"), namespace="demo")
    variables = {"ns": "demo", "labels": "fan=out"}
    async with gateway_with(demo) as gw, grpc_channel(gw) as channel:
        stub = leases_pb2_grpc.LeaseServiceStub(channel)
        calls = [
            stub.Watch(
                leases_pb2.WatchLeasesRequest(namespace="demo", label_selector="fan=out"),
                metadata=AUTH,
            )
            for _ in range(500)
        ]
        streams = [call.__aiter__() for call in calls]
        async with contextlib.AsyncExitStack() as stack:
            sockets = [await stack.enter_async_context(ws_client(gw)) for _ in range(5)]
            for ws in sockets * 100:
                await ws.subscribe(WATCH_LEASES, variables)

            async def each_gets(name: str) -> None:
                async with asyncio.timeout(STEP):
                    for stream in streams:
                        assert (await anext(stream)).lease.metadata.name == name
                    for ws in sockets:  # 100 operations per connection, interleaved
                        got = {}
                        for _ in range(100):
                            message = await ws.recv()
                            assert message["type"] == "next", message
                            event = message["payload"]["data"]["watchLeases"]
                            got[message["id"]] = event["object"]["metadata"]["name"]
                        assert sorted(set(got.values())) == [name] and len(got) == 100

            await each_gets("one")
            await demo.store.create("leases", _lease("two", fan="out"), namespace="demo")
            await each_gets("two")
            stats = gw.app.state.runtime.cluster.watches.stats
            assert stats.upstream_watches == 1
            # Every subscriber of both front ends is one of the hub's; the 500 GraphQL ones
            # share one execution of their document per event.
            assert stats.subscribers == 1000
            assert len(gw.graphql.subscriptions.executions) == 1
            assert demo.faults.watch_requests == 1  # counted at the upstream
        for call in calls:
            call.cancel()


async def test_past_the_stream_budget_a_watch_is_refused_at_once_and_queries_still_answer(
    demo: DemoUpstream,
) -> None:
    for i in range(4):
        await demo.store.create("leases", _lease(f"b{i}", n=str(i)), namespace="demo")
    async with gateway_with(demo, upstream_max_streams=4) as gw, grpc_channel(gw) as channel:
        stub = leases_pb2_grpc.LeaseServiceStub(channel)
        calls = []
        for i in range(2):  # two upstream watches through gRPC...
            call = stub.Watch(
                leases_pb2.WatchLeasesRequest(namespace="demo", label_selector=f"n={i}"),
                metadata=AUTH,
            )
            assert (await anext(call.__aiter__())).lease.metadata.name == f"b{i}"
            calls.append(call)
        async with ws_client(gw) as ws:
            for i in range(2, 4):  # ...and two through GraphQL: the pool of 4 is full
                op = await ws.subscribe(WATCH_LEASES, {"ns": "demo", "labels": f"n={i}"})
                event = (await ws.next(op))["data"]["watchLeases"]
                assert event["object"]["metadata"]["name"] == f"b{i}"
            # the fifth, over gRPC: refused at once, with a clear status
            fifth = stub.Watch(
                leases_pb2.WatchLeasesRequest(namespace="demo", label_selector="n=5"),
                metadata=AUTH,
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async with asyncio.timeout(5):
                    await anext(fifth.__aiter__())
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "at most 4" in (refused.value.details() or "")
            # and over GraphQL
            op = await ws.subscribe(WATCH_LEASES, {"ns": "demo", "labels": "n=6"})
            message = await ws.recv()
            assert message["id"] == op and message["type"] == "next", message
            assert message["payload"]["errors"][0]["extensions"]["code"] == "RESOURCE_EXHAUSTED"
            # requests have a pool of their own: queries answer normally
            query = '{ leases(namespace: "demo") { items { metadata { name } } } }'
            async with httpx.AsyncClient(base_url=gw.url, timeout=10) as client:
                body = await gql(client, query)
            mine = {f"b{i}" for i in range(4)}
            assert mine <= {i["metadata"]["name"] for i in body["data"]["leases"]["items"]}
            listed = await stub.List(leases_pb2.ListLeasesRequest(namespace="demo"), metadata=AUTH)
            assert mine <= {item.metadata.name for item in listed.items}
        assert demo.faults.watch_requests == 4  # the refused ones never reached the upstream
        for call in calls:
            call.cancel()
