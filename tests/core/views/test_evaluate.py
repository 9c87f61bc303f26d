"""Views' evaluation, differentially: random objects (fields absent, of the wrong type,
equal across objects) and random views (filters, sorts, page sizes), each walked page by
page with its cursors, against the test's own filter and sort written from the docs.

Pure functions of a store snapshot and a spec: no network is involved, nothing is mocked.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import orjson
import pytest

from gateway.core import POD, schema
from gateway.core.lists import projections
from gateway.core.lists.projections import CHECKS, COPY, LEAF
from gateway.core.support import deepjson
from gateway.core.views import evaluate
from gateway.core.views.spec import ViewSpec, decode_cursor, view_spec
from gateway.core.views.store import Entry, Store

MODEL = schema.seed_model()
KIND = MODEL.kind_type("", "v1", "Pod")
PHASES = ("Running", "Pending", "Failed", None)


def _obj(rnd: random.Random, i: int) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"p{rnd.randrange(40):02d}-{i}",
        "namespace": rnd.choice(("a", "b", "c")),
        "labels": {"app": rnd.choice(("x", "y"))} if rnd.random() < 0.8 else {},
    }
    spec: dict[str, Any] = {}
    roll = rnd.random()
    if roll < 0.6:
        spec["priority"] = rnd.randrange(-3, 4)  # many equal values: the tiebreaker matters
    elif roll < 0.7:
        spec["priority"] = "high"  # the wrong type: sorts after numbers
    if rnd.random() < 0.5:
        spec["nodeName"] = rnd.choice(("n1", "n2", "n10"))
    status: dict[str, Any] = {}
    phase = rnd.choice(PHASES)
    if phase is not None:
        status["phase"] = phase
    if rnd.random() < 0.7:
        status["startTime"] = f"2026-0{rnd.randrange(1, 4)}-0{rnd.randrange(1, 4)}T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": status}


def _read(obj: dict[str, Any], path: str) -> Any:
    if path.startswith("metadata.labels."):
        return obj["metadata"]["labels"].get(path.removeprefix("metadata.labels."))
    for key in path.split("."):
        obj = obj.get(key) if isinstance(obj, dict) else None  # type: ignore[assignment]
    return obj


def _sort_value(value: Any, numeric: bool) -> tuple[int, Any]:
    """The docs' order: absent first (ascending), values of the type, then the others."""
    if value is None:
        return (0, "")
    if numeric and type(value) is int:
        return (1, value)
    if not numeric and type(value) is str:
        return (1, value)
    return (2, str(value))


NUMERIC = {"spec.priority"}


def _expected(objs: list[dict[str, Any]], keys: list[tuple[str, bool]]) -> list[str]:
    out = sorted(objs, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))
    for path, desc in reversed(keys):
        out.sort(key=lambda o, p=path: _sort_value(_read(o, p), p in NUMERIC), reverse=desc)
    return [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in out]


def _priority_at_least(o: dict[str, Any]) -> bool:
    value = _read(o, "spec.priority")
    return type(value) is int and value >= 0


FILTERS: list[tuple[dict[str, Any] | None, Any]] = [
    (None, lambda o: True),
    ({"field": "spec.priority", "op": "gte", "value": "0"}, _priority_at_least),
    (
        {"field": "spec.priority", "op": "ne", "value": "1"},
        lambda o: _read(o, "spec.priority") != 1,
    ),
    (
        {"field": "status.phase", "op": "in", "values": ["Running", "Failed"]},
        lambda o: _read(o, "status.phase") in ("Running", "Failed"),
    ),
    (
        {"field": "spec.nodeName", "op": "exists", "value": "false"},
        lambda o: _read(o, "spec.nodeName") is None,
    ),
    (
        {"field": "status.startTime", "op": "lt", "value": "2026-02-02T00:00:00Z"},
        lambda o: (_read(o, "status.startTime") or "~") < "2026-02-02T00:00:00Z",
    ),
    ({"not": {"labelSelector": "app=x"}}, lambda o: _read(o, "metadata.labels.app") != "x"),
    (
        {
            "or": [
                {"fieldSelector": "spec.nodeName="},
                {"field": "metadata.name", "op": "prefix", "value": "p1"},
            ]
        },
        lambda o: _read(o, "spec.nodeName") is None or o["metadata"]["name"].startswith("p1"),
    ),
]
SORTS: list[list[tuple[str, bool]]] = [
    [],
    [("spec.priority", False)],
    [("spec.priority", True)],
    [("status.phase", True), ("spec.priority", False)],
    [("spec.nodeName", False), ("status.startTime", True), ("metadata.labels.app", False)],
]


