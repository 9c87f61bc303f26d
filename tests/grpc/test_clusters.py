"""Many clusters behind one gRPC server: the ``x-kube-cluster`` metadata picks the cluster.

Two seeded demo upstreams, each with an object the other lacks, served as clusters ``a`` and
``b`` of one fleet (``default`` is ``a``'s upstream again); the client is a real ``grpc.aio``
channel.  Each test checks what each cluster's own upstream holds, so a call served by the
wrong cluster cannot pass.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import orjson
import pytest

from gateway.core.fleet.visibility import ALL_CLUSTERS
from gateway.core.model.registry import REGISTRY
from gateway.grpc.gen.kubegateway.v1 import (
    cluster_pb2,
    cluster_pb2_grpc,
    common_pb2,
    leases_pb2,
    pods_pb2,
    resource_pb2,
)
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.app import VERSION
from tests.scenarios.backend import sample
from tests.support.grpc import ADMIN, NAMESPACE, Two, bearer, demo_cluster, serve_two, unique

AUTH = bearer(ADMIN)
STEP = 10.0  # seconds any single expected message may take (bounded waits, never sleeps)
Event = common_pb2.WatchEvent


def on(cluster: str | None) -> tuple[tuple[str, str], ...]:
    """Admin metadata naming ``cluster`` (``None``: naming none)."""
    return AUTH if cluster is None else (*AUTH, ("x-kube-cluster", cluster))


@pytest.fixture
async def two() -> AsyncIterator[Two]:
    async with contextlib.AsyncExitStack() as stack:
        demos = {n: await stack.enter_async_context(DemoUpstream()) for n in ("a", "b")}
        # b's upstream knows the gateway (its own token there), a's does not
        yield await serve_two(stack, demos, default="a", own={"b": ADMIN})


async def _names(two: Two, cluster: str | None) -> set[str]:
    listed = await two.leases.List(
        leases_pb2.ListLeasesRequest(namespace=NAMESPACE), metadata=on(cluster)
    )
    return {item.metadata.name for item in listed.items}


async def test_each_cluster_serves_its_own_objects(two: Two) -> None:
    for name, other in (("a", "b"), ("b", "a")):
        names = await _names(two, name)
        assert two.only[name] in names and two.only[other] not in names
        got = await two.leases.Get(
            leases_pb2.GetLeaseRequest(namespace=NAMESPACE, name=two.only[name]),
            metadata=on(name),
        )
        assert got.metadata.name == two.only[name]
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await two.leases.Get(
                leases_pb2.GetLeaseRequest(namespace=NAMESPACE, name=two.only[other]),
                metadata=on(name),
            )
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        # the generic ResourceService too, on the cluster's own catalog
        listed = await two.resources.List(
            resource_pb2.ListResourcesRequest(
                group="coordination.k8s.io", version="v1", resource="leases", namespace=NAMESPACE
            ),
            metadata=on(name),
        )
        generic = {orjson.loads(i.json)["metadata"]["name"] for i in listed.items}
        assert two.only[name] in generic and two.only[other] not in generic


async def test_writes_go_to_the_named_cluster_only(two: Two) -> None:
    name = unique("w")
    await two.leases.Create(
        leases_pb2.CreateLeaseRequest(
            namespace=NAMESPACE,
            raw_json=orjson.dumps(sample("leases", name, NAMESPACE)),
        ),
        metadata=on("b"),
    )
    assert (await two.demos["b"].store.get("leases", name, namespace=NAMESPACE))["metadata"][
        "name"
    ] == name
    assert name not in await _names(two, "a")


async def test_no_cluster_or_an_empty_one_is_the_default(two: Two) -> None:
    for metadata in (on(None), on("")):
        listed = await two.leases.List(
            leases_pb2.ListLeasesRequest(namespace=NAMESPACE), metadata=metadata
        )
        names = {item.metadata.name for item in listed.items}
        assert two.only["a"] in names and two.only["b"] not in names


async def test_an_unknown_cluster_is_not_found_naming_the_served_ones(two: Two) -> None:
    served = 'cluster "nope" is not served by this gateway; clusters you may see: default, a, b'
    with pytest.raises(grpc.aio.AioRpcError) as unary:
        await two.leases.List(
            leases_pb2.ListLeasesRequest(namespace=NAMESPACE), metadata=on("nope")
        )
    assert unary.value.code() == grpc.StatusCode.NOT_FOUND
    assert unary.value.details() == served
    watch = two.leases.Watch(
        leases_pb2.WatchLeasesRequest(namespace=NAMESPACE), metadata=on("nope"), timeout=STEP
    )
    with pytest.raises(grpc.aio.AioRpcError) as streaming:
        async for _ in watch:
            raise AssertionError("no event expected")
    assert streaming.value.code() == grpc.StatusCode.NOT_FOUND
    assert streaming.value.details() == served
    with pytest.raises(grpc.aio.AioRpcError) as generic:
        await two.resources.Get(
            resource_pb2.GetResourceRequest(
                version="v1", resource="pods", namespace=NAMESPACE, name="x"
            ),
            metadata=on("nope"),
        )
    assert generic.value.code() == grpc.StatusCode.NOT_FOUND
    assert generic.value.details() == served


class Watch:
    """A Watch call read message by message, each read bounded."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self._events = call.__aiter__()

    async def next(self) -> Any:
        async with asyncio.timeout(STEP):
            return await anext(self._events)

    async def added(self) -> str:
        """The name of the next event's lease, which must be an ADDED one."""
        event = await self.next()
        assert event.type == Event.ADDED
        return str(event.lease.metadata.name)


