"""Fleet operations shared by the front ends: ask several clusters at once, keep each answer.

A fleet call (gRPC's ``ResourceService.List``/``Watch`` with a cluster list; GraphQL's
``/fleet/graphql``) names its clusters, asks them all concurrently with
the caller's credential and keeps, per cluster, the answer or the error: one cluster that
refuses, fails or is not served never costs the others theirs.

- :func:`cluster_names`: the clusters a call names (``*``: every served one), each once;
- :func:`each_cluster`: one piece of work per named cluster, concurrently, each result or
  :class:`~gateway.core.errors.GatewayError` tagged with its cluster;
- :func:`open_fleet_stream`: every named cluster's watch opened at once and merged into a
  :class:`~gateway.core.fleetstream.FleetStream` (a cluster that cannot open starts it
  with its error event);
- :class:`FleetStreams`: the open fleet streams of a front end, following the fleet: a
  cluster removed ends its part of each of them, and only that part; one replaced goes
  on on its new configuration; a new one joins the streams of every cluster.

Anything that is not a ``GatewayError`` is a bug, not a cluster's answer: it propagates
(after the subscriptions opened beside it are closed).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Final, TypeVar

from gateway.core import errors
from gateway.core.cluster import Cluster
from gateway.core.fleet import Fleet
from gateway.core.fleetstream import FleetStream
from gateway.core.hub import WatchSubscription

__all__ = [
    "ALL",
    "FleetStreams",
    "OpenOne",
    "cluster_names",
    "each_cluster",
    "open_fleet_stream",
]

#: The cluster name that stands for every cluster the gateway serves.
ALL: Final = "*"

T = TypeVar("T")


def cluster_names(fleet: Fleet, asked: Iterable[str]) -> list[str]:
    """The clusters a call names, in the order named, each once (:data:`ALL`: every served
    cluster, in the fleet's order, where it stands)."""
    names: dict[str, None] = {}
    for name in asked:
        if name == ALL:
            names.update(dict.fromkeys(fleet.names()))
        else:
            names[name] = None
    return list(names)


async def each_cluster(
    fleet: Fleet, names: Sequence[str], work: Callable[[str, Cluster], Awaitable[T]]
) -> list[tuple[str, T | errors.GatewayError]]:
    """``work(name, cluster)`` for every named cluster at once; per cluster, in the order
    named, its result or its error (a name the fleet does not serve: its ``NotFound``,
    naming the served clusters), the error's ``cluster`` set."""

    async def one(name: str) -> T:
        return await work(name, fleet.get(name))

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
    names: Sequence[str],
    open_one: OpenOne,
    resume: Mapping[str, str] = {},
    *,
    follows_all: bool = False,
) -> FleetStream:
    """Every named cluster's watch (``open_one``), opened concurrently, as one stream.

    Each cluster starts from its point in ``resume`` (else as the call asks).  A cluster
    that refuses or is not served is part of the stream as its first error event;
    ``resume`` is kept for the clusters whose subscription could not open, so a drain's
    resume point still names them.  The stream reopens a cluster's part on the cluster
    that replaces it, and (``follows_all``) takes in clusters that join the fleet later.
    """

    async def opener(name: str, point: str | None) -> WatchSubscription:
        return await open_one(name, fleet.get(name), point)

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
    return FleetStream(members, failed, resume, opener=opener, follows_all=follows_all)


class FleetStreams:
    """The open fleet streams of one front end, each of whose parts follows its cluster.

    While it listens to ``fleet``, every stream hears each change
    (:meth:`FleetStream.heard`): a cluster removed ends its part with
    :class:`~gateway.core.errors.ClusterRemoved`, a cluster replaced by a new configuration
    goes on there from its resume point, a new one joins the streams of every cluster; the
    other clusters' parts go on.  Streams are held weakly: a stream its reader dropped is
    gone.
    """

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
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
