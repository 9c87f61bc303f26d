"""Changed fields only: withhold a MODIFIED event when what a subscriber sees of the object
did not change (watch rule 31), for both front ends.

A front end digests what it sends of an object (GraphQL: the executed selection; gRPC: the
object's message under ``read_mask``); one 16-byte BLAKE2b digest is kept per object (key:
``metadata.uid``, else namespace/name), never the payload, and dropped on DELETED.

The watch hub builds a subscriber's :class:`StreamChanges` at the moment it joins (see
:meth:`gateway.core.watch.hub.Upstream.join`), because only then is it known what the subscriber
holds of each object: nothing yet (its initial events will say), the hub's state (it starts
from now) or the hub's history up to the version it resumes from.  The front end then asks
:meth:`StreamChanges.admit` for each event it takes, with its own digests.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Protocol

from gateway.core.model.values import JSON
from gateway.core.watch.watcher import decimal_version
from gateway.core.watch.watcher import object_key as name_key

Digest = bytes
#: A digest, computed now or by an execution still to run (GraphQL's relations load).
Digested = Digest | Awaitable[Digest]

#: The event types that are compared; the others (BOOKMARK, RESYNC) always go.
CHANGES = frozenset(("ADDED", "MODIFIED", "DELETED"))


class Event(Protocol):
    """What the comparison reads of a watch event."""

    @property
    def type(self) -> str: ...
    @property
    def object(self) -> JSON: ...
    @property
    def resource_version(self) -> str: ...


def digest(data: bytes) -> Digest:
    """The 16-byte BLAKE2b digest of what a subscriber receives of an object."""
    return hashlib.blake2b(data, digest_size=16).digest()


def object_key(obj: JSON) -> str:
    """The identity of a watched object: its uid, else ``namespace/name``."""
    meta = obj.get("metadata") or {}
    uid = meta.get("uid")
    return f"uid:{uid}" if uid else name_key(obj)


def history_before(history: Iterable[Event], wanted: str) -> dict[str, JSON | None]:
    """What a subscriber resuming from version ``wanted`` holds of each object the hub's
    history mentions at or before it (in upstream order; decimal versions compared, opaque
    ones matched exactly): its last state, or ``None`` when it was deleted."""
    events = list(history)
    at = decimal_version(wanted)
    end = 0
    for i, event in enumerate(events):
        if event.resource_version == wanted:
            end = i + 1
            break
        n = decimal_version(event.resource_version)
        if at is None or n is None:
            continue
        if n > at:
            break
        end = i + 1
    return {object_key(e.object): (None if e.type == "DELETED" else e.object) for e in events[:end]}


async def _value(digested: Digested) -> Digest:
    if inspect.isawaitable(digested):
        return await digested
    return digested


class StreamChanges:
    """The comparison of one subscriber's stream (built by the hub when it joins).

    Args:
        before: what a resuming subscriber holds of the objects its replay may change
            (:func:`history_before`).
        origin: the hub's objects when a subscriber without initial events joined, by
            namespace/name (a copy of the hub's state, taken as it joined: decoded
            objects, or a :class:`~gateway.core.watch.compact.CompactState` that decodes
            each one read).
    """

    __slots__ = ("before", "digests", "origin")

    def __init__(
        self,
        before: dict[str, JSON | None] | None = None,
        origin: MutableMapping[str, JSON] | None = None,
    ) -> None:
        self.before = before or {}
        self.origin = origin
        self.digests: dict[str, Digest] = {}

    async def admit(
        self,
        event: Event,
        now: Callable[[], Digested],
        earlier: Callable[[JSON], Digested],
    ) -> bool:
        """Whether an event goes to the subscriber; remembers what the subscriber then holds.

        Args:
            now: the digest of what the subscriber receives of this event's object (asked
                only for ADDED and MODIFIED).
            earlier: the digest of what it would have received of an earlier state of the
                object (asked once per object at most, for the first change after it joined).
        """
        kind, obj = event.type, event.object
        if kind not in CHANGES:
            return True
        key = object_key(obj)
        held = self.before.pop(key, None) if self.before else None
        origin = self.origin.pop(name_key(obj), None) if self.origin else None
        if kind == "DELETED":
            self.digests.pop(key, None)
            return True
        current = await _value(now())
        previous = self.digests.get(key)
        self.digests[key] = current
        if kind == "ADDED":
            return True
        if previous is None:
            if held is not None:
                previous = await _value(earlier(held))
            elif origin is not None and object_key(origin) == key:
                previous = await _value(earlier(origin))
        return previous != current
