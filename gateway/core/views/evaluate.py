"""Evaluating a view: pure functions of (a store snapshot, a spec).

Evaluation is done in C-level pieces wherever it can be: the filter becomes one byte per
slot (a mask, :mod:`gateway.core.views.columns`: a substring marked in a column's texts
joined, a condition tested once per distinct value of its column and the answers
translated over the column's codes, masks combined by integer ``&``/``|``), the total is
counted in the mask, counts grouped by a field are counted in its codes with the mask
applied, and a page of a view sorted by one key is the index of that key (kept by the
store) walked from the cursor through ``itertools.compress``, so no Python code runs per
object.

Nothing here awaits or touches the cache: :func:`order` takes a
:class:`~gateway.core.views.store.Snapshot` (the objects at one resourceVersion, with
columns of sort values) and a :class:`~gateway.core.views.spec.ViewSpec` and returns the
matching objects in the view's order; :func:`page` cuts a page of it at a cursor;
:func:`counts` groups the matching objects by a field.  A live view (a later step) reruns
the same functions per batch of changes; the cache runs them in a worker thread, or on
the event loop once one of the same shape (:func:`shape`) was measured to take under 2 ms
at that generation (:func:`gateway.core.views.cache._evaluate`).

Order: each sort key compares ``(rank, value)`` (:func:`~gateway.core.views.store.sort_value`):
rank 0 for an absent value (first when ascending, last when descending), 1 for a value of
the field's type, 2 for a value of another type (compared as text); ties are broken by
(namespace, name) ascending, so the order is total and a cursor (the position of the
page's last item) names one place in it: a page boundary does not move when objects are
added or removed before it.
"""

from __future__ import annotations

import functools
import re
import sys
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, compress, groupby, islice, repeat
from operator import add, itemgetter
from typing import Annotated, Any, Final, Literal

import msgspec

from gateway.core.lists import projections
from gateway.core.lists.projections import Spec
from gateway.core.support import deepjson
from gateway.core.views import columns
from gateway.core.views.spec import (
    AllOf,
    AnyOf,
    Condition,
    FieldPath,
    FieldRequirement,
    LabelRequirement,
    Node,
    NoneOf,
    Position,
    SortKey,
    ViewSpec,
    encode_cursor,
)
from gateway.core.views.store import Entry, Snapshot, label_path, sort_value

#: A test of one slot of a snapshot.
Predicate = Callable[[int], bool]


def paths_of(spec: ViewSpec) -> list[FieldPath]:
    """The field paths a view reads: sort keys first, then its filter's."""
    found = [k.path for k in spec.sort]

    def walk(node: Node | None) -> None:
        if isinstance(node, AllOf | AnyOf):
            for part in node.parts:
                walk(part)
        elif isinstance(node, NoneOf):
            walk(node.part)
        elif isinstance(node, Condition | FieldRequirement):
            found.append(node.path)
        elif isinstance(node, LabelRequirement):
            found.append(label_path(node.key))

    walk(spec.filter)
    unique: dict[tuple[str, ...], FieldPath] = {}
    for path in found:
        unique.setdefault(path.keys, path)
    return list(unique.values())


def shape(spec: ViewSpec) -> tuple[Any, ...]:
    """What the cost of evaluating a view depends on, short of its values: the sort, the
    filter's tree with each node's path and op, whether it searches (a view of the same
    shape at the same generation reads the same structures, built by the first)."""

    def walk(node: Node) -> Any:
        if isinstance(node, AllOf | AnyOf):
            return (isinstance(node, AllOf), tuple(walk(p) for p in node.parts))
        if isinstance(node, NoneOf):
            return ("not", walk(node.part))
        if isinstance(node, Condition):
            empty = node.op in ("contains", "prefix") and node.values[0] == ""
            return (node.path.kind, node.path.keys, node.op, empty)
        if isinstance(node, LabelRequirement):
            return ("label", node.key, node.op)
        return ("field", node.path.kind, node.path.keys)

    return (
        tuple((k.path.keys, k.descending) for k in spec.sort),
        None if spec.search is None else spec.search == "",
        None if spec.filter is None else walk(spec.filter),
    )


def column(snap: Snapshot, path: FieldPath) -> list[tuple[int, Any] | None]:
    """The sort values of ``path`` by slot: the snapshot's column, else read now."""
    found = snap.columns.get(path.keys)
    if found is None:
        found = [None if e is None else sort_value(path, e.obj) for e in snap.slots]
        snap.columns[path.keys] = found
    return found


# -- the filter ------------------------------------------------------------------------------


def _value(t: tuple[int, Any] | None) -> Any:
    """A column's value as the filter compares it (``None``: absent)."""
    return None if t is None or t[0] == 0 else t[1]


def _compare(op: str, have: Any, want: Any) -> bool:
    if type(have) is not type(want) and not (
        type(have) in (int, float) and type(want) in (int, float)
    ):
        return False
    if op == "lt":
        return bool(have < want)
    if op == "lte":
        return bool(have <= want)
    if op == "gt":
        return bool(have > want)
    return bool(have >= want)


def _same(have: Any, want: Any) -> bool:
    if type(want) is bool or type(have) is bool:
        return type(have) is type(want) and have == want
    return bool(have == want)


def predicate(node: Node, snap: Snapshot) -> Predicate:
    """The filter tree as a test of a slot."""
    if isinstance(node, AllOf):
        parts = [predicate(p, snap) for p in node.parts]
        return lambda i: all(p(i) for p in parts)
    if isinstance(node, AnyOf):
        parts = [predicate(p, snap) for p in node.parts]
        return lambda i: any(p(i) for p in parts)
    if isinstance(node, NoneOf):
        inner = predicate(node.part, snap)
        return lambda i: not inner(i)
    if isinstance(node, LabelRequirement):
        return _label(node, snap)
    if isinstance(node, FieldRequirement):
        col, equal, value = column(snap, node.path), node.equal, node.value

        def by_field(i: int) -> bool:
            t = col[i]
            text = "" if t is None or t[0] == 0 else _text(t[1])
            return (text == value) is equal

        return by_field
    assert isinstance(node, Condition)
    return _condition(node, column(snap, node.path))


def _text(value: Any) -> str:
    if type(value) is bool:
        return "true" if value else "false"
    return value if type(value) is str else str(value)


def _label(req: LabelRequirement, snap: Snapshot) -> Predicate:
    """A label selector's requirement, read from the label's column (rank 1: a text value;
    a label's value is always text, so rank 0 is an absent label)."""
    return _label_test(req, column(snap, label_path(req.key)))


