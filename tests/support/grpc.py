"""Fixtures of the gRPC API tests: the gateway's gRPC server in process, against a demo upstream.

The server is the real one (``start_grpc``) with a real :class:`KubeAdapter` on the same
httpx client the application builds, talking over loopback to a seeded
:class:`~kube_gateway_demo.DemoUpstream`; the client is a real ``grpc.aio`` channel.  Test modules
import what they use from here (``from tests.support.grpc import ...``).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from gateway.core.catalog.catalog import CatalogHolder
from gateway.core.fleet.cluster import Cluster
from gateway.core.fleet.fleet import DEFAULT, Fleet
from gateway.core.fleet.visibility import Visibility
from gateway.core.model.registry import LEASE
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.watch.hub import WatchHub
from gateway.grpc.gen.kubegateway.v1 import (
    endpoints_pb2_grpc,
    events_pb2_grpc,
    images_pb2_grpc,
    leases_pb2_grpc,
    meta_pb2,
    pods_pb2,
    pods_pb2_grpc,
    resource_pb2_grpc,
)
from gateway.grpc.server import GrpcOptions, start_grpc
from kube_gateway_demo import DemoUpstream
from tests.scenarios.backend import sample

ADMIN = "admin-token"
VIEWER = "viewer-token"
ALICE = "alice-token"
NAMESPACE = "demo"
CLIENT_LIMIT = 64 * 1024 * 1024
_names = itertools.count()

STUBS: dict[str, Callable[[grpc.aio.Channel], Any]] = {
    "pods": pods_pb2_grpc.PodServiceStub,
    "events": events_pb2_grpc.EventServiceStub,
    "endpoints": endpoints_pb2_grpc.EndpointsServiceStub,
    "leases": leases_pb2_grpc.LeaseServiceStub,
    "images": images_pb2_grpc.ImageServiceStub,
}


def one_cluster(cluster: Cluster, name: str = DEFAULT) -> Fleet:
    """A fleet serving ``cluster`` alone, as ``name`` (the single-upstream gateway's)."""
    fleet = Fleet()
    fleet.add(name, cluster)
    return fleet


async def start_one(cluster: Cluster, port: int = 0, **kwargs: Any) -> tuple[grpc.aio.Server, int]:
    """``start_grpc`` on loopback serving ``cluster`` alone (:func:`one_cluster`), shown
    as the gateway shows one cluster (``kwargs``: ``start_grpc``'s)."""
    fleet = one_cluster(cluster)
    return await start_grpc(fleet, "127.0.0.1", port, visibility=Visibility(fleet), **kwargs)


def unique(prefix: str) -> str:
    """A DNS-1123 name no other test uses."""
    return f"{prefix}-g{next(_names)}"


def bearer(token: str | None) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying ``token`` (``None``: no authorization)."""
    return (("authorization", f"Bearer {token}"),) if token is not None else ()


async def pod_list_bytes(port: int, token: str, **request: Any) -> bytes:
    """``PodService/List``'s answer on loopback ``port`` as the bytes on the wire (not
    parsed: two answers compared byte for byte)."""
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


@dataclass
class GrpcGateway:
    """The running gRPC side of the gateway, a channel to it and the demo behind it."""

    demo: DemoUpstream
    adapter: KubeAdapter
    hub: WatchHub
    server: grpc.aio.Server
    port: int
    channel: grpc.aio.Channel
    _stubs: dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def resources(self) -> Any:
        """The client stub of the generic ``ResourceService``."""
        return resource_pb2_grpc.ResourceServiceStub(self.channel)

    def stub(self, plural: str) -> Any:
        """The generated client stub of a resource's service (``pods``, ``images``...)."""
        found = self._stubs.get(plural)
        if found is None:
            found = self._stubs[plural] = STUBS[plural](self.channel)
        return found


@contextlib.asynccontextmanager
async def demo_cluster(
    url: str, catalog: CatalogHolder | None = None, name: str = DEFAULT, token: str | None = None
) -> AsyncIterator[Cluster]:
    """A :class:`Cluster` over the upstream at ``url`` (its client and hub closed on exit);
    ``token``: the gateway's own credential there (none by default)."""
    http = build_http_client(
        UpstreamConfig(server=url, source="tests", token=token), gateway_identity=bool(token)
    )
    try:
        adapter = KubeAdapter(http)
        hub = WatchHub(adapter)
        try:
            holder = catalog if catalog is not None else CatalogHolder()
            yield Cluster(adapter, hub, holder, name=name, server=url)
        finally:
            await hub.aclose()
    finally:
        await http.aclose()


@contextlib.asynccontextmanager
async def grpc_channel(
    fleet: Fleet,
    *,
    visibility: Visibility | None = None,
    options: GrpcOptions | None = None,
    channel_options: Sequence[tuple[str, Any]] = (),
) -> AsyncIterator[tuple[grpc.aio.Server, int, grpc.aio.Channel]]:
    """The gateway's gRPC server over ``fleet`` on a free port, and a channel to it;
    ``visibility``: which clusters a caller is shown (default: the gateway's default over
    ``fleet``)."""
    shown = visibility if visibility is not None else Visibility(fleet)
    server, port = await start_grpc(fleet, "127.0.0.1", 0, visibility=shown, options=options)
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{port}",
        options=[
            ("grpc.max_receive_message_length", CLIENT_LIMIT),
            ("grpc.max_send_message_length", CLIENT_LIMIT),
            *channel_options,
        ],
    )
    try:
        yield server, port, channel
    finally:
        await channel.close()
        await server.stop(None)


