"""gRPC views (``ResourceService.View``) against the real kube-apiserver.

The differential test of ``test_views_e2e.py`` (whose pods, views and own evaluation this
module reuses) through a real gRPC client: every view, all pages concatenated, equals the
test's own filter and sort of a list read from the apiserver at exactly the view's
resourceVersion; its counts equal the test's own.  alice (``team-a`` only) is served hers and
refused the rest, ``PERMISSION_DENIED``, counts included.  A live view (``WatchView``) under
churn equals, at each update, a list read at exactly that update's resourceVersion.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import grpc
import orjson
import pytest

from gateway.grpc.gen.kubegateway.v1 import resource_pb2, resource_pb2_grpc
from tests.e2e import test_views_e2e as e2e
from tests.e2e.apiserver import KubeAPIServer
from tests.grpc.test_views_grpc import request
from tests.support.graphql import serve_app

__all__ = ["kube"]  # fixtures

kube = e2e.kube
NS, ALICE_NS, PODS = e2e.NS, e2e.ALICE_NS, e2e.PODS


@pytest.fixture
async def stub(
    kube_apiserver: KubeAPIServer, kube: Any
) -> AsyncIterator[resource_pb2_grpc.ResourceServiceStub]:
    async with serve_app(kube_apiserver.gateway_settings()) as (_url, app):
        port = app.state.runtime.grpc_port
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield resource_pb2_grpc.ResourceServiceStub(channel)


async def _walk(
    stub: resource_pb2_grpc.ResourceServiceStub, token: str, **variables: Any
) -> tuple[list[str], set[str], int]:
    names: list[str] = []
    versions: set[str] = set()
    after = None
    for _ in range(1000):
        view = await stub.View(
            request(**variables, after=after),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=60,
        )
        versions.add(view.resource_version)
        for edge in view.edges:
            meta = orjson.loads(edge.object.json)["metadata"]
            names.append(f"{meta['namespace']}/{meta['name']}")
        if not view.page_info.has_next_page:
            return names, versions, view.total
        after = view.page_info.end_cursor
    raise AssertionError("the pages never ended")


async def test_every_grpc_view_equals_the_tests_own_filter_and_sort_of_a_consistent_list(
    kube_apiserver: KubeAPIServer, kube: Any, stub: resource_pb2_grpc.ResourceServiceStub
) -> None:
    admin = kube_apiserver.tokens["admin"]
    for where, test, keys, search, first in e2e.VIEWS:
        sort = [{"field": f, "order": "DESC" if d else "ASC"} for f, d in keys]
        names, versions, total = await _walk(
            stub, admin, ns=NS, filter=where or None, sort=sort, first=first, search=search
        )
        assert len(versions) == 1, versions  # nothing changed: one version throughout
        (version,) = versions
        items = await e2e._consistent(kube, version)
        assert len(items) == PODS
        chosen = [p for p in items if test(p) and (not search or e2e._searched(p, search))]
        expected = e2e._order(chosen, keys)
        assert expected, (where, search)
        assert names == expected, (where, keys, search)
        assert total == len(expected)
        # the counts of the same view, at the same version, by a label
        counted = await stub.View(
            request(
                ns=NS,
                filter=where or None,
                search=search,
                first=0,
                min=version,
                count_by=["metadata.labels.app"],
            ),
            metadata=(("authorization", f"Bearer {admin}"),),
            timeout=60,
        )
        # compared with a consistent list at the counts' own version (bookmarks may move it)
        at = await e2e._consistent(kube, counted.resource_version)
        own: dict[str, int] = {}
        for p in at:
            if test(p) and (not search or e2e._searched(p, search)):
                app = p["metadata"]["labels"]["app"]
                own[app] = own.get(app, 0) + 1
        assert {c.value: c.count for c in counted.counts[0].counts} == own
        assert counted.total == sum(own.values()) == len(expected)


async def test_alice_is_served_her_namespace_and_refused_the_rest_over_grpc(
    kube_apiserver: KubeAPIServer, kube: Any, stub: resource_pb2_grpc.ResourceServiceStub
) -> None:
    alice = kube_apiserver.tokens["alice"]
    theirs = (await kube.get(f"/api/v1/namespaces/{ALICE_NS}/pods")).json()["items"]
    for p in theirs:
        p["metadata"]["namespace"] = ALICE_NS
    names, _, total = await _walk(stub, alice, ns=ALICE_NS, first=11)
    assert names == e2e._order(theirs, []) and total == len(theirs)
    for namespace in (None, NS):
        for req in (
            request(ns=namespace),
            request(ns=namespace, first=0, count_by=["metadata.namespace"]),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.View(req, metadata=(("authorization", f"Bearer {alice}"),), timeout=60)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            details = refused.value.details() or ""
            assert NS not in details or namespace == NS


async def test_a_grpc_live_view_under_churn_equals_a_consistent_list_at_each_update(
    kube_apiserver: KubeAPIServer, kube: Any, stub: resource_pb2_grpc.ResourceServiceStub
) -> None:
    keys = [("metadata.labels.app", True)]
    first = 20
    rnd = random.Random(2929)
    admin = (("authorization", f"Bearer {kube_apiserver.tokens['admin']}"),)
    live = resource_pb2.WatchViewRequest()
    live.view.CopyFrom(
        request(
            ns=NS,
            sort=[{"field": keys[0][0], "order": "DESC"}],
            first=first,
            mask=["metadata.namespace", "metadata.name", "metadata.resourceVersion"],
        )
    )
    call = stub.WatchView(live, metadata=admin, timeout=600)
    updates = [await call.read()]
    names = [
        p["metadata"]["name"]
        for p in (await kube.get(f"/api/v1/namespaces/{NS}/pods")).json()["items"]
    ]

    async def churn() -> None:
        for i in range(60):
            victim = rnd.choice(names)
            if i % 3 == 0:
                await kube.delete(f"/api/v1/namespaces/{NS}/pods/{victim}?gracePeriodSeconds=0")
            elif i % 3 == 1:
                await kube.post(f"/api/v1/namespaces/{NS}/pods", json=e2e._pod(21_000 + i, "glive"))
            else:
                await kube.patch(
                    f"/api/v1/namespaces/{NS}/pods/{victim}",
                    json={"metadata": {"labels": {"app": rnd.choice(e2e.APPS)}}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
        # the last change is visible for sure: first in the order
        final = e2e._pod(21_999, "glive")
        final["metadata"]["labels"]["app"] = "zzz"
        made = await kube.post(f"/api/v1/namespaces/{NS}/pods", json=final)
        assert made.status_code == 201, made.text[:300]

    worker = asyncio.create_task(churn())
    try:
        while True:
            async with asyncio.timeout(60):
                view = await call.read()
            updates.append(view)
            top = orjson.loads(view.edges[0].object.json)["metadata"]["name"] if view.edges else ""
            if top.endswith("-21999"):
                break
    finally:
        await worker
        call.cancel()
    # the page at once and the last change at least (coalescing may fold every change of
    # the churn into fewer updates, down to the last one on a slow machine)
    assert len(updates) >= 2
    for view in updates:
        items = await e2e._consistent(kube, view.resource_version)
        expected = e2e._order(items, keys)
        assert view.total == len(items)
        shown = [orjson.loads(edge.object.json)["metadata"] for edge in view.edges]
        assert [f"{m['namespace']}/{m['name']}" for m in shown] == expected[:first]
        versions = {
            f"{NS}/{p['metadata']['name']}": p["metadata"]["resourceVersion"] for p in items
        }
        for m in shown:
            assert versions[f"{m['namespace']}/{m['name']}"] == m["resourceVersion"]
    # alice may not watch this namespace: refused at once
    alice = (("authorization", f"Bearer {kube_apiserver.tokens['alice']}"),)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.WatchView(live, metadata=alice, timeout=60).read()
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
