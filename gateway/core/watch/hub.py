"""The watch hub: one upstream watch per scope, shared by every subscriber of both front ends.

The apiserver's own watch cache is the model.  :class:`WatchHub` keeps one
:class:`~gateway.core.watch.watcher.Watcher` per (authorization scope, resource, namespace, label
selector, field selector) and feeds every subscriber of it:

- **One start policy** (:class:`WatchStart`), translated once from the caller's watch
  options and validated as the apiserver validates them: a snapshot then changes (with the
  ``k8s.io/initial-events-end`` bookmark for ``sendInitialEvents=true``), changes from now,
  or changes after a resourceVersion.
- **Joining a running watch** is exact: a snapshot is taken from the hub's state at the
  moment of joining, a resume replays the hub's bounded history, and a version older than
  the history is caught up on a watch of the subscriber's own from that version until it
  reaches the history, then handed over (where the apiserver no longer has that version,
  the full state framed by ``RESYNC`` markers, what a relist gives); no gap, no duplicate.
  Subscribers that resume before the hub's watch is ready (the first, and a herd arriving
  with it) make the hub watch from the oldest of their versions, so nothing between is
  lost and no catch-up watch is needed.
- **Bounded memory per subscriber without punishing a reader that keeps up**: the
  initial events are produced as the subscriber reads them (a snapshot of any size costs
  one list of references), and only live events are queued.  A subscriber whose queue
  overflows has stopped reading: it is ended with
  :class:`~gateway.core.errors.SlowSubscriber` carrying the resume point after the last
  event it took, and nobody else notices.
- **Upstream freshness** is the Watcher's: bookmarks always requested (forwarded only to
  subscribers who asked), resume after closes, relist-and-diff on 410 delivered
  identically to every subscriber inside ``RESYNC`` frames.  The upstream watch closes a
  short linger after its last subscriber leaves.
- **Budgets**: each upstream watch holds a lease of the upstream-stream budget and each
  subscriber one of the subscriber budget, per identity and in total; past either the
  caller is refused at once with :class:`~gateway.core.errors.ResourceExhausted`.

Scopes are hashes of the caller's token (:func:`~gateway.core.upstream.budget.scope_of`): by default
callers share upstream watches only with themselves.  With :class:`SharedWatches` one
upstream watch, made with the gateway's own credential, serves every identity; each
subscriber is admitted only after access reviews made with its own token (list and watch on
that resource in that namespace), cached briefly, and rechecked while it stays subscribed:
one whose right is gone is ended with ``Forbidden``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from gateway.core import errors
from gateway.core.lists.compacting import Columns, ColumnSpec, Maker
from gateway.core.model.options import ListOptions
from gateway.core.model.registry import Resource
from gateway.core.model.values import JSON
from gateway.core.process import heap
from gateway.core.support import deepjson
from gateway.core.support.wakeup import Wakeup
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.budget import Budget, Lease, scope_of
from gateway.core.upstream.credentials import ANONYMOUS, Credential
from gateway.core.watch.access import AccessReviews, forbidden
from gateway.core.watch.changed import StreamChanges, history_before
from gateway.core.watch.compact import CompactState
from gateway.core.watch.watcher import (
    INITIAL_EVENTS_END,
    RESYNC_ANNOTATION,
    Backoff,
    EventType,
    Watcher,
    WatchEvent,
    decimal_version,
    marker,
    object_key,
    resource_version_of,
)

log = logging.getLogger(__name__)

StartMode = Literal["snapshot", "now", "resume"]


@dataclass(frozen=True, slots=True)
class WatchStart:
    """Where a subscriber's stream starts, decided once for both front ends.

    Attributes:
        mode: ``snapshot`` (ADDED for every current object, then changes), ``now``
            (changes from now on) or ``resume`` (changes after ``resource_version``).
        resource_version: the version to resume after (``resume``).
        initial_events_end: end the snapshot with a ``BOOKMARK`` annotated
            ``k8s.io/initial-events-end: "true"`` (``sendInitialEvents=true``).
        bookmarks: deliver ``BOOKMARK`` progress events.
        changed_only: the subscriber wants a MODIFIED event only when what it receives of
            the object changed (watch rule 31): the hub gives it a
            :class:`~gateway.core.watch.changed.StreamChanges` taken as it joins.
        columns: values the subscriber will read of every object (a view's columns): a
            watch this subscriber opens has a list worker read them as it makes its
            initial list compact (:meth:`WatchSubscription.listed_columns`).
        make: what to make of each listed object as the worker's answer with ``columns`` is
            taken in (:data:`~gateway.core.lists.compacting.Maker`: the view store's entries).
    """

    mode: StartMode
    resource_version: str | None = None
    initial_events_end: bool = False
    bookmarks: bool = False
    changed_only: bool = False
    columns: tuple[ColumnSpec, ...] = ()
    make: Maker | None = None

    @classmethod
    def from_options(cls, options: ListOptions, *, changed_only: bool = False) -> WatchStart:
        """The start the apiserver would give a watch with these options.

        - ``sendInitialEvents=true``: the current state, then the end bookmark, then changes;
        - ``sendInitialEvents=false``: changes after ``resourceVersion``, or from now when
          it is empty or ``"0"``;
        - unset: ``resourceVersion`` empty or ``"0"`` gives the current state as ADDED
          then changes; any other version gives the changes after it.

        Raises:
            InvalidParameter: the options are not a valid watch (as the apiserver says).
        """
        options.validate(watch=True)
        rv = options.resource_version or ""
        bookmarks = bool(options.allow_watch_bookmarks)
        if options.send_initial_events:
            return cls(
                "snapshot", initial_events_end=True, bookmarks=bookmarks, changed_only=changed_only
            )
        if rv in ("", "0"):
            mode: StartMode = "now" if options.send_initial_events is False else "snapshot"
            return cls(mode, bookmarks=bookmarks, changed_only=changed_only)
        return cls("resume", resource_version=rv, bookmarks=bookmarks, changed_only=changed_only)


@dataclass(frozen=True, slots=True)
class WatchTarget:
    """What one upstream watch watches (the hub's key, besides the scope)."""

    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None

    @property
    def key(self) -> tuple[str, str, str | None, str | None, str | None]:
        # The version too: two versions of one resource (v1 and v1beta1, both served by
        # discovery through the generic gRPC service) are two watches, each in its version.
        return (
            self.resource.key,
            self.resource.version,
            self.namespace,
            self.label_selector,
            self.field_selector,
        )


class HubEvent:
    """One event as a subscriber receives it.

    Attributes:
        type: ADDED, MODIFIED, DELETED, BOOKMARK or RESYNC.
        object: the object as the upstream sent it (shared by every subscriber: read only).
        resource_version: the event's resourceVersion.
        resume: the resume point once this event is taken, or ``None`` inside an
            incomplete snapshot or ``RESYNC`` frame.
        raw: the object's JSON as the hub's compact state keeps it (the same ``bytes``),
            for an ``ADDED`` or ``MODIFIED`` object the state holds; else ``None``.
        key: the object's namespace/name, when the hub knows it without reading the
            object (a snapshot's events); else ``None``.

    An event of a snapshot or resync is made from the hub's compact state
    (:class:`~gateway.core.watch.compact.CompactState`) with ``raw`` and ``key`` only: its
    ``object`` (and its ``resource_version``) is decoded when first read, so a subscriber
    that keeps the JSON (a view cache) never decodes it.
    """

    __slots__ = (
        "_at",
        "_encoded",
        "_object",
        "_version",
        "key",
        "raw",
        "readers",
        "resume",
        "type",
    )

    def __init__(
        self,
        type: EventType,
        object: JSON | None,
        resource_version: str | None,
        resume: str | None,
        *,
        raw: bytes | None = None,
        key: str | None = None,
        at: str = "",
    ) -> None:
        self.type = type
        self._object = object
        self._version = resource_version
        self.resume = resume
        self.raw = raw
        self.key = key
        #: The version of an object that has none of its own (a lazy event's).
        self._at = at
        self._encoded: dict[Any, Any] | None = None
        #: Subscribers that have it queued and not taken yet.
        self.readers = 0

    @property
    def object(self) -> JSON:
        found = self._object
        if found is None:
            assert self.raw is not None
            found = self._object = deepjson.loads(self.raw)
        return found

    @property
    def resource_version(self) -> str:
        found = self._version
        if found is None:
            found = self._version = resource_version_of(self.object) or self._at
        return found

    def __repr__(self) -> str:
        return f"HubEvent({self.type!r}, {self.key or object_key(self.object)!r})"

    def encoded(self, key: Any, encode: Callable[[HubEvent], Any]) -> Any:
        """``encode(self)``, computed once per key for every subscriber of this event.

        Kept while a subscriber still has the event queued: once the last one has taken it
        and moved on, the encodings go (the event itself may stay in the hub's history for
        subscribers that resume, who encode it again)."""
        memo = self._encoded
        if memo is None:
            memo = self._encoded = {}
        try:
            return memo[key]
        except KeyError:
            value = memo[key] = encode(self)
            return value


def admit(floor: int | None, kind: str, resource_version: str) -> tuple[bool, int | None]:
    """Whether a subscriber whose live events start above ``floor`` takes an event.

    Returns the answer and the floor to keep (``None`` once the floor is passed or a
    ``RESYNC`` frame began: everything after a relist is news).
    """
    if kind == "RESYNC" or floor is None:
        return True, None
    at = decimal_version(resource_version)
    if at is not None and at <= floor:
        return False, floor
    return True, floor if kind == "BOOKMARK" else None


@dataclass(slots=True)
class StartPoint:
    """Where a subscriber joins an upstream watch.

    Attributes:
        initial: its initial events (snapshot, replay or resync), produced as read.
        resume: its resume point before it takes any of them.
        floor: live events at or below this decimal version are not for it.
        pairs: a snapshot of a compact state: its (key, JSON) pairs, which ``initial``
            makes its ``ADDED`` events of (:meth:`WatchSubscription.take_snapshot`).
        at: the version of that snapshot.
        end: the events after the snapshot's objects (its end marker, if asked).
    """

    initial: Iterator[HubEvent] | None
    resume: str | None
    floor: int | None
    pairs: list[tuple[str, bytes]] | None = None
    at: str = ""
    end: tuple[HubEvent, ...] = ()


@dataclass(slots=True)
class HubStats:
    """Counters for the metrics endpoint."""

    upstream_watches: int = 0
    subscribers: int = 0
    #: Events taken by hub subscribers (of both front ends).
    events_delivered: int = 0
    dropped_slow: int = 0
    relists: int = 0
    #: Subscribers that resumed from before the history and caught up on a watch of their
    #: own (:meth:`Upstream.catch_up`).
    catch_ups: int = 0
    refused: int = 0
    #: Subscribers refused or ended because an access review said no (shared watches).
    denied: int = 0


class WatchSubscription:
    """One subscriber of a shared upstream watch.

    Read with ``await next()`` (``None`` once it ended cleanly; it raises the error that
    ended it) or ``async for``; :meth:`close` when done.  The initial events (snapshot,
    replay or resync) are produced as they are read; live events wait in a queue of at
    most ``max_queue``.
    """

    __slots__ = (
        "__weakref__",
        "_catch_up",
        "_floor",
        "_held",
        "_held_queued",
        "_initial",
        "_pairs",
        "_queue",
        "_stats",
        "_ticket",
        "_wakeup",
        "bookmarks",
        "changes",
        "closed",
        "credential",
        "delivered",
        "error",
        "max_queue",
        "resume",
        "upstream",
    )

    def __init__(
        self,
        upstream: Upstream,
        start: WatchStart,
        max_queue: int,
        ticket: Lease,
        point: StartPoint,
    ) -> None:
        self.upstream = upstream
        self.bookmarks = start.bookmarks
        self.max_queue = max_queue
        self._ticket = ticket
        self._initial = point.initial
        #: The snapshot's pairs until its first event is read (:meth:`take_snapshot`).
        self._pairs = (point.pairs, point.at, point.end) if point.pairs else None
        #: Live events not taken yet; ``None`` when there are none (an empty deque is
        #: 760 bytes, and most subscribers are idle most of the time).
        self._queue: deque[HubEvent] | None = None
        #: The last event taken, and whether it came from the queue.
        self._held: HubEvent | None = None
        self._held_queued = False
        self._stats = upstream.hub.stats
        self._wakeup = Wakeup()
        #: Live events at or below this decimal version are not for this subscriber.
        self._floor = point.floor
        self.closed = False
        self.error: errors.GatewayError | None = None
        #: The resume point after the last event taken.
        self.resume = point.resume
        self.delivered = 0
        #: Shared watches: the subscriber's own credential, for its periodic access review.
        self.credential: Credential | None = None
        #: ``changed_only``: what this subscriber holds of each object (watch rule 31).
        self.changes: StreamChanges | None = None
        #: While it catches up on a watch of its own (:meth:`Upstream.catch_up`): that
        #: watch's task; the shared watch's events are not for it yet.
        self._catch_up: asyncio.Task[None] | None = None

    # -- reading -------------------------------------------------------------------------

    @property
    def catching_up(self) -> bool:
        """Whether it still reads a watch of its own (:meth:`Upstream.catch_up`)."""
        return self._catch_up is not None

    def __aiter__(self) -> WatchSubscription:
        return self

    async def __anext__(self) -> HubEvent:
        event = await self.next()
        if event is None:
            raise StopAsyncIteration
        return event

    def take_snapshot(self) -> list[tuple[str, bytes]] | None:
        """The initial snapshot's objects at once, as the hub's compact state holds them
        ((key, JSON) pairs, the very ``bytes``), instead of an ``ADDED`` event each: for a
        subscriber that keeps the JSON (a view cache), one list taken in one step where
        30,000 events cost the event loop tens of milliseconds.  Only before any event is
        read and for a snapshot of a compact state (else ``None``, and the events come as
        usual); the subscription then stands where the snapshot's last event would have
        left it (its resume point the snapshot's version), and the snapshot's end marker,
        if asked, is its next event."""
        found = self._pairs
        self._pairs = None
        if found is None or self.delivered or self._held is not None or self.closed:
            return None
        pairs, at, end = found
        self._initial = iter(end) if end else None
        self.resume = at  # as the snapshot's last event leaves it
        self.delivered += len(pairs)
        self._stats.events_delivered += len(pairs)
        return pairs

    def next_nowait(self) -> HubEvent | None:
        """The next event if one is ready, else ``None`` (see :meth:`next`)."""
        self._pairs = None
        if self._initial is not None:
            event = next(self._initial, None)
            if event is not None:
                return self._took(event, False)
            self._initial = None
        queue = self._queue
        if queue:
            event = queue.popleft()
            if not queue:
                self._queue = None
            return self._took(event, True)
        held = self._held
        if held is not None:
            # Asked again with nothing ready: done with the last event (as :meth:`_took`
            # says), and an idle subscriber holds none.  A snapshot's event is its own (made
            # from the compact state for it, its object decoded and encoded for it): held,
            # it cost every idle subscriber its object's size.
            self._held = None
            _release(held, self._held_queued)
        return None

    async def next(self) -> HubEvent | None:
        """The next event, waiting for one; ``None`` when the subscription ended cleanly.

        Raises:
            GatewayError: what ended it (the upstream refused, it fell behind...).
        """
        while True:
            event = self.next_nowait()
            if event is not None:
                return event
            if self.closed:
                if self.error is not None:
                    raise self.error
                return None
            self._wakeup.clear()
            await self._wakeup.wait()

    def _took(self, event: HubEvent, queued: bool) -> HubEvent:
        # The event before is done with: the subscriber has used it (encoded, sent).
        held = self._held
        if held is not None:
            _release(held, self._held_queued)
        self._held = event
        self._held_queued = queued
        if event.resume is not None:
            self.resume = event.resume
        self.delivered += 1
        self._stats.events_delivered += 1
        return event

    def share_wakeup(self, wakeup: Wakeup) -> None:
        """Wake ``wakeup`` instead of this subscription's own when an event comes or it
        ends: a reader of several subscriptions (a fleet watch) waits on one flag."""
        self._wakeup = wakeup
        wakeup.set()  # whatever is queued already is ready

    # -- fed by the upstream -------------------------------------------------------------

    def offer(self, event: HubEvent) -> None:
        if self._catch_up is not None:
            return  # still catching up on a watch of its own
        self.feed(event)

    def feed(self, event: HubEvent) -> None:
        """Queue ``event`` (:meth:`offer` without the catch-up check)."""
        if self.closed:
            return
        if event.type == "BOOKMARK" and not self.bookmarks:
            return
        if self._floor is not None or event.type == "RESYNC":
            taken, self._floor = admit(self._floor, event.type, event.resource_version)
            if not taken:
                return
        queue = self._queue
        if (0 if queue is None else len(queue)) >= self.max_queue:
            self.upstream.hub.stats.dropped_slow += 1
            self.end(
                errors.SlowSubscriber(
                    f"the subscriber fell more than {self.max_queue} events behind and was "
                    "ended; resume from `resourceVersion` to continue without loss",
                    resource_version=self.resume,
                )
            )
            return
        if queue is None:
            queue = self._queue = deque()
        queue.append(event)
        event.readers += 1
        self._wakeup.set()

    def listed_columns(self) -> Columns | None:
        """The values at :attr:`WatchStart.columns` a list worker read of the objects of the
        watch's initial list (once: the first subscriber to ask takes them; ``None`` when
        none were read).  They belong to the very ``bytes`` of each object's JSON then
        listed (:meth:`Columns.of <gateway.core.lists.compacting.Columns.of>`): an object
        changed since is another ``bytes``, and is read anew."""
        state = self.upstream.watcher.state
        return state.take_columns() if isinstance(state, CompactState) else None

    def end(self, error: errors.GatewayError | None = None) -> None:
        """End the subscription: queued and initial events are dropped, readers wake."""
        if self.closed:
            return
        self.error = error
        self._shut()
        self._detach()

    def close(self) -> None:
        """The subscriber is done (idempotent); the last one out starts the linger."""
        if not self.closed:
            self._shut()
        self._detach()

    def _shut(self) -> None:
        self.closed = True
        task, self._catch_up = self._catch_up, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self._initial = None
        self._pairs = None
        held = self._held
        if held is not None:
            self._held = None
            _release(held, self._held_queued)
        queue, self._queue = self._queue, None
        for event in queue or ():
            _release(event, True)
        self._wakeup.set()

    def _detach(self) -> None:
        self._ticket.release()
        self.upstream.leave(self)


def _release(event: HubEvent, queued: bool) -> None:
    """A subscriber is done with ``event``; the last one drops its encodings."""
    if queued:
        event.readers -= 1
    if event.readers <= 0:
        event._encoded = None


class Upstream:
    """One shared upstream watch and its subscribers."""

    def __init__(
        self,
        hub: WatchHub,
        key: tuple[Any, ...],
        target: WatchTarget,
        *,
        adapter: KubeAdapter,
        credential: Credential,
        lease: Lease,
        columns: tuple[ColumnSpec, ...] = (),
        make: Maker | None = None,
    ) -> None:
        self.hub = hub
        self.key = key
        self.target = target
        self.lease = lease
        self.watcher = Watcher(
            adapter,
            target.resource,
            namespace=target.namespace,
            options=ListOptions(
                label_selector=target.label_selector, field_selector=target.field_selector
            ),
            credential=credential,
            bookmarks=True,
            backoff=hub.backoff,
            # each object kept as its JSON: a fifth of the memory of decoded objects, and
            # nothing for the cyclic collector to walk (gateway/core/watch/compact.py)
            state=CompactState(),
            columns=columns,
            make=make,
        )
        self.subscribers: set[WatchSubscription] = set()
        #: Subscribers waiting for the initial list (they hold the watch open too).
        self.pending = 0
        self.history: deque[HubEvent] = deque()
        #: The history holds every event after this version (``None``: no usable history).
        self.history_floor: str | None = None
        self.in_resync = False
        self.ready = asyncio.Event()
        self.failure: errors.GatewayError | None = None
        self.closed = False
        self.task: asyncio.Task[None] | None = None
        #: The version the watch catches up from once its list is taken (see
        #: :meth:`resume_earlier`).
        self.resume_from: str | None = None
        self._linger: asyncio.TimerHandle | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, resume_from: str | None) -> None:
        self.resume_from = resume_from
        self.task = asyncio.create_task(self._run(), name=f"watch-hub-{self.target.resource.key}")
        self.task.add_done_callback(self._task_done)

    def resume_earlier(self, resource_version: str) -> None:
        """A subscriber joining before the watch is ready resumes from ``resource_version``:
        the watch catches up from there when that is older than where it would start (its
        list, or an earlier joiner's version), so every joiner of a herd (subscribers moving
        from a gateway that drains) is replayed exactly from the one upstream watch."""
        if self.ready.is_set():
            return
        wanted = decimal_version(resource_version)
        if wanted is None:
            return
        current = decimal_version(self.resume_from) if self.resume_from is not None else None
        if self.resume_from is None or (current is not None and wanted < current):
            self.resume_from = resource_version

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("watch hub task failed", exc_info=task.exception())

    async def wait_ready(self) -> None:
        await self.ready.wait()
        if self.failure is not None:
            raise self.failure
        if self.closed:
            raise errors.Unavailable("the upstream watch closed")

    async def _run(self) -> None:
        watcher = self.watcher
        try:
            await watcher.prime()
            self.history_floor = watcher.resource_version
            resume_from = self.resume_from
            if resume_from is not None and watcher.catch_up_from(resume_from):
                self.history_floor = resume_from
            self.ready.set()
            self._idle_check()
            async with aclosing(
                cast(Any, watcher.events())
            ) as events:  # an async generator: close it promptly
                async for event in events:
                    self._dispatch(event)
        except Exception as exc:
            self.failure = errors.of_failure(
                exc, "the upstream watch", log, of=self.target.resource.key
            )
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.hub._forget(self)
        self.lease.release()
        self.ready.set()
        if self._linger is not None:
            self._linger.cancel()
        for sub in list(self.subscribers):
            sub.end(self.failure)
        state = self.watcher.state
        if len(state) >= GIVE_BACK_OBJECTS:
            # nobody reads it any more (a snapshot being read holds its own references):
            # freed now, and the C heap's free pages given back to the system
            state.clear()
            self.hub._give_back()

    def close(self) -> None:
        """Stop the upstream watch; subscribers end cleanly."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self._shutdown()

    def leave(self, sub: WatchSubscription) -> None:
        if sub in self.subscribers:
            self.subscribers.discard(sub)
            self.hub.stats.subscribers -= 1
        self._idle_check()

    def _idle_check(self) -> None:
        if self.subscribers or self.pending or self.closed or self._linger is not None:
            return
        if self.hub.linger <= 0:
            self.close()
            return
        self._linger = asyncio.get_running_loop().call_later(self.hub.linger, self._linger_over)

    def _linger_over(self) -> None:
        self._linger = None
        if not self.subscribers:
            self.close()

    # -- the stream ----------------------------------------------------------------------

    @property
    def state_version(self) -> str:
        """The version the hub's state stands at (what a snapshot taken now shows)."""
        floor = self.watcher.state_floor
        if floor is not None:
            return str(floor)
        return self.watcher.resource_version or ""

    def _dispatch(self, event: WatchEvent) -> None:
        kind = event.type
        if kind == "RESYNC":
            begin = (event.object.get("metadata") or {}).get("annotations", {}).get(
                RESYNC_ANNOTATION
            ) == "begin"
            self.in_resync = begin
            if begin:
                self.hub.stats.relists += 1
                self.history.clear()
                self.history_floor = None
            else:
                self.history_floor = event.resource_version
        resume = None if self.in_resync else self.watcher.resource_version
        item = HubEvent(kind, event.object, event.resource_version, resume, raw=event.raw)
        if kind in ("ADDED", "MODIFIED", "DELETED") and not self.in_resync:
            history = self.history
            if len(history) >= self.hub.history:
                self.history_floor = history.popleft().resource_version
            history.append(item)
        for sub in list(self.subscribers):
            sub.offer(item)

    # -- joining -------------------------------------------------------------------------

    def join(self, start: WatchStart, ticket: Lease, caller: Any = None) -> WatchSubscription:
        """A subscriber at this very point (synchronous: no event can slip in between).

        One that resumes from before the history catches up on a watch of its own, charged
        to ``caller``'s upstream-stream budget (:meth:`catch_up`); where that budget is
        spent (or no ``caller`` is named) it gets the whole state in a ``RESYNC`` frame."""
        lease = None
        wanted = start.resource_version
        if caller is not None and wanted is not None and self._before_history(start):
            try:
                lease = self.hub.streams.acquire(caller)
            except errors.ResourceExhausted:
                lease = None
        if lease is not None and wanted is not None:  # a catch-up from ``wanted``
            sub = WatchSubscription(
                self, start, self.hub.max_queue, ticket, StartPoint(None, wanted, None)
            )
            if start.changed_only:
                sub.changes = StreamChanges()
            self.catch_up(sub, wanted, lease)
        else:
            sub = WatchSubscription(
                self, start, self.hub.max_queue, ticket, self.starting_point(start)
            )
            if start.changed_only:
                sub.changes = self._changes(start)
        self.subscribers.add(sub)
        self.hub.stats.subscribers += 1
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        return sub

    def _before_history(self, start: WatchStart) -> bool:
        """Whether ``start`` resumes from a version older than the history reaches (and
        older than the watch's own start, so an upstream watch from there may serve it)."""
        if start.mode != "resume" or self.in_resync or self.history_floor is None:
            return False
        wanted = decimal_version(start.resource_version)
        floor = decimal_version(self.history_floor)
        return wanted is not None and floor is not None and wanted < floor

    def catch_up(self, sub: WatchSubscription, wanted: str, lease: Lease) -> None:
        """Feed ``sub`` from a watch of its own from ``wanted`` until that watch reaches
        the history, then hand it over to the shared watch: exactly what the apiserver
        would replay (or, where the apiserver answers 410, a ``RESYNC`` frame of every
        object), with nobody else's stream touched.  The watch holds ``lease`` while it
        runs; the subscription owns its task (closing it stops the watch)."""
        self.hub.stats.catch_ups += 1
        task = asyncio.create_task(
            self._catching_up(sub, wanted, lease),
            name=f"watch-hub-catch-up-{self.target.resource.key}",
        )
        sub._catch_up = task
        self.hub._catch_ups.add(task)
        task.add_done_callback(self.hub._catch_ups.discard)

    async def _catching_up(self, sub: WatchSubscription, wanted: str, lease: Lease) -> None:
        shared = self.watcher
        watcher = Watcher(
            shared.adapter,
            shared.resource,
            namespace=shared.namespace,
            options=replace(shared.selectors, resource_version=wanted),
            credential=shared.credential,
            bookmarks=True,  # progress: a quiet resource hands over at a bookmark
            backoff=self.hub.backoff,
        )
        in_resync = False
        try:
            async with aclosing(cast(Any, watcher.events())) as events:
                async for event in events:
                    kind = event.type
                    if kind == "RESYNC":
                        in_resync = (event.object.get("metadata") or {}).get("annotations", {}).get(
                            RESYNC_ANNOTATION
                        ) == "begin"
                    resume = None if in_resync else watcher.resource_version
                    sub.feed(
                        HubEvent(kind, event.object, event.resource_version, resume, raw=event.raw)
                    )
                    if sub.closed:
                        return
                    if not in_resync and self._hand_over(sub, watcher.resource_version):
                        return
        except Exception as exc:
            # the subscriber's message as the shared watch's; the log says which it was
            sub.end(
                errors.of_failure(
                    exc, "the upstream watch", log, of=f"{self.target.resource.key} (a catch-up)"
                )
            )
        finally:
            lease.release()

    def _hand_over(self, sub: WatchSubscription, at: str | None) -> bool:
        """Move a catching-up ``sub`` that stands at ``at`` to the shared watch when its
        history reaches back there (synchronous: no event slips in between)."""
        if at is None or self.closed or self.in_resync or self.history_floor is None:
            return False
        last = self.watcher.resource_version or self.state_version
        replay = self._replay(at, last)
        if replay is None:
            return False
        sub._catch_up = None
        sub._floor = None
        for event in replay:  # queued after what its own watch gave, in order
            sub.feed(event)
        sub._floor = decimal_version(last if replay else at)
        return True

    def _changes(self, start: WatchStart) -> StreamChanges:
        """What a subscriber joining now holds of each object, for watch rule 31: what it
        held at the version it resumes from (as far as the history reaches), the hub's
        state when it starts from now, else nothing until its initial events say."""
        if start.mode == "resume":
            assert start.resource_version is not None
            return StreamChanges(before=history_before(self.history, start.resource_version))
        if start.mode == "now" and self.watcher.state_floor is None:
            state = self.watcher.state
            held = state.copy() if isinstance(state, CompactState) else dict(state)
            return StreamChanges(origin=held)
        return StreamChanges()

    def starting_point(self, start: WatchStart) -> StartPoint:
        """Where a subscriber with ``start`` joins now (synchronous, like :meth:`join`)."""
        at = self.state_version
        if start.mode == "now":
            return StartPoint(None, at or None, decimal_version(at))
        if start.mode == "snapshot":
            objects = self._objects()
            initial = self._snapshot(objects, at, start.initial_events_end)
            point = StartPoint(initial, None if objects else at or None, decimal_version(at))
            if objects and isinstance(objects[0], tuple):
                point.pairs = objects
                point.at = at
                if start.initial_events_end:
                    point.end = (self._end_marker(at),)
            return point
        wanted = start.resource_version
        assert wanted is not None
        # The last event given out: below the state's version while catching up.
        last = self.watcher.resource_version or at
        replay = self._replay(wanted, last)
        if replay is None:
            objects = self._objects()
            return StartPoint(self._resync(objects, at), None, decimal_version(at))
        floor = last if replay else wanted
        return StartPoint(iter(replay), wanted, decimal_version(floor))

    def _objects(self) -> list[tuple[str, bytes]] | list[JSON]:
        """The hub's objects now (a list of references, taken in one step): (key, JSON)
        pairs of a compact state, else the objects."""
        state = self.watcher.state
        if isinstance(state, CompactState):
            return state.raw_items()
        return list(state.values())

    @staticmethod
    def _added(found: tuple[str, bytes] | JSON, at: str, resume: str | None) -> HubEvent:
        if isinstance(found, tuple):
            key, data = found
            return HubEvent("ADDED", None, None, resume, raw=data, key=key, at=at)
        return HubEvent("ADDED", found, resource_version_of(found) or at, resume)

    def _snapshot(
        self, objects: list[tuple[str, bytes]] | list[JSON], at: str, end_marker: bool
    ) -> Iterator[HubEvent]:
        last = len(objects) - 1
        added = self._added
        for i, found in enumerate(objects):
            yield added(cast(Any, found), at, at if i == last else None)
        if end_marker:
            yield self._end_marker(at)

    def _end_marker(self, at: str) -> HubEvent:
        """The ``BOOKMARK`` that ends a snapshot at ``at`` (``initial_events_end``)."""
        end = marker(self.target.resource, at, {INITIAL_EVENTS_END: "true"})
        return HubEvent("BOOKMARK", end, at, at)

    def _resync(self, objects: list[tuple[str, bytes]] | list[JSON], at: str) -> Iterator[HubEvent]:
        resource = self.target.resource
        begin = marker(resource, at, {RESYNC_ANNOTATION: "begin"})
        yield HubEvent("RESYNC", begin, at, None)
        for found in objects:
            yield self._added(cast(Any, found), at, None)
        yield HubEvent("RESYNC", marker(resource, at, {RESYNC_ANNOTATION: "end"}), at, at)

    def _replay(self, wanted: str, at: str) -> list[HubEvent] | None:
        """The history after ``wanted`` up to ``at`` (the last event given out); ``None``
        when it does not reach back that far."""
        if wanted == at:
            return []
        floor = self.history_floor
        if floor is None:
            return None
        if wanted == floor:
            return list(self.history)
        for i, event in enumerate(self.history):
            if event.resource_version == wanted:
                return list(self.history)[i + 1 :]
        n, low, high = decimal_version(wanted), decimal_version(floor), decimal_version(at)
        if n is None or low is None or high is None or n < low:
            return None
        if n >= high:
            return []  # at or past the hub's point: changes after it, as they come
        return [e for e in self.history if (decimal_version(e.resource_version) or 0) > n]


#: An upstream watch that closes holding at least this many objects gives the C heap's
#: free pages back (``malloc_trim``): its state's JSON is in blocks glibc would keep.
GIVE_BACK_OBJECTS = 1000

#: The scope of upstream watches shared across identities (``--shared-watches``).
SHARED_SCOPE = "shared"


@dataclass(frozen=True, slots=True)
class SharedWatches:
    """Upstream watches shared across identities, each subscriber admitted by the cluster.

    Attributes:
        adapter: calls the upstream with the gateway's own credential (its watches).
        access: answers whether a subscriber may list and watch, with its own token.
        recheck: seconds between access reviews of every subscriber still subscribed.
    """

    adapter: KubeAdapter
    access: AccessReviews
    recheck: float = 30.0


class WatchHub:
    """The shared upstream watches of one application; it owns their tasks.

    Args:
        adapter: the upstream adapter; its ``streams`` budget gives each upstream watch
            its lease.
        subscribers: the subscriber budget (one lease per subscriber; default 1,000 per
            identity, 10,000 in all).
        max_queue: live events a subscriber may fall behind before it is ended.
        history: events each upstream watch keeps for subscribers that resume.
        linger: seconds an upstream watch stays open after its last subscriber left.
        backoff: the upstream watches' retry policy.
        shared: share upstream watches across identities (made with the gateway's own
            credential, each subscriber admitted and periodically rechecked by access
            reviews made with its own token); ``None``: one scope per identity.
    """

    def __init__(
        self,
        adapter: KubeAdapter,
        *,
        subscribers: Budget | None = None,
        max_queue: int = 1024,
        history: int = 1024,
        linger: float = 10.0,
        backoff: Backoff = Backoff(),
        shared: SharedWatches | None = None,
    ) -> None:
        self.adapter = adapter
        self.shared = shared
        self.streams = adapter.streams
        self.subscriber_budget = subscribers or Budget("subscriptions", 10_000, 1_000)
        self.max_queue = max_queue
        self.history = history
        self.linger = linger
        self.backoff = backoff
        self.stats = HubStats()
        self._upstreams: dict[tuple[Any, ...], Upstream] = {}
        self._rechecks: asyncio.Task[None] | None = None
        #: Tasks giving the C heap's free pages back (the event loop holds tasks weakly).
        self._trims: set[asyncio.Task[None]] = set()
        #: Shutting down: no new subscriber (see :meth:`drain`).
        self.draining = False
        #: The watches of subscribers catching up (:meth:`Upstream.catch_up`).
        self._catch_ups: set[asyncio.Task[None]] = set()

    @property
    def upstreams(self) -> list[Upstream]:
        return list(self._upstreams.values())

    async def subscribe(
        self,
        target: WatchTarget,
        start: WatchStart,
        credential: Credential,
    ) -> WatchSubscription:
        """Join (or open) the upstream watch of ``target`` for the caller's scope.

        A ``resume`` start that opens the upstream watch makes it watch from that version
        (older than its list), so the subscriber loses nothing.

        Raises:
            ResourceExhausted: the caller's (or everyone's) subscriber or upstream-stream
                budget is spent.
            GatewayError: the upstream refused the watch (401, 403, 400...).
        """
        target.resource.check("watch")
        if self.draining:
            raise errors.Draining()
        caller = scope_of(credential)
        try:
            ticket = self.subscriber_budget.acquire(caller)
        except errors.ResourceExhausted:
            self.stats.refused += 1
            raise
        upstream: Upstream | None = None
        try:
            shared = self.shared
            if shared is None:
                scope, adapter, upstream_credential = caller, self.adapter, credential
            else:
                allowed = await shared.access.may_watch(
                    credential, target.resource, target.namespace
                )
                if not allowed:
                    self.stats.denied += 1
                    raise forbidden(target.resource, target.namespace)
                # The gateway's own credential (the adapter adds it to anonymous calls).
                scope, adapter, upstream_credential = SHARED_SCOPE, shared.adapter, ANONYMOUS
            key = (scope, *target.key)
            upstream = self._upstreams.get(key)
            if upstream is None:
                try:
                    # charged to the caller who opens it: one identity cannot open
                    # unboundedly many shared watches with distinct selectors
                    lease = self.streams.acquire(caller)
                except errors.ResourceExhausted:
                    self.stats.refused += 1
                    raise
                upstream = Upstream(
                    self,
                    key,
                    target,
                    adapter=adapter,
                    credential=upstream_credential,
                    lease=lease,
                    columns=start.columns,
                    make=start.make,
                )
                self._upstreams[key] = upstream
                self.stats.upstream_watches += 1
                upstream.start(start.resource_version if start.mode == "resume" else None)
            elif start.mode == "resume":
                assert start.resource_version is not None
                upstream.resume_earlier(start.resource_version)
            upstream.pending += 1
            try:
                await upstream.wait_ready()
            finally:
                upstream.pending -= 1
            if self.draining:
                raise errors.Draining()
            sub = upstream.join(start, ticket, caller)
            if shared is not None:
                sub.credential = credential
                if self._rechecks is None:
                    self._rechecks = asyncio.create_task(self._recheck(shared), name="hub-rbac")
            return sub
        except BaseException:
            ticket.release()
            if upstream is not None:
                upstream._idle_check()  # a joiner that gave up must not keep it open
            raise

    def _give_back(self) -> None:
        """Give the C heap's free pages back to the system, in a thread (the JSON of a
        large state is in C heap blocks, which glibc keeps for reuse once freed)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(heap.give_back(), name="watch-hub-give-back")
        self._trims.add(task)
        task.add_done_callback(self._trims.discard)

    def _forget(self, upstream: Upstream) -> None:
        if self._upstreams.get(upstream.key) is upstream:
            del self._upstreams[upstream.key]
            self.stats.upstream_watches -= 1

    async def _recheck(self, shared: SharedWatches) -> None:
        """Review every shared subscriber's access again, one review per identity and
        watch, ending those whose right is gone (the cluster's RBAC may change anytime)."""
        limit = asyncio.Semaphore(16)
        while True:
            await asyncio.sleep(shared.recheck)
            groups: dict[tuple[str, Any], list[WatchSubscription]] = {}
            for upstream in self.upstreams:
                for sub in upstream.subscribers:
                    if sub.credential is not None:
                        groups.setdefault((scope_of(sub.credential), upstream.key), []).append(sub)

            async def review(subs: list[WatchSubscription]) -> None:
                first = subs[0]
                assert first.credential is not None
                target = first.upstream.target
                try:
                    async with limit:
                        allowed = await shared.access.may_watch(
                            first.credential, target.resource, target.namespace, fresh=True
                        )
                except (errors.Unauthorized, errors.Forbidden) as exc:
                    allowed, error = False, exc
                except errors.GatewayError:
                    return  # the review could not be made now: keep them, ask next time
                else:
                    error = forbidden(target.resource, target.namespace)
                if not allowed:
                    for sub in subs:
                        self.stats.denied += 1
                        sub.end(error)

            await asyncio.gather(*(review(subs) for subs in groups.values()))

    def drain(self) -> None:
        """The gateway is shutting down: refuse new subscribers and end every subscriber
        with :class:`~gateway.core.errors.Draining` carrying its resume point (the version
        after the last event it took; ``None`` inside its initial events), from which it
        resumes on another replica without loss (watch rule 7)."""
        self.draining = True
        for upstream in self.upstreams:
            for sub in list(upstream.subscribers):
                sub.end(errors.Draining(resource_version=sub.resume))

    async def aclose(self) -> None:
        """Stop every upstream watch; their subscribers end cleanly."""
        if self._rechecks is not None:
            self._rechecks.cancel()
            await asyncio.gather(self._rechecks, return_exceptions=True)
        upstreams = list(self._upstreams.values())
        for upstream in upstreams:
            upstream.close()
        tasks = [u.task for u in upstreams if u.task is not None]
        tasks += list(self._catch_ups)
        await asyncio.gather(*tasks, return_exceptions=True)
