"""A large typed gRPC list (``PodService/List``) from the real kube-apiserver: the body it
gzips goes to two list workers as it came, each inflates it and writes its half of the
items, and the answer is the bytes a gateway without workers writes, on the wire (with a
read mask too)."""

from __future__ import annotations

from typing import Any

import grpc
import httpx

from gateway.grpc.gen.kubegateway.v1 import pods_pb2
from gateway.grpc.messages import message_class
from tests.e2e.apiserver import KubeAPIServer
from tests.e2e.test_large_list_e2e import NS, PODS, big_pods
from tests.support.graphql import serve_app
from tests.support.grpc import bearer

__all__ = ["big_pods"]  # the fixture, used here


async def _list_bytes(port: int, token: str, **request: Any) -> bytes:
    """``PodService/List``'s answer as the bytes on the wire (not parsed)."""
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]
    ) as channel:
        call = channel.unary_unary(
            "/kubegateway.v1.PodService/List",
            request_serializer=pods_pb2.ListPodsRequest.SerializeToString,
            response_deserializer=None,
        )
        answer: bytes = await call(pods_pb2.ListPodsRequest(**request), metadata=bearer(token))
    return answer


async def test_a_large_typed_list_is_written_by_two_workers_exactly(
    kube_apiserver: KubeAPIServer, big_pods: httpx.AsyncClient
) -> None:
    token = kube_apiserver.tokens["admin"]
    masked = {"namespace": NS, "read_mask": {"paths": ["metadata.name", "metadata.annotations"]}}
    async with (
        serve_app(kube_apiserver.gateway_settings(list_workers="2")) as (_, app),
        serve_app(kube_apiserver.gateway_settings(list_workers="0")) as (_, plain),
    ):
        port, plain_port = app.state.runtime.grpc_port, plain.state.runtime.grpc_port
        workers = app.state.runtime.cluster.adapter.large_lists.workers
        assert workers is not None
        got = await _list_bytes(port, token, namespace=NS)
        assert workers.projected == 2  # two workers, each its half
        want = await _list_bytes(plain_port, token, namespace=NS)
        got_masked = await _list_bytes(port, token, **masked)
        assert workers.projected == 4
        want_masked = await _list_bytes(plain_port, token, **masked)
    assert got == want
    assert got_masked == want_masked
    listed = message_class("PodList").FromString(got)
    assert sorted(p.metadata.name for p in listed.items) == [f"big-{i}" for i in range(PODS)]
    assert listed.items[0].spec.containers[0].image.startswith("example.com/app:")
    cut = message_class("PodList").FromString(got_masked).items[0]
    assert len(cut.metadata.annotations) == 10 and not cut.spec.containers
