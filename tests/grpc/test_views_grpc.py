"""Views over gRPC (``ResourceService.View``) on the demo upstream, with a real gRPC client.

The same checks as GraphQL's (``tests/graphql/test_views.py``, whose pods, cases and own
evaluation this module reuses): every operator and sort paged through and compared with the
test's own filter and sort, search, counts and totals, the same refusals with the same
messages (``INVALID_ARGUMENT`` here), alice held to her namespace, and hostile views refused
fast while a neighbour is served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from gateway.grpc.gen.kubegateway.v1 import resource_pb2, resource_pb2_grpc
from kube_gateway_demo import DemoUpstream
from tests.graphql import test_fleet_views as fleet_views
from tests.graphql import test_views as graphql_views
from tests.support.graphql import ADMIN, ALICE, NAMESPACE, Gateway, demo, serve_gateway

__all__ = ["demo", "fleet_pods", "pods", "two"]  # fixtures

pods = graphql_views.pods
two = fleet_views.two
OTHER = graphql_views.OTHER
_names, _ns, _sorted = graphql_views._names, graphql_views._ns, graphql_views._sorted
_hit, _matches, _counts = graphql_views._hit, graphql_views._matches, graphql_views._counts

_OPS = {
    "EQ": resource_pb2.VIEW_OP_EQ,
    "NE": resource_pb2.VIEW_OP_NE,
    "IN": resource_pb2.VIEW_OP_IN,
    "NOT_IN": resource_pb2.VIEW_OP_NOT_IN,
    "PREFIX": resource_pb2.VIEW_OP_PREFIX,
    "CONTAINS": resource_pb2.VIEW_OP_CONTAINS,
    "EXISTS": resource_pb2.VIEW_OP_EXISTS,
    "LT": resource_pb2.VIEW_OP_LT,
    "LTE": resource_pb2.VIEW_OP_LTE,
    "GT": resource_pb2.VIEW_OP_GT,
    "GTE": resource_pb2.VIEW_OP_GTE,
}


def message(where: dict[str, Any]) -> resource_pb2.ViewFilter:
    """A GraphQL ``ViewFilter`` (as the GraphQL tests write them) as the gRPC message."""
    out = resource_pb2.ViewFilter()
    for item in where.get("and") or ():
        out.all_of.append(message(item))
    for item in where.get("or") or ():
        out.any_of.append(message(item))
    if "not" in where:
        out.negate.CopyFrom(message(where["not"]))
    if "field" in where:
        out.field = where["field"]
    if "op" in where:
        out.op = _OPS[where["op"]]
    if "value" in where:
        out.value = where["value"]
    out.values.extend(where.get("values") or ())
    out.label_selector = where.get("labelSelector", "")
    out.field_selector = where.get("fieldSelector", "")
    return out


def request(
    *,
    ns: str | None = None,
    filter: dict[str, Any] | None = None,
    search: str | None = None,
    sort: list[dict[str, Any]] | None = None,
    first: int | None = None,
    after: str | None = None,
    min: str | None = None,
    count_by: list[str] = (),  # type: ignore[assignment]
    mask: list[str] | None = None,
) -> resource_pb2.ViewResourcesRequest:
    """A ``View`` of pods from the GraphQL tests' variables."""
    r = resource_pb2.ViewResourcesRequest(
        version="v1",
        resource="pods",
        namespace=ns or "",
        search=search or "",
        after=after or "",
        min_resource_version=min or "",
        count_by=list(count_by),
    )
    if filter is not None:
        r.filter.CopyFrom(message(filter))
    for key in sort or ():
        r.sort.add(
            field=key["field"],
            order=resource_pb2.VIEW_ORDER_DESC
            if key.get("order") == "DESC"
            else resource_pb2.VIEW_ORDER_ASC,
        )
    if first is not None:
        r.first = first
    if mask is not None:
        r.read_mask.paths.extend(mask)
    return r


def _identity(data: bytes) -> bytes:
    return data


def _prefixed(number: int, data: bytes) -> bytes:
    """Field ``number`` (length-delimited) holding ``data``, as wire bytes."""
    size, n = bytearray(), len(data)
    while True:
        size.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    return bytes([number << 3 | 2]) + bytes(size) + data


