"""A list made compact by a list worker: each object's JSON, its key, and the values a view
will read of it, so that the gateway's event loop only moves bytes.

The watch hub keeps each object of a watch as its JSON (:mod:`gateway.core.watch.compact`);
the first view of a kind then builds, for the field paths it filters and sorts by, a column
of each object's sort value (:mod:`gateway.core.views.store`).  Done by the gateway, that
is a decode of the whole list, an encoding of each object, a free of the decoded list, and
a second decode of every object for the columns: measured on 30,000 realistic pods (155 MB
of JSON), about 1.9 s of the gateway's one interpreter, where a plain list of the same pods
hands its decode to a worker.

So a worker does it (:func:`compact`, the job; :func:`written`, what the worker answers):
it inflates the list body and delimits its items without decoding them (:func:`read_list`,
``msgspec.Raw``), keeps each item as the JSON the upstream sent (its kind and apiVersion
written before it where it has neither, as the gateway adds them), and decodes of each only
its key and its values at the given field paths (:func:`value_at`, the one definition of a
view's sort value; the store's ``sort_value`` calls it).  An item where a partial decode
could differ from a whole one is decoded whole and written anew (``deepjson.dumps``, as the
gateway's compact state writes).  The answer goes back through the memory file the worker
shares with the gateway, in sections: the list without its items, the objects' lengths,
their JSON, then the keys and each column in pickled chunks of :data:`CHUNK` items.  The
gateway's thread that reads it copies each object's JSON straight out of the mapped file
into a ``bytes`` of its own (:func:`sliced`), and the event loop files them by key a
step at a time (:func:`taken`).

Exact by construction: each object's JSON decodes to the object a whole decode of the list
gives (and is the very bytes the gateway would write, where the upstream writes JSON as
orjson does: the demo; the apiserver's Go encoder escapes differently, the same object);
a value a column takes from here is the value the store would read from the very same
bytes (the gateway matches them by identity), with the same function.  One leniency: a
number past a double's range in a part of an item nobody reads, which orjson refuses (the
whole list refused), is kept, and fails where that object is decoded; the apiserver stores
no such number (Go's float64 refuses it).
"""

from __future__ import annotations

import asyncio
import functools
import pickle
import struct
from array import array
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from itertools import accumulate, count
from typing import Any, Final, Protocol, TypedDict

import msgspec
import orjson

from gateway.core.lists.projections import WHOLE, merged, reader
from gateway.core.support import deepjson

__all__ = [
    "CHUNK",
    "PART_ITEMS",
    "STEP",
    "STREAM_STEP",
    "TAIL_ITEMS",
    "ColumnSpec",
    "Columns",
    "Maker",
    "Sliced",
    "Streaming",
    "compact",
    "part_bounds",
    "read_list",
    "sections",
    "sliced",
    "taken",
    "utf8_checked",
    "value_at",
    "written",
    "written_parts",
]

#: Keys and column values per pickled chunk (each unpickled in one event-loop step).
CHUNK: Final = 5000
#: Objects taken out of an answer per event-loop step by :func:`taken` (filed by key; a
#: copy of their JSON each where the answer is not :class:`Sliced`: about 5 MB of
#: realistic pods, a millisecond or two).
STEP: Final = 1000
#: Objects per part of a compact job's answer given as it is made (:func:`written_parts`;
#: the gateway takes a part in, about 13 MB of realistic pods, while the next is made: what
#: it does after the worker's last part is that part's).
PART_ITEMS: Final = CHUNK // 2
#: Objects per part in the last :data:`PART_ITEMS` of an answer in parts (after its
#: first): what the gateway does after the worker's last part is that part's, so the last
#: parts are small (:func:`part_bounds`).
TAIL_ITEMS: Final = PART_ITEMS // 4
#: Objects copied out of an answer by :func:`sliced` per C-level pass (about a
#: millisecond: the thread it runs in then gives the interpreter to the event loop).
SLICED_STEP: Final = 256
#: A column the worker reads: the JSON keys of a field path, and the field's scalar kind.
ColumnSpec = tuple[tuple[str, ...], str]

