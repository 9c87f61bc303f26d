"""Every core error kind as a gRPC status code with rich details; nothing leaks."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import orjson
import pytest
from google.protobuf import field_mask_pb2

from gateway.core import errors
from gateway.core.fleet.cluster import Cluster
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.watch.hub import WatchHub
from gateway.grpc.gen.kubegateway.v1 import (
    common_pb2,
    core_pb2,
    images_pb2,
    leases_pb2,
    meta_pb2,
    pods_pb2,
    pods_pb2_grpc,
)
from gateway.grpc.status import CODES, DOMAIN, code_for
from kube_gateway_demo import DemoUpstream
from tests.scenarios.backend import sample
from tests.support.grpc import (
    ADMIN,
    ALICE,
    NAMESPACE,
    VIEWER,
    GrpcGateway,
    bearer,
    details,
    gw,
    start_one,
    unique,
    upstream,
)

__all__ = ["gw", "upstream"]  # fixtures

AUTH = bearer(ADMIN)


def _pod(name: str, namespace: str = NAMESPACE) -> core_pb2.Pod:
    return core_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace),
        spec=core_pb2.PodSpec(containers=[core_pb2.Container(name="c", image="busybox:1.36")]),
    )


async def _fails(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    error = failed.value
    text = f"{error.details()} {error.debug_error_string()} {details(error)}"
    for secret in (ADMIN, VIEWER, ALICE, "Traceback"):
        assert secret not in text
    return error


def _info(error: grpc.aio.AioRpcError) -> Any:
    info = details(error)["ErrorInfo"]
    assert info.domain == DOMAIN
    return info


async def test_not_found(gw: GrpcGateway) -> None:
    error = await _fails(
        gw.stub("pods").Get(pods_pb2.GetPodRequest(namespace=NAMESPACE, name="nope"), metadata=AUTH)
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == 'pods "nope" not found'
    info = _info(error)
    assert info.reason == "NotFound"
    assert dict(info.metadata) == {"httpStatus": "404", "name": "nope", "kind": "pods"}
    status = details(error)["Status"]
    assert (status.code, status.reason, status.status) == (404, "NotFound", "Failure")


async def test_already_exists_and_conflict(gw: GrpcGateway) -> None:
    pods = gw.stub("pods")
    name = unique("dup")
    created = await pods.Create(
        pods_pb2.CreatePodRequest(namespace=NAMESPACE, object=_pod(name)), metadata=AUTH
    )
    error = await _fails(
        pods.Create(
            pods_pb2.CreatePodRequest(namespace=NAMESPACE, object=_pod(name)), metadata=AUTH
        )
    )
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS
    assert _info(error).reason == "AlreadyExists"
    stale = core_pb2.Pod()
    stale.CopyFrom(created)
    stale.metadata.resourceVersion = "1"
    error = await _fails(
        pods.Replace(
            pods_pb2.ReplacePodRequest(namespace=NAMESPACE, name=name, object=stale), metadata=AUTH
        )
    )
    assert error.code() == grpc.StatusCode.ABORTED
    assert _info(error).reason == "Conflict"
    assert "the object has been modified" in error.details()


async def test_invalid_objects_carry_field_violations(gw: GrpcGateway) -> None:
    bad = core_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name="Not_A_Valid_Name"), spec=core_pb2.PodSpec()
    )
    error = await _fails(
        gw.stub("pods").Create(
            pods_pb2.CreatePodRequest(namespace=NAMESPACE, object=bad), metadata=AUTH
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _info(error).reason == "Invalid"
    violations = {v.field: v for v in details(error)["BadRequest"].field_violations}
    assert "metadata.name" in violations and "spec.containers" in violations
    assert violations["spec.containers"].reason == "FieldValueRequired"
    assert violations["spec.containers"].description.startswith("Required value")
    status = details(error)["Status"]
    assert [c.field for c in status.details.causes] == [v for v in violations]


async def test_invalid_options_are_refused_before_the_upstream(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    pods = gw.stub("pods")
    error = await _fails(
        pods.List(
            pods_pb2.ListPodsRequest(namespace=NAMESPACE, resource_version_match="Sometime"),
            metadata=AUTH,
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    fields = [v.field for v in details(error)["BadRequest"].field_violations]
    assert fields == ["resourceVersionMatch", "resourceVersionMatch"]
    error = await _fails(
        pods.Patch(
            pods_pb2.PatchPodRequest(
                namespace=NAMESPACE,
                name="x",
                patch_type=common_pb2.PATCH_TYPE_APPLY,
                patch=b"{}",
            ),
            metadata=AUTH,
        )
    )
    assert [v.field for v in details(error)["BadRequest"].field_violations] == ["fieldManager"]


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pods_pb2.GetPodRequest(name="x"), "namespace"),
        (
            pods_pb2.GetPodRequest(
                namespace=NAMESPACE,
                name="x",
                read_mask=field_mask_pb2.FieldMask(paths=["spec.nope"]),
            ),
            "read_mask.paths[0]",
        ),
        (pods_pb2.PatchPodRequest(namespace=NAMESPACE, name="x", patch=b"{}"), "patch_type"),
        (
            pods_pb2.PatchPodRequest(
                namespace=NAMESPACE, name="x", patch_type=common_pb2.PATCH_TYPE_MERGE
            ),
            "patch",
        ),
        (pods_pb2.CreatePodRequest(namespace=NAMESPACE, raw_json=b"{not json"), "raw_json"),
        (pods_pb2.CreatePodRequest(namespace=NAMESPACE, raw_json=b"[1, 2]"), "raw_json"),
        (pods_pb2.CreatePodRequest(namespace=NAMESPACE), "body"),
        (
            pods_pb2.DeletePodRequest(
                namespace=NAMESPACE, name="x", options=meta_pb2.DeleteOptions(dryRun=["Some"])
            ),
            "options.dryRun",
        ),
    ],
)
async def test_invalid_requests_are_invalid_argument(
    gw: GrpcGateway, request_: Any, field: str
) -> None:
    method = {
        "GetPodRequest": "Get",
        "PatchPodRequest": "Patch",
        "CreatePodRequest": "Create",
        "DeletePodRequest": "Delete",
    }[type(request_).__name__]
    error = await _fails(getattr(gw.stub("pods"), method)(request_, metadata=AUTH))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details(error)["BadRequest"].field_violations] == [field]


async def test_undecodable_request_bytes_are_invalid_argument(gw: GrpcGateway) -> None:
    call = gw.channel.unary_unary(
        "/kubegateway.v1.PodService/Get",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    error = await _fails(call(b"\xff\xff\xff\xff", metadata=AUTH))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "kubegateway.v1.GetPodRequest" in error.details()


async def test_forbidden_and_unauthenticated(gw: GrpcGateway) -> None:
    pods = gw.stub("pods")
    create = pods_pb2.CreatePodRequest(namespace=NAMESPACE, object=_pod(unique("ro")))
    error = await _fails(pods.Create(create, metadata=bearer(VIEWER)))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _info(error).reason == "Forbidden"
    error = await _fails(
        pods.List(pods_pb2.ListPodsRequest(namespace="kube-system"), metadata=bearer(ALICE))
    )
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "alice" in error.details()
    # alice may read her own namespace with her own identity
    assert await pods.List(pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=bearer(ALICE))
    for metadata in (bearer("not-a-token"), (), (("authorization", "Basic YWRtaW46YWRtaW4="),)):
        error = await _fails(
            pods.List(pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=metadata)
        )
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert _info(error).reason == "Unauthorized"


async def test_no_credential_says_what_to_send(gw: GrpcGateway) -> None:
    """A call without ``authorization`` metadata is told what to send and where a token
    comes from; a refused token keeps the upstream's message (nothing else is added)."""
    pods = gw.stub("pods")
    error = await _fails(pods.List(pods_pb2.ListPodsRequest(namespace=NAMESPACE)))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _info(error).reason == "Unauthorized"
    message = error.details() or ""
    assert "'authorization' metadata" in message
    assert "Bearer <token>" in message
    assert "kubectl create token <serviceaccount>" in message
    error = await _fails(
        pods.List(pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=bearer("not-a-token"))
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "Bearer <token>" not in (error.details() or "")
    assert "not-a-token" not in (error.details() or "")


async def test_gone_is_out_of_range(gw: GrpcGateway, upstream: DemoUpstream) -> None:
    images = gw.stub("images")
    first = await images.List(images_pb2.ListImagesRequest(limit=1), metadata=AUTH)
    token = getattr(first.metadata, "continue")
    assert token
    await images.Create(
        images_pb2.CreateImageRequest(raw_json=orjson.dumps(sample("images", unique("img"), None))),
        metadata=AUTH,
    )
    upstream.faults.compact()
    page = images_pb2.ListImagesRequest(limit=1)
    setattr(page, "continue", token)
    error = await _fails(images.List(page, metadata=AUTH))
    assert error.code() == grpc.StatusCode.OUT_OF_RANGE
    assert _info(error).reason == "Expired"
    assert dict(_info(error).metadata)["httpStatus"] == "410"


@pytest.mark.parametrize(
    ("status", "code", "reason"),
    [
        (429, grpc.StatusCode.RESOURCE_EXHAUSTED, "TooManyRequests"),
        (503, grpc.StatusCode.UNAVAILABLE, "ServiceUnavailable"),
        (504, grpc.StatusCode.DEADLINE_EXCEEDED, "Timeout"),
        (500, grpc.StatusCode.INTERNAL, "InternalError"),
    ],
)
async def test_upstream_failures(
    gw: GrpcGateway, upstream: DemoUpstream, status: int, code: grpc.StatusCode, reason: str
) -> None:
    upstream.faults.fail_requests(1, status=status, verb="list", resource="leases", retry_after=3)
    error = await _fails(
        gw.stub("leases").List(
            leases_pb2.ListLeasesRequest(namespace=NAMESPACE),
            metadata=AUTH,
        )
    )
    assert error.code() == code
    info = _info(error)
    assert info.reason == reason and info.metadata["httpStatus"] == str(status)
    if status in (429, 503):
        assert details(error)["RetryInfo"].retry_delay.seconds == 3


@contextlib.asynccontextmanager
async def _serve_against(
    transport: httpx.AsyncBaseTransport | None, url: str
) -> AsyncIterator[grpc.aio.Channel]:
    """The gateway's gRPC server on an upstream of our choosing."""
    http = build_http_client(UpstreamConfig(server=url, source="tests"), transport=transport)
    adapter = KubeAdapter(http)
    hub = WatchHub(adapter)
    server, port = await start_one(Cluster(adapter, hub))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel
    finally:
        await channel.close()
        await hub.aclose()
        await server.stop(None)
        await http.aclose()


async def test_an_unreachable_upstream_is_unavailable() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    async with _serve_against(None, url) as channel:
        error = await _fails(
            pods_pb2_grpc.PodServiceStub(channel).List(
                pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=AUTH
            )
        )
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert error.details() == "upstream unreachable: ConnectError"


class _Broken(httpx.AsyncBaseTransport):
    """A transport with a bug: raises something that is not an httpx error."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise RuntimeError(f"boom, token was {request.headers.get('authorization')}")


async def test_an_unexpected_failure_is_internal_with_a_generic_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _serve_against(_Broken(), "http://127.0.0.1:1") as channel:
        error = await _fails(
            pods_pb2_grpc.PodServiceStub(channel).Get(
                pods_pb2.GetPodRequest(namespace=NAMESPACE, name="x"), metadata=AUTH
            )
        )
    assert error.code() == grpc.StatusCode.INTERNAL
    assert error.details() == "internal error"
    assert "boom" not in str(details(error))
    assert any("unexpected failure" in r.getMessage() for r in caplog.records)


def test_the_one_table_covers_every_error_class() -> None:
    expected = {
        errors.NotFound: grpc.StatusCode.NOT_FOUND,
        errors.AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
        errors.Conflict: grpc.StatusCode.ABORTED,
        errors.Invalid: grpc.StatusCode.INVALID_ARGUMENT,
        errors.InvalidParameter: grpc.StatusCode.INVALID_ARGUMENT,
        errors.Forbidden: grpc.StatusCode.PERMISSION_DENIED,
        errors.Unauthorized: grpc.StatusCode.UNAUTHENTICATED,
        errors.Gone: grpc.StatusCode.OUT_OF_RANGE,
        errors.TooManyRequests: grpc.StatusCode.RESOURCE_EXHAUSTED,
        errors.Timeout: grpc.StatusCode.DEADLINE_EXCEEDED,
        errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
        errors.Internal: grpc.StatusCode.INTERNAL,
        errors.GatewayError: grpc.StatusCode.INTERNAL,
    }
    for cls, code in expected.items():
        assert code_for(cls("x")) == code, cls
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.GatewayError):
            # every class the core defines is named by the table (or by a base class in it)
            assert any(base in CODES for base in cls.__mro__) or cls is errors.GatewayError
