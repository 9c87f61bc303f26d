"""What a list worker does to a list body: a job, plain data the gateway sends with the body,
and :func:`work`, which does it (in the worker process, :mod:`gateway.core.lists.worker`).

Four jobs: :func:`project`, a GraphQL list field's (the list projected by the selection's
plan, :mod:`gateway.core.lists.projections`, as JSON the gateway embeds unread),
:func:`wire`, a gRPC ``ResourceService`` list's without a read mask (the items' protobuf
bytes, :mod:`gateway.core.lists.protowire`), :func:`typed`, a typed gRPC service's list
(``PodService/List``: the items as the contract's messages,
:mod:`gateway.core.lists.typedwire`, with or without a read mask), and
:func:`~gateway.core.lists.compacting.compact`, a watch's initial list (each item's JSON
as the hub keeps it, and the values the first view reads:
:mod:`gateway.core.lists.compacting`; its answer is a list of buffers, written to the
memory file the worker shares with the gateway).  A projection decodes only
what it reads (:func:`read_part`) when that gives what a whole decode would.

Anything a worker cannot do exactly as the gateway would (a value the projection would give
to a scalar's serialiser, a body that is not a JSON object, an integer past 64 bits) comes
back as :data:`NOT_DONE`, and the gateway decodes and completes that list itself, the
ordinary way: the answer is the same bytes either way (``tests/gateway/test_list_workers.py``).
"""

from __future__ import annotations

import functools
import pickle
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Final, cast

import msgspec
import orjson

from gateway.core.lists import compacting
from gateway.core.lists.body import over_cap
from gateway.core.lists.gzipped import gunzip
from gateway.core.lists.projections import (
    WHOLE,
    Fallback,
    Items,
    Project,
    Spec,
    build,
    merged,
    reader,
    shape,
)
from gateway.core.lists.protowire import encode_struct, length_prefixed
from gateway.core.support import deepjson

__all__ = [
    "NOT_DONE",
    "OVER_CAP",
    "Job",
    "project",
    "projected_part",
    "read_part",
    "split_typed",
    "split_wire",
    "typed",
    "wire",
    "work",
]

#: A worker's job, plain data: :func:`project`, :func:`wire`, :func:`typed` or
#: :func:`~gateway.core.lists.compacting.compact`.
Job = tuple[Any, ...]
#: What a worker answers when the caller must do the work itself.
NOT_DONE: Final = "not-done"
#: What a worker answers for a list with more items than the cap.
OVER_CAP: Final = "over-cap"
#: Plans a worker keeps built (and decoders of what they read), the least recent dropped.
_PLANS_KEPT: Final = 256
#: What :func:`over_cap` reads of a list, whatever the projection reads.
_COUNTED: Final = {"metadata": {"continue": WHOLE}, "items": Items({})}
# A ``wire`` answer: the length of the JSON of everything but the items, that JSON, the items.
_REST = struct.Struct("<Q")


def project(spec: Spec) -> Job:
    """The job of a GraphQL list field: the list projected by ``spec``, as JSON."""
    return ("project", spec)


def wire(item_tag: bytes, object_tag: bytes, *, as_struct: bool) -> Job:
    """The job of a gRPC ``ResourceList``: each item written as ``item_tag`` holding a
    ``ResourceObject`` whose ``object_tag`` field is the item's JSON (or, ``as_struct``,
    its ``google.protobuf.Struct``); everything but the items comes back as JSON, for the
    front end to write its head (:func:`split_wire`)."""
    return ("wire", item_tag, object_tag, as_struct)


def typed(
    key: str,
    design: bytes,
    item: str,
    item_tag: bytes,
    mask: dict[str, Any] | None,
    *,
    part: tuple[int, int] = (0, 1),
) -> Job:
    """The job of a typed gRPC list (``PodList``...): each item written as the contract's
    message ``item`` (cut down to the read mask ``mask`` first, when there is one), a field
    ``item_tag``, by the :class:`~gateway.core.lists.typedwire.Writer` of the design
    ``design`` (a pickled :class:`~gateway.core.lists.typedwire.Design`; a worker builds its
    writer once and keeps it under ``key``); everything but the items comes back as JSON,
    for the front end to write its head, and what the writer dropped, for it to log
    (:func:`split_typed`; a worker answers it as buffers, which it writes into the memory
    file it shares with the gateway, and the gateway reads in one call).

    ``part``: (``i``, ``n``): only the ``i``-th of ``n`` runs of the items, as even as can
    be, is written (the list is their concatenation, in order: ``n`` workers write one
    list at once); the others are delimited, not decoded (:func:`_typed_part`)."""
    return ("typed", key, design, item, item_tag, mask, part)