_NUMBERS: Final = frozenset(("int32", "int64", "double"))
#: What may follow an item's ``{`` where it is not copied whole (:func:`written`): JSON's
#: whitespace, and the end of an empty object.
_NOT_AFTER_BRACE: Final = frozenset(b" \t\n\r}")
_COUNT = struct.Struct("<Q")


def value_at(keys: Sequence[str], kind: str, obj: Any) -> tuple[int, Any]:
    """The value at ``keys`` as a view's order compares it: ``(0, "")`` when absent,
    ``(1, value)`` for a value of the field's ``kind``, ``(2, text)`` for anything else."""
    for key in keys:
        if type(obj) is not dict:
            return (0, "")
        obj = obj.get(key)
    if obj is None:
        return (0, "")
    if kind in _NUMBERS:
        if type(obj) in (int, float):
            return (1, obj)
    elif kind == "boolean":
        if type(obj) is bool:
            return (1, obj)
    elif type(obj) is str:
        return (1, obj)
    if type(obj) is bool:
        return (2, "true" if obj else "false")
    return (2, obj if type(obj) is str else str(obj))


def compact(api_version: str, kind: str, columns: Sequence[ColumnSpec]) -> tuple[Any, ...]:
    """The job (:mod:`gateway.core.lists.jobs`): a list made compact, its items given
    ``kind`` and ``apiVersion`` where they lack either, with the values at ``columns``."""
    specs = tuple(dict.fromkeys((tuple(k), str(t)) for k, t in columns))
    return ("compact", api_version, kind, specs)


class NotCompact(Exception):
    """An item the worker cannot make compact as the gateway would (not an object)."""


class _List(TypedDict, total=False):
    """What :func:`read_list` decodes of a list: all but the items, and each item's JSON."""

    apiVersion: Any
    kind: Any
    metadata: Any
    items: list[msgspec.Raw] | None


_read_list = msgspec.json.Decoder(_List).decode
#: The least and most integer a whole decode (``orjson``) reads as an ``int``.
_INT_RANGE: Final = (-(1 << 63), (1 << 64) - 1)
#: The types of values read the same by both decodes whatever they hold (:func:`_plain`).
_SURE: Final = frozenset((str, bool, type(None)))


def utf8_checked(data: bytes | bytearray | memoryview) -> None:
    """Raise ``UnicodeDecodeError`` unless ``data`` is UTF-8: at once where it is ASCII (a
    word at a time, ~5 ms for 155 MB of realistic pods, where a UTF-8 decode takes ~70 ms;
    ASCII is UTF-8), else by decoding it."""
    if type(data) in (bytes, bytearray) and data.isascii():  # type: ignore[union-attr]
        return
    str(data, "utf-8")


def read_list(data: bytes | bytearray | memoryview) -> dict[str, Any] | None:
    """A list body with each item left as its JSON (``msgspec.Raw``): what the list holds
    but its items decoded, the items only delimited (each is read for its key and columns
    by :func:`written`, and kept as it came); ``None`` when that cannot be trusted to be
    what a whole decode would give (the body is not UTF-8, not JSON, not a list of
    objects), and the body is decoded whole."""
    try:
        utf8_checked(data)  # checked whole, as orjson does: msgspec skips strings unread
        # (each item a view of ``data``: a mapped file's copied first, which is closed
        # before the items are done with; a body fed as it came, a bytearray, is not)
        value = _read_list(data if type(data) in (bytes, bytearray) else bytes(data))
    except (UnicodeDecodeError, msgspec.DecodeError, RecursionError):
        return None
    return dict(value)


@functools.lru_cache(maxsize=64)
def _item_reader(columns: tuple[ColumnSpec, ...]) -> Callable[[Any], Any]:
    """A decoder of an item that builds only its kind, apiVersion, key and ``columns``."""
    read: Any = {"apiVersion": WHOLE, "kind": WHOLE, "metadata": {"namespace": WHOLE}}
    read = merged(read, {"metadata": {"name": WHOLE}})
    for path, _scalar in columns:
        shape: Any = WHOLE
        for key in reversed(path):
            shape = {key: shape}
        read = merged(read, shape) if path else WHOLE
    return reader(read)


