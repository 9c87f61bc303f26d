"""One watch over several clusters: their hub subscriptions merged, each event tagged.

A fleet subscription (GraphQL's ``/fleet/graphql`` ``watchX(clusters: ...)``, gRPC's
``ResourceService.Watch`` with a cluster list) opens one
:class:`~gateway.core.watch.hub.WatchSubscription` per cluster, each on that cluster's own hub
with its own start, resume and exactness across upstream breaks, and reads them through one
:class:`FleetStream`:

- events come out tagged with their cluster (:class:`FleetEvent`), in each cluster's order;
  no task and no second queue: the members share one wakeup and are read in turn;
- :attr:`FleetStream.resume` is a resume point per cluster (:func:`encode_resume`), so a
  client that resumes after a disconnect loses nothing in any cluster;
- a member that ends with an error (the cluster refuses the caller, is removed, or the
  subscriber fell behind there) yields one error event for that cluster and the others go
  on: a fleet subscription is never all-or-nothing.  The stream ends when every member has;
- a stream opened for every cluster (no list named) takes in a cluster that joins the
  gateway later (:meth:`FleetStream.join`), from the start the caller asked for, when
  the caller may see it (``admits``: :mod:`gateway.core.fleet.visibility`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from gateway.core import errors
from gateway.core.model.values import JSON
from gateway.core.support.wakeup import Wakeup
from gateway.core.watch.changed import Digest
from gateway.core.watch.hub import HubEvent, WatchSubscription

__all__ = ["FleetEvent", "FleetStream", "Opener", "decode_resume", "encode_resume"]

#: Opens one cluster's part of a fleet watch: ``(cluster, resume point or None)``.
Opener = Callable[[str, str | None], Awaitable[WatchSubscription]]
#: Whether a cluster that joins the gateway joins a stream of every cluster (the caller
#: may see it).
Admits = Callable[[str], Awaitable[bool]]


_RESUME_SHAPE = 'a fleet resume point is an object of cluster names to resourceVersions: {"a": "1"}'


def encode_resume(points: Mapping[str, str]) -> str:
    """A fleet resume point: ``{"cluster": "resourceVersion", ...}`` as compact JSON (an SSE
    ``id`` and a drain's ``resumeFrom`` carry it as text)."""
    return orjson.dumps(dict(sorted(points.items()))).decode()


def decode_resume(value: Any) -> dict[str, str]:
    """The per-cluster resume points of a fleet resume point (its JSON text or the object).

    Raises:
        BadRequest: not an object of cluster names to versions.
    """
    if value is None or value == "":
        return {}
    if isinstance(value, str | bytes):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise errors.BadRequest(_RESUME_SHAPE) from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()
    ):
        raise errors.BadRequest(_RESUME_SHAPE)
    return dict(value)


class FleetEvent:
    """One cluster's event (or the error that ended its part of the stream).

    Reads like the :class:`~gateway.core.watch.hub.HubEvent` it wraps (``type``, ``object``,
    ``resource_version``), plus :attr:`cluster`; an error event has ``error`` set instead.
    Its encodings are kept on the hub event (:meth:`encoded`), so subscribers of one fleet
    execution share one payload per event, as they do on one cluster.
    """

    __slots__ = ("cluster", "error", "event")

    def __init__(
        self, cluster: str, event: HubEvent | None, error: errors.GatewayError | None = None
    ) -> None:
        self.cluster = cluster
        self.event = event
        self.error = error

    @property
    def type(self) -> str | None:
        return self.event.type if self.event is not None else None

    @property
    def object(self) -> JSON | None:
        return self.event.object if self.event is not None else None

    @property
    def resource_version(self) -> str | None:
        return self.event.resource_version if self.event is not None else None

    @property
    def resume(self) -> str | None:
        return self.event.resume if self.event is not None else None

    @property
    def _encoded(self) -> dict[Any, Any] | None:
        return self.event._encoded if self.event is not None else None

    def encoded(self, key: Any, encode: Callable[[FleetEvent], Any]) -> Any:
        """``encode(self)``, once per key for every reader of the same hub event."""
        if self.event is None:
            return encode(self)
        return self.event.encoded(key, lambda _: encode(self))

    def again(self, obj: JSON) -> FleetEvent:
        """An earlier state of an object of this cluster, as an event (watch rule 31's
        comparison renders it)."""
        return FleetEvent(self.cluster, HubEvent("MODIFIED", obj, "", None))


class _Changes:
    """Watch rule 31 per cluster: each member's own comparison decides for its events."""

    __slots__ = ("stream",)

    def __init__(self, stream: FleetStream) -> None:
        self.stream = stream

    async def admit(
        self,
        event: FleetEvent,
        now: Callable[[], Digest],
        earlier: Callable[[JSON], Any],
    ) -> bool:
        member = self.stream.members.get(event.cluster)
        changes = member.changes if member is not None else None
        if changes is None or event.event is None:
            return True
        return await changes.admit(event.event, now, earlier)


