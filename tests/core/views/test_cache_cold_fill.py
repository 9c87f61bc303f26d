"""The first (cold) view of a kind filled by a list worker (gateway.core.lists.compacting):
the hub's initial list made compact in a worker process, which also reads the first view's
columns, so the gateway's event loop only copies bytes out of the worker's answer.

Against the demo upstream in a child process (its serialisation of the list is not this
loop's), two hubs over real sockets: one whose adapter has a list worker, one without (the
gateway's own decode, encoding and column build).  The hub's state holds the very same
JSON either way (the demo writes JSON as orjson does), every view answers the same, and
the event loop is never held long while the worker's answer is taken in.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.core import POD, schema
from gateway.core.lists.compacting import PART_ITEMS
from gateway.core.lists.large import LargeLists
from gateway.core.lists.pool import ListWorkers
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from gateway.core.views.cache import Views
from gateway.core.views.spec import ViewSpec, resolve_path, view_spec
from gateway.core.watch.compact import CompactState
from gateway.core.watch.hub import WatchHub, WatchStart, WatchTarget
from gateway.core.watch.watcher import Backoff
from kube_gateway_demo import DemoUpstream
from tests.core.views.test_store import _ticker
from tests.support.collector import frozen_heap
from tests.support.demo_process import demo_process, realistic_pod

ADMIN = Credential("admin-token")
NS = "cold"
PODS = 3000  # ~15 MB of JSON: a large list, which goes to a worker
MODEL = schema.seed_model()
KIND = MODEL.kind_type("", "v1", "Pod")


def _spec(**view: Any) -> ViewSpec:
    return view_spec(POD, KIND, MODEL.object_type, namespace=NS, **view)


#: The first view (its columns read by the worker), then views of other fields (their
#: columns built by decoding each object, as before).
FIRST = {
    "first": 100,
    "filter": {"field": "metadata.name", "op": "contains", "value": "1"},
    "sort": [{"field": "status.startTime", "order": "desc"}],
}
OTHERS = [
    {"first": 500, "sort": [{"field": "metadata.name", "order": "asc"}]},
    {
        "first": 200,
        "filter": {
            "or": [
                {"field": "status.phase", "op": "eq", "value": "Running"},
                {"labelSelector": "app in (web, api)"},
            ]
        },
        "sort": [{"field": "spec.nodeName"}, {"field": "status.startTime", "order": "desc"}],
    },
    {"first": 300, "search": "web"},
]


@contextlib.asynccontextmanager
async def _views(
    url: str, workers: ListWorkers | None, limit: int = PODS + 1
) -> AsyncIterator[tuple[WatchHub, Views]]:
    async with build_http_client(UpstreamConfig(server=url, source="demo")) as http:
        adapter = KubeAdapter(http, max_list_items=limit, large_lists=LargeLists(workers))
        hub = WatchHub(adapter, backoff=Backoff(initial=0.01, cap=0.05), linger=0)
        cached = Views(hub, idle=60)
        try:
            yield hub, cached
        finally:
            await cached.aclose()
            await hub.aclose()
            if workers is not None:
                await workers.aclose()


async def _walk(cached: Views, view: dict[str, Any]) -> tuple[Any, ...]:
    """Every page of a view, concatenated: (total, each item's namespace/name and phase)."""
    items: list[tuple[str, str, Any]] = []
    after = None
    while True:
        page = await cached.page(_spec(after=after, **view), ADMIN)
        for item in page.items:
            meta = item["metadata"]
            items.append((meta["namespace"], meta["name"], item["status"].get("phase")))
        if not page.has_next:
            return page.total, items
        after = page.cursors[-1]


async def _answers(cached: Views) -> list[Any]:
    found = [await _walk(cached, view) for view in [FIRST, *OTHERS]]
    by = resolve_path(KIND, "status.phase", MODEL.object_type)
    total, _, groups = await cached.counts(_spec(first=0), by, ADMIN)
    found.append((total, sorted((g.value or "", g.count) for g in groups)))
    return found


def _state(hub: WatchHub) -> CompactState:
    (upstream,) = hub.upstreams
    state = upstream.watcher.state
    assert isinstance(state, CompactState)
    return state


async def test_a_cold_view_filled_by_a_worker_answers_as_the_gateways_own_fill() -> None:
    async with demo_process(PODS, NS) as url:
        async with _views(url, None) as (own_hub, own):
            theirs = await _answers(own)
            own_json = dict(_state(own_hub).raw_items())
        workers = ListWorkers(1)
        async with _views(url, workers) as (hub, cached):
            with frozen_heap():  # the suite's own objects are not the fill's to walk
                async with _ticker() as ticks:
                    first = await _walk(cached, FIRST)
            assert workers.projected == 1  # the list went to the worker, and it answered
            (cache,) = cached.caches
            # every object's columns of the first view came from the worker, none decoded
            assert cache.store.listed_taken == PODS
            # every entry made as the worker's answer was taken in, none after it
            assert cache.store.made_taken == PODS
            assert cache.store.listed is None  # taken by the first build, then dropped
            ours = [first, *(await _answers(cached))[1:]]
            json = dict(_state(hub).raw_items())
    assert first[0] > 100 and len(first[1]) == first[0]  # several pages
    assert ours == theirs
    # the very JSON the gateway's own compaction keeps (the demo writes it as orjson does)
    assert json == own_json and len(json) == PODS
    # the loop, while the worker's answer was taken in and the view answered: no step of
    # it over 50 ms of CPU (measured: 11 ms, 13 ms late at most), and in wall time never seconds
    held = max(cpu for _, cpu in ticks)
    assert held < 0.05, f"the event loop ran {held * 1000:.0f} ms between two ticks"
    late = max(wall for wall, _ in ticks)
    assert late < 2.0, f"the event loop stalled {late * 1000:.0f} ms"


async def test_a_view_of_a_kind_already_watched_decodes_its_columns_as_before() -> None:
    """A hub watch opened by someone else (no columns asked) has nothing listed to take:
    the view's columns are built by decoding each object, and answer the same."""
    async with demo_process(600, NS) as url:
        workers = ListWorkers(1)
        async with _views(url, workers) as (hub, cached):
            other = await hub.subscribe(WatchTarget(POD, NS), WatchStart("snapshot"), ADMIN)
            try:
                page = await cached.page(_spec(**FIRST), ADMIN)
                (cache,) = cached.caches
                assert cache.store.listed_taken == cache.store.made_taken == 0
                assert page.total == sum(1 for i in range(600) if "1" in _name(i))
            finally:
                other.close()
            await asyncio.sleep(0)


def _name(i: int) -> str:
    return str(realistic_pod(i, NS)["metadata"]["name"])


@pytest.mark.parametrize("paged", [False, True])
async def test_a_list_in_parts_and_pages_fills_the_cold_view_as_the_gateways_own_fill(
    paged: bool,
) -> None:
    """A list past one part of the worker's answer (PART_ITEMS objects), in one page or in
    two (the second listed while the first's parts are still coming, one worker): the
    hub's JSON, the columns the worker read and every view as the gateway's own fill."""
    n = 3 * PART_ITEMS + 111
    pods = [
        {
            "metadata": {"name": f"p-{i}", "labels": {"app": ("web", "api", "db")[i % 3]}},
            "spec": {"nodeName": f"node-{i % 7}", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": ("Running", "Pending")[i % 2], "startTime": _start(i)},
        }
        for i in range(n)
    ]
    async with DemoUpstream(seed=False) as demo:
        await demo.store.bulk_create(POD, pods, namespace=NS)
        limit = 2 * PART_ITEMS - 500 if paged else n + 1  # two pages of two parts each
        async with _views(demo.url, None, limit) as (own_hub, own):
            theirs = await _answers(own)
            own_json = dict(_state(own_hub).raw_items())
        workers = ListWorkers(1)
        async with _views(demo.url, workers, limit) as (hub, cached):
            first = await _walk(cached, FIRST)
            (cache,) = cached.caches
            assert cache.store.listed_taken == n  # every object's columns from the worker
            assert cache.store.made_taken == n  # and its entry made as the parts came
            ours = [first, *(await _answers(cached))[1:]]
            json = dict(_state(hub).raw_items())
        assert workers.projected == (2 if paged else 1)
    assert ours == theirs
    assert json == own_json and len(json) == n


def _start(i: int) -> str:
    return f"2026-11-{i % 28 + 1:02d}T{i % 24:02d}:{i % 60:02d}:00Z"