def _plain(value: Any) -> bool:
    """A value read the same by a partial decode (msgspec) as by a whole one (orjson): all
    but one holding an integer past 64 bits (an ``int`` there, a ``float`` here) or a
    number past a double's range."""
    kind = type(value)
    if kind is dict:  # its strings, nulls and booleans passed over without a call
        for one in value.values():  # noqa: SIM110 (a loop: no generator per object)
            if type(one) not in _SURE and not _plain(one):
                return False
        return True
    if kind is int:
        return bool(_INT_RANGE[0] <= value <= _INT_RANGE[1])
    if kind is float:
        return bool(value - value == 0.0)  # neither infinite nor NaN
    if kind is list:
        return all(map(_plain, value))
    return True


def written(
    value: dict[str, Any], api_version: str, kind: str, columns: Sequence[ColumnSpec]
) -> list[Any]:
    """The answer of a :func:`compact` job on a decoded list (see the module), as the
    buffers to write one after the other (the objects' JSON not joined: written as they
    are into the memory file the worker shares with the gateway).

    Each item of a list :func:`read_list` read is kept as its own JSON (what the upstream
    sent), its kind and apiVersion written before it when it has neither (as the gateway
    adds them: ``{"apiVersion": ..., "kind": ..., **item}``); it decodes to the very object
    a whole decode gives.  Only its key and ``columns`` are decoded
    (:func:`~gateway.core.lists.projections.reader`); an item where that would differ from
    a whole decode (a value of another type than the path reads, an integer past 64 bits,
    one of kind and apiVersion but not the other) is decoded whole and written anew.

    Raises:
        NotCompact: ``items`` is not a list of objects.
        TypeError: an item ``orjson`` cannot write.
    """
    items = value.get("items") or []  # not popped: freed after the answer is written
    if type(items) is not list:
        raise NotCompact
    lengths = array("Q")
    parts: list[Any] = []
    keys: list[str] = []
    values: list[list[tuple[int, Any]]] = [[] for _ in columns]
    dumps = deepjson.dumps
    specs = tuple(columns)
    read = _item_reader(specs)
    prefix = orjson.dumps({"apiVersion": api_version, "kind": kind})[:-1]
    leading = prefix + b","
    lengths_append, parts_append, keys_append = lengths.append, parts.append, keys.append
    joined = len(leading) - 1
    single = values[0].append if len(specs) == 1 else None
    path0, scalar0 = specs[0] if specs else ((), "")
    for listed in items:
        item: Any = None
        data: Any = None
        lead: bytes | None = None
        if type(listed) is msgspec.Raw:
            try:
                item = read(listed)
            except (msgspec.DecodeError, RecursionError):
                item = None
            if (  # the usual item, in short: the same as below, a call or two fewer
                type(item) is dict
                and "kind" not in item
                and "apiVersion" not in item
                and type(meta := item.get("metadata") or {}) is dict
                and _plain(item)
            ):
                view = memoryview(listed)
                if view[1] not in _NOT_AFTER_BRACE:
                    parts_append(leading)
                    parts_append(view[1:])
                    lengths_append(len(view) + joined)
                    keys_append(f"{meta.get('namespace') or ''}/{meta.get('name') or ''}")
                    if single is not None:
                        single(value_at(path0, scalar0, item))
                    else:
                        for column, (path, scalar) in zip(values, specs, strict=True):
                            column.append(value_at(path, scalar, item))
                    continue
            if type(item) is not dict:
                item = None  # not an object, or a path of another type: decoded whole
            else:
                meta = item.get("metadata") or {}
                found = [value_at(path, scalar, item) for path, scalar in specs]
                has = ("kind" in item) + ("apiVersion" in item)
                if has == 1 or type(meta) is not dict or not _plain(item):
                    item = None  # (what was read of it: its key, kind and columns)
                elif has == 2:
                    data = listed
                else:
                    view = memoryview(listed)
                    if view[1] in _NOT_AFTER_BRACE:  # whitespace, or an empty object
                        body = bytes(view)[1:].lstrip()
                        data = prefix + (b"}" if body[:1] == b"}" else b"," + body)
                    else:  # as usual: the item's own JSON written as it is, not copied
                        lead, data = leading, view[1:]
            if item is None:
                try:
                    item = deepjson.loads(memoryview(listed))
                except orjson.JSONDecodeError:
                    raise NotCompact from None
                if type(item) is not dict:
                    raise NotCompact
        else:
            if type(listed) is not dict:
                raise NotCompact
            item = listed
        if data is None:
            if "kind" not in item or "apiVersion" not in item:
                item = {"apiVersion": api_version, "kind": kind, **item}
            data = dumps(item)
            meta = item.get("metadata") or {}
            if type(meta) is not dict:
                raise NotCompact  # the gateway's own compaction says what is wrong
            found = [value_at(path, scalar, item) for path, scalar in specs]
        if lead is None:
            parts.append(data)
            lengths.append(len(data))
        else:
            parts += (lead, data)
            lengths.append(len(lead) + len(data))
        keys.append(f"{meta.get('namespace') or ''}/{meta.get('name') or ''}")
        for column, one in zip(values, found, strict=True):
            column.append(one)
    pickled: list[bytes] = []
    for start in range(0, len(keys), CHUNK):
        pickled.append(pickle.dumps(keys[start : start + CHUNK], protocol=pickle.HIGHEST_PROTOCOL))
    for column in values:
        for start in range(0, len(column), CHUNK):
            pickled.append(
                pickle.dumps(column[start : start + CHUNK], protocol=pickle.HIGHEST_PROTOCOL)
            )
    rest = orjson.dumps({k: v for k, v in value.items() if k != "items"})
    spans = lengths.tobytes()
    sizes = [len(rest), len(spans), sum(lengths), *map(len, pickled)]
    head = array("Q", [len(sizes), *sizes]).tobytes()
    return [head, rest, spans, *parts, *pickled]


