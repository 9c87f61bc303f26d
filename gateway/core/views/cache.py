"""The caches views are answered from, fed by the watch hub, kept only while used.

One :class:`ViewCache` per (identity scope, kind and version, namespace or all) holds the
objects of that list: it is a subscriber of the hub's shared upstream watch of the same
scope (:class:`~gateway.core.watch.hub.WatchHub`: one list + watch per scope, the machinery
GraphQL subscriptions and gRPC ``Watch`` use), started from a snapshot, so it is exact at
the version of the last event it took.  A relist after a 410 reaches it inside ``RESYNC``
frames; while one is open, answers wait for its end (the state in between belongs to no
version).  The objects are the hub's own JSON (its compact state's ``bytes``, shared,
read only): a cache adds an :class:`~gateway.core.views.store.Entry` per object, not a
copy, and fills from a snapshot without decoding anything (the hub's events carry the
JSON and the key); the columns a view reads are then built by decoding each object once.

Authorization is the hub's: the cache is subscribed with the caller's credential, so in the
default mode it belongs to the caller's scope and is filled by a list and a watch the
apiserver authorizes with that credential (a caller who may not list a namespace gets the
apiserver's ``Forbidden``); with ``--shared-watches`` the hub admits the cache's subscription
by access reviews with the caller's token and ends it, ``Forbidden``, when the right goes.

Cost follows use: a cache is made by the first view of its list and closed after
``idle`` seconds without one; the JSON bytes all caches hold have a ``budget``: a view that
would open a cache past it, or a cache that grows past it, is refused with
:class:`~gateway.core.errors.ResourceExhausted`.

Evaluation (:mod:`gateway.core.views.evaluate`) runs on a snapshot (the entries at one
version, a list of references taken in one step on the event loop): in a worker thread,
its CPU measured, until a view of the same shape has been measured under
:data:`INLINE_SECONDS` at this version, then on the event loop (the first evaluation built
what the next read: they are a few C-level passes); the order of a (filter, search, sort)
at a version is kept for the next pages and shared by concurrent callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypeVar

from gateway.core import errors
from gateway.core.lists.compacting import ColumnSpec
from gateway.core.model.registry import Resource
from gateway.core.process.collector import HOLD
from gateway.core.upstream.budget import scope_of
from gateway.core.upstream.credentials import Credential
from gateway.core.views import evaluate
from gateway.core.views.evaluate import Count, Ordered, Page
from gateway.core.views.spec import FieldPath, ViewSpec
from gateway.core.views.store import Entry, Snapshot, Store
from gateway.core.watch.access import AccessReviews, forbidden
from gateway.core.watch.hub import HubEvent, WatchHub, WatchStart, WatchSubscription, WatchTarget
from gateway.core.watch.watcher import RESYNC_ANNOTATION, decimal_version

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Events applied per event-loop step while a cache fills (~5 ms of realistic pods).
APPLY_PER_STEP = 1000
#: Objects of a snapshot taken in per event-loop step (:meth:`ViewCache._fill`: an entry
#: each, ~1 us; ~5 ms of the loop).
FILL_PER_STEP = 5000
#: Orders (filter, search, sort at one version) a cache keeps for the next pages.
ORDERS_KEPT = 16
#: Pages a cache keeps decoded for their next callers (the last cut of the orders last
#: asked; :func:`evaluate.page <gateway.core.views.evaluate.page>`).
PAGES_KEPT = 4
#: Seconds a view waits for its cache to reach ``minResourceVersion``.
VERSION_WAIT = 10.0
#: CPU seconds under which an evaluation runs on the event loop (see :func:`_evaluate`).
INLINE_SECONDS = 0.002


ALL_NAMESPACES_HINT = (
    "a view across all namespaces needs list and watch in all of them: ask for a view of "
    "one namespace you may list (`namespace`)"
)


def refused(resource: Resource, namespace: str | None) -> errors.Forbidden:
    """The refusal of a view whose caller may not list and watch what it covers."""
    base = forbidden(resource, namespace)
    kind = f"{resource.plural}{'.' + resource.group if resource.group else ''}"
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    message = f'{kind} is forbidden: the caller may not list and watch "{resource.plural}" {where}'
    if namespace is None:
        message += f"; {ALL_NAMESPACES_HINT}"
    return errors.Forbidden(message, details=base.details)


@dataclass(slots=True)
class ViewStats:
    """Counters for tests and the metrics endpoint."""

    caches: int = 0
    opened: int = 0
    dropped_idle: int = 0
    refused_budget: int = 0
    #: Orders computed (filter + search + sort of a snapshot).
    evaluations: int = 0
    #: Objects decoded to answer pages (the callers of one page share its objects).
    decoded: int = 0
    bytes: int = 0


class ViewCache:
    """The objects of one list for one scope, at one version, kept by a hub subscription."""

    def __init__(
        self,
        views: Views,
        key: tuple[Any, ...],
        target: WatchTarget,
        columns: tuple[ColumnSpec, ...] = (),
    ) -> None:
        self.views = views
        self.key = key
        self.target = target
        #: The columns of the view that made it: a hub watch its subscription opens has a
        #: list worker read them as it lists (:class:`~gateway.core.watch.hub.WatchStart`).
        self.columns = columns
        self.store = Store()
        #: The version the store stands at (``None`` until the snapshot is in).
        self.version: str | None = None
        self.in_resync = False
        self.error: errors.GatewayError | None = None
        self.closed = False
        self.last_used = views.clock()
        self.ready = asyncio.Event()
        #: Set once closed (idle, failed, or the gateway stopping).
        self.ended = asyncio.Event()
        self._moved = asyncio.Event()
        self._sub: WatchSubscription | None = None
        self._task: asyncio.Task[None] | None = None
        self._orders: OrderedDict[tuple[Any, ...], asyncio.Future[Ordered]] = OrderedDict()
        #: The orders whose last page is kept (:meth:`page`), by identity, the last last.
        self._pages: OrderedDict[int, Ordered] = OrderedDict()
        #: Callers using it right now (never dropped as idle meanwhile).
        self.users = 0
        #: Its objects as pages' selections wrote them, for the next pages (their bytes
        #: counted in the budget).
        self.rendered = evaluate.Rendered(views.stats)

    def start(self, credential: Credential) -> None:
        self._task = asyncio.create_task(self._run(credential), name="view-cache")

    async def _run(self, credential: Credential) -> None:
        try:
            sub = self._sub = await self.views.hub.subscribe(
                self.target,
                WatchStart("snapshot", bookmarks=True, columns=self.columns, make=Entry.all_keyed),
                credential,
            )
            if self.closed:  # closed while it subscribed
                sub.close()
                return
            # what a list worker read of the listed objects: the first columns' build takes
            # them where the snapshot's objects are the very ones listed
            self.store.listed = sub.listed_columns()
            pairs = sub.take_snapshot()
            if pairs:
                await self._fill(pairs)
            del pairs  # the hub's state, not to be held by this frame after it goes
            if self.closed:
                return
            self._settle(sub)  # ready at the snapshot's version (an empty list: at once)
            while True:
                event = await sub.next()
                if event is None:
                    raise errors.Unavailable("the view's upstream watch ended; ask again")
                # the batch with the cyclic collector held off (the process's count): a
                # fill allocates an entry per object, and a collection in between would
                # walk every one made so far, again and again; a large one frozen after,
                # where the process is the gateway's own (HOLD.settle)
                applied = 0
                with HOLD.held():
                    while event is not None:
                        for _ in range(APPLY_PER_STEP):
                            self._apply(event)
                            applied += 1
                            event = sub.next_nowait()
                            if event is None:
                                break
                        if self.views.stats.bytes > self.views.budget:
                            break  # refused at once, not after the whole list
                        if event is not None:
                            await asyncio.sleep(0)
                if applied >= APPLY_PER_STEP:
                    HOLD.settle()
                self._settle(sub)
                if self.closed:
                    return
        except Exception as exc:
            self._fail(errors.of_failure(exc, "the view's cache", log, of=self.target.resource.key))

    async def _fill(self, pairs: list[tuple[str, bytes]]) -> None:
        """The hub's snapshot taken in at once (:meth:`WatchSubscription.take_snapshot
        <gateway.core.watch.hub.WatchSubscription.take_snapshot>`): what an ``ADDED`` event
        per object would do (:meth:`_apply`), :data:`FILL_PER_STEP` objects per event-loop
        step (:meth:`Store.put_keyed <gateway.core.views.store.Store.put_keyed>`), refused
        before anything is stored when the objects would take the caches past the budget.
        """
        views = self.views
        if views.stats.bytes + sum(map(len, map(itemgetter(1), pairs))) > views.budget:
            views.stats.refused_budget += 1
            self._fail(views.over_budget())
            return
        # the entries made as the list was taken in (between the worker's parts), when the
        # snapshot is the very objects listed, in the list's order (else made here)
        listed = self.store.listed
        made = None if listed is None else listed.made
        if listed is not None:
            listed.made = None
        if made is not None and len(made) != len(pairs):
            made = None  # (each step's entries are checked to be of its very objects)
        with HOLD.held():  # an entry per object: see _run
            for start in range(0, len(pairs), FILL_PER_STEP):
                views.stats.bytes += self.store.put_keyed(
                    pairs[start : start + FILL_PER_STEP],
                    None if made is None else made[start : start + FILL_PER_STEP],
                )
                if start + FILL_PER_STEP < len(pairs):
                    await asyncio.sleep(0)
                    if self.closed:
                        return
        if len(pairs) >= APPLY_PER_STEP:
            HOLD.settle()

    def _apply(self, event: HubEvent) -> None:
        kind = event.type
        if kind == "BOOKMARK":
            return
        raw, key = event.raw, event.key
        if raw is not None and key is not None and kind != "DELETED":
            # a snapshot's event: the hub's JSON and key, nothing decoded
            self.views.stats.bytes += self.store.put(key, Entry.keyed(key, raw))
            if self.rendered.size:
                self.rendered.forget(_named(key))
            return
        obj = event.object
        if kind == "RESYNC":
            meta = obj.get("metadata") or {}
            self.in_resync = (meta.get("annotations") or {}).get(RESYNC_ANNOTATION) == "begin"
            return
        if type(obj) is not dict:
            return
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        if kind == "DELETED":
            self.views.stats.bytes -= self.store.delete(key)
        else:
            self.views.stats.bytes += self.store.put(key, Entry.of(obj, raw), obj)
        if self.rendered.size:
            self.rendered.forget(_named(key))

    def _settle(self, sub: WatchSubscription) -> None:
        """After a batch: the version, the budget, and wake whoever waits."""
        if self.views.stats.bytes > self.views.budget:
            self.views.stats.refused_budget += 1
            self._fail(self.views.over_budget())
            return
        if not self.in_resync and sub.resume is not None:
            self.version = sub.resume
            self.ready.set()
        generation = self.store.generation
        for key in [k for k in self._orders if k[0] != generation]:
            del self._orders[key]  # orders of objects gone by (callers keep their own)
        for at, ordered in list(self._pages.items()):
            if ordered.snapshot.generation != generation:
                del self._pages[at]
                ordered.kept = None
        self._moved.set()
        self._moved = asyncio.Event()

    def _fail(self, error: errors.GatewayError) -> None:
        if self.error is None:
            self.error = error
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.views._forget(self)
        # what it counted (bytes its bigrams grew by since last taken are not yet in)
        self.views.stats.bytes -= self.store.bytes - self.store.take_grown()
        self.store.clear()
        self._orders.clear()
        for ordered in self._pages.values():
            ordered.kept = None
        self._pages.clear()
        self.rendered.clear()
        if self._sub is not None:
            self._sub.close()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        self.ready.set()
        self._moved.set()
        self.ended.set()

    # -- reading -------------------------------------------------------------------------

    def _check(self) -> None:
        error = self.error
        if error is not None:
            if isinstance(error, errors.Forbidden) and self.target.namespace is None:
                raise errors.Forbidden(
                    f"{error.message}; {ALL_NAMESPACES_HINT}", details=error.details
                ) from error
            raise error
        if self.closed:
            raise errors.Unavailable("the view's cache was closed; ask again")

    async def snapshot(self, spec: ViewSpec, paths: list[FieldPath]) -> Snapshot:
        """The store at one version (at least ``spec.min_resource_version``), with the
        columns of ``paths``.

        Raises:
            GatewayError: what ended the cache (the upstream refused the caller...).
            Timeout: the version was not reached within ``Views.version_wait``.
        """
        await self.ready.wait()
        self._check()
        min_version = spec.min_resource_version
        wanted = decimal_version(min_version) if min_version else None
        wait = self.views.version_wait
        deadline = self.views.clock() + wait
        while True:
            # an index only for a sort by one key: a page of it is then a walk
            await self.store.ensure(
                paths,
                [k.path for k in spec.sort] if len(spec.sort) == 1 else [],
                evaluate.text_paths(spec),
            )
            self.views.stats.bytes += self.store.take_grown()
            self._check()
            if not self.in_resync and (
                wanted is None or (decimal_version(self.version) or 0) >= wanted
            ):
                break
            left = deadline - self.views.clock()
            if left <= 0:
                raise errors.Timeout(
                    f"the view did not reach resourceVersion {min_version} within "
                    f"{wait:g} s (it stands at {self.version}); ask again"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), left)
            self._check()
        assert self.version is not None
        return self.store.snapshot(self.version, paths)

    async def ordered(self, spec: ViewSpec) -> tuple[str, Ordered]:
        """The matching objects in the view's order at the cache's version (at least
        ``spec.min_resource_version``), computed once per generation for all callers; and
        that version (an order computed at an earlier version of the same generation is
        the same objects: only bookmarks came between)."""
        snap = await self.snapshot(spec, evaluate.paths_of(spec))
        key = (snap.generation, spec.order_key)
        found = self._orders.get(key)
        if found is None:
            found = asyncio.get_running_loop().create_future()
            self._orders[key] = found
            while len(self._orders) > ORDERS_KEPT:
                self._orders.popitem(last=False)
            self.views.stats.evaluations += 1
            try:
                shape = f"order:{evaluate.shape(spec)!r}"
                result = await _evaluate(
                    snap, shape, lambda: evaluate.prepare(snap, spec), _order, snap, spec
                )
            except BaseException as exc:
                self._orders.pop(key, None)
                found.set_exception(exc)
                found.exception()  # retrieved: nobody else may be waiting
                raise
            found.set_result(result)
        else:
            self._orders.move_to_end(key)
        return snap.version, await asyncio.shield(found)

    def page(
        self,
        ordered: Ordered,
        spec: ViewSpec,
        version: str,
        decoded: evaluate.Decoded | None = None,
    ) -> Page:
        """The page of ``spec`` of one of this cache's orders at ``version``; the last
        pages cut stay decoded for their next callers, :data:`PAGES_KEPT` of them (the
        others' objects are freed with their answers).  ``decoded``: a live view's last
        page's objects, reused where unchanged."""
        found = evaluate.page(ordered, spec, version, decoded, self.rendered)
        if ordered.kept is not None:
            key = id(ordered)  # kept here: the identity is not reused meanwhile
            self._pages[key] = ordered
            self._pages.move_to_end(key)
            while len(self._pages) > PAGES_KEPT:
                _, dropped = self._pages.popitem(last=False)
                dropped.kept = None
        return found


def _order(snap: Snapshot, spec: ViewSpec) -> Ordered:
    """:func:`evaluate.order <gateway.core.views.evaluate.order>`, and the line its pages
    walk made now, with the evaluation (a descending order's is a sort of the whole
    index: 46 ms of the event loop for 30,000 pods if the first page made it)."""
    found = evaluate.order(snap, spec)
    next(found.walk(None), None)
    return found


async def _evaluate(
    snap: Snapshot, shape: str, prepare: Callable[[], None], fn: Callable[..., T], *args: Any
) -> T:
    """``fn(*args)``, an evaluation on ``snap`` of a view of ``shape`` (the function,
    :func:`~gateway.core.views.evaluate.shape` and what else its cost depends on).

    The first of its shape at this generation builds what every such evaluation reads
    (``prepare``: texts joined, codes, the sort's line) and is then measured, both in a
    worker thread; evaluations of the same shape that come meanwhile wait for its measure.
    Then each runs on the event loop when the least CPU an evaluation of its shape took at
    this generation is under :data:`INLINE_SECONDS` (what is left is a few C-level passes),
    else in a worker thread, measured, one at a time while the others of its shape wait for
    its measure (a first measure can take a collection of the collector with it).  A worker
    thread costs a hand-off each way and, with many callers at once, waits for the
    interpreter's lock behind the others: for 50 concurrent views of 30,000 objects that
    was most of their latency."""
    memo = snap.memo
    key = f"cpu:{shape}"

    def timed() -> T:
        started = time.thread_time()
        result = fn(*args)
        took = time.thread_time() - started
        memo[key] = min(took, memo.get(key, took))
        return result

    def cheap() -> bool:
        cost = memo.get(key)
        return cost is not None and cost < INLINE_SECONDS

    first: asyncio.Future[Any] | None = memo.get(f"first:{shape}")
    if first is None:

        def built_then_timed() -> T:
            prepare()
            return timed()

        first = memo[f"first:{shape}"] = asyncio.ensure_future(asyncio.to_thread(built_then_timed))
        return await asyncio.shield(first)
    if not first.done():
        await asyncio.wait([first])  # its outcome is its caller's; only its measure is read
    if cheap():
        return await _inline(memo, timed)
    measuring: asyncio.Future[Any] | None = memo.get(f"measuring:{shape}")
    if measuring is not None and not measuring.done():
        await asyncio.wait([measuring])
        if cheap():
            return await _inline(memo, timed)
        return await asyncio.to_thread(timed)
    measuring = memo[f"measuring:{shape}"] = asyncio.ensure_future(asyncio.to_thread(timed))
    return await asyncio.shield(measuring)


async def _inline(memo: dict[str, Any], timed: Callable[[], T]) -> T:
    """``timed()`` on the event loop, one at a time with a turn of the loop after each:
    callers that woke together (they waited for a measure) do not hold the loop for all
    of their evaluations in one turn."""
    lock: asyncio.Lock | None = memo.get("inline:lock")
    if lock is None:
        lock = memo["inline:lock"] = asyncio.Lock()
    async with lock:
        result = timed()
        await asyncio.sleep(0)
    return result


class Views:
    """The view caches of one cluster: made on use, dropped when idle, within a budget.

    Args:
        hub: the cluster's watch hub (whose upstream watches fill the caches).
        idle: seconds a cache stays after its last use.
        budget: bytes of JSON all caches may hold together.
        reviews: asks whether a caller may list and watch what a view covers, before each
            view (default: reviews through the hub's adapter, each answer reused 30 s): an
            upstream watch goes on after the caller's right is revoked, a view does not.
        version_wait: seconds a view waits for its cache to reach ``minResourceVersion``.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        hub: WatchHub,
        *,
        idle: float = 300.0,
        budget: int = 1 << 30,
        reviews: AccessReviews | None = None,
        version_wait: float = VERSION_WAIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hub = hub
        self.idle = idle
        self.budget = budget
        self.reviews = reviews if reviews is not None else AccessReviews(hub.adapter)
        self.version_wait = version_wait
        self.clock = clock
        self.stats = ViewStats()
        self._caches: dict[tuple[Any, ...], ViewCache] = {}
        self._reaper: asyncio.Task[None] | None = None

    @property
    def caches(self) -> list[ViewCache]:
        return list(self._caches.values())

    def over_budget(self) -> errors.ResourceExhausted:
        return errors.ResourceExhausted(
            f"the gateway's view caches are full (they may hold {self.budget} bytes of "
            "objects, --view-memory-bytes); narrow the view to one namespace or try again "
            "later"
        )

    def _cache(
        self, spec: ViewSpec, credential: Credential, extra: tuple[FieldPath, ...] = ()
    ) -> ViewCache:
        """The cache of the spec's list for the caller (made now if there is none, its
        columns those of the spec's paths and ``extra``)."""
        r = spec.resource
        key = (scope_of(credential), r.key, r.version, spec.namespace)
        cache = self._caches.get(key)
        if cache is None:
            if self.stats.bytes >= self.budget:
                self.stats.refused_budget += 1
                raise self.over_budget()
            r.check("list")
            r.check("watch")
            paths = [*extra, *evaluate.paths_of(spec)]
            columns = tuple(dict.fromkeys((p.keys, str(p.kind)) for p in paths))
            cache = ViewCache(self, key, WatchTarget(r, spec.namespace), columns)
            self._caches[key] = cache
            self.stats.caches += 1
            self.stats.opened += 1
            cache.start(credential)
            if self._reaper is None and self.idle > 0:
                self._reaper = asyncio.create_task(self._reap(), name="view-reaper")
        return cache

    def _forget(self, cache: ViewCache) -> None:
        if self._caches.get(cache.key) is cache:
            del self._caches[cache.key]
            self.stats.caches -= 1

    async def _using(
        self, spec: ViewSpec, credential: Credential, extra: tuple[FieldPath, ...] = ()
    ) -> ViewCache:
        """The caller's cache of the spec's list, in use until :meth:`_done`.

        Every view is answered only after an access review says the caller may list and
        watch there (the answer reused for a while): a cache made now is filled by a list
        made with the caller's credential, but the hub may join it to an upstream watch of
        the caller's scope that is still open (lingering) and an upstream watch goes on
        after the caller's right is revoked; a cache whose caller is refused is dropped.
        """
        allowed = await self.reviews.may_watch(credential, spec.resource, spec.namespace)
        if not allowed:
            r = spec.resource
            cache = self._caches.get((scope_of(credential), r.key, r.version, spec.namespace))
            if cache is not None:
                cache.close()
            raise refused(spec.resource, spec.namespace)
        cache = self._cache(spec, credential, extra)
        cache.users += 1
        cache.last_used = self.clock()
        return cache

    def _done(self, cache: ViewCache) -> None:
        cache.users -= 1
        cache.last_used = self.clock()

    async def page(self, spec: ViewSpec, credential: Credential) -> Page:
        """A page of ``spec`` for the caller (see :func:`gateway.core.views.evaluate.page`).

        Raises:
            GatewayError: the upstream refused the caller (``Forbidden`` for a namespace
                it may not list...), the budget is spent, the version was not reached.
        """
        cache = await self._using(spec, credential)
        try:
            version, ordered = await cache.ordered(spec)
            decoded = ordered.decoded
            found = cache.page(ordered, spec, version)
            self.stats.decoded += ordered.decoded - decoded
            return found
        finally:
            self._done(cache)

    async def counts(
        self, spec: ViewSpec, by: FieldPath, credential: Credential
    ) -> tuple[int, str, list[Count]]:
        """The view's total, version and counts grouped by ``by`` (nothing is sorted)."""
        cache = await self._using(spec, credential, (by,))
        try:
            snap = await cache.snapshot(spec, [by, *evaluate.paths_of(spec)])

            self.stats.evaluations += 1
            shape = f"tally:{by.kind}:{by.keys!r}:{evaluate.shape(spec)!r}"
            total, groups = await _evaluate(
                snap,
                shape,
                lambda: evaluate.prepare(snap, spec, by),
                evaluate.tally,
                snap,
                spec,
                by,
            )
            return total, snap.version, groups
        finally:
            self._done(cache)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(max(0.05, min(self.idle / 4, 30.0)))
            now = self.clock()
            for cache in self.caches:
                if cache.users == 0 and now - cache.last_used >= self.idle:
                    self.stats.dropped_idle += 1
                    cache.close()

    async def aclose(self) -> None:
        """Close every cache (their hub subscriptions end)."""
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
            self._reaper = None
        for cache in self.caches:
            cache.close()


def _named(key: str) -> tuple[str, str]:
    """A store's key (``namespace/name``) as the writings name the object."""
    namespace, _, name = key.partition("/")
    return namespace, name
