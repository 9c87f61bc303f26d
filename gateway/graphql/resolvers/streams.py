"""The sources of subscriptions: the core's streaming operations, opened for one subscriber.

A subscription field's resolver turns its arguments into the core's
:class:`~gateway.core.calls.operations.Call` and opens the stream through the core's one entry
point (:func:`~gateway.core.calls.streaming.open_stream`), as a query field performs its operation:
a watch is the subscriber's own subscription of the watch hub (its own start, resume and
watch rule 31), a followed log the lines of a :class:`~gateway.core.calls.streaming.ReadAhead`.  The
resolver returns that stream itself; :mod:`gateway.graphql.engine.subscriptions` reads it and
executes the
document once per event for every subscriber with the same document, variables and
identity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import strawberry

from gateway.core import (
    Call,
    ListOptions,
    LogStream,
    Operation,
    RawLine,
    ReadAhead,
    WatchSubscription,
    open_stream,
)
from gateway.graphql.resolvers.arguments import log_options
from gateway.graphql.resolvers.context import Context
from gateway.graphql.resolvers.scalars import Time


def _text(root: strawberry.Parent[RawLine]) -> str:
    text = root.data.decode("utf-8", "replace")
    return text[:-1] if text.endswith("\r") else text


def _timestamp(root: strawberry.Parent[RawLine]) -> Optional[Time]:  # noqa: UP045
    stamp = root.timestamp
    return Time(stamp.decode("ascii")) if stamp is not None else None


@strawberry.type(description="One line of a container log.")
class LogLine:
    """Rendered from the core's :class:`~gateway.core.watch.logfollow.RawLine` (the root)."""

    text: str = strawberry.field(
        resolver=_text, description="The line, without its newline (UTF-8, lossy)."
    )
    timestamp: Optional[Time] = strawberry.field(  # noqa: UP045
        resolver=_timestamp, description="The kubelet's timestamp, when `timestamps` was asked for."
    )


def _field_selector(args: Mapping[str, Any]) -> str | None:
    terms = [args["fieldSelector"]] if args.get("fieldSelector") else []
    if args.get("name"):
        terms.append(f"metadata.name={args['name']}")
    return ",".join(terms) or None


def watch_call(args: Mapping[str, Any], resume_from: str | None = None) -> Call:
    """The core call of a watch subscription's arguments: ``resourceVersion`` resumes after
    that version; without it the subscription starts with ADDED for every current object
    unless ``sendInitialEvents`` is false; ``sendInitialEvents: true`` ends the initial
    events with a BOOKMARK annotated ``k8s.io/initial-events-end``.  ``resume_from`` (an SSE
    ``Last-Event-ID``) resumes after that version whatever the arguments ask."""
    initial = args.get("sendInitialEvents")
    rv = args.get("resourceVersion") or None
    if resume_from is not None:
        rv, initial = resume_from, None
    return Call(
        namespace=args.get("namespace"),
        list=ListOptions(
            label_selector=args.get("labelSelector"),
            field_selector=_field_selector(args),
            resource_version=rv,
            send_initial_events=initial,
            resource_version_match="NotOlderThan" if initial is not None else None,
            allow_watch_bookmarks=bool(args.get("allowBookmarks")) or None,
        ),
        changed_only=bool(args.get("changedFieldsOnly")),
    )


async def watch(ctx: Context, args: Mapping[str, Any], *, op: Operation) -> WatchSubscription:
    """A watch subscription's source: the subscriber's own subscription of the watch hub."""
    stream = await open_stream(
        ctx.adapter,
        ctx.watches,
        op,
        watch_call(args, ctx.resume_from),
        credential=ctx.credential,
    )
    assert isinstance(stream, WatchSubscription)
    return stream


async def follow_log(ctx: Context, args: Mapping[str, Any], *, op: Operation) -> LogStream:
    """A followed log's lines: resumed after upstream breaks without loss or duplicates;
    ends when the container stops (see :mod:`gateway.core.watch.logfollow`)."""
    call = Call(
        namespace=args.get("namespace"), name=args["name"], log=log_options(args, follow=True)
    )
    stream = await open_stream(ctx.adapter, ctx.watches, op, call, credential=ctx.credential)
    assert isinstance(stream, ReadAhead)
    return stream