def written_parts(
    value: dict[str, Any], api_version: str, kind: str, columns: Sequence[ColumnSpec]
) -> Iterator[list[Any]]:
    """The answer of a :func:`compact` job in parts (:func:`part_bounds`), each made
    as it is read, each a :func:`written` answer of its items (the list's other fields in
    each: a few bytes), so that the gateway takes one in while the worker makes the next
    (:func:`taken` reads them one after the other as one answer).

    Raises:
        NotCompact: ``items`` is not a list (at once), or an item not an object (as the
            part that holds it is made).
        TypeError: an item ``orjson`` cannot write (as the part that holds it is made).
    """
    items = value.get("items") or []
    if type(items) is not list:
        raise NotCompact
    rest = {k: v for k, v in value.items() if k != "items"}

    def parts() -> Iterator[list[Any]]:
        for start, end in part_bounds(len(items)):
            yield written({**rest, "items": items[start:end]}, api_version, kind, columns)

    return parts()


def part_bounds(
    n: int, part_items: int = PART_ITEMS, tail_items: int = TAIL_ITEMS
) -> list[tuple[int, int]]:
    """The items (start, end) of each part of an answer of ``n`` items in parts: parts of
    :data:`PART_ITEMS`, the first always one (all of them if fewer), then those of the
    last :data:`PART_ITEMS` items in parts of :data:`TAIL_ITEMS`; one part if none."""
    tail = max(part_items, n - part_items)  # where the small parts start
    bounds: list[tuple[int, int]] = []
    start = 0
    while start < n or not bounds:
        size = part_items if start + part_items <= tail else tail_items
        bounds.append((start, min(n, start + size)))
        start += size
    return bounds


#: Bytes of a body fed as it arrives gathered between two steps of :class:`Streaming` (each
#: step one decode of about this much: a few milliseconds of the worker's).
STREAM_STEP: Final = 1 << 21
#: How far into a list its ``"items":[`` may be for :class:`Streaming` to find it.
_HEAD_MOST: Final = 1 << 16
#: How long the first key of a list's first item may be for :class:`Streaming` to use it.
_KEY_MOST: Final = 256
_ITEMS_OPEN: Final = b'"items":['
#: A place to cut a list between two items that is not one (a nested list of objects): the
#: next place before it is tried, this many times a step, and this many in all before
#: :class:`Streaming` gives up (the job is then done on the whole body, as before).
_TRIES: Final = 3
_MISSES_MOST: Final = 32
#: JSON's whitespace.
_BLANK: Final = b" \t\r\n"
#: The fields of a list that :func:`read_list` reads but its items, which :class:`Streaming`
#: wants before the items (as a typed list's JSON has them; an unstructured list's JSON has
#: its fields in the order of their names, ``kind`` and ``metadata`` after the items).
_HEAD_HOLDS: Final = frozenset(("apiVersion", "kind", "metadata"))


