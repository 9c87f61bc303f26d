"""Group schemas follow use: one nobody uses for ``--group-schema-idle-seconds`` is given
back, freed at once (dismantled: no cyclic garbage collection needed, so it cannot linger in
the collector's permanent generation the serving process freezes schemas into), and built
again on its next use; one with a connection open is kept whatever its idle time."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from graphql import GraphQLNamedType, GraphQLSchema
from graphql.execution.executor import Executor
from graphql.language import Token

from gateway.graphql.endpoints.live import LiveSchema
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, Gateway, serve_app, ws_client

GROUP = "demo.kube-gateway.dev"
WIDGETS = f"/apis/{GROUP}/graphql"
IDLE = 0.3


@pytest.fixture
async def idling(tmp_path: Path) -> AsyncIterator[Gateway]:
    token = tmp_path / "token"
    token.write_text(ADMIN)
    async with DemoUpstream() as demo:
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
            await app.state.runtime.live_schema.wait_ready()
            yield Gateway(url, app, demo)


def live_of(gw: Gateway) -> LiveSchema:
    live: LiveSchema = gw.app.state.runtime.live_schema
    return live


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait (polling every 10 ms) until ``condition()``, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def widgets(gw: Gateway) -> list[str]:
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as http:
        response = await http.post(
            WIDGETS,
            json={"query": '{ widgets(namespace: "demo") { items { metadata { name } } } }'},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
    body: dict[str, Any] = response.json()
    assert response.status_code == 200 and "errors" not in body, body
    return sorted(w["metadata"]["name"] for w in body["data"]["widgets"]["items"])


def builds(live: LiveSchema) -> int:
    return sum(1 for swap in live.swaps if swap.scope == GROUP)


async def test_an_idle_group_schema_is_given_back_freed_at_once_and_built_again(
    idling: Gateway,
) -> None:
    live = live_of(idling)
    assert await widgets(idling) == ["blue-widget", "red-widget"]
    assert builds(live) == 1
    engine = live.groups[GROUP].app.engine
    schema = weakref.ref(engine.graphql_schema)
    widget = weakref.ref(engine.graphql_schema.type_map["Widget"])
    seed_pod = engine.graphql_schema.type_map["Pod"]  # the seed's, shared by every schema
    del engine
    # As `kube-gateway serve` does after each build: the schema moves to the permanent
    # generation, where no collection finds its cycles; only dismantling it frees it.
    gc.collect()
    gc.freeze()
    try:
        await until(lambda: GROUP not in live.groups)
        assert live.given_back == 1
        await live.collector.cleared()  # dismantled a slice at a time
        gc.collect()  # the operations' own garbage (not frozen) goes; the schema cannot
        assert widget() is None, "a type of the group schema given back is still alive"
        assert schema() is None, "the group schema given back is still alive"
    finally:
        gc.unfreeze()
    # the seed's types it shared are whole, and /graphql serves as before
    assert seed_pod.fields["metadata"] is not None
    async with httpx.AsyncClient(base_url=idling.url, timeout=30) as http:
        root = await http.post(
            "/graphql",
            json={"query": '{ pods(namespace: "demo", limit: 1) { items { metadata { name } } } }'},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
    assert root.json()["data"]["pods"]["items"]
    # its next use builds it again, and it answers as the first one did
    assert await widgets(idling) == ["blue-widget", "red-widget"]
    assert builds(live) == 2


async def test_a_group_schema_in_use_is_kept_past_the_idle_bound(idling: Gateway) -> None:
    live = live_of(idling)
    async with ws_client(idling, path=WIDGETS) as ws:
        op = await ws.subscribe(
            'subscription { watchWidgets(namespace: "demo") { type object { metadata { name } } } }'
        )
        assert (await ws.next(op))["data"]["watchWidgets"]["type"] == "ADDED"
        engine = live.groups[GROUP].app.engine
        # sweeps over three times the idle bound: the open connection keeps it
        sweeps = live.sweeps
        started = time.monotonic()
        await until(lambda: live.sweeps > sweeps and time.monotonic() - started > 3 * IDLE)
        assert GROUP in live.groups
        assert live.groups[GROUP].app.engine is engine
        assert live.given_back == 0
        # ... and serves the other requests on it meanwhile, with the same schema
        assert await widgets(idling) == ["blue-widget", "red-widget"]
        assert builds(live) == 1
    # once the connection is gone, it is idle: given back
    await until(lambda: GROUP not in live.groups)
    assert live.given_back == 1


async def test_rebuilds_of_a_group_leave_no_schema_in_the_frozen_generation(
    idling: Gateway,
) -> None:
    """As ``kube-gateway serve`` runs (each build frozen out of the collector): rebuild the
    group eight times through the real app, each given back and dismantled, and the
    permanent generation holds no schema of theirs: its cyclic garbage (never freed)
    bounded by what was in flight when a build froze, not by the schema."""
    live = live_of(idling)
    collector = live.collector
    assert await widgets(idling) == ["blue-widget", "red-widget"]
    await until(lambda: GROUP not in live.groups)
    await collector.cleared()
    gc.collect()
    # what lived before (the suite's own heap: an earlier test's app may die during this
    # one, and is not this test's to count); an id of one of them reused meanwhile can
    # hide a new object, never add one
    existing = {id(o) for o in gc.get_objects()}
    gc.freeze()
    collector.freeze = True
    rebuilds = 8
    try:
        for _ in range(rebuilds):
            assert await widgets(idling) == ["blue-widget", "red-widget"]
            await until(lambda: GROUP not in live.groups)
            await collector.cleared()
        gc.collect()  # what is not frozen: the collector frees it as usual
        gc.unfreeze()
        # cyclic garbage that was frozen (a leak while serving), kept to be looked at
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            garbage = [o for o in gc.garbage if id(o) not in existing]
            leaked = len(garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    finally:
        collector.freeze = False
        gc.unfreeze()
    assert builds(live) == rebuilds + 1
    # Not zero: what a request held when a build froze it, and ended in a cycle after (an
    # upstream response: httpx's are cycles), so its size depends on what was in flight
    # (112 objects over the 8 rebuilds on a quiet machine, 608 at load 10).  What must not
    # be there is anything of a schema's: its types, its executors (graphql-core's Executor)
    # and executor classes,
    # its parsed documents (2,203 objects before those were made acyclic; a schema leaking
    # would be 750 or more a rebuild, the demo group's, frozen).
    of_schemas = Counter(
        o.__qualname__ if isinstance(o, type) else type(o).__name__
        for o in garbage
        if isinstance(o, GraphQLSchema | GraphQLNamedType | Executor | Token)
        or (isinstance(o, type) and issubclass(o, Executor))
    )
    kinds = Counter(type(o).__name__ for o in garbage).most_common(12)
    del garbage
    assert not of_schemas, of_schemas
    assert leaked < rebuilds * 250, (leaked, kinds)
