"""Keep the GraphQL schemas in step with the catalog; build a group's schema when it is used.

The gateway serves one GraphQL schema per *scope* (:func:`gateway.graphql.schemas.schema.scope_of`):

* ``/graphql``: the seed kinds and Kubernetes' own API groups.  Its size follows the
  Kubernetes version, not the number of CRDs.  Built after discovery's first read and
  rebuilt only when a catalog swap changes what it is built from
  (:func:`~gateway.graphql.schemas.schema.scope_inputs`); readiness waits for it (:meth:`ready`).
* ``/apis/<group>/graphql``: the seed kinds and one API group's kinds, built the first time
  a caller uses it and kept while in use: a group with a request, a connection or a
  subscription open is kept; an idle one is given back once unused for ``idle_seconds``
  (``--group-schema-idle-seconds``), or earlier when more than ``max_groups`` are idle
  (least recently used first out).  A swap that changes the group rebuilds it if it has
  subscribers, else drops it (the next use builds it again); a removed group's
  subscriptions end.  A schema given back, or replaced by a rebuild, is dismantled
  (:func:`gateway.graphql.engine.collector.dismantle`) once no request or connection that may
  still use it is open, so it is freed at once, without a full garbage collection.

Builds run in a worker thread (the build is pure Python; the event loop keeps serving
between the thread's GIL slices), one at a time, with the OpenAPI documents read before
(:func:`gateway.core.catalog.openapi_documents.load`: a large one parsed in another worker
thread, in slices); what they build is
frozen out of every later collection as it is built
(:class:`gateway.graphql.engine.collector.SchemaCollector`).  Catalogs that arrive while the
``/graphql`` build runs coalesce: the next build takes the newest one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from graphql import GraphQLSchema
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from gateway.core import (
    Catalog,
    CatalogHolder,
    Credential,
    GatewayError,
    Internal,
    Unauthorized,
    UnknownResource,
    heap,
)
from gateway.core import openapi_documents as documents
from gateway.graphql.endpoints.server import GraphQLApp
from gateway.graphql.engine.collector import (
    COLLECTOR,
    SchemaCollector,
    dismantle_engine,
    dismantle_schema,
    dismantled,
)
from gateway.graphql.engine.execution import Engine
from gateway.graphql.errors import format_exception
from gateway.graphql.resolvers.context import credential_from_header
from gateway.graphql.schemas.schema import (
    BUILT_IN,
    CatalogSchema,
    group_scopes,
    schema_for_catalog,
    scope_documents,
    scope_inputs,
)
from gateway.graphql.transport import websocket

log = logging.getLogger("gateway.graphql")

#: Group schemas kept without a subscription (each is rebuilt on its next use once out).
MAX_IDLE_GROUPS = 16
#: Seconds a group schema nobody uses is kept (``--group-schema-idle-seconds``).
GROUP_IDLE_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Swap:
    """One schema swap, as listeners hear it."""

    generation: int
    #: Resources GraphQL serves after the swap (seed ones included).
    served: int
    #: Shared subscription executions ended because their resource is gone.
    ended: int
    build_seconds: float
    #: The scope rebuilt: :data:`BUILT_IN` (``/graphql``) or an API group.
    scope: str = BUILT_IN


@dataclass(slots=True)
class _Group:
    app: GraphQLApp
    built: CatalogSchema
    inputs: tuple[Any, ...]
    #: When a request or connection last began or ended (``time.monotonic``).
    used: float = 0.0
    #: The schema's generation: one more at each rebuild.
    epoch: int = 0
    #: Requests and connections open on the app, by the epoch they began in.
    open: Counter[int] = field(default_factory=Counter)
    #: Engines a rebuild replaced, each with the epoch that replaced it and its schema:
    #: dismantled once nothing that began before that epoch is open.
    retired: list[tuple[int, Engine, CatalogSchema]] = field(default_factory=list)
    #: Given back (no longer kept): its engine is dismantled once nothing is open.
    dropped: bool = False

    def busy(self) -> bool:
        return bool(self.open) or bool(self.app.subscriptions.executions)

    def release(self, collector: SchemaCollector) -> None:
        """Dismantle every engine nothing open may still use (and its schema, unless
        another cluster serves it too)."""
        oldest = min(self.open) if self.open else None
        kept = []
        for epoch, engine, built in self.retired:
            if oldest is None or oldest >= epoch:
                _retire(engine, built, collector)
            else:
                kept.append((epoch, engine, built))
        self.retired = kept
        # (a subscription lives in a request or a connection: none is open)
        if self.dropped and oldest is None and "schema" in self.app.engine.__dict__:
            _retire(self.app.engine, self.built, collector)


@dataclass(slots=True, eq=False)
class _Shared:
    """A schema built (or being built) for some inputs on top of some previous schema."""

    loop: asyncio.AbstractEventLoop
    scope: str
    inputs: tuple[Any, ...]
    previous: weakref.ref[CatalogSchema] | None
    building: asyncio.Future[CatalogSchema] | None
    built: weakref.ref[CatalogSchema] | None = None

    def alive(self) -> bool:
        return not self.loop.is_closed() and (
            self.building is not None or (self.built is not None and self.built() is not None)
        )


class SharedSchemas:
    """The schemas of the process, shared by every cluster whose catalog gives equal inputs.

    A fleet's clusters usually serve the same Kubernetes version and CRDs: their schemas
    are the same value (resolvers reach the cluster through the operation's context, never
    through the schema), so the second cluster takes the first one's instead of building
    it again, and the process holds one copy.  Equal inputs built on the same previous
    schema give the same schema (names stay as the previous one had them), so clusters that
    shared a schema share its rebuilds too.  Concurrent builds of one schema are one build.
    Entries hold schemas weakly: a schema no cluster serves any more is freed.
    """

    def __init__(self) -> None:
        self._entries: list[_Shared] = []
        #: Builds run, and schemas taken from another cluster (for tests and metrics).
        self.builds = 0
        self.shared = 0

    async def get(
        self,
        scope: str,
        inputs: tuple[Any, ...],
        previous: CatalogSchema | None,
        build: Callable[[], Awaitable[CatalogSchema]],
    ) -> CatalogSchema:
        loop = asyncio.get_running_loop()
        self._entries = [e for e in self._entries if e.alive()]
        for entry in self._entries:
            if (
                entry.loop is loop
                and entry.scope == scope
                and (entry.previous() if entry.previous is not None else None) is previous
                and entry.inputs == inputs
            ):
                if entry.building is not None:
                    self.shared += 1
                    return await asyncio.shield(entry.building)
                found = entry.built() if entry.built is not None else None
                if found is not None and not _given_back(found):
                    self.shared += 1
                    return found
        future: asyncio.Future[CatalogSchema] = loop.create_future()
        entry = _Shared(
            loop, scope, inputs, weakref.ref(previous) if previous is not None else None, future
        )
        self._entries.append(entry)
        self.builds += 1
        try:
            built = await build()
        except BaseException as exc:
            self._entries.remove(entry)
            if isinstance(exc, Exception):
                future.set_exception(exc)
                future.exception()  # retrieved: waiters get it; none is fine too
            else:
                future.cancel()
            raise
        entry.built, entry.building = weakref.ref(built), None
        future.set_result(built)
        return built


def _given_back(built: CatalogSchema) -> bool:
    """A group schema dismantled (nothing served it; its last references going)."""
    return isinstance(built.schema, GraphQLSchema) and dismantled(built.schema)


#: The process's shared schemas (every cluster's :class:`LiveSchema` builds through it).
SHARED = SharedSchemas()


class LiveSchema:
    """Serves ``app``'s schema (``/graphql``) and the group schemas for ``holder``'s catalog.

    Args:
        app: the ``/graphql`` endpoint.
        holder: the catalog of the cluster the app serves.
        max_groups: group schemas kept while nobody uses them.
        idle_seconds: how long a group schema nobody uses is kept.
        collector: how builds meet the cyclic garbage collector (the process's).
    """

    def __init__(
        self,
        app: GraphQLApp,
        holder: CatalogHolder,
        max_groups: int = MAX_IDLE_GROUPS,
        *,
        idle_seconds: float = GROUP_IDLE_SECONDS,
        collector: SchemaCollector = COLLECTOR,
    ) -> None:
        self.app = app
        self.holder = holder

        self.max_groups = max_groups
        self.idle_seconds = idle_seconds
        self.collector = collector
        #: Group schemas given back for being idle, and sweeps run (for tests and logs).
        self.given_back = 0
        self.sweeps = 0
        self.current: CatalogSchema | None = None
        #: What the served ``/graphql`` schema was built from: the app starts with the seed
        #: schema, which is the seed catalog's (generation 0, before discovery's first read).
        self.current_inputs: tuple[Any, ...] | None = (
            scope_inputs(holder.current) if holder.current.generation == 0 else None
        )
        self.swaps: list[Swap] = []
        #: The generation of the last catalog fully taken in (schemas rebuilt or refreshed).
        self.taken = -1
        self.groups: OrderedDict[str, _Group] = OrderedDict()
        self._building: dict[str, asyncio.Future[_Group]] = {}
        #: The inputs each group's last build failed for: not built again until they change.
        self._failed: dict[str, tuple[Any, ...]] = {}
        self._builds = asyncio.Lock()
        self._wanted: Catalog | None = None
        self._changed = asyncio.Event()
        self._swapped = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._ready_changed = asyncio.Event()
        self._warming: set[asyncio.Task[None]] = set()
        self._stop_listening = holder.listen(self._heard)

    def _heard(self, old: Catalog, new: Catalog) -> None:
        self._wanted = new
        self._changed.set()
        self._ready_changed.set()

    def start(self, *, rebuild: bool = False) -> None:
        """Follow the holder from now on; ``rebuild``: build for its current catalog first."""
        if rebuild and self._wanted is None:
            self._wanted = self.holder.current
            self._changed.set()
        self._task = asyncio.create_task(self._run(), name="graphql-live-schema")
        self._sweeper = asyncio.create_task(self._sweep(), name="graphql-group-sweeper")

    def ready(self) -> bool:
        """Has discovery read the cluster, and does ``/graphql`` serve the schema of the
        holder's current catalog?"""
        current = self.holder.current
        return (
            current.generation > 0
            and current.crd_groups is not None
            and self.current_inputs == scope_inputs(current)
        )

    async def wait_ready(self) -> None:
        """Wait until :meth:`ready`."""
        async with self._swapped:
            await self._swapped.wait_for(self.ready)

    async def follow_ready(self, changed: Callable[[bool], Awaitable[None]]) -> None:
        """Call ``changed(ready)`` now and whenever :meth:`ready` changes (runs until
        cancelled; the gRPC health service follows it)."""
        last: bool | None = None
        while True:
            self._ready_changed.clear()
            now = self.ready()
            if now != last:
                await changed(now)
                last = now
            await self._ready_changed.wait()

    async def _run(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                await self._build_wanted()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep serving the schema we have; the next change retries
                log.exception("rebuilding the GraphQL schema failed; the previous one stays")

    async def _build_wanted(self) -> None:
        catalog = self._wanted
        if catalog is None:
            return
        self._wanted = None
        # Sorting a thousand CRDs' resources into scopes is a walk of the whole catalog:
        # a worker thread does it once (it is kept with the catalog).
        inputs = await asyncio.to_thread(scope_inputs, catalog)
        # Until CRDs are listed, a CRD group under *.k8s.io cannot be told from Kubernetes'
        # own: /graphql waits (the groups' own schemas are served meanwhile).
        if inputs != self.current_inputs and catalog.crd_groups is not None:
            started = time.perf_counter()
            built = await self._build(catalog, BUILT_IN, self.current)
            seconds = time.perf_counter() - started
            _served(built, self.collector, +1)
            _served(self.current, self.collector, -1)  # the one it replaces
            self.current, self.current_inputs = built, inputs
            ended = self.app.use_schema(built.schema)
            self._warm(self.app)
            self._swapped_in(Swap(catalog.generation, len(built.registry), ended, seconds))
            self._ready_changed.set()
        await self._refresh_groups(catalog)
        self.collector.settle()  # a /graphql schema no cluster serves any more
        # The discovery and the build freed most of what they allocated: give it back.
        await heap.give_back()
        self.taken = catalog.generation
        async with self._swapped:
            self._swapped.notify_all()

    def _swapped_in(self, swap: Swap) -> None:
        self.swaps.append(swap)
        del self.swaps[:-16]
        log.info(
            "GraphQL schema %s rebuilt for catalog %d: %d resources, built in %.2fs%s",
            _endpoint(swap.scope),
            swap.generation,
            swap.served,
            swap.build_seconds,
            f", {swap.ended} subscription(s) on removed resources ended" if swap.ended else "",
        )

    def _warm(self, app: GraphQLApp) -> None:
        """Compute the full introspection of ``app``'s new schema in the background (a
        worker thread): GraphiQL's first request then answers at once."""
        task = asyncio.create_task(app.engine.warm_introspection(), name="graphql-warm")
        self._warming.add(task)
        task.add_done_callback(self._warming.discard)

    async def _build(
        self, catalog: Catalog, scope: str, previous: CatalogSchema | None
    ) -> CatalogSchema:
        collector = self.collector

        def held(docs: Any) -> CatalogSchema:
            with collector.building():
                return schema_for_catalog(catalog, previous, scope=scope, documents=docs)

        async def build() -> CatalogSchema:
            async with self._builds:  # one build at a time: each holds the GIL in slices
                # before the documents are read: its walk on the loop is then of what
                # requests left, and the build's steps take a parse (engine/collector.py)
                collector.before_build()
                docs = await documents.load(catalog, scope_documents(catalog, scope))
                return await asyncio.to_thread(held, docs)

        inputs = await asyncio.to_thread(scope_inputs, catalog, scope)
        return await SHARED.get(scope, inputs, previous, build)

    # -- group schemas ---------------------------------------------------------------------

    async def group_app(self, group: str) -> GraphQLApp:
        """The endpoint of ``group``'s schema for the current catalog, built if needed.

        Raises:
            UnknownResource: the catalog serves no resource of ``group`` in a schema of its
                own (unknown, or one of Kubernetes' own groups: ``/graphql`` serves those).
        """
        return (await self._group(group)).app

    @asynccontextmanager
    async def using(self, group: str) -> AsyncIterator[GraphQLApp]:
        """``group``'s endpoint (as :meth:`group_app`), kept, and its schema whole, until
        the block ends: a request or a connection is served inside one."""
        entry = await self._group(group)
        epoch = entry.epoch
        entry.open[epoch] += 1
        entry.used = time.monotonic()
        try:
            yield entry.app
        finally:
            entry.open[epoch] -= 1
            if not entry.open[epoch]:
                del entry.open[epoch]
            entry.used = time.monotonic()
            entry.release(self.collector)

    async def _group(self, group: str) -> _Group:
        catalog = self.holder.current
        if group not in group_scopes(catalog):
            raise UnknownResource(
                f"no GraphQL schema for API group {group!r}: the cluster serves no custom "
                "resource in it (Kubernetes' own groups are served at /graphql)"
            )
        entry = self.groups.get(group)
        inputs = scope_inputs(catalog, group)
        if entry is not None and entry.inputs == inputs:
            self.groups.move_to_end(group)
            entry.used = time.monotonic()
            return entry
        if self._failed.get(group) == inputs:
            # The same inputs fail the same way: a build is hundreds of milliseconds of
            # the GIL, and what a failed one leaves is freed by a collection only.
            raise Internal(
                f"the GraphQL schema of API group {group!r} could not be built (logged "
                "when it failed; it is built again once the group changes)"
            )
        building = self._building.get(group)
        if building is None:
            building = asyncio.ensure_future(self._build_group(catalog, group, inputs))
            self._building[group] = building
            building.add_done_callback(lambda _: self._building.pop(group, None))
        return await asyncio.shield(building)

    async def _build_group(self, catalog: Catalog, group: str, inputs: tuple[Any, ...]) -> _Group:
        entry = self.groups.get(group)
        started = time.perf_counter()
        try:
            built = await self._build(catalog, group, entry.built if entry is not None else None)
        except Exception:
            self._failed[group] = inputs
            raise
        self._failed.pop(group, None)
        seconds = time.perf_counter() - started
        ended = 0
        if entry is None:
            entry = _Group(
                self.app.sibling(built.schema),
                built,
                inputs,
            )
        else:
            old, old_built = entry.app.engine, entry.built
            ended = entry.app.use_schema(built.schema)
            entry.built, entry.inputs = built, inputs
            entry.epoch += 1
            entry.retired.append((entry.epoch, old, old_built))
            entry.release(self.collector)
        _served(built, self.collector, +1)
        entry.used = time.monotonic()
        self.groups[group] = entry
        self.groups.move_to_end(group)
        self._swapped_in(Swap(catalog.generation, len(built.registry), ended, seconds, group))
        self._evict()
        return entry

    def _drop(self, group: str) -> None:
        """No longer keep ``group``'s schema (its next use builds it again)."""
        entry = self.groups.pop(group, None)
        if entry is not None:
            entry.dropped = True
            entry.release(self.collector)

    def _evict(self) -> None:
        """Give back the least recently used idle group schemas past ``max_groups``."""
        idle = [g for g, e in self.groups.items() if not e.busy()]
        for group in idle[: max(0, len(idle) - self.max_groups)]:
            self._drop(group)

    def sweep(self) -> int:
        """Give back every group schema unused for ``idle_seconds``; how many."""
        now = time.monotonic()
        idle = [
            g for g, e in self.groups.items() if not e.busy() and now - e.used >= self.idle_seconds
        ]
        for group in idle:
            self._drop(group)
        if idle:
            self.given_back += len(idle)
            log.info(
                "gave back %d GraphQL group schema(s) unused for %gs: %s",
                len(idle),
                self.idle_seconds,
                ", ".join(idle[:5]) + (", ..." if len(idle) > 5 else ""),
            )
        return len(idle)

    async def _sweep(self) -> None:
        every = min(30.0, max(0.05, self.idle_seconds / 4))
        while True:
            await asyncio.sleep(every)
            self.sweeps += 1
            if self.sweep():
                await heap.give_back()

    async def _refresh_groups(self, catalog: Catalog) -> None:
        served = group_scopes(catalog)
        self._failed = {g: inputs for g, inputs in self._failed.items() if g in served}
        for group, entry in list(self.groups.items()):
            if group not in served:
                gone = UnknownResource(f"API group {group!r} is no longer served by the cluster")
                entry.app.subscriptions.end_where(functools.partial(_always, gone))
                self._drop(group)
                continue
            inputs = scope_inputs(catalog, group)
            if inputs == entry.inputs:
                continue
            if entry.app.subscriptions.executions:  # subscribers follow the group: rebuild now
                try:
                    await self._build_group(catalog, group, inputs)
                except Exception:
                    log.exception("rebuilding the GraphQL schema of %s failed", group)
            else:  # nobody waits: the next use builds it
                self._drop(group)

    # -- waiting and closing ---------------------------------------------------------------

    async def wait_for(self, generation: int) -> Swap:
        """Wait until ``/graphql`` serves the schema for catalog ``generation`` (or later)."""
        async with self._swapped:
            await self._swapped.wait_for(lambda: self.taken >= generation)
        return self.swaps[-1]

    async def wait_catalog(self, ready: Callable[[Catalog], bool]) -> Catalog:
        """Wait until a catalog satisfying ``ready`` has been taken in (``/graphql`` rebuilt
        for it if it had to be, its changed group schemas refreshed)."""
        async with self._swapped:
            await self._swapped.wait_for(
                lambda: self.taken >= self.holder.current.generation and ready(self.holder.current)
            )
        return self.holder.current

    async def wait_until(self, ready: Callable[[CatalogSchema], bool]) -> CatalogSchema:
        """Wait until the served schema satisfies ``ready`` (e.g. serves some resource)."""
        async with self._swapped:
            await self._swapped.wait_for(lambda: self.current is not None and ready(self.current))
        assert self.current is not None
        return self.current

    def drain(self) -> None:
        """End every group endpoint's subscriptions (``/graphql``'s are the app's own)."""
        for entry in self.groups.values():
            entry.app.subscriptions.drain()

    async def aclose(self) -> None:
        self._stop_listening()
        for task in (self._task, self._sweeper):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for building in self._building.values():
            building.cancel()
        for warming in self._warming:
            warming.cancel()
        for group, entry in list(self.groups.items()):
            await entry.app.subscriptions.aclose()
            self._drop(group)
        # A /graphql schema nobody serves any more is paid for at the next rebuild (not
        # here: at shutdown a full collection only delays the exit, by seconds).
        _served(self.current, self.collector, -1)
        self.current = None
        await self.collector.cleared()


def _always(error: Exception, prepared: object) -> Exception:
    return error


#: How many live schemas serve each ``/graphql`` schema (clusters share equal ones), by id.
_SERVING: Counter[int] = Counter()


def _served(built: CatalogSchema | None, collector: SchemaCollector, change: int) -> None:
    """Count a schema served (``+1``) or no longer (``-1``) by a cluster's endpoint: one
    nobody serves is dismantled (a group's), or owed to the collector (``/graphql``'s:
    strawberry's classes cannot be)."""
    if built is None:
        return
    key = id(built)
    _SERVING[key] += change
    if _SERVING[key] > 0:
        return
    del _SERVING[key]
    if isinstance(built.schema, GraphQLSchema):
        dismantle_schema(built.schema, collector)
    else:
        collector.owe()


def _retire(engine: Engine, built: CatalogSchema, collector: SchemaCollector) -> None:
    """An engine nothing uses any more, and its schema unless another cluster serves it."""
    dismantle_engine(engine)
    _served(built, collector, -1)


def _endpoint(scope: str) -> str:
    return "/graphql" if scope == BUILT_IN else f"/apis/{scope}/graphql"


class GroupEndpoint:
    """``/apis/<group>/graphql``: the endpoint of one API group's schema (HTTP, SSE and
    WebSocket, as ``/graphql``), found or built through ``live`` (none while discovery is
    off).

    Args:
        root: the ``/graphql`` endpoint of the same cluster (GraphiQL's settings are its).
        live: what keeps the cluster's schemas (made on ``root``, so before this).
    """

    def __init__(self, root: GraphQLApp, live: LiveSchema | None) -> None:
        self.root = root
        self.live = live

    @asynccontextmanager
    async def serving(self, group: str, credential: Credential) -> AsyncIterator[GraphQLApp]:
        """The endpoint of ``group``, built on first use and kept until the block ends
        (:meth:`LiveSchema.using`), for a caller the cluster authenticates only: whether a
        group exists is discovery, which Kubernetes shows authenticated users only, and a
        build is work an anonymous caller must not be able to make the gateway do (or undo,
        by asking for groups past those kept).

        Raises:
            Unauthorized: the cluster does not authenticate the caller (whatever the group).
            UnknownResource: discovery is off, or the cluster serves no such group.
        """
        cluster, visibility = self.root.cluster, self.root.visibility
        credential = await cluster.adapter.identity.identified(credential)
        if not await visibility.authenticates(cluster.name, credential):
            raise Unauthorized(
                "an API group's endpoint serves callers the cluster authenticates: send "
                "Authorization: Bearer <token>"
            )
        live = self.live
        if live is None:
            raise UnknownResource(
                "discovery is off: the gateway serves the built-in resources at /graphql only"
            )
        using = live.using(group)
        try:
            app = await using.__aenter__()
        except GatewayError:
            raise
        except Exception:
            log.exception("building the GraphQL schema of %s failed", group)
            raise Internal(
                f"the GraphQL schema of API group {group!r} could not be built"
            ) from None
        try:
            yield app
        finally:
            await using.__aexit__(None, None, None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        group = scope["path_params"]["group"]
        if scope["type"] == "websocket":
            # The caller is known once connection_init arrives: the root admits the
            # connection (its limits and origins are every endpoint's), the group's
            # endpoint serves it, and is kept until the connection ends (which may be after
            # this call returns: the connection is served outside it).
            held = AsyncExitStack()

            async def resolve(credential: Credential) -> GraphQLApp:
                return await held.enter_async_context(self.serving(group, credential))

            await websocket.serve(
                self.root, scope, receive, send, resolve=resolve, release=held.aclose
            )
            return
        async with AsyncExitStack() as stack:
            request = Request(scope, receive)
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                await self.root(scope, receive, send)  # GraphiQL's page: the same everywhere
                return
            try:
                credential = credential_from_header(request.headers.get("authorization"))
                app = await stack.enter_async_context(self.serving(group, credential))
            except GatewayError as exc:
                status = exc.code if exc.code in (401, 404) else 500
                await refuse(scope, receive, send, exc, status)
                return
            await app(scope, receive, send)


async def refuse(
    scope: Scope, receive: Receive, send: Send, exc: GatewayError, status: int
) -> None:
    """Answer with ``exc`` as a GraphQL error: ``status`` over HTTP, a close code over a
    WebSocket (4404 or 4500, after accepting it so the client reads why)."""
    body = {"errors": [format_exception(exc)]}
    if scope["type"] == "websocket":
        socket = WebSocket(scope, receive, send)
        await socket.accept(subprotocol=_subprotocol(scope))
        await socket.close(code=4404 if status == 404 else 4500, reason=str(exc)[:120])
        return
    await JSONResponse(body, status_code=status)(scope, receive, send)


def _subprotocol(scope: Scope) -> str | None:
    offered = scope.get("subprotocols") or []
    return offered[0] if offered else None


def group_routes(endpoint: GroupEndpoint, path: str = "/apis/{group}/graphql") -> list[BaseRoute]:
    """The routes of every group's endpoint (GraphiQL's assets are ``/graphql``'s)."""
    return [
        Route(path, endpoint, methods=["GET", "POST"]),
        WebSocketRoute(path, endpoint),
        Route(f"{path}/graphiql.json", endpoint.root.graphiql_settings, methods=["GET"]),
    ]