class Streaming:
    """The answer in parts of a :func:`compact` job (:func:`written_parts`) made as its
    list body arrives, a list worker fed it a piece at a time: the items delimited as soon as
    enough of them have come (:meth:`step`, every :data:`STREAM_STEP` bytes), the parts made
    of them as soon as they are sure to be parts of the answer (:func:`part_bounds`: all but
    the last :data:`PART_ITEMS` items may be), the rest at the body's end (:meth:`finish`).
    So that, fed a body at the upstream's pace, only the last part is left for after its
    last byte.

    The very same parts as :func:`written_parts` of :func:`read_list` of the whole body, or
    none (:attr:`failed`: the job is then done on the whole body, as before): the body is
    cut only between two items at the top of the list's ``items``, where ``},`` and the
    first item's first key meet (the apiserver's items all begin with ``{"metadata":``),
    and each stretch between two cuts is checked to be exactly items, one comma apart
    (decoded as the list's items would be, their lengths and commas adding up to the
    stretch: a cut inside a string, or inside a nested list, fails that); the list before
    its items is decoded as the list's other fields (all of them: ``apiVersion``, ``kind``
    and ``metadata`` before the items, as the apiserver writes a typed list), and what
    follows its items must be ``]}`` (and whitespace).  Anything else (whitespace between
    items, fields after the items, a body that is not UTF-8, an item that cannot be made
    compact) and it gives up.
    """

    __slots__ = (
        "_count",
        "_items",
        "_made",
        "_misses",
        "_part_items",
        "_pattern",
        "_pos",
        "_rest",
        "_start",
        "_step",
        "_tail_items",
        "_tried",
        "done",
        "failed",
        "job",
    )

    def __init__(
        self,
        job: tuple[Any, ...],
        part_items: int = PART_ITEMS,
        tail_items: int = TAIL_ITEMS,
        step: int = STREAM_STEP,
    ) -> None:
        #: The :func:`compact` job it makes the answer of.
        self.job = job
        self._part_items, self._tail_items, self._step = part_items, tail_items, step
        #: The list but its items (known once its head has come).
        self._rest: dict[str, Any] | None = None
        self._start = -1  # where the first item starts (-1: not known yet)
        self._pos = 0  # where the next item not delimited starts
        self._pattern = b""  # what a cut between two items looks like
        self._items: list[msgspec.Raw] = []  # delimited, in no part yet
        self._count = 0  # items delimited
        self._made = 0  # items in parts made
        self._tried = 0  # the body's length at the last step
        self._misses = 0
        #: Given up: the job is to be done on the whole body.
        self.failed = False
        #: Made whole (:meth:`finish` gave the last parts).
        self.done = False

    @property
    def rest(self) -> dict[str, Any]:
        """The list but its items (once :meth:`finish` gave its parts)."""
        assert self._rest is not None
        return self._rest

    @property
    def head(self) -> dict[str, Any] | None:
        """The list but its items, as read from before its items (``None``: not yet)."""
        return self._rest

    @property
    def count(self) -> int:
        """The list's items (once :meth:`finish` gave its parts)."""
        return self._count

    def step(self, body: bytearray) -> list[list[Any]]:
        """The parts that can be made of ``body`` so far (the body as it has come, each
        part a :func:`written` answer's buffers), none until :data:`STREAM_STEP` more bytes
        have come since the last step."""
        if self.failed or len(body) - self._tried < self._step:
            return []
        self._tried = len(body)
        try:
            self._delimit(body, len(body))
            return self._parts(final=False)
        except (NotCompact, TypeError):
            self.failed = True
            self._items = []
            return []

    def finish(self, body: bytearray | bytes) -> list[list[Any]] | None:
        """The last parts, ``body`` whole; ``None`` when the answer cannot be made so
        (:attr:`failed`)."""
        if not self.failed:
            try:
                if self._last(body):
                    last = self._parts(final=True)
                    self.done = True
                    return last
            except (NotCompact, TypeError):
                pass
        self.failed = True
        self._items = []
        return None

    def _head(self, body: bytearray | bytes, end: int) -> bool:
        """The list before its items read, once it has come (``False``: not yet)."""
        at = body.find(_ITEMS_OPEN, 0, min(end, _HEAD_MOST))
        if at < 0:
            if end >= _HEAD_MOST:
                raise NotCompact
            return False
        start = at + len(_ITEMS_OPEN)
        if end - start < 2:
            return False
        if body[start : start + 2] != b'{"':
            raise NotCompact  # no item, or whitespace: done on the whole body
        colon = body.find(b'":', start + 2, min(end, start + _KEY_MOST))
        if colon < 0:
            if end >= start + _KEY_MOST:
                raise NotCompact
            return False
        head = bytes(body[:start])
        try:
            utf8_checked(head)
            value = _read_list(head + b"]}")
        except (UnicodeDecodeError, msgspec.DecodeError, RecursionError):
            raise NotCompact from None
        if value.get("items") != [] or not value.keys() >= _HEAD_HOLDS:
            raise NotCompact  # (the list's fields after its items: the rest is not known)
        self._rest = {k: v for k, v in value.items() if k != "items"}
        self._pattern = b"}," + bytes(body[start : colon + 2])
        self._start = self._pos = start
        return True

    def _delimit(self, body: bytearray | bytes, end: int) -> None:
        """The items of ``body[:end]`` delimited up to the last place to cut it."""
        if self._start < 0 and not self._head(body, end):
            return
        pos, pattern = self._pos, self._pattern
        cut = body.rfind(pattern, pos, end)
        for _ in range(_TRIES):
            if cut < pos:
                return
            if self._take(body, pos, cut + 1):
                self._pos = cut + 2
                return
            self._misses += 1
            if self._misses > _MISSES_MOST:
                raise NotCompact
            cut = body.rfind(pattern, pos, cut)

    def _take(self, body: bytearray | bytes, start: int, end: int) -> bool:
        """The items of ``body[start:end]``, if it is exactly items, one comma apart."""
        with memoryview(body) as view:
            framed = b"".join((b'{"items":[', view[start:end], b"]}"))
        try:
            utf8_checked(framed)
        except UnicodeDecodeError:
            raise NotCompact from None
        try:
            items = _read_list(framed).get("items")
        except (msgspec.DecodeError, RecursionError):
            return False
        if type(items) is not list or sum(map(len, items)) + len(items) - 1 != end - start:
            return False
        self._items += items
        self._count += len(items)
        return True

    def _last(self, body: bytearray | bytes) -> bool:
        """The last items delimited, ``body`` whole: what follows them is ``]}``."""
        end = len(body)
        if self._start < 0 and not self._head(body, end):
            return False
        self._delimit(body, end)
        while end > self._pos and body[end - 1] in _BLANK:
            end -= 1
        if end - 2 <= self._pos or body[end - 2 : end] != b"]}":
            return False
        return self._take(body, self._pos, end - 2)

    def _parts(self, *, final: bool) -> list[list[Any]]:
        """The parts of the items delimited that are sure to be parts of the answer
        (``final``: all of them, the body whole), as :func:`part_bounds` cuts them."""
        made: list[list[Any]] = []
        size = self._part_items
        if final:
            bounds = [
                b for b in part_bounds(self._count, size, self._tail_items) if b[0] >= self._made
            ]
            if not bounds or bounds[0][0] != self._made:
                raise NotCompact  # (cannot be: the parts made are the first of these)
        else:
            # a part of ``size`` is the answer's where another ``size`` follows it
            bounds = []
            at = self._made
            while at + 2 * size <= self._count:
                bounds.append((at, at + size))
                at += size
        if not bounds:
            return made
        rest, (api_version, kind, columns) = self._rest, self.job[1:]
        assert rest is not None
        for start, end in bounds:
            some = self._items[: end - start]
            del self._items[: end - start]
            made.append(written({**rest, "items": some}, api_version, kind, columns))
            self._made = end
        return made


