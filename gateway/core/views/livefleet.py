"""Live fleet views: a view merged across clusters, kept live (issue 29, goals 2 and 4).

A :class:`FleetLiveView` is one merged view (the caller's identity, the named clusters,
the view's kind, namespace, filter, search, sort, page, its fleet cursor, interval and
mode) shared by every subscriber of it.  It holds one subscriber of each cluster's own
:class:`~gateway.core.views.live.LiveView` (shared in turn with that cluster's one-cluster
subscribers: one evaluation per cluster and batch of changes for everyone), and merges the
clusters' latest pages as the merged query view does
(:func:`~gateway.core.views.merge.merge`: one order, the cluster's name the last
tiebreaker, one fleet cursor).  It publishes the merged page to its subscribers once every
cluster has answered or failed, then again whenever what it shows changes (an item, its
cluster, its object's version, the cursors, the page info, the total, a cluster's total or
error), at most once per ``interval``; a change one cluster's live view publishes that does
not show in the merged page (an item past the merged page's end) publishes nothing.

Each cluster's error is its own: a cluster that refuses the caller (its own access review,
the caller's own token), fails, or whose live view ends (a revoked right, its cache's
upstream) is shown with its error in the next update and the stream goes on with the
others; its part subscribes again every ``retry`` seconds (that cluster's
``--access-recheck-seconds``) and is back in the update after the one that finds it
answering.  A cluster whose live views close (it is removed from the gateway) is its
``Draining`` error for good; a drain of the gateway (every cluster's) ends the whole live
fleet view with it.

Each subscriber (:class:`FleetLiveSubscription`) holds one lease of the subscriber budget of
every named cluster the gateway serves (as if it subscribed to each cluster's live view)
and at most one unread update (a newer one replaces it; ``max_unread`` skipped: ended as
slow, as a one-cluster subscriber is).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from gateway.core import errors
from gateway.core.upstream.budget import Lease, scope_of
from gateway.core.upstream.credentials import Credential
from gateway.core.views.live import (
    MAX_UNREAD,
    LivePage,
    LiveSubscription,
    LiveViews,
    Published,
    Subscription,
)
from gateway.core.views.merge import MergedPage, merge_off_loop
from gateway.core.views.spec import Position, ViewSpec, decode_cursor

log = logging.getLogger(__name__)

#: Seconds between two attempts of a failed cluster when its live views say none.
DEFAULT_RETRY: Final = 30.0


@dataclass(frozen=True, slots=True)
class ClusterLive:
    """One cluster's part of an update: its live view's page, or its error."""

    cluster: str
    page: LivePage | None
    error: errors.GatewayError | None


class FleetLivePage:
    """One update of a live fleet view, the same object for every subscriber of it (front
    ends render it once per document and identity, :meth:`encoded`)."""

    __slots__ = ("_encoded", "merged", "parts", "spec")

    def __init__(self, spec: ViewSpec, merged: MergedPage, parts: tuple[ClusterLive, ...]) -> None:
        self.spec = spec
        self.merged = merged
        self.parts = parts
        self._encoded: dict[Any, Any] | None = None

    @property
    def resume(self) -> str | None:
        """None: a merged view has no one version (each cluster has its own)."""
        return None

    def encoded(self, key: Any, encode: Callable[[FleetLivePage], Any]) -> Any:
        """``encode(self)``, computed once per key (a front end's document and identity)."""
        memo = self._encoded
        if memo is None:
            memo = self._encoded = {}
        try:
            return memo[key]
        except KeyError:
            value = memo[key] = encode(self)
            return value


def fleet_fingerprint(merged: MergedPage, parts: Sequence[ClusterLive]) -> tuple[Any, ...]:
    """What a merged page shows, short of versions: each item (its cluster, name and
    object version), the cursors, the page info, the total, each cluster's total or error."""
    items = tuple(
        (i.cluster, m.get("namespace"), m.get("name"), m.get("uid"), m.get("resourceVersion"))
        for i in merged.items
        if type(m := i.obj.get("metadata")) is dict
    )
    clusters = tuple(
        (
            p.cluster,
            p.page.page.total if p.page is not None else None,
            (type(p.error).__name__, p.error.message) if p.error is not None else None,
        )
        for p in parts
    )
    return (
        items,
        tuple(i.cursor for i in merged.items),
        merged.total,
        merged.has_next,
        merged.has_previous,
        clusters,
    )


@dataclass(slots=True)
class FleetLiveStats:
    """Counters for tests and metrics."""

    views: int = 0
    subscribers: int = 0
    #: Merges (one per live fleet view and batch of its clusters' updates).
    merges: int = 0
    #: Updates published (a merge whose page changed).
    published: int = 0
    #: Subscribers ended as slow readers.
    slow: int = 0
    #: Subscriptions of a cluster's live view made again after it failed.
    retries: int = 0


class _Leases:
    """The leases of one subscriber, one per cluster, released together."""

    __slots__ = ("leases",)

    def __init__(self, leases: list[Lease]) -> None:
        self.leases = leases

    def release(self) -> None:
        for lease in self.leases:
            lease.release()
        self.leases = []


class FleetLiveSubscription(Subscription["FleetLivePage"]):
    """One subscriber of a live fleet view (its ``resume`` is ``None``: a merged view has
    no one version); its lease is one per cluster (:class:`_Leases`)."""


@dataclass(slots=True)
class FleetMember:
    """One named cluster of a live fleet view: its live views, or why it has none (not
    served, views not served there)."""

    name: str
    live: LiveViews | None
    error: errors.GatewayError | None = None


class _Part:
    __slots__ = ("drained", "error", "live", "name", "page", "settled", "spec", "sub")

    def __init__(self, member: FleetMember, spec: ViewSpec) -> None:
        self.name = member.name
        self.live = member.live
        self.spec = spec
        self.error = member.error
        self.page: LivePage | None = None
        self.sub: LiveSubscription | None = None
        self.settled = member.live is None  # a page or an error seen
        #: Its cluster's live views closed (the cluster removed, the gateway draining).
        self.drained = False

    def failed(self, error: errors.GatewayError) -> None:
        error = copy.copy(error)  # one cluster's subscribers may share it: tag a copy
        error.cluster = self.name
        self.error, self.page, self.settled = error, None, True


def _position(spec: ViewSpec, cursor: str | None) -> Position | None:
    return decode_cursor(spec.sort, cursor) if cursor is not None else None


class FleetLiveView(Published["FleetLivePage"]):
    """The subscribers of one merged view, one subscriber of each cluster's live view, and
    the merge; see the module."""

    task_name = "live-fleet-view"

    def __init__(  # noqa: PLR0917
        self,
        owner: FleetLiveViews,
        key: tuple[Any, ...],
        spec: ViewSpec,
        members: Sequence[FleetMember],
        positions: Mapping[str, str],
        credential: Credential,
        interval: float,
        every_change: bool,
    ) -> None:
        super().__init__(owner)
        self.key = key
        self.spec = spec
        self.positions = dict(positions)
        self.credential = credential
        self.interval = interval
        self.every_change = every_change
        self.parts = [
            _Part(m, replace(spec, after=_position(spec, positions.get(m.name)))) for m in members
        ]
        self._fingerprint: tuple[Any, ...] | None = None
        self._wake = asyncio.Event()
        #: Set at the first update and at the end.
        self._settled = asyncio.Event()
        self._fatal: errors.GatewayError | None = None
        self._followers: list[asyncio.Task[None]] = []

    def _let_go(self) -> None:
        for task in self._followers:
            task.cancel()
        for part in self.parts:
            if part.sub is not None:
                part.sub.close()
                part.sub = None
        self._settled.set()

    async def started(self) -> None:
        """Wait for the first update (or the end of the view, which ends its subscribers
        with its error)."""
        while self.last is None and not self.ended:
            self._settled.clear()
            await self._settled.wait()

    def _changed(self) -> None:
        self._wake.set()

    async def _follow(self, part: _Part) -> None:
        """Keep ``part`` subscribed to its cluster's live view: its pages, its errors, and
        a new subscription ``retry`` seconds after it failed."""
        live = part.live
        assert live is not None
        retry = live.recheck if live.recheck > 0 else DEFAULT_RETRY
        first = True
        while True:
            if not first:
                await asyncio.sleep(retry)
                self.owner.stats.retries += 1
            first = False
            try:
                sub = await live.subscribe(
                    part.spec,
                    self.credential,
                    interval=self.interval,
                    every_change=self.every_change,
                )
            except errors.Draining as exc:
                self._drained(part, exc)
                return
            except errors.GatewayError as exc:
                part.failed(exc)
                self._changed()
                continue
            part.sub = sub
            try:
                while (page := await sub.next()) is not None:
                    part.page, part.error, part.settled = page, None, True
                    self._changed()
                part.failed(errors.Unavailable("the cluster's live view ended"))
            except errors.Draining as exc:
                sub.close()
                part.sub = None
                self._drained(part, exc)
                return
            except errors.GatewayError as exc:
                part.failed(exc)
            finally:
                sub.close()
                part.sub = None
            self._changed()

    def _drained(self, part: _Part, error: errors.Draining) -> None:
        """``part``'s cluster is going (its live views closed): its error, for good; the
        whole view ends once every cluster's is (the gateway drains)."""
        part.failed(error)
        part.drained = True
        if all(p.drained for p in self.parts if p.live is not None):
            self._fatal = error
        self._changed()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._followers = [
            asyncio.create_task(self._follow(p), name="live-fleet-part")
            for p in self.parts
            if p.live is not None
        ]
        published_at = float("-inf")
        self._wake.set()
        try:
            while True:
                await self._wake.wait()
                if self._fatal is not None:
                    raise self._fatal
                if not all(p.settled for p in self.parts):
                    self._wake.clear()
                    continue
                delay = published_at + self.interval - loop.time()
                if delay > 0:  # coalesce: at most one update per interval
                    await asyncio.sleep(delay)
                self._wake.clear()
                if self._fatal is not None:
                    raise self._fatal
                published_at = loop.time()
                await self._merge()
        except Exception as exc:
            self.end(errors.of_failure(exc, "the live fleet view", log, of=self.spec.resource.key))

    async def _merge(self) -> None:
        parts = tuple(ClusterLive(p.name, p.page, p.error) for p in self.parts)
        pages = [(p.cluster, p.page.page) for p in parts if p.page is not None]
        if self.last is None and not pages:  # refused (or failed) everywhere: refused
            first = next(p.error for p in parts if p.error is not None)
            raise first
        spec = self.spec
        merged = await merge_off_loop(spec.sort, spec.first, pages, self.positions)
        self.owner.stats.merges += 1
        found = fleet_fingerprint(merged, parts)
        if self.every_change:  # counts are not on the page: every cluster update shows
            found = (found, tuple(id(p.page) for p in parts))
        if found == self._fingerprint:
            return
        self._fingerprint = found
        self.last = update = FleetLivePage(spec, merged, parts)
        self.owner.stats.published += 1
        for sub in list(self.subscribers):
            sub.offer(update)
        self._settled.set()


_OWNERS: weakref.WeakKeyDictionary[Any, FleetLiveViews] = weakref.WeakKeyDictionary()


class FleetLiveViews:
    """The live fleet views of one fleet (every front end's).

    Args:
        max_unread: updates a subscriber may let go by unread before it is ended.
    """

    def __init__(self, *, max_unread: int = MAX_UNREAD) -> None:
        self.max_unread = max_unread
        self.stats = FleetLiveStats()
        self._views: dict[tuple[Any, ...], FleetLiveView] = {}

    @classmethod
    def of(cls, fleet: Any) -> FleetLiveViews:
        """The live fleet views of ``fleet`` (made on first use)."""
        found = _OWNERS.get(fleet)
        if found is None:
            found = _OWNERS[fleet] = cls()
        return found

    @property
    def live(self) -> list[FleetLiveView]:
        return list(self._views.values())

    def _forget(self, view: FleetLiveView) -> None:
        if self._views.get(view.key) is view:
            del self._views[view.key]
            self.stats.views -= 1

    async def subscribe(
        self,
        spec: ViewSpec,
        members: Sequence[FleetMember],
        positions: Mapping[str, str],
        credential: Credential,
        *,
        interval: float,
        notify: bool = False,
        every_change: bool = False,
    ) -> FleetLiveSubscription:
        """A subscriber of the live fleet view of ``spec`` over ``members`` from
        ``positions`` (the decoded fleet cursor: each position checked against the sort
        already), joined to the one already running for the same, or started now.  Each
        cluster's access review and cache are its own live view's (a cluster that refuses
        is shown with its error); the first update comes once every cluster answered or
        failed.

        Raises:
            Draining: the gateway is shutting down.
            ResourceExhausted: a cluster's subscriber budget (one lease in each).
        """
        scope = scope_of(credential)
        leases: list[Lease] = []
        try:
            for m in members:
                if m.live is None:
                    continue
                hub = m.live.views.hub
                if hub.draining:
                    raise errors.Draining()
                leases.append(hub.subscriber_budget.acquire(scope))
        except BaseException:
            _Leases(leases).release()
            raise
        r = spec.resource
        key = (
            scope,
            tuple((m.name, id(m.live)) for m in members),
            (r.key, r.version, spec.namespace),
            spec.order_key,
            spec.first,
            tuple(sorted(positions.items())),
            interval,
            every_change,
        )
        view = self._views.get(key)
        if view is None or view.ended:
            view = FleetLiveView(
                self, key, spec, members, positions, credential, interval, every_change
            )
            self._views[key] = view
            self.stats.views += 1
        sub = FleetLiveSubscription(view, _Leases(leases), notify)
        view.join(sub)
        try:
            await view.started()
        except BaseException:
            sub.close()
            raise
        if sub.error is not None:  # ended before its first update: refused
            raise sub.error
        return sub

    async def aclose(self) -> None:
        """End every live fleet view (the gateway stops)."""
        for view in self.live:
            view.end(errors.Draining())
        await asyncio.sleep(0)


__all__ = [
    "ClusterLive",
    "FleetLivePage",
    "FleetLiveStats",
    "FleetLiveSubscription",
    "FleetLiveView",
    "FleetLiveViews",
    "FleetMember",
    "fleet_fingerprint",
]
