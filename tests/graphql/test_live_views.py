"""Live views over GraphQL on the demo upstream (issue 29, goal 2), with real WebSocket
clients: the page at once, an update when what it shows changes and none when it does not,
coalescing, one evaluation per view and batch whatever the number of subscribers, notify
mode, a revoked right ending the live view with FORBIDDEN, budgets, a slow reader ended
alone, and bad input refused.

Synchronisation is on the gateway's own state (the live view's evaluated version, its
counters), never on sleeps: "no update" is proved by the next message being the next
visible change, after the gateway evaluated the invisible one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import signal
import statistics
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from gateway.core import POD, LiveViews, credential_of_token, errors
from gateway.core.views.live import SLACK
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.auth import TokenGrant
from tests.support.graphql import (
    ADMIN,
    ALICE,
    NAMESPACE,
    Gateway,
    TransportWS,
    data,
    gql,
    serve_gateway,
    ws_client,
)
from tests.support.serve_process import serve_process_async

LIVE = """subscription($ns: String, $first: Int, $interval: Int, $notify: Boolean,
                      $sort: [ViewSort!]) {
  podsView(namespace: $ns, sort: $sort, first: $first, interval: $interval,
           notify: $notify) {
    total resourceVersion
    pageInfo { hasNextPage endCursor }
    nodes { metadata { name labels } }
  }
}"""

#: The same view, its resourceVersion under an alias and the page through a fragment.
ALIASED = """subscription($ns: String, $first: Int, $sort: [ViewSort!]) {
  podsView(namespace: $ns, sort: $sort, first: $first) { ...page version: resourceVersion }
}
fragment page on PodView {
  total
  pageInfo { hasNextPage endCursor }
  nodes { metadata { name labels } }
}"""

QUERY = """query($ns: String, $first: Int, $sort: [ViewSort!]) {
  podsView(namespace: $ns, sort: $sort, first: $first) {
    total resourceVersion
    pageInfo { hasNextPage endCursor }
    nodes { metadata { name labels } }
  }
}"""

BY_NAME = [{"field": "metadata.name"}]
BY_NAME_DESC = [{"field": "metadata.name", "order": "DESC"}]


def _pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }


async def _namespace(demo: DemoUpstream, ns: str, count: int = 10) -> None:
    await demo.store.ensure_namespace(ns)
    await demo.store.bulk_create(POD, (_pod(f"live-{i:02d}", ns) for i in range(count)))


def _live(gw: Gateway) -> LiveViews:
    return LiveViews.of(gw.app.state.runtime.cluster.views)


async def _until(condition: Callable[[], bool], timeout: float = 30) -> None:
    """Wait for the gateway's state to satisfy ``condition`` (polled; bounded)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def _evaluated_past(live: LiveViews, ns: str, version: str) -> Callable[[], bool]:
    """Every live view of ``ns`` has evaluated the cache at ``version`` or later."""

    def done() -> bool:
        views = [v for v in live.live if v.spec.namespace == ns]
        return bool(views) and all(int(v.version or 0) >= int(version) for v in views)

    return done


def _names(view: dict[str, Any]) -> list[str]:
    return [n["metadata"]["name"] for n in view["nodes"]]


@pytest.fixture
async def gw(demo: DemoUpstream) -> AsyncIterator[Gateway]:
    async with serve_gateway(demo, access_recheck_seconds=0.2) as gateway:
        yield gateway