class Sliced(bytes):
    """A :func:`written` answer read with its objects already apart (:func:`sliced`): the
    answer but its objects' JSON (its sections, the objects' one empty), and
    :attr:`objects`, the JSON of each, a ``bytes`` of its own."""

    objects: list[bytes]
    #: The parts after this one, when the answer came in parts (:func:`written_parts`):
    #: each a :class:`Sliced` answer of its own, as the worker gives them.
    more: Parts | None = None


class Parts(Protocol):
    """The parts of an answer after its first, as a list worker gives them (its pool's):
    iterated once; :meth:`close` when they are no longer wanted (the worker stopped)."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...


def sliced(data: Any, size: int) -> Sliced:
    """The :func:`written` answer that is the first ``size`` bytes of ``data`` (a buffer:
    the memory file a list worker wrote it into, mapped), each object's JSON copied out of
    it as a ``bytes`` of its own (one copy: the answer is not first copied whole), the
    rest as a :class:`Sliced`.  Made where the answer is read (a thread of the list-worker
    pool, off the event loop), so :func:`taken` only files the objects by key.

    Raises:
        ValueError: the answer's sections do not add up.
    """
    (n,) = _COUNT.unpack_from(data)
    sizes = array("Q")
    sizes.frombytes(data[_COUNT.size : _COUNT.size * (n + 1)])
    if n < 3 or _COUNT.size * (n + 1) + sum(sizes) != size:
        raise ValueError("a compact answer whose sections do not add up")
    head = _COUNT.size * (n + 1) + sizes[0] + sizes[1]
    spans = array("Q")
    spans.frombytes(data[head - sizes[1] : head])
    if sum(spans) != sizes[2]:
        raise ValueError("a compact answer whose sections do not add up")
    ends = list(accumulate(spans, initial=head))
    # a slice of the mapping is a ``bytes`` of its own, made in C; a few hundred at a time,
    # so that the thread this runs in lets the event loop have the interpreter between
    objects: list[bytes] = []
    cut = data.__getitem__
    for start in range(0, len(spans), SLICED_STEP):
        objects += map(
            cut,
            map(
                slice, ends[start : start + SLICED_STEP], ends[start + 1 : start + 1 + SLICED_STEP]
            ),
        )
    found = Sliced(data[:head] + data[head + sizes[2] : size])
    found.objects = objects
    return found


def sections(answer: bytes | memoryview) -> list[memoryview]:
    """A :func:`written` answer's sections, as views of it (no copy); of a :class:`Sliced`
    answer, its objects' JSON section is empty (its objects are apart)."""
    view = memoryview(answer)
    (count,) = _COUNT.unpack_from(view)
    sizes = array("Q")
    sizes.frombytes(view[_COUNT.size : _COUNT.size * (count + 1)])
    if isinstance(answer, Sliced) and count >= 3:
        sizes[2] = 0
    at = _COUNT.size * (count + 1)
    found = []
    for size in sizes:
        found.append(view[at : at + size])
        at += size
    if at != len(view):
        raise ValueError("a compact answer whose sections do not add up")
    return found