def _watch(two: Two, cluster: str) -> Watch:
    return Watch(
        two.leases.Watch(
            # this test's leases only: the initial state is the one only this cluster has
            leases_pb2.WatchLeasesRequest(namespace=NAMESPACE, label_selector=f"t={two.label}"),
            metadata=on(cluster),
        )
    )


async def test_watch_streams_each_clusters_events(two: Two) -> None:
    watches = {n: _watch(two, n) for n in ("a", "b")}
    for name in ("a", "b"):
        assert await watches[name].added() == two.only[name]
    added = {n: unique(f"new-{n}") for n in ("a", "b")}
    for n in ("a", "b"):
        await two.create(n, added[n])
    for n in ("a", "b"):
        assert await watches[n].added() == added[n]
    for w in watches.values():
        w.call.cancel()


async def test_a_removed_cluster_ends_its_streams_and_the_other_keeps_streaming(
    two: Two,
) -> None:
    kept, removed = _watch(two, "a"), _watch(two, "b")
    assert await kept.added() == two.only["a"]
    assert await removed.added() == two.only["b"]

    two.fleet.remove("b")

    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await removed.next()
    assert ended.value.code() == grpc.StatusCode.NOT_FOUND
    assert ended.value.details() == 'cluster "b" was removed from this gateway'
    # the other cluster's watch carries on
    name = unique("after")
    await two.create("a", name)
    assert await kept.added() == name
    # and new calls naming it are refused like any unknown cluster
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _names(two, "b")
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert refused.value.details() == (
        'cluster "b" is not served by this gateway; clusters you may see: default, a'
    )
    kept.call.cancel()


async def test_a_removed_cluster_ends_a_followed_log(two: Two) -> None:
    demo = two.demos["b"]
    name = unique("fol")
    body = sample("pods", name, NAMESPACE)
    body["spec"]["containers"] = [{"name": "c", "image": "busybox:1.36"}]
    body["spec"]["nodeName"] = "node-a"
    await demo.store.create("pods", body, namespace=NAMESPACE)
    await demo.store.set_log(NAMESPACE, name, "c", ["first"])
    call = two.pods.GetLog(
        pods_pb2.GetPodLogRequest(namespace=NAMESPACE, name=name, follow=True),
        metadata=on("b"),
        timeout=STEP,
    )
    chunks = call.__aiter__()
    assert (await anext(chunks)).data == b"first\n"
    two.fleet.remove("b")
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        async with asyncio.timeout(STEP):
            await anext(chunks)
    assert ended.value.code() == grpc.StatusCode.NOT_FOUND
    assert ended.value.details() == 'cluster "b" was removed from this gateway'


async def test_a_cluster_added_while_serving_is_served(two: Two) -> None:
    with pytest.raises(grpc.aio.AioRpcError):
        await _names(two, "c")
    async with demo_cluster(two.demos["b"].url, name="c") as cluster:
        two.fleet.add("c", cluster)
        names = await _names(two, "c")
        assert two.only["b"] in names and two.only["a"] not in names
        two.fleet.remove("c")


async def _clusters(two: Two, cluster: str | None = None) -> list[tuple[str, str, str, bool, int]]:
    listed = await cluster_pb2_grpc.ClusterServiceStub(two.channel).ListClusters(
        cluster_pb2.ListClustersRequest(), metadata=on(cluster), timeout=STEP
    )
    return [(c.name, c.server, c.version, c.ready, c.served_resources) for c in listed.clusters]


async def test_list_clusters_describes_each_served_cluster(two: Two) -> None:
    version, seed = VERSION["gitVersion"], len(REGISTRY.records)
    a, b = two.demos["a"].url, two.demos["b"].url
    # the version is asked with the gateway's own credential, never the caller's: a's
    # upstream refuses anonymous requests (ready all the same: it answered)
    assert await _clusters(two) == [
        ("default", a, "", True, seed),
        ("a", a, "", True, seed),
        ("b", b, version, True, seed),
    ]
    # the service is the gateway's own: the cluster metadata, even an unknown name, is ignored
    assert await _clusters(two, "nope") == await _clusters(two)
    two.fleet.remove("b")
    async with demo_cluster("http://127.0.0.1:1", name="down") as down:
        two.fleet.add("down", down)
        # a cluster that does not answer cannot say it knows the caller: not listed
        assert await _clusters(two) == [("default", a, "", True, seed), ("a", a, "", True, seed)]
        # shown to everyone (--cluster-visibility all), it is listed, not ready and without
        # a version
        two.visibility.mode = ALL_CLUSTERS
        assert await _clusters(two) == [
            ("default", a, "", True, seed),
            ("a", a, "", True, seed),
            ("down", "http://127.0.0.1:1", "", False, seed),
        ]


async def test_a_replaced_cluster_ends_its_streams_to_be_called_again(two: Two) -> None:
    watch = _watch(two, "b")
    assert await watch.added() == two.only["b"]
    async with demo_cluster(two.demos["b"].url, name="b") as again:
        two.fleet.add("b", again)  # new configuration, same name
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await watch.next()
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert ended.value.details() == 'cluster "b" was reconfigured: call again to continue'
        # called again, on the new configuration
        resumed = _watch(two, "b")
        assert await resumed.added() == two.only["b"]
        resumed.call.cancel()
