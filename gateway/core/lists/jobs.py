"""What a list worker does to a list body: a job, plain data the gateway sends with the body,
and :func:`work`, which does it (in the worker process, :mod:`gateway.core.lists.worker`).

Three jobs: :func:`project`, a GraphQL list field's (the list projected by the selection's
plan, :mod:`gateway.core.lists.projections`, as JSON the gateway embeds unread),
:func:`wire`, a gRPC ``ResourceService`` list's without a read mask (the items' protobuf
bytes, :mod:`gateway.core.lists.protowire`), and :func:`~gateway.core.lists.compacting.
compact`, a watch's initial list (each item's JSON as the hub keeps it, and the values the
first view reads: :mod:`gateway.core.lists.compacting`; its answer is a list of buffers,
written to the memory file the worker shares with the gateway).  A projection decodes only
what it reads (:func:`read_part`) when that gives what a whole decode would.

Anything a worker cannot do exactly as the gateway would (a value the projection would give
to a scalar's serialiser, a body that is not a JSON object, an integer past 64 bits) comes
back as :data:`NOT_DONE`, and the gateway decodes and completes that list itself, the
ordinary way: the answer is the same bytes either way (``tests/gateway/test_list_workers.py``).
"""

from __future__ import annotations

import functools
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
    "read_part",
    "split_wire",
    "wire",
    "work",
]

#: A worker's job, plain data: :func:`project` or :func:`wire`.
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
        return _written(value, *job[1:])
    except (Fallback, compacting.NotCompact):
        return NOT_DONE


def read_part(data: bytes | bytearray | memoryview, spec: Spec) -> dict[str, Any] | None:
    """Only what the projection ``spec`` reads of the list (and what the cap needs),
    decoded; ``None`` when that cannot be trusted to be what a whole decode would give (the
    body is not UTF-8, or not JSON, or a value's type is not the one read), and the body is
    decoded whole.

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


def _written(value: dict[str, Any], item_tag: bytes, object_tag: bytes, as_struct: bool) -> bytes:
    items = value.pop("items", None) or []
    if type(items) is not list:
        raise Fallback
    parts: list[bytes] = []
    for item in items:
        if item.__class__ is dict:
            obj = encode_struct(item) if as_struct else orjson.dumps(item)
            parts.append(length_prefixed(item_tag, length_prefixed(object_tag, obj)))
    rest = orjson.dumps(value)
    return _REST.pack(len(rest)) + rest + b"".join(parts)
