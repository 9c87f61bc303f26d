"""A watch that survives the upstream: resume, bookmarks, relist-and-diff on 410.

:class:`Watcher` turns the apiserver's watch protocol into one endless, exact stream of
typed events for one consumer (``docs/watch-semantics.md`` rules 6 to 21; "watch rule N"
below is rule N there):

- it starts from a consistent list (or a streaming list), or from a given resourceVersion;
- after the server ends a stream (timeout, close, a cut mid-line) it resumes from the RV of
  the last delivered event or bookmark, never from "" or "0";
- on 410 Gone/Expired it relists and emits the difference against what the consumer holds,
  framed by ``RESYNC`` markers: ``DELETED`` for objects that vanished during the gap,
  ``MODIFIED`` for changed ones, ``ADDED`` for new ones;
- 429 / 5xx / refused connections back off (exponential, jittered, capped) and re-watch at
  the same RV; 401 / 403 and other client errors end the stream with the error.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from gateway.core import errors
from gateway.core.lists.compacting import Columns, ColumnSpec, Maker, compact, taken
from gateway.core.model.options import ListOptions
from gateway.core.model.registry import Resource
from gateway.core.model.values import JSON
from gateway.core.process import heap
from gateway.core.process.collector import HOLD
from gateway.core.support import deepjson
from gateway.core.upstream.adapter import KubeAdapter, status_of
from gateway.core.upstream.credentials import ANONYMOUS, Credential
from gateway.core.watch.compact import CompactState, encode

log = logging.getLogger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "RESYNC"]
_CHANGE_TYPES = frozenset(("ADDED", "MODIFIED", "DELETED"))
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
#: Annotation on the object of a ``RESYNC`` marker: ``begin`` or ``end``.
RESYNC_ANNOTATION = "kube-gateway.io/resync"
#: Listed objects made compact (and their decoded form freed) per event-loop step.
COMPACT_STEP = 200


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event as consumers see it.

    ``object`` is the object exactly as the upstream sent it (for ``DELETED``, its last
    state).  ``BOOKMARK`` and ``RESYNC`` carry a marker object with only ``metadata``.
    ``raw``: with a compact state (:class:`~gateway.core.watch.compact.CompactState`), the
    JSON the state keeps of an ``ADDED`` or ``MODIFIED`` object (the same ``bytes``).
    """

    type: EventType
    object: JSON
    resource_version: str
    raw: bytes | None = None

    @property
    def key(self) -> str:
        return object_key(self.object)


