"""The server around the services: reflection, health, gzip, message size, deadlines."""

from __future__ import annotations

import asyncio
import gzip
import math
import zlib
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gateway.core.model.registry import POD
from gateway.grpc.contract import contract
from gateway.grpc.gen.kubegateway.v1 import core_pb2, meta_pb2, pods_pb2, pods_pb2_grpc
from gateway.grpc.handling import COMPRESSED_FROM_BYTES, UNCOMPRESSED_BYTES
from gateway.grpc.server import GrpcOptions, service_names
from gateway.settings import load
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import serve_app
from tests.support.grpc import (
    ADMIN,
    NAMESPACE,
    GrpcGateway,
    bearer,
    gw,
    serve_grpc,
    start_one,
    unique,
    upstream,
)
from tests.support.tap import Tap

__all__ = ["gw", "upstream"]  # fixtures

AUTH = bearer(ADMIN)


async def _reflect(
    gw: GrpcGateway, request: reflection_pb2.ServerReflectionRequest
) -> reflection_pb2.ServerReflectionResponse:
    call = reflection_pb2_grpc.ServerReflectionStub(gw.channel).ServerReflectionInfo()
    await call.write(request)
    await call.done_writing()
    response = await call.read()
    assert isinstance(response, reflection_pb2.ServerReflectionResponse)
    return response


async def test_reflection_lists_every_service(gw: GrpcGateway) -> None:
    listed = await _reflect(gw, reflection_pb2.ServerReflectionRequest(list_services=""))
    names = {s.name for s in listed.list_services_response.service}
    assert names == set(service_names())
    assert {
        "kubegateway.v1.PodService",
        "kubegateway.v1.EventService",
        "kubegateway.v1.EndpointsService",
        "kubegateway.v1.LeaseService",
        "kubegateway.v1.ImageService",
        "kubegateway.v1.ResourceService",
        "kubegateway.v1.ClusterService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    } == names


async def test_reflection_describes_the_services_and_their_messages(gw: GrpcGateway) -> None:
    found = await _reflect(
        gw,
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="kubegateway.v1.PodService"),
    )
    files = {}
    for raw in found.file_descriptor_response.file_descriptor_proto:
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
        files[proto.name] = proto
    pods = files["kubegateway/v1/pods.proto"]
    methods = [m.name for m in pods.service[0].method]
    assert methods == [r.name for r in contract().services[0].rpcs]
    assert "kubegateway/v1/core.proto" in pods.dependency
    # dependencies resolve too (what grpcurl does next)
    core = await _reflect(
        gw, reflection_pb2.ServerReflectionRequest(file_by_filename="kubegateway/v1/core.proto")
    )
    protos = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in core.file_descriptor_response.file_descriptor_proto
    ]
    assert any(m.name == "Pod" for p in protos for m in p.message_type)


async def test_health_answers_serving_for_the_server_and_each_service(gw: GrpcGateway) -> None:
    health = health_pb2_grpc.HealthStub(gw.channel)
    for service in ("", "kubegateway.v1.PodService", "kubegateway.v1.ImageService"):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_the_message_size_limit_is_configurable(upstream: DemoUpstream) -> None:
    async with serve_grpc(upstream, options=GrpcOptions(max_message_bytes=2048)) as gateway:
        pods = gateway.stub("pods")
        small = await pods.List(
            pods_pb2.ListPodsRequest(namespace=NAMESPACE, label_selector="nothing=matches"),
            metadata=AUTH,
        )
        assert list(small.items) == []
        with pytest.raises(grpc.aio.AioRpcError) as too_big:
            await pods.List(pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=AUTH)
        assert too_big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_deadline_becomes_the_upstream_timeout(upstream: DemoUpstream) -> None:
    # The upstream never answers a get: only the caller's deadline can end the call, and the
    # gateway must give up on its upstream request when it does.
    upstream.faults.set_delay(math.inf, verb="get")
    async with Tap.before(upstream.url) as tap, serve_grpc(upstream, server=tap.url) as gw:
        pods = gw.stub("pods")
        with pytest.raises(grpc.aio.AioRpcError) as late:
            # a deadline long enough for the request to reach the upstream on a busy machine
            await pods.Get(
                pods_pb2.GetPodRequest(namespace=NAMESPACE, name="anything"),
                metadata=AUTH,
                timeout=2,
            )
        assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        # the upstream was asked, answered nothing, and the gateway hung up on it
        (asked,) = tap.connections
        await asked.client_closed.wait()
        assert asked.from_client.startswith(b"GET /api/v1/namespaces/demo/pods/anything ")
        assert asked.from_server == b""
        upstream.faults.reset()
        # the server is not stuck behind the abandoned upstream request
        async with asyncio.timeout(10):
            listed = await pods.List(pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=AUTH)
        assert listed.items


