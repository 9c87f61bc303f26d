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
    "TAIL_ITEMS",
    "ColumnSpec",
    "Columns",
    "Maker",
    "Sliced",
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


def part_bounds(n: int) -> list[tuple[int, int]]:
    """The items (start, end) of each part of an answer of ``n`` items in parts: parts of
    :data:`PART_ITEMS`, the first always one (all of them if fewer), then those of the
    last :data:`PART_ITEMS` items in parts of :data:`TAIL_ITEMS`; one part if none."""
    tail = max(PART_ITEMS, n - PART_ITEMS)  # where the small parts start
    bounds: list[tuple[int, int]] = []
    start = 0
    while start < n or not bounds:
        size = PART_ITEMS if start + PART_ITEMS <= tail else TAIL_ITEMS
        bounds.append((start, min(n, start + size)))
        start += size
    return bounds


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