async def test_the_page_at_once_then_visible_changes_only(demo: DemoUpstream, gw: Gateway) -> None:
    ns = "live-visible"
    await _namespace(demo, ns)
    live = _live(gw)
    variables = {"ns": ns, "first": 5, "sort": BY_NAME}
    async with (
        ws_client(gw) as ws,
        ws_client(gw) as aliased,
        httpx.AsyncClient(base_url=gw.url, timeout=30) as http,
    ):
        op = await ws.subscribe(LIVE, variables)
        other = await aliased.subscribe(ALIASED, variables)
        first = (await ws.next(op))["data"]["podsView"]
        assert (await aliased.next(other))["data"]["podsView"]["total"] == 10
        assert _names(first) == [f"live-{i:02d}" for i in range(5)]
        assert first["total"] == 10 and first["pageInfo"]["hasNextPage"]
        # the first update is the view query's answer at the same version
        query = data(await gql(http, QUERY, variables))["podsView"]
        assert query == first

        # invisible: an unselected field of an item of the page; an object outside the
        # page, the total unchanged
        published = live.stats.published
        await demo.store.patch(
            POD, "live-01", {"metadata": {"annotations": {"n": "1"}}}, namespace=ns
        )
        outside = await demo.store.patch(
            POD, "live-08", {"metadata": {"labels": {"app": "db"}}}, namespace=ns
        )
        await _until(_evaluated_past(live, ns, outside["metadata"]["resourceVersion"]))
        # the page's object changed (the core publishes), its rendering did not (not sent)
        assert live.stats.published - published <= 1

        # visible: a selected field of an item of the page
        await demo.store.patch(
            POD, "live-02", {"metadata": {"labels": {"color": "red"}}}, namespace=ns
        )
        update = (await ws.next(op))["data"]["podsView"]
        assert update["nodes"][2]["metadata"]["labels"] == {"app": "web", "color": "red"}
        # the aliased document saw the same: nothing, then this change
        seen = (await aliased.next(other))["data"]["podsView"]
        assert seen["nodes"] == update["nodes"]
        assert seen["version"] == update["resourceVersion"]
        assert int(update["resourceVersion"]) > int(outside["metadata"]["resourceVersion"])

        # an item enters (and the last one leaves), the total changes
        await demo.store.create(POD, _pod("a-new", ns))
        update = (await ws.next(op))["data"]["podsView"]
        assert _names(update) == ["a-new", "live-00", "live-01", "live-02", "live-03"]
        assert update["total"] == 11

        # only the total changes (an object outside the page goes)
        await demo.store.delete(POD, "live-09", namespace=ns)
        update = (await ws.next(op))["data"]["podsView"]
        assert update["total"] == 10
        assert _names(update) == ["a-new", "live-00", "live-01", "live-02", "live-03"]
        # each update equals the view query at its version
        query = data(await gql(http, QUERY, variables))["podsView"]
        assert query == update


async def test_changes_within_the_interval_are_coalesced(demo: DemoUpstream, gw: Gateway) -> None:
    ns = "live-coalesce"
    await _namespace(demo, ns)
    live = _live(gw)
    interval = 1.5
    async with ws_client(gw) as ws:
        op = await ws.subscribe(
            LIVE, {"ns": ns, "first": 5, "sort": BY_NAME, "interval": int(interval * 1000)}
        )
        await ws.next(op)
        evaluations = live.stats.evaluations
        started = time.monotonic()
        for round_ in range(4):
            for i in range(5):
                await demo.store.patch(
                    POD,
                    f"live-{i:02d}",
                    {"metadata": {"labels": {"round": str(round_)}}},
                    namespace=ns,
                )
        elapsed = time.monotonic() - started
        updates = 0
        while True:
            view = (await ws.next(op))["data"]["podsView"]
            updates += 1
            if all(n["metadata"]["labels"].get("round") == "3" for n in view["nodes"]):
                break
        # 20 changes: at most one update per interval (the first change may be sent at
        # once, the rest wait for the interval's end)
        bound = 1 + int(elapsed / interval) + 1
        assert updates <= bound, (updates, elapsed)
        assert live.stats.evaluations - evaluations <= bound
        assert updates < 20


async def _churn(demo: DemoUpstream, ns: str) -> None:
    """Change a pod of ``ns`` about 100 times a second (the bench's churn; the pause paces
    the writer, which otherwise never yields the loop), until cancelled."""
    i = 0
    while True:
        i += 1
        await demo.store.patch(
            POD, "live-09", {"metadata": {"labels": {"churn": str(i)}}}, namespace=ns
        )
        await asyncio.sleep(0.01)


