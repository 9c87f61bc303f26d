"""List jobs (gateway.core.lists.jobs) on their own: what a worker answers for a body and a
job, reading only what a projection reads, and gzipped bodies."""

from __future__ import annotations

import gzip

import orjson
import pytest

from gateway.core.lists import jobs
from gateway.core.lists.body import over_cap
from gateway.core.lists.jobs import NOT_DONE, OVER_CAP, project, split_wire, wire, work
from gateway.core.lists.projections import (
    ALWAYS,
    CONST,
    COPY,
    LEAF,
    READ,
    SELF,
    WHOLE,
    Fallback,
    Items,
    build,
    merged,
    shape,
)
from gateway.core.support import deepjson

_NAME = ("name", LEAF, "name", "type({v}) is not str", ("leaf", "String"), False)
#: ``{items: [{name}]}`` projected: every item's name.
NAMES = (
    "object",
    "List",
    (
        (
            "items",
            LEAF,
            "items",
            None,
            ("list", False, ("object", "Item", (_NAME,))),
            False,
        ),
    ),
)  # fmt: skip


def _body(count: int, **more: object) -> bytes:
    items = [{"name": f"n{i}", "big": "x" * 100} for i in range(count)]
    return orjson.dumps(
        {"kind": "List", "metadata": {"resourceVersion": "7", **more}, "items": items}
    )


def test_a_worker_projects_writes_or_gives_back() -> None:
    assert orjson.loads(work(_body(3), project(NAMES), 0)) == {  # type: ignore[arg-type]
        "items": [{"name": "n0"}, {"name": "n1"}, {"name": "n2"}]
    }
    assert work(b"{not json", project(NAMES), 0) == NOT_DONE
    assert work(b"[1, 2]", project(NAMES), 0) == NOT_DONE
    # A name that is not a string would need the scalar's serialiser: given back.
    odd = orjson.dumps({"items": [{"name": 5}]})
    assert work(odd, project(NAMES), 0) == NOT_DONE
    # More items than the cap, or a promise of more: refused.
    assert work(_body(3), project(NAMES), 2) == OVER_CAP
    assert work(_body(1, **{"continue": "next"}), project(NAMES), 2) == OVER_CAP
    assert work(_body(2), project(NAMES), 2) != OVER_CAP
    # A wire job: everything but the items as JSON, then each item's bytes (as buffers,
    # which a worker writes into its memory file one after the other).
    done = work(_body(2), wire(b"\x12", b"\x0a", as_struct=False), 0)
    assert isinstance(done, list)
    rest, items = split_wire(b"".join(done))
    assert rest == {"kind": "List", "metadata": {"resourceVersion": "7"}}
    first = orjson.dumps({"name": "n0", "big": "x" * 100})
    one = b"\x0a" + bytes([len(first)]) + first  # ResourceObject{json}
    assert items.startswith(b"\x12" + bytes([len(one)]) + one)  # ResourceList.items


# -- decoding only what a projection reads ---------------------------------------------------

_STRING = ("leaf", "String")


def _leaf(key: str, name: str | None = None) -> tuple[object, ...]:
    return (key, LEAF, name or key, "type({v}) is not str", _STRING, False)


def _object(type_name: str, *steps: tuple[object, ...]) -> tuple[object, ...]:
    return ("object", type_name, steps)


def _list_of(spec: tuple[object, ...]) -> tuple[object, ...]:
    return ("list", True, spec)


_CONTINUE = ("continue", READ, "continue_", None, ("then", LEAF, _STRING), False)
_PORTS = ("nonnull", ("list", False, ("leaf", "Int")))
_SPEC = _object(
    "Spec",
    ("a", LEAF, "containers", None, _list_of(_object("C", _leaf("name"))), False),
    ("b", LEAF, "containers", None, _list_of(_object("C", _leaf("image"))), False),
    ("ports", ALWAYS, "ports", None, _PORTS, False),
)
#: ``{ metadata { continue } items { n: name __typename metadata { name } labels spec {
#: a: containers { name } b: containers { image } ports } } }``: two aliases reading one
#: key with different selections, a JSON leaf copied, a Python name (``continue_``).
WIDE = _object(
    "List",
    ("metadata", LEAF, "metadata", None, _object("ListMeta", _CONTINUE), False),
    (
        "items",
        LEAF,
        "items",
        None,
        _list_of(
            _object(
                "Item",
                _leaf("n", "name"),
                ("__typename", CONST, "Item", None, None, False),
                ("metadata", LEAF, "metadata", None, _object("Meta", _leaf("name")), True),
                ("labels", COPY, "labels", None, None, False),
                ("spec", LEAF, "spec", None, _SPEC, False),
            )
        ),
        False,
    ),
)
#: ``{ items { raw } }``: each item whole.
RAW = _object(
    "List",
    (
        "items",
        LEAF,
        "items",
        None,
        _list_of(_object("Item", ("raw", SELF, "", None, None, False))),
        False,
    ),
)