def _label_test(req: LabelRequirement, col: list[tuple[int, Any] | None]) -> Predicate:
    """:func:`_label` over a given column (the label's, or its distinct values)."""
    values = req.values

    def label(i: int) -> Any:
        t = col[i]
        return t[1] if t is not None and t[0] == 1 else None

    if req.op in ("=", "in"):
        return lambda i: label(i) in values
    if req.op in ("!=", "notin"):
        return lambda i: label(i) not in values

    def has(i: int) -> bool:
        t = col[i]
        return t is not None and t[0] != 0

    if req.op == "exists":
        return has
    return lambda i: not has(i)


def _condition(c: Condition, col: list[tuple[int, Any] | None]) -> Predicate:
    op, values = c.op, c.values
    if op == "exists":
        wanted = values[0]
        return lambda i: (_value(col[i]) is not None) is wanted
    if op == "in":
        members = values
        return lambda i: any(_same(_value(col[i]), v) for v in members)
    if op == "notIn":
        members = values
        return lambda i: not any(_same(_value(col[i]), v) for v in members)
    want = values[0]
    if op == "eq":
        if type(want) is str:
            return lambda i: (t := col[i]) is not None and t[0] != 0 and t[1] == want
        return lambda i: _same(_value(col[i]), want)
    if op == "ne":
        if type(want) is str:
            return lambda i: not ((t := col[i]) is not None and t[0] != 0 and t[1] == want)
        return lambda i: not _same(_value(col[i]), want)
    if op == "prefix":
        return lambda i: (t := col[i]) is not None and t[0] == 1 and t[1].startswith(want)
    if op == "contains":
        return lambda i: (t := col[i]) is not None and t[0] == 1 and want in t[1]
    return lambda i: (v := _value(col[i])) is not None and _compare(op, v, want)


#: A filter's result by slot: whether the slot's object is selected (free slots: anything).
Mask = columns.Mask


def _texts(snap: Snapshot, path: FieldPath) -> list[str]:
    """A column's text values by slot (``""``: absent, or not text of the field's type),
    once per snapshot generation: substring and prefix tests then run over plain strings."""
    memo_key = f"texts:{'.'.join(path.keys)}"
    found: list[str] | None = snap.memo.get(memo_key)
    if found is None:
        col = column(snap, path)
        found = [t[1] if t is not None and t[0] == 1 and type(t[1]) is str else "" for t in col]
        snap.memo[memo_key] = found
    return found


def _having(snap: Snapshot, memo_key: str, texts: list[str], want: str, prefix: bool) -> Mask:
    """Which of ``texts`` contain (or start with) the non-empty ``want``: the texts joined
    as UTF-8 and marked in C (:func:`gateway.core.views.columns.having`), else (a text or
    ``want`` holding the separator or the marker) one C-level ``map`` over them."""
    data = columns.joined(snap, memo_key, texts)
    if data is not None:
        found = columns.having(data, len(texts), want, prefix)
        if found is not None:
            return found
    test = str.startswith if prefix else str.__contains__
    return columns.of_bools(map(test, texts, repeat(want)))


def _by_codes(node: Node, snap: Snapshot) -> Mask | None:
    """The mask of a condition or requirement from its column's codes (the test run once
    per distinct value, :mod:`gateway.core.views.columns`); ``None`` where that does not
    apply (the caller tests each slot)."""
    if isinstance(node, Condition):
        found = columns.codes(snap, node.path, column(snap, node.path))
        by_value = columns.by_value(found, _condition(node, found.keys))
        if by_value is not None or node.op not in ("eq", "ne", "in", "notIn"):
            return by_value
        # many distinct values: the keys equal to the wanted values (a rank-2 value is
        # text, which equals only a text)
        wanted = [(r, v) for v in node.values for r in ((1, 2) if type(v) is str else (1,))]
        chosen = found.members(wanted)
        return chosen if node.op in ("eq", "in") else columns.negate(chosen)
    if isinstance(node, LabelRequirement):
        path = label_path(node.key)
        found = columns.codes(snap, path, column(snap, path))
        members: Mask | None = columns.by_value(found, _label_test(node, found.keys))
        if members is not None or node.op in ("exists", "!"):
            return members
        # many distinct values: a label's value is text (rank 1) or absent
        members = found.members((1, v) for v in node.values)
        return members if node.op in ("=", "in") else columns.negate(members)
    if isinstance(node, FieldRequirement) and columns.exact_classes(node.path):
        found = columns.codes(snap, node.path, column(snap, node.path))
        equal, value = node.equal, node.value

        def matches(k: int) -> bool:
            t = found.keys[k]
            text = "" if t is None or t[0] == 0 else _text(t[1])
            return (text == value) is equal

        return columns.by_value(found, matches)
    return None


def mask(node: Node, snap: Snapshot) -> Mask:
    """The filter tree evaluated over every slot at once: each condition a C-level pass
    (texts marked in their joined bytes, a column's codes translated, a ``map``), the
    tree combined by integer ``&``/``|`` over the masks (no Python call per object)."""
    n = len(snap.slots)
    if isinstance(node, AllOf | AnyOf):
        parts = [mask(p, snap) for p in node.parts]
        if not parts:
            return columns.full(n, isinstance(node, AllOf))
        return columns.combine(parts, isinstance(node, AllOf))
    if isinstance(node, NoneOf):
        return columns.negate(mask(node.part, snap))
    if isinstance(node, Condition) and node.op in ("contains", "prefix"):
        want = node.values[0]
        if type(want) is str and want:
            # absent values are "" here, which a non-empty text neither contains nor starts
            texts = _texts(snap, node.path)
            name = ".".join(node.path.keys)
            return _having(snap, name, texts, want, node.op == "prefix")
    found = _by_codes(node, snap)
    if found is not None:
        return found
    test = predicate(node, snap)
    return columns.of_bools(map(test, range(n)))


def _search_texts(snap: Snapshot) -> list[str]:
    """Every slot's search text, once per generation (each entry keeps its own besides)."""
    texts: list[str] | None = snap.memo.get("search")
    if texts is None:
        texts = snap.memo["search"] = [e.search_text() if e is not None else "" for e in snap.slots]
    return texts


def selected(snap: Snapshot, spec: ViewSpec) -> Mask | None:
    """The slots the spec's filter and search select (``None``: every slot)."""
    found: Mask | None = None
    if spec.search is not None:
        texts = _search_texts(snap)
        if spec.search:
            found = _having(snap, "\nsearch", texts, spec.search, False)
        else:
            found = columns.full(len(texts), True)
    if spec.filter is not None:
        by_filter = mask(spec.filter, snap)
        found = by_filter if found is None else columns.combine([found, by_filter], True)
    return found


