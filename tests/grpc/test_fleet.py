"""Fleet calls of the generic ``ResourceService``: ``List``/``Watch`` with ``clusters``.

Two demo upstreams are two clusters of one gRPC server (``default`` and ``b``), each with a
lease of this test the other lacks; ``b`` lets alice into namespace ``elsewhere`` only
(``default``: ``demo``), so a fleet call by alice has one cluster that refuses her.  The
client is a real ``grpc.aio`` channel; each per-cluster answer is checked against what that
cluster's own single-cluster call answers, so a fleet answer that mixed clusters up, or
shaped an error differently, cannot pass.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import orjson
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from gateway.core.fleet.watches import encode_resume
from gateway.core.model.registry import LEASE
from gateway.grpc.gen.kubegateway.v1 import common_pb2, resource_pb2
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.auth import DEFAULT_TOKENS, TokenGrant
from tests.support.grpc import (
    ADMIN,
    ALICE,
    NAMESPACE,
    Two,
    bearer,
    demo_cluster,
    serve_two,
    unique,
)

STEP = 10.0  # seconds any single expected message may take (bounded waits, never sleeps)
Event = common_pb2.WatchEvent
BOB = "bob-token"
LEASES = {"group": "coordination.k8s.io", "version": "v1", "resource": "leases"}


def _watch(two: Two, token: str = ADMIN, **fields: Any) -> Watch:
    request = resource_pb2.WatchResourcesRequest(
        **LEASES, namespace=NAMESPACE, label_selector=f"t={two.label}", **fields
    )
    return Watch(two.resources.Watch(request, metadata=bearer(token)))


@pytest.fixture
async def two() -> AsyncIterator[Two]:
    tokens = {**DEFAULT_TOKENS, ALICE: TokenGrant("alice", frozenset({"elsewhere"}))}
    async with contextlib.AsyncExitStack() as stack:
        demos = {
            "default": await stack.enter_async_context(DemoUpstream()),
            "b": await stack.enter_async_context(DemoUpstream(tokens=tokens)),
        }
        yield await serve_two(stack, demos)


def _names(listed: resource_pb2.ResourceList) -> set[str]:
    return {orjson.loads(item.json)["metadata"]["name"] for item in listed.items}


async def _single(two: Two, cluster: str, token: str, **fields: Any) -> Any:
    """What ``cluster`` alone answers the same List: its list, or its status."""
    request = resource_pb2.ListResourcesRequest(**fields)
    try:
        return await two.resources.List(
            request, metadata=(*bearer(token), ("x-kube-cluster", cluster))
        )
    except grpc.aio.AioRpcError as exc:
        status = rpc_status.from_call(exc)
        assert status is not None
        return status


def _error_info(status: status_pb2.Status) -> error_details_pb2.ErrorInfo:
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    raise AssertionError(f"no ErrorInfo in {status}")


async def test_a_fleet_list_answers_each_cluster_as_it_alone_would(two: Two) -> None:
    fields = {
        **LEASES,
        "namespace": NAMESPACE,
        "label_selector": f"t={two.label}",
        "read_mask": {"paths": ["metadata.name"]},
    }
    listed = await two.resources.List(
        resource_pb2.ListResourcesRequest(**fields, clusters=["*"]), metadata=bearer(ADMIN)
    )
    # a fleet answer carries its clusters only: nothing at the top
    assert not listed.items and not listed.kind and not listed.HasField("metadata")
    assert [m.cluster for m in listed.clusters] == ["default", "b"]  # every cluster, in order
    for member in listed.clusters:
        assert member.WhichOneof("result") == "list"
        assert member.list == await _single(two, member.cluster, ADMIN, **fields)
        assert _names(member.list) == {two.only[member.cluster]}
        assert [orjson.loads(i.json) for i in member.list.items] == [
            {"metadata": {"name": two.only[member.cluster]}}  # the mask, per cluster
        ]

    # named clusters: in the order named, each once; "*" where it stands
    again = await two.resources.List(
        resource_pb2.ListResourcesRequest(**fields, clusters=["b", "*", "b"]),
        metadata=bearer(ADMIN),
    )
    assert [m.cluster for m in again.clusters] == ["b", "default"]

    # without clusters: the x-kube-cluster cluster's list, exactly as before
    plain = await _single(two, "b", ADMIN, **fields)
    assert not plain.clusters and _names(plain) == {two.only["b"]}


async def test_a_cluster_that_refuses_the_caller_fails_alone_with_its_own_status(
    two: Two,
) -> None:
    fields = {**LEASES, "namespace": NAMESPACE}
    listed = await two.resources.List(
        resource_pb2.ListResourcesRequest(**fields, clusters=["default", "b", "nope"]),
        metadata=bearer(ALICE),
    )
    default, b, nope = listed.clusters
    assert (default.cluster, b.cluster, nope.cluster) == ("default", "b", "nope")
    # alice reads demo in default
    assert default.WhichOneof("result") == "list"
    assert two.only["default"] in _names(default.list)
    # b refuses her: exactly the status b alone answers (code, message, every detail)
    assert b.WhichOneof("result") == "error"
    refused = await _single(two, "b", ALICE, **fields)
    assert isinstance(refused, status_pb2.Status)
    assert refused.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert status_pb2.Status.FromString(b.error.SerializeToString()) == refused
    assert _error_info(refused).reason == "Forbidden"
    # a cluster that is not served: NOT_FOUND naming the served ones
    assert nope.error.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert nope.error.message == (
        'cluster "nope" is not served by this gateway; clusters you may see: default, b'
    )


async def test_an_unknown_resource_is_each_clusters_not_found(two: Two) -> None:
    listed = await two.resources.List(
        resource_pb2.ListResourcesRequest(version="v1", resource="nothings", clusters=["*"]),
        metadata=bearer(ADMIN),
    )
    assert [(m.cluster, m.error.code) for m in listed.clusters] == [
        ("default", grpc.StatusCode.NOT_FOUND.value[0]),
        ("b", grpc.StatusCode.NOT_FOUND.value[0]),
    ]
    single = await _single(two, "b", ADMIN, version="v1", resource="nothings")
    assert status_pb2.Status.FromString(listed.clusters[1].error.SerializeToString()) == single


async def test_a_slow_cluster_misses_the_deadline_alone(two: Two) -> None:
    slow = two.demos["b"].faults
    slow.hold(verb="list")
    try:
        listed = await two.resources.List(
            resource_pb2.ListResourcesRequest(**LEASES, namespace=NAMESPACE, clusters=["*"]),
            metadata=bearer(ADMIN),
            timeout=2.0,
        )
    finally:
        slow.release()
    default, b = listed.clusters
    assert two.only["default"] in _names(default.list)
    assert (b.cluster, b.error.code) == ("b", grpc.StatusCode.DEADLINE_EXCEEDED.value[0])


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (
            resource_pb2.ListResourcesRequest(**LEASES, clusters=["*"], **{"continue": "x"}),
            "continue",
        ),
        (resource_pb2.ListResourcesRequest(**LEASES, clusters=["default", ""]), "clusters"),
        (
            resource_pb2.WatchResourcesRequest(**LEASES, clusters=["*"], resource_version="1"),
            "resource_version",
        ),
        (resource_pb2.WatchResourcesRequest(**LEASES, resume_from={"b": "1"}), "resume_from"),
        (
            resource_pb2.WatchResourcesRequest(**LEASES, clusters=["b"], resume_from={"b": ""}),
            "resume_from",
        ),
    ],
)
async def test_what_a_fleet_call_cannot_mean_fails_the_call(
    two: Two, request_: Any, field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        if isinstance(request_, resource_pb2.ListResourcesRequest):
            await two.resources.List(request_, metadata=bearer(ADMIN))
        else:
            async for _ in two.resources.Watch(request_, metadata=bearer(ADMIN), timeout=STEP):
                raise AssertionError("no event expected")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(refused.value)
    assert status is not None
    violations = error_details_pb2.BadRequest()
    assert any(d.Unpack(violations) for d in status.details if d.Is(violations.DESCRIPTOR))
    assert [v.field for v in violations.field_violations] == [field]


class Watch:
    """A Watch call read message by message, each read bounded."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self._events = call.__aiter__()
        #: The last resource_version seen of each cluster.
        self.seen: dict[str, str] = {}

    async def next(self) -> resource_pb2.ResourceWatchEvent:
        async with asyncio.timeout(STEP):
            event: resource_pb2.ResourceWatchEvent = await anext(self._events)
        if event.resource_version:
            self.seen[event.cluster] = event.resource_version
        return event

    async def pairs(self, count: int) -> list[tuple[str, str]]:
        """The (cluster, lease name) of the next ``count`` events, all object events."""
        got = []
        for _ in range(count):
            event = await self.next()
            assert not event.HasField("error"), event
            got.append((event.cluster, orjson.loads(event.object.json)["metadata"]["name"]))
        return got