def _spec(where: dict[str, Any] | None, keys: list[tuple[str, bool]], first: int) -> ViewSpec:
    return view_spec(
        POD,
        KIND,
        MODEL.object_type,
        filter=where,
        sort=[{"field": f, "order": "desc" if d else "asc"} for f, d in keys],
        first=first,
    )


def _walk(store: Store, spec: ViewSpec) -> list[str]:
    paths = evaluate.paths_of(spec)
    asyncio.run(store.ensure(paths))
    snap = store.snapshot("1", paths)
    ordered = evaluate.order(snap, spec)
    names: list[str] = []
    while True:
        page = evaluate.page(ordered, spec)
        names += [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in page.items]
        assert page.total == len(ordered.slots)
        if not page.has_next:
            return names
        assert page.end_cursor is not None
        spec = replace(spec, after=decode_cursor(spec.sort, page.end_cursor))


def test_every_view_of_random_objects_pages_through_the_tests_own_order() -> None:
    rnd = random.Random(29)
    objs = [_obj(rnd, i) for i in range(300)]
    store = Store()
    for o in objs:
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    # deletions and replacements leave free slots and moved values behind
    for o in objs[:40]:
        store.delete(f"{o['metadata']['namespace']}/{o['metadata']['name']}")
    for o in objs[40:60]:
        o["spec"]["priority"] = 7
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    live = objs[40:]
    for where, test in FILTERS:
        for keys in SORTS:
            for first in (1, 7, 500):
                got = _walk(store, _spec(where, keys, first))
                assert got == _expected([o for o in live if test(o)], keys), (where, keys, first)


def test_a_page_boundary_holds_when_objects_come_and_go_before_it() -> None:
    rnd = random.Random(7)
    objs = [_obj(rnd, i) for i in range(100)]
    store = Store()
    for o in objs:
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    keys = [("spec.priority", True)]
    spec = _spec(None, keys, 10)
    paths = evaluate.paths_of(spec)
    asyncio.run(store.ensure(paths))
    first = evaluate.page(evaluate.order(store.snapshot("1", paths), spec), spec)
    shown = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in first.items]
    # remove three objects before the boundary, add five that sort before it
    for key in shown[:3]:
        store.delete(key)
    for i in range(5):
        o = {
            "metadata": {"name": f"new-{i}", "namespace": "a", "labels": {}},
            "spec": {"priority": 99},
        }
        store.put(f"a/new-{i}", Entry(o, 1))
    assert first.end_cursor is not None
    after = replace(spec, after=decode_cursor(spec.sort, first.end_cursor), first=500)
    rest = evaluate.page(evaluate.order(store.snapshot("2", paths), after), after)
    names = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in rest.items]
    everything = _expected([e.obj for e in store.slots if e is not None], keys)  # the order now
    assert names == everything[everything.index(shown[-1]) + 1 :]
    assert rest.has_previous


