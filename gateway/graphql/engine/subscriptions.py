"""GraphQL subscriptions: each subscriber reads its own core stream; the document runs once
per event for every subscriber with the same document, variables and identity.

A subscription field's resolver opens a core stream for the subscriber
(:mod:`gateway.graphql.resolvers.streams`): for a watch, its own subscription of the core's
:class:`~gateway.core.watch.hub.WatchHub`, with its own start (snapshot, now, a resume, a replay
of the hub's history or a resync), its own bounded queue (one that falls ``max_queue``
behind is ended with ``SLOW_SUBSCRIBER`` and its resume point) and, with
``changedFieldsOnly``, its own comparison (watch rule 31), all the hub's.  This module adds
what only GraphQL has: executing the document for each event.

Subscribers with the same document, operation, variables and identity (a hash of the token,
never the token), validated by the same schema, form one :class:`Execution`.  The hub hands
every subscriber of an upstream watch the same :class:`~gateway.core.watch.hub.HubEvent`; the
first subscriber of an execution to read an event executes the document for it and keeps
the payload on the event (:meth:`HubEvent.encoded`, keyed by the execution), so the others
send the same serialised payload: one execution and one ``orjson`` dump per event and
execution, whatever the number of subscribers, and nothing one identity may see reaches
another.  A subscriber's own initial events are executed for it as it reads them.

There is no task and no queue here: a transport reads :meth:`Subscriber.next_item` (or
:meth:`~Subscriber.next_nowait` for what is ready), which takes the next event from the core
stream and renders it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    SelectionSetNode,
)

from gateway.core import (
    JSON,
    Digest,
    FleetEvent,
    FleetLivePage,
    FleetLiveSubscription,
    FleetStream,
    HubEvent,
    LivePage,
    LiveSubscription,
    ReadAhead,
    Stream,
    StreamChanges,
    WatchSubscription,
    deepjson,
    digest,
    errors,
    scope_of,
)
from gateway.graphql.engine.execution import Engine, Prepared, Response
from gateway.graphql.engine.projection import ProjectingExecutor
from gateway.graphql.errors import format_exception
from gateway.graphql.resolvers.context import Context

#: ``extensions.reason`` of the completion of a subscription ended by a drain.
DRAINING = "DRAINING"


#: The sources of live views (one cluster's, a fleet's merged one).
_LIVE = (LiveSubscription, FleetLiveSubscription)


def _dumps(response: Response) -> str:
    return deepjson.dumps(response).decode()


def drain_payload(resume: str | None) -> str:
    """The last payload of a subscription the gateway ended because it is shutting down:
    ``{"data": null, "extensions": {"reason": "DRAINING", "resumeFrom": <rv or null>}}``.

    Not an error: the client resubscribes (on another replica) with
    ``resourceVersion: resumeFrom`` and loses nothing; ``null`` (a log follow, a snapshot
    not yet complete) means it has no resume point and starts as it started before.
    """
    return _dumps({"data": None, "extensions": {"reason": DRAINING, "resumeFrom": resume}})


@dataclass(slots=True)
class Item:
    """One payload for a subscriber: the serialised ``{data, errors}`` and where it stands.

    Transports wrap the payload in their own frame through :meth:`framed`, built once per
    frame shape for every subscriber that receives this item.
    """

    payload: str
    resume: str | None
    _frames: dict[Any, str] | None = None
    _digest: Digest | None = None
    _shown: Digest | None = None

    def framed(self, key: Any, frame: Callable[[str], str]) -> str:
        """``frame(payload)``, computed once per ``key`` (the op id, the protocol...)."""
        frames = self._frames
        if frames is None:
            frames = self._frames = {}
        text = frames.get(key)
        if text is None:
            text = frames[key] = frame(self.payload)
        return text

    def digest(self, keys: tuple[str, ...]) -> Digest:
        """The digest of the event's ``object`` selections (and errors), for watch rule 31:
        aliases, fragments and relations included, ``type`` and ``resourceVersion`` left
        out.  Computed once per item."""
        if self._digest is None:
            self._digest = _digest_of(deepjson.loads(self.payload), keys)
        return self._digest

    def shown(self, versions: tuple[str, ...]) -> Digest:
        """The digest of a live view's update as its subscriber sees it: the payload
        without the view's ``resourceVersion`` (under the response keys ``versions``: it
        moves with every change anywhere in the cache).  Computed once per item."""
        if self._shown is None:
            self._shown = _shown_of(deepjson.loads(self.payload), versions)
        return self._shown


def _shown_of(response: Response, versions: tuple[str, ...]) -> Digest:
    data = response.get("data")
    if isinstance(data, dict):
        data = {
            key: {k: v for k, v in view.items() if k not in versions}
            if isinstance(view, dict)
            else view
            for key, view in data.items()
        }
    return digest(deepjson.dumps([data, response.get("errors")]))


def version_selections(prepared: Prepared) -> tuple[str, ...]:
    """The response keys (alias or name) of a live view's ``resourceVersion``."""
    fragments = {
        d.name.value: d
        for d in prepared.document.definitions
        if isinstance(d, FragmentDefinitionNode)
    }
    return tuple(
        {
            (field.alias.value if field.alias else field.name.value): None
            for root in _fields(prepared.operation.selection_set, fragments)
            for field in _fields(root.selection_set, fragments)
            if field.name.value == "resourceVersion"
        }
    )


