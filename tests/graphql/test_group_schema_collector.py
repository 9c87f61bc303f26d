"""Group schema builds and the cyclic garbage collector, as ``kube-gateway serve`` runs them
(the process's heap frozen, each build frozen out of the collector in steps:
``gateway/graphql/engine/collector.py``), against the demo upstream with a wide CRD of its
own (a group schema of some 10^5 objects, as a large real operator's):

* churn (the group built, used, given back and dismantled, again and again, with requests
  in flight through every build) leaves nothing behind that only a cyclic collection could
  free, which the serving process would never run on frozen objects (issue 31, goal 3);
* no collection during a build walks more than a step of the young objects, so the event
  loop is never held for a walk of the whole schema (goal 4).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import GC_THRESHOLDS
from gateway.graphql.endpoints.live import LiveSchema
from gateway.graphql.engine.collector import BUILD_STEP, SchemaCollector
from gateway.graphql.schemas.schema import group_scopes
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.support.collector import frozen_heap
from tests.support.graphql import ADMIN, Gateway, serve_app

GROUP = "wide.collector.kube-gateway.dev"
ENDPOINT = f"/apis/{GROUP}/graphql"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
SEED_QUERY = '{ pods(namespace: "demo", limit: 1) { items { metadata { name } } } }'
IDLE = 0.2
#: The wide kind's spec: WIDTH object properties of WIDTH object properties of LEAVES
#: strings (WIDTH^2 nested types, each an output and an input type).
WIDTH = 40
LEAVES = 8


def wide_crd(plural: str, kind: str, group: str = GROUP, prefix: str = "f") -> dict[str, Any]:
    leaf = {
        "type": "object",
        "properties": {f"{prefix}{k}": {"type": "string"} for k in range(LEAVES)},
    }
    middle = {"type": "object", "properties": {f"q{j}": leaf for j in range(WIDTH)}}
    spec = {"type": "object", "properties": {f"p{i}": middle for i in range(WIDTH)}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}},
                }
            ],
        },
    }


@pytest.fixture
async def wide(tmp_path: Path) -> AsyncIterator[Gateway]:
    token = tmp_path / "token"
    token.write_text(ADMIN)
    async with DemoUpstream() as demo:
        await demo.store.create("customresourcedefinitions", wide_crd("wides", "Wide"))
        settings = Settings(
            host="127.0.0.1",
            http_port=0,
            grpc_port=0,
            server=demo.url,
            discovery_token_file=str(token),
            group_schema_idle_seconds=IDLE,
            log_level="warning",
        )
        async with serve_app(settings) as (url, app):
            live = live_of(app)
            await live.wait_ready()
            await asyncio.wait_for(live.wait_catalog(lambda c: GROUP in group_scopes(c)), 60)
            yield Gateway(url, app, demo)


def live_of(app: Any) -> LiveSchema:
    live: LiveSchema = app.state.runtime.live_schema
    return live


async def until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """Wait (polling every 10 ms) until ``condition()``, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


@contextlib.contextmanager
def serving(collector: SchemaCollector) -> Iterator[None]:
    """The process's collector as ``kube-gateway serve`` sets it (``tune_garbage_collector``):
    the heap frozen, the serving thresholds, each build frozen out of collections."""
    thresholds = gc.get_threshold()
    with frozen_heap():
        gc.set_threshold(*GC_THRESHOLDS)
        collector.freeze = True
        try:
            yield
        finally:
            collector.freeze = False
            gc.set_threshold(*thresholds)


async def use_group(http: httpx.AsyncClient) -> None:
    response = await http.post(ENDPOINT, json={"query": "{ __typename }"})
    assert response.status_code == 200, response.text
    assert response.json() == {"data": {"__typename": "Query"}}


async def _seed_gets(url: str, stop: asyncio.Event) -> int:
    """Small queries (each an upstream request) one after the other until ``stop``: some
    is always in flight when a build freezes what lives."""
    done = 0
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=60) as http:
        while not stop.is_set():
            response = await http.post("/graphql", json={"query": SEED_QUERY})
            assert response.status_code == 200, response.text
            done += 1
    return done


