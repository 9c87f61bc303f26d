"""A typed ``Get`` (``PodService/Get``...) written from the bytes the upstream sent
(:meth:`Codec.object_from_bytes`): the bytes of the body decoded and written, for every kind
and read mask, cold and from the memo; an object that changed is written again; what is not
surely a JSON object is left to the ordinary path; and over gRPC on the demo upstream, a
``Get`` against the same object asked of it directly."""

from __future__ import annotations

import copy

import grpc
import httpx
import orjson
import pytest

from gateway.core import errors
from gateway.core.lists.large import LargeLists
from gateway.core.model.registry import POD
from gateway.core.support import deepjson
from gateway.grpc import mask as masks
from gateway.grpc.codec import codec
from gateway.grpc.gen.kubegateway.v1 import pods_pb2
from gateway.grpc.messages import message_class
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.sample import make_pods
from tests.bench.realistic import pod
from tests.grpc.test_typed_workers import BODIES, MASKS, _mask_of
from tests.support.graphql import ADMIN, serve_gateway
from tests.support.grpc import bearer

Pod = message_class("Pod")
#: One object of each kind the list cases hold (their first item), the odd values included.
OBJECTS = {
    case: (kind, body["items"][0])
    for case, (kind, body) in BODIES.items()
    if body.get("items") and isinstance(body["items"][0], dict)
}


@pytest.mark.parametrize("masked", list(MASKS))
@pytest.mark.parametrize("case", list(OBJECTS))
def test_a_get_written_from_its_bytes_is_the_bytes_the_gateway_writes(
    case: str, masked: str
) -> None:
    """Cold (decoded and written) and again (its bytes remembered): the bytes of the body
    decoded whole and written by ``object_bytes``, every time."""
    kind, obj = OBJECTS[case]
    mask, key = _mask_of(kind, masked)
    c = codec()
    data = orjson.dumps(obj) + b"\n"  # as the apiserver sends it
    want = c.object_bytes(kind, orjson.loads(data), mask)
    c.memo.clear()
    assert c.object_from_bytes(kind, data, mask, key) == want
    hits = c.memo.hits
    assert c.object_from_bytes(kind, data, mask, key) == want
    assert c.memo.hits == hits + 1
    if mask is not None:  # the same text without the mask is written whole, not masked
        assert c.object_from_bytes(kind, data) == c.object_bytes(kind, orjson.loads(data))


def test_a_remembered_get_is_written_again_once_it_changes() -> None:
    c = codec()
    first = pod(1)
    c.object_from_bytes("Pod", orjson.dumps(first))
    changed = copy.deepcopy(first)
    changed["metadata"]["labels"]["tier"] = "changed"
    changed["metadata"]["resourceVersion"] = "99999"
    got = c.object_from_bytes("Pod", orjson.dumps(changed))
    assert got == c.object_bytes("Pod", changed)
    assert Pod.FromString(got).metadata.labels["tier"] == "changed"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b'{"metadata": {"name": "a"}',
        b"[1, 2]",
        b"null",
        b'"a string"',
        b'{"metadata": {"name": "a"}} trailing',
        b'{"metadata": {"name": "a"}, "big": 123456789012345678901234567890}',
        b"[" * 2000 + b"]" * 2000,
    ],
    ids=["empty", "not-json", "cut", "array", "null", "string", "trailing", "big-int", "deep"],
)
async def test_a_get_body_not_surely_an_object_is_left_to_the_ordinary_path(
    data: bytes,
) -> None:
    """Hostile bodies: ``None`` (the ordinary path decodes it and says what is wrong: an
    ``Internal`` error, never a traceback), or else the ordinary path's bytes; nothing is
    remembered for them."""
    c = codec()
    size = len(c.memo)
    got = c.object_from_bytes("Pod", data)
    if got is not None:
        assert got == c.object_bytes("Pod", deepjson.loads(data))
        return
    assert len(c.memo) == size
    lists = LargeLists()
    try:
        decoded = await lists.decode(data)
    except errors.Internal:
        return
    assert not isinstance(decoded, dict)  # the adapter's object_of refuses it (Internal)


async def test_a_get_over_grpc_is_exact_unchanged_and_changed() -> None:
    """A gateway on the demo upstream: a ``Get`` is the bytes of the same pod asked of the
    upstream directly and written whole (with a read mask too); asked again it is answered
    from the memo, the same bytes; after the pod changes, the answer has the change; a pod
    that is not there is ``NOT_FOUND``."""
    async with DemoUpstream() as demo:
        await demo.store.bulk_create(POD, make_pods(3, "gets"), namespace="gets")
        async with (
            serve_gateway(demo, list_workers="0") as gateway,
            httpx.AsyncClient(
                base_url=demo.url, headers={"Authorization": f"Bearer {ADMIN}"}
            ) as api,
            grpc.aio.insecure_channel(
                f"127.0.0.1:{gateway.app.state.runtime.grpc_port}"
            ) as channel,
        ):
            get = channel.unary_unary(
                "/kubegateway.v1.PodService/Get",
                request_serializer=pods_pb2.GetPodRequest.SerializeToString,
                response_deserializer=None,
            )
            c = codec()
            name = (await api.get("/api/v1/namespaces/gets/pods")).json()["items"][1]
            name = name["metadata"]["name"]
            request = pods_pb2.GetPodRequest(namespace="gets", name=name)
            first = await get(request, metadata=bearer(ADMIN))
            direct = await api.get(f"/api/v1/namespaces/gets/pods/{name}")
            assert first == c.object_bytes("Pod", direct.json())
            hits = c.memo.hits
            assert await get(request, metadata=bearer(ADMIN)) == first
            assert c.memo.hits >= hits + 1
            paths = ["metadata.name", "metadata.labels", "status"]
            masked = pods_pb2.GetPodRequest(namespace="gets", name=name)
            masked.read_mask.paths.extend(paths)
            mask = masks.parse(paths, c.contract.kinds["Pod"][0], c.contract)
            for _ in range(2):  # cold, then from the memo
                got = await get(masked, metadata=bearer(ADMIN))
                assert got == c.object_bytes("Pod", direct.json(), mask)
                assert Pod.FromString(got).metadata.name == name
                assert not Pod.FromString(got).spec.containers
            await demo.store.patch(
                POD, name, {"metadata": {"labels": {"x": "y"}}}, namespace="gets"
            )
            changed = Pod.FromString(await get(request, metadata=bearer(ADMIN)))
            assert changed.metadata.labels["x"] == "y"
            assert (
                changed.metadata.resourceVersion != Pod.FromString(first).metadata.resourceVersion
            )
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await get(
                    pods_pb2.GetPodRequest(namespace="gets", name="nowhere"),
                    metadata=bearer(ADMIN),
                )
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND
