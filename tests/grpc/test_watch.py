"""Watch over gRPC: initial state, resume, bookmarks, upstream closes and 410s without loss,
read masks, timeouts, deadlines and cancellation (observed at the demo upstream)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from gateway.core.model.registry import LEASE
from gateway.grpc.gen.kubegateway.v1 import common_pb2, leases_pb2, leases_pb2_grpc
from kube_gateway_demo import DemoUpstream
from tests.scenarios.backend import sample
from tests.support.grpc import ADMIN, NAMESPACE, GrpcGateway, bearer, gw, unique, upstream

__all__ = ["gw", "upstream"]  # fixtures

AUTH = bearer(ADMIN)
Event = common_pb2.WatchEvent
STEP = 10.0  # seconds any single expected event may take (bounded waits, never sleeps)


class Stream:
    """A Watch call read event by event, each read bounded."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self._events: AsyncIterator[Any] = call.__aiter__()

    async def next(self) -> Any:
        async with asyncio.timeout(STEP):
            return await anext(self._events)

    async def take(self, count: int) -> list[tuple[str, str]]:
        """The next ``count`` events as (type name, lease name)."""
        return [_brief(await self.next()) for _ in range(count)]


def _brief(event: Any) -> tuple[str, str]:
    return (Event.Type.Name(event.type), event.lease.metadata.name)


def _lease(name: str, label: str, holder: str = "node-a") -> dict[str, Any]:
    body = sample("leases", name, NAMESPACE)
    body["metadata"]["labels"] = {"w": label}
    body["spec"]["holderIdentity"] = holder
    return body


def _watch(gw: GrpcGateway, label: str, **fields: Any) -> Stream:
    return Stream(
        gw.stub("leases").Watch(
            leases_pb2.WatchLeasesRequest(
                namespace=NAMESPACE, label_selector=f"w={label}", **fields
            ),
            metadata=AUTH,
        )
    )


async def _renew(upstream: DemoUpstream, name: str, holder: str) -> dict[str, Any]:
    return await upstream.store.patch(
        LEASE, name, {"spec": {"holderIdentity": holder}}, namespace=NAMESPACE
    )