async def _read_all(ws: TransportWS) -> None:
    """Read (and drop) a client's messages until cancelled."""
    while True:
        await ws.ws.recv()


async def test_busy_live_views_of_one_cache_evaluate_at_spread_times(
    demo: DemoUpstream, gw: Gateway
) -> None:
    """Views of one cache that every batch of changes moves (issue 29's bench: each stamp
    changes every view) evaluate on grids of their own, spread over the interval, so their
    rounds of sends do not pile up in one loop turn; each still at most once per interval.
    Times are the loop's clock, as each live view records its evaluations."""
    ns = "live-spread"
    await _namespace(demo, ns)
    live = _live(gw)
    async with ws_client(gw) as ws:
        ops = {}
        for first in range(1, 5):  # 4 distinct views (the page size differs)
            ops[first] = await ws.subscribe(LIVE, {"ns": ns, "first": first, "sort": BY_NAME})
            await ws.next(ops[first])
        views = [v for v in live.live if v.spec.namespace == ns]
        assert sorted(v.place for v in views) == [0, 1, 2, 3]
        interval = views[0].interval
        assert interval == 0.25  # the default
        phases = sorted(v.phase for v in views)
        assert all(b - a > interval / 10 for a, b in itertools.pairwise(phases)), phases
        seen = {id(v): len(v.evaluated) for v in views}
        reader = asyncio.create_task(_read_all(ws))
        writer = asyncio.create_task(_churn(demo, ns))
        try:
            # a few intervals to get onto their grids (they all started on the same
            # change), then 8 evaluations each
            await _until(lambda: all(len(v.evaluated) - seen[id(v)] >= 14 for v in views), 90)
        finally:
            writer.cancel()
            reader.cancel()
            await asyncio.gather(writer, reader, return_exceptions=True)
        busy = {id(v): list(v.evaluated)[seen[id(v)] :] for v in views}
        for times in busy.values():  # at most once per interval, by the loop's clock
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert min(gaps) >= interval * (1 - SLACK) - 1e-3, gaps
        # on their grids, each view's evaluations are apart from every other view's (in
        # one loop turn, as all of them evaluated before, they are within a millisecond
        # or two)
        apart = [
            min(abs(t - u) for other in views if other is not v for u in busy[id(other)])
            for v in views
            for t in busy[id(v)][6:]
        ]
        assert statistics.median(apart) >= 0.01, sorted(apart)

        # a view that ends gives its place (its phase) to the next one that starts
        (second,) = [v for v in views if v.spec.first == 2]
        await ws.send({"id": ops[2], "type": "complete"})
        await _until(lambda: second.ended)
        await ws.subscribe(LIVE, {"ns": ns, "first": 5, "sort": BY_NAME})
        await _until(lambda: any(v.spec.first == 5 for v in live.live))
        (fifth,) = [v for v in live.live if v.spec.first == 5]
        assert fifth.place == second.place and fifth.phase == second.phase


async def test_a_change_after_a_quiet_interval_is_evaluated_at_once(
    demo: DemoUpstream, gw: Gateway
) -> None:
    """A busy live view waits for its grid; a change after a quiet interval does not (the
    leading edge): it is evaluated as soon as the cache has it, though the view's next
    grid point is most of an interval away."""
    ns = "live-sparse"
    await _namespace(demo, ns)
    live = _live(gw)
    loop = asyncio.get_running_loop()
    async with ws_client(gw) as ws:
        op = await ws.subscribe(LIVE, {"ns": ns, "first": 5, "sort": BY_NAME, "interval": 2000})
        await ws.next(op)
        (view,) = [v for v in live.live if v.spec.namespace == ns]
        interval = view.interval
        far = 0  # changes that reached the cache most of an interval before the grid
        for attempt in range(4):
            # quiet for an interval, and just past a point of the view's grid
            await _until(
                lambda: (
                    loop.time() >= view.evaluated[-1] + interval
                    and (loop.time() - view.phase) % interval < interval / 4
                ),
                60,
            )
            moved = view.cache._moved
            changed = await demo.store.patch(
                POD, "live-02", {"metadata": {"labels": {"try": str(attempt)}}}, namespace=ns
            )
            await moved.wait()
            arrived = loop.time()
            await _until(_evaluated_past(live, ns, changed["metadata"]["resourceVersion"]))
            assert view.evaluated[-1] - arrived < interval / 8  # at once
            update = (await ws.next(op))["data"]["podsView"]
            assert update["nodes"][2]["metadata"]["labels"]["try"] == str(attempt)
            # what waiting for the grid would have taken (unless the change took most of
            # an interval to reach the gateway: then once more)
            grid = view.phase + math.ceil((arrived - view.phase) / interval) * interval
            far += grid - arrived > interval / 2
            if far >= 2:
                break
        assert far >= 2


