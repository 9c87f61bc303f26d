"""Merging clusters' pages of a view (``gateway/core/views/merge.py``): pure functions.

Each cluster's whole order is cut into pages by the core's own ``page`` (a real snapshot of
objects), the merged pages are walked with the fleet cursor, and the concatenation is
compared with the test's own sort of every cluster's objects together (ties broken by
namespace, name, then cluster name); large merges run off the event loop with the same
answer; forged fleet cursors are refused.
"""

from __future__ import annotations

import base64
import random
from typing import Any

import orjson
import pytest

from gateway.core import errors
from gateway.core.model.registry import POD
from gateway.core.views import evaluate
from gateway.core.views import merge as merge_module
from gateway.core.views.merge import (
    MERGE_INLINE,
    decode_fleet_cursor,
    encode_fleet_cursor,
    merge,
    merge_off_loop,
)
from gateway.core.views.spec import FieldPath, SortKey, ViewSpec, decode_cursor
from gateway.core.views.store import Entry, Store

PRIORITY = FieldPath("spec.priority", ("spec", "priority"), "int32")
NAME = FieldPath("metadata.name", ("metadata", "name"), "string")


def _objects(cluster: int, count: int) -> list[dict[str, Any]]:
    rnd = random.Random(cluster)
    out = []
    for i in range(count):
        spec = {"priority": rnd.randint(0, 5)} if i % 4 else {}
        # names shared across clusters (ties), some namespaces too
        out.append({"metadata": {"namespace": f"ns{i % 2}", "name": f"p{i:04d}"}, "spec": spec})
    return out


async def _snapshot(objects: list[dict[str, Any]], paths: list[FieldPath]) -> Any:
    store = Store()
    for obj in objects:
        meta = obj["metadata"]
        store.put(f"{meta['namespace']}/{meta['name']}", Entry(obj, 10))
    await store.ensure(paths)
    return store.snapshot("1", paths)


def _own(clusters: dict[str, list[dict[str, Any]]], sort: tuple[SortKey, ...]) -> list[str]:
    tagged = [(c, o) for c, objs in clusters.items() for o in objs]
    tagged.sort(key=lambda t: (t[1]["metadata"]["namespace"], t[1]["metadata"]["name"], t[0]))
    for key in reversed(sort):

        def value(t: tuple[str, dict[str, Any]], key: SortKey = key) -> Any:
            v = key.path.read(t[1])
            return (0, "") if v is None else (1, v)

        tagged.sort(key=value, reverse=key.descending)
    return [f"{c}:{o['metadata']['namespace']}/{o['metadata']['name']}" for c, o in tagged]


@pytest.mark.parametrize(
    "sort",
    [(), (SortKey(PRIORITY, True),), (SortKey(PRIORITY), SortKey(NAME, True))],
)
@pytest.mark.parametrize("first", [1, 7, 50])
async def test_merged_pages_walk_every_clusters_objects_once_in_one_order(
    sort: tuple[SortKey, ...], first: int
) -> None:
    clusters = {"b": _objects(1, 40), "a": _objects(2, 25), "c": _objects(3, 0)}
    ordered = {}
    for name, objects in clusters.items():
        spec = ViewSpec(POD, None, sort=sort, first=first)
        snap = await _snapshot(objects, [k.path for k in sort])
        ordered[name] = evaluate.order(snap, spec)
    walked: list[str] = []
    after: dict[str, str] = {}
    for _ in range(500):
        pages = []
        for name, order in ordered.items():
            at = decode_cursor(sort, after[name]) if name in after else None
            spec = ViewSpec(POD, None, sort=sort, first=first, after=at)
            pages.append((name, evaluate.page(order, spec)))
        merged = merge(sort, first, pages, after)
        assert len(merged.items) <= first
        assert merged.total == sum(len(v) for v in clusters.values())
        assert merged.has_previous is bool(after)
        walked += [
            f"{i.cluster}:{i.obj['metadata']['namespace']}/{i.obj['metadata']['name']}"
            for i in merged.items
        ]
        if not merged.has_next:
            break
        assert merged.end_cursor is not None
        after = decode_fleet_cursor(sort, merged.end_cursor)
        assert after == merged.positions
    assert walked == _own(clusters, sort)


