"""A large gRPC list is decoded, encoded and freed in slices that yield to the event loop,
byte for byte the same as the one-piece encoding, with and without a read mask, and the
cyclic collector is back on once the call is over."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from google.protobuf import field_mask_pb2

from gateway.core.lists import large as largelist
from gateway.core.model.registry import POD
from gateway.core.upstream.credentials import Credential
from gateway.grpc import mask as masks
from gateway.grpc.codec import LIST_SLICE, codec
from gateway.grpc.gen.kubegateway.v1 import pods_pb2
from kube_gateway_demo import DemoUpstream
from tests.support.grpc import ADMIN, bearer, serve_grpc

COUNT = 2000
NAMESPACE = "large"


def bearer_header(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _pod(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"p-{i:05d}",
            "labels": {"app": "large", "n": str(i)},
            # large enough for the upstream body to be decoded in slices
            "annotations": {"note": "x" * 600},
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "nginx",
                    "ports": [{"containerPort": 8080}],
                    "livenessProbe": {"httpGet": {"path": "/", "port": 8080}},
                }
            ]
        },
    }


async def test_a_large_list_is_the_same_bytes_as_a_direct_encode(demo: DemoUpstream) -> None:
    await demo.store.bulk_create(POD, (_pod(i) for i in range(COUNT)), namespace=NAMESPACE)
    async with serve_grpc(demo) as gw:
        body = await gw.adapter.http.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods", headers=bearer_header(ADMIN)
        )
        assert len(body.content) > 2 * largelist.LARGE_BODY_BYTES
        raw = gw.channel.unary_unary(
            "/kubegateway.v1.PodService/List",
            request_serializer=pods_pb2.ListPodsRequest.SerializeToString,
            response_deserializer=None,
        )
        for paths in ((), ("metadata.name", "spec.containers")):
            request = pods_pb2.ListPodsRequest(
                namespace=NAMESPACE, read_mask=field_mask_pb2.FieldMask(paths=list(paths))
            )
            sent: bytes = await raw(request, metadata=bearer(ADMIN))
            listed = await gw.adapter.list(POD, namespace=NAMESPACE, credential=Credential(ADMIN))
            assert len(listed["items"]) == COUNT
            mask = masks.parse(list(paths), "Pod", codec().contract) if paths else None
            assert sent == codec().list_bytes("Pod", listed, mask)
            assert gc.isenabled()


async def test_a_large_list_lets_the_loop_run_between_slices(demo: DemoUpstream) -> None:
    await demo.store.bulk_create(POD, (_pod(i) for i in range(COUNT)), namespace=NAMESPACE)
    async with serve_grpc(demo) as gw:
        listed = await gw.adapter.list(POD, namespace=NAMESPACE, credential=Credential(ADMIN))
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
    encoded = await largelist.LargeLists().encode(listed, codec().list_encoding("Pod"))
    during = turns - before
    done = True
    await other
    assert encoded == codec().list_bytes("Pod", listed)
    assert during >= COUNT // LIST_SLICE
