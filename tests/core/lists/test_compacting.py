"""A list made compact by a list worker (gateway.core.lists.compacting), against the
gateway's own way (the watcher's: each item given kind and apiVersion, encoded, keyed, its
columns read from the decoded object): the same objects, keys and column values, whatever
the items hold, and the same bytes where the upstream writes JSON as orjson does."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import pickle
from typing import Any

import pytest

from gateway.core.lists.compacting import (
    ColumnSpec,
    Sliced,
    compact,
    sections,
    taken,
    utf8_checked,
    value_at,
)
from gateway.core.lists.jobs import NOT_DONE, OVER_CAP, work
from gateway.core.lists.pool import _read_shared
from gateway.core.lists.worker import ANSWER, REQUEST, STATUS_DONE, serve
from gateway.core.support import deepjson
from gateway.core.watch.compact import encode
from gateway.core.watch.watcher import object_key

COLUMNS: tuple[ColumnSpec, ...] = (
    (("metadata", "name"), "string"),
    (("status", "startTime"), "dateTime"),
    (("metadata", "labels", "app"), "string"),
    (("spec", "replicas"), "int32"),
    (("spec", "ratio"), "double"),
    (("spec", "paused"), "boolean"),
    (("spec", "template"), "string"),  # an object, read as its text
)


def _items() -> list[Any]:
    """Items as lists hold them: ordinary ones, and each way one can differ."""
    items: list[Any] = []
    for i in range(40):
        items.append(
            {
                "metadata": {"name": f"p{i}", "namespace": "ns", "labels": {"app": f"a{i % 3}"}},
                "spec": {"replicas": i, "ratio": i / 3, "paused": i % 2 == 0},
                "status": {"startTime": f"2026-11-{i % 28 + 1:02d}T00:00:00Z"},
            }
        )
    items += [
        {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "has-both"}},
        {"kind": "Other", "metadata": {"name": "has-kind-only"}},
        {"apiVersion": "v9", "metadata": {"name": "has-version-only"}},
        {},  # no key at all
        {"metadata": None},
        {"metadata": {"name": "labels-a-string", "labels": "app=x"}},  # another type
        {"metadata": {"name": "wrong-types"}, "spec": {"replicas": "3", "paused": 1}},
        {"metadata": {"name": "big"}, "spec": {"replicas": 1 << 70}},  # past 64 bits
        {"metadata": {"name": "big-inside"}, "spec": {"template": {"n": -(1 << 65)}}},
        {"metadata": {"name": "nested"}, "spec": {"template": {"a": [1, {"b": None}]}}},
        {"metadata": {"name": "unicode \u00e9\u4e2d \U0001f600", "namespace": "\u00fc"}},
        {"metadata": {"name": "p0", "namespace": "ns"}, "note": "a duplicate key: last wins"},
        {"metadata": {"name": 7, "namespace": 1.5}},  # not strings
    ]
    return items


def _written(value: Any, indent: int | None = None) -> bytes:
    """JSON as orjson writes it, but for integers past 64 bits (which orjson cannot
    write, and reads as floats)."""
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(value, separators=separators, ensure_ascii=False, indent=indent).encode()


#: Items whose JSON orjson would not write as it came (integers past 64 bits).
_BIG = {"/big", "/big-inside"}


def _theirs(body: bytes, columns: tuple[ColumnSpec, ...]) -> tuple[dict[str, Any], ...]:
    """The gateway's own compaction of the list (the watcher's) and columns (the store's)."""
    found: dict[str, bytes] = {}
    values: dict[str, list[Any]] = {}
    for raw in deepjson.loads(body)["items"]:
        item = (
            raw
            if "kind" in raw and "apiVersion" in raw
            else {
                "apiVersion": "v1",
                "kind": "Pod",
                **raw,
            }
        )
        key = object_key(item)
        found[key] = encode(item)
        values[key] = [value_at(path, kind, item) for path, kind in columns]
    return found, values


def _through_a_memory_file(answer: bytes) -> bytes:
    """``answer`` as the pool reads it out of a worker's memory file: its objects apart."""
    shared = os.memfd_create("answer")
    try:
        os.pwrite(shared, answer, 0)
        read = _read_shared(shared, len(answer), compact=True)
        assert os.fstat(shared).st_size == 0  # emptied, as the pool leaves it
    finally:
        os.close(shared)
    assert isinstance(read, Sliced) and len(read) < len(answer)
    return read


async def _ours(
    body: bytes, columns: tuple[ColumnSpec, ...], gzipped: bool = False, mapped: bool = False
) -> Any:
    job = compact("v1", "Pod", columns)
    answer = work(gzip.compress(body) if gzipped else body, job, 0, gzipped=gzipped)
    assert isinstance(answer, list), answer
    found: dict[str, bytes] = {}
    joined = b"".join(answer)
    if mapped:
        joined = _through_a_memory_file(joined)
    rest, listed = await taken(joined, job[3], found)
    values: dict[str, list[Any]] = {}
    if listed is not None:
        by_raw = {id(raw): at for at, raw in enumerate(listed.raws)}
        for key, raw in found.items():
            at = listed.of(raw)
            assert at == by_raw[id(raw)]
            values[key] = [listed.values[spec][at] for spec in job[3]]
    return rest, found, values


@pytest.mark.parametrize(
    ("gzipped", "mapped", "columns"),
    [
        (False, False, COLUMNS),
        (True, False, COLUMNS),
        (False, True, COLUMNS),
        (False, False, COLUMNS[1:2]),  # one column, as a view sorting by a field asks
        (False, False, COLUMNS[3:4]),
    ],
)
def test_a_worker_makes_a_list_compact_as_the_gateway_does(
    gzipped: bool, mapped: bool, columns: tuple[ColumnSpec, ...]
) -> None:
    """(``mapped``: the answer read as the pool reads it from a worker's memory file, each
    object copied straight out of the mapped file: the same objects.)"""
    body = _written({"kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": _items()})
    rest, found, values = asyncio.run(_ours(body, columns, gzipped, mapped))
    want, want_values = _theirs(body, columns)
    assert rest == {"kind": "PodList", "metadata": {"resourceVersion": "9"}}
    assert list(found) == list(want)  # the same keys, in the same order
    for key, data in found.items():
        assert deepjson.loads(data) == deepjson.loads(want[key]), key
        if key not in _BIG:  # JSON as orjson writes it: the very bytes the gateway keeps
            assert data == want[key], key
        assert values[key] == want_values[key], key


def test_what_another_writer_wrote_is_kept_as_it_came_and_decodes_to_the_same() -> None:
    """An upstream whose JSON is not orjson's (spaces, escapes, as Go's encoder writes
    ``<``): each object decodes to what the gateway's own compaction holds."""
    text = _written(
        {"kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": _items()}, indent=2
    ).replace(b'"p1"', b'"\\u0070\\u003c1"')
    rest, found, values = asyncio.run(_ours(text, COLUMNS))
    want, want_values = _theirs(text, COLUMNS)
    assert "ns/p<1" in found
    assert rest["metadata"] == {"resourceVersion": "9"}
    assert list(found) == list(want)
    for key, data in found.items():
        assert deepjson.loads(data) == deepjson.loads(want[key]), key
        assert values[key] == want_values[key], key


def test_no_columns_asked_and_the_limits_of_what_a_worker_takes() -> None:
    body = _written({"metadata": {"continue": "more"}, "items": _items()})
    _, found, values = asyncio.run(_ours(body, ()))
    assert values == {} and len(found) == len(_theirs(body, ())[0])
    # the list cap is the worker's to check too
    assert work(body, compact("v1", "Pod", ()), 5) == OVER_CAP
    # what is not a list of objects goes back to the gateway (which says what is wrong)
    for bad in (b"{not json", b"[1]", b'{"items": [1, 2]}', b'{"items": "x"}', b"\xff"):
        assert work(bad, compact("v1", "Pod", COLUMNS), 0) == NOT_DONE, bad
    assert work(b'{"items": [{"metadata": 5}]}', compact("v1", "Pod", ()), 0) == NOT_DONE


def test_a_damaged_answer_is_refused() -> None:
    answer = b"".join(work(b'{"items": [{"a": 1}]}', compact("v1", "Pod", ()), 0))  # type: ignore[arg-type]
    assert len(sections(answer)) == 4
    with pytest.raises(ValueError, match="add up"):
        sections(answer[:-1])
    with pytest.raises(ValueError, match="does not hold"):
        asyncio.run(taken(answer, COLUMNS, {}))
    # read out of a memory file: the same refusals
    read = _through_a_memory_file(answer)
    assert bytes(sections(read)[2]) == b""  # its objects are apart
    with pytest.raises(ValueError, match="does not hold"):
        asyncio.run(taken(read, COLUMNS, {}))
    cut = Sliced(read)
    cut.objects = [b'{"a":1}', b"{}"]  # not the objects its lengths say
    with pytest.raises(ValueError, match="does not hold"):
        asyncio.run(taken(cut, (), {}))
    shared = os.memfd_create("answer")
    try:  # an answer whose sections do not add up: read whole, for taken to refuse
        os.pwrite(shared, answer[:-1], 0)
        whole = _read_shared(shared, len(answer) - 1, compact=True)
        os.pwrite(shared, answer, 0)  # a size past the file's end: refused, as before
        with pytest.raises(OSError, match="not"):
            _read_shared(shared, len(answer) + 10, compact=True)
    finally:
        os.close(shared)
    assert type(whole) is bytes and whole == answer[:-1]
    with pytest.raises(ValueError, match="add up"):
        asyncio.run(taken(whole, (), {}))


def test_an_object_deeper_than_orjson_takes_is_kept_whole() -> None:
    """An item nested 3,000 levels deep (a custom resource may be, as the apiserver stores
    it): kept as the JSON that decodes (``deepjson``) to what the gateway's own holds."""
    deep = b'{"x":' * 3000 + b"1" + b"}" * 3000
    body = b'{"metadata":{},"items":[{"metadata":{"name":"deep"},"spec":' + deep + b"}]}"
    _, found, values = asyncio.run(_ours(body, COLUMNS))
    want, want_values = _theirs(body, COLUMNS)
    assert list(found) == ["/deep"]
    # (deeper than deepjson's frozen depth, a container is a fragment of its JSON text)
    assert deepjson.dumps(deepjson.loads(found["/deep"])) == want["/deep"]
    assert values == want_values


def test_a_worker_without_a_memory_file_answers_down_its_pipe() -> None:
    """Where there is no shared memory file (not Linux), the buffers go down the pipe."""
    body = _written({"metadata": {}, "items": _items()})
    job = compact("v1", "Pod", COLUMNS)
    head = pickle.dumps((job, 0, False))
    stdin = io.BytesIO(REQUEST.pack(len(head), len(body), False) + head + body)
    stdout = io.BytesIO()
    serve(stdin, stdout)  # type: ignore[arg-type]
    out = stdout.getvalue()
    status, size = ANSWER.unpack_from(out)
    assert status == STATUS_DONE and size == len(out) - ANSWER.size
    assert out[ANSWER.size :] == b"".join(work(body, job, 0))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "valid"),
    [
        (b'{"a":"plain ascii"}', True),
        ('{"a":"caf\u00e9 \u4e2d \U0001f600"}'.encode(), True),
        (b'{"a":"\xff"}', False),  # not UTF-8
        (b'{"a":"\xed\xa0\x80"}', False),  # a surrogate, which UTF-8 may not hold
        (b'{"a":"\xc3"}', False),  # cut in the middle of a character
    ],
)
def test_a_body_is_checked_as_utf8_as_a_decode_checks_it(data: bytes, valid: bool) -> None:
    """ASCII passes at once; anything else is decoded: the same answer either way, for the
    body as bytes and as a view of a mapped file."""
    for body in (data, memoryview(data)):
        if valid:
            utf8_checked(body)
            assert str(bytes(body), "utf-8")
        else:
            with pytest.raises(UnicodeDecodeError):
                utf8_checked(body)
            with pytest.raises(UnicodeDecodeError):
                str(bytes(body), "utf-8")