def split_typed(done: bytes) -> tuple[dict[str, Any], list[list[Any]], memoryview]:
    """A ``typed`` job's answer: the list without its items (decoded), what the writer
    dropped (each a ``%s`` format and its arguments), the items' bytes (a view of
    ``done``: not copied until the answer is joined)."""
    (size,) = _REST.unpack_from(done)
    start = _REST.size
    rest = orjson.loads(done[start : start + size])
    start += size
    (size,) = _REST.unpack_from(done, start)
    start += _REST.size
    notes = orjson.loads(done[start : start + size])
    return rest, notes, memoryview(done)[start + size :]


def split_wire(done: bytes) -> tuple[dict[str, Any], bytes]:
    """A ``wire`` job's answer: the list without its items (decoded), the items' bytes."""
    (size,) = _REST.unpack_from(done)
    start = _REST.size
    return orjson.loads(done[start : start + size]), done[start + size :]


def work(
    data: bytes | bytearray | memoryview,
    job: Job,
    cap: int,
    keep: list[Any] | None = None,
    *,
    gzipped: bool = False,
    parts: bool = False,
) -> bytes | list[bytes] | Iterator[list[Any]] | str:
    """``job`` done on the JSON of ``data`` (``gzipped``: inflated first), or
    :data:`NOT_DONE`, or :data:`OVER_CAP`.  ``keep``: the decoded value is appended to it,
    for the caller to free after it has answered.  ``parts``: a compact job's answer as
    its parts, each made as it is read (:func:`~gateway.core.lists.compacting.written_parts`:
    reading one raises ``TypeError`` or :class:`~gateway.core.lists.compacting.NotCompact`
    where an item cannot be made compact as the gateway would); they hold nothing of
    ``data``.

    A projection decodes only what it reads (:func:`read_part`) when that gives what a whole
    decode would; anything else is decoded whole."""
    if gzipped:
        try:
            data = gunzip(data)
        except (zlib.error, EOFError):
            return NOT_DONE  # the gateway's own inflating says what is wrong
    if job[0] == "typed" and job[6][1] > 1:
        return _typed_part(data, job, cap, keep)
    if job[0] == "project":
        part = read_part(data, job[1])
    elif job[0] == "compact":
        part = compacting.read_list(data)
    else:
        part = None
    if part is not None:
        if keep is not None:
            keep.append(part)
        try:
            return _answer(part, job, cap, parts)
        except TypeError:
            pass  # an integer past 64 bits, which a whole decode reads as a float
    try:
        value = deepjson.loads(data)  # at any depth, as the gateway decodes it
    except orjson.JSONDecodeError:
        return NOT_DONE
    if keep is not None:
        keep.append(value)
    try:
        return _answer(value, job, cap, parts)
    except TypeError:  # a value orjson cannot write, or a list that is not one
        return NOT_DONE


def _answer(
    value: Any, job: Job, cap: int, parts: bool = False
) -> bytes | list[bytes] | Iterator[list[Any]] | str:
    if type(value) is not dict:
        return NOT_DONE
    if cap and over_cap(value, cap):
        return OVER_CAP
    try:
        if job[0] == "project":
            return _projected(value, job[1])
        if job[0] == "compact":
            if parts:
                return compacting.written_parts(value, *job[1:])
            return compacting.written(value, *job[1:])
        if job[0] == "typed":
            return _typed_written(value, job)
        return _written(value, *job[1:])
    except (Fallback, compacting.NotCompact):
        return NOT_DONE


def read_part(data: bytes | bytearray | memoryview, spec: Spec) -> dict[str, Any] | None:
    """Only what the projection ``spec`` reads of the list (and what the cap needs),
    decoded; ``None`` when that cannot be trusted to be what a whole decode would give (the
    body is not UTF-8, or not JSON, or a value's type is not the one read), and the body is
    decoded whole.  A number past a double's range where nothing is read is not looked for
    (:func:`~gateway.core.lists.projections.reader` says why).

    A projection of a few fields of each item builds a fraction of the objects a whole
    decode does: about a seventh of the time for the 15 fields of a pod out of 5 KB."""
    read = _reader_of(spec)
    try:
        # checked whole, as orjson does: the reader skips strings unread
        compacting.utf8_checked(data)
        value = read(data)
    except (UnicodeDecodeError, msgspec.DecodeError, RecursionError):
        return None
    return value if type(value) is dict else None


def projected_part(
    data: bytes | bytearray | memoryview, spec: Spec, cap: int, most_items: int
) -> bytes | str:
    """A ``project`` job done from only what ``spec`` reads (:func:`read_part`), in
    whichever process calls it (the gateway's own, for a small list): its answer as
    :func:`work` gives it (the projection's JSON, or :data:`OVER_CAP`), or
    :data:`NOT_DONE` wherever a read of the part is not sure to give what the whole decode
    does (:func:`read_part`, an integer past 64 bits) or the projection needs a scalar's
    serialiser, and where the list holds ``most_items`` items or more (a large list, which
    its caller completes in slices): the caller then decodes the body whole, the ordinary
    way, once."""
    part = read_part(data, spec)
    if part is None:
        return NOT_DONE
    items = part.get("items")
    if type(items) is list and len(items) >= most_items:
        return NOT_DONE
    try:
        return cast("bytes | str", _answer(part, project(spec), cap))
    except TypeError:  # an integer past 64 bits, which a whole decode reads as a float
        return NOT_DONE


