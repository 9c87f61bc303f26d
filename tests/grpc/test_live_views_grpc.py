"""Live views over gRPC (``ResourceService.WatchView``) on the demo upstream, with real gRPC
clients: the first page equals ``View``'s answer, an update when what the caller is sent
changes and none when it does not, one evaluation per view and batch shared with GraphQL's
subscribers of the same view, notify mode with counts, a revoked right ending the call
``PERMISSION_DENIED``, the subscriber budget, a slow reader ended alone, a drain ending the
call resumable, and bad input refused clearly beside a served neighbour.

Synchronisation is on the gateway's own state (the live view's evaluated version, its
counters), never on sleeps: "no update" is proved by the next message being the next
visible change, after the gateway evaluated the invisible one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from gateway.core import POD
from gateway.grpc.gen.kubegateway.v1 import resource_pb2, resource_pb2_grpc
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.auth import TokenGrant
from tests.graphql import test_live_views as graphql_live
from tests.grpc.test_views_grpc import request
from tests.support.graphql import ADMIN, ALICE, NAMESPACE, Gateway, demo, serve_gateway, ws_client
from tests.support.grpc import details

__all__ = ["demo"]  # fixtures

_namespace, _pod, _live = graphql_live._namespace, graphql_live._pod, graphql_live._live
_until, _evaluated_past = graphql_live._until, graphql_live._evaluated_past
BY_NAME = graphql_live.BY_NAME
READ = 60.0  # seconds any one read may take (a bound, never a sleep)


def _auth(token: str = ADMIN) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _watch(
    view: resource_pb2.ViewResourcesRequest,
    *,
    interval_ms: int | None = None,
    notify: bool = False,
) -> resource_pb2.WatchViewRequest:
    req = resource_pb2.WatchViewRequest(notify=notify)
    req.view.CopyFrom(view)
    if interval_ms is not None:
        req.interval_ms = interval_ms
    return req


class Rpc:
    """A real gRPC client of the gateway's ``ResourceService``."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.stub = resource_pb2_grpc.ResourceServiceStub(channel)

    def watch(self, req: resource_pb2.WatchViewRequest, token: str = ADMIN) -> Any:
        return self.stub.WatchView(req, metadata=_auth(token), timeout=600)

    async def view(self, req: resource_pb2.ViewResourcesRequest) -> resource_pb2.ResourceView:
        answer: resource_pb2.ResourceView = await self.stub.View(req, metadata=_auth(), timeout=60)
        return answer


async def _read(call: Any) -> resource_pb2.ResourceView:
    async with asyncio.timeout(READ):
        update: resource_pb2.ResourceView = await call.read()
    assert update is not grpc.aio.EOF
    return update


