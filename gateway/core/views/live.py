"""Live views: a view's page, sent again whenever what it shows changes (issue 29, goal 2).

A :class:`LiveView` is one view (its cache, filter, search, sort, page, interval and mode)
shared by every subscriber of it: after each batch of changes its cache takes, it
evaluates the view once (the cache's order, shared further with queries of the same
order, then the page) and hands the same :class:`LivePage` to every subscriber, at most
once per ``interval`` (changes within it are coalesced into one evaluation), and only when
the page differs from the last one it published: an item entered, left or moved, an
item's object changed (its ``resourceVersion``), the cursors, ``hasNextPage`` or the
total changed.  A change to an object outside the page that leaves the total as it was
evaluates the view and publishes nothing.  (Whether a *selected* field changed is the
front end's: it compares what it renders, see
:mod:`gateway.graphql.engine.subscriptions`.)  With ``every_change`` (the front end
selects counts, which the page does not show) every batch that changed the cache is
published.

The live views of one cluster do not evaluate together: each has a phase (its place in a
golden-ratio sequence, :func:`phase_of`), and while busy evaluates on its own grid (phase
plus whole intervals, :func:`next_slot`), so a batch that moves every view is sent to each
view's subscribers in a round of its own, not all in one loop turn; a change after a quiet
interval is evaluated at once.

Each subscriber (:class:`LiveSubscription`, the :class:`~gateway.core.calls.streaming.Stream`
the front ends read) holds one lease of the hub's subscriber budget, as a watch
subscription does, and at most one unread page: a newer page replaces an unread one, so a
reader that is slow loses nothing but intermediate states; one that lets ``max_unread``
pages go by unread has stopped reading and is ended with
:class:`~gateway.core.errors.SlowSubscriber` (nobody else notices).

Authorization is a view's: the caller is reviewed (list and watch, its own credential)
before it subscribes, and the live view reviews it again every ``recheck`` seconds; a
caller whose right is gone has every subscriber ended with ``Forbidden`` and its cache
dropped.  A cache that ends (its upstream refused, the budget, the gateway stopping) ends
its live views with its error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

from gateway.core import errors
from gateway.core.upstream.budget import scope_of
from gateway.core.upstream.credentials import Credential
from gateway.core.views.cache import ViewCache, Views, refused
from gateway.core.views.evaluate import Decoded, Page
from gateway.core.views.spec import ViewSpec

log = logging.getLogger(__name__)

#: Bounds of a subscription's own interval (milliseconds).
MIN_INTERVAL_MS: Final = 50
MAX_INTERVAL_MS: Final = 10_000
#: Pages a subscriber may let go by unread before it is ended as slow.
MAX_UNREAD: Final = 240
#: The golden ratio's fraction: the n-th live view of an owner starts its grid at the
#: fraction ``n * GOLDEN % 1`` of its interval, so any number of them are spread evenly.
GOLDEN: Final = 0.6180339887498949
#: A busy live view evaluates on its grid: a late evaluation (the loop was busy) is
#: followed by one up to this fraction of the interval early, to get back on it ...
SLACK: Final = 0.1
#: ... and one off its grid (after a quiet time) is followed by one at most this fraction
#: of the interval late, to get onto it in a few intervals.
CATCH_UP: Final = 0.25
#: Evaluation times a live view remembers (``LiveView.evaluated``: tests, metrics).
REMEMBERED: Final = 64


def phase_of(n: int, interval: float) -> float:
    """The phase (seconds, in ``[0, interval)``) of an owner's ``n``-th live view: a
    low-discrepancy sequence, so the views of one cluster do not evaluate (and send) in
    the same loop turn when one batch of changes moves them all."""
    return (n * GOLDEN) % 1.0 * interval


def next_slot(last: float, phase: float, interval: float) -> float:
    """When a busy live view that evaluated at ``last`` evaluates next: the point of its
    grid (``phase + k * interval``, the loop's clock) nearest to ``last + interval``, but
    no earlier than ``SLACK`` and no later than ``CATCH_UP`` of an interval from it (at
    most one evaluation per interval, at least ``1 - SLACK`` of one apart)."""
    due = last + interval
    grid = phase + round((due - phase) / interval) * interval
    return min(max(grid, due - SLACK * interval), due + CATCH_UP * interval)


def interval_of(requested: int | None, default: float) -> float:
    """The interval (seconds) of a subscription that asked for ``requested`` ms.

    Raises:
        InvalidView: outside :data:`MIN_INTERVAL_MS` to :data:`MAX_INTERVAL_MS`.
    """
    if requested is None:
        return default
    if type(requested) is not int or not MIN_INTERVAL_MS <= requested <= MAX_INTERVAL_MS:
        raise errors.InvalidView(
            f"interval must be between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} ms, "
            f"not {requested!r}"
        )
    return requested / 1000


class LivePage:
    """One update of a live view, the same object for every subscriber of it (front ends
    render it once per document and identity, :meth:`encoded`; ``stats``, when given,
    counts each of those encodings)."""

    __slots__ = ("_encoded", "page", "spec", "stats")

    def __init__(self, spec: ViewSpec, page: Page, stats: LiveStats | None = None) -> None:
        self.spec = spec
        self.page = page
        self.stats = stats
        self._encoded: dict[Any, Any] | None = None

    @property
    def resume(self) -> str:
        return self.page.resource_version

    def encoded(self, key: Any, encode: Callable[[LivePage], Any]) -> Any:
        """``encode(self)``, computed once per key (a front end's document and identity)."""
        memo = self._encoded
        if memo is None:
            memo = self._encoded = {}
        try:
            return memo[key]
        except KeyError:
            value = memo[key] = encode(self)
            if self.stats is not None:
                self.stats.encodings += 1
            return value


def fingerprint(page: Page) -> tuple[Any, ...]:
    """What a page shows, short of the rendering: items (and their versions), cursors,
    total, page info; not the page's resourceVersion.  An item is named by its values, not
    its identity: the store keeps each object as its JSON, and a page cut anew decodes it
    anew (the callers of one page share its decoded objects)."""
    items = tuple(
        (m.get("namespace"), m.get("name"), m.get("uid"), m.get("resourceVersion"))
        for obj in page.items
        if type(m := obj.get("metadata")) is dict
    )
    return (items, tuple(page.cursors), page.total, page.has_next, page.has_previous)


@dataclass(slots=True)
class LiveStats:
    """Counters for tests and metrics."""

    views: int = 0
    subscribers: int = 0
    #: Pages evaluated (one per live view and batch of changes).
    evaluations: int = 0
    #: Pages published (an evaluation whose page changed).
    published: int = 0
    #: Subscribers ended as slow readers.
    slow: int = 0
    #: Encodings of published pages (:meth:`LivePage.encoded`: one per page and front-end
    #: shape, GraphQL's document and identity or gRPC's read mask and representation,
    #: shared by every subscriber that asks for the same).
    encodings: int = 0
    #: Objects the evaluations decoded (an object of the last page whose JSON is the same
    #: is not decoded again).
    decodes: int = 0
    #: The event loop's CPU seconds cutting and publishing pages (``thread_time``; the
    #: order, shared with queries, is not counted).
    evaluation_seconds: float = 0.0


class _Page(Protocol):
    @property
    def resume(self) -> str | None: ...


class _Releasable(Protocol):
    def release(self) -> None: ...


PageT = TypeVar("PageT", bound=_Page)


class Subscription(Generic[PageT]):
    """One subscriber of a live view (a cluster's, :class:`LiveSubscription`, or a fleet's,
    ``livefleet.FleetLiveSubscription``): the stream a front end reads (``next``,
    ``close``).

    ``next()`` returns the latest page not read yet (waiting for one), then ``None`` when
    the subscription is over (``error`` says why, if it failed).  ``view`` is what it
    subscribed to (its ``owner`` has ``max_unread`` and ``stats.slow``; ``leave`` is told
    when it closes), ``lease`` what it holds of the subscriber budgets."""

    def __init__(self, view: Any, lease: _Releasable, notify: bool) -> None:
        self.view = view
        self.lease = lease
        #: Notify mode: the front end sends that the view changed, not the page.
        self.notify = notify
        self.error: errors.GatewayError | None = None
        self.closed = False
        self._pending: PageT | None = None
        self._unread = 0
        self._wake = asyncio.Event()
        self._last: PageT | None = None
        #: What the front end last sent (its own comparison of renders).
        self.sent: Any = None

    @property
    def resume(self) -> str | None:
        last = self._last
        return last.resume if last is not None else None

    def offer(self, page: PageT) -> None:
        if self.closed:
            return
        if self._pending is not None:
            self._unread += 1
            if self._unread > self.view.owner.max_unread:
                self.view.owner.stats.slow += 1
                self.fail(
                    errors.SlowSubscriber(
                        f"the live view's subscriber let {self.view.owner.max_unread} "
                        "updates go by unread and was ended; subscribe again",
                        resource_version=self.resume,
                    )
                )
                return
        self._pending = page
        self._wake.set()

    def __aiter__(self) -> Subscription[PageT]:
        return self

    async def __anext__(self) -> PageT:
        page = await self.next()
        if page is None:
            raise StopAsyncIteration
        return page

    def next_nowait(self) -> PageT | None:
        page = self._pending
        if page is not None:
            self._pending = None
            self._unread = 0
            self._last = page
            self._wake.clear()
        return page

    async def next(self) -> PageT | None:
        """The latest page not read yet, waiting for one; ``None`` once closed.

        Raises:
            GatewayError: what ended the subscription (``Forbidden``, a slow reader...).
        """
        while not self.closed:
            page = self.next_nowait()
            if page is not None:
                return page
            await self._wake.wait()
        if self.error is not None:
            raise self.error
        return None

    def fail(self, error: errors.GatewayError) -> None:
        if self.error is None and not self.closed:
            self.error = error
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._pending = None
        self.lease.release()
        self._wake.set()
        self.view.leave(self)

    def unchanged(self, rendered: Any) -> bool:
        """Whether ``rendered`` (the front end's comparable rendering of a page) is what
        it sent last; remembers it otherwise."""
        if rendered == self.sent:
            return True
        self.sent = rendered
        return False


class LiveSubscription(Subscription[LivePage]):
    """One subscriber of one cluster's live view."""


class Published(Generic[PageT]):
    """What a live view (a cluster's, :class:`LiveView`, or a fleet's,
    ``livefleet.FleetLiveView``) does with its subscribers: a joiner gets the last page at
    once and the first starts the evaluation task (:meth:`_run`); the last to leave ends
    the view, which ends every subscriber (with the view's error, if any), lets go of what
    the view holds (:meth:`_let_go`) and stops the task.  ``owner`` has ``stats`` and
    ``_forget``."""

    #: The name of the evaluation task.
    task_name = "live-view"

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.subscribers: set[Subscription[PageT]] = set()
        self.last: PageT | None = None
        self._task: asyncio.Task[None] | None = None
        self.ended = False

    def join(self, sub: Subscription[PageT]) -> None:
        self.subscribers.add(sub)
        self.owner.stats.subscribers += 1
        if self.last is not None:
            sub.offer(self.last)  # a joiner gets the page at once
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.task_name)

    def leave(self, sub: Subscription[PageT]) -> None:
        if sub in self.subscribers:
            self.subscribers.discard(sub)
            self.owner.stats.subscribers -= 1
        if not self.subscribers:
            self.end()

    def end(self, error: errors.GatewayError | None = None) -> None:
        """End the live view (every subscriber with ``error``, if any)."""
        if self.ended:
            return
        self.ended = True
        self.owner._forget(self)
        for sub in list(self.subscribers):
            if error is not None:
                sub.fail(error)
            else:
                sub.close()
        self._let_go()
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def _let_go(self) -> None:
        """What the ended view holds besides its subscribers and task."""

    async def _run(self) -> None:
        raise NotImplementedError


class LiveView(Published[LivePage]):
    """The subscribers of one view and its evaluation task; see the module."""

    def __init__(  # noqa: PLR0917
        self,
        owner: LiveViews,
        key: tuple[Any, ...],
        spec: ViewSpec,
        cache: ViewCache,
        credential: Credential,
        interval: float,
        every_change: bool,
        place: int = 0,
    ) -> None:
        super().__init__(owner)
        self.key = key
        self.spec = spec
        self.cache = cache
        self.credential = credential
        self.interval = interval
        self.every_change = every_change
        #: Where on the interval's grid this view evaluates while busy: its ``place`` in
        #: :func:`phase_of`'s sequence among its owner's live views.
        self.place = place
        self.phase = phase_of(place, interval)
        #: The loop's time (``loop.time()``) of its last evaluations.
        self.evaluated: deque[float] = deque(maxlen=REMEMBERED)
        #: The version of the last evaluation (published or not).
        self.version: str | None = None
        self._fingerprint: tuple[Any, ...] | None = None
        #: The last page's objects, reused by the next page where unchanged.
        self._decoded = Decoded()

    def _let_go(self) -> None:
        self.owner.views._done(self.cache)

    async def _run(self) -> None:
        views, cache, spec = self.owner.views, self.cache, self.spec
        loop = asyncio.get_running_loop()
        generation: int | None = None
        evaluated_at = float("-inf")
        review_at = loop.time() + self.owner.recheck
        try:
            while True:
                moved = cache._moved  # set by the cache's next batch
                if cache.store.generation != generation:
                    evaluated_at = loop.time()
                    self.evaluated.append(evaluated_at)
                    version, ordered = await cache.ordered(spec)
                    began = time.thread_time()
                    decodes = self._decoded.decodes
                    page = cache.page(ordered, spec, version, self._decoded)
                    stats = self.owner.stats
                    stats.evaluations += 1
                    stats.decodes += self._decoded.decodes - decodes
                    self.version = version
                    changed = ordered.snapshot.generation != generation
                    generation = ordered.snapshot.generation
                    self._publish(page, changed)
                    stats.evaluation_seconds += time.thread_time() - began
                if cache.store.generation == generation:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(moved.wait(), max(0.0, review_at - loop.time()))
                cache._check()  # the cache ended: its error ends the live view
                if loop.time() >= review_at:
                    allowed = await views.reviews.may_watch(
                        self.credential, spec.resource, spec.namespace
                    )
                    if not allowed:
                        cache.close()
                        raise refused(spec.resource, spec.namespace)
                    review_at = loop.time() + self.owner.recheck
                # coalesce: at most one evaluation per interval, on the view's own grid
                # once busy (a change after a quiet interval is evaluated at once)
                now = loop.time()
                if now < evaluated_at + self.interval:
                    at = next_slot(evaluated_at, self.phase, self.interval)
                    if at > now:
                        await asyncio.sleep(at - now)
        except Exception as exc:
            self.end(errors.of_failure(exc, "the live view", log, of=spec.resource.key))

    def _publish(self, page: Page, changed: bool) -> None:
        found = fingerprint(page)
        if found == self._fingerprint and not (self.every_change and changed):
            return
        self._fingerprint = found
        self.last = update = LivePage(self.spec, page, self.owner.stats)
        self.owner.stats.published += 1
        for sub in list(self.subscribers):
            sub.offer(update)


_OWNERS: weakref.WeakKeyDictionary[Views, LiveViews] = weakref.WeakKeyDictionary()


class LiveViews:
    """The live views of one cluster's :class:`~gateway.core.views.cache.Views`.

    Args:
        views: the caches the live views are answered from.
        interval: the default seconds between two updates of a live view
            (``--live-view-interval-ms``).
        recheck: seconds between two access reviews of a live view's caller.
        max_unread: pages a subscriber may let go by unread before it is ended.
    """

    def __init__(
        self,
        views: Views,
        *,
        interval: float = 0.25,
        recheck: float = 30.0,
        max_unread: int = MAX_UNREAD,
    ) -> None:
        self.views = views
        self.interval = interval
        self.recheck = recheck
        self.max_unread = max_unread
        self.stats = LiveStats()
        self._views: dict[tuple[Any, ...], LiveView] = {}
        #: The places in :func:`phase_of`'s sequence the live views hold: a new one takes
        #: the first free, so the live ones stay evenly spread as others end.
        self._places: set[int] = set()

    @classmethod
    def of(cls, views: Views) -> LiveViews:
        """The live views of ``views`` (made with the defaults when none were attached)."""
        found = _OWNERS.get(views)
        if found is None:
            found = _OWNERS[views] = cls(views)
        return found

    @classmethod
    def attach(cls, views: Views, **options: Any) -> LiveViews:
        """Make the live views of ``views`` with ``options`` (the runtime's settings)."""
        found = _OWNERS[views] = cls(views, **options)
        return found

    @property
    def live(self) -> list[LiveView]:
        return list(self._views.values())

    def _forget(self, view: LiveView) -> None:
        if self._views.get(view.key) is view:
            del self._views[view.key]
            self.stats.views -= 1
        self._places.discard(view.place)  # (a view replaced under its key holds its own)

    async def subscribe(
        self,
        spec: ViewSpec,
        credential: Credential,
        *,
        interval: float | None = None,
        notify: bool = False,
        every_change: bool = False,
    ) -> LiveSubscription:
        """A subscriber of the live view of ``spec`` (joined to the one already running
        for the same view, or started now): its first page comes at once.

        Raises:
            Draining: the gateway is shutting down.
            ResourceExhausted: the subscriber budget or the view caches' budget.
            Forbidden: the caller may not list and watch what the view covers.
        """
        hub = self.views.hub
        if hub.draining:
            raise errors.Draining()
        every = interval if interval is not None else self.interval
        lease = hub.subscriber_budget.acquire(scope_of(credential))
        try:
            r = spec.resource
            cache_key = (scope_of(credential), r.key, r.version, spec.namespace)
            key = (cache_key, spec.order_key, spec.first, spec.after, every, every_change)
            view = self._views.get(key)
            if view is None or view.ended or view.cache.closed:
                cache = await self.views._using(spec, credential)  # reviewed, kept in use
                view = self._views.get(key)
                if view is None or view.ended or view.cache.closed:
                    place = next(i for i in itertools.count() if i not in self._places)
                    self._places.add(place)
                    view = LiveView(self, key, spec, cache, credential, every, every_change, place)
                    self._views[key] = view
                    self.stats.views += 1
                else:  # another subscriber started it meanwhile
                    self.views._done(cache)
            else:
                allowed = await self.views.reviews.may_watch(credential, r, spec.namespace)
                if not allowed:
                    raise refused(r, spec.namespace)
        except BaseException:
            lease.release()
            raise
        sub = LiveSubscription(view, lease, notify)
        view.join(sub)
        return sub

    async def aclose(self) -> None:
        """End every live view (the gateway stops)."""
        for view in self.live:
            view.end(errors.Draining())


__all__ = [
    "MAX_INTERVAL_MS",
    "MIN_INTERVAL_MS",
    "LivePage",
    "LiveStats",
    "LiveSubscription",
    "LiveView",
    "LiveViews",
    "fingerprint",
    "interval_of",
    "next_slot",
    "phase_of",
]
