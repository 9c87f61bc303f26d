"""Schemas and the cyclic garbage collector: built without a collection, then never walked.

A schema is hundreds of thousands of objects in reference cycles (a group's: up to 135,000
for monitoring.coreos.com's 10 kinds; ``/graphql``'s more) that live as long as they are
served.  Measured on main ``093eaa4`` with 104 groups used (``tests/bench/bench_scale.py
--all-groups --stall-trace``): young collections during builds walked the half-built schema
(generation 1 holds up to 20 x 20,000 survivors with the serving thresholds) for 80-220 ms
each, wherever they triggered, the event loop included; the oldest generation held 2.7
million objects (served schemas and dropped ones waiting for a full collection, RSS 749 MB),
and a full collection over it would hold the GIL for seconds.  So, while serving
(``kube-gateway serve``, :func:`gateway.app.tune_garbage_collector`):

* before a build, a collection of the youngest generation (a short walk) and
  :func:`gc.freeze`, so the build starts with empty generations;
* during it the collector is held off (:meth:`SchemaCollector.building`, counted across
  threads): the build is allocation after allocation of objects that all live on;
* as it ends, in its thread, before the collector is back on, one collection of the
  youngest generation (the requests served during the build left their cyclic garbage
  there: frozen, it would never be freed; measured, ~1 million objects over three churn
  rounds) and :func:`gc.freeze` again: the new schema goes to the permanent generation,
  which no collection walks.  What is frozen and becomes cyclic garbage later (an
  operation in flight at that moment) is never freed: the bench's churn rounds show what
  that costs.

A frozen object is still freed when nothing refers to it any more, but a cycle in the
permanent generation is never found.  A group schema given back is therefore *dismantled*
once no cluster serves it (:func:`dismantle_schema`: its own types' attributes cleared, the
seed's shared types left alone; each engine it had, :func:`dismantle_engine`), after which
reference counting frees it whole.  A schema that cannot be
dismantled (``/graphql``'s, strawberry classes shared with the next build) is *owed*
(:meth:`SchemaCollector.owe`): the next :meth:`SchemaCollector.settle` unfreezes, collects
everything once and freezes again (one long pause, on a ``/graphql`` rebuild or a cluster's
removal only).

In a process the gateway does not own (tests, an embedding application) nothing is frozen
and only the hold applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from graphql import GraphQLInputObjectType, GraphQLObjectType, GraphQLSchema

from gateway.core import COLLECTOR_HOLD, heap
from gateway.graphql.engine.execution import Engine
from gateway.graphql.schemas._library import graphql_schema
from gateway.graphql.schemas.native import GroupBuilder
from gateway.graphql.schemas.seed import gateway_schema

log = logging.getLogger("gateway.graphql")


class SchemaCollector:
    """How schema builds meet the cyclic garbage collector (see the module's docstring).

    Args:
        freeze: freeze each schema built (the process is the gateway's own).
    """

    def __init__(self, *, freeze: bool = False) -> None:
        self.freeze = freeze
        self._lock = threading.Lock()
        self._holders = 0
        #: Schemas dropped that only a full collection frees.
        self.owed = 0
        #: Full collections run to pay what was owed (for tests and logs).
        self.settled = 0
        #: Objects whose attributes are cleared a slice at a time (:meth:`clear_later`).
        self._clearing: deque[Any] = deque()
        self._clearer: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def building(self) -> Iterator[None]:
        """The block of a build (any thread): no collection starts until every build
        running ends; the last to end freezes what they built (before the collector may
        run again, which would walk all of it once)."""
        with self._lock:
            self._holders += 1
        # the process's count: a list's decode or a view's fill that ends meanwhile does
        # not turn the collector on under the build, nor the build under them
        COLLECTOR_HOLD.take()
        built = False
        try:
            yield
            built = True
        finally:
            with self._lock:
                self._holders -= 1
                # A failed build's exception holds its frames, and they the half-built
                # schema, in cycles: frozen, they would never be freed.  Left to the young
                # collections instead.
                if self._holders == 0 and self.freeze and built:
                    # The youngest generation holds the schema and whatever the event loop
                    # served meanwhile: its garbage (operations' cycles) is collected first,
                    # one walk of the new schema, or it would be frozen with the schema and
                    # never be freed.
                    gc.collect(0)
                    gc.freeze()
            COLLECTOR_HOLD.give()

    def before_build(self) -> None:
        """On the event loop, before a build: the youngest generation's garbage collected
        (at most the threshold's 20,000 objects: a few milliseconds; the middle generation
        can hold 20 times that, and its walk took 119 ms in the soak) and what is left
        frozen, so the collection that ends the build walks little else than the schema."""
        if self.freeze:
            gc.collect(0)
            gc.freeze()

    def owe(self) -> None:
        """A schema that cannot be dismantled (``/graphql``'s) was dropped."""
        if self.freeze:
            self.owed += 1

    def settle(self) -> None:
        """Pay what is owed: unfreeze, one full collection, freeze again."""
        if not (self.freeze and self.owed):
            return
        self.owed = 0
        self.settled += 1
        started = time.perf_counter()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        log.info(
            "full garbage collection for dropped schemas: %d objects freed in %.0f ms",
            found,
            (time.perf_counter() - started) * 1000,
        )

    def clear_later(self, objects: Iterable[Any]) -> None:
        """Clear the attributes of ``objects`` (each freeing what only it held), a slice at
        a time on the event loop: freeing a large schema at once holds the loop for tens of
        milliseconds.  At once when no loop runs."""
        self._clearing.extend(objects)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._clear(len(self._clearing))
            return
        if self._clearer is None or self._clearer.done():
            self._clearer = loop.create_task(self._clear_all(), name="graphql-schema-clearer")

    def _clear(self, count: int) -> None:
        for _ in range(min(count, len(self._clearing))):
            self._clearing.popleft().__dict__.clear()

    async def _clear_all(self) -> None:
        while self._clearing:
            self._clear(CLEAR_SLICE)
            await asyncio.sleep(0)
        # What the schemas held came from the C heap too (dict tables, long strings): give
        # its free pages back (a thread; the loop goes on).
        await heap.give_back()

    async def cleared(self) -> None:
        """Wait until everything handed to :meth:`clear_later` is cleared."""
        while self._clearer is not None and not self._clearer.done():
            await asyncio.shield(self._clearer)


#: Objects cleared per event-loop turn when a schema is dismantled (a type frees its fields,
#: ~25 objects on average).
CLEAR_SLICE = 64


@functools.cache
def _shared_types() -> frozenset[int]:
    """The seed schema's types (every group schema holds them as they are): never cleared."""
    seed = graphql_schema(gateway_schema())
    return frozenset(id(t) for t in seed.type_map.values())


def dismantle_engine(engine: Engine) -> None:
    """Drop what ``engine`` holds (its caches, its schema): it serves nothing any more."""
    if "schema" not in engine.__dict__:
        return  # dismantled already
    engine.executor_class.shared_plans.clear()
    engine.__dict__.clear()


def dismantle_schema(schema: GraphQLSchema, collector: SchemaCollector) -> None:
    """Break the reference cycles of a group's schema nothing serves any more, so reference
    counting frees it without a collection: every object and input type its build made lose
    their attributes (a slice at a time: :meth:`SchemaCollector.clear_later`), and so do
    the builder that made them and the schema (at once: :func:`dismantled` is true from
    now on).  Never the seed's types, which every group shares, nor a scalar, an enum or an
    introspection type, which may be graphql-core's own singletons.  Only for a group's
    graphql-core schema (:mod:`gateway.graphql.schemas.native`)."""
    shared = _shared_types()
    builders: dict[int, GroupBuilder] = {}
    owned: list[Any] = []
    for name, named in list(schema.__dict__.get("type_map", {}).items()):
        if (
            isinstance(named, GraphQLObjectType | GraphQLInputObjectType)
            and not name.startswith("__")
            and id(named) not in shared
        ):
            # A type's fields thunk is a method of the builder that made it, which holds
            # every type it made (and relation thunks of its own methods: a cycle too).
            owner = getattr(getattr(named.__dict__.get("_fields"), "func", None), "__self__", None)
            if isinstance(owner, GroupBuilder):
                builders[id(owner)] = owner
            owned.append(named)
    schema.__dict__.clear()
    collector.clear_later([*owned, *builders.values()])


def dismantled(schema: GraphQLSchema) -> bool:
    """Was ``schema`` dismantled (:func:`dismantle_schema`)?"""
    return not schema.__dict__


#: The process's (the collector is the process's too): frozen only once
#: :func:`gateway.app.tune_garbage_collector` says the process is the gateway's own.
COLLECTOR = SchemaCollector()
