"""Schemas and the cyclic garbage collector: frozen out of collections as they are built.

A schema is hundreds of thousands of objects in reference cycles (a group's: up to 135,000
for monitoring.coreos.com's 10 kinds; ``/graphql``'s more) that live as long as they are
served.  Measured on main ``093eaa4`` with 104 groups used (``tests/bench/bench_scale.py
--all-groups --stall-trace``): young collections during builds walked the half-built schema
(generation 1 holds up to 20 x 20,000 survivors with the serving thresholds) for 80-220 ms
each, wherever they triggered, the event loop included; the oldest generation held 2.7
million objects (served schemas and dropped ones waiting for a full collection, RSS 749 MB),
and a full collection over it would hold the GIL for seconds.  So, while serving
(``kube-gateway serve``, :func:`gateway.app.tune_garbage_collector`):

* before a build, before its OpenAPI documents are even read, a collection of the young
  generations and :func:`gc.freeze` (:meth:`SchemaCollector.before_build`, on the event
  loop), so the build starts with empty generations: the walk is of what requests left
  (and of the previous build's last steps), not of the documents' parse, which the build's
  own steps take;
* during it, collections come every :data:`BUILD_STEP` (5,000) objects allocated (the
  youngest generation's threshold while a build runs; 20,000 while serving), every other
  one of the middle generation too (its threshold is 0 while a build runs), and each of
  the middle generation is followed by :func:`gc.freeze`
  (:meth:`SchemaCollector.building`, counted across threads): the build is allocation
  after allocation of objects that all live on, so each collection walks one or two
  steps' worth of them, and they move to the permanent generation, which no
  collection walks.  What is frozen lived through two collections: what a request in
  flight held at one of them (an upstream response: httpx's are reference cycles) has
  mostly become garbage by the next, and is collected instead of frozen for good
  (measured in process with the demo, 4 builds of a wide group beside gets back to back:
  1,185 objects left frozen for good with a freeze after every collection, 733 now).
  Holding the collector off for the whole build instead left one collection of the
  whole schema at its end (50-190 ms for a copy of monitoring.coreos.com on the loaded
  bench machine, in the build's thread but holding the GIL: the event loop waited as
  long);
* as it ends, in its thread, one collection of the youngest generation (the requests
  served meanwhile left their cyclic garbage there); the rest of the schema (at most two
  steps of it) is left to age, and the next build's first freeze takes it.

What a freeze catches alive and becomes cyclic garbage later is never freed, so what lives
through a build must not end in a cycle: a group schema given back is *dismantled* once no
cluster serves it (:func:`dismantle_schema`: its own types' attributes cleared, the seed's
shared types left alone; each engine it had, :func:`dismantle_engine`, its executor class
kept for the next engine), a failed build breaks its own cycles
(:meth:`~gateway.graphql.schemas.native.GroupBuilder.discard`), after which reference
counting frees them whole.  A schema that cannot be dismantled (``/graphql``'s, strawberry
classes shared with the next build) is *owed* (:meth:`SchemaCollector.owe`): the next
:meth:`SchemaCollector.settle` unfreezes, collects everything once and freezes again (one
long pause, on a ``/graphql`` rebuild or a cluster's removal only).

In a process the gateway does not own (tests, an embedding application) nothing is frozen
and the collector is held off during builds instead, through the process's one count
(:data:`gateway.core.COLLECTOR_HOLD`, which large list decodes and view fills take too).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from graphql import GraphQLSchema

from gateway.core import COLLECTOR_HOLD, heap
from gateway.graphql.engine.execution import Engine
from gateway.graphql.engine.projection import release_executor
from gateway.graphql.schemas.native import made_by_builders

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
        self._stepping = False
        #: The collector's thresholds before the builds running now.
        self._thresholds: tuple[int, int, int] = gc.get_threshold()
        #: Collections a build's freezes followed (for tests and logs).
        self.steps = 0
        #: Schemas dropped that only a full collection frees.
        self.owed = 0
        #: Full collections run to pay what was owed (for tests and logs).
        self.settled = 0
        #: Objects whose attributes are cleared a slice at a time (:meth:`clear_later`).
        self._clearing: deque[Any] = deque()
        self._clearer: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def building(self) -> Iterator[None]:
        """The block of a build (any thread).  In the gateway's own process (:attr:`freeze`)
        the collector stays on, every other collection that runs while a build does is of
        the middle generation, and each of those is followed by a freeze
        (:meth:`_freeze_after`): the build is allocation after allocation of objects that
        all live on, so each collection walks at most two of the youngest generation's
        thresholds of them, and they leave for the permanent generation once they have
        lived through two collections; the last build to end collects what is young.
        Elsewhere no collection starts until every build running ends."""
        with self._lock:
            if self._holders == 0 and self.freeze:
                self._stepping = True
                # Every other collection is of the middle generation too: a freeze follows
                # those only, so it catches what lived through two collections (the schema
                # being built), not what a request held at one of them (it ends in a cycle
                # a moment later: frozen, it would never be freed).
                self._thresholds = gc.get_threshold()
                step = min(BUILD_STEP, self._thresholds[0])
                gc.set_threshold(step, 0, self._thresholds[2])
                gc.callbacks.append(self._freeze_after)
            self._holders += 1
        if not self.freeze:
            # the process's count: a list's decode or a view's fill that ends meanwhile
            # does not turn the collector on under the build, nor the build under them
            COLLECTOR_HOLD.take()
        built = False
        try:
            yield
            built = True
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0:
                    if self._stepping:
                        self._stepping = False
                        gc.callbacks.remove(self._freeze_after)
                        gc.set_threshold(*self._thresholds)
                    # A failed build's exception holds its frames, and they the half-built
                    # schema, in cycles: frozen, they would never be freed.  Left to the
                    # young collections instead (what earlier steps froze of it, the
                    # builder broke up as it failed: gateway/graphql/schemas/native.py).
                    if self.freeze and built:
                        # The young generations hold the rest of the schema (at most two
                        # steps of it) and whatever the event loop served meanwhile: its
                        # garbage (operations' cycles) is collected, and the rest is left
                        # to age: frozen now, what a request holds at this moment would be
                        # frozen with the schema.  The next build's freeze takes it.
                        gc.collect(0)
            if not self.freeze:
                COLLECTOR_HOLD.give()

    def _freeze_after(self, phase: str, info: dict[str, int]) -> None:
        """``gc.callbacks``' hook while a build runs: what a collection of the middle
        generation left alive, so what lived through two collections, goes to the permanent
        generation (mostly the schema being built; also what requests in flight held at
        both)."""
        if phase == "stop" and self._stepping and info["generation"] >= 1:
            self.steps += 1
            gc.freeze()

    def before_build(self) -> None:
        """On the event loop, before a build and before its documents are read (what it
        walks is then what requests left and the previous build's last steps, at most two
        of :data:`BUILD_STEP`; a parse read after it is taken by the build's steps): the
        young generations' garbage collected and what is left frozen.  The middle one too:
        what a request held when a young collection ran moved there, and ended in cyclic
        garbage there when the request did
        (an executor of graphql-core is a cycle of its own, with all it holds); frozen, it
        would never be freed (measured in process with the demo: most of the ~540 objects a
        group rebuild left frozen for good)."""
        if self.freeze:
            gc.collect(1)
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


#: The youngest generation's threshold while a build runs (the serving one if lower): a
#: collection during a build walks one or two steps of it, and the build's last steps are
#: left young for the next :meth:`SchemaCollector.before_build` to walk on the event loop.
#: Measured in process over the demo with the 470-CRD corpus (104 groups used in turn, a
#: seed query every 20 ms beside, load 3-4): with the serving threshold (20,000) a build's
#: steps took up to 17-27 ms of their thread's CPU and ``before_build`` up to 5-14 ms; with
#: 5,000, 3-4 ms and 1-1.5 ms, and all collections together 30-40 % less CPU (smaller
#: walks stay in the CPU's caches).
BUILD_STEP = 5_000

#: Objects cleared per event-loop turn when a schema is dismantled (a type frees its fields,
#: ~25 objects on average).
CLEAR_SLICE = 64


def dismantle_engine(engine: Engine) -> None:
    """Drop what ``engine`` holds (its caches, its schema): it serves nothing any more.
    Its executor class goes back for the next engine (a class is a cycle of its own)."""
    if "schema" not in engine.__dict__:
        return  # dismantled already
    release_executor(engine.executor_class)
    engine.__dict__.clear()


def dismantle_schema(schema: GraphQLSchema, collector: SchemaCollector) -> None:
    """Break the reference cycles of a group's schema nothing serves any more, so reference
    counting frees it without a collection: every object and input type its build made lose
    their attributes (a slice at a time: :meth:`SchemaCollector.clear_later`), and so do
    the builder that made them and the schema (at once: :func:`dismantled` is true from
    now on).  Never the seed's types, which every group shares, nor a scalar, an enum or an
    introspection type (:func:`~gateway.graphql.schemas.native.made_by_builders`).  Only for
    a group's graphql-core schema (:mod:`gateway.graphql.schemas.native`)."""
    owned = made_by_builders(schema)
    schema.__dict__.clear()
    collector.clear_later(owned)


def dismantled(schema: GraphQLSchema) -> bool:
    """Was ``schema`` dismantled (:func:`dismantle_schema`)?"""
    return not schema.__dict__


#: The process's (the collector is the process's too): frozen only once
#: :func:`gateway.app.tune_garbage_collector` says the process is the gateway's own.
COLLECTOR = SchemaCollector()