def selected_slots(snap: Snapshot, spec: ViewSpec) -> list[int]:
    """The slots the spec's filter and search select, in no particular order."""
    occupied = snap.occupied
    found = selected(snap, spec)
    if found is None:
        return occupied
    return list(compress(occupied, map(found.__getitem__, occupied)))


def matching(snap: Snapshot, spec: ViewSpec) -> list[int]:
    """The slots the spec's filter and search select, in (namespace, name) order."""
    found = selected(snap, spec)
    by_name = snap.by_name
    if found is None:
        return by_name
    return list(compress(by_name, map(found.__getitem__, by_name)))


# -- order, page, counts ---------------------------------------------------------------------


class Ordered:
    """The matching slots of one snapshot in a view's order.

    With one sort key whose column has an index (:attr:`Snapshot.indexes`), or none, the
    order is not computed: a page walks the index from its cursor (found by bisection),
    skipping what the filter does not select, until the page is full; :attr:`total` is the
    number of selected slots.  Otherwise (several keys, an index not built yet) the
    selected slots are sorted once, as :attr:`slots`.
    """

    __slots__ = (
        "_slots",
        "decoded",
        "finder",
        "index",
        "kept",
        "mask",
        "snapshot",
        "sort",
        "total",
    )

    def __init__(
        self,
        snapshot: Snapshot,
        sort: tuple[SortKey, ...],
        slots: list[int] | None = None,
        *,
        index: list[int] | None = None,
        mask: Mask | None = None,
        finder: Finder | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.sort = sort
        self._slots = slots
        #: The index walked (ascending by the single key, then namespace and name).
        self.index = index
        self.mask = mask
        #: The view's one substring test over the texts in the order of its line (instead
        #: of a mask): a page is the first matches from its cursor on.
        self.finder = finder
        #: The last page cut of it (:func:`page`), by what it was cut at, for the next
        #: callers of the same page.
        self.kept: tuple[tuple[Any, ...], Page] | None = None
        #: Objects decoded to answer its pages (counted: a shared page decodes none).
        self.decoded = 0
        if slots is not None:
            self.total = len(slots)
        elif finder is not None:
            self.total = finder.count()
        elif mask is None:
            self.total = len(index or ())
        else:
            assert index is not None
            # free slots may be selected (``not``...): they are not in the index
            self.total = mask.count(1) - sum(map(mask.__getitem__, snapshot.free))

    @property
    def slots(self) -> list[int]:
        """Every selected slot in order (made on first use by a walk)."""
        found = self._slots
        if found is None:
            found = self._slots = list(self.walk(None))
        return found

    def position(self, j: int) -> Position:
        """The position of the ``j``-th item of the order (what its cursor holds)."""
        return self.position_of(self.slots[j])

    def position_of(self, i: int) -> Position:
        """The position of slot ``i`` (what its cursor holds)."""
        snap = self.snapshot
        name = snap.names[i]
        assert name is not None
        return (*(column(snap, k.path)[i] for k in self.sort), *name)

    def positions_of(self, slots: list[int]) -> list[Position]:
        """The positions of ``slots`` (:meth:`position_of` of each, the columns looked up
        once)."""
        return _positions_of(self.positions_at(slots))

    def positions_at(self, slots: list[int]) -> PositionsAt:
        """What the positions of ``slots`` are read from (:func:`_positions_of`): the sort's
        columns and the names, of the snapshot, not the order (a page holding it holds
        neither the order nor its last page)."""
        snap = self.snapshot
        return [column(snap, k.path) for k in self.sort], snap.names, slots

    def walk(self, after: Position | None) -> Iterator[int]:
        """The selected slots in order, from just after ``after`` (lazily, on an index: an
        iterator of C-level steps, no Python frame per slot).

        Raises:
            TypeError: ``after`` holds a value the sort's column cannot be compared with
                (the caller compares as text).
        """
        if self._slots is not None and self.index is None:
            start = 0
            if after is not None:
                start = bisect_right(_AfterCursor(self, after), False)
            return iter(self._slots[start:])
        index, test = self.index, self.mask
        assert index is not None
        line, start = self._line(index, after)
        if self.finder is not None:  # the matches from the cursor on, found in C
            return map(line.__getitem__, self.finder.rows(start))
        tail = islice(line, start, None)
        if test is None:
            return tail
        # C-level: the slots of the line, those the filter selects
        return compress(tail, map(test.__getitem__, line[start:]))

    def _line(self, index: list[int], after: Position | None) -> tuple[list[int], int]:
        """The order's slots, selected or not (the index, or its descending order), and
        where the items after ``after`` start in it."""
        snap = self.snapshot
        names = snap.names
        if not self.sort:
            name_key: Any = names.__getitem__
            return index, 0 if after is None else bisect_right(index, tuple(after), key=name_key)
        path = self.sort[0].path
        values = column(snap, path)
        value_of: Any = values.__getitem__

        def both(i: int) -> tuple[Any, Any]:
            return (values[i], names[i])

        if not self.sort[0].descending:
            start = 0 if after is None else bisect_right(index, (after[0], after[1:]), key=both)
            return index, start
        # descending by value, ties still (namespace, name) ascending: a stable sort of
        # the ascending index, reversed (once per generation)
        line = _descending(snap, path, index)
        if after is None:
            return line, 0
        # before the cursor: every greater value, and its own value's names up to its own
        value = after[0]
        run_start = bisect_left(index, value, key=value_of)
        run_end = bisect_right(index, value, key=value_of)
        upto = bisect_right(index, (value, after[1:]), key=both)
        return line, (len(index) - run_end) + (upto - run_start)


def _descending(snap: Snapshot, path: FieldPath, index: list[int]) -> list[int]:
    """The index of ``path`` in descending order of value, ties still by (namespace, name)
    ascending: a stable sort of the ascending index, reversed (once per generation)."""
    memo_key = f"desc:{'.'.join(path.keys)}"
    line: list[int] | None = snap.memo.get(memo_key)
    if line is None:
        value_of: Any = column(snap, path).__getitem__
        line = snap.memo[memo_key] = sorted(index, key=value_of, reverse=True)
    return line


class Finder:
    """A view's one substring test (a ``contains`` filter, or a search, alone) over the
    texts of the line its pages walk (the sort's index, or its descending order, or the
    order by name), joined in that order as UTF-8 with a ``\\x00`` after each: the matches
    of a regular expression (the needle, then the rest of its text up to the separator:
    one match per text however often it holds the needle) are the selected slots in the
    view's order.  A page is the first matches from its cursor's offset on (a few
    kilobytes of text read for a page of 50, whatever the number of slots); the total is
    the number of matches, counted in C.  The same selection as the mask's
    (:func:`gateway.core.views.columns.having`: UTF-8 is self-synchronising, a substring
    of the bytes is a substring of the text)."""

    __slots__ = ("counted", "data", "ends", "needle", "pattern")

    def __init__(
        self, data: bytes, ends: list[int], needle: bytes, counted: int | None = None
    ) -> None:
        self.data = data
        #: The offset just past each text's separator, by position in the line.
        self.ends = ends
        self.needle = needle
        #: The needle alone (half the compile of the needle and the rest of its text: a
        #: distinct view compiles its own): a text holding it twice matches twice, once
        #: in :meth:`rows`.
        self.pattern = re.compile(re.escape(needle))
        #: The count, where the column's bigrams told it (:mod:`gateway.core.views.grams`).
        self.counted = counted

    def count(self) -> int:
        """The texts holding the needle (from the bigrams, else counted in C: the needle
        and the rest of its text up to the separator, one match per text)."""
        if self.counted is not None:
            return self.counted
        whole = re.compile(re.escape(self.needle) + rb"[^\x00]*\x00")
        return len(whole.findall(self.data))

    def rows(self, start: int) -> Iterator[int]:
        """The positions in the line of the texts holding the needle, from ``start`` on
        (each match's start looked up in :attr:`ends`, a text's matches after its first
        skipped: C-level steps, lazily)."""
        ends = self.ends
        at = ends[start - 1] if start else 0
        found = map(bisect_right, repeat(ends), map(_START, self.pattern.finditer(self.data, at)))
        return map(_FIRST, groupby(found))


#: Where a match starts; the key of a group.
_START: Final = re.Match.start
_FIRST: Final = itemgetter(0)


def _finder(snap: Snapshot, spec: ViewSpec, line: list[int]) -> Finder | None:
    """The :class:`Finder` of ``spec`` over ``line`` (an index, or the order by name: its
    descending order is made here), where its selection is one substring test of a
    non-empty needle; ``None`` otherwise (a mask selects)."""
    node = spec.filter
    alone = _lone_substring(spec)
    if spec.search and node is None:
        texts, name, want = _search_texts(snap), "\nsearch", spec.search
    elif alone is not None:
        texts, name, want = _texts(snap, alone.path), ".".join(alone.path.keys), alone.values[0]
    else:
        return None
    needle = want.encode("utf-8", "surrogatepass")
    if 0 in needle:
        return None
    counted = None
    if isinstance(node, Condition):
        grams = snap.grams.get(node.path.keys)
        if grams is not None:
            counted = grams.count(want, snap.generation)
    if spec.sort and spec.sort[0].descending:
        line = _descending(snap, spec.sort[0].path, line)
        name += ":desc"
    key = f"line:{name}:{'.'.join(spec.sort[0].path.keys) if spec.sort else ''}"
    found = snap.memo.get(key, _NONE)
    if found is _NONE:
        found = snap.memo[key] = _joined_in(texts, line)
    if found is None:
        return None
    data, ends = found
    return Finder(data, ends, needle, counted)


def text_paths(spec: ViewSpec) -> list[FieldPath]:
    """The text columns whose bigrams a view's count reads (:class:`Finder`'s ``counted``):
    its filter's path when the filter is one substring test, alone."""
    alone = _lone_substring(spec)
    return [] if alone is None else [alone.path]


def _lone_substring(spec: ViewSpec) -> Condition | None:
    """The view's filter where it is one substring test of a non-empty text and there is
    no search."""
    node = spec.filter
    if (
        spec.search is None
        and isinstance(node, Condition)
        and node.op == "contains"
        and type(node.values[0]) is str
        and node.values[0]
    ):
        return node
    return None


_NONE: Final[Any] = object()


def _joined_in(texts: list[str], line: list[int]) -> tuple[bytes, list[int]] | None:
    """The texts of ``line``'s slots as UTF-8, each followed by ``\\x00``, and the offset
    past each separator; ``None`` when a text holds the separator."""
    ordered = list(map(texts.__getitem__, line))
    joined = "\x00".join(ordered) + "\x00"
    data = joined.encode("utf-8", "surrogatepass")
    if data.count(0) != len(ordered):
        return None
    if len(data) == len(joined):  # ASCII: a text's bytes are its characters
        sizes: Iterable[int] = map(len, ordered)
    else:
        sizes = (len(t.encode("utf-8", "surrogatepass")) for t in ordered)
    return data, list(accumulate(map(add, sizes, repeat(1))))


def prepare(snap: Snapshot, spec: ViewSpec, by: FieldPath | None = None) -> None:
    """Build what evaluations of the spec's :func:`shape` (and counts by ``by``) read at
    this generation, whatever their values: the texts joined (in the order of the line a
    page walks, for one substring test: :class:`Finder`), the codes of the filter's
    columns, the descending line of the sort's index or the order by name.  What is left
    of an evaluation after it is a few C-level passes, measured by the cache to decide
    where the next ones run (:func:`gateway.core.views.cache._evaluate`)."""
    snap.free  # noqa: B018 (a property that computes and keeps it)
    index = snap.indexes.get(spec.sort[0].path.keys) if len(spec.sort) == 1 else None
    if index is None:
        index = snap.by_name if not spec.sort else None
    elif spec.sort[0].descending:
        _descending(snap, spec.sort[0].path, index)
    if by is None and index is not None and _finder(snap, spec, index) is not None:
        return  # one substring test, over the texts in the line's order (no mask)
    if spec.search:
        texts = _search_texts(snap)
        columns.joined(snap, "\nsearch", texts)

    def walk(node: Node) -> None:
        if isinstance(node, AllOf | AnyOf):
            for part in node.parts:
                walk(part)
        elif isinstance(node, NoneOf):
            walk(node.part)
        elif isinstance(node, Condition) and node.op in ("contains", "prefix"):
            if type(node.values[0]) is str and node.values[0]:
                columns.joined(snap, ".".join(node.path.keys), _texts(snap, node.path))
        elif isinstance(node, Condition) or (
            isinstance(node, FieldRequirement) and columns.exact_classes(node.path)
        ):
            columns.codes(snap, node.path, column(snap, node.path))
        elif isinstance(node, LabelRequirement):
            path = label_path(node.key)
            columns.codes(snap, path, column(snap, path))

    if spec.filter is not None:
        walk(spec.filter)
    if by is not None and columns.exact_classes(by):
        columns.codes(snap, by, column(snap, by))


def order(snap: Snapshot, spec: ViewSpec) -> Ordered:
    """Filter, search and sort one snapshot (see the module for the order).

    One sort key with an index, or none: the selected slots as a mask over the index, the
    order a walk of it (:class:`Ordered`).  Otherwise in the tiebreaker's order already
    (:attr:`~gateway.core.views.store.Snapshot.by_name`), then sorted by each key from the
    last (the sorts are stable; the keys are list lookups, no Python call per object)."""
    index: list[int] | None = None
    if not spec.sort:
        index = snap.by_name
    elif len(spec.sort) == 1:
        index = snap.indexes.get(spec.sort[0].path.keys)
    if index is not None:
        finder = _finder(snap, spec, index)
        if finder is not None:
            return Ordered(snap, spec.sort, index=index, finder=finder)
        return Ordered(snap, spec.sort, index=index, mask=selected(snap, spec))
    found = list(matching(snap, spec))
    for key in reversed(spec.sort):
        values: Any = column(snap, key.path).__getitem__
        found.sort(key=values, reverse=key.descending)
    return Ordered(snap, spec.sort, found)


def _after(position: Position, cursor: Position, sort: tuple[SortKey, ...]) -> bool:
    """Whether ``position`` comes strictly after ``cursor`` in the order."""
    for i, key in enumerate(sort):
        have, at = position[i], cursor[i]
        if have == at:
            continue
        try:
            later = have > at
        except TypeError:
            later = str(have) > str(at)
        return bool(later) != key.descending
    return (position[-2], position[-1]) > (cursor[-2], cursor[-1])


class _AfterCursor(Sequence[bool]):
    """An order seen as "after the cursor?" (False... then True...), for bisect."""

    def __init__(self, ordered: Ordered, cursor: Position) -> None:
        self.ordered, self.cursor = ordered, cursor

    def __len__(self) -> int:
        return len(self.ordered.slots)

    def __getitem__(self, j: Any) -> Any:
        return _after(self.ordered.position(j), self.cursor, self.ordered.sort)


class Contents:
    """The objects of a page: their JSON, decoded whole on first use (:attr:`objects`), or
    only what a projection reads (:meth:`read`): a page's callers that select a few
    fields of each object (a GraphQL selection) never build the rest of it.

    Read only, as the objects are; shared by the copies of a page (its version replaced)."""

    __slots__ = ("_objects", "keys", "raws", "rendered")

    def __init__(
        self,
        raws: list[bytes],
        objects: list[dict[str, Any]] | None = None,
        keys: list[tuple[str, str]] | None = None,
        rendered: Rendered | None = None,
    ) -> None:
        #: Each object's JSON, in order.
        self.raws = raws
        self._objects = objects
        #: Each object's (namespace, name), for :attr:`rendered`.
        self.keys = keys
        #: The objects its cache keeps written for a selection (:class:`Rendered`), if
        #: any: an object written for a page is not written again for the next that shows
        #: it unchanged.
        self.rendered = rendered

    def __len__(self) -> int:
        return len(self.raws)

    @property
    def objects(self) -> list[dict[str, Any]]:
        """The objects, decoded whole (once)."""
        found = self._objects
        if found is None:
            found = self._objects = [deepjson.loads(raw) for raw in self.raws]
        return found

    @property
    def decoded(self) -> bool:
        """Whether :attr:`objects` were decoded (or given)."""
        return self._objects is not None

    def read(self, spec: Spec) -> list[Any]:
        """Each object as the projection of ``spec`` (an object's, :mod:`gateway.core.lists.
        projections`) reads it: only the keys it reads built (:func:`~gateway.core.lists.
        projections.reader`), where that gives what a whole decode would; the whole object
        where it may not (:func:`_partly`).  A projection of the result is the projection of
        :attr:`objects` (the same values where it reads)."""
        if self._objects is not None:
            return self._objects
        read = _reader_of(spec)
        found: list[Any] = []
        add = found.append
        for raw in self.raws:
            if _partly(raw):
                try:
                    part = read(raw)
                except (msgspec.DecodeError, RecursionError):
                    pass
                else:
                    if type(part) is dict:
                        add(part)
                        continue
            add(deepjson.loads(raw))
        return found

    def json(self, spec: Spec) -> bytes | None:
        """The JSON of the objects as the projection of the list ``spec`` (a list of objects'
        plan: :mod:`gateway.core.lists.projections`) completes them, written straight from
        each object's JSON by a typed decode and encode (:func:`_typed_list`), with no dict
        built: what ``orjson.dumps`` writes of the projection of :attr:`objects`.

        ``None`` where that cannot be told exactly here, for the caller to project the
        objects itself (:meth:`read`): a plan this does not write (:func:`_typed_list`), a
        value read that is not of the type written unchanged (the projection would send it
        to a serialiser or fall back).  No :func:`_partly` pass over the JSON is needed: the
        values it guards against (an integer past 64 bits, a float, JSON nested past
        ``orjson``'s levels) are refused by the types wherever they are read, and where
        they are not read the whole decode's values that are read are the same."""
        if self.rendered is not None and self.keys is not None:
            items = self.json_items(spec)
            # msgspec writes a list as its items' JSON between brackets, comma-separated
            return None if items is None else b"[" + b",".join(items) + b"]"
        typed = _typed_list(spec)
        if typed is None:
            return None
        decode, encode = typed
        try:
            return encode([decode(raw) for raw in self.raws])
        except (msgspec.DecodeError, msgspec.EncodeError, RecursionError, UnicodeError):
            return None

    def json_items(self, spec: Spec) -> list[bytes] | None:
        """Each object's JSON as :meth:`json` writes it in the list (for a caller that
        writes them between JSON of its own: a view's edges)."""
        typed = _typed_list(spec)
        if typed is None:
            return None
        decode, encode = typed
        try:
            if self.rendered is not None and self.keys is not None:
                return self.rendered.written(typed, self.keys, self.raws)
            return [encode(decode(raw)) for raw in self.raws]
        except (msgspec.DecodeError, msgspec.EncodeError, RecursionError, UnicodeError):
            return None


#: Objects a view cache keeps written for one selection (:class:`Rendered`), and the
#: selections it keeps them for.
RENDERED_OBJECTS = 2048
RENDERED_SELECTIONS = 2
#: Bytes of writings a view cache keeps for one selection, at most (a selection of
#: whole objects keeps fewer of them).
RENDERED_BYTES = 2 << 20


class Rendered:
    """Objects written as JSON for a selection (:meth:`Contents.json`), kept by the cache
    of their list for the next pages that show them: by (namespace, name) for each
    selection's writer, with the very JSON (the same ``bytes``, an identity check) each
    was written from, so a changed object (new JSON) is written anew and never answered
    from its old writing.  Distinct views of one list often show the same objects (the
    newest pods, the failing ones), and writing each object (a typed decode of its whole
    JSON, a few microseconds for a pod) was most of what a distinct view's page cost.

    At most :data:`RENDERED_OBJECTS` objects and :data:`RENDERED_BYTES` of writings per
    selection, for the last :data:`RENDERED_SELECTIONS` selections, the first written
    out first (a writing replaced keeps its place): their writings (a few hundred bytes
    each for a table's columns) and, for an object changed or deleted since, its old
    JSON until it changes or goes (:meth:`forget`).  The writings' bytes are counted where
    ``counted`` says (its ``bytes``: the view caches' budget), as they grow and shrink.
    Read and written on the event loop only."""

    __slots__ = ("_counted", "_kept", "hits", "size", "writes")

    def __init__(self, counted: Any = None) -> None:
        #: What the writings' bytes are counted in (an object with a ``bytes`` count), if any.
        self._counted = counted
        #: Bytes of every selection's writings.
        self.size = 0
        #: By the writer's id: the writer (held: its id is not reused meanwhile), each
        #: object's JSON and writing by (namespace, name), and the writings' bytes.
        self._kept: dict[
            int, tuple[Any, dict[tuple[str, str], tuple[bytes, bytes]], list[int]]
        ] = {}
        #: Objects answered from what was kept, and written (for tests and the bench).
        self.hits = 0
        self.writes = 0

    def __len__(self) -> int:
        return sum(len(found[1]) for found in self._kept.values())

    def _grow(self, by: int) -> None:
        self.size += by
        if self._counted is not None:
            self._counted.bytes += by

    def forget(self, key: tuple[str, str]) -> None:
        """Let the writings of the object ``key`` go (it changed or went: its old JSON is
        not kept alive by them)."""
        for _, table, size in self._kept.values():
            found = table.pop(key, None)
            if found is not None:
                size[0] -= len(found[1])
                self._grow(-len(found[1]))

    def clear(self) -> None:
        """Let every writing go."""
        self._kept.clear()
        self._grow(-self.size)

    def written(
        self,
        typed: tuple[Callable[[bytes], Any], Callable[[Any], bytes]],
        keys: list[tuple[str, str]],
        raws: list[bytes],
    ) -> list[bytes]:
        """Each object of ``raws`` (named by ``keys``) written by ``typed`` (a
        :func:`_typed_list` pair), from what is kept where it is the same JSON.

        Raises:
            msgspec.DecodeError, msgspec.EncodeError, RecursionError, UnicodeError: an
                object ``typed`` does not write (nothing of this call is kept).
        """
        decode, encode = typed
        kept = self._kept
        at = id(typed)
        found = kept.pop(at, None)
        if found is None or found[0] is not typed:
            found = (typed, {}, [0])
        kept[at] = found  # the most recently used last
        while len(kept) > RENDERED_SELECTIONS:
            self._grow(-kept.pop(next(iter(kept)))[2][0])
        table, size = found[1], found[2]
        entries = list(map(table.get, keys))
        missing = [
            i
            for i, (e, raw) in enumerate(zip(entries, raws, strict=True))
            if e is None or e[0] is not raw
        ]
        if missing:
            made = [encode(decode(raws[i])) for i in missing]
            before = size[0]
            for i, item in zip(missing, made, strict=True):
                old = table.get(keys[i])
                if old is not None:
                    size[0] -= len(old[1])
                entries[i] = table[keys[i]] = (raws[i], item)
                size[0] += len(item)
            while len(table) > RENDERED_OBJECTS or (size[0] > RENDERED_BYTES and table):
                size[0] -= len(table.pop(next(iter(table)))[1])
            self._grow(size[0] - before)
        self.hits += len(keys) - len(missing)
        self.writes += len(missing)
        return [e[1] for e in entries]  # type: ignore[index]


def _partly(raw: bytes) -> bool:
    """Whether a partial read of ``raw`` builds the values it reads as a whole decode does:
    no run of digits as long as a 64-bit integer's (a number past 64 bits is an ``int``
    read in part, a ``float`` decoded whole, which a leaf's serialiser may write otherwise:
    ``String`` writes its digits; a string of digits is taken for one), and fewer brackets
    than the nesting past which the whole decode keeps JSON text
    (:func:`gateway.core.support.deepjson.loads`: ``orjson`` decodes 1,024 levels; under
    the interpreter's default recursion limit, ``msgspec`` refuses such nesting itself, and
    the object is decoded whole).

    A number past a double's range in a key the projection does not read is not refused,
    as the list workers' partial reads do not refuse it (:func:`gateway.core.lists.
    projections.reader`); one it reads is (``msgspec`` refuses it, and the object is
    decoded whole)."""
    if _LONG_DIGITS in raw.translate(_DIGITS):
        return False
    if sys.getrecursionlimit() < _DEPTH:  # the partial read refuses it first
        return True
    return len(raw) < 2 * _DEPTH or raw.count(b"{") + raw.count(b"[") < _DEPTH


#: Every digit as ``9``: a run of 19 nines is a number (or text) of 19 digits or more.
_DIGITS: Final = bytes.maketrans(b"0123456789", b"9" * 10)
_LONG_DIGITS: Final = b"9" * 19
#: The nesting ``orjson.loads`` decodes (past it, the whole decode keeps JSON text).
_DEPTH: Final = 1024


#: The leaf scalars written as they are read, by their Python type (what the projection
#: passes through without its serialiser and ``msgspec`` and ``orjson`` write alike; not
#: ``Float``: the two write exponents differently).
_LEAF_TYPES: Final[dict[str, Any]] = {
    "String": str,
    "ID": str,
    "Quantity": str,
    "Time": str,
    "MicroTime": str,
    "Boolean": bool,
    "IntOrString": Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)] | str,
    **{
        name: Annotated[int, msgspec.Meta(ge=low, le=high)]
        for name, (low, high) in projections.INT_RANGES.items()
    },
}
#: The integers written here: those ``orjson`` decodes as ``int`` (it does to 2**64 - 1,
#: which ``msgspec`` cannot bound: past 2**63 - 1 the projection writes them).
_INT = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_PLAIN = str | _INT | bool | None
#: A ``JSON`` scalar written as it is read: the shapes of labels, annotations and
#: selectors (a value of another shape, a float anywhere in it, is not written here).
_JSON_VALUE: Final[Any] = dict[str, _PLAIN] | list[_PLAIN] | str | _INT | bool | None


