"""JSON at any depth (gateway.core.support.deepjson): the values orjson gives, the errors orjson
gives, and past orjson's 1,024 levels the value whole, decoded in bounded steps; then a real
loopback upstream serving a list and a watch holding an object 5,000 levels deep, read by
the adapter: every item and every event, the loop never held long."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.core.lists.protowire import TooDeep, encode_struct
from gateway.core.model.registry import POD
from gateway.core.support import deepjson
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from gateway.graphql.engine.subscriptions import _dumps as subscription_payload
from gateway.graphql.transport.http import json_response
from gateway.grpc.gen.kubegateway.v1 import resource_pb2 as R
from gateway.grpc.resource_service import object_bytes
from tests.support.collector import frozen_heap


def _value(rnd: random.Random, depth: int) -> Any:
    r = rnd.random()
    if depth > 6 or r < 0.3:
        return rnd.choice(
            [1, -0.0, 1.5e300, 'é\n"\\x', True, None, False, 2**63 + 5, "", -12, 1e16, "\u2028<&"]
        )
    if r < 0.65:
        return {rnd.choice('abé"\\'): _value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))}
    return [_value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]


def test_values_are_orjsons_written_and_read_back_byte_for_byte() -> None:
    rnd = random.Random(7)
    for _ in range(2000):
        data = orjson.dumps(_value(rnd, 0))
        assert deepjson.run(deepjson.parse(data, step=3)) == orjson.loads(data)
        assert deepjson.encode(orjson.loads(data)) == data
        pretty = orjson.dumps(orjson.loads(data), option=orjson.OPT_INDENT_2)
        assert deepjson.run(deepjson.parse(pretty)) == orjson.loads(pretty)
    dupes = b'{"a":1,"b":2,"a":{"c":3}}'
    assert list(deepjson.loads(dupes).items()) == list(orjson.loads(dupes).items())
    for leaf in (b"18446744073709551616", b"[1E5,-0,-0.0]", b'"\\u00e9\\/"'):
        assert deepjson.run(deepjson.parse(leaf)) == orjson.loads(leaf)


@pytest.mark.parametrize(
    "data",
    [b"", b" ", b"{", b"[1,]", b'{"a":1,}', b'{"a"}', b"[1 2]", b"01", b"[01]", b'{"a":1}}',
     b'{"a":1} x', b"[tru]", b'"\\ud800"', b"[1e400]", b"{1:2}", b"[,1]", b"{,}", b"[:]",
     b'"a\x01"', b"[\xff]", b'["\xff"]', b"nul", b"[1]]", b'{"a":[}', b'{"a" 1}', b"[NaN]",
     b"\xef\xbb\xbf[]", b"[1,,2]", b'{"a":1 "b":2}', b"[]{}", b'{"a":1:2}'],
)  # fmt: skip
def test_what_orjson_refuses_is_refused(data: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(data)
    with pytest.raises(orjson.JSONDecodeError):
        deepjson.run(deepjson.parse(data))
    deep_bad = b"[" * 2000 + b"[0," + data + b"]" + b"]" * 2000  # past orjson's limit too
    with pytest.raises(orjson.JSONDecodeError):
        deepjson.loads(deep_bad)


@pytest.mark.parametrize("depth", [1025, 5000, 10_000])
def test_past_orjsons_limit_the_value_is_whole_and_held_no_deeper_than_frozen(depth: int) -> None:
    data = b'{"a":' * depth + b'"x"' + b"}" * depth
    with pytest.raises(orjson.JSONDecodeError, match="depth limit"):
        orjson.loads(data)
    value = deepjson.loads(data)
    assert deepjson.dumps(value) == data  # whole, byte for byte
    assert orjson.dumps(value) == data  # and orjson writes it too: the deep part is a fragment
    held = 0
    while type(value) is dict:
        value = value["a"]
        held += 1
    assert held == deepjson.FROZEN_DEPTH and type(value) is orjson.Fragment
    with pytest.raises(TooDeep):  # no Struct of it: the gRPC service writes JSON instead
        encode_struct(deepjson.loads(data))


#: Run in a process of its own: the suite's process may still be finishing an earlier test's
#: background work (a schema build holds the collector off while it runs, and the next
#: allocation pays its young collection), which is not the decoder's step.
_STEPS = """
import contextlib, json, sys, time
from gateway.core.support import deepjson
data = b"[" * 10_000 + b"]" * 10_000
gen = deepjson.parse(data)
steps, worst, last = 0, 0.0, time.perf_counter()
with contextlib.suppress(StopIteration):
    while True:
        next(gen)
        now = time.perf_counter()
        steps, worst, last = steps + 1, max(worst, now - last), now
