"""``changedFieldsOnly``: deliver a MODIFIED event only when a field the subscriber selected
changed (watch rule 31).

What is compared is the subscriber's own result for the object: the values of the event's
``object`` selections in the executed response (aliases, fragments and relations included,
``type`` and ``resourceVersion`` left out, errors included), reduced to a 16-byte BLAKE2b
digest.  One digest is kept per object (key: ``metadata.uid``, else namespace/name), never
the payload, and dropped when the object is DELETED.

Subscribers of one shared execution (:mod:`gateway.graphql.fanout`) have the same document
and variables, so the comparison is made once per event for all of them by the feed's
:class:`ChangeFilter`.  That is exact for every subscriber: each holds, for every object,
what the stream delivered last *or something with the same digest* (an event is withheld
only when its digest equals the previous one), so "same as the previous state of this
object in the stream" is "same as what this subscriber last received", whenever it joined:
its initial events show the state at its joining point, and the live events it takes are
exactly those after that point.  For an object the feed has not seen change yet the
previous state is the one the hub held when the feed started (kept as a reference to the
hub's own object until the first event for it, then replaced by its digest).

A subscriber that resumes (``resourceVersion``, SSE ``Last-Event-ID``) replays the hub's
history after its version; its :class:`ReplayFilter` compares each replayed MODIFIED with
the object's last event at or before that version in the same history (what the client
held, or the same digest of it), so an unchanged object is not sent again.  When the
history does not reach back to the object's previous state, the event is delivered.
ADDED and DELETED always go; BOOKMARK and RESYNC markers are unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson
from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    SelectionSetNode,
)

from gateway.core.changes import CHANGES, Digest, digest, history_before, object_key
from gateway.core.hub import HubEvent
from gateway.core.watch import object_key as name_key
from gateway.core.wire import JSON
from gateway.graphql.execution import Prepared, Response

__all__ = [
    "ChangeFilter",
    "Digest",
    "ReplayFilter",
    "digest_of",
    "history_before",
    "object_selections",
]
#: Executes the document for one more event of the same object (a baseline) and digests it.
Baseline = Callable[[str, JSON], Awaitable[Digest]]


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


def digest_of(response: Response, keys: Iterable[str]) -> Digest:
    """The digest of the ``object`` part of one executed event (and of its errors)."""
    data = response.get("data")
    event = next(iter(data.values()), None) if isinstance(data, dict) else None
    part = [event.get(k) for k in keys] if isinstance(event, dict) else [event]
    errors = response.get("errors")
    return digest(orjson.dumps([part, errors] if errors else part))


class ChangeFilter:
    """The comparison of one shared execution's live events (see the module docstring).

    Args:
        keys: the ``object`` response keys of the document (:func:`object_selections`).
        origin: the hub's objects when the feed started, by ``namespace/name`` (read only,
            shared with the hub); ``None`` when they are not a reliable baseline (the hub
            was still catching up from an older version).
    """

    __slots__ = ("digests", "keys", "origin")

    def __init__(self, keys: tuple[str, ...], origin: dict[str, JSON] | None) -> None:
        self.keys = keys
        self.origin = origin
        self.digests: dict[str, Digest] = {}

    async def admit(self, kind: str, obj: JSON, response: Response, baseline: Baseline) -> bool:
        """Whether an event goes to the subscribers; remembers what they now hold."""
        if kind not in CHANGES:
            return True
        key = object_key(obj)
        origin = self.origin.pop(name_key(obj), None) if self.origin is not None else None
        if kind == "DELETED":
            self.digests.pop(key, None)
            return True
        digest = digest_of(response, self.keys)
        previous = self.digests.get(key)
        self.digests[key] = digest
        if kind == "ADDED":
            return True
        if previous is None and origin is not None and object_key(origin) == key:
            previous = await baseline(key, origin)
        return previous != digest


class ReplayFilter:
    """The comparison of one resuming subscriber's replayed events.

    Args:
        keys: the ``object`` response keys of the document.
        before: each object's last event at or before the version resumed from, as far
            as the hub's history reaches (see :func:`history_before`).
    """

    __slots__ = ("before", "digests", "keys")

    def __init__(self, keys: tuple[str, ...], before: dict[str, HubEvent]) -> None:
        self.keys = keys
        self.before = before
        self.digests: dict[str, Digest] = {}

    async def admit(self, event: HubEvent, response: Response, baseline: Baseline) -> bool:
        kind, obj = event.type, event.object
        if kind not in CHANGES:
            return True
        key = object_key(obj)
        held = self.before.pop(key, None)
        if kind == "DELETED":
            self.digests.pop(key, None)
            return True
        digest = digest_of(response, self.keys)
        previous = self.digests.get(key)
        self.digests[key] = digest
        if kind == "ADDED":
            return True
        if previous is None and held is not None and held.type != "DELETED":
            previous = await baseline(key, held.object)
        return previous != digest