def _each_in_order(got: list[tuple[str, str]], expected: list[tuple[str, str]]) -> None:
    """Exactly the expected events, each cluster's in its own order (clusters interleave)."""
    assert sorted(got) == sorted(expected)
    for cluster in {c for c, _ in expected}:
        assert [n for c, n in got if c == cluster] == [n for c, n in expected if c == cluster]


async def test_a_fleet_watch_merges_tags_and_resumes_each_cluster_exactly(two: Two) -> None:
    watch = _watch(two, clusters=["*"])
    initial = await watch.pairs(2)
    assert sorted(initial) == [("b", two.only["b"]), ("default", two.only["default"])]
    live = [("default", unique("live")), ("b", unique("live"))]
    for cluster, name in live:
        await two.create(cluster, name)
    _each_in_order(await watch.pairs(2), live)
    watch.call.cancel()

    # Disconnected: both clusters change; resuming each from what was seen misses nothing.
    missed = [(c, unique(f"missed-{c}")) for c in ("default", "b", "default", "b")]
    for cluster, name in missed:
        await two.create(cluster, name)
    resumed = _watch(two, clusters=["default", "b"], resume_from=watch.seen)
    _each_in_order(await resumed.pairs(4), missed)
    resumed.call.cancel()


async def test_a_cluster_that_refuses_the_watcher_ends_its_part_only(two: Two) -> None:
    watch = _watch(two, ALICE, clusters=["b", "default"])
    got, refusal = [], None
    while len(got) < 1 or refusal is None:
        event = await watch.next()
        if event.HasField("error"):
            refusal = event
        else:
            got.append((event.cluster, orjson.loads(event.object.json)["metadata"]["name"]))
    assert got == [("default", two.only["default"])]
    assert refusal.cluster == "b" and refusal.type == Event.TYPE_UNSPECIFIED
    assert not refusal.HasField("object")
    assert refusal.error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert _error_info(status_pb2.Status.FromString(refusal.error.SerializeToString())).reason == (
        "Forbidden"
    )
    name = unique("after")
    await two.create("default", name)
    assert await watch.pairs(1) == [("default", name)]
    watch.call.cancel()


