"""A view's objects over gRPC written from their stored JSON, differentially.

``ResourceService.View`` writes each object of its page from the JSON its view cache holds
(looked up in the codec's memo of wire bytes, or read in parts for the read mask:
``gateway.grpc.resource_service._Objects``), no longer by decoding each object whole and
projecting it.  Here the bytes it sends are compared with what the whole-object path writes
(:func:`~gateway.grpc.resource_service.object_bytes` of ``masks.project`` of the object
decoded whole) for every shape of read mask (none, empty, leaves, whole members, map keys,
through arrays, snake_case, absent paths, a path below a scalar), both representations, pods
with unicode, escapes, nulls and missing members, the same page asked again (every object
then from the memo) and after an object changed; random objects and masks too (hypothesis,
the writer alone); and a merged view's objects are the very bytes each cluster's own view
sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import POD
from gateway.core.support import deepjson
from gateway.grpc import mask as masks
from gateway.grpc.codec import WireMemo
from gateway.grpc.gen.kubegateway.v1 import resource_pb2
from gateway.grpc.resource_service import STRUCT, _Objects, object_bytes
from kube_gateway_demo import DemoUpstream
from tests.graphql import test_fleet_views as fleet_views
from tests.grpc.test_views_grpc import Client, client_of, request
from tests.support.graphql import ADMIN, NAMESPACE, demo, serve_gateway

__all__ = ["demo", "two"]  # fixtures

two = fleet_views.two

JSON_REP = resource_pb2.REPRESENTATION_JSON
#: The namespace of this module's pods (the demo's own are in ``demo``).
NS = "views-written"
#: Read masks of every shape (``None``: no read mask; ``[]``: an empty one, the whole object).
MASKS: list[list[str] | None] = [
    None,
    [],
    ["metadata.name"],
    ["metadata"],
    ["metadata.labels"],
    ["metadata.labels.app", "metadata.labels.missing"],
    ["metadata.resource_version", "metadata.creation_timestamp"],
    ["spec.containers.name", "spec.containers.image"],
    ["spec.containers", "spec.containers.name"],
    ["status.phase", "status.nope", "nope"],
    ["metadata.name.deeper", "spec.nodeName.x"],
    ["metadata.annotations", "status"],
    [
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "metadata.resourceVersion",
        "metadata.creationTimestamp",
        "metadata.labels",
        "spec.nodeName",
        "spec.serviceAccountName",
        "spec.containers.name",
        "spec.containers.image",
        "status.phase",
        "status.podIP",
        "status.hostIP",
        "status.startTime",
        "status.qosClass",
    ],
]


def _pods() -> list[dict[str, Any]]:
    """Pods with what JSON writing can get wrong: unicode, escapes, nulls, missing members."""
    odd = [
        "é",
        'a "quoted" \\ back',
        "line\nbreak\ttab",
        "\u2028\u2029",
        "😀 astral",
        "\x01 control",
        "</script>",
    ]
    out = []
    for i, text in enumerate([*odd, "plain", "plain-2", "plain-3"]):
        pod: dict[str, Any] = {
            "metadata": {
                "name": f"written-{i:02d}",
                "labels": {"app": f"app-{i % 3}", "index": str(i)},
                "annotations": {"note": text, "empty": ""},
            },
            "spec": {
                "containers": [
                    {"name": "c", "image": f"img:{i}", "args": [text, "-v"]},
                    {"name": "side", "image": "busybox", "env": [{"name": "X", "value": text}]},
                ],
                "priority": (i - 5) * 1000,
            },
        }
        if i % 3:
            pod["spec"]["nodeName"] = f"node-{i % 2}"
        if i % 4:
            pod["status"] = {"phase": "Running", "startTime": f"2026-11-0{1 + i % 9}T00:00:00Z"}
        if i == 2:
            pod["metadata"]["labels"] = {}
        if i == 3:
            del pod["metadata"]["annotations"]
        if i == 4:
            pod["spec"]["nodeName"] = None
        out.append(pod)
    return out


@contextlib.asynccontextmanager
async def _served(demo: DemoUpstream) -> AsyncIterator[Client]:
    await demo.store.ensure_namespace(NS)
    await demo.store.bulk_create(POD, _pods(), namespace=NS)
    async with serve_gateway(demo) as gw, client_of(gw) as rpc:
        yield rpc


def _fields(data: bytes) -> list[tuple[int, bytes | int]]:
    """A message's fields as they are on the wire (varints and length-delimited only: what
    a ``ResourceView`` holds), in order: (number, value)."""
    out: list[tuple[int, bytes | int]] = []
    at = 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < len(data):
        key = varint()
        number, kind = key >> 3, key & 7
        if kind == 0:
            out.append((number, varint()))
        elif kind == 2:
            size = varint()
            out.append((number, data[at : at + size]))
            at += size
        else:
            raise AssertionError(f"wire type {kind} in a ResourceView")
    return out


async def _objects_sent(rpc: Client, req: resource_pb2.ViewResourcesRequest) -> list[bytes]:
    """Each edge's ``ResourceObject`` exactly as the gateway wrote it on the wire (a message
    parsed and serialised again may order a ``Struct``'s entries otherwise)."""
    raw = rpc.channel.unary_unary(
        "/kubegateway.v1.ResourceService/View",
        request_serializer=resource_pb2.ViewResourcesRequest.SerializeToString,
        response_deserializer=lambda data: data,
    )
    data = await raw(req, metadata=(("authorization", f"Bearer {ADMIN}"),), timeout=60)
    out = []
    for number, edge in _fields(data):
        if number == resource_pb2.ResourceView.EDGES_FIELD_NUMBER:
            assert isinstance(edge, bytes)
            objects = [
                v for n, v in _fields(edge) if n == resource_pb2.ViewEdge.OBJECT_FIELD_NUMBER
            ]
            assert len(objects) == 1 and isinstance(objects[0], bytes)
            out.append(objects[0])
    return out