def _churn(rnd: random.Random, store: Store, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deletions, replacements with moved values, and new objects in the freed slots."""
    for o in objs[:30]:
        store.delete(f"{o['metadata']['namespace']}/{o['metadata']['name']}")
    for old in objs[30:80]:
        o = {**old, "spec": {**old["spec"], "priority": rnd.randrange(-3, 4)}}
        o["status"] = {**o["status"], "startTime": f"2026-0{rnd.randrange(1, 4)}-01T00:00:00Z"}
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    fresh = [_obj(rnd, 1000 + i) for i in range(40)]
    for o in fresh:
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    return [e.obj for e in store.slots if e is not None]


def test_indexes_kept_through_churn_walk_to_the_tests_own_order() -> None:
    """A sort by one key walks the column's index (kept by every put and delete after it
    was built, and through changes made while it was being built): every filter, both
    orders, every page, against the test's own order of the objects stored now."""
    rnd = random.Random(33)
    objs = [_obj(rnd, i) for i in range(300)]
    store = Store()
    for o in objs:
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    keys_built = [("spec.priority", False), ("status.startTime", True)]
    paths = evaluate.paths_of(_spec(None, keys_built, 1))

    async def build_while_churning() -> list[dict[str, Any]]:
        first = asyncio.create_task(store.ensure(paths[:1]))
        await asyncio.sleep(0)  # it runs: the column is built, its index sorted in a thread
        assert store.columns[paths[0].keys].dirty is not None  # the index is being sorted
        live = _churn(rnd, store, objs)  # changes while it is sorted
        await first
        await store.ensure(paths)
        return live

    live = asyncio.run(build_while_churning())
    assert all(store.columns[p.keys].index is not None for p in paths)
    live = _churn(rnd, store, [o for o in live])  # and changes after
    for where, test in FILTERS:
        for keys in (
            [("spec.priority", False)],
            [("spec.priority", True)],
            [("status.startTime", True)],
            [("status.startTime", False)],
            [],
        ):
            spec = _spec(where, keys, 9)
            snap = store.snapshot("1", evaluate.paths_of(spec))
            assert evaluate.order(snap, spec).index is not None  # the walk, not a sort
            got = _walk(store, spec)
            assert got == _expected([o for o in live if test(o)], keys), (where, keys)


def test_has_previous_and_next_on_a_walked_index() -> None:
    rnd = random.Random(5)
    store = Store()
    for o in (_obj(rnd, i) for i in range(50)):
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    spec = _spec(None, [("spec.priority", True)], 10)
    paths = evaluate.paths_of(spec)
    asyncio.run(store.ensure(paths))
    ordered = evaluate.order(store.snapshot("1", paths), spec)
    first = evaluate.page(ordered, spec)
    assert first.has_next and not first.has_previous and first.total == 50
    assert first.end_cursor is not None
    second = replace(spec, after=decode_cursor(spec.sort, first.end_cursor))
    page = evaluate.page(ordered, second)
    assert page.has_previous and page.has_next and len(page.items) == 10
    counted = evaluate.page(ordered, replace(second, first=0))
    assert counted.has_previous and counted.has_next and counted.total == 50
    last = replace(second, first=500)
    rest = evaluate.page(ordered, last)
    assert rest.has_previous and not rest.has_next and len(rest.items) == 40


def test_a_pages_positions_are_read_when_asked_and_its_end_cursor_without_them() -> None:
    """A page's positions are read on first use (an answer without edges asks only for
    ``endCursor``): its start and end cursors read alone are those of its positions read
    whole, for every sort (one key, several, none: by name), a page of one, an empty one;
    once read, the page lets the snapshot's columns go, and a copy made before (another
    version) reads the same."""
    rnd = random.Random(11)
    store = Store()
    for o in (_obj(rnd, i) for i in range(60)):
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    for keys in [[("spec.priority", True)], SORTS[-1], []]:
        for first in (0, 1, 7, 500):
            spec = _spec(None, keys, first)
            paths = evaluate.paths_of(spec)
            asyncio.run(store.ensure(paths))
            ordered = evaluate.order(store.snapshot("1", paths), spec)
            page = evaluate.page(ordered, spec)
            ends = page.start_cursor, page.end_cursor
            copy = replace(page, resource_version="2")
            assert page._positions_at is not None  # nothing read yet
            want = ordered.positions_of(ordered.slots[:first])
            assert page.positions == want and page._positions_at is None
            cursors = page.cursors
            assert ends == ((cursors[0], cursors[-1]) if cursors else (None, None)), keys
            assert copy.positions == want and (copy.start_cursor, copy.end_cursor) == ends
            if first == 7:  # the next page from the end cursor read alone
                after = replace(spec, after=decode_cursor(spec.sort, ends[1]))
                assert evaluate.page(ordered, after).positions == ordered.positions_of(
                    ordered.slots[7:14]
                )