#: What is made of the objects of a list read with columns as they are taken in, a step at
#: a time (between two of the worker's parts, not after the last): ``make(keys, raws)``, one
#: thing per object (:attr:`Columns.made`).  Given with the columns by whoever asks for them
#: (the view cache, whose store makes its entries: ``gateway.core.views.store``), through the
#: hub's :class:`~gateway.core.watch.hub.WatchStart` and the watcher to :func:`taken`.
Maker = Callable[[list[str], list[bytes]], list[Any]]


class Columns:
    """Values at field paths of a list's objects, found by the identity of each object's
    JSON (the ``bytes`` the hub keeps): whoever holds the very same ``bytes`` object holds
    the object these values were read from.

    Attributes:
        raws: the objects' JSON, in the list's order (held: an ``id`` stays theirs).
        at: a position in :attr:`raws` by the ``id`` of its ``bytes``.
        values: by column (:data:`ColumnSpec`), each object's value (:func:`value_at`).
    """

    __slots__ = ("at", "made", "make", "raws", "values")

    def __init__(self, specs: Sequence[ColumnSpec], make: Maker | None = None) -> None:
        self.raws: list[bytes] = []
        self.at: dict[int, int] = {}
        self.values: dict[ColumnSpec, list[tuple[int, Any]]] = {spec: [] for spec in specs}
        #: What is made of each object as it is taken in (``None``: nothing).
        self.make = make
        #: What :attr:`make` made of each object as it was taken in, in :attr:`raws`' order
        #: (``None``: nothing made; taken by whoever uses it, and then ``None``).
        self.made: list[Any] | None = [] if make is not None else None

    def of(self, raw: bytes) -> int | None:
        """The position of the object whose JSON is ``raw`` (this very object), if any."""
        at = self.at.get(id(raw))
        return at if at is not None and self.raws[at] is raw else None


