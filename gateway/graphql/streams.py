"""Subscription sources: watch events from the core's watch hub, and pod log lines.

These are the source streams of subscriptions; :mod:`gateway.graphql.fanout` runs one per
shared execution and executes the document once per item they yield.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Optional

import strawberry

from gateway.core import errors
from gateway.core.hub import WatchStart, WatchTarget
from gateway.core.logfollow import LogFollower
from gateway.core.options import ListOptions
from gateway.core.registry import Resource
from gateway.graphql.arguments import log_options
from gateway.graphql.context import Context
from gateway.graphql.scalars import Time


@dataclass(frozen=True, slots=True)
class EventRoot:
    """The root value of one watch event.

    Attributes:
        type: ADDED, MODIFIED, DELETED, BOOKMARK or RESYNC.
        object: the object as the upstream sent it (a marker for BOOKMARK / RESYNC).
        resource_version: the event's resourceVersion.
        resume: the resume point once this event is delivered (the watcher's), or
            ``None`` while an initial snapshot or a resync is still incomplete.
        seq: its position in the hub's upstream watch.
    """

    type: str
    object: dict[str, Any]
    resource_version: str
    resume: str | None
    seq: int = 0


@strawberry.type(description="One line of a container log.")
class LogLine:
    text: str = strawberry.field(description="The line, without its newline (UTF-8, lossy).")
    timestamp: Optional[Time] = strawberry.field(  # noqa: UP045
        default=None, description="The kubelet's timestamp, when `timestamps` was asked for."
    )


def _field_selector(args: Mapping[str, Any]) -> str | None:
    terms = [args["fieldSelector"]] if args.get("fieldSelector") else []
    if args.get("name"):
        terms.append(f"metadata.name={args['name']}")
    return ",".join(terms) or None


def watch_start(args: Mapping[str, Any]) -> WatchStart:
    """The core's start policy for a subscription's arguments (validated as the apiserver
    validates a watch): ``resourceVersion`` resumes after that version; without it the
    subscription starts with ADDED for every current object unless ``sendInitialEvents``
    is false; ``sendInitialEvents: true`` ends the initial events with a BOOKMARK
    annotated ``k8s.io/initial-events-end``."""
    initial = args.get("sendInitialEvents")
    return WatchStart.from_options(
        ListOptions(
            resource_version=args.get("resourceVersion") or None,
            send_initial_events=initial,
            resource_version_match="NotOlderThan" if initial is not None else None,
            allow_watch_bookmarks=bool(args.get("allowBookmarks")) or None,
        )
    )


async def watch_events(
    ctx: Context, resource: Resource, namespace: str | None, args: Mapping[str, Any]
) -> AsyncIterator[EventRoot]:
    """The live events of a shared watch, for one shared execution.

    The source joins the core hub's upstream watch with ``tail`` (every event from now);
    each subscriber of the execution takes its own start (snapshot, resume...) from the
    hub through ``ctx.watch`` (see :mod:`gateway.graphql.fanout`).
    """
    start = watch_start(args)
    if ctx.watches is None:
        raise errors.Unavailable("subscriptions are not served here")
    target = WatchTarget(resource, namespace, args.get("labelSelector"), _field_selector(args))
    sub = await ctx.watches.subscribe(
        target,
        WatchStart("tail"),
        ctx.credential,
        catch_up=ctx.catch_up or (start.resource_version if start.mode == "resume" else None),
    )
    try:
        ctx.changed_only = bool(args.get("changedFieldsOnly"))
        ctx.watch = (sub, start)
        if ctx.on_watch is not None:
            ctx.on_watch()
        async for event in sub:
            yield EventRoot(
                event.type, event.object, event.resource_version, event.resume, event.seq
            )
    finally:
        sub.close()


async def follow_log(
    ctx: Context, namespace: str, name: str, args: Mapping[str, Any]
) -> AsyncIterator[LogLine]:
    """The lines of a followed pod log: resumed after upstream breaks without loss or
    duplicates; ends when the container stops (see :mod:`gateway.core.logfollow`)."""
    options = log_options(args)
    follower = LogFollower(
        ctx.adapter, namespace=namespace, name=name, options=options, credential=ctx.credential
    )
    async with aclosing(follower.lines()) as lines:
        async for line in lines:
            text = line.data.decode("utf-8", "replace")
            if text.endswith("\r"):
                text = text[:-1]
            stamp = None
            if options.timestamps and line.stamp is not None:
                stamp = Time(line.stamp.decode("ascii"))
            yield LogLine(text=text, timestamp=stamp)