async def _refusal(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async with asyncio.timeout(READ):
            while True:
                assert await call.read() is not grpc.aio.EOF
    return caught.value


def _names(view: resource_pb2.ResourceView) -> list[str]:
    return [orjson.loads(e.object.json)["metadata"]["name"] for e in view.edges]


@contextlib.asynccontextmanager
async def rpc_of(gateway: Gateway) -> AsyncIterator[Rpc]:
    port = gateway.app.state.runtime.grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield Rpc(channel)


@pytest.fixture
async def gw(demo: DemoUpstream) -> AsyncIterator[Gateway]:
    async with serve_gateway(demo, access_recheck_seconds=0.2) as gateway:
        yield gateway


@pytest.fixture
async def rpc(gw: Gateway) -> AsyncIterator[Rpc]:
    async with rpc_of(gw) as client:
        yield client


async def test_the_first_page_is_views_then_visible_changes_only(
    demo: DemoUpstream, gw: Gateway, rpc: Rpc
) -> None:
    ns = "grpc-live-visible"
    await _namespace(demo, ns)
    live = _live(gw)
    view = request(ns=ns, first=5, sort=BY_NAME, mask=["metadata.name", "metadata.labels"])
    call = rpc.watch(_watch(view))
    first = await _read(call)
    assert _names(first) == [f"live-{i:02d}" for i in range(5)]
    assert first.total == 10 and first.page_info.has_next_page
    # the first update is View's answer at the same version, message for message
    assert first == await rpc.view(view)

    # invisible: a field the read mask leaves out of an item of the page; an object
    # outside the page, the total unchanged
    await demo.store.patch(POD, "live-01", {"metadata": {"annotations": {"n": "1"}}}, namespace=ns)
    outside = await demo.store.patch(
        POD, "live-08", {"metadata": {"labels": {"app": "db"}}}, namespace=ns
    )
    await _until(_evaluated_past(live, ns, outside["metadata"]["resourceVersion"]))

    # visible: a label of an item of the page; the next message is this change
    await demo.store.patch(POD, "live-02", {"metadata": {"labels": {"color": "red"}}}, namespace=ns)
    update = await _read(call)
    item = orjson.loads(update.edges[2].object.json)
    assert item == {"metadata": {"name": "live-02", "labels": {"app": "web", "color": "red"}}}
    assert int(update.resource_version) > int(outside["metadata"]["resourceVersion"])

    # an item enters (and the last one leaves), the total changes
    await demo.store.create(POD, _pod("a-new", ns))
    update = await _read(call)
    assert _names(update) == ["a-new", "live-00", "live-01", "live-02", "live-03"]
    assert update.total == 11
    # only the total changes (an object outside the page goes)
    await demo.store.delete(POD, "live-09", namespace=ns)
    update = await _read(call)
    assert update.total == 10 and _names(update)[0] == "a-new"
    assert update == await rpc.view(view)  # each update is View's answer at its version
    call.cancel()


async def test_grpc_and_graphql_subscribers_of_one_view_share_one_evaluation(
    demo: DemoUpstream, gw: Gateway, rpc: Rpc
) -> None:
    ns = "grpc-live-shared"
    await _namespace(demo, ns)
    live = _live(gw)
    views = gw.app.state.runtime.cluster.views
    view = request(ns=ns, first=5, sort=BY_NAME)
    calls = [rpc.watch(_watch(view)) for _ in range(20)]
    firsts = await asyncio.gather(*(_read(c) for c in calls))
    assert {f.resource_version for f in firsts} == {firsts[0].resource_version}
    async with ws_client(gw) as ws:
        op = await ws.subscribe(graphql_live.LIVE, {"ns": ns, "first": 5, "sort": BY_NAME})
        page = (await ws.next(op))["data"]["podsView"]
        assert page["total"] == 10
        # one live view for 20 gRPC callers and a GraphQL subscriber
        assert len([v for v in live.live if v.spec.namespace == ns]) == 1
        evaluations, orders = live.stats.evaluations, views.stats.evaluations

        await demo.store.create(POD, _pod("a-new", ns))  # one batch
        updates = await asyncio.gather(*(_read(c) for c in calls))
        assert {u.total for u in updates} == {11}
        assert {_names(u)[0] for u in updates} == {"a-new"}
        assert (await ws.next(op))["data"]["podsView"]["total"] == 11
        assert live.stats.evaluations - evaluations == 1
        assert views.stats.evaluations - orders == 1
    for c in calls:
        c.cancel()


async def test_an_update_is_encoded_once_per_view_and_shape_for_every_subscriber(
    demo: DemoUpstream, gw: Gateway, rpc: Rpc
) -> None:
    """Several subscribers of one view over real sockets, GraphQL (four WebSocket
    connections) and gRPC (twelve calls of one read mask, three of another): each
    published update is encoded once per shape (the GraphQL document, each gRPC read
    mask), not once per subscriber, and every subscriber gets it."""
    ns = "grpc-live-encoded"
    await _namespace(demo, ns)
    live = _live(gw)
    view = request(ns=ns, first=5, sort=BY_NAME)
    masked = request(ns=ns, first=5, sort=BY_NAME)
    masked.read_mask.paths.append("metadata.name")
    calls = [rpc.watch(_watch(view)) for _ in range(12)]
    narrow = [rpc.watch(_watch(masked)) for _ in range(3)]
    await asyncio.gather(*(_read(c) for c in (*calls, *narrow)))
    variables = {"ns": ns, "first": 5, "sort": BY_NAME}
    async with contextlib.AsyncExitStack() as stack:
        sockets = [await stack.enter_async_context(ws_client(gw)) for _ in range(4)]
        ops = [await ws.subscribe(graphql_live.LIVE, variables) for ws in sockets]
        for ws, op in zip(sockets, ops, strict=True):
            assert (await ws.next(op))["data"]["podsView"]["total"] == 10
        assert len([v for v in live.live if v.spec.namespace == ns]) == 1
        for round_ in range(2):
            published, encodings = live.stats.published, live.stats.encodings
            await demo.store.create(POD, _pod(f"a-new-{round_}", ns))  # one batch
            updates = await asyncio.gather(*(_read(c) for c in (*calls, *narrow)))
            assert {u.total for u in updates} == {11 + round_}
            pairs = zip(sockets, ops, strict=True)
            pages = [(await ws.next(op))["data"]["podsView"] for ws, op in pairs]
            assert all(f"a-new-{round_}" in _names_of(p) for p in pages)
            assert live.stats.published - published == 1
            # one GraphQL rendering and two gRPC messages for 19 subscribers
            assert live.stats.encodings - encodings == 3
    for c in (*calls, *narrow):
        c.cancel()


def _names_of(view: dict[str, Any]) -> list[str]:
    return [n["metadata"]["name"] for n in view["nodes"]]


async def test_notify_mode_sends_no_objects_and_counts_follow_every_change(
    demo: DemoUpstream, gw: Gateway, rpc: Rpc
) -> None:
    ns = "grpc-live-notify"
    await _namespace(demo, ns)
    view = request(ns=ns, first=5, sort=BY_NAME, count_by=["metadata.labels.app"])
    call = rpc.watch(_watch(view, notify=True))
    first = await _read(call)
    assert list(first.edges) == [] and first.total == 10
    assert first.page_info.has_next_page and first.page_info.end_cursor
    (group,) = first.counts
    assert [(c.value, c.count) for c in group.counts] == [("web", 10)]
    # outside the page, the total unchanged: with counts asked, every change is an update
    changed = await demo.store.patch(
        POD, "live-08", {"metadata": {"labels": {"app": "db"}}}, namespace=ns
    )
    update = await _read(call)
    assert update.resource_version == changed["metadata"]["resourceVersion"]
    assert list(update.edges) == []
    (group,) = update.counts
    assert sorted((c.value, c.count) for c in group.counts) == [("db", 1), ("web", 9)]
    call.cancel()


@pytest.mark.parametrize("mode", ["default", "shared-watches"])
async def test_a_revoked_right_ends_the_call_with_permission_denied(
    demo: DemoUpstream, mode: str, tmp_path: Path
) -> None:
    await _namespace(demo, NAMESPACE, 6)
    more: dict[str, Any] = {}
    if mode == "shared-watches":
        token = tmp_path / "token"
        token.write_text(ADMIN)
        more = {"shared_watches": True, "token_file": str(token)}
    view = request(ns=NAMESPACE, first=3, sort=BY_NAME)
    async with (
        serve_gateway(demo, access_recheck_seconds=0.2, **more) as gw,
        rpc_of(gw) as rpc,
    ):
        # alice may not see every namespace: refused at once, with what to ask instead
        everywhere = await _refusal(rpc.watch(_watch(request(first=3)), ALICE))
        assert everywhere.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "one namespace you may list" in (everywhere.details() or "")
        mine = rpc.watch(_watch(view), ALICE)
        theirs = rpc.watch(_watch(view))
        assert len((await _read(mine)).edges) == 3
        await _read(theirs)
        demo.app.tokens[ALICE] = TokenGrant("alice", frozenset({"elsewhere"}))
        started = time.monotonic()
        ended = await _refusal(mine)  # rechecked every 0.2 s
        assert time.monotonic() - started < 15
        assert ended.code() == grpc.StatusCode.PERMISSION_DENIED, ended
        assert details(ended)["ErrorInfo"].reason == "Forbidden"
        assert ALICE not in str(details(ended)) and "Traceback" not in str(ended.details())
        # the admin's live view of the same namespace goes on
        await demo.store.create(POD, _pod("a-new", NAMESPACE))
        assert "a-new" in _names(await _read(theirs))
        theirs.cancel()


async def test_each_call_holds_a_lease_of_the_subscriber_budget(demo: DemoUpstream) -> None:
    ns = "grpc-live-budget"
    await _namespace(demo, ns, 3)
    # the view's cache holds one hub subscription, each live subscriber one lease
    async with (
        serve_gateway(demo, max_subscriptions_per_identity=3) as gw,
        rpc_of(gw) as rpc,
    ):
        held = []
        for order in (resource_pb2.VIEW_ORDER_ASC, resource_pb2.VIEW_ORDER_DESC):
            view = request(ns=ns)
            view.sort.add(field="metadata.name", order=order)
            held.append(rpc.watch(_watch(view)))
            assert (await _read(held[-1])).total == 3
        refused = await _refusal(rpc.watch(_watch(request(ns=ns))))
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        assert "subscriptions" in (refused.details() or "")
        live = _live(gw)
        held[0].cancel()  # a lease given back serves the next caller
        await _until(lambda: live.stats.subscribers == 1)
        again = rpc.watch(_watch(request(ns=ns)))
        assert (await _read(again)).total == 3
        for c in (*held, again):
            c.cancel()


async def test_a_slow_reader_is_ended_alone(demo: DemoUpstream, gw: Gateway, rpc: Rpc) -> None:
    ns = "grpc-live-slow"
    await demo.store.ensure_namespace(ns)
    # large pages (2 MB): a caller that stops reading fills the stream's flow-control
    # window in a few updates (about 10 here), after which the gateway cannot hand it more
    for i in range(20):
        pod = _pod(f"live-{i:02d}", ns)
        # random text: the gateway's gzip cannot shrink it away
        pod["metadata"]["annotations"] = {"big": base64.b64encode(os.urandom(75_000)).decode()}
        await demo.store.create(POD, pod)
    live = _live(gw)
    live.max_unread = 3
    view = request(ns=ns, first=20, sort=BY_NAME)
    reader = rpc.watch(_watch(view, interval_ms=50))
    slow = rpc.watch(_watch(view, interval_ms=50))
    await _read(reader)
    await _read(slow)  # then never again, until it was ended
    waits = []
    for i in range(200):
        await demo.store.patch(
            POD, "live-00", {"metadata": {"labels": {"i": str(i)}}}, namespace=ns
        )
        started = time.monotonic()
        seen = await _read(reader)  # the reader keeps up
        waits.append(time.monotonic() - started)
        assert orjson.loads(seen.edges[0].object.json)["metadata"]["labels"]["i"] == str(i)
        if live.stats.slow:
            break
    assert live.stats.slow == 1, "the caller that stopped reading was never ended"
    # each update reached the reader in well under its bound, the slow one beside it
    assert max(waits) < 10, waits
    # what was in flight, then the end: RESOURCE_EXHAUSTED, resumable
    ended = await _refusal(slow)
    assert ended.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "unread" in (ended.details() or "")
    # the reader is still served
    await demo.store.patch(POD, "live-01", {"metadata": {"labels": {"after": "1"}}}, namespace=ns)
    seen = await _read(reader)
    assert orjson.loads(seen.edges[1].object.json)["metadata"]["labels"]["after"] == "1"
    reader.cancel()


async def test_a_drain_ends_the_call_unavailable_with_the_last_pages_version(
    demo: DemoUpstream, gw: Gateway, rpc: Rpc
) -> None:
    ns = "grpc-live-drain"
    await _namespace(demo, ns, 3)
    call = rpc.watch(_watch(request(ns=ns, sort=BY_NAME)))
    first = await _read(call)
    assert first.total == 3
    gw.app.state.runtime.cluster.watches.drain()
    ended = await _refusal(call)
    assert ended.code() == grpc.StatusCode.UNAVAILABLE, ended
    info = details(ended)["ErrorInfo"]
    assert info.reason == "ServiceUnavailable"
    assert info.metadata["resourceVersion"] == first.resource_version
    # new live views are refused while draining, clearly
    refused = await _refusal(rpc.watch(_watch(request(ns=ns))))
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in (refused.details() or "")


@pytest.mark.parametrize(
    "case",
    [
        ({"interval_ms": 10}, "", "interval must be between 50 and 10000 ms"),
        ({"interval_ms": 10**9}, "", "interval must be between 50 and 10000 ms"),
        ({"first": 100_000}, "", "`first` is a page size from 0 to 500"),
        ({"sort": "metadata.nmae"}, "", "did you mean 'metadata.name'?"),
        ({"clusters": [""]}, "clusters", "a cluster name is empty"),
        ({"count_by": ["status.phase"] * 9}, "", "`count_by` has more than 8 fields"),
    ],
)
async def test_bad_input_is_refused_clearly_beside_a_served_neighbour(
    demo: DemoUpstream, gw: Gateway, rpc: Rpc, case: tuple[dict[str, Any], str, str]
) -> None:
    change, field, says = case
    ns = "grpc-live-bad"
    await _namespace(demo, ns, 3)
    neighbour = rpc.watch(_watch(request(ns=ns, sort=BY_NAME)))
    await _read(neighbour)
    view = request(ns=ns, first=change.get("first"), count_by=change.get("count_by", []))
    if "sort" in change:
        view.sort.add(field=change["sort"])
    view.clusters.extend(change.get("clusters", ()))
    started = time.monotonic()
    refused = await _refusal(rpc.watch(_watch(view, interval_ms=change.get("interval_ms"))))
    assert time.monotonic() - started < 5
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT, refused
    assert says in (refused.details() or "")
    assert "Traceback" not in str(refused.details())
    if field:
        (violation,) = details(refused)["BadRequest"].field_violations
        assert violation.field == field
    # counted in the metrics as a live view (as GraphQL counts them), never as a list
    registry = gw.app.state.runtime.cluster.adapter.metrics.registry
    counted = {
        sample.labels.get("operation")
        for family in registry.collect()
        if family.name == "kube_gateway_operations"
        for sample in family.samples
        if sample.name.endswith("_total")
        and sample.labels.get("transport") == "grpc"
        and sample.labels.get("resource") == "pods"
    }
    # (a request naming clusters is refused before its resource is read)
    assert ("LiveView" in counted) is not bool(field) and "List" not in counted, counted
    # the neighbour is served on
    await demo.store.create(POD, _pod("a-new", ns))
    assert _names(await _read(neighbour))[0] == "a-new"
    neighbour.cancel()