async def taken(
    answer: bytes,
    specs: Sequence[ColumnSpec],
    found: dict[str, bytes],
    columns: Columns | None = None,
    make: Maker | None = None,
) -> tuple[dict[str, Any], Columns | None]:
    """A :func:`written` answer taken in: each object's JSON put into ``found`` by its key
    (a ``bytes`` of its own: copied out of the answer, or as a :class:`Sliced` answer holds
    it), :data:`STEP` objects per event-loop step; the list without its items, and the
    values at ``specs`` (added to ``columns`` when given, the values of an earlier page;
    ``None``: none asked; new ones with ``make``, :attr:`Columns.make`).  An answer in
    parts (:attr:`Sliced.more`) is taken in part by part as they come (the parts stopped if
    this ends early).

    Raises:
        ValueError: the answer does not hold what ``specs`` and its lengths say.
    """
    if columns is None and specs:
        columns = Columns(specs, make)
    more = answer.more if isinstance(answer, Sliced) else None
    if more is None:
        return await _taken_one(answer, specs, found, columns), columns
    try:
        rest = await _taken_one(answer, specs, found, columns)
        del answer
        async for part in more:
            await _taken_one(part, specs, found, columns)
            del part
    finally:
        more.close()
    return rest, columns


async def _taken_one(
    answer: bytes, specs: Sequence[ColumnSpec], found: dict[str, bytes], columns: Columns | None
) -> dict[str, Any]:
    """One answer (or part) of :func:`taken`."""
    parts = sections(answer)
    rest: dict[str, Any] = orjson.loads(parts[0])
    spans = array("Q")
    spans.frombytes(parts[1])
    blob = parts[2]
    n = len(spans)
    chunks = -(-n // CHUNK)
    apart = answer.objects if isinstance(answer, Sliced) else None
    if len(parts) != 3 + chunks * (1 + len(specs)) or (
        sum(spans) != len(blob)
        if apart is None
        else len(apart) != n or list(map(len, apart)) != spans.tolist()
    ):
        raise ValueError("a compact answer that does not hold what it says")
    # each object's bounds in ``answer`` itself: a slice of a ``bytes`` is a ``bytes`` of
    # its own, made in C (the objects of a step taken by a few C-level passes); a
    # :class:`Sliced` answer's objects are apart already (made off the event loop)
    base = len(answer) - len(blob) - sum(map(len, parts[3:]))
    ends = list(accumulate(spans, initial=base))
    cut = answer if isinstance(answer, bytes) else bytes(answer)
    taken_keys = 0
    had = 0 if columns is None else len(columns.raws)
    for c in range(chunks):
        keys: list[str] = pickle.loads(parts[3 + c])
        if columns is not None:
            for k, spec in enumerate(specs):
                columns.values[spec].extend(pickle.loads(parts[3 + chunks * (1 + k) + c]))
        for first in range(0, len(keys), STEP):
            start = taken_keys + first
            some = keys[first : first + STEP]
            if apart is not None:
                datas = apart[start : start + len(some)]
            else:
                bounds = map(
                    slice,
                    ends[start : start + len(some)],
                    ends[start + 1 : start + 1 + len(some)],
                )
                datas = list(map(cut.__getitem__, bounds))
            found.update(zip(some, datas, strict=True))
            if columns is not None:
                columns.at.update(zip(map(id, datas), count(len(columns.raws))))
                columns.raws.extend(datas)
                if columns.made is not None and columns.make is not None:
                    columns.made += columns.make(some, datas)
            del datas
            await asyncio.sleep(0)
        taken_keys += len(keys)
    if taken_keys != n or (columns is not None and len(columns.raws) < had + n):
        raise ValueError("a compact answer that does not hold what it says")
    return rest
