"""The view caches against the demo upstream over real sockets: a cache follows the hub's
upstream watch, reads its caller's own writes (``minResourceVersion``), says clearly when a
version does not come, and is shared by the views of one caller and one list."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from gateway.core import POD, errors, schema
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from gateway.core.views.cache import Views
from gateway.core.views.spec import ViewSpec, decode_cursor, view_spec
from gateway.core.watch.hub import WatchHub
from gateway.core.watch.watcher import Backoff
from kube_gateway_demo import DemoUpstream

ADMIN = Credential("admin-token")
NS = "views"
MODEL = schema.seed_model()


@pytest.fixture
async def views() -> AsyncIterator[tuple[DemoUpstream, Views]]:
    async with DemoUpstream(seed=False) as demo:
        await demo.store.ensure_namespace(NS)
        async with build_http_client(UpstreamConfig(server=demo.url, source="demo")) as http:
            hub = WatchHub(KubeAdapter(http), backoff=Backoff(initial=0.01, cap=0.05), linger=0)
            cached = Views(hub, version_wait=0.5)
            try:
                yield demo, cached
            finally:
                await cached.aclose()
                await hub.aclose()


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def _spec(**more: Any) -> ViewSpec:
    kind = MODEL.kind_type("", "v1", "Pod")
    return view_spec(POD, kind, MODEL.object_type, namespace=NS, **more)


async def test_a_view_reads_its_own_write_and_a_version_that_never_comes_times_out(
    views: tuple[DemoUpstream, Views],
) -> None:
    demo, cached = views
    first = await cached.page(_spec(), ADMIN)
    assert first.total == 0 and first.items == []  # an empty list is ready at once
    made = await demo.store.create(POD, _pod("mine"), namespace=NS)
    version = made["metadata"]["resourceVersion"]
    seen = await cached.page(_spec(min_resource_version=version), ADMIN)
    assert [p["metadata"]["name"] for p in seen.items] == ["mine"]
    assert int(seen.resource_version) >= int(version)
    (cache,) = cached.caches  # one cache for the caller's views of the list
    far = str(int(version) + 1_000_000)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(errors.Timeout) as refused:
        await cached.page(_spec(min_resource_version=far), ADMIN)
    assert loop.time() - started < 10
    assert f"did not reach resourceVersion {far} within 0.5 s" in refused.value.message
    assert cached.caches == [cache]  # the cache is fine; only that answer is refused
    counted = await cached.counts(
        _spec(), _spec(sort=[{"field": "metadata.name"}]).sort[0].path, ADMIN
    )
    assert counted[0] == 1 and [(c.value, c.count) for c in counted[2]] == [("mine", 1)]


async def test_views_of_one_list_share_an_order_per_version(
    views: tuple[DemoUpstream, Views],
) -> None:
    demo, cached = views
    for i in range(30):
        await demo.store.create(POD, _pod(f"p{i:02d}"), namespace=NS)
    spec = _spec(sort=[{"field": "metadata.name", "order": "desc"}], first=10,
                 min_resource_version=demo.store.resource_version)  # fmt: skip
    before = cached.stats.evaluations
    pages = await asyncio.gather(*(cached.page(spec, ADMIN) for _ in range(20)))
    assert {tuple(p["metadata"]["name"] for p in page.items) for page in pages} == {
        tuple(f"p{i:02d}" for i in range(29, 19, -1))
    }
    assert cached.stats.evaluations - before == 1  # twenty callers, one evaluation
    # the next page by cursor reuses it too
    nxt = await cached.page(replace(spec, after=_after(spec, pages[0].end_cursor)), ADMIN)
    assert [p["metadata"]["name"] for p in nxt.items] == [f"p{i:02d}" for i in range(19, 9, -1)]
    assert cached.stats.evaluations - before == 1


def _after(spec: ViewSpec, cursor: str | None) -> Any:

    assert cursor is not None
    return decode_cursor(spec.sort, cursor)