def test_the_callers_of_a_page_share_its_objects_decoded_once() -> None:
    """The last page cut of an order is kept with it: asked again (at a later version of
    the same objects too), its objects are not decoded again; another page is."""
    rnd = random.Random(8)
    store = Store()
    for o in (_obj(rnd, i) for i in range(50)):
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    spec = _spec(None, [("spec.priority", True)], 10)
    paths = evaluate.paths_of(spec)
    asyncio.run(store.ensure(paths))
    ordered = evaluate.order(store.snapshot("1", paths), spec)
    first = evaluate.page(ordered, spec)
    again = evaluate.page(ordered, spec)
    later = evaluate.page(ordered, spec, "7")
    assert ordered.decoded == 10 and again.items is first.items and later.items is first.items
    assert (again.resource_version, later.resource_version) == ("1", "7")
    assert later.cursors == first.cursors and later.total == first.total == 50
    assert first.end_cursor is not None
    second = replace(spec, after=decode_cursor(spec.sort, first.end_cursor))
    nxt = evaluate.page(ordered, second)
    assert ordered.decoded == 20 and nxt.items != first.items and nxt.has_previous
    bigger = evaluate.page(ordered, replace(spec, first=11))
    assert ordered.decoded == 31 and bigger.items[:10] == first.items


def test_substring_prefix_and_search_few_and_many_matches() -> None:
    """Contains, prefix and search, each with few matches (found in the joined texts) and
    with many (a map over them), on texts with newlines, empty ones and absent ones."""
    rnd = random.Random(11)
    objs = []
    for i in range(400):
        o = _obj(rnd, i)
        if i % 7 == 0:
            o["spec"]["nodeName"] = f"n{i}\nrare-{i % 3}"  # a newline inside a value
        elif i % 11 == 0:
            o["spec"]["nodeName"] = ""
        objs.append(o)
    store = Store()
    for o in objs:
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    for op, value in [
        ("contains", "rare-1"),
        ("contains", "n"),
        ("contains", "1\nr"),
        ("prefix", "rare"),
        ("prefix", "n1"),
        ("prefix", "n"),
        ("contains", "-12"),
    ]:
        where = {"field": "spec.nodeName", "op": op, "value": value}

        def test(o: dict[str, Any], op: str = op, value: str = value) -> bool:
            have = _read(o, "spec.nodeName")
            if type(have) is not str:
                return False
            return have.startswith(value) if op == "prefix" else value in have

        for keys in ([], [("spec.nodeName", True)]):
            got = _walk(store, _spec(where, keys, 13))
            assert got == _expected([o for o in objs if test(o)], keys), (op, value, keys)
    for needle in ("p03", "a", "rare", "app=x"):
        spec = replace(_spec(None, [], 500), search=needle)
        got = _walk(store, spec)
        want = [
            o
            for o in objs
            if needle
            in "\n".join(
                [o["metadata"]["name"], o["metadata"]["namespace"]]
                + [f"{k}={v}" for k, v in o["metadata"]["labels"].items()]
            ).lower()
        ]
        assert got == _expected(want, []), needle


