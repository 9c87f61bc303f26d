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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.core import errors
from gateway.core.views.evaluate import Page
from gateway.core.views.spec import MAX_CURSOR, Position, SortKey, decode_cursor, sort_digest

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
    """One object of a merged page: its cluster, the object, its cursor in its cluster's
    view, and the fleet cursor that starts the next page right after it."""

    cluster: str
    obj: dict[str, Any]
    cluster_cursor: str
    cursor: str


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
        for j, cursor in enumerate(page.cursors):
            candidates.append((decode_cursor(sort, cursor), name, j))

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
        positions[name] = page.cursors[j]
        used[name] = j + 1
        items.append(
            MergedItem(name, page.items[j], page.cursors[j], encode_fleet_cursor(sort, positions))
        )
    has_next = any(used.get(name, 0) < len(page.items) or page.has_next for name, page in pages)
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
    if sum(len(page.cursors) for _, page in pages) <= MERGE_INLINE:
        return merge(sort, first, pages, after)
    return await asyncio.to_thread(merge, sort, first, pages, after)