def _digest_of(response: Response, keys: Iterable[str]) -> Digest:
    data = response.get("data")
    event = next(iter(data.values()), None) if isinstance(data, dict) else None
    part = [event.get(k) for k in keys] if isinstance(event, dict) else [event]
    errors_ = response.get("errors")
    return digest(deepjson.dumps([part, errors_] if errors_ else part))


def _fields(
    selection_set: SelectionSetNode | None, fragments: Mapping[str, Any]
) -> Iterator[FieldNode]:
    """The fields of a selection set, through inline fragments and fragment spreads
    (validation has ruled out cycles)."""
    if selection_set is None:
        return
    for selection in selection_set.selections:
        if isinstance(selection, FieldNode):
            yield selection
        elif isinstance(selection, InlineFragmentNode):
            yield from _fields(selection.selection_set, fragments)
        elif isinstance(selection, FragmentSpreadNode):
            fragment = fragments.get(selection.name.value)
            if fragment is not None:
                yield from _fields(fragment.selection_set, fragments)


def object_selections(prepared: Prepared) -> tuple[str, ...]:
    """The response keys (alias or name) under which the subscription's event carries its
    ``object`` selections, in document order without repeats."""
    fragments = {
        d.name.value: d
        for d in prepared.document.definitions
        if isinstance(d, FragmentDefinitionNode)
    }
    keys: list[str] = []
    for root in _fields(prepared.operation.selection_set, fragments):
        for field in _fields(root.selection_set, fragments):
            if field.name.value == "object":
                key = field.alias.value if field.alias else field.name.value
                if key not in keys:
                    keys.append(key)
    return tuple(keys)


class Execution:
    """The subscribers of one document, operation, variables and identity.

    Its executor (the first subscriber's) executes the document for every event any of
    them reads first; the payload is kept on the hub event under this execution.
    """

    __slots__ = ("__weakref__", "executor", "key", "prepared", "subscribers", "variables")

    def __init__(
        self, key: tuple[Any, ...], prepared: Prepared, variables: Mapping[str, Any] | None
    ) -> None:
        self.key = key
        self.prepared = prepared
        self.variables = variables
        self.executor: ProjectingExecutor | None = None
        self.subscribers: set[Subscriber] = set()