def test_one_substring_test_walks_its_texts_in_the_views_order_exactly() -> None:
    """A view whose selection is one ``contains`` (or one search) finds its matches in its
    texts joined in the order of its sort (:class:`evaluate.Finder`): page by page with its
    cursors, ascending, descending and by name, it selects what the test's own ``in``
    does, on names with non-ASCII text (accents, symbols, emoji), a
    needle of regular-expression characters, a needle twice in one name (counted once),
    one that spans two neighbouring names (no match), letters of another case (no match
    for a filter; the same for a search, which folds case), and names holding the
    separator (then a mask selects, the same)."""
    rnd = random.Random(5)
    specials = ["é-web-É", "☃x☃", "😀web😀", "a.b*c[d]\\e$", "abab-ab", "xa", "by",
                "WEB-up", "nul\x00web", "mark\x01web"]  # fmt: skip
    objs = []
    for i in range(300):
        o = _obj(rnd, i)
        o["metadata"]["name"] = f"{specials[i % len(specials)]}-{i}" if i % 3 else f"web-{i}"
        o["spec"]["nodeName"] = specials[i % len(specials)] if i % 3 != 1 else f"n-{i}"
        objs.append(o)
    store = Store()
    for o in objs:
        store.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    needles = ["web", "é", "☃x", "😀w", ".b*c[", "\\e$", "ab", "ab-ab",
               "ab\x00by", "WEB", "-1", "zzz"]  # fmt: skip
    for field in ("metadata.name", "spec.nodeName"):
        for needle in needles:
            where = {"field": field, "op": "contains", "value": needle}
            want = [o for o in objs if needle in _read(o, field)]
            for keys in ([], [("spec.nodeName", False)], [("spec.nodeName", True)]):
                spec = _spec(where, keys, 7)
                got = _walk(store, spec)
                assert got == _expected(want, keys), (field, needle, keys)
        # the separator in a text: the texts cannot be joined, a mask selects
        spec = _spec({"field": field, "op": "contains", "value": "web"}, [], 7)
        paths = evaluate.paths_of(spec)
        asyncio.run(store.ensure(paths))
        assert evaluate.order(store.snapshot("1", paths), spec).finder is None
    clean = Store()  # without the separator: the finder is used
    for o in objs:
        if "\x00" not in o["metadata"]["name"] + o["spec"]["nodeName"]:
            clean.put(f"{o['metadata']['namespace']}/{o['metadata']['name']}", Entry(o, 1))
    kept = [o for o in objs if "\x00" not in o["metadata"]["name"] + o["spec"]["nodeName"]]
    for needle in needles:
        for keys in ([], [("status.startTime", True)]):
            where = {"field": "metadata.name", "op": "contains", "value": needle}
            spec = _spec(where, keys, 5)
            paths = evaluate.paths_of(spec)
            asyncio.run(clean.ensure(paths))
            ordered = evaluate.order(clean.snapshot("1", paths), spec)
            assert (ordered.finder is None) is ("\x00" in needle), needle
            want = [o for o in kept if needle in o["metadata"]["name"]]
            assert ordered.total == len(want)
            assert _walk(clean, spec) == _expected(want, keys), (needle, keys)
    for needle in ("web", "é", "É", "☃", "app=x"):  # a search folds case
        spec = replace(_spec(None, [("spec.nodeName", True)], 9), search=needle.lower())
        want = [
            o
            for o in kept
            if needle.lower()
            in "\n".join(
                [o["metadata"]["name"], o["metadata"]["namespace"]]
                + [f"{k}={v}" for k, v in o["metadata"]["labels"].items()]
            ).lower()
        ]
        assert _walk(clean, spec) == _expected(want, [("spec.nodeName", True)]), needle


# A projection's plan as plain data (:mod:`gateway.core.lists.projections`): a pod's name
# (a checked ``String`` leaf), its labels (a ``JSON`` value, copied whole), its containers'
# names and its phase.
_NAME = ("name", LEAF, "name", CHECKS["String"], ("leaf", "String"), False)
_LABELS = ("labels", COPY, "labels", None, None, False)
_META = ("object", "ObjectMeta", (_NAME, _LABELS))
_CONTAINER = ("object", "Container", (_NAME,))
_POD_SPEC = ("object", "PodSpec", (("containers", LEAF, "containers", None,
             ("list", False, ("nonnull", _CONTAINER)), False),))  # fmt: skip
_PHASE = ("phase", LEAF, "phase", CHECKS["String"], ("leaf", "String"), False)
_STATUS = ("object", "PodStatus", (_PHASE,))
POD_PLAN = ("object", "Pod", (("metadata", LEAF, "metadata", None, _META, False),
            ("spec", LEAF, "spec", None, _POD_SPEC, False),
            ("status", LEAF, "status", None, _STATUS, False)))  # fmt: skip


def _projected(items: list[Any]) -> list[Any]:
    """The plan's projection of each item, or ``"fallback"`` where it falls back."""
    project = projections.build(POD_PLAN)
    out: list[Any] = []
    for item in items:
        try:
            out.append(orjson.dumps(project(item)))
        except projections.Fallback:
            out.append("fallback")
    return out