def _expected(whole: dict[str, Any], mask: list[str] | None, rep: int) -> bytes:
    """What the whole-object path writes of ``whole`` (a ``ResourceObject``)."""
    tree = masks.parse_json(mask) if mask is not None else None
    obj = masks.project(whole, tree, loose=True) if tree is not None else whole
    return object_bytes(obj, rep)


async def _check_every_mask(rpc: Client, *, min: str | None = None) -> dict[str, Any]:
    """Every read mask and representation, each page asked twice (the second from the memo),
    against the whole objects; the whole objects by name."""
    base = dict(ns=NS, sort=[{"field": "metadata.name"}], first=100, min=min)
    whole_view = await rpc.view(request(**base))
    wholes = [orjson.loads(e.object.json) for e in whole_view.edges]
    assert len(wholes) == len(_pods())
    for mask in MASKS:
        for rep in (JSON_REP, STRUCT):
            for _ in range(2):
                req = request(**base, mask=mask)
                if mask == []:
                    req.read_mask.SetInParent()
                req.representation = rep
                view = await rpc.view(req)
                assert [e.cursor for e in view.edges] == [e.cursor for e in whole_view.edges]
                assert view.total == whole_view.total
                sent = await _objects_sent(rpc, req)
                for written, whole in zip(sent, wholes, strict=True):
                    assert written == _expected(whole, mask, rep), (
                        mask,
                        rep,
                        whole["metadata"]["name"],
                    )
    return {w["metadata"]["name"]: w for w in wholes}


async def test_a_views_objects_are_the_bytes_the_whole_object_path_writes(
    demo: DemoUpstream,
) -> None:
    async with _served(demo) as rpc:
        wholes = await _check_every_mask(rpc)
        assert wholes["written-01"]["metadata"]["annotations"]["note"] == 'a "quoted" \\ back'

        # A changed object is written anew (its JSON is other bytes), never from the memo.
        pod = copy.deepcopy(await demo.store.get(POD, "written-05", namespace=NS))
        pod["metadata"]["annotations"]["note"] = "changed ü"
        pod["spec"]["containers"][0]["image"] = "img:new"
        await demo.store.update(POD, pod, namespace=NS)
        changed = await demo.store.get(POD, "written-05", namespace=NS)
        version = changed["metadata"]["resourceVersion"]
        wholes = await _check_every_mask(rpc, min=version)
        assert wholes["written-05"]["metadata"]["annotations"]["note"] == "changed ü"
        view = await rpc.view(
            request(
                ns=NS,
                sort=[{"field": "metadata.name"}],
                min=version,
                mask=[
                    "metadata.annotations.note",
                    "spec.containers.image",
                ],
            )
        )
        shown = {orjson.dumps(orjson.loads(e.object.json)) for e in view.edges}
        assert (
            orjson.dumps(
                {
                    "metadata": {"annotations": {"note": "changed ü"}},
                    "spec": {"containers": [{"image": "img:new"}, {"image": "busybox"}]},
                }
            )
            in shown
        )