async def test_initial_state_then_changes_with_resume_points(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    label = unique("w")
    a, b = unique("a"), unique("b")
    await upstream.store.create(LEASE, _lease(a, label))
    await upstream.store.create(LEASE, _lease(b, label))
    stream = _watch(gw, label)
    assert sorted(await stream.take(2)) == [("ADDED", a), ("ADDED", b)]
    c = unique("c")
    created = await upstream.store.create(LEASE, _lease(c, label))
    event = await stream.next()
    assert _brief(event) == ("ADDED", c)
    assert event.resource_version == created["metadata"]["resourceVersion"]
    assert event.lease.spec.holderIdentity == "node-a" and event.lease.kind == "Lease"
    renewed = await _renew(upstream, a, "node-b")
    event = await stream.next()
    assert _brief(event) == ("MODIFIED", a) and event.lease.spec.holderIdentity == "node-b"
    assert event.resource_version == renewed["metadata"]["resourceVersion"]
    await upstream.store.delete(LEASE, b, namespace=NAMESPACE)
    assert await stream.take(1) == [("DELETED", b)]
    stream.call.cancel()


async def test_resume_from_a_resource_version_gets_exactly_the_later_changes(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    label = unique("w")
    names = [unique("r") for _ in range(3)]
    for n in names:
        await upstream.store.create(LEASE, _lease(n, label))
    listed = await gw.stub("leases").List(
        leases_pb2.ListLeasesRequest(namespace=NAMESPACE, label_selector=f"w={label}"),
        metadata=AUTH,
    )
    for n in names:
        await _renew(upstream, n, "later")
    stream = _watch(gw, label, resource_version=listed.metadata.resourceVersion)
    assert await stream.take(3) == [("MODIFIED", n) for n in names]
    stream.call.cancel()


async def test_send_initial_events_ends_with_the_marker_and_bookmarks_flow(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    label = unique("w")
    names = sorted(unique("i") for _ in range(2))
    for n in names:
        await upstream.store.create(LEASE, _lease(n, label))
    stream = _watch(
        gw,
        label,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
    )
    assert sorted(await stream.take(2)) == [("ADDED", n) for n in names]
    marker = await stream.next()
    assert marker.type == Event.BOOKMARK
    assert marker.lease.metadata.annotations["k8s.io/initial-events-end"] == "true"
    assert marker.resource_version
    later = unique("l")
    await upstream.store.create(LEASE, _lease(later, label))
    assert await stream.take(1) == [("ADDED", later)]
    stream.call.cancel()


async def test_a_watch_survives_upstream_closes_without_loss_or_duplicates(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    label = unique("w")
    name = unique("busy")
    await upstream.store.create(LEASE, _lease(name, label))
    upstream.faults.close_watches_after(2)  # every upstream stream ends after two lines
    stream = _watch(gw, label)
    assert await stream.take(1) == [("ADDED", name)]
    holders = [f"holder-{i}" for i in range(12)]
    for holder in holders:
        await _renew(upstream, name, holder)
    seen = [await stream.next() for _ in holders]
    assert [e.lease.spec.holderIdentity for e in seen] == holders
    assert [Event.Type.Name(e.type) for e in seen] == ["MODIFIED"] * len(holders)
    rvs = [int(e.resource_version) for e in seen]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)
    assert upstream.faults.watch_requests >= 6  # it really was reconnecting
    stream.call.cancel()


async def test_a_watch_survives_a_connection_cut_mid_line(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    label = unique("w")
    name = unique("cut")
    await upstream.store.create(LEASE, _lease(name, label))
    # every upstream stream delivers one event, then half of the next, then drops
    upstream.faults.close_watches_after(2, cut_last_line=True, abrupt=True)
    stream = _watch(gw, label)
    assert await stream.take(1) == [("ADDED", name)]
    await _renew(upstream, name, "first")
    await _renew(upstream, name, "second")
    got = [await stream.next(), await stream.next()]
    assert [e.lease.spec.holderIdentity for e in got] == ["first", "second"]
    stream.call.cancel()


async def test_a_forced_410_resyncs_without_losing_deletes(
    gw: GrpcGateway, upstream: DemoUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream_watches = _UpstreamWatches(upstream, monkeypatch)
    label = unique("w")
    keep, drop = unique("keep"), unique("drop")
    await upstream.store.create(LEASE, _lease(keep, label))
    await upstream.store.create(LEASE, _lease(drop, label))
    upstream.faults.close_watches_after(1)
    stream = _watch(gw, label)
    assert sorted(await stream.take(2)) == sorted([("ADDED", keep), ("ADDED", drop)])
    await upstream_watches.started()  # the gateway's upstream watch is open
    upstream.faults.expire_watches(1)  # the resume after the next close gets 410
    added = unique("new")
    # Three commits before the upstream stream runs again: it sends the first and closes;
    # the other two happen "in the gap" that only a relist can see.
    await _renew(upstream, keep, "renewed")
    await upstream.store.delete(LEASE, drop, namespace=NAMESPACE)
    await upstream.store.create(LEASE, _lease(added, label))
    assert await stream.take(1) == [("MODIFIED", keep)]
    begin = await stream.next()
    assert begin.type == Event.RESYNC
    assert begin.lease.metadata.annotations["kube-gateway.io/resync"] == "begin"
    assert sorted(await stream.take(2)) == sorted([("DELETED", drop), ("ADDED", added)])
    end = await stream.next()
    assert end.type == Event.RESYNC
    assert end.lease.metadata.annotations["kube-gateway.io/resync"] == "end"
    assert end.resource_version
    # and it goes on from there
    await _renew(upstream, added, "after")
    assert await stream.take(1) == [("MODIFIED", added)]
    stream.call.cancel()


async def test_a_watch_read_mask_cuts_objects_but_not_markers(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    label = unique("w")
    name = unique("m")
    await upstream.store.create(LEASE, _lease(name, label))
    stream = _watch(
        gw,
        label,
        read_mask=field_mask_pb2.FieldMask(paths=["metadata.name", "spec.holderIdentity"]),
    )
    event = await stream.next()
    assert event.lease.metadata.name == name and event.lease.spec.holderIdentity == "node-a"
    assert not event.lease.metadata.uid and not event.lease.HasField("kind")
    assert not event.lease.spec.HasField("leaseDurationSeconds")
    assert event.resource_version  # the envelope keeps the resume point
    stream.call.cancel()


async def test_timeout_seconds_ends_the_stream_cleanly(gw: GrpcGateway) -> None:
    stream = _watch(gw, unique("quiet"), timeout_seconds=1)
    async with asyncio.timeout(STEP):
        assert [e async for e in stream.call] == []
    assert await stream.call.code() == grpc.StatusCode.OK


async def test_watch_options_are_validated(gw: GrpcGateway) -> None:
    stream = _watch(gw, unique("v"), resource_version_match="NotOlderThan")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stream.next()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


class _UpstreamWatches:
    """Observe, at the demo, lease watches starting and ending (its storage registers them)."""

    def __init__(self, upstream: DemoUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
        self.storage = upstream.store.storage
        self.added = asyncio.Event()
        self.removed = asyncio.Event()
        add, remove = self.storage.add_watcher, self.storage.remove_watcher

        def add_watcher(res: Any, watcher: Any) -> None:
            add(res, watcher)
            if res.key == LEASE.key:
                self.added.set()

        def remove_watcher(res: Any, watcher: Any) -> None:
            remove(res, watcher)
            if res.key == LEASE.key:
                self.removed.set()

        monkeypatch.setattr(self.storage, "add_watcher", add_watcher)
        monkeypatch.setattr(self.storage, "remove_watcher", remove_watcher)

    def open(self) -> int:
        return len(self.storage.collection(LEASE).watchers)

    async def started(self) -> None:
        async with asyncio.timeout(STEP):
            await self.added.wait()
        self.added.clear()

    async def ended(self) -> None:
        async with asyncio.timeout(STEP):
            await self.removed.wait()
        self.removed.clear()


async def test_a_cancelled_watch_leaves_and_its_upstream_stream_closes_after_the_linger(
    gw: GrpcGateway, upstream: DemoUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw.hub.linger = 0.0  # no returning subscriber to wait for
    upstream_watches = _UpstreamWatches(upstream, monkeypatch)
    label = unique("w")
    name = unique("x")
    await upstream.store.create(LEASE, _lease(name, label))
    stream = _watch(gw, label)
    assert await stream.take(1) == [("ADDED", name)]
    await _renew(upstream, name, "live")  # the upstream watch is established and delivering
    assert await stream.take(1) == [("MODIFIED", name)]
    assert upstream_watches.open() == 1
    assert gw.hub.stats.subscribers == 1
    stream.call.cancel()
    await upstream_watches.ended()
    assert upstream_watches.open() == 0
    assert gw.hub.stats.subscribers == 0 and gw.hub.stats.upstream_watches == 0


async def test_a_watch_deadline_ends_it_and_its_upstream_stream(
    gw: GrpcGateway, upstream: DemoUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw.hub.linger = 0.0
    upstream_watches = _UpstreamWatches(upstream, monkeypatch)
    label = unique("w")
    await upstream.store.create(LEASE, _lease(unique("d"), label))
    call = gw.stub("leases").Watch(
        leases_pb2.WatchLeasesRequest(namespace=NAMESPACE, label_selector=f"w={label}"),
        metadata=AUTH,
        timeout=1.0,
    )
    received = []
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        async with asyncio.timeout(STEP):
            async for event in call:
                received.append(event)
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert len(received) == 1
    await upstream_watches.ended()
    assert upstream_watches.open() == 0


async def test_a_watch_the_caller_may_not_make_is_permission_denied(gw: GrpcGateway) -> None:
    call = gw.stub("leases").Watch(
        leases_pb2.WatchLeasesRequest(namespace="kube-system"), metadata=bearer("alice-token")
    )
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        async with asyncio.timeout(STEP):
            await anext(call.__aiter__())
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_client_that_stops_reading_is_ended_resumably_and_resumes_without_loss(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    gw.hub.max_queue = 8
    label = unique("slow")
    first = unique("s")
    await upstream.store.create(LEASE, _lease(first, label))
    # A client whose flow-control window is tiny: the server can send little until it reads.
    async with grpc.aio.insecure_channel(
        gw.target, options=[("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)]
    ) as channel:
        stub = leases_pb2_grpc.LeaseServiceStub(channel)
        call = stub.Watch(
            leases_pb2.WatchLeasesRequest(namespace=NAMESPACE, label_selector=f"w={label}"),
            metadata=AUTH,
        )
        stream = Stream(call)
        assert await stream.take(1) == [("ADDED", first)]
        # it stops reading while 200 changes (about 200 KB) happen
        written = []
        for i in range(200):
            renewed = await _renew(upstream, first, "x" * 1000 + str(i))
            written.append(renewed["metadata"]["resourceVersion"])
        # the hub ended it (not the others); what was in flight still arrives, then the end
        got: list[str] = []
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            while True:
                got.append((await stream.next()).resource_version)
        assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert got == written[: len(got)] and len(got) < len(written)
        details = rpc_status.from_call(ended.value)
        assert details is not None
        info = error_details_pb2.ErrorInfo()
        assert details.details[0].Unpack(info)
        resume = info.metadata["resourceVersion"]
        # the version after the last event it received (after the initial state: the list's)
        assert resume == got[-1] if got else resume
    # resuming from there gives exactly the rest
    rest = _watch(gw, label, resource_version=resume)
    missed = [(await rest.next()).resource_version for _ in range(len(written) - len(got))]
    assert missed == written[len(got) :]
    rest.call.cancel()


async def test_changed_fields_only_sends_modified_only_when_the_masked_object_changed(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    """Watch rule 31: with a read mask, an annotation change is not sent; every holder
    change is, in order; without the flag every MODIFIED is.  Proved without waiting: the
    holder change after the annotation is the very next event."""
    label = unique("w")
    name = unique("c")
    await upstream.store.create(LEASE, _lease(name, label))
    listed = await gw.stub("leases").List(
        leases_pb2.ListLeasesRequest(namespace=NAMESPACE, label_selector=f"w={label}"),
        metadata=AUTH,
    )
    mask = field_mask_pb2.FieldMask(paths=["metadata.name", "spec.holderIdentity"])
    changed = _watch(gw, label, read_mask=mask, changed_fields_only=True)
    every = _watch(gw, label, read_mask=mask)
    assert await changed.take(1) == [("ADDED", name)]
    assert await every.take(1) == [("ADDED", name)]
    await _renew(upstream, name, "node-0")
    for stream in (changed, every):
        event = await stream.next()
        assert (_brief(event), event.lease.spec.holderIdentity) == (("MODIFIED", name), "node-0")

    async def annotate(value: str) -> None:
        patch = {"metadata": {"annotations": {"note": value}}}
        await upstream.store.patch(LEASE, name, patch, namespace=NAMESPACE)

    await annotate("one")
    await _renew(upstream, name, "node-1")
    await _renew(upstream, name, "node-2")
    await annotate("two")
    await _renew(upstream, name, "node-3")
    holders = [(await changed.next()).lease.spec.holderIdentity for _ in range(3)]
    assert holders == ["node-1", "node-2", "node-3"]
    assert [t for t, _ in await every.take(5)] == ["MODIFIED"] * 5
    # Resuming from before all that replays only the holder changes.
    resumed = _watch(
        gw,
        label,
        read_mask=mask,
        changed_fields_only=True,
        resource_version=listed.metadata.resourceVersion,
    )
    holders = [(await resumed.next()).lease.spec.holderIdentity for _ in range(4)]
    assert holders == ["node-0", "node-1", "node-2", "node-3"]
    await upstream.store.delete(LEASE, name, namespace=NAMESPACE)
    for stream in (changed, every, resumed):
        assert await stream.take(1) == [("DELETED", name)]
        stream.call.cancel()
