"""Live fleet views on ``/fleet/graphql``: the merged view as a subscription, on two demo
clusters with real WebSocket clients.

The first update is the merged view query's answer (one global order, each item tagged
with its cluster); a change of a field the document selects in one cluster sends an update,
a change it does not select sends none; subscribers of one merged view share it (one live
fleet view, one live view per cluster); alice, whom cluster b refuses in ``demo``, gets her
items of the default cluster and b's ``FORBIDDEN`` as b's own part while the default
cluster stays live, and b's items once b lets her in; she never sees another namespace.

Synchronisation is on the gateway's own state (the live views' evaluated versions, the
fleet's counters), never on sleeps: "no update" is proved by the next message being the
next visible change, after the gateway evaluated the invisible one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect

from gateway.core import POD, FleetLiveViews, LiveViews, credential_of_token, scope_of
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.auth import DEFAULT_TOKENS, TokenGrant
from tests.gateway.test_fleet import gateway, kubeconfig, serves, until
from tests.support.graphql import ADMIN, NAMESPACE, TransportWS, data, gql, ws_client
from tests.support.serve_process import serve_process_async

FLEET = "/fleet/graphql"
ALICE = "alice-token"
OTHER = "elsewhere"
LABEL = {"field": "metadata.labels.app", "value": "livefleet"}
BY_NAME = [{"field": "metadata.name"}]

LIVE = """subscription($clusters: [String!], $ns: String, $filter: ViewFilter,
                      $sort: [ViewSort!], $first: Int, $after: String, $notify: Boolean) {
  podsView(clusters: $clusters, namespace: $ns, filter: $filter, sort: $sort,
           first: $first, after: $after, notify: $notify) {
    total
    pageInfo { hasNextPage endCursor }
    edges { cluster node { metadata { namespace name labels } } }
    clusters { cluster total error { code } }
  }
}"""

QUERY = (
    LIVE.replace("subscription(", "query(")
    .replace(", $notify: Boolean", "")
    .replace(", notify: $notify", "")
)


def _pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "livefleet"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }


#: A fleet cursor naming 10,000 clusters; a filter of 20,000 conditions.
WIDE = base64.urlsafe_b64encode(
    orjson.dumps(["fleet", "x", {f"c{i}": "x" for i in range(10_000)}])
).decode()
HUGE = {"or": [{"field": "metadata.name", "value": str(i)} for i in range(20_000)]}


@pytest.fixture
async def two() -> AsyncIterator[tuple[DemoUpstream, DemoUpstream]]:
    """Cluster b lets alice into namespace ``elsewhere`` only (the default: ``demo``)."""
    tokens = {**DEFAULT_TOKENS, ALICE: TokenGrant("alice", frozenset({OTHER}))}
    async with DemoUpstream() as a, DemoUpstream(tokens=tokens) as b:
        # a: p-00, p-02, ... p-08; b: p-01, p-03, ... p-09 (and the same in `elsewhere`)
        await a.store.bulk_create(POD, (_pod(f"p-{i:02d}", NAMESPACE) for i in range(0, 10, 2)))
        await b.store.bulk_create(POD, (_pod(f"p-{i:02d}", NAMESPACE) for i in range(1, 10, 2)))
        for upstream in (a, b):
            await upstream.store.ensure_namespace(OTHER)
            await upstream.store.bulk_create(POD, (_pod(f"o-{i}", OTHER) for i in range(3)))
        yield a, b


@contextlib.asynccontextmanager
async def fleet_gateway(
    a: DemoUpstream, b: DemoUpstream, tmp_path: Path, *more: str
) -> AsyncIterator[Any]:
    config = kubeconfig(tmp_path / "b.yaml", b.url)
    flags = ("--shared-identity-clusters", "b", "--access-recheck-seconds", "0.2", *more)
    async with gateway(a, "--cluster", f"b={config}", *flags) as (served, fleet, client):
        await until(fleet, serves("b"))
        yield served, fleet, client


def _tags(view: dict[str, Any]) -> list[str]:
    return [
        f"{e['cluster']}:{e['node']['metadata']['namespace']}/{e['node']['metadata']['name']}"
        for e in view["edges"]
    ]


def _live_of(fleet: Any, name: str) -> LiveViews:
    views = fleet.get(name).views
    assert views is not None
    return LiveViews.of(views)


async def _until(condition: Callable[[], bool], timeout: float = 30) -> None:
    """Wait for the gateway's state to satisfy ``condition`` (polled; bounded)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def _evaluated_past(live: LiveViews, version: str) -> Callable[[], bool]:
    def done() -> bool:
        views = [v for v in live.live if v.spec.namespace == NAMESPACE]
        return bool(views) and all(int(v.version or 0) >= int(version) for v in views)

    return done


