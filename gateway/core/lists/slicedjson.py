"""Decoding a large list body a slice of items at a time, so the event loop can run in between.

A 5,000-pod list is ~27 MB of JSON; one ``orjson.loads`` of it takes ~200 ms holding the GIL
(a worker thread would hold the loop just the same).  A list body has one shape::

    {"kind":"PodList","apiVersion":"v1","metadata":{...},"items":[{...},{...},...]}

so it is decoded in pieces: the *head* (everything but the items, with ``"items":[]``) and
runs of whole items of about :data:`SLICE_BYTES` each, with a yield between two pieces
(:meth:`gateway.core.lists.large.LargeLists.decode` drives it, yielding to the event loop).

Where one item ends and the next begins is found with ``bytes.find`` on ``},`` followed by
the first item's opening (``{"metadata":`` for the built-in kinds, ``{"apiVersion":`` for
custom resources).  Such a candidate is never inside a JSON string (a string holds a quote
only escaped, and here the quote follows ``{``), but it may be inside an item (a
StatefulSet's ``volumeClaimTemplates``); nothing is trusted, everything is proved by parsing:

* ``"items":[`` must be a key of the top-level object: right after its opening ``{``, or
  after a ``,`` where what precedes it closes with one ``}`` into an object that parses (a
  nested key leaves more brackets open);
* the head, ``<text before the items>]<text after the items>``, must parse to an object
  whose ``items`` is ``[]`` (a later duplicate key would win over the array);
* each run, wrapped as ``[[<run>]]``, must parse.  The first run starts right after the
  array's ``[``, at its top level; a run that parses is balanced, so it ends at the top level
  too and the candidate after it was a boundary between two items.  By induction every cut
  is, and the body is exactly ``head-before + run + "," + run ... + head-after``: it parses
  to the head with its ``items`` replaced by the runs' items, in order.  The double
  bracket puts each item at the depth it has in the body, so orjson's nesting limit
  applies the same way.

A run that does not parse at a candidate is retried up to the next candidates
(:data:`RETRIES`); any other failure (no ``"items":[``, a pretty-printed body, invalid JSON,
more odd candidates) falls back to one decode of the whole body, which either gives
the same value or raises the same error as it would have.  The value is always identical to
``orjson.loads(body)``: ``tests/core/lists/test_slicedjson.py`` proves it on generated adversarial
bodies.

A body or a run nested deeper than ``orjson`` takes (1,024 levels; the apiserver stores
objects up to 10,000 deep) is decoded by :mod:`gateway.core.support.deepjson` instead, a step at a
time: the value is then ``deepjson.loads(body)``'s, with no nesting limit, and one poison
object costs only its own run that slower decode.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Final

import orjson

from gateway.core.support import deepjson

__all__ = [
    "RETRIES",
    "SLICE_BYTES",
    "decode",
    "decoder",
]

#: The bytes of items decoded between two yields: ~0.5 ms of orjson on one core, about as
#: long as one slice of the gRPC codec's list encoding (see ``LIST_SLICE`` in
#: ``gateway/grpc/codec.py`` for why short slices).
SLICE_BYTES: Final = 64 * 1024
#: Candidates after a run that did not parse tried before the whole body is decoded at once.
RETRIES: Final = 4
#: The longest first key of an item used to find item boundaries (with its quotes and colon).
_MAX_KEY: Final = 64
_ITEMS: Final = b'"items":['
_WHITESPACE: Final = b" \t\r\n"

#: What a decoding generator yields between two pieces of work.
Decoder = Generator[None, None, Any]


def decoder(data: bytes, slice_bytes: int = SLICE_BYTES) -> Decoder:
    """A generator decoding ``data`` (:func:`gateway.core.support.deepjson.loads`' value:
    ``orjson``'s,
    at any depth), yielding between slices.

    Drive it with :meth:`gateway.core.lists.large.LargeLists.decode` (yields to the event
    loop) or :func:`decode` (none); the value is the ``StopIteration`` value.

    Raises:
        orjson.JSONDecodeError: ``data`` is not JSON (the error of a whole decode).
    """
    key = data.find(_ITEMS)
    end = data.rfind(b"]")
    if key < 1 or end < key + len(_ITEMS) - 1 or not _top_level(data, key):
        return (yield from _whole(data))
    start = key + len(_ITEMS)
    view = memoryview(data)
    try:
        head = orjson.loads(b"".join((view[:start], view[end:])))
    except orjson.JSONDecodeError:
        return (yield from _whole(data))
    if head.__class__ is not dict or head.get("items") != []:
        return (yield from _whole(data))
    items: list[Any] = []
    sep = _separator(data, start, end)
    pos = start
    while pos < end:
        yield
        run = yield from _run(data, view, pos, end, sep=sep, slice_bytes=slice_bytes)
        if run is None:
            return (yield from _whole(data))
        cut, values = run
        items.extend(values)
        pos = cut + 2  # past "},"
    head["items"] = items
    return head


def _whole(data: bytes) -> Decoder:
    """One decode of ``data``: ``orjson.loads``, or for a body nested deeper than it takes,
    :func:`gateway.core.support.deepjson.parse`, a step at a time."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if not deepjson.too_deep(exc):
            raise
    return (yield from deepjson.parse(data))


def _top_level(data: bytes, key: int) -> bool:
    """Whether the ``"items"`` key at ``key`` is a key of the top-level object: the first
    one (only whitespace before its ``{``), or one after a ``,`` that closes a valid object
    of what precedes it (a nested key leaves a bracket open)."""
    before = data[key - 1]
    if before == ord("{"):
        return not data[: key - 1].strip(_WHITESPACE)
    if before != ord(","):
        return False
    try:
        return orjson.loads(data[: key - 1] + b"}").__class__ is dict
    except orjson.JSONDecodeError:
        return False


def _separator(data: bytes, start: int, end: int) -> bytes | None:
    """``},`` and the first item's opening up to its first key's colon (or ``None``)."""
    if data[start : start + 2] != b'{"':
        return None
    colon = data.find(b'":', start + 2, min(end, start + _MAX_KEY))
    return None if colon < 0 else b"}," + data[start : colon + 2]


def _run(
    data: bytes, view: memoryview, pos: int, end: int, *, sep: bytes | None, slice_bytes: int
) -> Generator[None, None, tuple[int, list[Any]] | None]:
    """The items from ``pos`` to a boundary past ``pos + slice_bytes`` (or to ``end``): the
    index of the boundary's ``}`` (``end - 1`` for the last run) and the items; ``None`` when
    no candidate within :data:`RETRIES` gives a run that parses.  A run holding an item
    nested deeper than ``orjson`` takes is decoded by :mod:`gateway.core.support.deepjson`, a step
    at a time (a generator)."""
    cut = data.find(sep, pos + slice_bytes, end) if sep is not None else -1
    for _ in range(RETRIES + 1):
        stop = end if cut < 0 else cut + 1
        try:
            values = yield from _whole(b"".join((b"[[", view[pos:stop], b"]]")))
        except orjson.JSONDecodeError:
            if cut < 0 or sep is None:
                return None
            cut = data.find(sep, cut + 1, end)
            continue
        if values.__class__ is not list or len(values) != 1:
            return None
        return stop - 1, values[0]
    return None


def decode(data: bytes, slice_bytes: int = SLICE_BYTES) -> Any:
    """:func:`decoder` run to the end at once (no yields; for tests and callers off a loop)."""
    gen = decoder(data, slice_bytes)
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value