async def test_subscribers_of_the_same_view_share_one_evaluation(
    demo: DemoUpstream, gw: Gateway
) -> None:
    ns = "live-shared"
    await _namespace(demo, ns)
    live = _live(gw)
    views = gw.app.state.runtime.cluster.views
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(ws_client(gw)) for _ in range(4)]
        subs: list[tuple[TransportWS, str]] = []
        for c in clients:
            for j in range(25):  # 100 subscribers, 2 distinct views
                sort = BY_NAME if j % 2 else BY_NAME_DESC
                subs.append((c, await c.subscribe(LIVE, {"ns": ns, "first": 5, "sort": sort})))

        async def drain(c: TransportWS, count: int) -> list[dict[str, Any]]:
            return [await c.recv(30) for _ in range(count)]

        firsts = await asyncio.gather(*(drain(c, 25) for c in clients))
        assert all(m["type"] == "next" for ms in firsts for m in ms)
        assert len([v for v in live.live if v.spec.namespace == ns]) == 2
        evaluations, orders = live.stats.evaluations, views.stats.evaluations

        await demo.store.create(POD, _pod("a-new", ns))  # one batch, visible to both
        updates = await asyncio.gather(*(drain(c, 25) for c in clients))
        totals = {m["payload"]["data"]["podsView"]["total"] for ms in updates for m in ms}
        assert totals == {11}
        assert live.stats.evaluations - evaluations == 2
        assert views.stats.evaluations - orders == 2


async def test_an_update_decodes_only_the_objects_that_changed(
    demo: DemoUpstream, gw: Gateway
) -> None:
    """A live view's next page reuses the objects of its last one whose JSON is the same:
    one change on a page of five decodes one object, not five (under churn the decoding of
    the page was most of an evaluation), and the update is the view query's answer."""
    ns = "live-decodes"
    await _namespace(demo, ns)
    live = _live(gw)
    variables = {"ns": ns, "first": 5, "sort": BY_NAME}
    async with ws_client(gw) as ws, httpx.AsyncClient(base_url=gw.url, timeout=30) as http:
        op = await ws.subscribe(LIVE, variables)
        await ws.next(op)
        decodes, evaluations = live.stats.decodes, live.stats.evaluations
        await demo.store.patch(
            POD, "live-03", {"metadata": {"labels": {"color": "blue"}}}, namespace=ns
        )
        update = (await ws.next(op))["data"]["podsView"]
        assert update["nodes"][3]["metadata"]["labels"] == {"app": "web", "color": "blue"}
        assert live.stats.evaluations - evaluations == 1
        assert live.stats.decodes - decodes == 1

        # an item enters: it alone is decoded; the others are the last page's
        decodes = live.stats.decodes
        await demo.store.create(POD, _pod("a-first", ns))
        update = (await ws.next(op))["data"]["podsView"]
        assert _names(update) == ["a-first", "live-00", "live-01", "live-02", "live-03"]
        assert live.stats.decodes - decodes == 1
        assert data(await gql(http, QUERY, variables))["podsView"] == update


