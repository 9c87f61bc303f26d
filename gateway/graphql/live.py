"""Keep the GraphQL schema in step with the catalog: rebuild and swap on every change.

A catalog swap (:class:`gateway.core.catalog.CatalogHolder`) only records the newest catalog;
one task owned by the lifespan rebuilds the schema from it in a worker thread (the build is
pure Python, so the event loop keeps serving between the thread's GIL slices) and then swaps
it in with :meth:`GraphQLApp.use_schema`.  Catalogs that arrive while a build runs coalesce:
the next build takes the newest one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.core import documents
from gateway.core.catalog import Catalog, CatalogHolder
from gateway.graphql.schema import CatalogSchema, schema_for_catalog
from gateway.graphql.server import GraphQLApp

log = logging.getLogger("gateway.graphql")


@dataclass(frozen=True, slots=True)
class Swap:
    """One schema swap, as listeners hear it."""

    generation: int
    #: Resources GraphQL serves after the swap (seed ones included).
    served: int
    #: Subscription feeds ended because their resource is gone.
    ended: int
    build_seconds: float


class LiveSchema:
    """Rebuilds ``app``'s schema whenever ``holder`` swaps in a new catalog."""

    def __init__(self, app: GraphQLApp, holder: CatalogHolder) -> None:
        self.app = app
        self.holder = holder
        self.current: CatalogSchema | None = None
        self.swaps: list[Swap] = []
        self._wanted: Catalog | None = None
        self._changed = asyncio.Event()
        self._swapped = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._stop_listening = holder.listen(self._heard)

    def _heard(self, old: Catalog, new: Catalog) -> None:
        self._wanted = new
        self._changed.set()

    async def build_now(self) -> None:
        """Build and swap for the holder's current catalog (at startup, before serving)."""
        self._wanted = self.holder.current
        await self._build_wanted()

    def start(self, *, rebuild: bool = False) -> None:
        """Follow the holder from now on; ``rebuild``: build for its current catalog first."""
        if rebuild and self._wanted is None:
            self._wanted = self.holder.current
            self._changed.set()
        self._task = asyncio.create_task(self._run(), name="graphql-live-schema")

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
        started = time.perf_counter()
        # read on the loop (the upstream client lives there); the build runs in a thread
        docs = await documents.load(catalog, catalog.groups.keys())
        built = await asyncio.to_thread(schema_for_catalog, catalog, self.current, documents=docs)
        seconds = time.perf_counter() - started
        self.current = built
        ended = self.app.use_schema(built.schema)
        swap = Swap(catalog.generation, len(built.registry), ended, seconds)
        self.swaps.append(swap)
        del self.swaps[:-16]
        log.info(
            "GraphQL schema rebuilt for catalog %d: %d resources, built in %.2fs%s",
            swap.generation,
            swap.served,
            seconds,
            f", {ended} subscription(s) on removed resources ended" if ended else "",
        )
        async with self._swapped:
            self._swapped.notify_all()

    async def wait_for(self, generation: int) -> Swap:
        """Wait until a schema for catalog ``generation`` (or a later one) is served."""
        async with self._swapped:
            await self._swapped.wait_for(
                lambda: bool(self.swaps) and self.swaps[-1].generation >= generation
            )
        return self.swaps[-1]

    async def wait_until(self, ready: Callable[[CatalogSchema], bool]) -> CatalogSchema:
        """Wait until the served schema satisfies ``ready`` (e.g. serves some resource)."""
        async with self._swapped:
            await self._swapped.wait_for(lambda: self.current is not None and ready(self.current))
        assert self.current is not None
        return self.current

    async def aclose(self) -> None:
        self._stop_listening()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
