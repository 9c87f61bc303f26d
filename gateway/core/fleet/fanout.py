"""Fleet operations shared by the front ends: ask several clusters at once, keep each answer.

A fleet call (gRPC's ``ResourceService.List``/``Watch`` with a cluster list; GraphQL's
``/fleet/graphql``) names its clusters, asks them all concurrently with
the caller's credential and keeps, per cluster, the answer or the error: one cluster that
refuses, fails or is not served never costs the others theirs.

- :func:`select`: the clusters a call names (``*``, or no list: every cluster the caller
  may see that its credential may reach unasked, :mod:`gateway.core.fleet.visibility`), each
  once, as a :class:`Selection`; a list longer than :func:`max_listed` or a name longer
  than a cluster name can be is refused before any per-name work, and the names the
  gateway does not serve share one refusal, the caller's visible clusters computed once
  for it;
- :func:`each_cluster`: one piece of work per named cluster, concurrently, each result or
  :class:`~gateway.core.errors.GatewayError` tagged with its cluster;
- :func:`open_fleet_stream`: every named cluster's watch opened at once and merged into a
  :class:`~gateway.core.fleet.watches.FleetStream` (a cluster that cannot open starts it
  with its error event; a stream of every cluster takes in joining ones the caller may
  see);
- :class:`FleetStreams`: the open fleet streams of a front end, following the fleet: a
  cluster removed ends its part of each of them, and only that part; one replaced goes
  on on its new configuration; a new one joins the streams of every cluster.

Anything that is not a ``GatewayError`` is a bug, not a cluster's answer: it propagates
(after the subscriptions opened beside it are closed).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from gateway.core import errors
from gateway.core.fleet.cluster import Cluster
from gateway.core.fleet.fleet import Fleet
from gateway.core.fleet.visibility import View, Visibility, refusal_message
from gateway.core.fleet.watches import FleetStream
from gateway.core.watch.hub import WatchSubscription

__all__ = [
    "ALL",
    "MAX_LISTED",
    "MAX_NAME_CHARS",
    "FleetStreams",
    "OpenOne",
    "Selection",
    "check_listed",
    "check_resume",
    "each_cluster",
    "max_listed",
    "open_fleet_stream",
    "select",
]

#: The cluster name that stands for every cluster the caller may see.
ALL: Final = "*"
#: Entries a fleet call's cluster list may hold, at least (a fleet of more clusters: one
#: per served cluster, and ``*``): naming each cluster once never needs more.
MAX_LISTED: Final = 64
#: Characters of a cluster name at most (a DNS label: no served cluster has a longer one).
MAX_NAME_CHARS: Final = 63

T = TypeVar("T")


def max_listed(fleet: Fleet) -> int:
    """Entries a fleet call's cluster list may hold: :data:`MAX_LISTED`, or one per served
    cluster and ``*`` when the fleet is larger (the figure says nothing of a smaller
    fleet's size)."""
    return max(MAX_LISTED, len(fleet) + 1)


def check_listed(fleet: Fleet, asked: Sequence[str] | None) -> None:
    """Refuse a cluster list no honest call sends, before any per-name work: longer than
    :func:`max_listed`, or with a name longer than any cluster's (:data:`MAX_NAME_CHARS`)
    or empty.

    Raises:
        InvalidParameter: naming the bound, field ``clusters``.
    """
    if asked is None:
        return
    most = max_listed(fleet)
    if len(asked) > most:
        message = (
            f"clusters names {len(asked)} entries; a fleet call names at most {most} "
            '(each cluster once, or "*" for every cluster you may see)'
        )
        raise errors.InvalidParameter(
            message, causes=(errors.Cause("FieldValueTooLong", message, "clusters"),)
        )
    for name in asked:
        if not name:
            message = 'a cluster name is empty (name clusters, or "*" for all)'
        elif len(name) > MAX_NAME_CHARS:
            message = (
                f"a cluster name has at most {MAX_NAME_CHARS} characters; one of clusters "
                f"has {len(name)}"
            )
        else:
            continue
        raise errors.InvalidParameter(
            message, causes=(errors.Cause("FieldValueInvalid", message, "clusters"),)
        )


def check_resume(fleet: Fleet, count: int, field: str = "resumeFrom") -> None:
    """Refuse a resume point of more clusters than a cluster list may name (checked
    before it is read entry by entry).

    Raises:
        InvalidParameter: naming the bound.
    """
    most = max_listed(fleet)
    if count > most:
        message = f"{field} names {count} clusters; at most {most}"
        raise errors.InvalidParameter(
            message, causes=(errors.Cause("FieldValueTooLong", message, field),)
        )


@dataclass(frozen=True, slots=True)
class Selection:
    """The clusters one fleet call names, resolved once.

    Attributes:
        names: the clusters to ask, in the order named, each once (``*`` expanded).
        missing: those of ``names`` the gateway does not serve.
        shown: the clusters the caller may see (asked only when some are missing: what
            their refusal names; ``None``: they could not be asked now).
        follows_all: the call named ``*`` (or no list): clusters that join the fleet
            later join its stream.
    """

    names: tuple[str, ...]
    missing: tuple[str, ...] = ()
    shown: tuple[str, ...] | None = ()
    follows_all: bool = False

    def refusal(self, name: str) -> errors.NotFound:
        """The refusal of one missing ``name`` (a fresh error: each is tagged with its
        cluster), naming the clusters the caller may see."""
        error = errors.NotFound(refusal_message([name], self.shown))
        error.cluster = name
        return error

    def refusal_of_all(self) -> errors.NotFound | None:
        """One refusal naming every missing name (bounded in size), or ``None``."""
        if not self.missing:
            return None
        error = errors.NotFound(refusal_message(self.missing, self.shown))
        error.cluster = self.missing[0]
        return error


async def select(fleet: Fleet, view: View, asked: Sequence[str] | None) -> Selection:
    """The clusters a call names (:class:`Selection`), in the order named, each once.

    :data:`ALL` stands for every cluster the caller may see whose credential may go there
    unasked (:meth:`View.default_set <gateway.core.fleet.visibility.View.default_set>`, in the
    fleet's order, where it stands), and so does no list at all (``None``); a cluster named
    explicitly is kept whether the caller may see it or not (it is asked, and its own
    answer shows).  ``view`` is the operation's: whatever the list, the caller's visible
    clusters are computed at most once.

    Raises:
        InvalidParameter: the list is over :func:`check_listed`'s bounds.
        ResourceExhausted: ``*`` needs reviews of a caller not known yet, and the budget of
            those is spent.
    """
    check_listed(fleet, asked)
    listed: Sequence[str] = [ALL] if asked is None else asked
    names: dict[str, None] = {}
    follows_all = False
    for name in listed:
        if name == ALL:
            if not follows_all:
                follows_all = True
                names.update(dict.fromkeys(await view.default_set()))
        else:
            names[name] = None
    served = set(fleet.names())
    missing = tuple(n for n in names if n not in served)
    shown: tuple[str, ...] | None = ()
    if missing:
        told = await view.shown()
        shown = None if told is None else tuple(told)
    return Selection(tuple(names), missing, shown, follows_all)


async def each_cluster(
    fleet: Fleet,
    selection: Selection,
    work: Callable[[str, Cluster], Awaitable[T]],
) -> list[tuple[str, T | errors.GatewayError]]:
    """``work(name, cluster)`` for every selected cluster at once; per cluster, in the
    order named, its result or its error (a name the fleet does not serve: its
    ``NotFound``, the selection's, naming the clusters the caller may see), the error's
    ``cluster`` set."""
    shown = selection.shown

    async def one(name: str) -> T:
        try:
            cluster = fleet.get(name)
        except errors.NotFound:  # not served, or removed since the selection
            raise errors.NotFound(refusal_message([name], shown)) from None
        return await work(name, cluster)

    names = selection.names
    results = await asyncio.gather(*(one(n) for n in names), return_exceptions=True)
    out: list[tuple[str, T | errors.GatewayError]] = []
    for name, result in zip(names, results, strict=True):
        if isinstance(result, errors.GatewayError):
            result.cluster = name
        elif isinstance(result, BaseException):
            raise result
        out.append((name, result))
    return out


#: Opens one cluster's watch for a fleet stream: ``(name, cluster, resume point or None)``.
OpenOne = Callable[[str, Cluster, str | None], Awaitable[WatchSubscription]]


async def open_fleet_stream(
    fleet: Fleet,
    selection: Selection,
    open_one: OpenOne,
    view: View,
    resume: Mapping[str, str] = {},
) -> FleetStream:
    """Every selected cluster's watch (``open_one``), opened concurrently, as one stream.

    Each cluster starts from its point in ``resume`` (else as the call asks).  A cluster
    that refuses or is not served is part of the stream as its first error event;
    ``resume`` is kept for the clusters whose subscription could not open, so a drain's
    resume point still names them.  The stream reopens a cluster's part on the cluster
    that replaces it, and (the selection ``follows_all``) takes in clusters that join the
    fleet later, those the caller may see and its credential may reach unasked
    (``view``, the operation's: :meth:`View.joins
    <gateway.core.fleet.visibility.View.joins>`).

    Raises:
        InvalidParameter: ``resume`` names more clusters than a cluster list may.
    """
    check_resume(fleet, len(resume))
    shown = selection.shown

    async def opener(name: str, point: str | None) -> WatchSubscription:
        try:
            cluster = fleet.get(name)
        except errors.NotFound:
            raise errors.NotFound(refusal_message([name], shown)) from None
        return await open_one(name, cluster, point)

    async def admits(name: str) -> bool:
        return await view.joins(name)

    names = selection.names
    follows_all = selection.follows_all

    results = await asyncio.gather(
        *(opener(n, resume.get(n)) for n in names), return_exceptions=True
    )
    members: dict[str, WatchSubscription] = {}
    failed: dict[str, errors.GatewayError] = {}
    unexpected: BaseException | None = None
    for name, result in zip(names, results, strict=True):
        if isinstance(result, WatchSubscription):
            members[name] = result
        elif isinstance(result, errors.GatewayError):
            failed[name] = result
        else:
            unexpected = result
    if unexpected is not None:
        for opened in members.values():
            opened.close()
        raise unexpected
    return FleetStream(
        members, failed, resume, opener=opener, follows_all=follows_all, admits=admits
    )


class FleetStreams:
    """The open fleet streams of one front end, each of whose parts follows its cluster.

    While it listens to ``fleet``, every stream hears each change
    (:meth:`FleetStream.heard`): a cluster removed ends its part with
    :class:`~gateway.core.errors.ClusterRemoved`, a cluster replaced by a new configuration
    goes on there from its resume point, a new one joins the streams of every cluster; the
    other clusters' parts go on.  Streams are held weakly: a stream its reader dropped is
    gone.

    Args:
        fleet: the served clusters, followed.
        visibility: which of them each caller may see (built over ``fleet`` by the
            composition root): what the front end's fleet calls select with.
    """

    def __init__(self, fleet: Fleet, visibility: Visibility) -> None:
        self.fleet = fleet
        self.visibility = visibility
        self._streams: weakref.WeakSet[FleetStream] = weakref.WeakSet()
        self._stop = fleet.listen(self._heard)

    def add(self, stream: FleetStream) -> None:
        """Follow ``stream`` until it is dropped."""
        self._streams.add(stream)

    def __len__(self) -> int:
        return len(self._streams)

    def _heard(self, name: str, cluster: Cluster | None) -> None:
        for stream in list(self._streams):
            stream.heard(name, cluster is not None)

    def close(self) -> None:
        """Stop following the fleet."""
        self._stop()