async def test_notify_mode_says_the_page_changed_without_its_objects(
    demo: DemoUpstream, gw: Gateway
) -> None:
    ns = "live-notify"
    await _namespace(demo, ns)
    live = _live(gw)
    async with ws_client(gw) as ws:
        op = await ws.subscribe(LIVE, {"ns": ns, "first": 5, "sort": BY_NAME, "notify": True})
        first = (await ws.next(op))["data"]["podsView"]
        assert first["nodes"] == [] and first["total"] == 10
        outside = await demo.store.patch(
            POD, "live-08", {"metadata": {"labels": {"app": "db"}}}, namespace=ns
        )
        await _until(_evaluated_past(live, ns, outside["metadata"]["resourceVersion"]))
        # any change of the page's objects, selected or not, notifies
        changed = await demo.store.patch(
            POD, "live-01", {"metadata": {"annotations": {"n": "1"}}}, namespace=ns
        )
        update = (await ws.next(op))["data"]["podsView"]
        assert update["resourceVersion"] == changed["metadata"]["resourceVersion"]
        assert update["nodes"] == []


@pytest.mark.parametrize("mode", ["default", "shared-watches"])
async def test_a_revoked_right_ends_the_live_view_with_forbidden(
    demo: DemoUpstream, mode: str, tmp_path: Path
) -> None:
    await _namespace(demo, NAMESPACE, 6)
    more: dict[str, Any] = {}
    if mode == "shared-watches":
        token = tmp_path / "token"
        token.write_text(ADMIN)
        more = {"shared_watches": True, "token_file": str(token)}
    variables = {"ns": NAMESPACE, "first": 3, "sort": BY_NAME}
    async with (
        serve_gateway(demo, access_recheck_seconds=0.2, **more) as gw,
        ws_client(gw, payload={"Authorization": f"Bearer {ALICE}"}) as alice,
        ws_client(gw) as admin,
    ):
        mine = await alice.subscribe(LIVE, variables)
        theirs = await admin.subscribe(LIVE, variables)
        assert len(_names((await alice.next(mine))["data"]["podsView"])) == 3
        await admin.next(theirs)
        demo.app.tokens[ALICE] = TokenGrant("alice", frozenset({"elsewhere"}))
        started = time.monotonic()
        ended = await alice.next(mine, timeout=30)  # rechecked every 0.2 s
        assert time.monotonic() - started < 15
        assert ended["errors"][0]["extensions"]["code"] == "FORBIDDEN", ended
        assert "token" not in str(ended).lower()
        assert (await alice.recv())["type"] == "complete"
        # the admin's live view of the same namespace goes on
        await demo.store.create(POD, _pod("a-new", NAMESPACE))
        update = (await admin.next(theirs))["data"]["podsView"]
        assert "a-new" in _names(update)


async def test_each_subscriber_holds_a_lease_of_the_subscriber_budget(
    demo: DemoUpstream,
) -> None:
    ns = "live-budget"
    await _namespace(demo, ns, 3)
    # the view's cache holds one hub subscription, each live subscriber one lease
    async with serve_gateway(demo, max_subscriptions_per_identity=3) as gw, ws_client(gw) as ws:
        for sort in (BY_NAME, BY_NAME_DESC):
            op = await ws.subscribe(LIVE, {"ns": ns, "sort": sort})
            assert (await ws.next(op))["data"]["podsView"]["total"] == 3
        op = await ws.subscribe(LIVE, {"ns": ns})
        refused = await ws.next(op)
        assert refused["errors"][0]["extensions"]["code"] == "RESOURCE_EXHAUSTED", refused