print(json.dumps({"steps": steps, "worst": worst}))
"""


def test_a_deep_decode_goes_in_bounded_steps() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", _STEPS], capture_output=True, text=True, timeout=120, check=True
    )
    measured = json.loads(ran.stdout)
    assert measured["steps"] >= 20_000 // deepjson.STEP_TOKENS
    worst = measured["worst"]
    assert worst < 0.1, worst  # ~1 ms a step; generous for a loaded machine


# ---------------------------------------------------------------- a real loopback upstream

DEPTH = 5000


def _pod(name: str, rv: int, data: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)},
        "spec": data,
    }


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"a": value}
    return value


def _bodies(depth: int) -> tuple[Any, bytes, bytes]:
    """The poison pod ``depth`` levels deep, and a list and a watch holding it between
    two plain pods (written without recursion: orjson writes no more than 254 levels)."""
    poison = _pod("poison", 11, {"deep": _nested(depth)})
    pods = (_pod("a", 10, {"k": "1"}), poison, _pod("b", 12, {"k": "2"}))
    listed = deepjson.encode(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "12"},
            "items": pods,
        }
    )
    events = b"".join(deepjson.encode({"type": "ADDED", "object": obj}) + b"\n" for obj in pods)
    return poison, listed, events


@contextlib.asynccontextmanager
async def _adapter(listed: bytes, events: bytes) -> AsyncIterator[KubeAdapter]:
    """An upstream that answers a list of pods (``listed``) and a watch of them
    (``events``), HTTP/1.1, one request per connection."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        body = events if b"watch=" in head.split(b"\r\n", 1)[0] else listed
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        config = UpstreamConfig(server=f"http://127.0.0.1:{port}", source="test")
        async with build_http_client(config) as http:
            yield KubeAdapter(http)
    finally:
        server.close()
        await server.wait_closed()


class LoopLag:
    """The longest the event loop went without running a 1 ms ticker."""

    def __init__(self) -> None:
        self.worst = 0.0

    async def tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.worst, last = max(self.worst, now - last), now


@pytest.mark.parametrize("depth", [300, 600, 1000, 1100, DEPTH])
async def test_a_list_and_a_watch_holding_a_poison_object_answer_everything(depth: int) -> None:
    """At every depth the apiserver takes: decoded (by orjson up to its 1,024 levels, past
    them by deepjson a step at a time), and written whole by every answer encoder."""
    poison, listed_body, events_body = _bodies(depth)
    lag = LoopLag()
    frozen = frozen_heap()  # the suite's heap frozen as serve freezes the gateway's
    frozen.__enter__()
    ticker = asyncio.create_task(lag.tick())
    try:
        async with _adapter(listed_body, events_body) as kube:
            listed = await kube.list(POD, namespace="ns", credential=Credential("t"))
            names = [i["metadata"]["name"] for i in listed["items"]]
            assert names == ["a", "poison", "b"]
            async with kube.watch_stream(POD, namespace="ns", credential=Credential("t")) as events:
                got = [event async for event in events]
            assert [e["object"]["metadata"]["name"] for e in got] == ["a", "poison", "b"]
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        frozen.__exit__(None, None, None)
    assert lag.worst < 0.25, lag.worst  # each decode step ~1 ms; generous for a loaded machine
    whole = deepjson.encode(poison)
    for obj in (listed["items"][1], got[1]["object"]):
        assert deepjson.dumps(obj) == whole
        if depth <= 1024:  # orjson decoded it whole, and cannot write it
            with pytest.raises(orjson.JSONEncodeError, match="ecursion"):
                orjson.dumps(obj)
        # Every answer encoder writes it whole, the plain items beside it as before.
        answer = {"data": {"pods": {"items": [listed["items"][0], obj, listed["items"][2]]}}}
        assert json_response(answer).body == deepjson.encode(answer)
        assert subscription_payload(answer) == deepjson.encode(answer).decode()
        rep_json = object_bytes(obj, R.REPRESENTATION_JSON)
        assert R.ResourceObject.FromString(rep_json).json == whole
        # no Struct for it: past 100 levels a Struct is refused (TooDeep), JSON instead
        rep_struct = R.ResourceObject.FromString(object_bytes(obj, R.REPRESENTATION_STRUCT))
        assert rep_struct.WhichOneof("representation") == "json" and rep_struct.json == whole
        plain = R.ResourceObject.FromString(
            object_bytes(listed["items"][0], R.REPRESENTATION_STRUCT)
        )
        assert plain.WhichOneof("representation") == "struct"


