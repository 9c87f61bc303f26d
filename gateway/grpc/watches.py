"""The event stream behind a ``Watch`` call: Kubernetes watch semantics over the core Watcher.

:class:`gateway.core.watch.Watcher` already resumes after closes, relists on 410 (``RESYNC``)
and forwards bookmarks on request.  This module only decides where it starts:

* ``resource_version`` empty or ``"0"``, ``send_initial_events`` unset: the Watcher's own
  list-then-watch (``ADDED`` for the current state, then changes);
* ``send_initial_events=true``: the same, then a ``BOOKMARK`` annotated
  ``k8s.io/initial-events-end: "true"`` once the initial state is complete (streaming-list
  semantics; the marker is sent even without ``allow_watch_bookmarks`` since it is what the
  caller asked for);
* ``send_initial_events=false``: changes only, from ``resource_version`` (or from now);
* any other ``resource_version``: changes after it (a 410 there becomes a ``RESYNC``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace
from typing import cast

from gateway.core.adapter import Credential, KubeAdapter
from gateway.core.options import ListOptions
from gateway.core.registry import Resource
from gateway.core.watch import (
    INITIAL_EVENTS_END,
    Watcher,
    WatchEvent,
    marker,
    object_key,
    resource_version_of,
)

__all__ = ["watch_events"]


def _with_kind(resource: Resource, item: dict[str, object]) -> dict[str, object]:
    if "kind" in item and "apiVersion" in item:
        return item
    return {"apiVersion": resource.api_version, "kind": resource.kind, **item}


async def watch_events(
    adapter: KubeAdapter,
    resource: Resource,
    *,
    namespace: str | None,
    options: ListOptions,
    credential: Credential,
) -> AsyncGenerator[WatchEvent, None]:
    """The events a Watch call sends, endless until the caller goes away.

    Args:
        adapter: the shared upstream adapter.
        resource: what to watch.
        namespace: one namespace or ``None`` for all.
        options: the (validated) watch options of the request.
        credential: the caller's credential, used for every upstream call.
    """
    selectors = ListOptions(
        label_selector=options.label_selector, field_selector=options.field_selector
    )
    bookmarks = bool(options.allow_watch_bookmarks)
    rv = options.resource_version or ""
    start = rv
    seeded: dict[str, dict[str, object]] = {}
    if options.send_initial_events is not None:
        if options.send_initial_events:
            listed = await adapter.list_all(
                resource, namespace=namespace, options=selectors, credential=credential
            )
            start = str((listed.get("metadata") or {}).get("resourceVersion") or "")
            for raw in listed.get("items") or []:
                item = _with_kind(resource, raw)
                seeded[object_key(item)] = item
                yield WatchEvent("ADDED", item, resource_version_of(item) or start)
            yield WatchEvent(
                "BOOKMARK", marker(resource, start, {INITIAL_EVENTS_END: "true"}), start
            )
        elif rv in ("", "0"):
            # "From now, without the current state": the current resourceVersion of a list.
            now = await adapter.list(
                resource,
                namespace=namespace,
                options=replace(selectors, limit=1),
                credential=credential,
            )
            start = str((now.get("metadata") or {}).get("resourceVersion") or "")
    watcher = Watcher(
        adapter,
        resource,
        namespace=namespace,
        options=replace(selectors, resource_version=start or None),
        credential=credential,
        bookmarks=bookmarks,
    )
    watcher.state.update(seeded)  # a relist after a 410 diffs against what was sent
    # Watcher.events() is an async generator (annotated as an iterator): close it promptly.
    stream = cast(AsyncGenerator[WatchEvent, None], watcher.events())
    async with aclosing(stream) as events:
        async for event in events:
            yield event