async def test_the_merged_page_at_once_then_visible_changes_only(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    variables = {"ns": NAMESPACE, "filter": LABEL, "sort": BY_NAME, "first": 6}
    async with (
        fleet_gateway(a, b, tmp_path) as (served, fleet, client),
        ws_client(served, path=FLEET) as ws,
        ws_client(served, path=FLEET) as again,
    ):
        op = await ws.subscribe(LIVE, variables)
        other = await again.subscribe(LIVE, variables)
        first = (await ws.next(op))["data"]["podsView"]
        # one global order across both clusters, each item tagged with its cluster
        assert _tags(first) == [
            f"{'default' if i % 2 == 0 else 'b'}:{NAMESPACE}/p-{i:02d}" for i in range(6)
        ]
        assert first["total"] == 10 and first["pageInfo"]["hasNextPage"]
        assert first["clusters"] == [
            {"cluster": "default", "total": 5, "error": None},
            {"cluster": "b", "total": 5, "error": None},
        ]
        assert (await again.next(other))["data"]["podsView"] == first
        # the first update is the merged view query's answer
        query = data(await gql(client, QUERY, variables, path=FLEET))["podsView"]
        assert query == first
        # two subscribers of one merged view: one live fleet view, one live view per cluster
        shared = FleetLiveViews.of(fleet)
        assert shared.stats.views == 1 and shared.stats.subscribers == 2
        live_a, live_b = _live_of(fleet, "default"), _live_of(fleet, "b")
        assert len(live_a.live) == 1 and len(live_b.live) == 1

        # invisible: an unselected field of an item of the page (in b), an object past
        # the merged page's end (in the default cluster), the totals unchanged
        merges = shared.stats.merges
        await b.store.patch(
            POD, "p-01", {"metadata": {"annotations": {"n": "1"}}}, namespace=NAMESPACE
        )
        past = await a.store.patch(
            POD, "p-08", {"metadata": {"annotations": {"n": "1"}}}, namespace=NAMESPACE
        )
        await _until(_evaluated_past(live_a, past["metadata"]["resourceVersion"]))
        await _until(lambda: shared.stats.merges > merges)  # b's change was merged

        # visible: a selected field of an item of the page, in cluster b
        await b.store.patch(
            POD, "p-03", {"metadata": {"labels": {"color": "red"}}}, namespace=NAMESPACE
        )
        update = (await ws.next(op))["data"]["podsView"]
        assert update["edges"][3]["cluster"] == "b"
        assert update["edges"][3]["node"]["metadata"]["labels"] == {
            "app": "livefleet",
            "color": "red",
        }
        assert _tags(update) == _tags(first)
        assert (await again.next(other))["data"]["podsView"] == update

        # an item of the default cluster enters the page (the last one leaves), totals
        await a.store.create(POD, _pod("p-00a", NAMESPACE))
        update = (await ws.next(op))["data"]["podsView"]
        assert _tags(update)[:3] == [
            f"default:{NAMESPACE}/p-00",
            f"default:{NAMESPACE}/p-00a",
            f"b:{NAMESPACE}/p-01",
        ]
        assert len(update["edges"]) == 6 and update["total"] == 11
        assert [c["total"] for c in update["clusters"]] == [6, 5]
        assert data(await gql(client, QUERY, variables, path=FLEET))["podsView"] == update

        assert (await again.next(other))["data"]["podsView"] == update
        # the next page, live, from the fleet cursor: the rest in the same order
        rest = await again.subscribe(LIVE, {**variables, "after": update["pageInfo"]["endCursor"]})
        page = (await again.next(rest))["data"]["podsView"]
        assert _tags(page) == [f"b:{NAMESPACE}/p-05"] + [
            f"{'default' if i % 2 == 0 else 'b'}:{NAMESPACE}/p-{i:02d}" for i in range(6, 10)
        ]
        assert not page["pageInfo"]["hasNextPage"]

        # notify mode: that the page changed, without its objects
        note = await ws.subscribe(LIVE, {**variables, "notify": True})
        told = (await ws.next(note))["data"]["podsView"]
        assert told["edges"] == [] and told["total"] == 11


async def test_a_cluster_that_refuses_is_its_own_error_and_the_other_stays_live(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    variables = {"ns": NAMESPACE, "filter": LABEL, "sort": BY_NAME, "first": 20}
    async with (
        fleet_gateway(a, b, tmp_path) as (served, _fleet, _client),
        ws_client(served, path=FLEET, payload={"Authorization": f"Bearer {ALICE}"}) as alice,
        ws_client(served, path=FLEET) as admin,
    ):
        mine = await alice.subscribe(LIVE, variables)
        first = await alice.next(mine)
        view = first["data"]["podsView"]
        # alice may read `demo` in the default cluster, not in b: b is its own error
        assert _tags(view) == [f"default:{NAMESPACE}/p-{i:02d}" for i in range(0, 10, 2)]
        assert view["total"] == 5
        refused = {"cluster": "b", "total": None, "error": {"code": "FORBIDDEN"}}
        assert view["clusters"][1] == refused
        (error,) = first["errors"]
        assert error["extensions"]["code"] == "FORBIDDEN" and error["extensions"]["cluster"] == "b"
        assert ALICE not in str(first)

        # the default cluster stays live
        await a.store.create(POD, _pod("p-00a", NAMESPACE))
        update = (await alice.next(mine))["data"]["podsView"]
        assert f"default:{NAMESPACE}/p-00a" in _tags(update)
        assert update["clusters"][1]["error"] == {"code": "FORBIDDEN"}

        # b lets her in: b's part comes back (subscribed again each recheck, 0.2 s)
        b.app.tokens[ALICE] = TokenGrant("alice", frozenset({OTHER, NAMESPACE}))
        deadline = time.monotonic() + 30
        while True:
            back = (await alice.next(mine, timeout=30))["data"]["podsView"]
            if back["clusters"][1]["error"] is None:
                break
            assert time.monotonic() < deadline
        assert back["total"] == 11
        assert [t.split(":")[0] for t in _tags(back)].count("b") == 5

        # the default cluster revokes her (rechecked every 0.2 s): its part becomes its
        # FORBIDDEN, nothing of it shown, and b stays live
        a.app.tokens[ALICE] = TokenGrant("alice", frozenset({OTHER}))
        while True:
            gone = (await alice.next(mine, timeout=30))["data"]["podsView"]
            if gone["clusters"][0]["error"] is not None:
                break
            assert time.monotonic() < deadline + 30
        assert gone["clusters"][0]["error"] == {"code": "FORBIDDEN"}
        assert {t.split(":")[0] for t in _tags(gone)} == {"b"} and gone["total"] == 5
        await b.store.create(POD, _pod("p-01a", NAMESPACE))
        update = (await alice.next(mine))["data"]["podsView"]
        assert f"b:{NAMESPACE}/p-01a" in _tags(update) and update["total"] == 6

        # the admin's merged view of the same was served all along, b included
        theirs = await admin.subscribe(LIVE, variables)
        assert (await admin.next(theirs))["data"]["podsView"]["total"] == 12


async def test_alice_sees_only_her_namespace_in_both_clusters(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    async with (
        fleet_gateway(a, b, tmp_path) as (served, _fleet, _client),
        ws_client(served, path=FLEET, payload={"Authorization": f"Bearer {ALICE}"}) as alice,
    ):
        seen: list[str] = []
        for ns, refusing in ((NAMESPACE, "b"), (OTHER, "default")):
            op = await alice.subscribe(LIVE, {"ns": ns, "filter": LABEL, "sort": BY_NAME})
            body = await alice.next(op)
            view = body["data"]["podsView"]
            assert {t.split(":")[1].split("/")[0] for t in _tags(view)} == {ns}
            errors = {c["cluster"]: c["error"] for c in view["clusters"]}
            assert errors[refusing] == {"code": "FORBIDDEN"}
            assert [e["extensions"]["cluster"] for e in body["errors"]] == [refusing]
            seen += _tags(view)
        assert sorted(seen) == sorted(
            [f"default:{NAMESPACE}/p-{i:02d}" for i in range(0, 10, 2)]
            + [f"b:{OTHER}/o-{i}" for i in range(3)]
        )
        # all namespaces: refused in both clusters (she may list neither cluster-wide):
        # refused whole, as a one-cluster live view refused at its start, nothing shown
        op = await alice.subscribe(LIVE, {"filter": LABEL})
        body = await alice.next(op)
        assert body.get("data") is None
        (error,) = body["errors"]
        assert error["extensions"]["code"] == "FORBIDDEN"
        assert (await alice.recv())["type"] == "complete"


async def test_bad_input_is_the_fields_bad_user_input(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    async with (
        fleet_gateway(a, b, tmp_path) as (served, fleet, _client),
        ws_client(served, path=FLEET) as ws,
    ):
        cases = [
            ({"filter": {"field": "metadata.nmae", "value": "x"}}, "did you mean"),
            ({"first": 501}, "`first` is a page size from 0 to 500"),
            ({"sort": BY_NAME, "after": "bm90IGEgY3Vyc29y"}, "`after` is not a cursor"),
            ({"sort": BY_NAME, "after": "A" * 100_000}, "`after` is not a cursor"),
            ({"notify": True, "first": -1}, "`first` is a page size from 0 to 500"),
            ({"sort": BY_NAME, "after": WIDE}, "`after` is not a cursor"),
            ({"filter": HUGE}, "the filter is too complex"),
        ]
        for variables, text in cases:
            started = time.monotonic()
            op = await ws.subscribe(LIVE, {"ns": NAMESPACE, **variables})
            refused = await ws.next(op)
            assert time.monotonic() - started < 5
            (error,) = refused["errors"]
            assert error["extensions"]["code"] == "BAD_USER_INPUT", error
            assert text in error["message"] and "cluster" not in error["extensions"]
            assert "Traceback" not in str(refused) and ADMIN not in str(refused)
            assert (await ws.recv())["type"] == "complete"
        # nothing was opened for them; a neighbour is served beside them
        assert FleetLiveViews.of(fleet).stats.views == 0
        op = await ws.subscribe(LIVE, {"ns": NAMESPACE, "filter": LABEL, "sort": BY_NAME})
        assert (await ws.next(op))["data"]["podsView"]["total"] == 10


async def test_each_subscriber_holds_a_lease_in_every_cluster_and_gives_it_back(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    variables = {"ns": NAMESPACE, "filter": LABEL, "sort": BY_NAME}
    scope = scope_of(credential_of_token(ADMIN))
    async with fleet_gateway(a, b, tmp_path, "--max-subscriptions-per-identity", "4") as (
        served,
        fleet,
        _client,
    ):
        budgets = [fleet.get(n).watches.subscriber_budget for n in ("default", "b")]
        async with (
            ws_client(served, path=FLEET) as ws,
            ws_client(served, path=FLEET, payload={"Authorization": f"Bearer {ALICE}"}) as alice,
        ):
            # per cluster: the view's cache (1), the fleet's subscriber of the cluster's
            # live view (1), and one lease per subscriber of the merged view (2)
            for _ in range(2):
                op = await ws.subscribe(LIVE, variables)
                assert (await ws.next(op))["data"]["podsView"]["total"] == 10
            assert [budget.by_scope[scope] for budget in budgets] == [4, 4]
            started = time.monotonic()
            op = await ws.subscribe(LIVE, variables)
            refused = await ws.next(op)
            assert time.monotonic() - started < 5
            (error,) = refused["errors"]
            assert error["extensions"]["code"] == "RESOURCE_EXHAUSTED", error
            assert "too many subscriptions for this identity" in error["message"]
            assert (await ws.recv())["type"] == "complete"
            # another identity beside it is served
            mine = await alice.subscribe(LIVE, variables)
            assert (await alice.next(mine))["data"]["podsView"]["total"] == 5
        # the connections gone: the leases are given back (the caches' until they idle)
        await _until(lambda: all(budget.by_scope[scope] <= 1 for budget in budgets))
        await _until(lambda: FleetLiveViews.of(fleet).stats.views == 0)


_INBOX: dict[tuple[int, str], list[dict[str, Any]]] = {}


async def _next(ws: Any, op: str) -> dict[str, Any]:
    """The next payload of ``op`` on a connection several operations share (the others'
    kept for them)."""
    box = _INBOX.setdefault((id(ws), op), [])
    while not box:
        message = await ws.recv()
        assert message["type"] == "next", message
        _INBOX.setdefault((id(ws), message["id"]), []).append(message["payload"])
    return box.pop(0)


async def test_subscribers_of_two_merged_views_cost_two_merges_per_batch(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    _INBOX.clear()
    async with (
        fleet_gateway(a, b, tmp_path) as (served, fleet, _client),
        contextlib.AsyncExitStack() as stack,
    ):
        clients = [await stack.enter_async_context(ws_client(served, path=FLEET)) for _ in range(4)]
        ops = []
        for i in range(20):  # 20 subscribers, 10 of each of 2 merged views
            ws = clients[i % 4]
            first = 5 + i % 2
            variables = {"ns": NAMESPACE, "filter": LABEL, "sort": BY_NAME, "first": first}
            ops.append((ws, await ws.subscribe(LIVE, variables), first))
        for ws, op, first in ops:
            assert len((await _next(ws, op))["data"]["podsView"]["edges"]) == first
        shared = FleetLiveViews.of(fleet)
        live_a, live_b = _live_of(fleet, "default"), _live_of(fleet, "b")
        assert shared.stats.views == 2 and shared.stats.subscribers == 20
        assert len(live_a.live) == 2 and len(live_b.live) == 2  # one per merged view
        merges, in_a, in_b = shared.stats.merges, live_a.stats.evaluations, live_b.stats.evaluations
        await a.store.create(POD, _pod("p-00a", NAMESPACE))  # one change: one batch
        for ws, op, _ in ops:
            update = (await _next(ws, op))["data"]["podsView"]
            assert _tags(update)[1] == f"default:{NAMESPACE}/p-00a"
        # one evaluation per cluster's live view, one merge per merged view, for all 20
        assert live_a.stats.evaluations - in_a == 2
        assert live_b.stats.evaluations - in_b == 0
        assert shared.stats.merges - merges == 2
        assert shared.stats.published >= 4


async def test_a_drain_ends_a_live_fleet_view_with_the_drains_completion(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    config = kubeconfig(tmp_path / "b.yaml", b.url)
    flags = ("--server", a.url, "--cluster", f"b={config}", "--shared-identity-clusters", "b")
    async with serve_process_async(
        tmp_path, *flags, "--drain-seconds", "120", "--log-level", "info"
    ) as served:
        await asyncio.to_thread(served.wait_for_line, "cluster b: served")
        async with connect(
            served.http.replace("http", "ws") + FLEET,
            subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        ) as socket:
            ws = TransportWS(socket)
            await ws.send(
                {"type": "connection_init", "payload": {"Authorization": f"Bearer {ADMIN}"}}
            )
            assert (await ws.recv(60))["type"] == "connection_ack"
            op = await ws.subscribe(LIVE, {"ns": NAMESPACE, "filter": LABEL, "sort": BY_NAME})
            first = (await ws.next(op, 60))["data"]["podsView"]
            assert first["total"] == 10
            served.proc.send_signal(signal.SIGTERM)
            completion = await ws.next(op, 60)
            # resumable by subscribing again (a merged view has no one version)
            assert completion == {
                "data": None,
                "extensions": {"reason": "DRAINING", "resumeFrom": None},
            }
            assert await ws.recv(60) == {"id": op, "type": "complete"}
