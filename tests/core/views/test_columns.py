"""The columnar evaluation (masks of bytes, joined texts, value codes) against the plain one.

Property style, seeded: random objects (fields absent, null, of the wrong type, equal
across objects, texts holding the joined texts' separator and marker) in a store with
deletions and replacements, and random views (filter trees of every operator, label and
field selectors, and/or/not, searches, sorts), each answered by the columnar evaluation
(:func:`~gateway.core.views.evaluate.order`, every page walked by its cursors, and
:func:`~gateway.core.views.evaluate.tally`) and by a plain one written here: the per-slot
test of each node (:func:`~gateway.core.views.evaluate.predicate`, what every slot was
tested with before the masks), the search text of each entry, a sort of the selected
slots by their sort values, and a ``Counter`` of the grouped values.  A store of 5,000
objects also takes the paths for columns of more than 256 and more than 4,096 distinct
values.

Pure functions of a store snapshot and a spec: no network is involved, nothing is mocked.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import pytest

from gateway.core import POD, schema
from gateway.core.views import columns, evaluate
from gateway.core.views.spec import FieldPath, Node, ViewSpec, decode_cursor, view_spec
from gateway.core.views.store import Entry, Snapshot, Store

MODEL = schema.seed_model()
KIND = MODEL.kind_type("", "v1", "Pod")

#: Field paths the random views use, with the values their conditions take (as text).
PATHS: dict[str, list[str]] = {
    "metadata.name": ["p01-3", "p02-7", "p1", "-1", "3", "p"],
    "spec.nodeName": ["n1", "n2", "n10", "n", "1", "5", "true", "\x01", "a\x00b", "é"],
    "status.phase": ["Running", "Pending", "Failed", "Run", "ing", ""],
    "spec.priority": ["-1", "0", "1", "2", "3"],
    "spec.hostNetwork": ["true", "false"],
    "status.startTime": ["2026-01-01T00:00:00Z", "2026-02-02T00:00:00Z", "2026-03-03T00:00:00Z"],
    "metadata.labels.app": ["x", "y", "z", "5", "true"],
    "metadata.labels.id": ["i1", "i2", "i30", "i4499"],
    "status.podIP": ["10.0.0.1", "10.0.0.", "10."],
}
TEXT = {"metadata.name", "spec.nodeName", "status.phase", "metadata.labels.app", "status.podIP"}
TEXT |= {"metadata.labels.id"}
COMPARE = {"spec.priority", "status.startTime", "metadata.name", "status.phase"}
GROUPS = ["status.phase", "spec.nodeName", "spec.hostNetwork", "spec.priority"]
GROUPS += ["metadata.labels.app", "metadata.labels.id", "metadata.name"]


def _odd(rnd: random.Random, usual: Any) -> Any:
    """A field's usual value, else absent (``...``), null, or a value of another type."""
    roll = rnd.random()
    if roll < 0.75:
        return usual
    return rnd.choice([..., None, 5, 2.0, True, "true", "", "1"])


def _obj(rnd: random.Random, i: int, wide: bool) -> dict[str, Any]:
    labels: dict[str, Any] = {}
    if rnd.random() < 0.8:
        labels["app"] = _odd(rnd, rnd.choice(("x", "y", "z")))
    if wide:
        labels["id"] = f"i{i}"  # one value per object
    elif rnd.random() < 0.3:
        labels["id"] = rnd.choice(("i1", "i2", "i30"))
    meta: dict[str, Any] = {
        "name": f"p{rnd.randrange(40):02d}-{i}",
        "namespace": rnd.choice(("a", "b", "c")),
        "labels": {k: v for k, v in labels.items() if v is not ...},
    }
    if rnd.random() < 0.2:
        meta["annotations"] = {"note": rnd.choice(("hello\x00world", "p1 here", "x\ny"))}
    if rnd.random() < 0.05:
        meta["labels"] = ["not", "a", "map"]
    fields = {
        "spec.priority": _odd(rnd, rnd.randrange(-3, 4)),
        "spec.nodeName": _odd(rnd, rnd.choice(("n1", "n2", "n10", "x\x01", "a\x00b", "é1"))),
        "spec.hostNetwork": _odd(rnd, rnd.random() < 0.5),
        "status.phase": _odd(rnd, rnd.choice(("Running", "Pending", "Failed"))),
        "status.startTime": _odd(
            rnd, f"2026-0{rnd.randrange(1, 4)}-0{rnd.randrange(1, 4)}T00:00:00Z"
        ),
        "status.podIP": _odd(rnd, f"10.0.{rnd.randrange(3)}.{rnd.randrange(1, 4)}"),
    }
    obj: dict[str, Any] = {"metadata": meta, "spec": {}, "status": {}}
    for path, value in fields.items():
        if value is not ...:
            top, key = path.split(".")
            obj[top][key] = value
    return obj


