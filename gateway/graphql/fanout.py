"""Shared subscriptions: one execution and one serialised payload per event and document.

Subscribers with the same document, operation, variables *and* identity share a
:class:`Feed`: one source stream, one execution of the document per event and one
serialised payload, which every subscriber's transport wraps in its own frame.  Identities
are keyed by a hash of the token (never the token) and never share a feed, so nothing one
caller may see reaches another.

Watch subscriptions read the core's watch hub (:mod:`gateway.core.hub`), which already
shares one upstream watch per identity and selectors.  Each subscriber takes its own start
from the hub at the moment it joins (a snapshot, a replay of the hub's history, or a resync
for a version too old), executed for it alone *as it reads* (so a snapshot of any size costs
nothing until read), then the feed's shared payloads of the events after that point: no
gap, no duplicate.  A subscriber may bring its own resume point (an SSE ``Last-Event-ID``):
it then starts after that version whatever the document asks (a replay of the hub's
history, or a ``RESYNC`` frame when the version is too old).  Log follows have no hub: a
late joiner gets the feed's history replayed if it is complete, else a feed of its own.

With ``changedFieldsOnly`` the feed withholds a MODIFIED event whose selected fields did not
change, compared once per event for every subscriber (:mod:`gateway.graphql.changes`); a
resuming subscriber's replay is compared on its own.

Each subscriber has a bounded queue of live payloads.  One that falls ``max_queue`` behind
has stopped reading: it is ended with a ``SLOW_SUBSCRIBER`` error carrying the
``resourceVersion`` after the last event it was given, and never slows the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterable, Callable, Iterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway.core import errors
from gateway.core.budget import scope_of
from gateway.core.hub import HubEvent, StartPoint, WatchStart, admit
from gateway.core.wakeup import Wakeup
from gateway.core.wire import JSON
from gateway.graphql.changes import (
    ChangeFilter,
    Digest,
    ReplayFilter,
    digest_of,
    history_before,
    object_selections,
)
from gateway.graphql.context import Context
from gateway.graphql.errors import format_exception
from gateway.graphql.execution import Engine, Prepared, Response
from gateway.graphql.streams import EventRoot

log = logging.getLogger(__name__)

#: Items a log-follow feed remembers to replay to a late joiner.
HISTORY = 1024


@dataclass(slots=True)
class Item:
    """One payload for subscribers: the serialised ``{data, errors}`` and where it stands.

    Transports wrap the payload in their own frame through :meth:`framed`, built once per
    frame shape for every subscriber that receives this item.
    """

    payload: str
    resume: str | None
    seq: int = 0
    type: str = ""
    resource_version: str = ""
    _frames: dict[Any, str] | None = None

    def framed(self, key: Any, frame: Callable[[str], str]) -> str:
        """``frame(payload)``, computed once per ``key`` (the op id, the protocol...)."""
        frames = self._frames
        if frames is None:
            frames = self._frames = {}
        text = frames.get(key)
        if text is None:
            text = frames[key] = frame(self.payload)
        return text


def _dumps(response: Response) -> str:
    return orjson.dumps(response).decode()


#: ``extensions.reason`` of the completion of a subscription ended by a drain.
DRAINING = "DRAINING"


def drain_payload(resume: str | None) -> str:
    """The last payload of a subscription the gateway ended because it is shutting down:
    ``{"data": null, "extensions": {"reason": "DRAINING", "resumeFrom": <rv or null>}}``.

    Not an error: the client resubscribes (on another replica) with
    ``resourceVersion: resumeFrom`` and loses nothing; ``null`` (a log follow, a snapshot
    not yet complete) means it has no resume point and starts as it started before.
    """
    return _dumps({"data": None, "extensions": {"reason": DRAINING, "resumeFrom": resume}})


class Subscriber:
    """One subscriber's end of a feed, read by its transport.

    ``next()`` returns payloads in order, then ``None`` when the subscription is over;
    ``final`` then holds a closing error payload, if any.
    """

    __slots__ = (
        "_final",
        "bookmarks",
        "cut",
        "done",
        "drained",
        "error",
        "feed",
        "floor",
        "initial",
        "max_queue",
        "queue",
        "replay",
        "resume",
        "resume_from",
        "wakeup",
    )

    def __init__(self, feed: Feed, max_queue: int, resume_from: str | None = None) -> None:
        self.feed = feed
        self.max_queue = max_queue
        #: Watch feeds: the version this subscriber resumes after, whatever the document's
        #: start (an SSE ``Last-Event-ID``).
        self.resume_from = resume_from
        self.queue: deque[Item] = deque()
        self.wakeup = Wakeup()
        self.done = False
        #: Ended by a drain (the gateway is shutting down): ``final`` is the completion.
        self.drained = False
        self.error: Exception | None = None
        self._final: str | None = None
        #: The resume point after the last payload taken.
        self.resume: str | None = None
        #: Watch feeds: this subscriber's own initial events, executed as it reads them.
        self.initial: Iterator[HubEvent] | None = None
        #: Watch feeds: live items at or below this position are in ``initial``
        #: (``None`` until the feed's watch is bound).
        self.cut: int | None = None
        self.floor: int | None = None
        self.bookmarks = True
        #: ``changedFieldsOnly`` and a resume: the filter of this subscriber's replay.
        self.replay: ReplayFilter | None = None

    def start_at(self, point: StartPoint, start: WatchStart) -> None:
        self.initial = point.initial
        self.resume = point.resume
        self.floor = point.floor
        self.cut = point.seq
        self.bookmarks = start.bookmarks
        self.wakeup.set()

    def offer(self, item: Item, *, bounded: bool = True) -> bool:
        if self.done:
            return True
        if self.cut is not None:
            if item.seq <= self.cut:
                return True
            if item.type == "BOOKMARK" and not self.bookmarks:
                return True
            if self.floor is not None or item.type == "RESYNC":
                taken, self.floor = admit(self.floor, item.type, item.resource_version)
                if not taken:
                    return True
        if bounded and len(self.queue) >= self.max_queue:
            return False
        self.queue.append(item)
        self.wakeup.set()
        return True

    def finish(
        self, error: Exception | None = None, *, final: str | None = None, drop: bool = False
    ) -> None:
        """End the subscription: what is queued is still delivered unless ``drop``."""
        if self.done:
            return
        self.done = True
        self.error = error
        self._final = final
        if drop:
            self.queue.clear()
            self.initial = None
        self.wakeup.set()

    def drain(self) -> None:
        """End the subscription because the gateway is shutting down: what is queued is
        dropped (the resume point is after the last payload taken) and ``final`` is the
        resumable completion (:func:`drain_payload`)."""
        if self.done:
            return
        self.finish(drop=True)
        self.drained = True

    @property
    def failed(self) -> bool:
        """Whether the subscription was cut by an error (a slow subscriber, a source that
        broke) rather than completed with a response of its own."""
        return self._final is None and self.error is not None

    @property
    def final(self) -> str | None:
        """The closing error payload (a slow subscriber's carries its own resume point)."""
        if self._final is not None:
            return self._final
        if self.drained:
            return drain_payload(self.resume)
        error = self.error
        if error is None:
            return None
        if isinstance(error, errors.SlowSubscriber):
            error = errors.SlowSubscriber(error.message, resource_version=self.resume)
        return _dumps({"errors": [format_exception(error)]})

    def next_nowait(self) -> Item | None:
        """The next live item if one is queued (no waiting, no execution), else ``None``."""
        if self.initial is None and self.queue:
            item = self.queue.popleft()
            if item.resume is not None:
                self.resume = item.resume
            return item
        return None

    async def next_item(self) -> Item | None:
        """The next item, waiting for one; ``None`` when the subscription is over."""
        while True:
            if self.initial is not None:
                event = next(self.initial, None)
                if event is None:
                    self.initial = None
                else:
                    try:
                        response = await self.feed.execute_response(event)
                        replay = self.replay
                        if replay is not None and not await replay.admit(
                            event, response, self.feed.baseline
                        ):
                            continue  # nothing it selected changed (watch rule 31)
                    except Exception as exc:
                        self.finish(exc, drop=True)
                        self.feed.leave(self)
                        return None
                    payload = _dumps(response)
                    if event.resume is not None:
                        self.resume = event.resume
                    return Item(payload, event.resume)
            if self.queue:
                item = self.queue.popleft()
                if item.resume is not None:
                    self.resume = item.resume
                return item
            if self.done:
                return None
            self.wakeup.clear()
            await self.wakeup.wait()

    async def next(self) -> str | None:
        """The next payload, waiting for one; ``None`` when the subscription is over."""
        item = await self.next_item()
        return item.payload if item is not None else None


class Feed:
    """One shared execution of a subscription for every subscriber with the same key."""

    def __init__(
        self,
        hub: Hub,
        key: tuple[Any, ...],
        prepared: Prepared,
        variables: Mapping[str, Any] | None,
        context: Context,
    ) -> None:
        self.hub = hub
        self.key = key
        self.prepared = prepared
        self.variables = variables
        self.context = context
        self.subscribers: set[Subscriber] = set()
        self.emitted = 0
        self.history: deque[Item] = deque(maxlen=HISTORY)
        self.closed = False
        self.executor: Any = None
        self.task: asyncio.Task[None] | None = None
        #: ``changedFieldsOnly``: the comparison of live events (set once the watch binds).
        self.changes: ChangeFilter | None = None
        context.on_watch = self._bound

    @property
    def watching(self) -> bool:
        return self.context.watch is not None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"graphql-feed-{self.context.request_id}")
        self.task.add_done_callback(self._done)
        self.hub.running.add(self)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.hub.running.discard(self)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "subscription feed %s failed", self.context.request_id, exc_info=task.exception()
            )

    def _bound(self) -> None:
        """The watch source joined the hub: every waiting subscriber takes its start."""
        if self.context.changed_only and self.context.watch is not None:
            watcher = self.context.watch[0].upstream.watcher
            # The hub's objects now are what this feed's first events change (references,
            # not copies); not while it still catches up from an older version.
            origin = dict(watcher.state) if watcher.state_floor is None else None
            self.changes = ChangeFilter(object_selections(self.prepared), origin)
        for sub in self.subscribers:
            self._start(sub)

    def _start(self, sub: Subscriber) -> None:
        assert self.context.watch is not None
        hub_sub, start = self.context.watch
        if sub.resume_from is not None:
            start = replace(
                start, mode="resume", resource_version=sub.resume_from, initial_events_end=False
            )
        sub.start_at(hub_sub.upstream.starting_point(start), start)
        if self.changes is not None and start.mode == "resume":
            assert start.resource_version is not None
            before = history_before(hub_sub.upstream.history, start.resource_version)
            sub.replay = ReplayFilter(self.changes.keys, before)

    def joinable(self) -> bool:
        if self.closed:
            return False
        if self.emitted == 0 or self.watching:
            return True
        return self.emitted <= HISTORY

    def join(self, sub: Subscriber) -> None:
        """Add a subscriber at the feed's current point (synchronously: no event can slip)."""
        if self.watching:
            self._start(sub)
        elif self.emitted:
            for item in self.history:
                sub.offer(item, bounded=False)  # at most HISTORY items
        self.subscribers.add(sub)

    async def execute_response(self, event: HubEvent) -> Response:
        """The response of one of a subscriber's own initial events."""
        root = EventRoot(event.type, event.object, event.resource_version, event.resume, event.seq)
        return await self.hub.engine.execute_event(self.executor, root)

    async def baseline(self, key: str, obj: JSON) -> Digest:
        """The digest of an object's earlier state, as a ``changedFieldsOnly`` subscriber
        received it (one more execution, made once per object)."""
        assert self.changes is not None
        root = EventRoot("MODIFIED", obj, "", None)
        response = await self.hub.engine.execute_event(self.executor, root)
        self.context.reset_loaders()
        return digest_of(response, self.changes.keys)

    def leave(self, sub: Subscriber) -> None:
        """Remove a subscriber; the last one out stops the feed and its source."""
        self.subscribers.discard(sub)
        if not self.subscribers and not self.closed:
            self.close()

    def close(self) -> None:
        self.closed = True
        self.hub.forget(self)
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def _broadcast(self, item: Item) -> None:
        self.emitted += 1
        if not self.watching:
            self.history.append(item)
        for sub in list(self.subscribers):
            if not sub.offer(item):
                if self.context.watches is not None:
                    self.context.watches.stats.dropped_slow += 1
                sub.finish(
                    errors.SlowSubscriber(
                        f"the subscriber fell more than {sub.max_queue} events behind and was "
                        "ended; resubscribe with `resourceVersion` to resume without loss",
                        resource_version=None,
                    ),
                    drop=True,
                )
                self.subscribers.discard(sub)

    async def _run(self) -> None:
        engine = self.hub.engine
        error: Exception | None = None
        final: str | None = None
        try:
            started = await engine.source(self.prepared, self.variables, self.context)
            if isinstance(started, dict):
                final = _dumps(started)
                return
            self.executor, stream = started
            async with aclosing(_iterate(stream)) as roots:
                async for root in roots:
                    response = await engine.execute_event(self.executor, root)
                    self.context.reset_loaders()
                    if isinstance(root, EventRoot):
                        changes = self.changes
                        if changes is not None and not await changes.admit(
                            root.type, root.object, response, self.baseline
                        ):
                            continue  # nothing the document selects changed (watch rule 31)
                        item = Item(
                            _dumps(response),
                            root.resume,
                            root.seq,
                            root.type,
                            root.resource_version,
                        )
                    else:
                        item = Item(_dumps(response), None)
                    self._broadcast(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc
        finally:
            self.closed = True
            self.hub.forget(self)
            for sub in list(self.subscribers):
                sub.finish(error, final=final)


async def _iterate(stream: AsyncIterable[Any]) -> Any:
    async for item in stream:
        yield item


class Hub:
    """The feeds of one application, by key; it owns their tasks.

    Args:
        engine: executes the documents.
        max_queue: bounds each subscriber's queue of live payloads.
    """

    def __init__(self, engine: Engine, max_queue: int) -> None:
        self.engine = engine
        self.max_queue = max_queue
        self.feeds: dict[tuple[Any, ...], Feed] = {}
        #: Every feed whose task runs (a feed that replaced another under the same key
        #: while it finished is not in ``feeds``).
        self.running: set[Feed] = set()
        #: Shutting down: transports refuse new subscriptions (see :meth:`drain`).
        self.draining = False

    def subscribe(
        self,
        prepared: Prepared,
        variables: Mapping[str, Any] | None,
        context_factory: Callable[[], Context],
        *,
        resume_from: str | None = None,
    ) -> tuple[Feed, Subscriber]:
        """Join (or start) the feed of this document, variables and identity.

        ``resume_from``: for a watch, the subscriber starts after this version instead of
        where the document says (ignored by other subscriptions, which have no versions).
        """
        if self.draining:
            raise errors.Draining()
        context = context_factory()
        key = (
            scope_of(context.credential),
            prepared.query,
            prepared.operation_name,
            orjson.dumps(variables or {}, option=orjson.OPT_SORT_KEYS),
        )
        feed = self.feeds.get(key)
        if feed is None or not feed.joinable():
            context.catch_up = resume_from
            feed = Feed(self, key, prepared, variables, context)
            if key not in self.feeds:
                self.feeds[key] = feed
            sub = Subscriber(feed, self.max_queue, resume_from)
            feed.join(sub)
            feed.start()
        else:
            sub = Subscriber(feed, self.max_queue, resume_from)
            feed.join(sub)
        return feed, sub

    def drain(self) -> None:
        """End every subscriber with its resumable completion and stop every feed; new
        subscriptions are refused from now on (the gateway is shutting down)."""
        self.draining = True
        for feed in {*self.feeds.values(), *self.running}:
            for sub in list(feed.subscribers):
                sub.drain()
            feed.close()

    def end_where(self, ended: Callable[[Prepared], Exception | None]) -> int:
        """End every feed whose document ``ended`` gives an error for (the schema it was
        checked against lost its root field); its subscribers get that error.  Returns how
        many feeds ended."""
        count = 0
        for feed in {*self.feeds.values(), *self.running}:
            error = ended(feed.prepared)
            if error is None or feed.closed:
                continue
            for sub in list(feed.subscribers):
                sub.finish(error)
            feed.close()
            count += 1
        return count

    def forget(self, feed: Feed) -> None:
        if self.feeds.get(feed.key) is feed:
            del self.feeds[feed.key]

    async def aclose(self) -> None:
        """Stop every feed (subscribers are finished without an error)."""
        feeds = list(self.feeds.values())
        for feed in feeds:
            feed.close()
        tasks = [f.task for f in feeds if f.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
