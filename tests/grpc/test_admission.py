"""Every service the gRPC server exposes passes the one admission: table-driven, from the
running server.

The table is what the server itself says it serves (reflection: every service, every
method, its streaming and request type), so a service added later is checked without
editing this file.  For each method, real calls over a real channel prove every defense
applies: ``impersonate-*`` metadata refused, an undecodable message ``INVALID_ARGUMENT``
naming its type, an ``x-kube-cluster`` that is no cluster name ``INVALID_ARGUMENT`` without
echoing it, an oversized message ``RESOURCE_EXHAUSTED`` unread, the request id sent back on
every refusal, and, where the method streams, the bound of unauthenticated streams.

The check is shown to catch a service without the admission (a bare server: every method
reported), and a service registered around :class:`~gateway.grpc.server.Services` is not
reachable at all (``UNIMPLEMENTED``).  A static check keeps :mod:`gateway.grpc.server` the
one module that builds a server or registers a handler.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, wrappers_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

import gateway
from gateway.grpc.server import GrpcOptions, Services, service_names
from kube_gateway_demo import DemoUpstream
from tests.support.grpc import ADMIN, bearer, demo_cluster, start_one, upstream

__all__ = ["upstream"]  # fixtures

AUTH = bearer(ADMIN)
REQUEST_LIMIT = 1024
PER_PEER = 4
OPTIONS = GrpcOptions(max_request_bytes=REQUEST_LIMIT, anonymous_streams_per_peer=PER_PEER)
STEP = 10.0  # seconds any one call may take (a bound, never a sleep)

#: Bytes no protobuf message parses: field 31 with wire type 7 (there is none).
UNDECODABLE = b"\xff\xff\xff"
HOSTILE_CLUSTER = "X" * 5000


def _identity(data: bytes) -> bytes:
    return data


@dataclass(frozen=True)
class Method:
    """One method the server exposes, as reflection describes it."""

    path: str
    request_type: str
    client_streaming: bool
    server_streaming: bool

    @property
    def service(self) -> str:
        return self.path.split("/")[1]


@dataclass
class Outcome:
    """What one call came to: its status (``None``: served, a first message or an answer)."""

    code: grpc.StatusCode | None
    details: str
    initial_metadata: dict[str, str]


async def _reflect(
    channel: grpc.aio.Channel, requests: list[reflection_pb2.ServerReflectionRequest]
) -> list[reflection_pb2.ServerReflectionResponse]:
    call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        metadata=AUTH, timeout=STEP
    )
    answers = []
    for request in requests:
        await call.write(request)
        answers.append(await call.read())
    await call.done_writing()
    return answers


async def exposed(channel: grpc.aio.Channel) -> list[Method]:
    """Every method of every service the server behind ``channel`` lists by reflection."""
    (listed,) = await _reflect(channel, [reflection_pb2.ServerReflectionRequest(list_services="")])
    names = [s.name for s in listed.list_services_response.service]
    found = await _reflect(
        channel,
        [reflection_pb2.ServerReflectionRequest(file_containing_symbol=n) for n in names],
    )
    methods = []
    for name, answer in zip(names, found, strict=True):
        files = [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in answer.file_descriptor_response.file_descriptor_proto
        ]
        (service,) = [
            s
            for f in files
            for s in f.service
            if (f"{f.package}." if f.package else "") + s.name == name
        ]
        methods.extend(
            Method(
                f"/{name}/{m.name}",
                m.input_type.lstrip("."),
                m.client_streaming,
                m.server_streaming,
            )
            for m in service.method
        )
    return methods


async def call(
    channel: grpc.aio.Channel, method: Method, payload: bytes | None, metadata: Any
) -> Outcome:
    """One call of ``method`` with ``payload`` (raw bytes): its status, or ``None`` when it
    was served (an answer, or the first message of a stream, which is then cancelled).

    A client stream opened with no ``payload`` sends nothing: a refusal at the call's start
    is then read as the server sent it (a write racing the refusal may fail on the client,
    and grpc reports that write's failure, ``INTERNAL``, instead of the server's status)."""
    kind = {
        (False, False): channel.unary_unary,
        (False, True): channel.unary_stream,
        (True, False): channel.stream_unary,
        (True, True): channel.stream_stream,
    }[method.client_streaming, method.server_streaming]
    stub = kind(method.path, request_serializer=_identity, response_deserializer=_identity)
    if method.client_streaming:
        pending = stub(metadata=metadata, timeout=STEP)
        if payload is not None:
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await pending.write(payload)
                await pending.done_writing()
    else:
        pending = stub(payload or b"", metadata=metadata, timeout=STEP)
    try:
        if method.server_streaming:
            await pending.read()
            outcome = Outcome(None, "", {})
            if pending.done():  # the stream ended at once: its status is the outcome
                code = await pending.code()
                if code != grpc.StatusCode.OK:
                    outcome = Outcome(code, await pending.details() or "", {})
        else:
            await pending
            outcome = Outcome(None, "", {})
    except grpc.aio.AioRpcError as exc:
        outcome = Outcome(exc.code(), exc.details() or "", {})
    try:
        sent = await pending.initial_metadata()
    except grpc.aio.AioRpcError:  # nothing came back at all
        sent = None
    outcome.initial_metadata = {k: str(v) for k, v in sent or ()}
    pending.cancel()
    return outcome


async def _hold_places(channel: grpc.aio.Channel, count: int) -> list[Any]:
    """``count`` anonymous health ``Watch`` streams, each served (its first status read)."""
    health_stub = health_pb2_grpc.HealthStub(channel)
    held = []
    for _ in range(count):
        watch = health_stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=60)
        async with asyncio.timeout(STEP):
            await watch.read()
        held.append(watch)
    return held


async def missing_defenses(channel: grpc.aio.Channel, methods: list[Method]) -> list[str]:
    """Every defense a method lacks, as ``"<path>: <defense> (<what happened>)"``."""
    problems: list[str] = []

    def expect(
        method: Method,
        defense: str,
        got: Outcome,
        code: grpc.StatusCode,
        *,
        says: str | None = None,
        without: str | None = None,
        request_id: bool = True,
    ) -> None:
        fine = got.code == code
        fine = fine and (says is None or says in got.details)
        fine = fine and (without is None or without not in got.details)
        fine = fine and len(got.details) < 1000 and "Traceback" not in got.details
        if not fine:
            problems.append(f"{method.path}: {defense} ({got.code}, {got.details[:120]!r})")
        elif request_id and not got.initial_metadata.get("x-request-id"):
            problems.append(f"{method.path}: {defense} refused without an x-request-id")

    sized: set[str] = set()
    for method in methods:
        impersonating = (*AUTH, ("impersonate-user", "system:admin"))
        got = await call(channel, method, b"", impersonating)
        expect(
            method,
            "impersonation",
            got,
            grpc.StatusCode.PERMISSION_DENIED,
            says="impersonate-user",
        )
        got = await call(channel, method, UNDECODABLE, AUTH)
        expect(
            method,
            "undecodable message",
            got,
            grpc.StatusCode.INVALID_ARGUMENT,
            says=f"the request is not a valid {method.request_type}",
            without="Error parsing",
        )
        got = await call(channel, method, b"", (*AUTH, ("x-kube-cluster", HOSTILE_CLUSTER)))
        expect(
            method,
            "cluster name",
            got,
            grpc.StatusCode.INVALID_ARGUMENT,
            says="x-kube-cluster metadata is not a cluster name",
            without="XXXXXXXX",
        )
        if method.service in sized:
            continue
        # A server option grpc core applies to every method alike (before the admission
        # runs: no request id), so once per service: each refusal costs grpc ~0.1 s.
        sized.add(method.service)
        got = await call(channel, method, b"\x00" * (REQUEST_LIMIT + 1), AUTH)
        expect(
            method,
            "request size",
            got,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            says="larger than max",
            request_id=False,
        )
    streaming = [m for m in methods if m.client_streaming or m.server_streaming]
    held = await _hold_places(channel, PER_PEER)  # this peer's every place taken
    try:
        for method in streaming:
            got = await call(channel, method, None if method.client_streaming else b"", ())
            expect(
                method,
                "unauthenticated stream bound",
                got,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                says="too many unauthenticated streams from 127.0.0.1",
            )
    finally:
        for watch in held:
            watch.cancel()
    return problems


# -- a service of the test's own, to register through the server or around it ----------------

_BARE_FILE = "kubegateway/test/bare.proto"


def _bare_descriptor() -> None:
    """``kubegateway.test.Bare`` (and ``Sneaky``) in the default pool, for reflection."""
    pool = descriptor_pool.Default()
    with contextlib.suppress(KeyError):
        pool.FindFileByName(_BARE_FILE)
        return
    value = ".google.protobuf.StringValue"
    proto = descriptor_pb2.FileDescriptorProto(
        name=_BARE_FILE,
        package="kubegateway.test",
        dependency=[wrappers_pb2.DESCRIPTOR.name],
        syntax="proto3",
    )
    for name in ("Bare", "Sneaky"):
        service = proto.service.add(name=name)
        service.method.add(name="Echo", input_type=value, output_type=value)
        service.method.add(
            name="Follow", input_type=value, output_type=value, server_streaming=True
        )
    pool.AddSerializedFile(proto.SerializeToString())


def _bare_handlers() -> dict[str, grpc.RpcMethodHandler]:
    async def echo(request: Any, context: grpc.aio.ServicerContext) -> Any:
        return request

    async def follow(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        yield request
        await asyncio.Event().wait()  # open until the caller leaves

    value = wrappers_pb2.StringValue
    return {
        "Echo": grpc.unary_unary_rpc_method_handler(
            echo, request_deserializer=value.FromString, response_serializer=value.SerializeToString
        ),
        "Follow": grpc.unary_stream_rpc_method_handler(
            follow,
            request_deserializer=value.FromString,
            response_serializer=value.SerializeToString,
        ),
    }


@contextlib.asynccontextmanager
async def _gateway(
    demo: DemoUpstream, more: Any = None
) -> AsyncIterator[tuple[grpc.aio.Server, grpc.aio.Channel]]:
    async with demo_cluster(demo.url) as cluster:
        server, port = await start_one(cluster, options=OPTIONS, more=more)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                yield server, channel
        finally:
            await server.stop(None)


# -- the tests --------------------------------------------------------------------------------


async def test_every_exposed_method_passes_every_defense(upstream: DemoUpstream) -> None:
    async with _gateway(upstream) as (_, channel):
        methods = await exposed(channel)
        # the table is the server's own: every service, and the streams among its methods
        assert {m.service for m in methods} == set(service_names())
        assert len(methods) >= 60
        # views (issue 29) pass the same admission as every other method
        assert "/kubegateway.v1.ResourceService/View" in {m.path for m in methods}
        assert {m.path for m in methods if m.server_streaming} >= {
            "/grpc.health.v1.Health/Watch",
            "/kubegateway.v1.PodService/Watch",
            "/kubegateway.v1.PodService/GetLog",
            "/kubegateway.v1.ResourceService/Watch",
            # live views (issue 29) stream: they count for the anonymous stream bound
            "/kubegateway.v1.ResourceService/WatchView",
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        }
        assert await missing_defenses(channel, methods) == []


async def test_a_service_registered_through_the_server_gets_every_defense(
    upstream: DemoUpstream,
) -> None:
    _bare_descriptor()

    def more(services: Services) -> None:
        services.add_methods("kubegateway.test.Bare", _bare_handlers())

    async with _gateway(upstream, more) as (_, channel):
        methods = await exposed(channel)
        bare = [m for m in methods if m.service == "kubegateway.test.Bare"]
        assert [m.path for m in bare] == [
            "/kubegateway.test.Bare/Echo",
            "/kubegateway.test.Bare/Follow",
        ]
        # served to a well-behaved caller
        echo = await call(
            channel, bare[0], wrappers_pb2.StringValue(value="hi").SerializeToString(), AUTH
        )
        assert echo.code is None
        assert await missing_defenses(channel, bare) == []


async def test_the_check_reports_every_method_of_a_server_without_the_admission() -> None:
    """A bare grpc.aio server (what a service outside the admission amounts to): every
    defense of every method is reported missing."""
    _bare_descriptor()
    server = grpc.aio.server(options=OPTIONS.channel_options())
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("kubegateway.test.Bare", _bare_handlers()),)
    )
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    reflection.enable_server_reflection(["kubegateway.test.Bare", reflection.SERVICE_NAME], server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            methods = await exposed(channel)
            problems = await missing_defenses(channel, methods)
    finally:
        await server.stop(None)
    for method in methods:
        reported = {
            p.split(": ", 1)[1].split(" (")[0] for p in problems if p.startswith(method.path + ":")
        }
        expected = {"impersonation", "undecodable message", "cluster name"}
        if method.server_streaming or method.client_streaming:
            expected.add("unauthenticated stream bound")
        assert reported >= expected, (method.path, problems)


async def test_a_service_registered_around_the_server_is_not_reachable(
    upstream: DemoUpstream,
) -> None:
    _bare_descriptor()
    async with _gateway(upstream) as (server, channel):
        # straight on the grpc server, not through Services: the admission does not know it
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("kubegateway.test.Sneaky", _bare_handlers()),)
        )
        sneaky = Method(
            "/kubegateway.test.Sneaky/Echo", "google.protobuf.StringValue", False, False
        )
        got = await call(channel, sneaky, b"", AUTH)
        assert got.code == grpc.StatusCode.UNIMPLEMENTED
        assert "kubegateway.test.Sneaky" not in {m.service for m in await exposed(channel)}


# -- one constructor ----------------------------------------------------------------------------

#: What builds a server or puts a handler on one: only gateway/grpc/server.py may.
_REGISTERING = ("add_generic_rpc_handlers", "add_registered_method_handlers")


def _registrations(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in _REGISTERING or (name.startswith("add_") and name.endswith("_to_server")):
            yield name
        elif (
            name == "server"
            and isinstance(func, ast.Attribute)
            and ast.unparse(func.value)
            in (
                "grpc.aio",
                "aio",
            )
        ):
            yield "grpc.aio.server"
        elif name == "enable_server_reflection":
            yield name


def test_only_the_server_module_builds_a_server_or_registers_a_service() -> None:
    root = Path(gateway.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        if "gen" in path.relative_to(root).parts:
            continue  # the generated stubs (add_*Servicer_to_server definitions)
        names = sorted(set(_registrations(ast.parse(path.read_text()))))
        if names:
            found[str(path.relative_to(root))] = names
    assert set(found) == {"grpc/server.py"}, found
    # and the check sees a registration where there is one
    sample = ast.parse("s = grpc.aio.server()\ns.add_generic_rpc_handlers(h)")
    assert sorted(_registrations(sample)) == ["add_generic_rpc_handlers", "grpc.aio.server"]
