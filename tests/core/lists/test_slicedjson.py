"""The sliced decode of large list bodies: always the value (or the error) of one
``orjson.loads`` of the whole body, and really a slice at a time, yielding in between.

Generated bodies are adversarial on purpose: strings holding the separators the slicer looks
for (``},{"metadata":``, ``"items":[``, ``]``), items holding arrays of objects whose first
key is ``metadata`` (candidate cuts inside an item), ``items`` keys nested in items and in the
head, ``items`` not last, ``null`` or empty, unicode escapes, pretty-printed and corrupted
bodies.  Slices are a few bytes long so that every candidate is tried.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core import errors
from gateway.core.lists import large as largelist
from gateway.core.lists import slicedjson
from gateway.core.lists.large import LargeLists
from gateway.core.support import deepjson

TRICKY = [
    '},{"metadata":',
    '"items":[',
    "]}",
    '},{"apiVersion":',
    "\\",
    '"',
    "\u2028",
    "é",
    "\U0001f600",
    "\x00",
    "[[",
    "]]",
]
KEYS = ["metadata", "items", "apiVersion", "kind", "name", "spec", "x"]

strings = st.one_of(
    st.sampled_from(TRICKY),
    st.lists(st.sampled_from([*TRICKY, "a", "{", "}", ",", ":"]), max_size=6).map("".join),
    st.text(max_size=8),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    strings,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), strings), inner, max_size=4),
        # an array of objects whose first key is "metadata": candidate cuts inside an item
        st.lists(st.fixed_dictionaries({"metadata": inner, "x": inner}), min_size=2, max_size=3),
    ),
    max_leaves=12,
)
items = st.lists(
    st.one_of(
        st.fixed_dictionaries({"metadata": values}, optional={"spec": values, "items": values}),
        st.fixed_dictionaries({"apiVersion": strings, "kind": strings, "metadata": values}),
        values,
    ),
    max_size=8,
)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    head: dict[str, Any] = {
        "kind": draw(strings),
        "apiVersion": "v1",
        "metadata": draw(st.dictionaries(st.one_of(st.sampled_from(KEYS), strings), values)),
    }
    listed = draw(st.one_of(items, st.none()))
    where = draw(st.integers(0, len(head)))
    pairs = list(head.items())
    pairs.insert(where, ("items", listed))
    body = dict(pairs)
    style = draw(st.sampled_from(["orjson", "ascii", "pretty", "newline"]))
    if style == "orjson":
        data = orjson.dumps(body)
    elif style == "ascii":  # \uXXXX escapes everywhere
        data = json.dumps(body, separators=(",", ":")).encode()
    elif style == "pretty":
        data = orjson.dumps(body, option=orjson.OPT_INDENT_2)
    else:
        data = orjson.dumps(body) + b"\n"
    if draw(st.booleans()):  # a duplicate key before or after
        extra = b'"items":' + orjson.dumps(draw(values)) + b","
        data = data[:1] + extra + data[1:] if draw(st.booleans()) else data
    if draw(st.integers(0, 9)) == 0 and data:  # a corrupted byte: same error or same value
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + draw(st.sampled_from([b"]", b"}", b",", b'"', b"x"])) + data[at + 1 :]
    return data


def _same(data: bytes, slice_bytes: int) -> None:
    try:
        expected: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        with pytest.raises(orjson.JSONDecodeError):
            slicedjson.decode(data, slice_bytes)
        return
    got = slicedjson.decode(data, slice_bytes)
    # equal, and in the same key order
    assert got == expected
    assert orjson.dumps(got) == orjson.dumps(expected)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=bodies(), slice_bytes=st.integers(1, 200))
def test_a_sliced_decode_is_the_value_of_a_whole_decode(data: bytes, slice_bytes: int) -> None:
    _same(data, slice_bytes)


@pytest.mark.parametrize(
    "data",
    [
        b'{"kind":"PodList","items":[]}',
        b'{"kind":"PodList","items":null}',
        b'{"items":[],"kind":"PodList"}',
        b'{"items":[{"metadata":1},{"metadata":2}],"kind":"x"}',
        b'{"items": [],"x":{"items":[1]}}',
        b'{"x":{"items":[1,2]},"items":5}',
        b'{"items":[{"metadata":1}],"items":[{"metadata":2},{"metadata":3}]}',
        b'{"items":[{"metadata":1},{"metadata":2}],"items":7}',
        b'{"a":"},{\\"metadata\\":","items":[{"metadata":"},{\\"metadata\\":"},{"metadata":2}]}',
        b'{"items":[{"metadata":{"items":[{"metadata":1},{"metadata":2}]}},{"metadata":3}]}',
        b'{"items":[{"metadata":1},{"metadata":2}]}  \n',
        b'  {"items":[{"metadata":1},{"metadata":2}]}',
        b'{"items":[{"metadata":1},{"metadata":2}]',
        b'{"items":[{"metadata":1},{"metadata":2}]}]',
        b'{"items":[{"metadata":1}},{"metadata":2}]}',
        b'"items":[1]',
        b"[1,2]",
        b"",
        b"{}",
        b'{"items":["\xff"]}',
    ],
)
def test_edge_bodies_decode_as_a_whole_decode(data: bytes) -> None:
    for slice_bytes in (1, 2, 5, 1000):
        _same(data, slice_bytes)


@pytest.mark.parametrize("nested", [1019, 1023, 1024, 1025, 5000, 10_000])
def test_items_nested_past_orjsons_limit_decode_whole_and_alone(nested: int) -> None:
    """orjson refuses JSON nested past 1,024 levels, the apiserver stores 10,000: such an
    item is decoded by deepjson (its run only), the other items as before, the value the
    one :func:`deepjson.loads` gives for the whole body, written back byte for byte."""
    item = b"[" * nested + b"]" * nested
    data = b'{"items":[{"metadata":1},' + item + b',{"metadata":2}]}'
    expected = deepjson.dumps(deepjson.loads(data))
    assert expected == data
    for slice_bytes in (1, 1000):
        got = slicedjson.decode(data, slice_bytes)
        assert got["items"][0] == {"metadata": 1} and got["items"][2] == {"metadata": 2}
        assert deepjson.dumps(got) == expected


def _list_body(count: int, seed: int) -> bytes:
    """A list of StatefulSet-like objects: ``volumeClaimTemplates`` hold cut candidates."""
    rnd = random.Random(seed)
    objects = [
        {
            "metadata": {"name": f"s-{i}", "labels": {"k": rnd.choice(TRICKY)}},
            "spec": {
                "volumeClaimTemplates": [
                    {"metadata": {"name": f"v{j}"}, "spec": {"size": rnd.random()}}
                    for j in range(rnd.randint(0, 3))
                ],
                "note": "".join(rnd.choice(TRICKY) for _ in range(3)),
                "image": "registry.example/" + "x" * rnd.randint(0, 600),
            },
        }
        for i in range(count)
    ]
    return orjson.dumps({"kind": "StatefulSetList", "metadata": {"rv": "1"}, "items": objects})


def test_a_large_body_is_decoded_in_many_slices() -> None:
    data = _list_body(3000, seed=1)
    gen = slicedjson.decoder(data, slice_bytes=4096)
    yields = 0
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            value = stop.value
            break
        yields += 1
    assert value == orjson.loads(data)
    # every slice but the last holds at least slice_bytes: about len / slice_bytes of them
    assert len(data) // 4096 // 2 <= yields <= len(data) // 4096 + 1


@pytest.fixture
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


async def test_the_adapter_decode_lets_the_loop_run_between_slices(_collector_on: None) -> None:
    data = _list_body(6000, seed=2)
    assert len(data) >= 2 * largelist.LARGE_BODY_BYTES
    turns = 0
    done = False

    async def other_caller() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_caller())
    await asyncio.sleep(0)
    before = turns
    value = await LargeLists().decode(data)
    during = turns - before
    done = True
    await other
    assert value == orjson.loads(data)
    assert during >= len(data) // slicedjson.SLICE_BYTES
    assert gc.isenabled()  # no scope open: the collector is back on after the decode


async def test_the_collector_stays_off_for_the_scope_until_the_body_is_released(
    _collector_on: None,
) -> None:
    data = _list_body(6000, seed=3)
    lists = LargeLists()
    with lists.scope() as scope:
        value = await lists.decode(data, scope)
        assert not gc.isenabled()
        count = len(value["items"])
        turns = 0
        done = False

        async def other_caller() -> None:
            nonlocal turns
            while not done:
                turns += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_caller())
        await asyncio.sleep(0)
        before = turns
        await scope.release(value)
        during = turns - before
        done = True
        await other
        assert value == {}
        assert during >= count // largelist.FREE_ITEMS - 1
        assert not gc.isenabled()
    assert gc.isenabled()


async def test_a_small_body_and_a_scope_without_a_large_one_leave_the_collector_alone(
    _collector_on: None,
) -> None:
    lists = LargeLists()
    with lists.scope() as scope:
        assert await lists.decode(b'{"items":[]}', scope) == {"items": []}
        assert gc.isenabled()
    assert gc.isenabled()


async def test_a_large_body_that_is_not_json_is_an_internal_error(_collector_on: None) -> None:
    data = _list_body(6000, seed=4)
    middle = data.index(b'},{"metadata":{"name":"s-3000"')
    broken = data[:middle] + b"}" + data[middle:]  # an item closed twice
    with pytest.raises(errors.Internal, match="not valid JSON"):
        await LargeLists().decode(broken)
    assert gc.isenabled()