def _whole(body: bytes, spec: tuple[object, ...], cap: int = 0) -> bytes | str:
    """What a worker answered when it decoded every body whole (the reference: the
    gateway's own whole decode, orjson's value at any depth)."""
    try:
        value = deepjson.loads(body)
    except orjson.JSONDecodeError:
        return NOT_DONE
    if type(value) is not dict:
        return NOT_DONE
    try:
        if cap and over_cap(value, cap):
            return OVER_CAP
        return orjson.dumps(build(spec)(value))
    except (Fallback, TypeError):
        return NOT_DONE


def _item(i: int, **more: object) -> dict[str, object]:
    return {
        "name": f"n{i}",
        "metadata": {"name": f"m{i}", "uid": "u", "annotations": {"big": "x" * 50}},
        "labels": {"app": "a", "tier": None, "n": [1, 2.5, {"deep": True}]},
        "spec": {
            "containers": [{"name": "c", "image": "i", "env": [{"name": "A"}]}, None],
            "ports": [80, 443],
            "unread": {"k": [1, 2, 3]},
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready"}] * 3},
        **more,
    }


#: Bodies a worker reads only part of, and bodies where it must not trust that part: each
#: is answered exactly as a whole decode answers it.
ODD_BODIES: dict[str, bytes] = {
    "plain": orjson.dumps({"metadata": {"continue": "c"}, "items": [_item(i) for i in range(3)]}),
    "items null, key missing": orjson.dumps({"items": [None, {"spec": None}, {}]}),
    "a name that is a number": orjson.dumps({"items": [_item(0, name=5)]}),
    "spec a string": orjson.dumps({"items": [_item(0, spec="s")]}),
    "containers an object": orjson.dumps({"items": [_item(0, spec={"containers": {}})]}),
    "ports null (non-null)": orjson.dumps({"items": [_item(0, spec={"ports": None})]}),
    "port out of Int range": orjson.dumps({"items": [_item(0, spec={"ports": [2**31]})]}),
    "continue a number": orjson.dumps({"metadata": {"continue": 7}, "items": []}),
    "continue_ before continue": b'{"metadata":{"continue_":"py","continue":"json"},"items":[]}',
    "duplicate keys": b'{"items":[{"name":"a","name":"b","spec":{},"spec":{"ports":[2]}}]}',
    "duplicate object then null": b'{"items":[{"metadata":{"name":"a"},"metadata":null}]}',
    "a label integer past 64 bits": b'{"items":[{"labels":{"n":' + b"9" * 30 + b"}}]}",
    "an unread integer past 64 bits": b'{"items":[{"name":"a","x":' + b"9" * 30 + b"}]}",
    "a number past double, read": b'{"items":[{"name":1e400}]}',
    "bad UTF-8 in an unread string": b'{"items":[{"name":"a","note":"\xff\xfe"}]}',
    "bad UTF-8 in an unread key": b'{"items":[{"\xff":1,"name":"a"}]}',
    "a lone surrogate unread": b'{"items":[{"note":"\\ud800","name":"a"}]}',
    "broken JSON unread": b'{"items":[{"note":[1,2,},"name":"a"}]}',
    "nested deeper than read": b'{"items":[{"x":' + b"[" * 1000 + b"]" * 1000 + b',"name":"a"}]}',
    "nested too deep": b'{"items":[{"x":' + b"[" * 1100 + b"]" * 1100 + b',"name":"a"}]}',
    "trailing garbage": b'{"items":[]} x',
    "not an object": b"[1, 2]",
    "null": b"null",
    "empty": b"",
    "items an object": b'{"items":{"name":"a"}}',
    "items of numbers": b'{"items":[1,2]}',
    "items a number": b'{"items":5}',
    "escapes": orjson.dumps({"items": [{"name": 'q"\\\n\u00e9\U0001f600', "labels": {"": 1}}]}),
}  # fmt: skip


@pytest.mark.parametrize("name", ODD_BODIES)
@pytest.mark.parametrize("spec", [WIDE, NAMES, RAW], ids=["wide", "names", "raw"])
def test_a_worker_reading_part_of_a_body_answers_as_a_whole_decode(
    name: str, spec: tuple[object, ...]
) -> None:
    body = ODD_BODIES[name]
    for cap in (0, 2):
        assert work(body, project(spec), cap) == _whole(body, spec, cap), (name, cap)
        assert work(memoryview(body), project(spec), cap) == _whole(body, spec, cap)


def test_a_number_past_a_double_where_nothing_reads_it_is_not_looked_at() -> None:
    """The one difference from a whole decode, documented in gateway.core.lists.jobs: a
    number no double holds (which no kube-apiserver can send: it can neither decode nor
    encode one) fails a whole decode, and the list with it, wherever it is; read in part,
    only where the selection reads it."""
    unread = b'{"items":[{"x":1e400,"name":"a"},{"y":[-' + b"9" * 400 + b'],"name":"b"}]}'
    assert orjson.dumps(build(NAMES)(orjson.loads(b'{"items":[{"name":"a"},{"name":"b"}]}'))) == (
        work(unread, project(NAMES), 0)
    )
    assert _whole(unread, NAMES) == NOT_DONE
    assert work(unread, project(RAW), 0) == NOT_DONE  # read there: refused as before
    in_labels = b'{"items":[{"labels":{"a":' + b"1" * 400 + b'},"name":"a"}]}'
    assert work(in_labels, project(WIDE), 0) == NOT_DONE  # labels read whole
    assert work(in_labels, project(NAMES), 0) == b'{"items":[{"name":"a"}]}'


def test_a_worker_builds_only_what_the_projection_reads() -> None:
    """The plain body read in part: unread keys are not built, both aliases' keys are, and
    what the cap needs is there even when the projection does not read it."""
    read = jobs.read_part(ODD_BODIES["plain"], WIDE)
    assert read is not None
    item = read["items"][0]
    assert set(item) == {"name", "metadata", "labels", "spec"}
    assert item["metadata"] == {"name": "m0"}
    assert item["labels"] == {"app": "a", "tier": None, "n": [1, 2.5, {"deep": True}]}
    assert item["spec"] == {"containers": [{"name": "c", "image": "i"}, None], "ports": [80, 443]}
    assert read["metadata"] == {"continue": "c"}
    names_only = jobs.read_part(ODD_BODIES["plain"], NAMES)
    assert names_only is not None
    assert names_only["metadata"] == {"continue": "c"}  # for the cap
    # a raw selection reads the items whole
    raw = jobs.read_part(ODD_BODIES["plain"], RAW)
    assert raw is not None and raw["items"] == orjson.loads(ODD_BODIES["plain"])["items"]
    # read whole instead: not UTF-8 where unread, a type other than the one read
    for odd in ("bad UTF-8 in an unread string", "spec a string", "nested too deep"):
        assert jobs.read_part(ODD_BODIES[odd], WIDE) is None, odd


def test_the_shape_of_what_a_projection_reads() -> None:
    assert shape(("leaf", "String")) == WHOLE
    assert shape(RAW) == {"items": Items(WHOLE)}
    assert shape(NAMES) == {"items": Items({"name": WHOLE})}
    wide = shape(WIDE)
    assert wide["metadata"] == {"continue_": WHOLE, "continue": WHOLE}
    assert wide["items"].item["spec"] == {
        "containers": Items({"name": WHOLE, "image": WHOLE}),  # both aliases' keys
        "ports": Items(WHOLE),
    }
    # two reads of one key that disagree on its type: read whole
    assert merged({"a": Items(WHOLE)}, {"a": {"b": WHOLE}}) == {"a": WHOLE}
    assert merged(WHOLE, {"a": WHOLE}) == WHOLE


# -- gzipped bodies ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["plain", "a name that is a number", "not an object", "empty"])
def test_a_gzipped_body_is_answered_as_the_same_body_inflated(name: str) -> None:
    body = ODD_BODIES[name]
    packed = gzip.compress(body, 1)
    for cap in (0, 2):
        want = work(body, project(WIDE), cap)
        assert work(packed, project(WIDE), cap, gzipped=True) == want
        assert work(memoryview(packed), project(WIDE), cap, gzipped=True) == want


def test_a_damaged_gzipped_body_is_given_back() -> None:
    packed = gzip.compress(ODD_BODIES["plain"])
    for damaged in (packed[:-9], packed[:10] + b"\xff" * 20 + packed[30:], b"not gzip", b""):
        assert work(damaged, project(WIDE), 0, gzipped=True) == NOT_DONE