async def test_group_schema_churn_with_requests_in_flight_leaves_nothing_frozen(
    wide: Gateway,
) -> None:
    """Build, use and give back the wide group's schema CYCLES times while small queries run
    throughout: the permanent generation then holds no cyclic garbage of theirs beyond a
    few objects a cycle (a frozen cycle is never collected while serving: it would be a
    leak), and the objects kept do not grow from cycle to cycle."""
    live = live_of(wide.app)
    collector = live.collector
    cycles = 4
    async with httpx.AsyncClient(base_url=wide.url, headers=AUTH, timeout=120) as http:
        # a first cycle outside the measure: what is made once per process (the seed's
        # pieces, connection pools, caches) is made
        await use_group(http)
        await until(lambda: GROUP not in live.groups)
        await collector.cleared()
        # what lived before (the suite's own heap: an earlier test's app may die during this
        # one, and is not this test's to count: test_group_schema_lifetime's seed schema,
        # ~16,000 objects, lives on in typing's caches of its strawberry classes' Optional[...]
        # until newer entries evict them); an id of one of them reused meanwhile can hide a
        # new object, never add one
        gc.collect()
        existing = {id(o) for o in gc.get_objects()}
        with serving(collector):
            # the size of the schema, as frozen objects: what a leak of it would be
            frozen = gc.get_freeze_count()
            await use_group(http)
            schema_objects = gc.get_freeze_count() - frozen
            await until(lambda: GROUP not in live.groups)
            await collector.cleared()
            stop = asyncio.Event()
            gets = asyncio.create_task(_seed_gets(wide.url, stop))
            steps = collector.steps
            kept: list[int] = []
            try:
                for _ in range(cycles):
                    await use_group(http)
                    await until(lambda: GROUP not in live.groups)
                    await collector.cleared()
                    gc.collect()  # what is not frozen: collected as usual
                    kept.append(gc.get_freeze_count() + len(gc.get_objects()))
            finally:
                stop.set()
                served = await gets
            steps = collector.steps - steps
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                gc.unfreeze()  # what was frozen and is cyclic garbage now: a leak
                gc.collect()
            finally:
                gc.set_debug(0)
            garbage = [o for o in gc.garbage if id(o) not in existing]
            leaked = len(garbage)
            gc.garbage.clear()
            del existing
    leaked_bytes = sum(sys.getsizeof(o) for o in garbage)
    kinds: dict[str, int] = {}
    for o in garbage:
        kinds[type(o).__name__] = kinds.get(type(o).__name__, 0) + 1
    del garbage
    print(
        f"schema {schema_objects} objects; {steps} freezes in {cycles} builds, {served} gets "
        f"beside; kept after each cycle {kept}; leaked {leaked} objects ({leaked_bytes} B): "
        f"{sorted(kinds.items(), key=lambda kv: -kv[1])[:12]}"
    )
    assert schema_objects > 50_000  # a large schema: a leak of it could not hide
    assert steps >= 2 * cycles  # each build froze in several steps, with requests in flight
    assert served >= cycles  # ... served throughout
    # What stays frozen is what requests held at a freeze (an upstream response in flight:
    # httpx's are reference cycles; measured ~300 objects a cycle with gets back to back
    # here, client and demo included), never a schema nor a part of one: a hundredth of
    # the schema a cycle bounds it, and the objects kept follow.
    per_cycle = schema_objects // 100
    assert (kept[-1] - kept[1]) / (cycles - 2) < per_cycle, kept
    assert leaked < per_cycle * cycles, leaked
    assert leaked_bytes < 100_000 * cycles, leaked_bytes
    assert live.given_back == cycles + 2