async def test_a_removed_cluster_ends_its_part_and_the_others_go_on(two: Two) -> None:
    watch = _watch(two, clusters=["*"])
    await watch.pairs(2)
    two.fleet.remove("b")
    ended = await watch.next()
    assert ended.cluster == "b" and ended.HasField("error")
    assert ended.error.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert ended.error.message == 'cluster "b" was removed from this gateway'
    name = unique("after")
    await two.create("default", name)
    assert await watch.pairs(1) == [("default", name)]
    watch.call.cancel()


async def test_a_reconfigured_cluster_goes_on_and_a_new_one_joins_every_cluster_watch(
    two: Two,
) -> None:
    """A cluster replaced by a new configuration (its kubeconfig changed) goes on from its
    resume point on the new one, with nothing lost or repeated; a cluster added later
    joins a watch of every cluster (``*``), with its current state, and not one of named
    clusters."""
    every = _watch(two, clusters=["*"])
    named = _watch(two, clusters=["default", "b"])
    for watch in (every, named):
        await watch.pairs(2)
    async with contextlib.AsyncExitStack() as stack:
        replaced = await stack.enter_async_context(demo_cluster(two.demos["b"].url, name="b"))
        two.fleet.add("b", replaced)  # as the FleetBuilder does once the new one serves
        name = unique("after-reconfigured")
        await two.create("b", name)
        for watch in (every, named):
            assert await watch.pairs(1) == [("b", name)]  # no error, no replay
        demo = await stack.enter_async_context(DemoUpstream())
        joined = unique("in-c")
        await demo.store.create(LEASE, two.labelled(joined), namespace=NAMESPACE)
        two.fleet.add("c", await stack.enter_async_context(demo_cluster(demo.url, name="c")))
        assert await every.pairs(1) == [("c", joined)]
        fence = unique("fence")
        await two.create("default", fence)
        assert await named.pairs(1) == [("default", fence)]  # c never joined this one
        assert await every.pairs(1) == [("default", fence)]
        for watch in (every, named):
            watch.call.cancel()