def test_keepalive_and_limits_are_server_options() -> None:
    options = dict(
        GrpcOptions(
            max_message_bytes=1 << 20, max_request_bytes=1 << 16, keepalive_seconds=20
        ).channel_options()
    )
    assert options["grpc.keepalive_time_ms"] == 20_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.max_send_message_length"] == 1 << 20
    assert options["grpc.max_receive_message_length"] == 1 << 16


_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _grpc_messages(data: bytes) -> list[tuple[int, bytes]]:
    """The gRPC messages in one direction of an HTTP/2 connection: (compressed flag, the
    message as it travelled), from the DATA frames of every stream."""
    data = data.removeprefix(_PREFACE)  # what a client sends first
    messages: list[tuple[int, bytes]] = []
    pending: dict[int, bytearray] = {}
    i = 0
    while i + 9 <= len(data):
        length = int.from_bytes(data[i : i + 3], "big")
        kind, flags = data[i + 3], data[i + 4]
        stream = int.from_bytes(data[i + 5 : i + 9], "big") & 0x7FFFFFFF
        payload = data[i + 9 : i + 9 + length]
        i += 9 + length
        if kind == 0 and payload:  # DATA
            if flags & 0x8:  # PADDED: a pad-length byte first, the padding last
                payload = payload[1 : len(payload) - payload[0]]
            buf = pending.setdefault(stream, bytearray())
            buf += payload
            while len(buf) >= 5 and len(buf) >= 5 + int.from_bytes(buf[1:5], "big"):
                size = int.from_bytes(buf[1:5], "big")
                messages.append((buf[0], bytes(buf[5 : 5 + size])))
                del buf[: 5 + size]
    return messages


def _flags_sent_by_server(tap: Tap) -> list[int]:
    """The compressed-flag byte of each gRPC message the server sent through ``tap``."""
    return [flag for flag, _ in _grpc_messages(bytes(tap.from_server))]


async def test_gzip_compressed_requests_are_decompressed(gw: GrpcGateway) -> None:
    note = "compressible " * 2_000
    name = unique("gzip")
    request = pods_pb2.CreatePodRequest(
        namespace=NAMESPACE,
        object=core_pb2.Pod(
            metadata=meta_pb2.ObjectMeta(name=name, annotations={"note": note}),
            spec=core_pb2.PodSpec(containers=[core_pb2.Container(name="c", image="busybox")]),
        ),
    )
    tap = Tap(gw.port)
    port = await tap.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", compression=grpc.Compression.Gzip)
    try:
        created = await pods_pb2_grpc.PodServiceStub(channel).Create(request, metadata=AUTH)
    finally:
        await channel.close()
        await tap.stop()
    assert created.metadata.name == name
    assert created.metadata.annotations["note"] == note  # the server inflated it
    ((flag, sent),) = _grpc_messages(bytes(tap.from_client))
    assert flag == 1
    assert gzip.decompress(sent) == request.SerializeToString()
    assert len(sent) < len(request.SerializeToString()) // 10


