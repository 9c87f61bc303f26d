"""Changed fields only: withhold a MODIFIED event when what a subscriber sees of the object
did not change (watch rule 31), for both front ends.

A front end digests what it would send of an object (GraphQL: the executed selection;
gRPC: the object's message under ``read_mask``); one 16-byte BLAKE2b digest is kept per
object (key: ``metadata.uid``, else namespace/name), never the payload, and dropped on
DELETED.  :class:`StreamChanges` is the comparison of one stream whose digests cost no I/O
(a gRPC ``Watch``); GraphQL's shared executions use :mod:`gateway.graphql.changes`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

from gateway.core.hub import HubEvent
from gateway.core.watch import decimal_version
from gateway.core.watch import object_key as name_key
from gateway.core.wire import JSON

Digest = bytes

#: The event types that are compared; the others (BOOKMARK, RESYNC) always go.
CHANGES = frozenset(("ADDED", "MODIFIED", "DELETED"))


def digest(data: bytes) -> Digest:
    """The 16-byte BLAKE2b digest of what a subscriber receives of an object."""
    return hashlib.blake2b(data, digest_size=16).digest()


def object_key(obj: JSON) -> str:
    """The identity of a watched object: its uid, else ``namespace/name``."""
    meta = obj.get("metadata") or {}
    uid = meta.get("uid")
    return f"uid:{uid}" if uid else name_key(obj)


def history_before(history: Iterable[HubEvent], wanted: str) -> dict[str, HubEvent]:
    """The last event of each object at or before version ``wanted`` in a hub's history
    (in upstream order; decimal versions compared, opaque ones matched exactly): what a
    subscriber resuming from ``wanted`` holds of them."""
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
    return {object_key(event.object): event for event in events[:end]}


class StreamChanges:
    """The comparison of one subscriber's stream.

    Args:
        of: the digest of what this subscriber receives of an object.
        before: what a resuming subscriber holds (:func:`history_before`).
        origin: the hub's objects when a subscriber without initial events joined, by
            namespace/name (read only, shared with the hub).
    """

    __slots__ = ("before", "digests", "of", "origin")

    def __init__(
        self,
        of: Callable[[JSON], Digest],
        before: dict[str, HubEvent] | None = None,
        origin: dict[str, JSON] | None = None,
    ) -> None:
        self.of = of
        self.before = before or {}
        self.origin = origin
        self.digests: dict[str, Digest] = {}

    def admit(self, kind: str, obj: JSON, now: Callable[[], Digest]) -> bool:
        """Whether an event goes to the subscriber (``now``: its digest, computed only for
        ADDED and MODIFIED); remembers what the subscriber then holds."""
        if kind not in CHANGES:
            return True
        key = object_key(obj)
        held = self.before.pop(key, None) if self.before else None
        origin = self.origin.pop(name_key(obj), None) if self.origin else None
        if kind == "DELETED":
            self.digests.pop(key, None)
            return True
        current = now()
        previous = self.digests.get(key)
        self.digests[key] = current
        if kind == "ADDED":
            return True
        if previous is None:
            if held is not None and held.type != "DELETED":
                previous = self.of(held.object)
            elif origin is not None and object_key(origin) == key:
                previous = self.of(origin)
        return previous != current