def test_a_page_read_for_a_projection_builds_only_what_it_reads_and_projects_the_same() -> None:
    """A page's objects read for a projection (what a GraphQL selection of its nodes does)
    build only the keys the projection reads, and project to the very bytes their whole
    decode does; where a partial read could differ from the whole decode, the object is
    decoded whole: a number past 64 bits in a value copied whole (a whole decode makes it a
    ``float``), nesting past what ``orjson`` decodes (the whole decode keeps it as JSON
    text); and a value of another type than the one read, a number past a double's range
    that it reads, duplicate keys, escapes and non-ASCII text."""
    plain = {"metadata": {"name": "web-é-\u2603-😀", "labels": {"a": "b", "n": 5},
                          "managedFields": [{"f": {"x": 1}}] * 20, "uid": "u"},
             "spec": {"containers": [{"name": "c", "image": "i"}], "volumes": [{"v": 1}]},
             "status": {"phase": "Running", "conditions": [{"type": "Ready"}]}}  # fmt: skip
    good = orjson.dumps(plain)
    big = good.replace(b'"n":5', b'"n":123456789012345678901234567890')
    deep = good.replace(b'"n":5', b'"n":' + b"[" * 1100 + b"]" * 1100)
    wrong_type = orjson.dumps({**plain, "metadata": ["not", "an", "object"]})
    duplicate = good.replace(b'{"metadata":', b'{"status":{"phase":"Old"},"metadata":')
    escaped = good.replace(b'"web-', b'"\\u0077\\"eb\\n-')
    digits = good.replace(b'"uid":"u"', b'"uid":"12345678901234567890"')
    raws = [good, big, wrong_type, duplicate, escaped, digits, deep]
    contents = evaluate.Contents(list(raws))
    read = contents.read(POD_PLAN)
    assert not contents.decoded  # nothing decoded whole for the answer
    whole = [deepjson.loads(raw) for raw in raws]
    assert _projected(read) == _projected(whole)
    # the good ones built only what the plan reads
    for i in (0, 3, 4):
        assert set(read[i]["metadata"]) == {"name", "labels"}, i
        assert set(read[i]) == {"metadata", "spec", "status"}
        assert set(read[i]["spec"]["containers"][0]) == {"name"}
    # where a partial read may differ, the whole object
    for i in (1, 5, 6):
        assert set(read[i]["metadata"]) == set(whole[i]["metadata"]), i
        assert "managedFields" in read[i]["metadata"], i
    assert read[1] == whole[1] and type(read[1]["metadata"]["labels"]["n"]) is float
    assert type(read[6]["metadata"]["labels"]["n"][0]) is type(
        whole[6]["metadata"]["labels"]["n"][0]
    )
    assert _projected(read)[2] == "fallback"  # the wrong type, either way
    assert orjson.loads(_projected(read)[3])["status"]["phase"] == "Running"
    # a number past a double's range that the projection reads: refused in part, and the
    # whole decode refuses it too
    with pytest.raises(orjson.JSONDecodeError):
        evaluate.Contents([good.replace(b'"phase":"Running"', b'"phase":1e400')]).read(POD_PLAN)
    # once decoded whole (an answer read its objects), a read is the objects themselves
    contents = evaluate.Contents([good])
    assert contents.read(POD_PLAN) is not contents.objects
    assert contents.read(POD_PLAN) is contents.objects