@pytest.mark.parametrize("depth", [255, 300, 600, 1000, 1024])
def test_dumps_writes_what_orjson_refuses_for_depth_the_same_bytes_fast(depth: int) -> None:
    """Between orjson's two limits (writes 254 levels, reads 1,024): the value as
    orjson.loads gave it, written whole by orjson still (parts past 100 levels as
    fragments), the value itself unchanged."""
    rnd = random.Random(depth)
    data = _nested(depth)
    for _ in range(50):  # wide parts at every level, of every kind
        at = data
        for _ in range(rnd.randrange(depth)):
            at = at["a"]
        at[rnd.choice("bcz")] = _value(rnd, 0)
    text = deepjson.encode(data)
    value = orjson.loads(text)
    with pytest.raises(orjson.JSONEncodeError, match="ecursion"):
        orjson.dumps(value)
    started = time.perf_counter()
    assert deepjson.dumps(value) == text
    assert time.perf_counter() - started < 0.1  # ~1 ms: orjson writes it, 100 levels a time
    assert deepjson.encode(value) == text  # not changed by the writing
    assert deepjson.dumps([value, (1, value)]) == b"[" + text + b",[1," + text + b"]]"
    with pytest.raises(orjson.JSONEncodeError, match="str"):  # other refusals stay refusals
        deepjson.dumps({"a": _nested(300), 1: 2})


def test_a_struct_is_refused_past_frozen_depth_never_a_recursion() -> None:
    for shape in (lambda v: {"a": v}, lambda v: [v]):
        value: Any = "x"
        for _ in range(deepjson.FROZEN_DEPTH - 1):
            value = shape(value)
        assert encode_struct({"top": value})  # 100 levels: written
        for _ in range(5000 - deepjson.FROZEN_DEPTH):
            value = shape(value)
        with pytest.raises(TooDeep):
            encode_struct({"top": value})


def test_a_large_answer_holding_one_deep_object_is_written_at_orjsons_pace() -> None:
    """The other items of an answer are written by orjson as they are (one try each), only
    the deep one walked: a few times one orjson.dumps of the answer, not a walk of it all
    (~50 times)."""
    container = {"name": "c", "ports": [{"port": 80}], "env": [{"name": "e", "value": "v"}] * 10}
    items = [_pod(f"p{i}", i, {"containers": [container] * 3}) for i in range(2000)]
    plain = {"data": {"pods": {"items": items}}}
    poisoned = {"data": {"pods": {"items": [*items[:1500], POISON_1000, *items[1500:]]}}}

    def best(write: Any, value: Any) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            write(value)
            times.append(time.perf_counter() - started)
        return min(times)

    assert deepjson.dumps(poisoned) == deepjson.encode(poisoned)
    assert best(deepjson.dumps, poisoned) < 15 * best(orjson.dumps, plain) + 0.005


POISON_1000 = _pod("poison", 11, {"deep": _nested(1000)})