def _store(rnd: random.Random, n: int, wide: bool) -> Store:
    store = Store()
    objs = [_obj(rnd, i, wide) for i in range(n)]
    for o in objs:
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    for o in objs[: n // 10]:  # free slots
        store.delete(f"{o['metadata']['namespace']}/{o['metadata']['name']}")
    for old in objs[n // 10 : n // 5]:  # replaced, values moved
        o = {**old, "spec": {**old["spec"], "priority": rnd.randrange(-3, 4)}}
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    return store


def _condition(rnd: random.Random) -> dict[str, Any]:
    path = rnd.choice(list(PATHS))
    pool = PATHS[path]
    ops = ["eq", "ne", "in", "notIn", "exists"]
    if path in TEXT:
        ops += ["prefix", "contains", "contains", "prefix"]
    if path in COMPARE:
        ops += ["lt", "lte", "gt", "gte"]
    op = rnd.choice(ops)
    if op in ("in", "notIn"):
        return {
            "field": path,
            "op": op,
            "values": rnd.sample(pool, rnd.randrange(1, min(4, len(pool) + 1))),
        }
    if op == "exists":
        return {"field": path, "op": op, "value": rnd.choice(("true", "false"))}
    return {"field": path, "op": op, "value": rnd.choice(pool)}


def _selector(rnd: random.Random) -> dict[str, Any]:
    if rnd.random() < 0.5:
        key = rnd.choice(("app", "id", "missing"))
        value = rnd.choice(("x", "y", "5", "true", "i1", "i4499"))
        return {
            "labelSelector": rnd.choice(
                (
                    f"{key}={value}",
                    f"{key}!={value}",
                    f"{key} in (x,{value})",
                    f"{key} notin ({value})",
                    key,
                    f"!{key}",
                )
            )
        }
    path = rnd.choice(("status.phase", "spec.nodeName", "spec.hostNetwork", "metadata.name"))
    path = rnd.choice((path, "spec.priority"))
    value = rnd.choice(("Running", "n1", "true", "false", "", "1", "2.0", "p01-3", "5"))
    return {"fieldSelector": f"{path}{rnd.choice(('=', '==', '!='))}{value}"}


def _filter(rnd: random.Random, depth: int = 0) -> dict[str, Any]:
    roll = rnd.random()
    if depth < 3 and roll < 0.3:
        key = rnd.choice(("and", "or"))
        return {key: [_filter(rnd, depth + 1) for _ in range(rnd.randrange(0, 4))]}
    if depth < 3 and roll < 0.4:
        return {"not": _filter(rnd, depth + 1)}
    if roll < 0.6:
        return _selector(rnd)
    return _condition(rnd)


def _spec(rnd: random.Random) -> ViewSpec:
    where = _filter(rnd) if rnd.random() < 0.9 else None
    if where is not None and ("and" in where or "or" in where) and not next(iter(where.values())):
        where = None  # an empty and/or is refused by the spec
    sort = rnd.choice(
        (
            [],
            [{"field": "status.startTime", "order": "desc"}],
            [{"field": "spec.priority", "order": "asc"}],
            [{"field": "metadata.name", "order": "desc"}],
            [
                {"field": "status.phase", "order": "asc"},
                {"field": "spec.priority", "order": "desc"},
            ],
        )
    )
    search = rnd.choice((None, None, "p0", "app=x", "é", "hello", "\x00", ""))
    return view_spec(
        POD,
        KIND,
        MODEL.object_type,
        filter=where,
        sort=sort,
        search=search,
        first=rnd.choice((3, 50, 500)),
    )


def _plain_selected(snap: Snapshot, spec: ViewSpec) -> list[int]:
    """The occupied slots the spec selects, each tested by itself."""
    test = None if spec.filter is None else evaluate.predicate(spec.filter, snap)
    out = []
    for i in snap.occupied:
        entry = snap.slots[i]
        assert entry is not None
        if spec.search is not None and spec.search not in entry.search_text():
            continue
        if test is not None and not test(i):
            continue
        out.append(i)
    return out


def _plain_order(snap: Snapshot, spec: ViewSpec, slots: list[int]) -> list[int]:
    out = sorted(slots, key=lambda i: snap.names[i])  # type: ignore[arg-type, return-value]
    for key in reversed(spec.sort):
        out.sort(key=lambda i, p=key.path: evaluate.column(snap, p)[i], reverse=key.descending)
    return out


def _walk(snap: Snapshot, spec: ViewSpec) -> tuple[list[int], int]:
    ordered = evaluate.order(snap, spec)
    by_name = {n: i for i, n in enumerate(snap.names) if n is not None}
    found: list[int] = []
    while True:
        page = evaluate.page(ordered, spec)
        found += [by_name[o["metadata"]["namespace"], o["metadata"]["name"]] for o in page.items]
        if not page.has_next:
            return found, page.total
        assert page.end_cursor is not None
        spec = replace(spec, after=decode_cursor(spec.sort, page.end_cursor))


def _snapshot(store: Store, spec: ViewSpec, by: FieldPath) -> Snapshot:
    paths = [*evaluate.paths_of(spec), by]
    asyncio.run(store.ensure(paths, [k.path for k in spec.sort] if len(spec.sort) == 1 else []))
    return store.snapshot("1", paths)


def _check(store: Store, rnd: random.Random, views: int, given: list[ViewSpec] = []) -> None:  # noqa: B006
    for i in range(views + len(given)):
        spec = given[i - views] if i >= views else _spec(rnd)
        by = evaluate.paths_of(
            view_spec(POD, KIND, MODEL.object_type, sort=[{"field": rnd.choice(GROUPS)}])
        )[0]
        snap = _snapshot(store, spec, by)
        if rnd.random() < 0.5:  # what the cache builds first: the same answers after it
            evaluate.prepare(snap, spec, by)
        want = _plain_selected(snap, spec)
        got, total = _walk(snap, spec)
        assert got == _plain_order(snap, spec, want), spec
        assert total == len(want), spec
        assert evaluate.tally(snap, spec, by) == (len(want), evaluate.counts(snap, want, by)), (
            spec,
            by,
        )
        if spec.filter is not None:  # each node's mask, against each slot's test
            _check_nodes(snap, spec.filter)


def _check_nodes(snap: Snapshot, node: Node) -> None:
    mask = evaluate.mask(node, snap)
    test = evaluate.predicate(node, snap)
    for i in snap.occupied:
        assert bool(mask[i]) == test(i), (node, i, evaluate.column)
    for part in getattr(node, "parts", ()):
        _check_nodes(snap, part)
    inner = getattr(node, "part", None)
    if inner is not None:
        _check_nodes(snap, inner)


@pytest.mark.parametrize("seed", range(6))
def test_columnar_evaluation_answers_as_the_plain_one(seed: int) -> None:
    rnd = random.Random(seed)
    _check(_store(rnd, 400, wide=False), rnd, 120)


def test_columnar_evaluation_of_many_distinct_values() -> None:
    """Codes in a list (more than 256 distinct names) and conditions found by their
    values' codes (more than 4,096 distinct label values)."""
    rnd = random.Random(4500)
    store = _store(rnd, 5000, wide=True)  # 4,500 left, as many label values
    given = [
        view_spec(POD, KIND, MODEL.object_type, filter=where, first=500)
        for field in ("metadata.labels.id", "metadata.name")
        for where in (
            {"field": field, "op": "eq", "value": "i4499"},
            {"field": field, "op": "ne", "value": "i30"},
            {"field": field, "op": "in", "values": ["i1", "i2", "p01-3", "x"]},
            {"field": field, "op": "notIn", "values": ["i1", "i4499"]},
            {"field": field, "op": "gte", "value": "i4"},
            {"field": field, "op": "exists", "value": "false"},
        )
    ]
    _check(store, rnd, 40, given)
    spec = view_spec(POD, KIND, MODEL.object_type)
    by = evaluate.paths_of(
        view_spec(POD, KIND, MODEL.object_type, sort=[{"field": "metadata.labels.id"}])
    )[0]
    snap = _snapshot(store, spec, by)
    found = columns.codes(snap, by, evaluate.column(snap, by))
    assert len(found.keys) > columns.MANY and type(found.codes) is list


def test_masks_combine_bytewise() -> None:
    a, b = b"\x01\x00\x01\x00", b"\x01\x01\x00\x00"
    assert columns.combine([a, b], True) == b"\x01\x00\x00\x00"
    assert columns.combine([a, b], False) == b"\x01\x01\x01\x00"
    assert columns.negate(a) == b"\x00\x01\x00\x01"
    texts = ["abcab", "", "xab", "ba", "ab"]
    data = b"\x00".join(t.encode() for t in texts) + b"\x00"
    assert columns.having(data, 5, "ab", False) == b"\x01\x00\x01\x00\x01"
    assert columns.having(data, 5, "ab", True) == b"\x01\x00\x00\x00\x01"
    assert columns.having(data, 5, "a\x00", False) is None
