"""Watches, modelled on the apiserver's watch cache (the "cacher"): each watch is a queue
that every commit to its resource feeds at once, filtered by the watch's selectors; a watch
starts from its initial events (the current objects), or replays the history after a
resourceVersion, and may be sent BOOKMARKs.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from gateway.core.model.registry import Resource
from kube_gateway_demo.cluster import Cluster
from kube_gateway_demo.options import ListQuery
from kube_gateway_demo.reads import read_rv
from kube_gateway_demo.storage import Change, Obj, encode_event, typed, with_rv

INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"


@dataclass(slots=True)
class Pending:
    """An event queued for one watcher (a change, a synthetic ADDED, a bookmark or an error)."""

    type: str
    obj: Obj
    rv: int
    change: Change | None = None

    def line(self, res: Resource) -> bytes:
        if self.change is not None and self.change.type == self.type and self.change.res == res:
            return self.change.line()
        if self.type in ("BOOKMARK", "ERROR"):
            return encode_event(self.type, self.obj)
        return encode_event(self.type, typed(res, self.obj))


class DemoWatcher:
    """One watch's queue, fed synchronously by every commit to its resource.

    Filtering follows the cacher: an object that stops matching yields DELETED (previous
    content, new resourceVersion) and one that starts matching yields ADDED.
    """

    def __init__(
        self,
        res: Resource,
        matches: Callable[[Obj], bool],
        start_rv: int,
        *,
        capacity: int = 100_000,
    ) -> None:
        self.res = res
        self.matches = matches
        self.start_rv = start_rv
        self.capacity = capacity
        self.pending: deque[Pending] = deque()
        self.wake = asyncio.Event()
        self.closed = False
        self.overflowed = False

    def push(self, item: Pending) -> None:
        """Queue an item (used for synthetic ADDEDs, bookmarks and errors)."""
        self.pending.append(item)
        self.wake.set()

    def offer(self, change: Change) -> None:
        """Translate a committed change for this watcher's selectors and queue it."""
        if self.closed or change.rv <= self.start_rv:
            return
        now = self.matches(change.obj) if change.type != "DELETED" else False
        before = change.prev is not None and self.matches(change.prev)
        if change.type == "ADDED":
            if now:
                self._queue(Pending("ADDED", change.obj, change.rv, change))
        elif change.type == "MODIFIED":
            if now and before:
                self._queue(Pending("MODIFIED", change.obj, change.rv, change))
            elif now:
                self._queue(Pending("ADDED", change.obj, change.rv))
            elif before and change.prev is not None:
                self._queue(Pending("DELETED", with_rv(change.prev, change.rv), change.rv))
        elif before:
            self._queue(Pending("DELETED", change.obj, change.rv, change))

    def _queue(self, item: Pending) -> None:
        if len(self.pending) >= self.capacity:
            # The cacher terminates a watcher whose buffer is full; the client resumes.
            self.overflowed = True
            self.close()
            return
        self.pending.append(item)
        self.wake.set()

    def close(self) -> None:
        """End the watch: the stream drains what is queued and finishes."""
        self.closed = True
        self.wake.set()


class Watches:
    """Opening watches of the cluster's resources (the streams are :mod:`.streams`')."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def matcher(self, res: Resource, query: ListQuery) -> Callable[[Obj], bool]:
        """A predicate for objects ``query`` selects."""
        fields_of = self.cluster.strategy(res).fields
        ns = query.namespace if res.namespaced else None
        labels, fields = query.labels, query.fields

        def matches(obj: Obj) -> bool:
            meta = obj.get("metadata", {})
            if ns and meta.get("namespace") != ns:
                return False
            if not labels.empty and not labels.matches(meta.get("labels")):
                return False
            return fields.empty or fields.matches(fields_of(obj))

        return matches

    def open(
        self,
        res: Resource,
        query: ListQuery,
        *,
        resource_version: str = "",
        send_initial_events: bool | None = None,
        allow_bookmarks: bool = False,
    ) -> DemoWatcher:
        """Start a watch; the returned watcher already holds its initial events.

        Raises:
            DemoApiError: 410 when ``resource_version`` is older than the history (the HTTP layer
                turns this into an ERROR event, as the apiserver does).
        """
        storage = self.cluster.storage
        matches = self.matcher(res, query)
        col = storage.collection(res)
        initial = send_initial_events is True or (
            send_initial_events is None and resource_version in ("", "0")
        )
        if initial or resource_version in ("", "0"):
            start = storage.rv
            watcher = DemoWatcher(res, matches, start)
            if initial:
                for key in col.sorted_keys():
                    obj = col.objects[key]
                    if matches(obj):
                        watcher.pending.append(
                            Pending("ADDED", obj, int(obj["metadata"]["resourceVersion"]))
                        )
                if send_initial_events and allow_bookmarks:
                    watcher.pending.append(self.bookmark(res, start, initial_end=True))
        else:
            wanted = read_rv(resource_version, watch=True) or 0
            changes = storage.changes_since(res, wanted)
            watcher = DemoWatcher(res, matches, wanted)
            for change in changes:
                watcher.offer(change)
        storage.add_watcher(res, watcher)
        return watcher

    def bookmark(self, res: Resource, rv: int, *, initial_end: bool = False) -> Pending:
        """A BOOKMARK event: only kind, apiVersion, resourceVersion (and annotations)."""
        meta: Obj = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        strat = self.cluster.strategy(res)
        if strat.custom_resource:
            sorted_meta = {k: meta[k] for k in sorted(meta)}
            obj = {"apiVersion": res.api_version, "kind": res.kind, "metadata": sorted_meta}
        else:
            obj = {
                "kind": res.kind,
                "apiVersion": res.api_version,
                "metadata": meta,
                **strat.empty(),
            }
        return Pending("BOOKMARK", obj, rv)
