"""Views against the real kube-apiserver: the differential test of issue 29, and RBAC.

A few hundred pods with varied names, labels, annotations, node names and deadlines; every
view (filters, searches, sorts, page sizes; all pages concatenated) equals the test's own
filter and sort of a consistent list read from the apiserver at exactly the view's
resourceVersion (``resourceVersionMatch=Exact``).  Then again while the test changes
objects concurrently: every object unchanged during the walk appears exactly once across
the pages.  alice (namespace ``team-a`` only) never sees another namespace through a view
or a count.  A live view (the view as a subscription) under churn: every update equals the
test's own filter and sort of a consistent list at the update's resourceVersion.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.e2e.apiserver import KubeAPIServer
from tests.support.graphql import TransportWS, serve_app

NS = "views-e2e"
ALICE_NS = "team-a"
PODS = 240
ALICE_PODS = 30
APPS = ("web", "api", "db", "cache")
NODES = ("node-1", "node-2", "node-3")


def _pod(i: int, prefix: str = "p") -> dict[str, Any]:
    rnd = random.Random(i)
    app = rnd.choice(APPS)
    labels = {"app": app, "tier": rnd.choice(("front", "back")), "n": str(i)}
    if i % 7 == 0:
        labels["canary"] = "yes"
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": f"example.com/{app}:{i % 5}"}]}
    if i % 3:
        spec["activeDeadlineSeconds"] = rnd.randint(1, 50) * 60
    if i % 4 == 0:
        spec["nodeName"] = rnd.choice(NODES)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{prefix}-{app}-{rnd.randrange(10**6):06d}-{i}",
            "labels": labels,
            "annotations": {"owner": rnd.choice(("Team-Red", "team-blue", "ops"))},
        },
        "spec": spec,
    }


async def _create(kube: httpx.AsyncClient, namespace: str, pods: list[dict[str, Any]]) -> None:
    limit = asyncio.Semaphore(16)

    async def one(body: dict[str, Any]) -> None:
        async with limit:
            made = await kube.post(f"/api/v1/namespaces/{namespace}/pods", json=body)
            assert made.status_code == 201, made.text[:300]

    await asyncio.gather(*(one(p) for p in pods))


async def _delete_all(kube: httpx.AsyncClient, namespace: str, prefix: str) -> None:
    listed = (await kube.get(f"/api/v1/namespaces/{namespace}/pods")).json()["items"]
    limit = asyncio.Semaphore(16)

    async def one(name: str) -> None:
        async with limit:
            await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds=0")

    await asyncio.gather(
        *(one(p["metadata"]["name"]) for p in listed if p["metadata"]["name"].startswith(prefix))
    )


@pytest.fixture
async def kube(kube_apiserver: KubeAPIServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=kube_apiserver.url,
        verify=kube_apiserver.ssl_context(),
        headers=kube_apiserver.headers("admin"),
        timeout=60,
    ) as client:
        made = await client.post(
            "/api/v1/namespaces",
            json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        assert made.status_code in (201, 409), made.text
        await _create(client, NS, [_pod(i) for i in range(PODS)])
        await _create(client, ALICE_NS, [_pod(i, "alice") for i in range(ALICE_PODS)])
        try:
            yield client
        finally:  # the namespaces stay: no namespace controller runs here to finish them
            await _delete_all(client, NS, "")
            await _delete_all(client, ALICE_NS, "alice-")


@pytest.fixture
async def gateway(kube_apiserver: KubeAPIServer, kube: httpx.AsyncClient) -> AsyncIterator[str]:
    async with serve_app(kube_apiserver.gateway_settings()) as (url, _app):
        yield url


VIEW = """query($ns: String, $filter: ViewFilter, $search: String, $sort: [ViewSort!],
                $first: Int, $after: String) {
  podsView(namespace: $ns, filter: $filter, search: $search, sort: $sort, first: $first,
           after: $after) {
    total resourceVersion pageInfo { hasNextPage endCursor }
    nodes { metadata { namespace name resourceVersion } }
  }
}"""


async def _walk(
    http: httpx.AsyncClient, token: str, variables: dict[str, Any]
) -> tuple[list[str], set[str], int, list[str]]:
    """All pages: names in order, the resourceVersions answered, the last total, and the
    (name, resourceVersion) of every item."""
    names: list[str] = []
    versions: set[str] = set()
    seen: list[str] = []
    after = None
    total = -1
    for _ in range(1000):
        response = await http.post(
            "/graphql",
            json={"query": VIEW, "variables": {**variables, "after": after}},
            headers={"Authorization": f"Bearer {token}"},
        )
        body = response.json()
        assert "errors" not in body, body
        view = body["data"]["podsView"]
        versions.add(view["resourceVersion"])
        total = view["total"]
        for node in view["nodes"]:
            meta = node["metadata"]
            names.append(f"{meta['namespace']}/{meta['name']}")
            seen.append(f"{meta['namespace']}/{meta['name']}@{meta['resourceVersion']}")
        if not view["pageInfo"]["hasNextPage"]:
            return names, versions, total, seen
        after = view["pageInfo"]["endCursor"]
    raise AssertionError("the pages never ended")


def _read(obj: Any, path: str) -> Any:
    if path.startswith("metadata.labels."):
        return (obj["metadata"].get("labels") or {}).get(path[len("metadata.labels.") :])
    for key in path.split("."):
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _order(items: list[dict[str, Any]], keys: list[tuple[str, bool]]) -> list[str]:
    out = sorted(items, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
    for path, desc in reversed(keys):
        present = [p for p in out if _read(p, path) is not None]
        absent = [p for p in out if _read(p, path) is None]
        present.sort(key=lambda p, path=path: _read(p, path), reverse=desc)
        out = present + absent if desc else absent + present
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in out]


def _searched(p: dict[str, Any], text: str) -> bool:
    meta = p["metadata"]
    parts = [meta["name"], meta["namespace"]]
    for key in ("labels", "annotations"):
        parts += [f"{k}={v}" for k, v in (meta.get(key) or {}).items()]
    return text.lower() in "\n".join(parts).lower()


Where = Callable[[dict[str, Any]], bool]
VIEWS: list[tuple[dict[str, Any], Where, list[tuple[str, bool]], str | None, int]] = [
    ({}, lambda p: True, [], None, 37),
    (
        {"field": "metadata.labels.app", "op": "IN", "values": ["web", "db"]},
        lambda p: _read(p, "metadata.labels.app") in ("web", "db"),
        [("spec.activeDeadlineSeconds", True)],
        None,
        10,
    ),
    (
        {"field": "spec.activeDeadlineSeconds", "op": "GTE", "value": "1500"},
        lambda p: (_read(p, "spec.activeDeadlineSeconds") or 0) >= 1500,
        [("metadata.labels.tier", False), ("metadata.name", True)],
        None,
        25,
    ),
    (
        {"or": [{"labelSelector": "canary"}, {"field": "spec.nodeName", "op": "EXISTS"}]},
        lambda p: "canary" in p["metadata"]["labels"] or _read(p, "spec.nodeName") is not None,
        [("spec.nodeName", False)],
        None,
        8,
    ),
    (
        {"not": {"field": "metadata.name", "op": "CONTAINS", "value": "-api-"}},
        lambda p: "-api-" not in p["metadata"]["name"],
        [("metadata.creationTimestamp", True)],
        "team-",
        50,
    ),
    (
        {"fieldSelector": "spec.nodeName!=node-1"},
        lambda p: _read(p, "spec.nodeName") != "node-1",
        [("metadata.labels.n", False)],
        None,
        500,
    ),
]


async def _consistent(kube: httpx.AsyncClient, version: str) -> list[dict[str, Any]]:
    listed = await kube.get(
        f"/api/v1/namespaces/{NS}/pods",
        params={"resourceVersion": version, "resourceVersionMatch": "Exact"},
    )
    assert listed.status_code == 200, listed.text[:300]
    items: list[dict[str, Any]] = listed.json()["items"]
    for p in items:
        p["metadata"]["namespace"] = NS
    return items


async def test_every_view_equals_the_tests_own_filter_and_sort_of_a_consistent_list(
    kube_apiserver: KubeAPIServer, kube: httpx.AsyncClient, gateway: str
) -> None:
    admin = kube_apiserver.tokens["admin"]
    async with httpx.AsyncClient(base_url=gateway, timeout=60) as http:
        for where, test, keys, search, first in VIEWS:
            sort = [{"field": f, "order": "DESC" if d else "ASC"} for f, d in keys]
            variables = {"ns": NS, "filter": where or None, "sort": sort, "first": first}
            if search:
                variables["search"] = search
            names, versions, total, _ = await _walk(http, admin, variables)
            assert len(versions) == 1, versions  # nothing changed: one version throughout
            (version,) = versions
            items = await _consistent(kube, version)
            assert len(items) == PODS
            chosen = [p for p in items if test(p) and (not search or _searched(p, search))]
            expected = _order(chosen, keys)
            assert expected, (where, search)
            assert names == expected, (where, keys, search)
            assert total == len(expected)


async def test_under_churn_every_unchanged_object_appears_exactly_once(
    kube_apiserver: KubeAPIServer, kube: httpx.AsyncClient, gateway: str
) -> None:
    admin = kube_apiserver.tokens["admin"]
    before = {
        p["metadata"]["name"]: p["metadata"]["resourceVersion"]
        for p in (await kube.get(f"/api/v1/namespaces/{NS}/pods")).json()["items"]
    }
    names = sorted(before)
    rnd = random.Random(29)
    async with httpx.AsyncClient(base_url=gateway, timeout=60) as http:
        for keys in ([("metadata.name", False)], [("metadata.labels.app", True)]):
            await _walk(http, admin, {"ns": NS, "first": 5})  # the cache is warm
            stop = asyncio.Event()

            async def churn(prefix: str, stop: asyncio.Event, names: list[str]) -> int:
                changes = 0
                i = 0
                while not stop.is_set():
                    i += 1
                    victim = rnd.choice(names)
                    action = i % 3
                    if action == 0:
                        await kube.delete(
                            f"/api/v1/namespaces/{NS}/pods/{victim}?gracePeriodSeconds=0"
                        )
                    elif action == 1:
                        await kube.post(
                            f"/api/v1/namespaces/{NS}/pods", json=_pod(10_000 + i, prefix)
                        )
                    else:
                        await kube.patch(
                            f"/api/v1/namespaces/{NS}/pods/{victim}",
                            json={"metadata": {"labels": {"app": rnd.choice(APPS)}}},
                            headers={"Content-Type": "application/merge-patch+json"},
                        )
                    changes += 1
                return changes

            sort = [{"field": f, "order": "DESC" if d else "ASC"} for f, d in keys]
            worker = asyncio.create_task(churn(f"churn{len(keys)}{keys[0][1]:d}", stop, names))
            try:
                walked, versions, _, _ = await _walk(
                    http, admin, {"ns": NS, "sort": sort, "first": 7}
                )
            finally:
                stop.set()
                changes = await worker
            after = {
                p["metadata"]["name"]: p["metadata"]["resourceVersion"]
                for p in (await kube.get(f"/api/v1/namespaces/{NS}/pods")).json()["items"]
            }
            unchanged = {n for n, rv in before.items() if after.get(n) == rv}
            assert changes > 0 and len(versions) > 1  # the walk did run under churn
            for name in unchanged:
                assert walked.count(f"{NS}/{name}") == 1, name
            assert len(walked) == len(set(walked)) or keys[0][0] != "metadata.name"
            before = after
            names = sorted(after)


async def test_alice_never_sees_another_namespace_through_a_view_or_a_count(
    kube_apiserver: KubeAPIServer, kube: httpx.AsyncClient, gateway: str
) -> None:
    alice = kube_apiserver.tokens["alice"]
    theirs = (await kube.get(f"/api/v1/namespaces/{ALICE_NS}/pods")).json()["items"]
    for p in theirs:
        p["metadata"]["namespace"] = ALICE_NS
    async with httpx.AsyncClient(base_url=gateway, timeout=60) as http:
        names, _, total, _ = await _walk(http, alice, {"ns": ALICE_NS, "first": 11})
        assert names == _order(theirs, []) and total == len(theirs)
        counts = """query($ns: String) { podsView(namespace: $ns, first: 0) {
            total counts(groupBy: "metadata.namespace") { value count } } }"""
        mine = (
            await http.post(
                "/graphql",
                json={"query": counts, "variables": {"ns": ALICE_NS}},
                headers={"Authorization": f"Bearer {alice}"},
            )
        ).json()
        assert mine["data"]["podsView"]["counts"] == [{"value": ALICE_NS, "count": len(theirs)}]
        for namespace in (None, NS, "kube-system"):
            for query in (VIEW, counts):
                refused = (
                    await http.post(
                        "/graphql",
                        json={"query": query, "variables": {"ns": namespace}},
                        headers={"Authorization": f"Bearer {alice}"},
                    )
                ).json()
                assert refused["data"] == {"podsView": None}, refused
                (error,) = refused["errors"]
                assert error["extensions"]["code"] == "FORBIDDEN", error
                assert "pods is forbidden" in error["message"], error
                if namespace is None:
                    assert "ask for a view of one namespace" in error["message"]


LIVE = """subscription($ns: String, $sort: [ViewSort!], $first: Int) {
  podsView(namespace: $ns, sort: $sort, first: $first) {
    total resourceVersion
    nodes { metadata { namespace name resourceVersion } }
  }
}"""


async def test_a_live_view_under_churn_equals_a_consistent_list_at_each_update(
    kube_apiserver: KubeAPIServer, kube: httpx.AsyncClient, gateway: str
) -> None:
    keys = [("metadata.labels.app", True)]
    first = 20
    rnd = random.Random(292)
    url = gateway.replace("http://", "ws://") + "/graphql"
    async with connect(url, subprotocols=["graphql-transport-ws"]) as socket:  # type: ignore[list-item]
        ws = TransportWS(socket)
        await ws.send({"type": "connection_init", "payload": kube_apiserver.headers("admin")})
        assert (await ws.recv(60))["type"] == "connection_ack"
        op = await ws.subscribe(
            LIVE, {"ns": NS, "sort": [{"field": keys[0][0], "order": "DESC"}], "first": first}
        )
        updates = [(await ws.next(op, 60))["data"]["podsView"]]
        names = [
            p["metadata"]["name"]
            for p in (await kube.get(f"/api/v1/namespaces/{NS}/pods")).json()["items"]
        ]

        async def churn() -> None:
            for i in range(90):
                victim = rnd.choice(names)
                if i % 3 == 0:
                    await kube.delete(f"/api/v1/namespaces/{NS}/pods/{victim}?gracePeriodSeconds=0")
                elif i % 3 == 1:
                    await kube.post(f"/api/v1/namespaces/{NS}/pods", json=_pod(20_000 + i, "live"))
                else:
                    await kube.patch(
                        f"/api/v1/namespaces/{NS}/pods/{victim}",
                        json={"metadata": {"labels": {"app": rnd.choice(APPS)}}},
                        headers={"Content-Type": "application/merge-patch+json"},
                    )
            # the last change is visible for sure: first in the order
            final = _pod(29_999, "live")
            final["metadata"]["labels"]["app"] = "zzz"
            made = await kube.post(f"/api/v1/namespaces/{NS}/pods", json=final)
            assert made.status_code == 201, made.text[:300]

        worker = asyncio.create_task(churn())
        try:
            while True:
                view = (await ws.next(op, 60))["data"]["podsView"]
                updates.append(view)
                if view["nodes"] and view["nodes"][0]["metadata"]["name"].endswith("-29999"):
                    break
        finally:
            await worker
    # the page at once and the last change at least: coalescing (--live-view-interval-ms)
    # may fold every change of the churn into the update that carries the last one
    assert len(updates) >= 2
    for view in updates:
        items = await _consistent(kube, view["resourceVersion"])
        expected = _order(items, keys)
        assert view["total"] == len(items)
        got = [f"{n['metadata']['namespace']}/{n['metadata']['name']}" for n in view["nodes"]]
        assert got == expected[:first]
        versions = {
            f"{NS}/{p['metadata']['name']}": p["metadata"]["resourceVersion"] for p in items
        }
        for n in view["nodes"]:
            meta = n["metadata"]
            assert versions[f"{meta['namespace']}/{meta['name']}"] == meta["resourceVersion"]