class FleetStream:
    """The merged watch of several clusters (see the module docstring).

    Args:
        members: each cluster's hub subscription, already open.
        failed: clusters whose subscription could not open, with why (an error event each).
        resume: resume points known before any event (what the caller resumed from).
        admits: whether a cluster that joins the gateway joins this stream (``None``: yes).
    """

    __slots__ = (
        "__weakref__",
        "_admits",
        "_errors",
        "_joining",
        "_last",
        "_order",
        "_points",
        "_turn",
        "_wakeup",
        "changes",
        "closed",
        "follows_all",
        "members",
        "opener",
    )

    def __init__(
        self,
        members: Mapping[str, WatchSubscription],
        failed: Mapping[str, errors.GatewayError] = {},
        resume: Mapping[str, str] = {},
        *,
        opener: Opener | None = None,
        follows_all: bool = False,
        admits: Admits | None = None,
    ) -> None:
        self.members: dict[str, WatchSubscription] = dict(members)
        self._admits = admits
        #: Opens a cluster's part again (its cluster was reconfigured) or for a cluster that
        #: joins later (``None``: neither happens).
        self.opener = opener
        #: Opened for every cluster: a cluster that joins the gateway joins the stream.
        self.follows_all = follows_all
        self._joining: dict[str, asyncio.Task[None]] = {}
        self._order = list(self.members)
        self._turn = 0
        self._wakeup = Wakeup()
        for member in self.members.values():
            member.share_wakeup(self._wakeup)
        self._errors: deque[FleetEvent] = deque(
            FleetEvent(name, None, _tagged(err, name)) for name, err in failed.items()
        )
        self._points: dict[str, str] = dict(resume)
        self._last: str | None = None
        self.closed = False
        self.changes: _Changes | None = (
            _Changes(self) if any(m.changes is not None for m in self.members.values()) else None
        )

    def __aiter__(self) -> FleetStream:
        return self

    async def __anext__(self) -> FleetEvent:
        event = await self.next()
        if event is None:
            raise StopAsyncIteration
        return event

    @property
    def resume(self) -> str | None:
        """The per-cluster resume point after the last events taken (``None``: none yet)."""
        points = self._points
        for name, member in self.members.items():
            if member.resume is not None:
                points[name] = member.resume
        return encode_resume(points) if points else None

    def again(self, obj: JSON) -> FleetEvent:
        """An earlier state of an object of the cluster of the last event taken."""
        return FleetEvent(self._last or "", HubEvent("MODIFIED", obj, "", None))

    def next_nowait(self) -> FleetEvent | None:
        """The next event of any cluster if one is ready (clusters taken in turn)."""
        if self._errors:
            return self._errors.popleft()
        order = self._order
        count = len(order)
        for step in range(count):
            index = (self._turn + step) % count
            name = order[index]
            member = self.members[name]
            event = member.next_nowait()
            if event is not None:
                self._turn = index + 1
                self._last = name
                return FleetEvent(name, event)
            if member.closed:
                self._drop(name)
                if member.error is not None:
                    return FleetEvent(name, None, _tagged(member.error, name))
                return self.next_nowait()
        return None

    async def next(self) -> FleetEvent | None:
        """The next event, waiting for one; ``None`` once every cluster's part ended."""
        while True:
            event = self.next_nowait()
            if event is not None:
                return event
            if self.closed or not (self.members or self._joining or self._errors):
                return None
            self._wakeup.clear()
            await self._wakeup.wait()

    def heard(self, name: str, served: bool) -> None:
        """Cluster ``name`` was added or reconfigured (``served``) or removed: a part of it
        opens again on the new cluster from its resume point, without a gap; a new cluster
        joins a stream that follows them all; a removed one's part ends with
        :class:`~gateway.core.errors.ClusterRemoved`."""
        if not served:
            member = self.members.get(name)
            if member is not None:
                member.end(errors.ClusterRemoved(name))
            return
        if name in self.members:
            self._drop(name)  # quietly: its resume point is kept for the new one
            self.join(name)
        elif self.follows_all:
            self.join(name, admits=self._admits)

    def join(self, name: str, *, admits: Admits | None = None) -> None:
        """Open cluster ``name``'s part: from the resume point the stream holds for it,
        else as first asked (when ``admits`` it, if given)."""
        if self.opener is None or self.closed or name in self.members:
            return
        running = self._joining.pop(name, None)
        if running is not None:
            running.cancel()
        self._joining[name] = asyncio.get_running_loop().create_task(
            self._join(name, self.opener, admits), name=f"fleet-join-{name}"
        )

    async def _join(self, name: str, opener: Opener, admits: Admits | None) -> None:
        try:
            if admits is not None and not await admits(name):
                self._wakeup.set()  # a reader waiting on this join only: it ends
                return  # the caller may not see it: not part of this stream
            member = await opener(name, self._points.get(name))
        except errors.GatewayError as exc:
            self._errors.append(FleetEvent(name, None, _tagged(exc, name)))
            self._wakeup.set()
            return
        finally:
            self._joining.pop(name, None)
        if self.closed or name in self.members:
            member.close()
            return
        self.members[name] = member
        self._order.append(name)
        if member.changes is not None and self.changes is None:
            self.changes = _Changes(self)
        member.share_wakeup(self._wakeup)

    def _drop(self, name: str) -> None:
        member = self.members.pop(name)
        if member.resume is not None:
            self._points[name] = member.resume
        self._order.remove(name)
        self._turn = 0
        member.close()

    def close(self) -> None:
        """The reader is done (idempotent): every member subscription closes."""
        if self.closed:
            return
        self.closed = True
        for task in self._joining.values():
            task.cancel()
        self._joining.clear()
        for name in list(self.members):
            self._drop(name)
        self._errors.clear()
        self._wakeup.set()


def _tagged(error: errors.GatewayError, cluster: str) -> errors.GatewayError:
    error.cluster = cluster
    return error