def _projected(value: dict[str, Any], spec: Spec) -> bytes:
    return orjson.dumps(_projection_of(spec)(value))


@functools.lru_cache(maxsize=_PLANS_KEPT)
def _projection_of(spec: Spec) -> Project:
    return build(spec)


@functools.lru_cache(maxsize=_PLANS_KEPT)
def _reader_of(spec: Spec) -> Callable[[bytes | bytearray | memoryview], Any]:
    # (msgspec decodes any buffer: a bytearray, a body fed as it came, as well)
    return cast(
        Callable[[bytes | bytearray | memoryview], Any], reader(merged(shape(spec), _COUNTED))
    )


def _written(
    value: dict[str, Any], item_tag: bytes, object_tag: bytes, as_struct: bool
) -> list[bytes]:
    items = value.pop("items", None) or []
    if type(items) is not list:
        raise Fallback
    parts: list[bytes] = []
    for item in items:
        if item.__class__ is dict:
            obj = encode_struct(item) if as_struct else orjson.dumps(item)
            parts.append(length_prefixed(item_tag, length_prefixed(object_tag, obj)))
    rest = orjson.dumps(value)
    # buffers, as a typed job's: through the memory file, not the pipe
    return [_REST.pack(len(rest)), rest, *parts]


#: The typed writers a worker keeps built (by design key), the least recent dropped.
_WRITERS_KEPT: Final = 4
_writers: dict[str, Any] = {}


def _typed_written(value: dict[str, Any], job: Job) -> list[bytes]:
    items = value.pop("items", None) or []
    if type(items) is not list:
        raise Fallback
    return _typed_answer(value, items, job)


def _typed_answer(value: dict[str, Any], items: list[Any], job: Job) -> list[bytes]:
    # imported here: a worker that never writes a typed list never loads protobuf
    from gateway.core.lists import typedwire

    _, key, design, item, item_tag, mask, _ = job
    writer = _writers.pop(key, None)
    if writer is None:
        writer = typedwire.Writer(pickle.loads(design))
        while len(_writers) >= _WRITERS_KEPT:
            del _writers[next(iter(_writers))]
    _writers[key] = writer  # the most recent last
    notes: list[list[Any]] = []
    writer.dropped = lambda fmt, *args: notes.append([fmt, *args])
    parts: list[bytes] = []
    writer.items(item, item_tag, items, mask, parts)
    rest = orjson.dumps(value)
    said = orjson.dumps(notes)
    # buffers, not joined: the worker writes them into the memory file it shares with the
    # gateway (one ``pwritev`` per 1,024), which reads the answer in one call, in a thread
    return [_REST.pack(len(rest)), rest, _REST.pack(len(said)), said, *parts]


#: A list body's members, each as its JSON text; its items, each as its JSON text.
_MEMBERS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ELEMENTS: Final = msgspec.json.Decoder(list[msgspec.Raw] | None)


def _typed_part(
    data: bytes | bytearray | memoryview, job: Job, cap: int, keep: list[Any] | None
) -> list[bytes] | str:
    """A ``typed`` job's part (``job[6]``: its run of the items, of how many): the body
    delimited (``msgspec``, which builds no value), and only what is written decoded:
    everything but the items (small) and the run's items, each by ``orjson`` at the depth a
    whole decode reads it at (the JSON text put in as many brackets), so each value is the
    one a whole decode gives, or the work is not done (a body or item that is not JSON,
    one nested past ``orjson``'s depth: the gateway decodes those itself)."""
    index, count = job[6]
    try:
        members = _MEMBERS.decode(data)
        raws = _ELEMENTS.decode(members.pop("items")) if "items" in members else None
        value = {k: orjson.loads(b"".join((b"[", raw, b"]")))[0] for k, raw in members.items()}
        if cap and over_cap({**value, "items": raws}, cap):
            return OVER_CAP
        raws = raws or []
        start, end = len(raws) * index // count, len(raws) * (index + 1) // count
        items = [orjson.loads(b"".join((b"[[", raw, b"]]")))[0][0] for raw in raws[start:end]]
    except (msgspec.DecodeError, orjson.JSONDecodeError, RecursionError):
        return NOT_DONE
    except (AttributeError, TypeError):  # a list whose metadata is not an object
        return NOT_DONE
    del members, raws
    if keep is not None:
        keep.append(items)
    try:
        return _typed_answer(value if index == 0 else {}, items, job)
    except (TypeError, Fallback):  # a value orjson cannot write, or one a Struct cannot hold
        return NOT_DONE