async def test_a_large_group_build_walks_the_young_objects_in_steps(wide: Gateway) -> None:
    """While the wide group's schema is built, no cyclic collection walks more than a few
    times the young generation's threshold of objects (the schema goes to the permanent
    generation a step at a time), and the event loop, ticking every 5 ms, is never held
    for long."""
    live = live_of(wide.app)
    collector = live.collector
    walks: list[tuple[int, int]] = []  # (generation, young objects) of each collection
    lags: list[float] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":  # a collection walks its generation and the younger ones
            young = sum(len(gc.get_objects(generation=g)) for g in range(info["generation"] + 1))
            walks.append((info["generation"], young))

    async def tick(stop: asyncio.Event) -> None:
        while not stop.is_set():
            began = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - began - 0.005)

    async with httpx.AsyncClient(base_url=wide.url, headers=AUTH, timeout=120) as http:
        with serving(collector):
            stop = asyncio.Event()
            ticker = asyncio.create_task(tick(stop))
            frozen = gc.get_freeze_count()
            gc.callbacks.append(record)
            try:
                began = time.perf_counter()
                await use_group(http)
                took = time.perf_counter() - began
            finally:
                gc.callbacks.remove(record)
                stop.set()
                await ticker
            built = gc.get_freeze_count() - frozen
    largest = max(n for _, n in walks)
    print(
        f"schema of {built} objects built in {took:.2f}s: {len(walks)} collections, the "
        f"largest over {largest} young objects; loop lag max {max(lags) * 1000:.0f} ms"
    )
    # (what was frozen of the schema: its last steps are left young, to age)
    assert built > 50_000  # the schema is far larger than one step
    assert len(walks) >= 3
    # each collection walked a threshold's worth of young objects (every other one the
    # middle generation too: two steps' worth), never the schema
    assert largest < 3 * GC_THRESHOLDS[0], (largest, built)
    assert largest < built, (largest, built)
    assert max(lags) < 1.0, max(lags)  # orders of magnitude (the machine is shared)


async def test_the_loop_walks_little_around_back_to_back_group_builds(wide: Gateway) -> None:
    """Two wide groups' schemas built back to back, each reading its OpenAPI document (a
    large one: parsed in a worker thread): the collection on the event loop before each
    build (:meth:`SchemaCollector.before_build`) walks no more than a few of a build's
    steps of young objects.  It runs before the build's documents are read, so it walks
    what requests left, not a parse; a build steps at :data:`BUILD_STEP` objects, so it
    leaves at most two small steps young for it.  (Before: the parse and the previous
    build's last two steps of 20,000, 30,000 objects here; on the real apiserver's corpus
    a median of 11,700 and up to 36,800, 2.8 and 20.8 ms of the loop thread's CPU.)

    Only that collection's young objects are listed (``gc.get_objects``): listing them in
    a collection that runs while a build thread fills a tuple from a generator fails the
    build (``SystemError`` from ``_PyTuple_Resize``, seen once in the stall trace); none
    runs while ``before_build`` does (builds are one at a time, and it comes first)."""
    other = "wide2.collector.kube-gateway.dev"
    live = live_of(wide.app)
    collector = live.collector
    await wide.demo.store.create("customresourcedefinitions", wide_crd("wides", "Wide", other, "g"))
    await asyncio.wait_for(live.wait_catalog(lambda c: other in group_scopes(c)), 60)
    loop_thread = threading.get_ident()
    started: list[tuple[int, float]] = []
    walks: list[tuple[int, int, float]] = []  # before_build's: (generation, young, CPU ms)

    def record(phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != loop_thread:
            return
        if phase == "start":
            if sys._getframe(1).f_code.co_name != "before_build":
                return
            young = sum(len(gc.get_objects(generation=g)) for g in range(info["generation"] + 1))
            started.append((young, time.thread_time()))
        elif started:
            young, began = started.pop()
            walks.append((info["generation"], young, (time.thread_time() - began) * 1000))

    async with httpx.AsyncClient(base_url=wide.url, headers=AUTH, timeout=120) as http:
        with serving(collector):
            frozen = gc.get_freeze_count()
            steps = collector.steps
            gc.callbacks.append(record)
            try:
                await use_group(http)
                # (the first schema is given back and freed a moment later: idle)
                built = gc.get_freeze_count() - frozen
                response = await http.post(
                    f"/apis/{other}/graphql", json={"query": "{ __typename }"}
                )
            finally:
                gc.callbacks.remove(record)
            steps = collector.steps - steps
    assert response.status_code == 200, response.text
    assert response.json() == {"data": {"__typename": "Query"}}
    largest = max(walks, key=lambda w: w[1])
    print(
        f"two wide builds (the first {built} objects frozen, {steps} freezes in all): "
        f"before_build's collections (generation, young objects, loop CPU ms) {walks}"
    )
    assert built > 50_000  # a schema far larger than a step
    assert len(walks) == 2  # each build's before_build
    # measured: 800-4,900 young objects, under a millisecond of the loop's CPU (main
    # before: 29,500, the first schema's last two steps of 20,000 and the second's parse)
    assert largest[1] < 3 * BUILD_STEP, walks
    assert steps >= 2 * built // (2 * BUILD_STEP)  # both built in steps