async def test_a_slow_reader_is_ended_alone(demo: DemoUpstream, gw: Gateway) -> None:
    ns = "live-slow"
    await _namespace(demo, ns)
    live = _live(gw)
    live.max_unread = 3
    async with ws_client(gw) as ws:
        op = await ws.subscribe(LIVE, {"ns": ns, "first": 5, "sort": BY_NAME, "interval": 50})
        await ws.next(op)
        (view,) = [v for v in live.live if v.spec.namespace == ns]
        # a second subscriber of the same view that never reads
        slow = await live.subscribe(view.spec, credential_of_token(ADMIN), interval=view.interval)
        assert slow.view is view
        for i in range(8):
            await demo.store.patch(
                POD, "live-00", {"metadata": {"labels": {"i": str(i)}}}, namespace=ns
            )
            seen = (await ws.next(op))["data"]["podsView"]  # the reader keeps up
            assert seen["nodes"][0]["metadata"]["labels"]["i"] == str(i)
        assert slow.closed and isinstance(slow.error, errors.SlowSubscriber)
        assert live.stats.slow == 1
        assert not ws.ws.close_code  # the reader is still served


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"interval": 10}, "interval must be between 50 and 10000 ms"),
        ({"interval": 10**9}, "interval must be between 50 and 10000 ms"),
        ({"first": 100000}, "first"),
    ],
)
async def test_bad_input_is_refused_clearly(
    gw: Gateway, variables: dict[str, Any], message: str
) -> None:
    async with ws_client(gw) as ws:
        started = time.monotonic()
        op = await ws.subscribe(LIVE, {"ns": NAMESPACE, **variables})
        refused = await ws.next(op)
        assert time.monotonic() - started < 5
        (error,) = refused["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT", error
        assert message in error["message"]
        assert "Traceback" not in str(refused)
        assert (await ws.recv())["type"] == "complete"
        # the connection goes on serving
        ok = await ws.subscribe(LIVE, {"ns": NAMESPACE, "first": 1})
        assert "total" in (await ws.next(ok))["data"]["podsView"]


async def test_a_drain_ends_live_views_with_the_drains_completion(tmp_path: Path) -> None:
    ns = "live-drain"
    async with DemoUpstream() as demo:
        await _namespace(demo, ns, 3)
        async with (
            serve_process_async(
                tmp_path, "--server", demo.url, "--drain-seconds", "120", "--log-level", "info"
            ) as served,
            connect(
                served.http.replace("http", "ws") + "/graphql",
                subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
            ) as socket,
        ):
            ws = TransportWS(socket)
            await ws.send(
                {"type": "connection_init", "payload": {"Authorization": f"Bearer {ADMIN}"}}
            )
            assert (await ws.recv(60))["type"] == "connection_ack"
            op = await ws.subscribe(LIVE, {"ns": ns, "sort": BY_NAME})
            first = (await ws.next(op, 60))["data"]["podsView"]
            assert first["total"] == 3
            served.proc.send_signal(signal.SIGTERM)
            completion = await ws.next(op, 60)
            assert completion == {
                "data": None,
                "extensions": {"reason": "DRAINING", "resumeFrom": first["resourceVersion"]},
            }
            assert await ws.recv(60) == {"id": op, "type": "complete"}


async def test_discovered_kinds_have_the_same_live_view_in_every_schema(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(ADMIN)
    document = """subscription { %s(namespace: "demo", first: 1,
        sort: [{field: "metadata.name", order: DESC}]) {
        total edges { cursor node { metadata { name } } } } }"""
    async with (
        DemoUpstream() as demo,
        serve_gateway(demo, discovery_token_file=str(token)) as gateway,
    ):
        await gateway.app.state.runtime.live_schema.wait_ready()
        # a custom resource in its group's schema (graphql-core types), a discovered
        # built-in kind in /graphql (strawberry types, from the catalog's model)
        for field, path, plural in (
            ("widgetsView", "/apis/demo.kube-gateway.dev/graphql", "widgets"),
            ("deploymentsView", "/graphql", "deployments"),
        ):
            listed = await demo.store.list(plural, namespace=NAMESPACE)
            names = sorted((i["metadata"]["name"] for i in listed), reverse=True)
            async with ws_client(gateway, path=path) as ws:
                op = await ws.subscribe(document % field)
                view = (await ws.next(op))["data"][field]
                assert view["total"] == len(names)
                assert [e["node"]["metadata"]["name"] for e in view["edges"]] == names[:1]
                await demo.store.delete(plural, names[0], namespace=NAMESPACE)
                view = (await ws.next(op))["data"][field]
                assert view["total"] == len(names) - 1
                assert [e["node"]["metadata"]["name"] for e in view["edges"]] == names[1:2]
