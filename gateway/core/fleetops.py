"""Fleet operations shared by the front ends: ask several clusters at once, keep each answer.

A fleet call (gRPC's ``ResourceService.List``/``Watch`` with a cluster list; GraphQL's
``/fleet/graphql``) names its clusters, asks them all concurrently with
the caller's credential and keeps, per cluster, the answer or the error: one cluster that
refuses, fails or is not served never costs the others theirs.

- :func:`cluster_names`: the clusters a call names (``*``, or no list: every cluster the
  caller may see, :mod:`gateway.core.visibility`), each once;
- :func:`each_cluster`: one piece of work per named cluster, concurrently, each result or
  :class:`~gateway.core.errors.GatewayError` tagged with its cluster;
- :func:`open_fleet_stream`: every named cluster's watch opened at once and merged into a
  :class:`~gateway.core.fleetstream.FleetStream` (a cluster that cannot open starts it
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
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Final, TypeVar

from gateway.core import errors
from gateway.core.cluster import Cluster
from gateway.core.credentials import Credential
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

#: The cluster name that stands for every cluster the caller may see.
ALL: Final = "*"

T = TypeVar("T")


async def cluster_names(
    fleet: Fleet, asked: Iterable[str] | None, credential: Credential
) -> list[str]:
    """The clusters a call names, in the order named, each once.  :data:`ALL` stands for
    every cluster the caller may see (in the fleet's order, where it stands), and so does
    no list at all (``None``); a cluster named explicitly is kept whether the caller may
    see it or not (it is asked, and its own answer shows)."""
    names: dict[str, None] = {}
    for name in [ALL] if asked is None else asked:
        if name == ALL:
            names.update(dict.fromkeys(await fleet.visibility.names(credential)))
        else:
            names[name] = None
    return list(names)


async def each_cluster(
    fleet: Fleet,
    names: Sequence[str],
    work: Callable[[str, Cluster], Awaitable[T]],
    credential: Credential,
) -> list[tuple[str, T | errors.GatewayError]]:
    """``work(name, cluster)`` for every named cluster at once; per cluster, in the order
    named, its result or its error (a name the fleet does not serve: its ``NotFound``,
    naming the clusters the caller may see), the error's ``cluster`` set."""

    async def one(name: str) -> T:
        return await work(name, await fleet.visibility.get(name, credential))

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
    credential: Credential,
    resume: Mapping[str, str] = {},
    *,
    follows_all: bool = False,
) -> FleetStream:
    """Every named cluster's watch (``open_one``), opened concurrently, as one stream.

    Each cluster starts from its point in ``resume`` (else as the call asks).  A cluster
    that refuses or is not served is part of the stream as its first error event;
    ``resume`` is kept for the clusters whose subscription could not open, so a drain's
    resume point still names them.  The stream reopens a cluster's part on the cluster
    that replaces it, and (``follows_all``) takes in clusters that join the fleet later,
    those the caller may see (``credential``).
    """

    async def opener(name: str, point: str | None) -> WatchSubscription:
        return await open_one(name, await fleet.visibility.get(name, credential), point)

    async def admits(name: str) -> bool:
        return await fleet.visibility.sees(name, credential)

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