async def test_a_large_merge_runs_off_the_loop_with_the_same_answer() -> None:
    sort = (SortKey(PRIORITY, True),)
    pages = []
    for c in range(4):
        objects = _objects(c, 600)
        snap = await _snapshot(objects, [PRIORITY])
        spec = ViewSpec(POD, None, sort=sort, first=500)
        pages.append((f"c{c}", evaluate.page(evaluate.order(snap, spec), spec)))
    assert sum(len(p.cursors) for _, p in pages) > MERGE_INLINE
    inline = merge(sort, 500, pages, {})
    off = await merge_off_loop(sort, 500, pages, {})
    assert [(i.cluster, i.cluster_cursor) for i in off.items] == [
        (i.cluster, i.cluster_cursor) for i in inline.items
    ]
    assert off.end_cursor == inline.end_cursor and off.has_next and off.total == 2400


def test_forged_fleet_cursors_are_refused() -> None:
    sort = (SortKey(NAME),)
    good = encode_fleet_cursor(sort, {})
    assert decode_fleet_cursor(sort, good) == {}

    def raw(data: Any) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(data)).decode()

    for bad in (
        "",
        "%%%",
        "A" * 70_000,
        raw(["fleet", "x", {}]),  # another sort
        raw(["fleet", good, []]),
        raw(["fleet", "x", {f"c{i}": "x" for i in range(65)}]),
        raw({"fleet": 1}),
        encode_fleet_cursor((SortKey(NAME, True),), {}),
    ):
        with pytest.raises(errors.InvalidView, match="is not a cursor of this fleet view"):
            decode_fleet_cursor(sort, bad)
    # a cluster's position of another sort is refused by the cluster's own cursor check
    other = (SortKey(PRIORITY),)
    forged = encode_fleet_cursor(sort, {"a": "bm90IGEgY3Vyc29y"})
    with pytest.raises(errors.InvalidView, match="is not a cursor of this view"):
        decode_fleet_cursor(sort, forged)
    assert decode_fleet_cursor(None, forged) == {"a": "bm90IGEgY3Vyc29y"}  # form only
    with pytest.raises(errors.InvalidView):
        decode_fleet_cursor(other, forged)


@pytest.mark.parametrize(
    "values",
    [
        [(1, 3), (1, -0.0), (1, 2.5e300), (2, 'é\n"x"'), (1, True), (1, False), (0, "")],
        [(1, 1), (1, 1.0), (1, 2**62), (2, "")],
    ],
)
async def test_a_merge_reads_each_position_as_its_cursor_decodes(values: list[Any]) -> None:
    """The merge takes a page's positions for what their cursors decode to (no cursor
    written and read per candidate): the same values, of the same types, and the same
    merged page as when every cursor is written and read."""
    sort = (SortKey(PRIORITY),)
    objects = [
        {"metadata": {"namespace": "ns", "name": f"p{i}"}, "spec": {"priority": v}}
        for i, (_tag, v) in enumerate(values)
    ]
    snap = await _snapshot(objects, [PRIORITY])
    spec = ViewSpec(POD, None, sort=sort, first=50)
    pages = [(name, evaluate.page(evaluate.order(snap, spec), spec)) for name in ("a", "b")]
    for _, page in pages:
        for j, position in enumerate(page.positions):
            decoded = decode_cursor(sort, page.cursors[j])
            fast = merge_module._as_decoded(sort, page, j, position, page.sort == sort)
            assert fast == decoded
            assert [type(v) for k in fast[:-2] for v in k] == [
                type(v) for k in decoded[:-2] for v in k
            ]
    # a merge of pages whose cursors were never written: the same cursors as those pages'
    fresh = [(n, evaluate.page(evaluate.order(snap, spec), spec)) for n in ("a", "b")]
    merged = merge(sort, 50, fresh, {})
    assert len(merged.items) == 2 * len(values)
    by_name = dict(pages)
    for item in merged.items:
        assert item.cluster_cursor == by_name[item.cluster].cursors[item.at]
