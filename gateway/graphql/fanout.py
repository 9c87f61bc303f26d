"""Shared subscriptions: one upstream watch, one execution, one payload per event.

Subscribers with the same document, operation, variables *and* credential share a
:class:`Feed`: one source stream (so one upstream watch or log follow), one execution of
the document per event and one serialised payload, which every subscriber's transport wraps
in its own frame.  Different credentials never share a feed, so nothing one caller may see
reaches another.

Each subscriber has a bounded queue.  A subscriber that falls ``max_queue`` events behind
is ended with a ``SLOW_SUBSCRIBER`` error carrying the ``resourceVersion`` to resume from
(the resume point after the last event it was given), and never slows the others.

A subscriber joining a feed that already delivered events is brought to the same point
without a gap or a duplicate, decided by what the feed streams:

* watches with initial events: ADDED for every object the feed currently holds (executed
  for the joiner alone), then the live events;
* watches of "changes from now": the live events;
* anything else (a resumed watch, a log): the feed's history replayed if it is complete,
  else the joiner gets a feed of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from gateway.core.watch import object_key
from gateway.graphql.context import Context
from gateway.graphql.errors import ApiError, format_exception
from gateway.graphql.execution import Engine, Prepared, Response
from gateway.graphql.streams import EventRoot

log = logging.getLogger(__name__)

FeedMode = Literal["snapshot", "live", "replay"]
#: Events a feed remembers to replay to a late joiner (modes other than snapshot).
HISTORY = 1024


@dataclass(slots=True)
class Item:
    """One payload for subscribers: the serialised ``{data, errors}`` and the resume point."""

    payload: str
    resume: str | None


@dataclass(eq=False, slots=True)
class Subscriber:
    """One subscriber's end of a feed: a bounded queue read by its transport.

    ``next()`` returns payloads in order, then ``None`` when the subscription is over;
    ``final`` then holds a closing error payload, if any.
    """

    max_queue: int
    queue: deque[Item] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    done: bool = False
    final: str | None = None
    #: Live items held while a joiner's snapshot is being executed.
    held: list[Item] | None = None
    resume: str | None = None

    def offer(self, item: Item, *, bounded: bool = True) -> bool:
        if self.done:
            return True
        if bounded and len(self.queue) >= self.max_queue:
            return False
        self.queue.append(item)
        if item.resume is not None:
            self.resume = item.resume
        self.wakeup.set()
        return True

    def finish(self, final: str | None = None) -> None:
        if not self.done:
            self.done = True
            self.final = final
            self.wakeup.set()

    async def next(self) -> str | None:
        while True:
            if self.queue:
                return self.queue.popleft().payload
            if self.done:
                return None
            self.wakeup.clear()
            await self.wakeup.wait()


def _dumps(response: Response) -> str:
    return orjson.dumps(response).decode()


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
        self.state: dict[str, dict[str, Any]] = {}
        self.resume: str | None = None
        self.closed = False
        self.executor: Any = None
        self.task: asyncio.Task[None] | None = None
        self._helpers: set[asyncio.Task[None]] = set()

    @property
    def mode(self) -> FeedMode:
        return self.context.feed_mode

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"graphql-feed-{self.context.request_id}")
        self.task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "subscription feed %s failed", self.context.request_id, exc_info=task.exception()
            )

    def joinable(self) -> bool:
        if self.closed:
            return False
        if self.emitted == 0 or self.mode in ("snapshot", "live"):
            return True
        return self.emitted <= HISTORY

    def join(self, sub: Subscriber) -> None:
        """Add a subscriber at the feed's current point (synchronously: no event can slip)."""
        if self.emitted and self.mode == "snapshot":
            objects = list(self.state.values())
            sub.held = []
            helper = asyncio.create_task(self._snapshot(sub, objects, self.resume))
            self._helpers.add(helper)
            helper.add_done_callback(self._helpers.discard)
        elif self.emitted and self.mode == "replay":
            for item in self.history:
                sub.offer(item, bounded=False)
        self.subscribers.add(sub)

    async def _snapshot(
        self, sub: Subscriber, objects: list[dict[str, Any]], resume: str | None
    ) -> None:
        try:
            for i, obj in enumerate(objects):
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                root = EventRoot("ADDED", obj, rv, resume if i == len(objects) - 1 else None)
                response = await self.hub.engine.execute_event(self.executor, root)
                sub.offer(Item(_dumps(response), root.resume), bounded=False)
        except Exception as exc:
            sub.finish(_dumps({"errors": [format_exception(exc)]}))
            self.leave(sub)
            return
        held, sub.held = sub.held or [], None
        for item in held:
            self._deliver(sub, item)

    def leave(self, sub: Subscriber) -> None:
        """Remove a subscriber; the last one out stops the feed and its upstream stream."""
        self.subscribers.discard(sub)
        if not self.subscribers and not self.closed:
            self.close()

    def close(self) -> None:
        self.closed = True
        self.hub.forget(self)
        if self.task is not None and not self.task.done():
            self.task.cancel()
        for helper in list(self._helpers):
            helper.cancel()

    def _deliver(self, sub: Subscriber, item: Item) -> None:
        if sub.held is not None:
            sub.held.append(item)
            return
        if not sub.offer(item):
            error = ApiError(
                "the subscriber fell too far behind and was ended; resubscribe with "
                "`resourceVersion` to resume without loss",
                code="SLOW_SUBSCRIBER",
                http_status=429,
                resourceVersion=sub.resume,
            )
            sub.finish(_dumps({"errors": [format_exception(error)]}))
            self.subscribers.discard(sub)

    def _broadcast(self, item: Item) -> None:
        self.emitted += 1
        self.history.append(item)
        for sub in list(self.subscribers):
            self._deliver(sub, item)

    def _track(self, root: Any) -> None:
        if not isinstance(root, EventRoot):
            return
        if root.type in ("ADDED", "MODIFIED"):
            self.state[object_key(root.object)] = root.object
        elif root.type == "DELETED":
            self.state.pop(object_key(root.object), None)
        if root.resume is not None:
            self.resume = root.resume

    async def _run(self) -> None:
        engine = self.hub.engine
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
                    self._track(root)
                    self._broadcast(Item(_dumps(response), getattr(root, "resume", None)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            final = _dumps({"errors": [format_exception(exc)]})
        finally:
            self.closed = True
            self.hub.forget(self)
            for sub in list(self.subscribers):
                sub.finish(final)
            for helper in list(self._helpers):
                helper.cancel()


async def _iterate(stream: AsyncIterable[Any]) -> Any:
    async for item in stream:
        yield item


class Hub:
    """The feeds of one application, by key; it owns their tasks.

    Args:
        engine: executes the documents.
        limits: ``max_queue`` bounds each subscriber.
    """

    def __init__(self, engine: Engine, max_queue: int) -> None:
        self.engine = engine
        self.max_queue = max_queue
        self.feeds: dict[tuple[Any, ...], Feed] = {}

    def subscribe(
        self,
        prepared: Prepared,
        variables: Mapping[str, Any] | None,
        context_factory: Callable[[], Context],
    ) -> tuple[Feed, Subscriber]:
        """Join (or start) the feed of this document, variables and credential."""
        context = context_factory()
        key = (
            context.credential.token,
            prepared.query,
            prepared.operation_name,
            orjson.dumps(variables or {}, option=orjson.OPT_SORT_KEYS),
        )
        feed = self.feeds.get(key)
        sub = Subscriber(self.max_queue)
        if feed is None or not feed.joinable():
            feed = Feed(self, key, prepared, variables, context)
            if key not in self.feeds:
                self.feeds[key] = feed
            feed.join(sub)
            feed.start()
        else:
            feed.join(sub)
        return feed, sub

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