async def test_one_clusters_upstream_cut_stays_exact_while_the_other_changes(two: Two) -> None:
    watch = _watch(two, clusters=["default", "b"])
    await watch.pairs(2)
    # Every upstream watch of b ends after each event from now on: its hub resumes it.
    two.demos["b"].faults.close_watches_after(1)
    expected = []
    for n in range(5):
        for cluster in ("b", "default"):
            name = unique(f"{cluster}-{n}")
            await two.create(cluster, name)
            expected.append((cluster, name))
    _each_in_order(await watch.pairs(len(expected)), expected)
    watch.call.cancel()


async def test_a_drain_ends_the_call_with_every_clusters_resume_point(two: Two) -> None:
    watch = _watch(two, clusters=["*"])
    await watch.pairs(2)
    live = [("b", unique("live")), ("default", unique("live"))]
    for cluster, name in live:
        await two.create(cluster, name)
    _each_in_order(await watch.pairs(2), live)
    for _, cluster in two.fleet:
        cluster.watches.drain()
    with pytest.raises(grpc.aio.AioRpcError) as drained:
        await watch.next()
    assert drained.value.code() == grpc.StatusCode.UNAVAILABLE
    status = rpc_status.from_call(drained.value)
    assert status is not None
    info = _error_info(status)
    assert info.reason == "ServiceUnavailable"
    assert orjson.loads(info.metadata["resumeFrom"]) == watch.seen
    assert info.metadata["resumeFrom"] == encode_resume(watch.seen)
    assert set(watch.seen) == {"default", "b"}


async def test_a_watch_of_every_cluster_takes_in_the_joining_clusters_the_caller_may_see() -> None:
    """Bob is known on clusters b and d only: his watch of every cluster (``*``) is b's
    alone (no UNAUTHENTICATED part for default), and of the clusters that join later, d
    joins it and c (which does not know him) does not."""
    known = {**DEFAULT_TOKENS, BOB: TokenGrant("bob", "*", cluster_scoped=True)}
    async with contextlib.AsyncExitStack() as stack:
        demos = {
            "default": await stack.enter_async_context(DemoUpstream()),
            "b": await stack.enter_async_context(DemoUpstream(tokens=known)),
        }
        two = await serve_two(stack, demos)
        watch = _watch(two, BOB, clusters=["*"])
        assert await watch.pairs(1) == [("b", two.only["b"])]
        joining = {
            "c": await stack.enter_async_context(DemoUpstream()),
            "d": await stack.enter_async_context(DemoUpstream(tokens=known)),
        }
        for name, demo in joining.items():
            await demo.store.create(LEASE, two.labelled(f"in-{name}"), namespace=NAMESPACE)
            two.fleet.add(name, await stack.enter_async_context(demo_cluster(demo.url, name=name)))
        assert await watch.pairs(1) == [("d", "in-d")]
        fence = unique("fence")
        await two.create("b", fence)
        assert await watch.pairs(1) == [("b", fence)]
        watch.call.cancel()