class _Unwritten(Exception):
    """A plan :func:`_typed_list` does not write."""


@functools.lru_cache(maxsize=256)
def _typed_list(spec: Spec) -> tuple[Callable[[bytes], Any], Callable[[Any], bytes]] | None:
    """For the plan ``spec`` of a list of objects, a decoder of one object's JSON into
    ``msgspec`` structs that hold exactly what the projection of the object completes, in
    its order and under its response keys, and the encoder of a list of them; ``None``
    where the plan has a step that is not a copy of a JSON key (an alias, ``__typename``,
    ``raw``, a Python name), a ``Float``, or a scalar it would serialise."""
    while spec[0] == "nonnull":
        spec = spec[1]
    if spec[0] != "list":
        return None
    item = spec[2]
    while item[0] == "nonnull":
        item = item[1]
    if item[0] != "object":
        return None
    try:
        return msgspec.json.Decoder(_struct(item)).decode, msgspec.json.Encoder().encode
    except (_Unwritten, TypeError, ValueError):  # ValueError, TypeError: msgspec's refusal
        return None


def _written(spec: Spec) -> Any:
    """The type a value of the plan ``spec`` is read as (not null: the caller adds it)."""
    kind = spec[0]
    if kind == "nonnull":
        return _written(spec[1])
    if kind == "leaf":
        found = _LEAF_TYPES.get(spec[1])
        if found is None:
            raise _Unwritten
        return found
    if kind == "list":
        item = _written(spec[2])
        nullable = spec[1] and spec[2][0] != "nonnull"
        return list[item | None] if nullable else list[item]  # type: ignore[valid-type]
    if kind == "object":
        return _struct(spec)
    raise _Unwritten