async def _listed_through_tap(
    gw: GrpcGateway, namespace: str, options: list[tuple[str, int]]
) -> tuple[Any, list[tuple[int, bytes]]]:
    """``PodService/List`` of ``namespace`` through a tap, and the messages the server sent."""
    tap = Tap(gw.port)
    port = await tap.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options)
    try:
        listed = await pods_pb2_grpc.PodServiceStub(channel).List(
            pods_pb2.ListPodsRequest(namespace=namespace), metadata=AUTH
        )
    finally:
        await channel.close()
        await tap.stop()
    return listed, _grpc_messages(bytes(tap.from_server))


@pytest.mark.parametrize(("accepts_gzip", "flag"), [(True, 1), (False, 0)])
async def test_responses_are_gzipped_for_clients_that_accept_gzip(
    upstream: DemoUpstream, gw: GrpcGateway, accepts_gzip: bool, flag: int
) -> None:
    # an answer of more than one HTTP/2 frame (COMPRESSED_FROM_BYTES) and less than 1 MiB
    namespace = unique("gz")
    pods = (
        {
            "metadata": {"name": f"p-{i}", "annotations": {"note": f"{i} " * 100}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
        for i in range(100)
    )
    await upstream.store.bulk_create(POD, pods, namespace=namespace)
    # A client that does not advertise gzip (like a Go client without the gzip codec).
    options = [] if accepts_gzip else [("grpc.compression_enabled_algorithms_bitset", 1)]
    listed, messages = await _listed_through_tap(gw, namespace, options)
    assert len(listed.items) == 100
    assert COMPRESSED_FROM_BYTES <= listed.ByteSize() < UNCOMPRESSED_BYTES
    ((sent_flag, sent),) = messages
    assert sent_flag == flag
    if accepts_gzip:  # gzip or deflate, as the client advertised both
        assert type(listed).FromString(zlib.decompress(sent, 47)) == listed


async def test_a_small_response_is_sent_uncompressed_even_to_a_gzip_client(
    upstream: DemoUpstream, gw: GrpcGateway
) -> None:
    # one HTTP/2 frame either way: gzip would cost CPU and save no frame
    namespace = unique("small")
    pods = (
        {"metadata": {"name": f"p-{i}"}, "spec": {"containers": [{"name": "c", "image": "b"}]}}
        for i in range(10)
    )
    await upstream.store.bulk_create(POD, pods, namespace=namespace)
    listed, messages = await _listed_through_tap(gw, namespace, [])  # accepts gzip
    assert len(listed.items) == 10
    ((flag, sent),) = messages
    assert flag == 0
    assert type(listed).FromString(sent) == listed
    assert len(sent) < COMPRESSED_FROM_BYTES


async def test_a_large_response_is_sent_uncompressed_even_to_a_gzip_client(
    upstream: DemoUpstream, gw: GrpcGateway
) -> None:
    # grpc core would gzip it whole on the event loop's thread, holding every other caller
    namespace = unique("big")
    pods = (
        {
            "metadata": {"name": f"p-{i}", "annotations": {"note": f"{i} " * 300}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
        for i in range(1500)
    )
    await upstream.store.bulk_create(POD, pods, namespace=namespace)
    tap = Tap(gw.port)
    port = await tap.start()
    limit = [("grpc.max_receive_message_length", 64 << 20)]
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=limit)
    try:
        listed = await pods_pb2_grpc.PodServiceStub(channel).List(
            pods_pb2.ListPodsRequest(namespace=namespace), metadata=AUTH
        )
    finally:
        await channel.close()
        await tap.stop()
    assert len(listed.items) == 1500
    ((flag, sent),) = _grpc_messages(bytes(tap.from_server))
    assert flag == 0
    assert len(sent) >= UNCOMPRESSED_BYTES


async def test_serve_passes_its_grpc_flags_to_the_server(upstream: DemoUpstream) -> None:
    # `kube-gateway serve --grpc-max-message-bytes 2048`: the app's gRPC server enforces it
    settings = load(
        ["--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--server", upstream.url],
        {"KUBE_GATEWAY_GRPC_MAX_MESSAGE_BYTES": "2048", "KUBE_GATEWAY_LOG_LEVEL": "warning"},
    )
    async with serve_app(settings) as (_, app):
        port = app.state.runtime.grpc_port
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            pods = pods_pb2_grpc.PodServiceStub(channel)
            small = await pods.List(
                pods_pb2.ListPodsRequest(namespace=NAMESPACE, label_selector="nothing=matches"),
                metadata=AUTH,
            )
            assert list(small.items) == []
            with pytest.raises(grpc.aio.AioRpcError) as too_big:
                await pods.List(pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=AUTH)
            assert too_big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_an_oversized_request_is_refused_unread_while_others_are_served(
    upstream: DemoUpstream,
) -> None:
    async with (
        Tap.before(upstream.url) as tap,
        serve_grpc(
            upstream, options=GrpcOptions(max_request_bytes=64 * 1024), server=tap.url
        ) as gateway,
    ):
        pods = gateway.stub("pods")
        huge = b'{"metadata": {"name": "x", "annotations": {"a": "' + b"x" * (1 << 20) + b'"}}}'
        request = pods_pb2.CreatePodRequest(namespace=NAMESPACE, raw_json=huge)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pods.Create(request, metadata=AUTH)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # refused by grpc's own receive limit on the server, before the servicer saw it
        assert refused.value.details() == (
            f"SERVER: Received message larger than max ({request.ByteSize()} vs. {64 * 1024})"
        )
        assert tap.from_client == b""  # the upstream was never asked
        listed = await pods.List(pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=AUTH)
        assert listed.items
        assert tap.from_client.startswith(b"GET /api/v1/namespaces/demo/pods")  # seen here


async def test_past_the_concurrent_rpc_limit_calls_are_refused_at_once(
    upstream: DemoUpstream,
) -> None:
    async with serve_grpc(upstream, options=GrpcOptions(max_concurrent_rpcs=3)) as gateway:
        pods = gateway.stub("pods")
        watches = [
            pods.Watch(pods_pb2.WatchPodsRequest(namespace=NAMESPACE), metadata=AUTH)
            for _ in range(3)
        ]
        for call in watches:  # each is being served: its first event arrived
            async with asyncio.timeout(10):
                await anext(call.__aiter__())
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pods.List(pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=AUTH)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # refused by grpc's limiter before any servicer ran, and at once: no slot had freed
        # (every watch is still open), so it cannot have waited for one
        assert refused.value.details() == "Concurrent RPC limit exceeded!"
        assert not any(call.done() for call in watches)
        watches[0].cancel()
        async with asyncio.timeout(10):
            while True:  # the slot frees as soon as the server sees the cancellation
                try:
                    listed = await pods.List(
                        pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=AUTH
                    )
                    break
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert listed.items
        for call in watches[1:]:
            call.cancel()


async def test_a_grpc_port_in_use_is_refused_at_start() -> None:
    """grpc core listens with SO_REUSEPORT by default: a second gateway on the same port
    would listen beside the first and take half its calls.  It fails at start instead."""
    from gateway.core.fleet.cluster import Cluster
    from gateway.core.upstream.adapter import KubeAdapter
    from gateway.core.upstream.client import build_http_client
    from gateway.core.upstream.config import UpstreamConfig
    from gateway.core.watch.hub import WatchHub

    async with (
        DemoUpstream() as demo,
        build_http_client(UpstreamConfig(server=demo.url, source="demo")) as http,
    ):
        adapter = KubeAdapter(http)
        hub = WatchHub(adapter)
        cluster = Cluster(adapter, hub)
        first, port = await start_one(cluster)
        try:
            with pytest.raises(OSError, match=f"cannot bind the gRPC port 127.0.0.1:{port}"):
                await start_one(cluster, port)
        finally:
            await first.stop(None)
            await hub.aclose()
