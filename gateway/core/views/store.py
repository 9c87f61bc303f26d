"""The in-memory store of one view cache: objects in slots, with columns of sort values.

Measured on 30,000 realistic pods (``tests/bench/realistic.py``), what evaluating a view
costs is reading field values out of 30,000 scattered objects, not comparing them: a sort
that calls a Python function per object to read ``metadata.creationTimestamp`` is several
times slower than one over a list of the values.  So the store keeps, for every field path
a view has used (at most :data:`MAX_COLUMNS`), a *column*: the field's sort value
(:func:`sort_value`) of each slot, kept up to date as events arrive.  New columns are built
together, :data:`BUILD_BYTES` of JSON decoded per event-loop step.  A column a view sorts by (one
key) also has an *index*: its occupied slots in ascending (value, namespace, name) order,
sorted once in a worker thread and then kept by every put and delete (a bisection and a
list insert each), so a page of a sorted view is a walk of it from the cursor, not a sort
of 30,000.  A snapshot copies the slot list
and the columns it needs (a copy of a list of references: a fraction of a millisecond for
30,000), so evaluation (:mod:`gateway.core.views.evaluate`) runs in a worker thread on
data that no event changes under it.

Each object is kept as its JSON, the very ``bytes`` the hub's compact state keeps
(:mod:`gateway.core.watch.compact`; a hub event carries them as ``raw``): one copy for the
hub and every cache of its watch, about 1x the JSON, where decoded Python objects cost about
5x and are millions of objects for the cyclic collector to walk.  What views read of every
object lives in the columns (Python values, built by decoding each object once for all
the columns a view asks for at once, a slice of :data:`BUILD_BYTES` per event-loop step);
an object itself is decoded only to answer (a page's items) or for what has no column (a
search's text, made once per object).  Measured (``tests/bench/bench_views.py``): the
process's memory after the first view of 30,000 pods, against the JSON of the cached
objects, BENCHMARKS.md's "Views".

SQLite (what Rancher's steve uses) was the other choice; the slots and columns share the
hub's JSON (no second copy, no serialisation per event), and a store with the same
snapshot interface can replace this one (a shared store for large fleets) without
touching evaluation.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import count
from operator import attrgetter, is_, itemgetter
from typing import Any, Final

from gateway.core.lists.compacting import Columns, value_at
from gateway.core.process.collector import HOLD
from gateway.core.support import deepjson
from gateway.core.views.grams import Grams, text_of
from gateway.core.views.spec import FieldPath
from gateway.core.watch.compact import encode

#: Field paths a store keeps columns for (the least recently used goes past it).
MAX_COLUMNS: Final = 16
#: JSON bytes decoded per event-loop step while new columns are filled (~1-2 ms).
BUILD_BYTES: Final = 512 * 1024
#: What an object whose values were read as it was listed counts for against
#: :data:`BUILD_BYTES` (its values copied, nothing decoded: ~8,000 per step).
LISTED_COST: Final = 64
#: Texts indexed per event-loop step while a column's bigrams are built (~0.5 ms of pod
#: names; 30,000 names take ~0.19 s of CPU in all, once per cache and column): a request
#: served meanwhile waits for a step at each of its turns of the loop.
GRAMS_STEP: Final = 128
#: The share of its objects' JSON a store's bigrams may take in all (the bench's 30,000 pod
#: names: 0.32); past it a column's bigrams are dropped (or their build given up) and
#: its views count the other way: long names of few other bytes cannot grow the cache
#: past its JSON's measure (a 250-character random name: ~16 KB of bigrams).
GRAMS_SHARE: Final = 0.5
#: A store of at least this many slots is frozen after new columns are filled
#: (:meth:`~gateway.core.process.collector.CollectorHold.settle`).
SETTLE_SLOTS: Final = 2000
_RAW: Final = attrgetter("raw")
_NAMES: Final = attrgetter("namespace", "name")
_FIRST: Final = itemgetter(0)
_SECOND: Final = itemgetter(1)
_NUMBER_TYPES: Final = frozenset((int, float))


def _same_objects(slots: Sequence[Entry | None], raws: Sequence[bytes]) -> bool:
    """Whether ``slots`` hold the very JSON ``bytes`` of ``raws``, one each, in order (a
    few C-level passes: no entry is read in Python)."""
    if len(slots) != len(raws) or None in slots:
        return False
    return all(map(is_, map(_RAW, slots), raws))


class Entry:
    """One stored object: its JSON, its (namespace, name), a lazily made search text.

    ``Entry(obj)`` is the entry of a decoded object (encoded here; ``size`` is ignored, the
    size is its JSON's); :meth:`keyed` and :meth:`of` make one from JSON the caller has.
    """

    __slots__ = ("name", "namespace", "raw", "text")

    def __init__(self, obj: dict[str, Any], size: int | None = None) -> None:
        self._set(obj, encode(obj))

    def _set(self, obj: dict[str, Any], raw: bytes) -> None:
        meta = obj.get("metadata")
        meta = meta if type(meta) is dict else {}
        self.namespace: str = meta.get("namespace") or ""
        self.name: str = meta.get("name") or ""
        #: The object's JSON (the hub's own ``bytes``, shared: read only).
        self.raw = raw
        #: The lower-cased search text, made on the first search.
        self.text: str | None = None

    @classmethod
    def of(cls, obj: dict[str, Any], raw: bytes | None = None) -> Entry:
        """The entry of a decoded object and its JSON ``raw`` (encoded here if ``None``)."""
        entry = cls.__new__(cls)
        entry._set(obj, raw if raw is not None else encode(obj))
        return entry

    @classmethod
    def keyed(cls, key: str, raw: bytes) -> Entry:
        """The entry of the JSON ``raw`` of the object at ``key`` (``namespace/name``, as
        the hub keys its state), without decoding it."""
        entry = cls.__new__(cls)
        entry.namespace, _, entry.name = key.partition("/")
        entry.raw = raw
        entry.text = None
        return entry

    @classmethod
    def all_keyed(cls, keys: list[str], raws: list[bytes]) -> list[Entry]:
        """:meth:`keyed` of each of ``keys`` and ``raws`` (made as a list worker's answer is
        taken in: the view cache's :class:`~gateway.core.watch.hub.WatchStart` names it)."""
        new = cls.__new__
        entries: list[Entry] = []
        add = entries.append
        for key, raw in zip(keys, raws, strict=True):
            entry = new(cls)
            entry.namespace, _, entry.name = key.partition("/")
            entry.raw = raw
            entry.text = None
            add(entry)
        return entries

    @property
    def size(self) -> int:
        """The bytes of its JSON (what the memory budget counts)."""
        return len(self.raw)

    @property
    def obj(self) -> dict[str, Any]:
        """The object, decoded anew from its JSON at each read (keep what you read)."""
        found: dict[str, Any] = deepjson.loads(self.raw)
        return found

    def search_text(self) -> str:
        text = self.text
        if text is None:
            meta = self.obj.get("metadata") or {}
            parts = [self.name, self.namespace]
            for key in ("labels", "annotations"):
                found = meta.get(key)
                if type(found) is dict:
                    parts.extend(f"{k}={v}" for k, v in found.items())
            text = self.text = "\n".join(parts).lower()
        return text


def label_path(key: str) -> FieldPath:
    """The path of the label ``key`` (``metadata.labels[key]``): a label selector's
    requirement reads the column of it, as a filter on a field reads the field's."""
    return FieldPath(f"metadata.labels.{key}", ("metadata", "labels", key), "string")


def sort_value(path: FieldPath, obj: Any) -> tuple[int, Any]:
    """The value at ``path`` as a view's order compares it: ``(0, "")`` when absent,
    ``(1, value)`` for a value of the field's type, ``(2, text)`` for anything else
    (:func:`~gateway.core.lists.compacting.value_at`, which a list worker reads with)."""
    return value_at(path.keys, path.kind, obj)


def _sort_keys(values: list[Any], slots: list[int]) -> Callable[[int], Any]:
    """The key of a sort of ``slots`` by their ``values`` (:func:`sort_value`'s pairs): the
    pair's value alone where every one of them has the same first element and a value of
    one kind (strings, or numbers: a sort of plain strings or floats is C's fast path,
    ~40 % quicker than of pairs for 30,000 timestamps), the same order; else the pair."""
    pairs = list(map(values.__getitem__, slots))  # (C-level passes: no Python per slot)
    if len(set(map(_FIRST, pairs))) == 1:
        kinds = set(map(type, map(_SECOND, pairs)))
        if len(kinds) == 1 or kinds <= _NUMBER_TYPES:
            bare: list[Any] = [None] * len(values)
            deque(map(bare.__setitem__, slots, map(_SECOND, pairs)), maxlen=0)
            return bare.__getitem__
    return values.__getitem__


def _keyer(
    values: list[tuple[int, Any] | None], names: list[tuple[str, str] | None]
) -> Callable[[int], tuple[Any, Any]]:
    """The order of an index: a slot's (sort value, (namespace, name))."""
    return lambda i: (values[i], names[i])


@dataclass(slots=True)
class Column:
    path: FieldPath
    values: list[tuple[int, Any] | None]
    #: Every slot has its value (else a builder is filling it).
    complete: bool = False
    #: Set once complete (or dropped): whoever waits for the builder.
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    #: The store generation of :attr:`copy`.
    copied_at: int = -1
    copy: list[tuple[int, Any] | None] | None = None
    #: The occupied slots in ascending (value, namespace, name) order, kept up to date by
    #: every put and delete once built (``None`` until then): a sort by this column is a
    #: walk of it.
    index: list[int] | None = None
    #: Slots changed while the index is being built (re-placed when it is in).
    dirty: set[int] | None = None
    #: The index as the last snapshot copied it, and the generation it was copied at.
    index_copy: tuple[int, list[int]] | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The store at one version: slots (``None`` where free), names, columns."""

    version: str
    generation: int
    slots: list[Entry | None]
    names: list[tuple[str, str] | None]
    columns: dict[tuple[str, ...], list[tuple[int, Any] | None]]
    #: Shared by every snapshot of this generation: what one evaluation computed of it
    #: that the next may reuse (the occupied slots in (namespace, name) order).
    memo: dict[str, Any]
    #: For the columns that have one, their index (:attr:`Column.index`) at this
    #: generation.
    indexes: dict[tuple[str, ...], list[int]] = field(default_factory=dict)
    #: For the text columns that have them built, their bigrams (the store's own, live:
    #: :meth:`Grams.count <gateway.core.views.grams.Grams.count>` reads them only at
    #: this snapshot's generation).
    grams: dict[tuple[str, ...], Grams] = field(default_factory=dict)

    @property
    def occupied(self) -> list[int]:
        """The occupied slots in slot order, computed once per generation."""
        found: list[int] | None = self.memo.get("occupied")
        if found is None:
            found = self.memo["occupied"] = [i for i, n in enumerate(self.names) if n is not None]
        return found

    @property
    def free(self) -> list[int]:
        """The free slots, computed once per generation."""
        found: list[int] | None = self.memo.get("free")
        if found is None:
            found = self.memo["free"] = [i for i, n in enumerate(self.names) if n is None]
        return found

    @property
    def by_name(self) -> list[int]:
        """The occupied slots in (namespace, name) order, computed once per generation."""
        found: list[int] | None = self.memo.get("by_name")
        if found is None:
            names = self.names
            found = [i for i, n in enumerate(names) if n is not None]
            key: Any = names.__getitem__
            found.sort(key=key)
            self.memo["by_name"] = found
        return found


class Store:
    """Objects by namespace/name in slots, with columns; see the module."""

    def __init__(self) -> None:
        self.slots: list[Entry | None] = []
        self.names: list[tuple[str, str] | None] = []
        self.index: dict[str, int] = {}
        self.free: list[int] = []
        self.columns: dict[tuple[str, ...], Column] = {}
        self.bytes = 0
        self.generation = 0
        #: Values read of the objects as the hub's list was made compact (by a list
        #: worker, :mod:`gateway.core.lists.compacting`), for the first columns' build.
        self.listed: Columns | None = None
        #: Objects whose column values were taken from :attr:`listed` (for tests).
        self.listed_taken = 0
        #: Entries taken as made when the list was taken in (``put_keyed``'s ``made``).
        self.made_taken = 0
        #: The bigrams of text columns (:mod:`gateway.core.views.grams`), built on demand
        #: (:meth:`ensure`'s ``texts``), kept by every put and delete.
        self.grams: dict[tuple[str, ...], Grams] = {}
        #: Bytes added to :attr:`bytes` outside put and delete (bigrams built or dropped),
        #: not yet taken by the cache's accounting (:meth:`take_grown`).
        self.grown = 0
        #: Texts indexed per event-loop step while bigrams are built.
        self.grams_step = GRAMS_STEP
        #: The builds of bigrams under way (:meth:`settled` waits for them).
        self.building: set[asyncio.Task[None]] = set()
        #: Text columns whose bigrams were asked once (built when asked again: a cache's
        #: first view, often its only one, is not slowed by their build).
        self.grams_asked: set[tuple[str, ...]] = set()
        #: Text columns whose bigrams went past :data:`GRAMS_SHARE` (not built again).
        self.grams_refused: set[tuple[str, ...]] = set()
        self._copied: (
            tuple[int, list[Entry | None], list[tuple[str, str] | None], dict[str, Any]] | None
        ) = None

    def __len__(self) -> int:
        return len(self.index)

    def put(self, key: str, entry: Entry, obj: dict[str, Any] | None = None) -> int:
        """Store (or replace) the object at ``key`` (``obj``: the entry's object decoded,
        when the caller has it; else it is decoded here if a column needs it); returns the
        bytes it adds."""
        added = entry.size
        slot = self.index.get(key)
        if slot is not None:
            self._unindex(slot)
        if slot is None:
            if self.free:
                slot = self.free.pop()
                self.slots[slot] = entry
                self.names[slot] = (entry.namespace, entry.name)
            else:
                slot = len(self.slots)
                self.slots.append(entry)
                self.names.append((entry.namespace, entry.name))
            self.index[key] = slot
        else:
            old = self.slots[slot]
            assert old is not None
            added -= old.size
            self.slots[slot] = entry
        names = self.names
        for column in self.columns.values():
            values = column.values
            if slot < len(values):
                if obj is None:
                    obj = entry.obj
                values[slot] = sort_value(column.path, obj)
            elif column.complete:
                if obj is None:
                    obj = entry.obj
                values.append(sort_value(column.path, obj))
            else:
                continue
            if column.index is not None:
                insort(column.index, slot, key=_keyer(values, names))
            elif column.dirty is not None:
                column.dirty.add(slot)
        if self.grams:
            added += self._regram(slot)
            added -= self._within_share(self.bytes + added)
        self.bytes += added
        self.generation += 1
        self._grams_at()
        return added

    def put_keyed(
        self, pairs: Sequence[tuple[str, bytes]], made: Sequence[Entry] | None = None
    ) -> int:
        """Store the objects of ``pairs`` ((namespace/name, JSON), as the hub's compact
        state keeps them: a snapshot's, :meth:`WatchSubscription.take_snapshot
        <gateway.core.watch.hub.WatchSubscription.take_snapshot>`) without decoding any: what
        :meth:`put` of :meth:`Entry.keyed` does for each, done in a few passes (the store
        the same after); returns the bytes they add.  The fast way only for keys not
        stored, into a store with no free slot and no column (a cache being filled);
        otherwise (or a key twice) one
        :meth:`put` each.  ``made``: the entries of ``pairs`` made already (their
        :meth:`Entry.all_keyed`, as the list was taken in), taken as they are when they
        hold the very JSON of ``pairs``, one each, in order (else made here)."""
        keys = list(map(itemgetter(0), pairs))
        if (
            self.columns
            or self.free
            or not self.index.keys().isdisjoint(keys)
            or len(set(keys)) != len(keys)
        ):
            return sum(self.put(key, Entry.keyed(key, raw)) for key, raw in pairs)
        entries_made = None if made is None else list(made)
        if entries_made is not None and _same_objects(
            entries_made, list(map(itemgetter(1), pairs))
        ):
            first = len(self.slots)
            self.index.update(zip(keys, count(first)))
            self.slots.extend(entries_made)
            self.names.extend(map(_NAMES, entries_made))
            added = sum(map(len, map(_RAW, entries_made)))
            self.made_taken += len(entries_made)
            self.bytes += added
            self.generation += 1
            return added
        new = Entry.__new__
        entries: list[Entry | None] = []
        names: list[tuple[str, str] | None] = []
        add_entry, add_name = entries.append, names.append
        added = 0
        for key, raw in pairs:
            namespace, _, name = key.partition("/")
            entry = new(Entry)
            entry.namespace, entry.name, entry.raw, entry.text = namespace, name, raw, None
            add_entry(entry)
            add_name((namespace, name))
            added += len(raw)
        first = len(self.slots)
        self.index.update(zip(keys, count(first)))
        self.slots.extend(entries)
        self.names.extend(names)
        self.bytes += added
        self.generation += 1
        return added

    def delete(self, key: str) -> int:
        """Remove the object at ``key``; returns the bytes it frees (0: not stored)."""
        slot = self.index.pop(key, None)
        if slot is None:
            return 0
        old = self.slots[slot]
        assert old is not None
        self._unindex(slot)
        self.slots[slot] = None
        self.names[slot] = None
        self.free.append(slot)
        for column in self.columns.values():
            if slot < len(column.values):
                column.values[slot] = None
        freed = old.size
        if self.grams:
            freed -= self._regram(slot)
            freed += self._within_share(self.bytes - freed)
        self.bytes -= freed
        self.generation += 1
        self._grams_at()
        return freed

    def _regram(self, slot: int) -> int:
        """Re-index ``slot``'s texts in the bigrams (after its columns changed); returns
        the bytes that adds (those of bigrams still being built are counted when built)."""
        grown = 0
        for keys, grams in self.grams.items():
            column = self.columns.get(keys)
            values = column.values if column is not None else ()
            text = text_of(values[slot]) if slot < len(values) else ""
            change = grams.replace(slot, text)
            if grams.built:
                grown += change
        return grown

    def _grams_bytes(self) -> int:
        """The bytes of the bigrams built (counted in :attr:`bytes`)."""
        return sum(g.bytes for g in self.grams.values() if g.built)

    def _within_share(self, total: int) -> int:
        """Drop built bigrams, largest first, while they are more than :data:`GRAMS_SHARE`
        of the JSON (``total``: the store's bytes with them); returns the bytes dropped."""
        dropped = 0
        grams = self._grams_bytes()
        while grams and grams > GRAMS_SHARE * (total - grams):
            keys = max(
                (k for k, g in self.grams.items() if g.built), key=lambda k: self.grams[k].bytes
            )
            size = self.grams.pop(keys).bytes
            self.grams_refused.add(keys)
            dropped += size
            grams -= size
        return dropped

    def _grams_at(self) -> None:
        """The bigrams built reflect the store's generation now."""
        for grams in self.grams.values():
            if grams.built:
                grams.at = self.generation

    def take_grown(self) -> int:
        """The bytes :attr:`bytes` grew by outside put and delete since last asked."""
        grown, self.grown = self.grown, 0
        return grown

    def _drop_grams(self, keys: tuple[str, ...]) -> None:
        grams = self.grams.pop(keys, None)
        if grams is not None and grams.built:
            self.bytes -= grams.bytes
            self.grown -= grams.bytes

    async def settled(self) -> None:
        """Once the builds of bigrams under way are done."""
        while self.building:
            await asyncio.gather(*self.building)

    async def _build_grams(self, column: Column) -> None:
        """The bigrams of a complete column's texts, :data:`GRAMS_STEP` slots per
        event-loop step (a put meanwhile re-indexes a slot the build has passed; the build
        reaches the others), with the collector held off as for a fill, and what it built
        settled after (frozen where the process is the gateway's own): a bigram's set of
        slots is a container as long as the column (30,000 slots for ``ap`` of ``app-...``
        names), and every young collection that found the sets still young walked all their
        entries (0.76 M for the bench's 30,000 pod names: 15 ms of one view's request)."""
        with HOLD.held():
            await self._build_grams_held(column)
        if len(column.values) >= SETTLE_SLOTS:
            HOLD.settle()

    async def _build_grams_held(self, column: Column) -> None:
        """See :meth:`_build_grams`."""
        keys = column.path.keys
        grams = self.grams[keys]
        while True:
            if self.columns.get(keys) is not column or self.grams.get(keys) is not grams:
                if self.grams.get(keys) is grams:
                    del self.grams[keys]
                return  # dropped meanwhile
            values, done = column.values, len(grams.texts)
            if done >= len(values):
                break
            grams.extend(map(text_of, values[done : done + self.grams_step]))
            built = self._grams_bytes()
            if grams.bytes + built > GRAMS_SHARE * (self.bytes - built):
                del self.grams[keys]  # past its share: its views count the other way
                self.grams_refused.add(keys)
                return
            await asyncio.sleep(0)
        grams.built = True
        grams.at = self.generation
        self.bytes += grams.bytes
        self.grown += grams.bytes

    def _unindex(self, slot: int) -> None:
        """Take an occupied slot out of the columns' indexes (before it changes)."""
        names = self.names
        for column in self.columns.values():
            index, values = column.index, column.values
            if index is not None and slot < len(values):
                key = _keyer(values, names)
                at = bisect_left(index, key(slot), key=key)
                if at < len(index) and index[at] == slot:
                    del index[at]
                else:  # not where its value says (cannot happen): the slow way
                    index.remove(slot)
            elif column.dirty is not None:
                column.dirty.add(slot)

    async def _build_index(self, column: Column) -> None:
        """Sort the column's occupied slots in a worker thread (keys frozen when taken),
        then re-place on the event loop the slots that changed meanwhile."""
        dirty = column.dirty = set()
        values, names = list(column.values), list(self.names)  # as they stand now

        def sort() -> list[int]:
            found = [i for i, n in enumerate(names) if n is not None]
            found.sort(key=names.__getitem__)  # type: ignore[arg-type]
            found.sort(key=_sort_keys(values, found))  # stable: ties by name
            return found

        try:
            ordered = await asyncio.to_thread(sort)
        finally:
            column.dirty = None
        if self.columns.get(column.path.keys) is not column:
            return  # dropped meanwhile
        index = [i for i in ordered if i not in dirty] if dirty else ordered
        values, names = column.values, self.names
        key = _keyer(values, names)
        for i in dirty:
            if i < len(names) and names[i] is not None and i < len(values):
                insort(index, i, key=key)
        column.index = index

    def clear(self) -> None:
        for task in self.building:
            task.cancel()
        self.__init__()  # type: ignore[misc]

    async def ensure(
        self,
        paths: Iterable[FieldPath],
        indexed: Iterable[FieldPath] | None = None,
        texts: Iterable[FieldPath] = (),
    ) -> None:
        """Columns for ``paths``, built now if new (each object decoded once for all the
        new ones, :data:`BUILD_BYTES` of JSON per event-loop step), with an index for those
        of ``indexed`` (default: every one), sorted now if they have none, and the bigrams
        of those of ``texts`` (:mod:`gateway.core.views.grams`), whose build starts now if
        they have none and were asked before (in the background: no caller waits for it,
        views count the other way meanwhile; :meth:`settled`)."""
        paths = list(paths)
        grammed = {p.keys for p in texts}
        wanted = {p.keys for p in (paths if indexed is None else indexed)}
        new: list[Column] = []
        existing: list[Column] = []
        for path in paths:
            column = self.columns.get(path.keys)
            if column is not None:
                self.columns[path.keys] = self.columns.pop(path.keys)  # most recent last
                existing.append(column)
                continue
            column = Column(path, [])
            self.columns[path.keys] = column
            new.append(column)
            while len(self.columns) > MAX_COLUMNS:
                oldest = next(iter(self.columns))
                dropped = self.columns.pop(oldest)
                self._drop_grams(oldest)
                dropped.complete = True  # a builder of it stops
                dropped.finished.set()
        if new:
            await self._fill(new)
            for column in new:
                column.complete = True
                column.finished.set()
        for column in existing:
            await column.finished.wait()  # another caller may be building it
        for column in (*new, *existing):
            if (
                column.path.keys in wanted
                and column.index is None
                and column.dirty is None
                and self.columns.get(column.path.keys) is column
            ):
                await self._build_index(column)
        for column in (*new, *existing):
            keys = column.path.keys
            if (
                keys not in grammed
                or keys in self.grams
                or keys in self.grams_refused
                or self.columns.get(keys) is not column
            ):
                continue
            if keys not in self.grams_asked:  # built when asked again
                self.grams_asked.add(keys)
                continue
            self.grams[keys] = Grams()  # taken: the next callers start no other
            task = asyncio.get_running_loop().create_task(self._build_grams(column))
            self.building.add(task)
            task.add_done_callback(self.building.discard)

    async def _fill(self, columns: list[Column]) -> None:
        """Fill new columns together: each object decoded once for all of them, a slice of
        :data:`BUILD_BYTES` of JSON per event-loop step (the decoded objects freed at once,
        the collector held off within a step).  Objects put meanwhile are filled in as the
        build reaches them; a column dropped meanwhile (its ``complete`` set) is left."""
        with HOLD.held():  # a value per object and column: no collection in between
            await self._fill_held(columns)
        self.listed = None  # one build takes them (later columns decode)
        if len(self.slots) >= SETTLE_SLOTS:
            HOLD.settle()  # frozen where the process is the gateway's own

    async def _fill_held(self, columns: list[Column]) -> None:
        """See :meth:`_fill`.  An object whose very JSON (the same ``bytes``) a list worker
        read the values of as the hub listed it (:attr:`listed`) takes them, undecoded,
        when every column being built has them."""
        loads = deepjson.loads
        while True:
            live = [c for c in columns if not c.complete]
            if not live:
                return
            slots = self.slots
            done = len(live[0].values)
            if done >= len(slots):
                return
            listed = self.listed
            read = None
            if listed is not None:
                found = [listed.values.get((c.path.keys, c.path.kind)) for c in live]
                if all(v is not None for v in found):
                    read = list(zip(live, found, strict=True))
            if read is not None and done == 0 and _same_objects(slots, listed.raws):  # type: ignore[union-attr]
                # the very objects listed, in the list's order (a cache just filled from
                # the hub's snapshot): each column is the values read, in a step
                for c, values in read:
                    c.values.extend(values)  # type: ignore[arg-type]
                self.listed_taken += len(slots)
                return
            budget = BUILD_BYTES
            while done < len(slots) and budget > 0:
                e = slots[done]
                if e is None:
                    for c in live:
                        c.values.append(None)
                else:
                    raw = e.raw
                    at = None if read is None else listed.of(raw)  # type: ignore[union-attr]
                    if at is not None:
                        budget -= LISTED_COST
                        self.listed_taken += 1
                        for c, values in read:  # type: ignore[union-attr]
                            c.values.append(values[at])  # type: ignore[index]
                    else:
                        budget -= len(raw)
                        obj = loads(raw)
                        for c in live:
                            c.values.append(sort_value(c.path, obj))
                done += 1
            if done < len(self.slots):
                await asyncio.sleep(0)

    def snapshot(self, version: str, paths: Iterable[FieldPath]) -> Snapshot:
        """The store now, with the columns of ``paths`` that are complete (:meth:`ensure`
        them first; one dropped meanwhile is left out, and evaluation reads the objects)."""
        generation = self.generation
        copied = self._copied
        if copied is None or copied[0] != generation:
            copied = self._copied = (generation, list(self.slots), list(self.names), {})
        columns = {}
        indexes: dict[tuple[str, ...], list[int]] = {}
        grams: dict[tuple[str, ...], Grams] = {}
        for path in paths:
            column = self.columns.get(path.keys)
            if column is None or not column.complete or len(column.values) != len(self.slots):
                continue  # dropped or being built: evaluation reads the objects instead
            if column.copy is None or column.copied_at != generation:
                column.copy = list(column.values)
                column.copied_at = generation
            columns[path.keys] = column.copy
            if column.index is not None:
                if column.index_copy is None or column.index_copy[0] != generation:
                    column.index_copy = (generation, list(column.index))
                indexes[path.keys] = column.index_copy[1]
            found = self.grams.get(path.keys)
            if found is not None and found.built:
                grams[path.keys] = found
        return Snapshot(
            version, generation, copied[1], copied[2], columns, copied[3], indexes, grams
        )