def _struct(spec: Spec) -> Any:
    """The struct of an object's plan: a field per response key, read from the JSON key of
    the same name.  ``__typename`` (a constant, under its response key) is a field whose
    only value is the type's name, its default: the object's JSON holds no such key (or
    holds that very value: the same bytes written), and any other value there is refused
    (the page is then projected the other way)."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    names: dict[str, str] = {}
    for i, (key, how, name, _check, fn_spec, _inline) in enumerate(spec[2]):
        attribute = f"f{i}"
        if how == projections.CONST and type(name) is str:
            if key in names.values():
                raise _Unwritten
            names[attribute] = key
            fields.append((attribute, Literal[name], name))
            continue
        if key != name or name in names.values():
            raise _Unwritten
        names[attribute] = name
        if how == projections.COPY:
            fields.append((attribute, _JSON_VALUE, None))
        elif how == projections.LEAF and fn_spec is not None and fn_spec[0] != "then":
            fields.append((attribute, _written(fn_spec) | None, None))
        elif how == projections.ALWAYS and fn_spec is not None and fn_spec[0] == "nonnull":
            fields.append((attribute, _written(fn_spec)))
        else:
            raise _Unwritten
    return msgspec.defstruct(
        str(spec[1]), fields, kw_only=True, rename=names, gc=False, omit_defaults=False
    )


@functools.lru_cache(maxsize=256)
def _reader_of(spec: Spec) -> Callable[[bytes], Any]:
    """The partial reader of an object's projection (:func:`~gateway.core.lists.
    projections.reader`)."""
    return projections.reader(projections.shape(spec))


#: The sort's columns, the names by slot, and slots: what a page's positions are read from.
PositionsAt = tuple[list[list[Any]], list[Any], list[int]]


def _positions_of(at: PositionsAt) -> list[Position]:
    """The positions of the slots of ``at`` (its columns and names looked up once)."""
    values, names, slots = at
    if len(values) == 1:
        (only,) = values
        return [(only[i], *names[i]) for i in slots]
    return [(*(v[i] for v in values), *names[i]) for i in slots]


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a view.

    Attributes:
        contents: the objects of the page, in order (:class:`Contents`: read only);
            :attr:`items` decoded whole.
        positions: each item's position in the order (what its cursor names), read on
            first use from what ``_positions_at`` names (an answer without edges reads
            only its last item's, for ``endCursor``: reading each item's sort value and
            name costs a page of cold objects a few tens of microseconds).
        sort: the order's sort keys.
        total: how many objects the view selects (all pages).
        has_next: more items follow the page.
        has_previous: items come before the page.
        resource_version: the version of the snapshot the page was cut from.
        renderings: for a page shared by its callers (kept with its order), what front
            ends made of its items for them, by what they made it for (a GraphQL
            selection's projection), to be made once and shared too, read only; ``None``
            for a page made for one caller.
    """

    contents: Contents
    _positions: list[Position] | None
    sort: tuple[SortKey, ...]
    total: int
    has_next: bool
    has_previous: bool
    resource_version: str
    renderings: dict[Any, Any] | None = None
    _cursors: list[str] | None = None
    _positions_at: PositionsAt | None = None

    @property
    def positions(self) -> list[Position]:
        """Each item's position in the order (read on first use)."""
        found = self._positions
        if found is None:
            at = self._positions_at
            if at is None:  # read meanwhile by another thread (set, then ``at`` let go)
                return self._positions  # type: ignore[return-value]
            found = _positions_of(at)
            object.__setattr__(self, "_positions", found)  # frozen: written once
            object.__setattr__(self, "_positions_at", None)
        return found

    def _position(self, j: int) -> Position:
        """The position of the ``j``-th item (without reading the others')."""
        at = self._positions_at
        found = self._positions
        if found is not None or at is None:
            return self.positions[j]
        values, names, slots = at
        return _positions_of((values, names, [slots[j]]))[0]

    @property
    def items(self) -> list[dict[str, Any]]:
        """The objects of the page, in order, decoded whole (once; the hub's: read only)."""
        return self.contents.objects

    @property
    def cursors(self) -> list[str]:
        """Each item's cursor (written on first use: an answer may ask only the last)."""
        found = self._cursors
        if found is None:
            sort = self.sort
            found = [encode_cursor(sort, p) for p in self.positions]
            object.__setattr__(self, "_cursors", found)  # frozen: what it is, written once
        return found

    @property
    def end_cursor(self) -> str | None:
        if not len(self.contents):
            return None
        if self._cursors is None:
            return encode_cursor(self.sort, self._position(-1))
        return self.cursors[-1]

    @property
    def start_cursor(self) -> str | None:
        if not len(self.contents):
            return None
        if self._cursors is None:
            return encode_cursor(self.sort, self._position(0))
        return self.cursors[0]


#: JSON bytes of a page's objects up to which the page is kept with its order
#: (:attr:`Ordered.kept`): what the decoded objects of the order's last page may hold.
PAGE_KEPT_BYTES = 256 * 1024


def page(
    ordered: Ordered,
    spec: ViewSpec,
    version: str | None = None,
    decoded: Decoded | None = None,
    rendered: Rendered | None = None,
) -> Page:
    """The page of ``spec`` (``first`` items after its cursor) of an ordered snapshot, at
    ``version`` (default: the snapshot's; a later one with the same objects).  With
    ``decoded`` (a live view's), the objects of its last page that are unchanged are not
    decoded again.

    An order is shared by the callers of its view at its generation (the cache keeps it),
    and so is the last page cut of it: callers of the same page get the same items, decoded
    once (they are read only), and the same cursors, not a decode of each object per
    caller (measured on 30,000 pods, 50 callers of one view: the decodes were half of the
    gateway's CPU per view, and each decoded page lives until its answer is written)."""
    key = (spec.first, spec.sort, _typed(spec.after))
    kept = ordered.kept
    if kept is not None and kept[0] == key:
        found = kept[1]
    else:
        found = _cut(ordered, spec, decoded, rendered)
        if found.renderings is not None:  # small enough to be kept for the next callers
            ordered.kept = (key, found)
    version = version or ordered.snapshot.version
    if found.resource_version != version:
        found = replace(found, resource_version=version)
    return found


def _typed(position: Position | None) -> Any:
    """A position as a key that tells apart what ``==`` does not (``1``, ``1.0``,
    ``True``): two cursors are the same key only if they are the same cursor."""
    if position is None:
        return None
    return tuple(
        tuple((type(v), v) for v in p) if type(p) is tuple else (type(p), p) for p in position
    )


class Decoded:
    """The objects of the last page cut through it (a live view's), by (namespace, name)
    with their JSON: the next page decodes only the objects whose JSON changed (under churn
    a live view's page of 50 keeps most of its objects from one update to the next, and
    their decoding was most of its evaluation).  The objects are read only, as a page's
    are; it holds one page's objects."""

    __slots__ = ("_objects", "decodes")

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str], tuple[bytes, dict[str, Any]]] = {}
        #: Objects decoded through it (the others were reused).
        self.decodes = 0

    def objects(self, entries: Iterable[Entry]) -> list[dict[str, Any]]:
        """The objects of ``entries``, in order; remembered for the next page."""
        old = self._objects
        new: dict[tuple[str, str], tuple[bytes, dict[str, Any]]] = {}
        found = []
        for e in entries:
            key, raw = (e.namespace, e.name), e.raw
            kept = old.get(key)
            if kept is not None and (kept[0] is raw or kept[0] == raw):
                obj = kept[1]
            else:
                obj = e.obj
                self.decodes += 1
            new[key] = (raw, obj)
            found.append(obj)
        self._objects = new
        return found


def _cut(
    ordered: Ordered,
    spec: ViewSpec,
    decoded: Decoded | None = None,
    rendered: Rendered | None = None,
) -> Page:
    """The page of ``spec`` cut from ``ordered``, with room for its renderings where its
    objects' JSON is at most :data:`PAGE_KEPT_BYTES` (it is then kept with its order)."""
    source, slots = ordered, ordered.snapshot.slots
    try:
        walk = ordered.walk(spec.after)
        chosen = list(islice(walk, spec.first))
        has_next = next(walk, None) is not None
    except TypeError:  # a cursor's value of another type than the column's: compare as text
        ordered = Ordered(ordered.snapshot, ordered.sort, ordered.slots)
        walk = ordered.walk(spec.after)
        chosen = list(islice(walk, spec.first))
        has_next = next(walk, None) is not None
    has_previous = False
    if spec.after is not None:  # an item of the order comes at or before the cursor
        first = next(ordered.walk(None), None)
        after = chosen[0] if chosen else next(ordered.walk(spec.after), None)
        has_previous = first is not None and first != after
    entries = [e for e in map(slots.__getitem__, chosen) if e is not None]
    assert len(entries) == len(chosen)
    raws = [e.raw for e in entries]
    size = sum(map(len, raws))
    # decoded (whole or in part) when an answer reads them; a live view's now
    contents = Contents(
        raws,
        None if decoded is None else decoded.objects(entries),
        None if rendered is None else [(e.namespace, e.name) for e in entries],
        rendered,
    )
    source.decoded += len(entries)
    return Page(
        contents=contents,
        # read on first use, but a live view's now (its page lives until the next update:
        # it does not hold a version's columns meanwhile)
        _positions=None if decoded is None else ordered.positions_of(chosen),
        _positions_at=ordered.positions_at(chosen) if decoded is None else None,
        sort=spec.sort,
        total=ordered.total,
        has_next=has_next,
        has_previous=has_previous,
        resource_version=ordered.snapshot.version,
        renderings={} if size <= PAGE_KEPT_BYTES else None,
    )


@dataclass(frozen=True, slots=True)
class Count:
    """How many selected objects have ``value`` at the grouped field (``None``: absent)."""

    value: str | None
    count: int


def counts(snap: Snapshot, found: Sequence[int], by: FieldPath) -> list[Count]:
    """The selected slots grouped by a field's value (as text), most frequent first, then
    by value (absent last)."""
    memo_key = f"counted:{'.'.join(by.keys)}"
    values: list[Any] | None = snap.memo.get(memo_key)
    if values is None:  # the values as counted (None: absent), once per generation
        values = [None if t is None or t[0] == 0 else t[1] for t in column(snap, by)]
        snap.memo[memo_key] = values
    # C-level counting; a string's hash is kept by the string, a tuple's is not
    return _sorted_counts(Counter(map(values.__getitem__, found)).items())


def _sorted_counts(groups: Iterable[tuple[Any, int]]) -> list[Count]:
    """Most frequent first, then by value as text (absent last; a boolean after the text of
    the same spelling, so that the order is total)."""
    found = sorted(
        groups,
        key=lambda g: (
            -g[1],
            g[0] is None,
            "" if g[0] is None else _text(g[0]),
            type(g[0]) is bool,
        ),
    )
    return [Count(None if v is None else _text(v), n) for v, n in found]


def tally(snap: Snapshot, spec: ViewSpec, by: FieldPath) -> tuple[int, list[Count]]:
    """The view's total and its selected objects grouped by ``by`` (:func:`counts`): from
    the filter's mask and ``by``'s codes, a C-level count per distinct value, where the
    codes apply (a field of text, time or boolean with at most 256 distinct values); else
    from the selected slots."""
    found = selected(snap, spec)
    if columns.exact_classes(by):
        codes = columns.codes(snap, by, column(snap, by))
        groups = columns.grouped(codes, found)
        if groups is not None:
            merged: dict[Any, int] = {}  # a value of the field's type and its text alike
            for key, n in groups:
                value = _value(key)
                merged[value] = merged.get(value, 0) + n
            return sum(merged.values()), _sorted_counts(merged.items())
    occupied = snap.occupied
    slots = (
        occupied if found is None else list(compress(occupied, map(found.__getitem__, occupied)))
    )
    return len(slots), counts(snap, slots, by)