class Subscriber:
    """One subscriber's subscription, read by its transport.

    ``next_item()`` returns items in order, then ``None`` when the subscription is over;
    ``final`` then holds a closing payload, if any.  :meth:`close` when done.
    """

    __slots__ = (
        "_changes_keys",
        "_final",
        "_pending",
        "_starting",
        "context",
        "drained",
        "error",
        "execution",
        "finished",
        "owner",
        "source",
    )

    def __init__(self, owner: Subscriptions, execution: Execution, context: Context) -> None:
        self.owner = owner
        self.execution = execution
        #: Until the source opens (its resolver reads it); then only the executor holds it.
        self.context: Context | None = context
        self.source: Stream[Any] | None = None
        self.finished = False
        #: Ended by a drain (the gateway is shutting down): ``final`` is the completion.
        self.drained = False
        self.error: Exception | None = None
        self._final: str | None = None
        #: An event ``next_nowait`` took whose rendering has to wait.
        self._pending: Any = None
        #: Opening the source: a task of its own, so that a reader's timeout (a transport's
        #: heartbeat) cannot cut the opening short; the next read waits for the same one.
        self._starting: asyncio.Future[bool] | None = None
        self._changes_keys: tuple[str, ...] | None = None

    # -- state -------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """Whether the subscription is over (ended here or by its source: a slow reader,
        the upstream, a drain)."""
        return self.finished or bool(getattr(self.source, "closed", False))

    @property
    def resume(self) -> str | None:
        """The resume point after the last event taken."""
        return self.source.resume if self.source is not None else None

    @property
    def merged(self) -> bool:
        """Whether it reads several clusters (a fleet watch): its resume point is its own
        reading's, not its items' (an item is shared by readers that interleave the
        clusters differently)."""
        return isinstance(self.source, FleetStream)

    @property
    def failed(self) -> bool:
        """Whether the subscription was cut by an error (a slow subscriber, a source that
        broke) rather than completed with a response of its own."""
        return self._final is None and self.error is not None

    @property
    def final(self) -> str | None:
        """The closing payload: a drain's resumable completion, or the error that ended it
        (a slow subscriber's carries its own resume point)."""
        if self._final is not None:
            return self._final
        if self.drained:
            return drain_payload(self.resume)
        if self.error is None:
            return None
        return _dumps({"errors": [format_exception(self.error)]})

    # -- reading -----------------------------------------------------------------------

    def next_nowait(self) -> Item | None:
        """The next item if one is ready without waiting (an event queued and its payload
        already made, or made without waiting), else ``None``."""
        source = self.source
        if source is None or self.finished or self._pending is not None:
            return None
        if self._changes_keys is not None or isinstance(source, _LIVE):
            return None  # the comparison may have to execute an earlier state: next_item
        event = source.next_nowait()
        if event is None:
            return None
        memo = getattr(event, "_encoded", None)
        if memo is not None:  # the usual case: another subscriber of it rendered it
            item = memo.get(self.execution)
            if item.__class__ is Item:
                return item
        rendered = self._render(event)
        if isinstance(rendered, Item):
            return rendered
        self._pending = (event, rendered)
        return None

    async def next_item(self) -> Item | None:
        """The next item, waiting for one; ``None`` when the subscription is over."""
        if self.source is None and not self.finished:
            if self._starting is None:
                self._starting = asyncio.ensure_future(self._start())
            if not await asyncio.shield(self._starting):
                return None
            self._starting = None  # started: not held for the subscription's lifetime
        source = self.source
        assert source is not None
        while not self.finished:
            try:
                if self._pending is not None:
                    event, rendered = self._pending
                    self._pending = None
                else:
                    event = source.next_nowait()
                    if event is None:
                        event = await source.next()
                        if event is None:
                            self._finish()
                            return None
                    rendered = self._render(event)
                item = rendered if isinstance(rendered, Item) else await asyncio.shield(rendered)
                changes: StreamChanges | None = getattr(source, "changes", None)
                if changes is not None and not await changes.admit(
                    event, functools.partial(item.digest, self._keys()), self._earlier
                ):
                    continue  # nothing the document selects changed (watch rule 31)
                if (
                    isinstance(source, _LIVE)
                    and not source.notify
                    and source.unchanged(item.shown(version_selections(self.execution.prepared)))
                ):
                    continue  # a live view whose rendered page is what it sent last
                return item
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._finish(exc)
        return None

    async def next(self) -> str | None:
        """The next payload, waiting for one; ``None`` when the subscription is over."""
        item = await self.next_item()
        return item.payload if item is not None else None

    # -- ending ------------------------------------------------------------------------

    def end(self, error: Exception | None = None) -> None:
        """End the subscription with ``error`` as its last payload (a schema swap removed
        its field); the reader wakes."""
        if self.finished:
            return
        self.error = error
        self._finish(error)

    def drain(self) -> None:
        """End the subscription because the gateway is shutting down: the completion is
        resumable (:func:`drain_payload`, after the last event taken)."""
        if self.finished:
            return
        self.drained = True
        self._finish()

    def close(self) -> None:
        """The transport is done (idempotent)."""
        self._finish(self.error)

    def _finish(self, error: Exception | None = None, *, final: str | None = None) -> None:
        if error is not None and self.error is None:
            self.error = error
        if final is not None:
            self._final = final
        first = not self.finished
        self.finished = True
        self._pending = None
        if self.source is not None:
            self.source.close()
        if first:
            self.owner.leave(self)

    # -- the document ------------------------------------------------------------------

    async def _start(self) -> bool:
        """Open the source (the field's resolver, with this subscriber's context)."""
        owner, execution = self.owner, self.execution
        context, self.context = self.context, None  # only the source needs it
        assert context is not None
        executor = await owner.engine.subscriber(execution.prepared, execution.variables, context)
        if isinstance(executor, dict):
            self._finish(final=_dumps(executor))
            return False
        try:
            started = await owner.engine.source(executor)
        except Exception as exc:
            self._finish(exc)
            return False
        if isinstance(started, dict):
            self._finish(final=_dumps(started))
            return False
        source: Stream[Any] = (
            started
            if isinstance(started, (WatchSubscription, ReadAhead, FleetStream, *_LIVE))
            else ReadAhead(_iterate(started))
        )
        if self.finished:  # ended while the source opened
            source.close()
            return False
        self.source = source
        if execution.executor is None:
            execution.executor = executor
        if getattr(source, "changes", None) is not None:
            self._changes_keys = object_selections(execution.prepared)
        return True

    def _keys(self) -> tuple[str, ...]:
        assert self._changes_keys is not None
        return self._changes_keys

    def _render(self, event: Any) -> Item | Awaitable[Item]:
        """The item of an event: the execution's, made by whichever subscriber read it
        first (a hub event), else made for this subscriber."""
        if isinstance(event, (HubEvent, FleetEvent, LivePage, FleetLivePage)):
            return event.encoded(self.execution, self._execute)  # type: ignore[no-any-return]
        return self._execute(event)

    def _execute(self, event: Any) -> Item | Awaitable[Item]:
        executor = self.execution.executor
        assert executor is not None
        response = self.owner.engine.render(executor, event)
        resume = event.resume if isinstance(event, HubEvent) else None
        if inspect.isawaitable(response):
            return asyncio.ensure_future(_item_of(response, resume, executor))
        executor.context_value.reset_loaders()
        return Item(_dumps(response), resume)

    async def _earlier(self, obj: JSON) -> Digest:
        """The digest of what this subscriber would have received of an earlier state of
        an object (the first change of an object after it joined)."""
        executor = self.execution.executor
        assert executor is not None
        again = getattr(self.source, "again", None)
        earlier = again(obj) if again is not None else HubEvent("MODIFIED", obj, "", None)
        response = self.owner.engine.render(executor, earlier)
        if inspect.isawaitable(response):
            response = await response
        return _digest_of(response, self._keys())


async def _item_of(
    response: Awaitable[Response], resume: str | None, executor: ProjectingExecutor
) -> Item:
    done = await response
    executor.context_value.reset_loaders()  # the next event's relations are loaded anew
    return Item(_dumps(done), resume)


async def _iterate(stream: AsyncIterable[Any]) -> Any:
    async for item in stream:
        yield item


class Subscriptions:
    """The GraphQL subscriptions of one endpoint, grouped by :class:`Execution`.

    Args:
        engine: executes the documents (swapped with the schema).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.executions: dict[tuple[Any, ...], Execution] = {}
        #: Shutting down: transports refuse new subscriptions (see :meth:`drain`).
        self.draining = False

    def subscribe(
        self,
        prepared: Prepared,
        variables: Mapping[str, Any] | None,
        context_factory: Callable[[], Context],
        *,
        resume_from: str | None = None,
    ) -> Subscriber:
        """A subscriber of this document and variables (it starts on its first read).

        ``resume_from``: for a watch, the subscriber starts after this version instead of
        where the document says (ignored by other subscriptions, which have no versions).
        """
        if self.draining:
            raise errors.Draining()
        context = context_factory()
        context.resume_from = resume_from
        key = (
            scope_of(context.credential),
            prepared.query,
            prepared.operation_name,
            orjson.dumps(variables or {}, option=orjson.OPT_SORT_KEYS),
            # The engine that validated it executes it: an execution never spans a swap.
            id(prepared.engine or self.engine),
        )
        execution = self.executions.get(key)
        if execution is None:
            execution = self.executions[key] = Execution(key, prepared, variables)
        subscriber = Subscriber(self, execution, context)
        execution.subscribers.add(subscriber)
        return subscriber

    def leave(self, subscriber: Subscriber) -> None:
        execution = subscriber.execution
        execution.subscribers.discard(subscriber)
        if not execution.subscribers and self.executions.get(execution.key) is execution:
            del self.executions[execution.key]

    def _everyone(self) -> list[Subscriber]:
        return [s for e in list(self.executions.values()) for s in list(e.subscribers)]

    def drain(self) -> None:
        """End every subscriber with its resumable completion; new subscriptions are
        refused from now on (the gateway is shutting down)."""
        self.draining = True
        for subscriber in self._everyone():
            subscriber.drain()

    def end_where(self, ended: Callable[[Prepared], Exception | None]) -> int:
        """End every execution whose document ``ended`` gives an error for (the schema it
        was checked against lost its root field); its subscribers get that error.  Returns
        how many executions ended."""
        count = 0
        for execution in list(self.executions.values()):
            error = ended(execution.prepared)
            if error is None:
                continue
            for subscriber in list(execution.subscribers):
                subscriber.end(error)
            count += 1
        return count

    async def aclose(self) -> None:
        """End every subscriber (without an error): their core streams close."""
        for subscriber in self._everyone():
            subscriber.close()
