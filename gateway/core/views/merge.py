"""A view across clusters: each cluster's page merged into one order, with one cursor.

A fleet's merged view is evaluated per cluster by the same core (each cluster's own cache,
for the caller, reviewed as a view of that cluster alone: :class:`~gateway.core.views.cache.Views`),
each asked for the first N items after its own position; :func:`merge` then takes the first
N of all of them in the view's order, with the cluster's name as the last tiebreaker (after
namespace and name), so the order is total across clusters.

The fleet cursor (:func:`encode_fleet_cursor`) holds every cluster's position: the cursor,
in that cluster's view, of the last item of that cluster the client has been shown (a
cluster not in it starts from its beginning).  It is opaque base64url JSON with the digest
of the sort it belongs to, validated as a cluster's cursor is (each cluster's position is
checked by that cluster's view when it is used): a cursor of another sort, edited or
malformed is refused with :class:`~gateway.core.errors.InvalidView`.  A cluster that fails
on a page keeps its position, so it is not skipped when it answers again (its items may then
come after items of other clusters that sort after them: a partial answer is one).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.core import errors
from gateway.core.views.evaluate import Contents, Page
from gateway.core.views.spec import (
    MAX_CURSOR,
    Position,
    SortKey,
    decode_cursor,
    encode_cursor,
    sort_digest,
)

#: Clusters one fleet cursor may hold.
MAX_CURSOR_CLUSTERS: Final = 64
#: Characters of a fleet cursor.
MAX_FLEET_CURSOR: Final = MAX_CURSOR * 16
#: Items merged on the event loop; more are merged in a worker thread (about 25 ms per
#: 4,000 items: every item's cursor is read back and every taken one gets a fleet cursor).
MERGE_INLINE: Final = 1000

_BAD: Final = (
    "`after` is not a cursor of this fleet view (malformed, edited, or from another sort): "
    "take `pageInfo.endCursor` of this view's last page, or start again without `after`"
)


def encode_fleet_cursor(sort: tuple[SortKey, ...], positions: Mapping[str, str]) -> str:
    """The fleet cursor of every cluster's position (its own view's cursor)."""
    payload = orjson.dumps(["fleet", sort_digest(sort), dict(sorted(positions.items()))])
    return base64.urlsafe_b64encode(payload).decode().rstrip("=")


def decode_fleet_cursor(sort: tuple[SortKey, ...] | None, cursor: Any) -> dict[str, str]:
    """Every cluster's position a fleet cursor holds, checked against the view's sort
    (``None``: its form only; each position is then checked by its cluster's view).

    Raises:
        InvalidView: malformed, edited, of another sort, too long, too many clusters.
    """
    if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_FLEET_CURSOR:
        raise errors.InvalidView(_BAD)
    try:
        data = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise errors.InvalidView(_BAD) from None
    if (
        not isinstance(data, list)
        or len(data) != 3
        or data[0] != "fleet"
        or not isinstance(data[1], str)
        or (sort is not None and data[1] != sort_digest(sort))
        or not isinstance(data[2], dict)
        or len(data[2]) > MAX_CURSOR_CLUSTERS
    ):
        raise errors.InvalidView(_BAD)
    positions: dict[str, str] = {}
    for name, at in data[2].items():
        if not isinstance(at, str) or not at or len(at) > MAX_CURSOR:
            raise errors.InvalidView(_BAD)
        if sort is not None:
            decode_cursor(sort, at)  # a well-formed position of this sort, or refused now
        positions[name] = at
    return positions


@dataclass(frozen=True, slots=True)
class MergedItem:
    """One object of a merged page: its cluster, where it is in its cluster's page (that
    page's :class:`~gateway.core.views.evaluate.Contents` and its index there), its cursor
    in its cluster's view, and the fleet cursor that starts the next page right after it.

    The object is its cluster page's own: :attr:`raw` its JSON, :attr:`obj` decoded whole
    (with the rest of that page, once, as the cluster's own answer decodes it), so an
    answer that writes objects from their JSON (:func:`merged_contents`) decodes none."""

    cluster: str
    contents: Contents
    at: int
    cluster_cursor: str
    cursor: str

    @property
    def raw(self) -> bytes:
        """The object's JSON (its cluster's stored bytes)."""
        return self.contents.raws[self.at]

    @property
    def obj(self) -> dict[str, Any]:
        """The object decoded whole (its cluster page's objects: read only)."""
        return self.contents.objects[self.at]


@dataclass(frozen=True, slots=True)
class MergedPage:
    """One page of a merged view.

    Attributes:
        items: the page's objects in the merged order.
        positions: every cluster's position after the page (what ``end_cursor`` holds).
        total: the objects the view selects in every cluster that answered.
        has_next: more items follow the page in some cluster that answered.
        has_previous: the page does not start at the beginning.
    """

    items: list[MergedItem]
    positions: dict[str, str]
    total: int
    has_next: bool
    has_previous: bool
    end_cursor: str | None
    start_cursor: str | None


def _compare(sort: tuple[SortKey, ...], a: tuple[Position, str], b: tuple[Position, str]) -> int:
    (pa, ca), (pb, cb) = a, b
    for i, key in enumerate(sort):
        x, y = pa[i], pb[i]
        if x == y:
            continue
        try:
            less = bool(x < y)
        except TypeError:
            less = str(x) < str(y)
        return (1 if less else -1) if key.descending else (-1 if less else 1)
    ta, tb = (pa[-2], pa[-1], ca), (pb[-2], pb[-1], cb)
    return -1 if ta < tb else (1 if ta > tb else 0)


#: The types of a sort key's value a cursor writes and reads back as they are (JSON's).
_PLAIN: Final = frozenset({str, int, float, bool})


def _as_decoded(
    sort: tuple[SortKey, ...], page: Page, j: int, position: Position, same: bool = True
) -> Position:
    """The ``j``-th position of ``page`` as its cursor decodes (:func:`~gateway.core.views.
    spec.decode_cursor`): the position itself where each of its values is of a type JSON
    writes and reads back unchanged (no cursor written and read, as a page of 50 items of
    three clusters took 150 of each per merged view), its cursor decoded otherwise.
    ``same``: the page's sort is ``sort`` (asked once per page)."""
    if (
        same
        and len(position) == len(sort) + 2
        and type(position[-2]) is str
        and type(position[-1]) is str
        and all(
            type(key) is tuple
            and len(key) == 2
            and type(key[0]) is int
            and key[0] in (0, 1, 2)
            and type(key[1]) in _PLAIN
            and (type(key[1]) is not float or math.isfinite(key[1]))
            for key in position[:-2]
        )
    ):
        return position
    return decode_cursor(sort, _cursor(page, j))


def _cursor(page: Page, j: int) -> str:
    """The cursor of the ``j``-th item of ``page`` (written for it alone, unless the page's
    cursors are written already)."""
    if page._cursors is not None:
        return page._cursors[j]
    return encode_cursor(page.sort, page.positions[j])


def merge(
    sort: tuple[SortKey, ...],
    first: int,
    pages: Sequence[tuple[str, Page]],
    after: Mapping[str, str],
) -> MergedPage:
    """The first ``first`` items of every cluster's page, in the view's order (ties by
    namespace, name, then cluster name).

    Args:
        sort: the view's sort keys (the same in every cluster).
        first: the page size.
        pages: each answering cluster's page: its first ``first`` items after its position.
        after: every cluster's position before this page (the decoded ``after``).
    """
    candidates: list[tuple[Position, str, int]] = []
    for name, page in pages:
        same = page.sort == sort
        for j, position in enumerate(page.positions):
            candidates.append((_as_decoded(sort, page, j, position, same), name, j))

    def compare(a: tuple[Position, str, int], b: tuple[Position, str, int]) -> int:
        return _compare(sort, (a[0], a[1]), (b[0], b[1]))

    candidates.sort(key=functools.cmp_to_key(compare))
    taken = candidates[:first]
    by_name = dict(pages)
    positions = dict(after)
    items: list[MergedItem] = []
    used: dict[str, int] = {}
    for _position, name, j in taken:
        page = by_name[name]
        cursor = positions[name] = _cursor(page, j)
        used[name] = j + 1
        items.append(
            MergedItem(name, page.contents, j, cursor, encode_fleet_cursor(sort, positions))
        )
    has_next = any(used.get(name, 0) < len(page.contents) or page.has_next for name, page in pages)
    return MergedPage(
        items=items,
        positions=positions,
        total=sum(page.total for _, page in pages),
        has_next=has_next,
        has_previous=bool(after),
        end_cursor=items[-1].cursor if items else None,
        start_cursor=items[0].cursor if items else None,
    )


async def merge_off_loop(
    sort: tuple[SortKey, ...],
    first: int,
    pages: Sequence[tuple[str, Page]],
    after: Mapping[str, str],
) -> MergedPage:
    """:func:`merge`, in a worker thread when there is much to merge (the pages are read
    only: the hub's objects and strings)."""
    if sum(len(page.positions) for _, page in pages) <= MERGE_INLINE:
        return merge(sort, first, pages, after)
    return await asyncio.to_thread(merge, sort, first, pages, after)


class MergedContents(Contents):
    """The objects of a merged page as one :class:`~gateway.core.views.evaluate.Contents`,
    in the merged order: each cluster's items a ``Contents`` of their own, with what their
    cluster's page has (its decoded objects, if decoded; its cache's writings of objects for
    a selection, :class:`~gateway.core.views.evaluate.Rendered`), so a selection's JSON of
    the merged page (:meth:`json`, :meth:`json_items`) is each cluster's writing of its
    objects, exactly what it writes for that cluster's own view, put in the merged order:
    no object decoded whole.  Read only, as a page's contents are."""

    __slots__ = ("_parts",)

    def __init__(self, items: Sequence[MergedItem]) -> None:
        super().__init__([item.raw for item in items])
        groups: dict[int, tuple[Contents, list[int], list[int]]] = {}
        for place, item in enumerate(items):
            found = groups.get(id(item.contents))
            if found is None:
                found = groups[id(item.contents)] = (item.contents, [], [])
            found[1].append(item.at)
            found[2].append(place)
        #: Each cluster page's items (a ``Contents`` of them) and their places here.
        self._parts = [(_part(source, ats), places) for source, ats, places in groups.values()]

    def _placed(self, each: list[list[Any]]) -> list[Any]:
        out: list[Any] = [None] * len(self.raws)
        for (_, places), found in zip(self._parts, each, strict=True):
            for place, value in zip(places, found, strict=True):
                out[place] = value
        return out

    @property
    def objects(self) -> list[dict[str, Any]]:
        """The objects decoded whole (those of a cluster's page decoded already reused)."""
        found = self._objects
        if found is None:
            found = self._objects = self._placed([part.objects for part, _ in self._parts])
        return found

    @property
    def decoded(self) -> bool:
        return self._objects is not None or all(part.decoded for part, _ in self._parts)

    def read(self, spec: Any) -> list[Any]:
        if self.decoded:
            return self.objects
        return self._placed([part.read(spec) for part, _ in self._parts])

    def json(self, spec: Any) -> bytes | None:
        items = self.json_items(spec)
        # msgspec writes a list as its items' JSON between brackets, comma-separated
        return None if items is None else b"[" + b",".join(items) + b"]"

    def json_items(self, spec: Any) -> list[bytes] | None:
        each = []
        for part, _ in self._parts:
            found = part.json_items(spec)
            if found is None:
                return None
            each.append(found)
        return self._placed(each)


def _part(source: Contents, ats: list[int]) -> Contents:
    """The items ``ats`` of a cluster's page as a ``Contents`` of their own (its decoded
    objects, its keys and writings with them)."""
    if ats == list(range(len(source))):
        return source
    objects = [source.objects[j] for j in ats] if source.decoded else None
    keys = None if source.keys is None else [source.keys[j] for j in ats]
    return Contents([source.raws[j] for j in ats], objects, keys, source.rendered)


def merged_contents(items: Sequence[MergedItem]) -> Contents:
    """The objects of a merged page's ``items`` as one ``Contents`` (:class:`MergedContents`)."""
    return MergedContents(items)