def object_key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def resource_version_of(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return rv if isinstance(rv, str) and rv else None


def marker(resource: Resource, rv: str, annotations: dict[str, str] | None = None) -> JSON:
    """A bookmark-shaped object (kind, apiVersion, metadata.resourceVersion, annotations)."""
    meta: JSON = {"resourceVersion": rv}
    if annotations:
        meta["annotations"] = annotations
    return {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": meta}


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff, jittered and capped (watch rule 19)."""

    initial: float = 0.8
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 0.5
    #: A stream that lived this long resets the backoff.
    quiet: float = 60.0

    def delay(self, attempt: int) -> float:
        base = min(self.cap, self.initial * self.factor ** max(0, attempt))
        return base * (1 - self.jitter * random.random())


class _OutOfSync(Exception):
    """The stream said something that only a relist can repair."""


class Watcher:
    """An exact, self-healing watch of one resource for one consumer.

    Args:
        adapter: the shared upstream adapter.
        resource: what to watch.
        namespace: one namespace, or ``None`` for all (cluster-scoped resources: ``None``).
        options: selectors; ``resource_version`` to resume from (unset: start from the
            current state, emitting ``ADDED`` for every object).
        credential: the caller's credential, used for every upstream call.
        bookmarks: forward ``BOOKMARK`` events to the consumer (they always advance the
            resume point).
        streaming_list: take the initial state from a streaming list
            (``sendInitialEvents``), falling back to list+watch where the server refuses.
        backoff: retry policy for transient failures.
        timeout_range: the server-side ``timeoutSeconds`` is drawn from this range.
    """

    def __init__(
        self,
        adapter: KubeAdapter,
        resource: Resource | str,
        *,
        namespace: str | None = None,
        options: ListOptions = ListOptions(),
        credential: Credential = ANONYMOUS,
        bookmarks: bool = False,
        streaming_list: bool = False,
        backoff: Backoff = Backoff(),
        timeout_range: tuple[int, int] = (300, 600),
        clock: Callable[[], float] = time.monotonic,
        keep: Callable[[JSON], JSON] | None = None,
        page_size: int | None = None,
        state: MutableMapping[str, JSON] | None = None,
        columns: tuple[ColumnSpec, ...] = (),
        make: Maker | None = None,
    ) -> None:
        self.adapter = adapter
        self.resource = adapter.resource(resource)
        self.resource.check("watch")
        self.namespace = namespace
        self.selectors = ListOptions(
            label_selector=options.label_selector, field_selector=options.field_selector
        )
        self.credential = credential
        self.bookmarks = bookmarks
        self.streaming_list = streaming_list
        self.backoff = backoff
        self.timeout_range = timeout_range
        self._clock = clock
        start = options.resource_version
        #: The resume point: RV of the last delivered event or bookmark.
        self.resource_version: str | None = start if start not in (None, "", "0") else None
        self._start_from_zero = start == "0"
        #: What the consumer holds, by namespace/name; the base of a relist diff.  A
        #: :class:`~gateway.core.watch.compact.CompactState` keeps each object as its JSON
        #: (the hub's); the list that fills it is then made compact as it is taken, its
        #: decoded form freed a slice at a time, with the cyclic collector held off.
        self.state: MutableMapping[str, JSON] = state if state is not None else {}
        #: While set, events at or below this (decimal) version are already in ``state``
        #: and pass through without touching it: a watch resumed from before the list that
        #: seeded ``state`` (see :meth:`catch_up_from`).
        self.state_floor: int | None = None
        self.relists = 0
        self.reconnects = 0
        #: What is kept of each object (listed page by page, or in an event), when the
        #: consumer needs only part of large objects; ``None``: all of it.
        self.keep = keep
        #: Items per page of a list (``None``: the adapter's default).
        self.page_size = page_size
        #: Values the consumer's first reader will want of every listed object (a view's
        #: columns): read as the initial list is made compact, when a list worker makes it
        #: (:mod:`gateway.core.lists.compacting`), and kept with the compact state.
        self.columns = columns
        #: What is made of each listed object as a worker's answer with :attr:`columns` is
        #: taken in (:attr:`~gateway.core.lists.compacting.Columns.made`).
        self.make = make

    # -- public ----------------------------------------------------------------------------

    async def prime(self) -> None:
        """Take the initial state into :attr:`state` without emitting it.

        Afterwards :meth:`events` yields only what happens after the list.
        """
        if self.resource_version is None:
            if isinstance(self.state, CompactState) and not self.streaming_list:
                await self._list_compact(self.state)
                return
            async for _event in self._initial_state():
                pass

    def catch_up_from(self, resource_version: str) -> bool:
        """After :meth:`prime`, watch from an older version than the list's.

        The events between ``resource_version`` and the list are then delivered again (for
        a consumer that resumes from there) without changing :attr:`state`, which already
        holds their outcome.  Possible only where both versions are decimal (as etcd's
        are) and ``resource_version`` is older; returns whether it was done.
        """
        listed = decimal_version(self.resource_version)
        older = decimal_version(resource_version)
        if listed is None or older is None or older >= listed:
            return False
        self.state_floor = listed
        self.resource_version = resource_version
        return True

    async def events(self) -> AsyncIterator[WatchEvent]:
        """The endless event stream; close it (``aclosing``) to stop the watch.

        Raises:
            GatewayError: errors a retry cannot fix (401, 403, 400...), and any error of
                the very first list, so a caller learns at once that it cannot watch.
        """
        if self.resource_version is None:
            async for event in self._initial_state():
                yield event
        failures = 0
        need_relist = False
        while True:
            started = self._clock()
            delivered = 0
            try:
                if need_relist:
                    # _relist does its I/O before yielding anything, so a failed relist
                    # leaves the consumer's view untouched and is simply tried again.
                    async for event in self._relist():
                        yield event
                    need_relist = False
                    failures = 0
                    continue
                async for event in self._one_stream():
                    delivered += 1
                    yield event
            except errors.Gone:
                log.info(
                    "watch of %s expired at rv=%s: relisting",
                    self.resource.plural,
                    self.resource_version,
                )
                need_relist = True
                continue
            except _OutOfSync as exc:
                log.warning("watch of %s out of sync (%s): relisting", self.resource.plural, exc)
                need_relist = True
                continue
            except (
                errors.TooManyRequests,
                errors.Unavailable,
                errors.Timeout,
                errors.ServiceUnavailable,
                errors.Internal,
            ) as exc:
                delay = (
                    exc.retry_after if exc.retry_after is not None else self.backoff.delay(failures)
                )
                log.info(
                    "watch of %s interrupted (%s); retrying in %.2fs",
                    self.resource.plural,
                    exc.reason,
                    delay,
                )
                failures += 1
                self.reconnects += 1
                await asyncio.sleep(delay)
                continue
            self.reconnects += 1
            lived = self._clock() - started
            if delivered == 0 and lived < 1.0:
                # Ending at once with nothing is a failure, not a resume (watch rule 14).
                await asyncio.sleep(self.backoff.delay(failures))
                failures += 1
            elif lived >= self.backoff.quiet or delivered:
                failures = 0

    # -- stages ----------------------------------------------------------------------------

    def _watch_options(self, **extra: Any) -> ListOptions:
        lo, hi = self.timeout_range
        return replace(
            self.selectors,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=random.randint(lo, hi),
            **extra,
        )

    def _store(self, key: str, obj: JSON) -> bytes | None:
        """Keep ``obj`` in the state; its JSON when the state is compact."""
        state = self.state
        if type(state) is CompactState:
            return state.put(key, obj)
        state[key] = obj
        return None

    async def _listed_compact(
        self, columns: tuple[ColumnSpec, ...] = ()
    ) -> tuple[str, dict[str, bytes], Columns | None]:
        """A consistent list made compact: its version, each object's JSON by key, and the
        values at ``columns`` when a list worker read them.

        With list workers (and all of each object kept: no ``keep``), each large page goes
        to a worker (:mod:`gateway.core.lists.compacting`), which delimits its items, keeps
        each as the JSON the upstream sent (the bytes :func:`~gateway.core.watch.compact.
        encode` writes, where the upstream writes JSON as orjson does; the same object in
        any case) and reads the values at ``columns``: the thread reading its answer copies
        each object's JSON out of it (:func:`~gateway.core.lists.compacting.sliced`), and the
        event loop only files them by key, :data:`~gateway.core.lists.compacting.STEP`
        objects per step.  Otherwise (and for a page no worker took) here, as follows.

        The list is decoded (in slices, :mod:`gateway.core.lists.large`), each item
        encoded (:data:`COMPACT_STEP` per event-loop step), then the decoded items freed
        (as many per step), all with the cyclic collector held off (the process's count):
        a collection in between would walk every decoded object still alive (measured on
        30,000 pods: a young collection of 0.9 s and a middle one of 3.0 s, each one loop
        stall), while what is left after is a ``bytes`` per object, which no collection
        walks.  Encoded first and freed after, not one by one: what is kept is then
        allocated apart from what is freed, and the freed memory goes back whole (the C
        heap's free pages given back at the end).
        """
        if self.keep is None and self.adapter.large_lists.compacts:
            return await self._listed_by_workers(columns)
        with HOLD.held():
            listed = await self._list_once()
            rv = str((listed.get("metadata") or {}).get("resourceVersion") or "")
            items: list[Any] = listed.pop("items", None) or []
            del listed
            found: dict[str, bytes] = {}
            large = await self._encoded(items, found)
        if large:
            await heap.give_back()
        return rv, found, None

    async def _encoded(self, items: list[Any], found: dict[str, bytes]) -> bool:
        """Decoded ``items`` made compact into ``found`` (:data:`COMPACT_STEP` per step),
        then freed (as many per step); whether they were many (see :meth:`_listed_compact`)."""
        with_kind = self._with_kind
        for start in range(0, len(items), COMPACT_STEP):
            for raw in items[start : start + COMPACT_STEP]:
                item = with_kind(raw)
                found[object_key(item)] = encode(item)
            await asyncio.sleep(0)
        large = len(items) >= COMPACT_STEP
        while len(items) > COMPACT_STEP:
            del items[-COMPACT_STEP:]
            await asyncio.sleep(0)
        items.clear()
        return large

    async def _listed_by_workers(
        self, columns: tuple[ColumnSpec, ...]
    ) -> tuple[str, dict[str, bytes], Columns | None]:
        """:meth:`_listed_compact` with list workers: each large page made compact by one."""
        resource = self.resource
        job = compact(resource.api_version, resource.kind, columns)
        specs: tuple[ColumnSpec, ...] = job[3]
        found: dict[str, bytes] = {}
        values: Columns | None = None
        large = False
        with HOLD.held():
            rest, pages = await self.adapter.list_compact(
                resource,
                namespace=self.namespace,
                options=replace(
                    self.selectors,
                    resource_version="0" if self._start_from_zero else None,
                    limit=self.page_size,
                ),
                credential=self.credential,
                job=job,
            )
            rv = str((rest.get("metadata") or {}).get("resourceVersion") or "")
            while pages:
                page = pages.pop(0)
                if isinstance(page, bytes):
                    try:
                        _, values = await taken(page, specs, found, values, self.make)
                    except ValueError:
                        raise errors.Internal("a list worker's answer was damaged") from None
                    del page
                else:
                    items: list[Any] = page.pop("items", None) or []
                    del page
                    large = await self._encoded(items, found) or large
        if large:
            await heap.give_back()
        return rv, found, values

    async def _list_once(self) -> dict[str, Any]:
        """One list of the watch's resource and scope, as the initial state starts."""
        listed: dict[str, Any] = await self.adapter.list_all(
            self.resource,
            namespace=self.namespace,
            options=replace(
                self.selectors,
                resource_version="0" if self._start_from_zero else None,
                limit=self.page_size,
            ),
            credential=self.credential,
            keep=self.keep,
        )
        return listed

    async def _list_compact(self, state: CompactState) -> str:
        """Fill an empty compact state from a list (see :meth:`_listed_compact`), with the
        values at :attr:`columns` read meanwhile; returns the list's version."""
        rv, found, columns = await self._listed_compact(self.columns)
        state.fill(found, columns)
        self.resource_version = rv or None
        return rv

    async def _initial_state(self) -> AsyncIterator[WatchEvent]:
        state = self.state
        if type(state) is CompactState and not self.streaming_list:
            # filled with the collector held off, then each object decoded as it is read
            rv = await self._list_compact(state)
            for _key, data in state.raw_items():
                item = deepjson.loads(data)
                yield WatchEvent("ADDED", item, resource_version_of(item) or rv, data)
            return
        if self.streaming_list:
            try:
                async for event in self._streaming_list():
                    yield event
                return
            except (errors.BadRequest, errors.Invalid, errors.Forbidden) as exc:
                if isinstance(exc, errors.Forbidden):
                    raise
                log.info(
                    "server refused a streaming list (%s); falling back to list+watch", exc.reason
                )
        listed = await self._list_once()
        rv = str((listed.get("metadata") or {}).get("resourceVersion") or "")
        for raw in listed.get("items") or []:
            item = self._with_kind(raw)
            self.state[object_key(item)] = item
            yield WatchEvent("ADDED", item, resource_version_of(item) or rv)
        self.resource_version = rv or None

    async def _streaming_list(self) -> AsyncIterator[WatchEvent]:
        """Initial state from ``sendInitialEvents``; held until the end marker (watch rule 16)."""
        for _attempt in range(3):
            held: dict[str, JSON] = {}
            options = replace(
                self._watch_options(
                    send_initial_events=True, resource_version_match="NotOlderThan"
                ),
                resource_version="",
            )
            async with self.adapter.watch_stream(
                self.resource, namespace=self.namespace, options=options, credential=self.credential
            ) as stream:
                async for raw in stream:
                    kind, obj = _type_and_object(raw)
                    if not isinstance(obj, dict):
                        continue
                    if kind == "BOOKMARK":
                        annotations = (obj.get("metadata") or {}).get("annotations") or {}
                        if annotations.get(INITIAL_EVENTS_END) == "true":
                            rv = resource_version_of(obj) or ""
                            for item in held.values():
                                data = self._store(object_key(item), item)
                                yield WatchEvent(
                                    "ADDED", item, resource_version_of(item) or rv, data
                                )
                            self.resource_version = rv or None
                            return
                        continue
                    if kind in _CHANGE_TYPES:
                        if kind == "DELETED":
                            held.pop(object_key(obj), None)
                        else:
                            held[object_key(obj)] = obj if self.keep is None else self.keep(obj)
            log.info(
                "streaming list of %s ended before its end marker; restarting", self.resource.plural
            )
        raise errors.BadRequest("the server never completed a streaming list")

    async def _one_stream(self) -> AsyncIterator[WatchEvent]:
        async with self.adapter.watch_stream(
            self.resource,
            namespace=self.namespace,
            options=self._watch_options(),
            credential=self.credential,
        ) as stream:
            async for raw in stream:
                kind, obj = _type_and_object(raw)
                if kind not in _CHANGE_TYPES and kind != "BOOKMARK":
                    continue  # unknown types are skipped (watch rule 9)
                rv = resource_version_of(obj)
                if rv is None or not isinstance(obj, dict):
                    raise _OutOfSync(f"{kind} event without a resourceVersion")
                if self.keep is not None and kind != "BOOKMARK":
                    obj = self.keep(obj)
                if kind == "BOOKMARK":
                    self.resource_version = rv
                    if self.bookmarks:
                        yield WatchEvent("BOOKMARK", obj, rv)
                    continue
                if self.state_floor is not None:
                    at = decimal_version(rv)
                    if at is not None and at <= self.state_floor:
                        self.resource_version = rv
                        yield WatchEvent(kind, obj, rv)
                        continue
                    self.state_floor = None
                key = object_key(obj)
                data = None
                if kind == "DELETED":
                    if key in self.state:
                        del self.state[key]
                else:
                    data = self._store(key, obj)
                self.resource_version = rv
                yield WatchEvent(kind, obj, rv, data)

    async def _relist(self) -> AsyncIterator[WatchEvent]:
        """Relist at the latest RV and reconcile the consumer's view (watch rule 11-12).

        A watch that expired while still catching up (see :meth:`catch_up_from`) has
        consumers who resumed from before ``state`` and do not hold it: the frame then
        carries every object (watch rule 23's answer to a version that is too old), not
        only the difference.
        """
        self.relists += 1
        catching_up = self.state_floor is not None
        self.state_floor = None
        if type(self.state) is CompactState:
            async for event in self._relist_compact(self.state, catching_up):
                yield event
            return
        listed = await self.adapter.list_all(
            self.resource,
            namespace=self.namespace,
            options=replace(self.selectors, limit=self.page_size),
            credential=self.credential,
            keep=self.keep,
        )
        rv = str((listed.get("metadata") or {}).get("resourceVersion") or "")
        fresh: dict[str, JSON] = {}
        for raw in listed.get("items") or []:
            item = self._with_kind(raw)
            fresh[object_key(item)] = item
        yield WatchEvent("RESYNC", marker(self.resource, rv, {RESYNC_ANNOTATION: "begin"}), rv)
        for key, old in list(self.state.items()):
            new = fresh.get(key)
            if new is None or _uid(new) != _uid(old):
                del self.state[key]
                yield WatchEvent("DELETED", old, rv)
        for key, new in fresh.items():
            held = self.state.get(key)
            if held is None:
                self.state[key] = new
                yield WatchEvent("ADDED", new, resource_version_of(new) or rv)
            elif resource_version_of(held) != resource_version_of(new):
                self.state[key] = new
                yield WatchEvent("MODIFIED", new, resource_version_of(new) or rv)
            elif catching_up:
                yield WatchEvent("ADDED", new, resource_version_of(new) or rv)
        self.resource_version = rv or None
        yield WatchEvent("RESYNC", marker(self.resource, rv, {RESYNC_ANNOTATION: "end"}), rv)

    async def _relist_compact(
        self, state: CompactState, catching_up: bool
    ) -> AsyncIterator[WatchEvent]:
        """:meth:`_relist` for a compact state: the same events, the list made compact
        first (:meth:`_listed_compact`), each object decoded only where its JSON differs
        from the one held, a yield to the event loop every :data:`COMPACT_STEP` objects."""
        rv, fresh, _ = await self._listed_compact()
        loads = deepjson.loads
        yield WatchEvent("RESYNC", marker(self.resource, rv, {RESYNC_ANNOTATION: "begin"}), rv)
        for n, key in enumerate(list(state)):
            if n % COMPACT_STEP == COMPACT_STEP - 1:
                await asyncio.sleep(0)
            new = fresh.get(key)
            held = state.raw(key)
            if held is None or (new is not None and new == held):
                continue  # the same JSON: the same object
            old = loads(held)
            if new is None or _uid(loads(new)) != _uid(old):
                del state[key]
                yield WatchEvent("DELETED", old, rv)
        for n, (key, data) in enumerate(fresh.items()):
            if n % COMPACT_STEP == COMPACT_STEP - 1:
                await asyncio.sleep(0)
            held = state.raw(key)
            if held is None:
                state.put_raw(key, data)
                obj = loads(data)
                yield WatchEvent("ADDED", obj, resource_version_of(obj) or rv, data)
                continue
            if held != data:
                obj = loads(data)
                if resource_version_of(loads(held)) != resource_version_of(obj):
                    state.put_raw(key, data)
                    yield WatchEvent("MODIFIED", obj, resource_version_of(obj) or rv, data)
                    continue
            if catching_up:
                obj = loads(data)
                yield WatchEvent("ADDED", obj, resource_version_of(obj) or rv, data)
        self.resource_version = rv or None
        yield WatchEvent("RESYNC", marker(self.resource, rv, {RESYNC_ANNOTATION: "end"}), rv)

    def _with_kind(self, item: JSON) -> JSON:
        # List items come without kind/apiVersion; watch objects carry them.  Consumers
        # get the same shape either way.
        if "kind" in item and "apiVersion" in item:
            return item
        return {"apiVersion": self.resource.api_version, "kind": self.resource.kind, **item}


def decimal_version(rv: str | None) -> int | None:
    """A resourceVersion as a number when it is one (etcd's are), else ``None``.

    Versions are opaque: order is compared only where both sides are decimal.
    """
    if rv and rv.isascii() and rv.isdigit():
        return int(rv)
    return None


def _type_and_object(raw: JSON) -> tuple[Any, Any]:
    """A line of an upstream watch as ``(type, object)``; an ``ERROR`` line raises its Status."""
    if raw.get("type") == "ERROR":
        raise status_of(raw)
    return raw.get("type"), raw.get("object")


def _uid(obj: JSON) -> Any:
    return (obj.get("metadata") or {}).get("uid")
