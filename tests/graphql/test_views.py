"""Views over GraphQL on the demo upstream: every operator, sorts, pages by cursor, counts,
errors, RBAC, and hostile views refused fast while a neighbour is served.

Each view is checked against the test's own evaluation of the same pods (written here,
independently of the gateway's): the filter as the docs state it, sorted with the
(namespace, name) tiebreaker, all pages concatenated.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from gateway.core import POD
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import (
    ADMIN,
    NAMESPACE,
    Gateway,
    data,
    gql,
    serve_gateway,
)

OTHER = "views-other"
COUNT = 120
PHASES = ("Running", "Pending", "Failed", "Succeeded")
NODES = ("node-a", "node-b", "node-c", None)


def _pod(i: int, namespace: str) -> dict[str, Any]:
    rnd = random.Random(i * 7 + len(namespace))
    labels = {"app": rnd.choice(("web", "api", "db")), "index": str(i)}
    if i % 5 == 0:
        labels["canary"] = "true"
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "nginx"}]}
    node = NODES[i % 4]
    if node is not None:
        spec["nodeName"] = node
    if i % 3:
        spec["priority"] = rnd.randint(-5, 5) * 1000
    return {
        "metadata": {
            "name": f"{labels['app']}-{i:03d}-{rnd.choice(('x', 'y', 'zz'))}",
            "namespace": namespace,
            "labels": labels,
            "annotations": {"team": rnd.choice(("Blue", "Green"))},
        },
        "spec": spec,
        "status": {
            "phase": PHASES[rnd.randrange(4)],
            "startTime": f"2026-0{rnd.randint(1, 9)}-1{rnd.randint(0, 9)}T0{rnd.randint(0, 9)}"
            f":{rnd.randint(10, 59)}:00Z",
        },
    }


@pytest.fixture
async def pods(demo: DemoUpstream) -> list[dict[str, Any]]:
    await demo.store.ensure_namespace(OTHER)
    made = [_pod(i, NAMESPACE) for i in range(COUNT)] + [_pod(i, OTHER) for i in range(40)]
    for ns in (NAMESPACE, OTHER):
        await demo.store.bulk_create(POD, (p for p in made if p["metadata"]["namespace"] == ns))
    listed: list[dict[str, Any]] = await demo.store.list(POD)
    return listed


@pytest.fixture
async def gw(demo: DemoUpstream, pods: list[dict[str, Any]]) -> AsyncIterator[Gateway]:
    async with serve_gateway(demo) as gateway:
        yield gateway


@pytest.fixture
async def http(gw: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        yield c


# -- the test's own evaluation -------------------------------------------------------------


def _read(obj: Any, path: str) -> Any:
    if path.startswith("metadata.labels."):
        return (obj["metadata"].get("labels") or {}).get(path[len("metadata.labels.") :])
    for key in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _ns(pods: list[dict[str, Any]], namespace: str | None) -> list[dict[str, Any]]:
    return [p for p in pods if namespace is None or p["metadata"]["namespace"] == namespace]


def _sorted(items: list[dict[str, Any]], keys: list[tuple[str, bool]]) -> list[dict[str, Any]]:
    out = sorted(items, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
    for path, desc in reversed(keys):
        present = [p for p in out if _read(p, path) is not None]
        absent = [p for p in out if _read(p, path) is None]
        present.sort(key=lambda p, path=path: _read(p, path), reverse=desc)
        out = present + absent if desc else absent + present
    return out


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in items]


VIEW = """query($ns: String, $filter: ViewFilter, $search: String, $sort: [ViewSort!],
                $first: Int, $after: String, $min: String) {
  podsView(namespace: $ns, filter: $filter, search: $search, sort: $sort, first: $first,
           after: $after, minResourceVersion: $min) {
    total resourceVersion
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    edges { cursor node { metadata { name namespace } } }
    nodes { metadata { name namespace labels } spec { nodeName priority } status { phase } }
  }
}"""


async def _walk(
    http: httpx.AsyncClient, variables: dict[str, Any], token: str = ADMIN
) -> tuple[list[str], int, list[dict[str, Any]]]:
    """Every page of a view, concatenated; its total; the pages."""
    names: list[str] = []
    pages = []
    after = None
    for _ in range(1000):
        body = data(await gql(http, VIEW, {**variables, "after": after}, token=token))
        view = body["podsView"]
        pages.append(view)
        names += _names(view["nodes"])
        assert _names([e["node"] for e in view["edges"]]) == _names(view["nodes"])
        if not view["pageInfo"]["hasNextPage"]:
            return names, view["total"], pages
        after = view["pageInfo"]["endCursor"]
        assert after == view["edges"][-1]["cursor"]
    raise AssertionError("the pages never ended")


def _get(path: str) -> Callable[[dict[str, Any]], Any]:
    return lambda p: _read(p, path)


PHASE, NODE, APP, CANARY = (
    _get("status.phase"),
    _get("spec.nodeName"),
    _get("metadata.labels.app"),
    _get("metadata.labels.canary"),
)
PRIORITY, STARTED = _get("spec.priority"), _get("status.startTime")
Case = tuple[str, dict[str, Any], Callable[[dict[str, Any]], bool]]
CASES: list[Case] = [
    ("eq", {"field": "status.phase", "value": "Running"}, lambda p: PHASE(p) == "Running"),
    (
        "ne",
        {"field": "spec.nodeName", "op": "NE", "value": "node-a"},
        lambda p: NODE(p) != "node-a",
    ),
    (
        "in",
        {"field": "status.phase", "op": "IN", "values": ["Failed", "Pending"]},
        lambda p: PHASE(p) in ("Failed", "Pending"),
    ),
    (
        "notIn",
        {"field": "metadata.labels.app", "op": "NOT_IN", "values": ["web"]},
        lambda p: APP(p) != "web",
    ),
    (
        "prefix",
        {"field": "metadata.name", "op": "PREFIX", "value": "api-0"},
        lambda p: p["metadata"]["name"].startswith("api-0"),
    ),
    (
        "contains",
        {"field": "metadata.name", "op": "CONTAINS", "value": "zz"},
        lambda p: "zz" in p["metadata"]["name"],
    ),
    ("exists", {"field": "spec.nodeName", "op": "EXISTS"}, lambda p: NODE(p) is not None),
    (
        "not exists",
        {"field": "metadata.labels.canary", "op": "EXISTS", "value": "false"},
        lambda p: CANARY(p) is None,
    ),
    (
        "lt number",
        {"field": "spec.priority", "op": "LT", "value": "0"},
        lambda p: PRIORITY(p) is not None and PRIORITY(p) < 0,
    ),
    (
        "gte number",
        {"field": "spec.priority", "op": "GTE", "value": "2000"},
        lambda p: PRIORITY(p) is not None and PRIORITY(p) >= 2000,
    ),
    (
        "lte time (another zone's notation)",
        {"field": "status.startTime", "op": "LTE", "value": "2026-05-15T02:00:00+02:00"},
        lambda p: STARTED(p) is not None and STARTED(p) <= "2026-05-15T00:00:00Z",
    ),
    (
        "gt time",
        {"field": "status.startTime", "op": "GT", "value": "2026-03-01T00:00:00Z"},
        lambda p: STARTED(p) is not None and STARTED(p) > "2026-03-01T00:00:00Z",
    ),
    (
        "and/or/not",
        {
            "or": [
                {
                    "and": [
                        {"field": "status.phase", "value": "Running"},
                        {"not": {"field": "metadata.labels.app", "value": "db"}},
                    ]
                },
                {"field": "metadata.labels.canary", "op": "EXISTS"},
            ]
        },
        lambda p: (PHASE(p) == "Running" and APP(p) != "db") or CANARY(p) is not None,
    ),
    (
        "labelSelector",
        {"labelSelector": "app in (web,api),!canary"},
        lambda p: APP(p) in ("web", "api") and CANARY(p) is None,
    ),
    (
        "fieldSelector",
        {"fieldSelector": "status.phase!=Running,spec.nodeName=node-b"},
        lambda p: PHASE(p) != "Running" and NODE(p) == "node-b",
    ),
]

SORTS: list[list[tuple[str, bool]]] = [
    [],
    [("status.startTime", True)],
    [("spec.priority", False), ("metadata.name", True)],
    [("spec.nodeName", True)],
]


async def test_every_operator_and_sort_pages_through_exactly_the_tests_own_answer(
    http: httpx.AsyncClient, pods: list[dict[str, Any]]
) -> None:
    for label, where, test in CASES:
        for keys in SORTS:
            for namespace in (NAMESPACE, None):
                sort = [{"field": f, "order": "DESC" if d else "ASC"} for f, d in keys]
                names, total, _ = await _walk(
                    http, {"ns": namespace, "filter": where, "sort": sort, "first": 7}
                )
                expected = _names(_sorted([p for p in _ns(pods, namespace) if test(p)], keys))
                assert expected, label  # every case selects something
                assert names == expected, (label, keys, namespace)
                assert total == len(expected)