async def test_a_merged_views_objects_are_each_clusters_own_bytes(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    await fleet_views.make_pods(two)
    async with (
        fleet_views.fleet_of(a, b, tmp_path) as (served, _fleet, _client),
        client_of(served) as rpc,
    ):
        for mask in (None, ["metadata.name", "metadata.labels", "spec.containers.image"]):
            for rep in (JSON_REP, STRUCT):
                own: dict[tuple[str, str], bytes] = {}
                for cluster in ("default", "b"):
                    req = request(ns=NAMESPACE, first=500, mask=mask)
                    req.representation = rep
                    req.clusters.append(cluster)
                    sent = await _objects_sent(rpc, req)
                    own.update({(cluster, written): b"" for written in sent})
                    assert sent
                req = request(ns=NAMESPACE, first=500, mask=mask)
                req.representation = rep
                req.clusters.append("*")
                merged = await rpc.view(req)
                assert len(merged.edges) == merged.total == len(own)
                sent = await _objects_sent(rpc, req)
                for edge, written in zip(merged.edges, sent, strict=True):
                    assert (edge.cluster, written) in own


# -- the writer alone, on random objects and masks ------------------------------------------

_KEYS = st.sampled_from(["a", "b", "a_b", "aB", "c_d", "cD", "x", "é"])
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=25,
)
_OBJECTS = st.dictionaries(_KEYS, _VALUES, max_size=6)
_MASK_TREES = st.recursive(
    st.none(), lambda inner: st.dictionaries(_KEYS, inner, min_size=1, max_size=4), max_leaves=8
).filter(lambda t: isinstance(t, dict))


@settings(max_examples=400, deadline=None)
@given(
    obj=_OBJECTS, tree=_MASK_TREES, indent=st.booleans(), rep=st.sampled_from([JSON_REP, STRUCT])
)
def test_the_writer_writes_what_the_whole_object_path_writes(
    obj: dict[str, Any], tree: dict[str, Any], indent: bool, rep: int
) -> None:
    raw = orjson.dumps(obj, option=orjson.OPT_INDENT_2 if indent else 0)
    want = object_bytes(masks.project(deepjson.loads(raw), tree, loose=True), rep)
    writer = _Objects(WireMemo(), tree, ("key",), rep)
    assert writer.one(raw, None) == want  # read in parts
    assert writer.one(raw, None) == want  # from the memo
    assert _Objects(WireMemo(), tree, ("key",), rep).one(raw, obj) == want  # decoded already
    whole = _Objects(WireMemo(), None, None, rep)
    assert whole.one(raw, None) == object_bytes(deepjson.loads(raw), rep)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": {"x": 1}, "a": {"y": 2}, "b": null}',  # a duplicate key: the last one
        b'{"a": ' + b"[" * 600 + b"]" * 600 + b', "b": 1}',  # deep: decoded whole
        b'{"a": ' + b"[" * 1100 + b"]" * 1100 + b', "b": 1}',  # past orjson's nesting
        b'{"a": 1.5e300, "b": -0.0, "a_b": 18446744073709551615}',
        b'{"a": [1, "s", null, {"x": 1}, [{"x": 2}]], "b": "\\u00e9\\ud83d\\ude00"}',
        b' \n{"a" :\t{ "x" : [ {"y": 1} ] } }\n',
    ],
)
def test_the_writer_on_edge_cases_of_json(raw: bytes) -> None:
    obj = deepjson.loads(raw)
    for tree in ({"a": None}, {"a": {"x": None}}, {"a": {"x": {"y": None}}}, {"b": None}):
        for rep in (JSON_REP, STRUCT):
            want = object_bytes(masks.project(obj, tree, loose=True), rep)
            assert _Objects(WireMemo(), tree, ("k",), rep).one(raw, None) == want, (tree, rep)


async def test_a_huge_read_mask_is_written_exactly_while_a_neighbour_is_served(
    demo: DemoUpstream,
) -> None:
    """20,000 paths and one of 900 segments (no cap applies: a read mask is as long as the
    message allows): each object written as the whole-object path writes it, five such
    calls at once, and a neighbour's small view answered beside them."""
    huge = [f"metadata.labels.k{i}" for i in range(20_000)]
    huge += [".".join(["spec", *["x"] * 900]), "metadata.name", "spec.containers.image"]
    async with _served(demo) as rpc:
        base = dict(ns=NS, sort=[{"field": "metadata.name"}], first=100)
        wholes = [orjson.loads(e.object.json) for e in (await rpc.view(request(**base))).edges]
        neighbour = request(**base, mask=["metadata.name"])

        async def timed(req: resource_pb2.ViewResourcesRequest) -> tuple[float, list[bytes]]:
            started = time.perf_counter()
            sent = await _objects_sent(rpc, req)
            return time.perf_counter() - started, sent

        found = await asyncio.gather(
            *(timed(request(**base, mask=huge)) for _ in range(5)), timed(neighbour)
        )
        for _took, sent in found[:-1]:
            assert sent == [_expected(w, huge, JSON_REP) for w in wholes]
        took, sent = found[-1]
        assert sent == [_expected(w, ["metadata.name"], JSON_REP) for w in wholes]
        # orders of magnitude on a loaded machine (each huge call took ~15-30 ms alone)
        assert took < 5.0, took
        assert max(t for t, _ in found) < 10.0, [t for t, _ in found]