def test_objects_are_kept_written_by_their_json_and_at_most_so_many() -> None:
    """:class:`~gateway.core.views.evaluate.Rendered`: an object is written again unless
    it is the very JSON it was written from (equal bytes of another object, or another
    writer, are written anew); an object the writer refuses raises and nothing of that
    call is kept; at most ``RENDERED_OBJECTS`` per writer are kept, the first written out
    first, for the last ``RENDERED_SELECTIONS`` writers."""
    import msgspec

    def writer() -> Any:
        return (msgspec.json.Decoder(dict[str, int]).decode, msgspec.json.Encoder().encode)

    typed, other = writer(), writer()
    rendered = evaluate.Rendered()
    raws = [orjson.dumps({"n": i}) for i in range(3)]
    keys = [("ns", f"p{i}") for i in range(3)]
    assert rendered.written(typed, keys, raws) == raws
    assert (rendered.hits, rendered.writes) == (0, 3)
    assert rendered.written(typed, keys, raws) == raws
    assert (rendered.hits, rendered.writes) == (3, 3)
    again = [bytes(bytearray(r)) for r in raws]  # equal, not the same: written anew
    assert rendered.written(typed, keys, again) == raws
    assert rendered.written(other, keys, again) == raws
    assert (rendered.hits, rendered.writes) == (3, 9)
    changed = [orjson.dumps({"n": 7}), again[1]]
    assert rendered.written(typed, keys[:2], changed) == [b'{"n":7}', raws[1]]
    assert (rendered.hits, rendered.writes) == (4, 10)
    one = orjson.dumps({"n": 1})
    with pytest.raises(msgspec.ValidationError):
        rendered.written(typed, [("ns", "a"), ("ns", "b")], [one, b'{"n":"x"}'])
    writes = rendered.writes
    assert rendered.written(typed, [("ns", "a")], [one]) == [b'{"n":1}']
    assert rendered.writes - writes == 1  # not kept from the refused call
    many = evaluate.RENDERED_OBJECTS + 10
    names = [("ns", f"q{i}") for i in range(many)]
    texts = [orjson.dumps({"i": i}) for i in range(many)]
    rendered.written(typed, names, texts)
    assert len(rendered) == evaluate.RENDERED_OBJECTS + 3  # and `other`'s three
    hits = rendered.hits
    rendered.written(typed, names[-5:], texts[-5:])  # the last written: kept
    rendered.written(typed, names[:1], texts[:1])  # the first: gone
    assert rendered.hits - hits == 5
    # a third writer: the least recently used one's objects go
    assert evaluate.RENDERED_SELECTIONS == 2
    rendered.written(writer(), keys, raws)
    assert len(rendered) == evaluate.RENDERED_OBJECTS + 3
    hits = rendered.hits
    rendered.written(other, keys, again)
    assert rendered.hits == hits  # written anew


def test_objects_kept_written_are_bounded_in_bytes() -> None:
    """Writings of large objects (a selection of whole objects) are kept up to
    ``RENDERED_BYTES`` per selection, the first written out first; every answer is still
    the writing of its own object."""
    import msgspec

    typed = (msgspec.json.Decoder(dict[str, str]).decode, msgspec.json.Encoder().encode)
    rendered = evaluate.Rendered()
    big = 100_000
    raws = [orjson.dumps({"v": f"{i:06d}" * (big // 6)}) for i in range(40)]
    keys = [("ns", f"p{i}") for i in range(40)]
    assert rendered.written(typed, keys, raws) == raws
    assert len(rendered) * big <= evaluate.RENDERED_BYTES
    assert len(rendered) >= evaluate.RENDERED_BYTES // (big + 100) - 1
    hits = rendered.hits
    assert rendered.written(typed, keys[-3:], raws[-3:]) == raws[-3:]  # the last: kept
    assert rendered.written(typed, keys[:1], raws[:1]) == raws[:1]  # the first: gone
    assert rendered.hits - hits == 3


def test_writings_are_counted_where_told_and_an_objects_go_when_it_changes() -> None:
    """The writings' bytes are counted in the view caches' budget (``counted.bytes``) as
    they grow and shrink; :meth:`forget` lets an object's writings (and so its old JSON)
    go in every selection; :meth:`clear` lets them all go."""
    import msgspec

    class Counted:
        bytes = 0

    def writer() -> Any:
        return (msgspec.json.Decoder(dict[str, int]).decode, msgspec.json.Encoder().encode)

    counted = Counted()
    rendered = evaluate.Rendered(counted)
    typed, other = writer(), writer()
    raws = [orjson.dumps({"n": i}) for i in range(3)]
    keys = [("ns", f"p{i}") for i in range(3)]
    rendered.written(typed, keys, raws)
    rendered.written(other, keys[:2], raws[:2])
    assert counted.bytes == rendered.size == 5 * len(b'{"n":0}')
    rendered.forget(("ns", "p1"))  # from both selections
    assert counted.bytes == rendered.size == 3 * len(b'{"n":0}')
    assert len(rendered) == 3
    hits = rendered.hits
    rendered.written(typed, keys, raws)
    assert rendered.hits - hits == 2  # p1 written anew
    rendered.written(writer(), keys, raws)  # a third selection: the oldest one's go
    assert counted.bytes == rendered.size == 6 * len(b'{"n":0}')
    rendered.clear()
    assert counted.bytes == rendered.size == 0 and len(rendered) == 0
