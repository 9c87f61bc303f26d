"""Subscription sources: watch events from the core :class:`Watcher`, and pod log lines.

These are the source streams of subscriptions; :mod:`gateway.graphql.fanout` runs one per
shared execution and executes the document once per item they yield.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Optional, cast

import strawberry

from gateway.core.logfollow import LogFollower
from gateway.core.options import ListOptions
from gateway.core.registry import Resource
from gateway.core.watch import Watcher
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
    """

    type: str
    object: dict[str, Any]
    resource_version: str
    resume: str | None


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


async def watch_events(
    ctx: Context, resource: Resource, namespace: str | None, args: Mapping[str, Any]
) -> AsyncIterator[EventRoot]:
    """Watch events for one subscription; survives upstream closes and 410s (core Watcher).

    ``resourceVersion`` resumes after that version; without it the subscription starts with
    ADDED for every current object unless ``sendInitialEvents`` is false.
    """
    rv = args.get("resourceVersion") or None
    initial = args.get("sendInitialEvents")
    if initial is None:
        initial = rv is None
    ctx.feed_mode = "snapshot" if initial else ("live" if rv is None else "replay")
    watcher = Watcher(
        ctx.adapter,
        resource,
        namespace=namespace,
        options=ListOptions(
            label_selector=args.get("labelSelector"),
            field_selector=_field_selector(args),
            resource_version=None if initial and rv != "0" else rv,
        ),
        credential=ctx.credential,
        bookmarks=bool(args.get("allowBookmarks")),
    )
    # Without a resume point and without initial events, the initial list only sets the
    # starting point: its synthetic ADDEDs are not delivered.
    skip_initial = not initial and rv is None
    async with aclosing(cast(AsyncGenerator[Any, None], watcher.events())) as events:
        async for event in events:
            if skip_initial and watcher.resource_version is None:
                continue
            yield EventRoot(
                event.type, event.object, event.resource_version, watcher.resource_version
            )


async def follow_log(
    ctx: Context, namespace: str, name: str, args: Mapping[str, Any]
) -> AsyncIterator[LogLine]:
    """The lines of a followed pod log: resumed after upstream breaks without loss or
    duplicates; ends when the container stops (see :mod:`gateway.graphql.logfollow`)."""
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
