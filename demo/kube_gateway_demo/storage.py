"""The versioned object store: one global resourceVersion and a bounded history per
resource, from which past states (consistent pagination) and past changes (watch resumption)
are answered, as etcd does.  Every commit is handed at once to the resource's subscribers
(the watches of :mod:`kube_gateway_demo.watches`) and hooks (the demo's controllers).

Objects are stored *bare* (without ``kind``/``apiVersion``, as list items are served) and are
never mutated once stored: every write stores a new dict, so a list, a snapshot or a pending
watch event can hold references without copying.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from gateway.core.model.registry import Resource
from kube_gateway_demo.catalog import SERVED_AS_CUSTOM, CustomResource
from kube_gateway_demo.status import gone, not_found

Obj = dict[str, Any]
ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]


def object_key(namespace: str, name: str) -> str:
    """The storage key (etcd order): ``namespace/name``, or ``name`` when cluster-scoped."""
    return f"{namespace}/{name}" if namespace else name


def with_rv(obj: Obj, rv: int) -> Obj:
    """A shallow copy of ``obj`` whose ``metadata.resourceVersion`` is ``rv``."""
    out = dict(obj)
    out["metadata"] = {**obj.get("metadata", {}), "resourceVersion": str(rv)}
    return out


def typed(res: Resource, obj: Obj) -> Obj:
    """``obj`` with ``kind`` and ``apiVersion`` first, as single objects are served (custom
    resources, being maps, keep their keys sorted)."""
    if res.key in SERVED_AS_CUSTOM or isinstance(res, CustomResource):
        out = {**obj, "kind": res.kind, "apiVersion": res.api_version}
        return {k: out[k] for k in sorted(out)}
    return {"kind": res.kind, "apiVersion": res.api_version, **obj}


@dataclass(slots=True, eq=False)
class Change:
    """One committed write, as kept in the history and fanned out to watchers."""

    type: ChangeType
    key: str
    obj: Obj  # the state after the change; for DELETED the last state, with the delete's RV
    prev: Obj | None  # the stored state before the change (None for ADDED)
    rv: int
    res: Resource
    _line: bytes | None = None

    def line(self) -> bytes:
        """The serialized watch line, shared by every watcher that sees this change as-is."""
        if self._line is None:
            self._line = encode_event(self.type, typed(self.res, self.obj))
        return self._line


def encode_event(kind: str, obj: Obj) -> bytes:
    """One watch event line: ``{"type":...,"object":...}\\n``."""
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


class Subscriber(Protocol):
    """What a commit is offered to: a watch (:class:`kube_gateway_demo.watches.DemoWatcher`)."""

    def offer(self, change: Change) -> None:
        """Take a committed change (synchronously, in commit order)."""

    def close(self) -> None:
        """The store is closing: end."""


#: A controller's reaction to a committed change of one resource (see :meth:`Storage.hook`).
Hook = Callable[[Change], None]


@dataclass(slots=True)
class Collection:
    """The objects, history and watchers of one resource."""

    res: Resource
    objects: dict[str, Obj] = field(default_factory=dict)
    history: deque[Change] = field(default_factory=deque)
    floor: int = 0  # states (and watches) older than this resourceVersion are compacted
    watchers: set[Subscriber] = field(default_factory=set)
    hooks: list[Hook] = field(default_factory=list)
    _sorted: list[str] | None = None

    def sorted_keys(self) -> list[str]:
        """Keys in storage order (cached until a key is added or removed)."""
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted


class Storage:
    """All collections, the resourceVersion counter and the watch registry."""

    def __init__(self, resources: Iterable[Resource], *, history: int = 1000) -> None:
        if history < 1:
            raise ValueError("history must be at least 1")
        self.history_limit = history
        self.rv = 0
        self._collections = {r.key: Collection(r) for r in resources}
        self._advanced = asyncio.Event()
        self.closed = False

    def collection(self, res: Resource) -> Collection:
        """The collection of ``res`` (404 when it is no longer served: its CRD is gone)."""
        col = self._collections.get(res.key)
        if col is None:
            raise not_found(res.plural, res.group, "")
        return col

    def add_collection(self, res: Resource) -> None:
        """Serve a new resource (a CRD was created): an empty collection, unless it exists."""
        col = self._collections.get(res.key)
        if col is None:
            self._collections[res.key] = Collection(res)
        else:
            col.res = res

    def end_watches(self, key: str, *, after: float = 0.0) -> None:
        """End every watch of a resource now open (its definition changed or went away),
        ``after`` seconds from now when an event loop runs (the apiserver tears a CRD's old
        storage down about a second after the change; watches opened since are kept)."""
        col = self._collections.get(key)
        self._end_later(tuple(col.watchers if col is not None else ()), after)

    def drop_collection(self, key: str, *, after: float = 0.0) -> None:
        """Stop serving a resource (its CRD is gone): its objects go at once, its watches
        end ``after`` seconds from now (see :meth:`end_watches`)."""
        col = self._collections.pop(key, None)
        self._end_later(tuple(col.watchers if col is not None else ()), after)

    @staticmethod
    def _end_later(watchers: tuple[Subscriber, ...], after: float) -> None:
        def end() -> None:
            for w in watchers:
                w.close()

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            end()
            return
        if after > 0:
            loop.call_later(after, end)
        else:
            end()

    def collections(self) -> Iterator[Collection]:
        """Every collection."""
        return iter(self._collections.values())

    def get(self, res: Resource, key: str) -> Obj | None:
        """The current object at ``key``."""
        return self.collection(res).objects.get(key)

    def commit(self, res: Resource, key: str, kind: ChangeType, obj: Obj | None) -> Change:
        """Store a write under a fresh resourceVersion and fan it out.

        ``obj`` is the new state for ADDED/MODIFIED (owned by the storage from now on) and
        ignored for DELETED.  Returns the committed change (its ``obj`` carries the new RV).
        """
        col = self.collection(res)
        prev = col.objects.get(key)
        self.rv += 1
        rv = self.rv
        if kind == "DELETED":
            if prev is None:
                raise KeyError(key)
            final = with_rv(prev, rv)
            del col.objects[key]
            col._sorted = None
        else:
            if obj is None:
                raise ValueError("a new state is required")
            obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
            final = obj
            if prev is None:
                col._sorted = None
            col.objects[key] = obj
        change = Change(kind, key, final, prev, rv, res)
        col.history.append(change)
        while len(col.history) > self.history_limit:
            dropped = col.history.popleft()
            col.floor = max(col.floor, dropped.rv)
        for w in tuple(col.watchers):
            w.offer(change)
        for hook in col.hooks:
            hook(change)
        self._advanced.set()
        self._advanced = asyncio.Event()
        return change

    def state_at(self, res: Resource, rv: int) -> dict[str, Obj]:
        """The objects of ``res`` as they were at ``rv`` (the live dict when ``rv`` is current).

        Raises:
            DemoApiError: 410 when ``rv`` is older than the retained history.
        """
        col = self.collection(res)
        if rv >= self.rv:
            return col.objects
        if rv < col.floor:
            raise gone("The resourceVersion for the provided list is too old.")
        state = dict(col.objects)
        for change in reversed(col.history):
            if change.rv <= rv:
                break
            if change.prev is None:
                state.pop(change.key, None)
            else:
                state[change.key] = change.prev
        return state

    def changes_since(self, res: Resource, rv: int) -> list[Change]:
        """Every change of ``res`` after ``rv``.

        Raises:
            DemoApiError: 410 ``too old resource version`` when history no longer reaches ``rv``.
        """
        col = self.collection(res)
        if rv < col.floor:
            raise gone(f"too old resource version: {rv} ({col.floor})")
        out: list[Change] = []
        for change in reversed(col.history):
            if change.rv <= rv:
                break
            out.append(change)
        out.reverse()
        return out

    def compact(self, rv: int | None = None) -> int:
        """Forget history up to ``rv`` (default: everything), like an etcd compaction."""
        target = self.rv if rv is None else min(rv, self.rv)
        for col in self._collections.values():
            while col.history and col.history[0].rv <= target:
                col.history.popleft()
            col.floor = max(col.floor, target)
        return target

    def add_watcher(self, res: Resource, watcher: Subscriber) -> None:
        """Register a watcher: from now on every commit to ``res`` is offered to it."""
        self.collection(res).watchers.add(watcher)

    def remove_watcher(self, res: Resource, watcher: Subscriber) -> None:
        """Unregister a watcher."""
        col = self._collections.get(res.key)
        if col is not None:
            col.watchers.discard(watcher)

    def hook(self, res: Resource, hook: Hook) -> None:
        """Call ``hook`` with every change committed to ``res`` (after its watchers saw it):
        what a controller of the demo cluster does about it."""
        self._collections[res.key].hooks.append(hook)

    async def wait_for_rv(self, rv: int, timeout: float) -> bool:
        """Wait until the store reaches ``rv``; False on timeout or close."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.rv < rv and not self.closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._advanced.wait(), remaining)
            except TimeoutError:
                return False
        return self.rv >= rv

    def close(self) -> None:
        """End every watch (server shutdown)."""
        self.closed = True
        for col in self._collections.values():
            for w in tuple(col.watchers):
                w.close()
        self._advanced.set()
