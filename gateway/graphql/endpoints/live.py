"""Keep the GraphQL schemas in step with the catalog; build a group's schema when it is used.

The gateway serves one GraphQL schema per *scope* (:func:`gateway.graphql.schemas.schema.scope_of`):

* ``/graphql``: the seed kinds and Kubernetes' own API groups.  Its size follows the
  Kubernetes version, not the number of CRDs.  Built after discovery's first read and
  rebuilt only when a catalog swap changes what it is built from
  (:func:`~gateway.graphql.schemas.schema.scope_inputs`); readiness waits for it (:meth:`ready`).
* ``/apis/<group>/graphql``: the seed kinds and one API group's kinds, built the first time
  a caller uses it and kept while in use (at most ``max_groups`` idle ones, least recently
  used first out).  A swap that changes the group rebuilds it if it has subscribers, else
  drops it (the next use builds it again); a removed group's subscriptions end.

Builds run in a worker thread (the build is pure Python; the event loop keeps serving
between the thread's GIL slices), one at a time, with the OpenAPI documents read on the
event loop before (:func:`gateway.core.catalog.openapi_documents.load`).  Catalogs that arrive
while the
``/graphql`` build runs coalesce: the next build takes the newest one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

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
                if found is not None:
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


#: The process's shared schemas (every cluster's :class:`LiveSchema` builds through it).
SHARED = SharedSchemas()


class LiveSchema:
    """Serves ``app``'s schema (``/graphql``) and the group schemas for ``holder``'s catalog.

    Args:
        app: the ``/graphql`` endpoint.
        holder: the catalog of the cluster the app serves.
        max_groups: group schemas kept while nobody subscribes to them.
    """

    def __init__(
        self,
        app: GraphQLApp,
        holder: CatalogHolder,
        max_groups: int = MAX_IDLE_GROUPS,
    ) -> None:
        self.app = app
        self.holder = holder

        self.max_groups = max_groups
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
        self._builds = asyncio.Lock()
        self._wanted: Catalog | None = None
        self._changed = asyncio.Event()
        self._swapped = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
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
            self.current, self.current_inputs = built, inputs
            ended = self.app.use_schema(built.schema)
            self._warm(self.app)
            self._swapped_in(Swap(catalog.generation, len(built.registry), ended, seconds))
            self._ready_changed.set()
        await self._refresh_groups(catalog)
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
        async def build() -> CatalogSchema:
            async with self._builds:  # one build at a time: each holds the GIL in slices
                docs = await documents.load(catalog, scope_documents(catalog, scope))
                return await asyncio.to_thread(
                    schema_for_catalog, catalog, previous, scope=scope, documents=docs
                )

        inputs = await asyncio.to_thread(scope_inputs, catalog, scope)
        return await SHARED.get(scope, inputs, previous, build)

    # -- group schemas ---------------------------------------------------------------------

    async def group_app(self, group: str) -> GraphQLApp:
        """The endpoint of ``group``'s schema for the current catalog, built if needed.

        Raises:
            UnknownResource: the catalog serves no resource of ``group`` in a schema of its
                own (unknown, or one of Kubernetes' own groups: ``/graphql`` serves those).
        """
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
            return entry.app
        building = self._building.get(group)
        if building is None:
            building = asyncio.ensure_future(self._build_group(catalog, group, inputs))
            self._building[group] = building
            building.add_done_callback(lambda _: self._building.pop(group, None))
        entry = await asyncio.shield(building)
        return entry.app

    async def _build_group(self, catalog: Catalog, group: str, inputs: tuple[Any, ...]) -> _Group:
        entry = self.groups.get(group)
        started = time.perf_counter()
        built = await self._build(catalog, group, entry.built if entry is not None else None)
        seconds = time.perf_counter() - started
        ended = 0
        if entry is None:
            entry = _Group(
                self.app.sibling(built.schema),
                built,
                inputs,
            )
        else:
            ended = entry.app.use_schema(built.schema)
            entry.built, entry.inputs = built, inputs
        self.groups[group] = entry
        self.groups.move_to_end(group)
        self._swapped_in(Swap(catalog.generation, len(built.registry), ended, seconds, group))
        self._evict()
        return entry

    def _evict(self) -> None:
        idle = [g for g, e in self.groups.items() if not e.app.subscriptions.executions]
        for group in idle[: max(0, len(idle) - self.max_groups)]:
            del self.groups[group]

    async def _refresh_groups(self, catalog: Catalog) -> None:
        served = group_scopes(catalog)
        for group, entry in list(self.groups.items()):
            if group not in served:
                gone = UnknownResource(f"API group {group!r} is no longer served by the cluster")
                entry.app.subscriptions.end_where(functools.partial(_always, gone))
                del self.groups[group]
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
                del self.groups[group]

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
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for building in self._building.values():
            building.cancel()
        for warming in self._warming:
            warming.cancel()
        for entry in self.groups.values():
            await entry.app.subscriptions.aclose()
        self.groups.clear()


def _always(error: Exception, prepared: object) -> Exception:
    return error


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

    async def app_for(self, group: str, credential: Credential) -> GraphQLApp:
        """The endpoint of ``group``, built on first use, for a caller the cluster
        authenticates only: whether a group exists is discovery, which Kubernetes shows
        authenticated users only, and a build is work an anonymous caller must not be able
        to make the gateway do (or undo, by asking for groups past those kept).

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
        try:
            return await live.group_app(group)
        except GatewayError:
            raise
        except Exception:
            log.exception("building the GraphQL schema of %s failed", group)
            raise Internal(
                f"the GraphQL schema of API group {group!r} could not be built"
            ) from None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        group = scope["path_params"]["group"]
        if scope["type"] == "websocket":
            # The caller is known once connection_init arrives: the root admits the
            # connection (its limits and origins are every endpoint's), the group's
            # endpoint serves it.
            await websocket.serve(
                self.root,
                WebSocket(scope, receive, send),
                send,
                resolve=functools.partial(self.app_for, group),
            )
            return
        request = Request(scope, receive)
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            await self.root(scope, receive, send)  # GraphiQL's page: the same for every path
            return
        try:
            credential = credential_from_header(request.headers.get("authorization"))
            app = await self.app_for(group, credential)
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