@contextlib.asynccontextmanager
async def serve_grpc(
    demo: DemoUpstream,
    *,
    options: GrpcOptions | None = None,
    channel_options: Sequence[tuple[str, Any]] = (),
    server: str | None = None,
    catalog: CatalogHolder | None = None,
) -> AsyncIterator[GrpcGateway]:
    """Start the gateway's gRPC server on a free port against ``demo`` until the block exits.

    ``server`` is the upstream URL the gateway calls, when not ``demo.url`` itself (a
    :class:`~tests.support.tap.Tap` in front of it); ``catalog`` what the generic
    ``ResourceService`` serves (default: the seed resources).
    """
    async with (
        demo_cluster(server or demo.url, catalog) as cluster,
        grpc_channel(one_cluster(cluster), options=options, channel_options=channel_options) as (
            grpc_server,
            port,
            channel,
        ),
    ):
        yield GrpcGateway(demo, cluster.adapter, cluster.watches, grpc_server, port, channel)


@pytest.fixture
async def upstream() -> AsyncIterator[DemoUpstream]:
    """A seeded demo upstream (namespaces default, kube-system, demo)."""
    async with DemoUpstream() as demo:
        yield demo


@pytest.fixture
async def gw(upstream: DemoUpstream) -> AsyncIterator[GrpcGateway]:
    """The gateway's gRPC server against ``upstream``, and a channel to it."""
    async with serve_grpc(upstream) as gateway:
        yield gateway


def details(error: grpc.aio.AioRpcError) -> dict[str, Any]:
    """The rich details of a failed call, unpacked by type name."""
    status = rpc_status.from_call(error)
    assert status is not None, "the error carries no google.rpc.Status"
    out: dict[str, Any] = {"status": status}
    for detail in status.details:
        for cls in (
            error_details_pb2.ErrorInfo,
            error_details_pb2.BadRequest,
            error_details_pb2.RetryInfo,
            meta_pb2.Status,
        ):
            if detail.Is(cls.DESCRIPTOR):
                message = cls()
                detail.Unpack(message)
                out[cls.DESCRIPTOR.name] = message
    return out


def status_message(error: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The ``google.rpc.Status`` of a failed call."""
    status = rpc_status.from_call(error)
    assert status is not None
    return status


@dataclass
class Two:
    """Two demo upstreams served as clusters of one gRPC server, each holding a lease of
    the test the other lacks (so an answer from the wrong cluster cannot pass)."""

    demos: dict[str, DemoUpstream]
    fleet: Fleet
    #: Which clusters of :attr:`fleet` a caller is shown.
    visibility: Visibility
    channel: grpc.aio.Channel
    #: The lease only each cluster's upstream has.
    only: dict[str, str]
    #: The label of this test's leases (``t=<label>``) in both upstreams.
    label: str

    def labelled(self, name: str) -> dict[str, Any]:
        """A lease named ``name`` with this test's label."""
        body = sample("leases", name, NAMESPACE)
        body["metadata"]["labels"] = {"t": self.label}
        return body

    async def create(self, cluster: str, name: str) -> None:
        """A lease of this test in ``cluster``'s upstream (written there directly)."""
        await self.demos[cluster].store.create(LEASE, self.labelled(name), namespace=NAMESPACE)

    @property
    def leases(self) -> Any:
        return leases_pb2_grpc.LeaseServiceStub(self.channel)

    @property
    def pods(self) -> Any:
        return pods_pb2_grpc.PodServiceStub(self.channel)

    @property
    def resources(self) -> Any:
        return resource_pb2_grpc.ResourceServiceStub(self.channel)


async def serve_two(
    stack: contextlib.AsyncExitStack,
    demos: dict[str, DemoUpstream],
    *,
    default: str | None = None,
    own: Mapping[str, str] = {},
) -> Two:
    """``demos`` served by one gRPC server as clusters of their names (``default``: that
    one's upstream is also the cluster ``default``, listed first; ``own``: the gateway's
    credential on a cluster), each given its own lease; everything closes with ``stack``."""
    fleet = Fleet()
    # demo upstreams: one identity provider (the demo's tokens), so "*" may reach each
    visibility = Visibility(fleet, shared=("*",))
    clusters = {
        name: await stack.enter_async_context(
            demo_cluster(demo.url, name=name, token=own.get(name))
        )
        for name, demo in demos.items()
    }
    if default is not None:
        fleet.add(DEFAULT, clusters[default])
    for name, cluster in clusters.items():
        fleet.add(name, cluster)
    _, _, channel = await stack.enter_async_context(grpc_channel(fleet, visibility=visibility))
    two = Two(
        demos, fleet, visibility, channel, {n: unique(f"only-{n}") for n in demos}, unique("t")
    )
    for name in demos:
        await two.create(name, two.only[name])
    return two