class Client:
    """A real gRPC client of the gateway's ``ResourceService``."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self.stub = resource_pb2_grpc.ResourceServiceStub(channel)

    async def view(
        self, req: resource_pb2.ViewResourcesRequest, token: str = ADMIN
    ) -> resource_pb2.ResourceView:
        answer: resource_pb2.ResourceView = await self.stub.View(
            req, metadata=(("authorization", f"Bearer {token}"),), timeout=60
        )
        return answer

    async def refusal(
        self, req: resource_pb2.ViewResourcesRequest, token: str = ADMIN
    ) -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await self.view(req, token)
        return caught.value

    async def walk(
        self, token: str = ADMIN, **variables: Any
    ) -> tuple[list[str], int, list[resource_pb2.ResourceView]]:
        """Every page of a view, concatenated; its total; the pages."""
        names: list[str] = []
        pages = []
        after = None
        for _ in range(1000):
            view = await self.view(request(**variables, after=after), token)
            pages.append(view)
            items = [orjson.loads(e.object.json) for e in view.edges]
            names += _names(items)
            if not view.page_info.has_next_page:
                return names, view.total, pages
            after = view.page_info.end_cursor
            assert after == view.edges[-1].cursor
        raise AssertionError("the pages never ended")


@pytest.fixture
async def fleet_pods(two: tuple[DemoUpstream, DemoUpstream]) -> dict[str, list[dict[str, Any]]]:
    return await fleet_views.make_pods(two)


@pytest.fixture
async def gw(demo: DemoUpstream, pods: list[dict[str, Any]]) -> AsyncIterator[Gateway]:
    async with serve_gateway(demo) as gateway:
        yield gateway


@contextlib.asynccontextmanager
async def client_of(gateway: Gateway) -> AsyncIterator[Client]:
    port = gateway.app.state.runtime.grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield Client(channel)


@pytest.fixture
async def rpc(gw: Gateway) -> AsyncIterator[Client]:
    async with client_of(gw) as c:
        yield c


# -- the tests ---------------------------------------------------------------------------


async def test_every_operator_and_sort_pages_through_exactly_the_tests_own_answer(
    rpc: Client, pods: list[dict[str, Any]]
) -> None:
    for label, where, test in graphql_views.CASES:
        for keys in graphql_views.SORTS:
            for namespace in (NAMESPACE, None):
                sort = [{"field": f, "order": "DESC" if d else "ASC"} for f, d in keys]
                names, total, _ = await rpc.walk(ns=namespace, filter=where, sort=sort, first=7)
                expected = _names(_sorted([p for p in _ns(pods, namespace) if test(p)], keys))
                assert expected, label  # every case selects something
                assert names == expected, (label, keys, namespace)
                assert total == len(expected)


async def test_search_counts_totals_masks_and_structs_match_the_tests_own_answer(
    rpc: Client, pods: list[dict[str, Any]]
) -> None:
    for text in ("ZZ", "blue", "canary", "views-oth", "app=db"):
        names, total, _ = await rpc.walk(search=text, first=50)
        expected = _names(_sorted([p for p in pods if _hit(p, text)], []))
        assert expected, text
        assert (names, total) == (expected, len(expected)), text
    for by, namespace, where, search in [
        ("status.phase", None, None, None),
        ("metadata.labels.app", NAMESPACE, {"field": "status.phase", "value": "Running"}, None),
        ("metadata.namespace", None, None, "web"),
        ("spec.nodeName", OTHER, {"labelSelector": "app!=db"}, None),
        ("spec.priority", NAMESPACE, None, None),
    ]:
        view = await rpc.view(
            request(ns=namespace, filter=where, search=search, first=0, count_by=[by])
        )
        chosen = [
            p
            for p in _ns(pods, namespace)
            if (where is None or _matches(p, where)) and (search is None or _hit(p, search))
        ]
        (group,) = view.counts
        got = [
            {"value": c.value if c.HasField("value") else None, "count": c.count}
            for c in group.counts
        ]
        assert group.group_by == by and got == _counts(chosen, by), by
        assert view.total == len(chosen) == sum(c["count"] for c in got)
        assert list(view.edges) == [] and view.page_info.has_next_page is (len(chosen) > 0)
        assert int(view.resource_version) > 0
    # several groupings in one answer, in the order asked; a page beside them
    view = await rpc.view(
        request(ns=NAMESPACE, first=3, count_by=["status.phase", "metadata.labels.app"])
    )
    mine = _ns(pods, NAMESPACE)
    assert [g.group_by for g in view.counts] == ["status.phase", "metadata.labels.app"]
    assert sum(c.count for c in view.counts[1].counts) == len(mine) == view.total
    assert len(view.edges) == 3 and view.page_info.has_next_page
    assert view.page_info.start_cursor == view.edges[0].cursor
    # a read mask and Structs: the objects carry only the paths asked
    struct = await rpc.view(
        resource_pb2.ViewResourcesRequest(
            version="v1",
            resource="pods",
            namespace=NAMESPACE,
            sort=[resource_pb2.ViewSort(field="status.startTime", order=2)],
            first=5,
            read_mask={"paths": ["metadata.name", "status.phase"]},
            representation=resource_pb2.REPRESENTATION_STRUCT,
        )
    )
    expected = _sorted(mine, [("status.startTime", True)])[:5]
    got_objects = [dict(e.object.struct) for e in struct.edges]
    assert [o["metadata"]["name"] for o in got_objects] == [p["metadata"]["name"] for p in expected]
    assert all(set(o) == {"metadata", "status"} for o in got_objects)
    assert all(set(o["metadata"]) == {"name"} for o in got_objects)


BAD = [
    *((label, variables, text) for label, variables, text in graphql_views.BAD),
    ("too many count groups", {"count_by": ["status.phase"] * 9}, "`count_by` has more"),
    (
        "an unknown count field",
        {"count_by": ["status.phasee"]},
        "did you mean 'status.phase'?",
    ),
]


async def test_bad_views_are_invalid_argument_with_graphqls_messages(
    rpc: Client, gw: Gateway
) -> None:
    page = await rpc.view(request(ns=NAMESPACE, sort=[{"field": "metadata.name"}], first=2))
    cursor = page.page_info.end_cursor
    cases = [*BAD, ("a cursor of another sort", {"after": cursor}, "from another sort")]
    for label, variables, text in cases:
        error = await rpc.refusal(request(ns=NAMESPACE, **variables))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (label, error)
        assert text in (error.details() or ""), (label, error.details())
    # counted in the metrics as views (as GraphQL counts them), never as lists
    registry = gw.app.state.runtime.cluster.adapter.metrics.registry

    def count(operation: str, ok: bool) -> float:
        total = 0.0
        for family in registry.collect():
            if family.name != "kube_gateway_operations":
                continue
            for sample in family.samples:
                labels = sample.labels
                if (
                    sample.name.endswith("_total")
                    and labels.get("transport") == "grpc"
                    and labels.get("operation") == operation
                    and labels.get("resource") == "pods"
                    and (labels.get("outcome") == "ok") is ok
                ):
                    total += sample.value
        return total

    assert count("View", ok=True) >= 1
    assert count("View", ok=False) >= len(cases)
    assert count("List", ok=True) == count("List", ok=False) == 0


async def test_hostile_views_are_refused_fast_while_a_neighbour_is_served(
    gw: Gateway,
    rpc: Client,
    pods: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="gateway")
    huge = {"or": [{"field": "metadata.name", "value": f"n{i}"} for i in range(20_000)]}
    long_value = {"field": "metadata.name", "op": "CONTAINS", "value": "x" * 100_000}
    wide_in = {"field": "status.phase", "op": "IN", "values": ["Running"] * 10_000}
    deep = graphql_views._nested(13)
    hostile = [
        (request(ns=NAMESPACE, filter=huge), "the filter is too complex"),
        (request(ns=NAMESPACE, filter=deep), "the filter is nested deeper than 8 levels"),
        (request(ns=NAMESPACE, filter=long_value), "longer than 1024 characters"),
        (request(ns=NAMESPACE, filter=wide_in), "has more than 100 values"),
        (request(ns=NAMESPACE, sort=[{"field": "metadata.name"}] * 10_000), "more than 4 keys"),
        (request(ns=NAMESPACE, after="A" * 100_000), "`after` is not a cursor"),
        (request(ns=NAMESPACE, count_by=["status.phase"] * 10_000), "`count_by` has more"),
    ]
    neighbour = request(ns=NAMESPACE, sort=[{"field": "status.startTime", "order": "DESC"}])
    expected = _names(_sorted(_ns(pods, NAMESPACE), [("status.startTime", True)]))[:50]
    await rpc.view(neighbour)  # its cache is warm

    async def attack(req: resource_pb2.ViewResourcesRequest, text: str) -> float:
        started = time.perf_counter()
        error = await rpc.refusal(req)
        took = time.perf_counter() - started
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
        assert text in (error.details() or ""), error.details()
        assert "Traceback" not in str(error) and ADMIN not in str(error)
        return took

    async def serve() -> list[float]:
        took = []
        for _ in range(10):
            started = time.perf_counter()
            view = await rpc.view(neighbour)
            took.append(time.perf_counter() - started)
            assert _names([orjson.loads(e.object.json) for e in view.edges]) == expected
        return took

    served, *refused = await asyncio.gather(
        serve(), *(attack(r, t) for r, t in hostile for _ in range(3))
    )
    print("refused in", sorted(refused), "neighbour served in", sorted(served))
    # orders of magnitude on a loaded machine: a refusal is a parse and a short walk
    assert max(refused) < 5.0, refused
    assert sorted(served)[len(served) // 2] < 2.0, served
    # a filter nested past protobuf's own limit is refused as undecodable, the process up
    # (written as wire bytes: protobuf's own builder refuses such a message)
    nested = resource_pb2.ViewFilter(field="metadata.name", value="x").SerializeToString()
    for _ in range(500):
        nested = _prefixed(3, nested)  # ViewFilter.negate
    head = resource_pb2.ViewResourcesRequest(version="v1", resource="pods").SerializeToString()
    raw = rpc.channel.unary_unary(
        "/kubegateway.v1.ResourceService/View",
        request_serializer=_identity,
        response_deserializer=_identity,
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw(head + _prefixed(5, nested), metadata=(("authorization", f"Bearer {ADMIN}"),))
    error = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    view = await rpc.view(neighbour)
    assert _names([orjson.loads(e.object.json) for e in view.edges]) == expected
    assert len(gw.app.state.runtime.cluster.views.caches) == 1  # none opened for a refusal
    # what the gateway logged meanwhile holds no token and no stack trace
    logged = [r for r in caplog.records if r.name.startswith("gateway")]
    assert logged, "nothing of the gateway's was captured"
    text = "\n".join(r.getMessage() + str(r.exc_info or "") for r in logged)
    assert ADMIN not in text and "Traceback" not in text


@pytest.mark.parametrize("mode", ["default", "shared-watches"])
async def test_alice_sees_only_her_namespace_through_views_and_counts(
    demo: DemoUpstream, pods: list[dict[str, Any]], mode: str, tmp_path: Path
) -> None:
    more: dict[str, Any] = {}
    if mode == "shared-watches":
        token = tmp_path / "token"
        token.write_text(ADMIN)
        more = {"shared_watches": True, "token_file": str(token)}
    async with serve_gateway(demo, **more) as gateway, client_of(gateway) as rpc:
        mine = _names(_sorted(_ns(pods, NAMESPACE), []))
        names, total, _ = await rpc.walk(ALICE, ns=NAMESPACE, first=40)
        assert (names, total) == (mine, len(mine))
        view = await rpc.view(
            request(ns=NAMESPACE, first=0, count_by=["metadata.namespace"]), ALICE
        )
        (group,) = view.counts
        assert [(c.value, c.count) for c in group.counts] == [(NAMESPACE, len(mine))]
        for namespace in (None, OTHER):
            for req in (
                request(ns=namespace),
                request(ns=namespace, first=0, count_by=["metadata.namespace"]),
            ):
                error = await rpc.refusal(req, ALICE)
                assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error
                assert OTHER not in (error.details() or "") or namespace == OTHER
                if namespace is None:
                    assert "ask for a view of one namespace" in (error.details() or "")
        everyone, _, _ = await rpc.walk(first=200)
        assert everyone == _names(_sorted(pods, []))
        names, _, _ = await rpc.walk(ALICE, ns=NAMESPACE, first=40)
        assert names == mine


async def test_discovered_and_cluster_scoped_kinds_have_views(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(ADMIN)
    async with (
        DemoUpstream() as demo,
        serve_gateway(demo, discovery_token_file=str(token)) as gateway,
        client_of(gateway) as rpc,
    ):
        await gateway.app.state.runtime.live_schema.wait_ready()
        for group, plural, namespace in (
            ("demo.kube-gateway.dev", "widgets", NAMESPACE),
            ("apps", "deployments", NAMESPACE),
            ("image.openshift.io", "images", ""),
        ):
            listed = await demo.store.list(plural, namespace=namespace or None)
            names = sorted((i["metadata"]["name"] for i in listed), reverse=True)
            assert names, plural
            version = "v1"
            view = await rpc.view(
                resource_pb2.ViewResourcesRequest(
                    group=group,
                    version=version,
                    resource=plural,
                    namespace=namespace,
                    sort=[resource_pb2.ViewSort(field="metadata.name", order=2)],
                    first=1,
                    count_by=["metadata.name"],
                )
            )
            assert view.total == len(names), plural
            assert [orjson.loads(e.object.json)["metadata"]["name"] for e in view.edges] == [
                names[0]
            ]
            assert sum(c.count for c in view.counts[0].counts) == len(names)
            error = await rpc.refusal(
                resource_pb2.ViewResourcesRequest(
                    group=group,
                    version=version,
                    resource=plural,
                    namespace=namespace,
                    sort=[resource_pb2.ViewSort(field="metadata.nmae")],
                )
            )
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "did you mean 'metadata.name'?" in (error.details() or ""), plural


# -- a view merged across clusters (clusters on View) --------------------------------------


async def test_a_merged_view_over_grpc_is_one_order_with_each_clusters_error_its_own(
    two: tuple[DemoUpstream, DemoUpstream],
    fleet_pods: dict[str, list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    a, b = two
    async with (
        fleet_views.fleet_of(a, b, tmp_path) as (served, _fleet, _client),
        client_of(served) as rpc,
    ):
        for keys in fleet_views.SORTS:
            sort = [{"field": f, "order": "DESC" if d else "ASC"} for f, d in keys]
            names: list[str] = []
            after = None
            for _ in range(100):
                req = request(ns=NAMESPACE, sort=sort, first=9, after=after)
                req.clusters.append("*")
                view = await rpc.view(req)
                assert [c.cluster for c in view.clusters] == ["default", "b"]
                assert all(not c.HasField("error") for c in view.clusters)
                names += [
                    f"{e.cluster}:{NAMESPACE}/{orjson.loads(e.object.json)['metadata']['name']}"
                    for e in view.edges
                ]
                if not view.page_info.has_next_page:
                    break
                after = view.page_info.end_cursor
            assert names == fleet_views._own(fleet_pods, keys), keys
            assert view.total == sum(len(fleet_pods[c]) for c in ("default", "b"))
        # counts per cluster and in total
        req = request(ns=NAMESPACE, first=0, count_by=["status.phase"])
        req.clusters.extend(["default", "b"])
        view = await rpc.view(req)
        both = fleet_pods["default"] + fleet_pods["b"]

        def listed(counts: Any) -> list[dict[str, Any]]:
            return [
                {"value": c.value if c.HasField("value") else None, "count": c.count}
                for c in counts.counts
            ]

        assert listed(view.counts[0]) == graphql_views._counts(both, "status.phase")
        assert [listed(c.counts[0]) for c in view.clusters] == [
            graphql_views._counts(fleet_pods[c], "status.phase") for c in ("default", "b")
        ]
        # alice: b refuses her `demo`; the default cluster's pods are served, b's error
        # is b's own, and nothing of b's is in the answer
        req = request(ns=NAMESPACE, first=500, sort=[{"field": "metadata.name"}])
        req.clusters.append("*")
        view = await rpc.view(req, ALICE)
        assert {e.cluster for e in view.edges} == {"default"}
        assert len(view.edges) == view.total == len(fleet_pods["default"])
        default, other = view.clusters
        assert default.total == len(fleet_pods["default"]) and not default.HasField("error")
        assert (
            other.cluster == "b" and other.error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
        )
        # the caller's mistakes are the call's
        for bad, text in (
            (request(ns=NAMESPACE, sort=[{"field": "metadata.nmae"}]), "did you mean"),
            (request(ns=NAMESPACE, after="bm90IGEgY3Vyc29y"), "`after` is not a cursor"),
        ):
            bad.clusters.append("*")
            error = await rpc.refusal(bad)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
            assert text in (error.details() or "")
        too_many = request(ns=NAMESPACE)
        too_many.clusters.extend(f"c{i}" for i in range(900))
        error = await rpc.refusal(too_many)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "a fleet call names at most" in (error.details() or "")
