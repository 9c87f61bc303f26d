"""The grpc.aio server: one service per seed resource, the generic ResourceService, health and
reflection, every one behind the admission.

:func:`start_grpc` is the one place a ``grpc.aio.Server`` is built (a test checks no other
module builds one): with :class:`~gateway.grpc.admission.Admission` as its interceptor,
which grpc runs for every call to every handler of the server, and every service registered
through :class:`Services`, which names it to the admission and to reflection.  A call to a
service registered any other way is ``UNIMPLEMENTED``, so what reflection lists is exactly
what is served, and all of it is admitted the same way.

Started by the application lifespan with the :class:`~gateway.core.fleet.fleet.Fleet` it built
(the same clusters GraphQL serves: same process, same core) on its own port; the
``x-kube-cluster`` metadata picks a call's cluster (:mod:`gateway.grpc.routing`).
Keepalive pings keep long watches alive through idle proxies and detect dead peers;
responses are gzip-compressed for clients that accept it; the message size limit is
configurable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from gateway.core import Cluster, Drain, Fleet, FleetStreams, Visibility
from gateway.grpc import clusters
from gateway.grpc.admission import Admission, AnonymousStreams
from gateway.grpc.clusters import ClusterServicer
from gateway.grpc.codec import codec
from gateway.grpc.contract import Contract, contract
from gateway.grpc.handling import OpenStreams, ServicerBase
from gateway.grpc.messages import file_descriptors
from gateway.grpc.resource_service import SERVICE, ResourceServiceServicer
from gateway.grpc.routing import Router
from gateway.grpc.servicer import ResourceServicer

__all__ = ["GrpcOptions", "Services", "service_names", "start_grpc"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GrpcOptions:
    """Server settings.

    Attributes:
        max_message_bytes: largest response message (a list of 5,000 pods is about 20 MB;
            callers page with ``limit`` beyond this).
        max_request_bytes: largest request message (an object to create or a patch);
            larger ones are refused with ``RESOURCE_EXHAUSTED`` before they are read whole.
        max_concurrent_rpcs: RPCs served at once (streams included); past it grpc refuses
            new ones at once with ``RESOURCE_EXHAUSTED``.
        gzip: compress responses for clients that accept gzip.
        keepalive_seconds: ping an idle connection this often.
        keepalive_timeout_seconds: drop a connection whose ping is not answered in time.
        min_client_ping_seconds: the most often a client may ping without data.
        anonymous_streams_per_peer: unauthenticated streams (no ``authorization``
            metadata; every health and reflection stream) one peer address may hold open.
        anonymous_streams: unauthenticated streams all peers may hold open together; at
            most half of ``max_concurrent_rpcs`` whatever this says
            (:attr:`anonymous_streams_total`), so they never take every place.
    """

    max_message_bytes: int = 64 * 1024 * 1024
    max_request_bytes: int = 4 * 1024 * 1024
    max_concurrent_rpcs: int = 4096
    gzip: bool = True
    keepalive_seconds: float = 30.0
    keepalive_timeout_seconds: float = 10.0
    min_client_ping_seconds: float = 10.0
    anonymous_streams_per_peer: int = 16
    anonymous_streams: int = 256

    @property
    def anonymous_streams_total(self) -> int:
        """The bound of unauthenticated streams in all: ``anonymous_streams``, at most half
        of ``max_concurrent_rpcs`` (and at least 1)."""
        return max(1, min(self.anonymous_streams, self.max_concurrent_rpcs // 2))

    def channel_options(self) -> list[tuple[str, int]]:
        """The grpc core channel arguments of these settings."""
        return [
            # A compression *level*, not an algorithm: grpc core then picks, per call, an
            # algorithm the client advertised in grpc-accept-encoding (gzip for grpc-python,
            # none for a Go client without the gzip codec), instead of sending gzip to a
            # client that cannot read it.
            ("grpc.default_compression_level", 2 if self.gzip else 0),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_request_bytes),
            ("grpc.keepalive_time_ms", int(self.keepalive_seconds * 1000)),
            ("grpc.keepalive_timeout_ms", int(self.keepalive_timeout_seconds * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            # grpc core sets SO_REUSEPORT by default: a second process started on the same
            # port would listen beside the first and get half its calls.  A port in use is
            # an error at start, as for the HTTP listener.
            ("grpc.so_reuseport", 0),
            ("grpc.http2.max_pings_without_data", 0),
            (
                "grpc.http2.min_ping_interval_without_data_ms",
                int(self.min_client_ping_seconds * 1000),
            ),
        ]


def service_names(c: Contract | None = None) -> list[str]:
    """Every service the server answers: the resource services (the typed ones, then the
    generic ``ResourceService``), the ``ClusterService``, health and reflection."""
    resources = [s.full_name for s in (c or contract()).services]
    return [
        *resources,
        SERVICE.full_name,
        clusters.SERVICE.full_name,
        health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        reflection.SERVICE_NAME,
    ]


def routed_methods(c: Contract) -> list[tuple[str, bool]]:
    """Every method served per cluster, ``(full path, server streaming)``."""
    typed = [(f"/{s.full_name}/{r.name}", r.streaming) for s in c.services for r in s.rpcs]
    generic = [(f"/{SERVICE.full_name}/{m.name}", m.server_streaming) for m in SERVICE.methods]
    return [*typed, *generic]


class Services:
    """What the server serves: every service is registered here, by its full name.

    The names are the admission's (a call to any other service is ``UNIMPLEMENTED``) and
    reflection's.  It also takes what a generated ``add_*Servicer_to_server`` gives a
    server (``add_registered_method_handlers`` names the service).
    """

    def __init__(self, server: grpc.aio.Server, names: set[str]) -> None:
        self._server = server
        self._names = names

    @property
    def names(self) -> list[str]:
        """The registered services, sorted."""
        return sorted(self._names)

    def add(self, names: Iterable[str], handler: grpc.GenericRpcHandler) -> None:
        """Serve the services ``names`` with ``handler`` (a router may serve several)."""
        self._names.update(names)
        self._server.add_generic_rpc_handlers((handler,))

    def add_methods(self, name: str, handlers: Mapping[str, grpc.RpcMethodHandler]) -> None:
        """Serve the service ``name`` with its method handlers, by method name."""
        self.add_registered_method_handlers(name, handlers)

    def add_registered_method_handlers(
        self, name: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        self._names.add(name)
        self._server.add_registered_method_handlers(name, dict(handlers))

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        """What generated code adds beside its registered handlers (served only under the
        names registered with them)."""
        self._server.add_generic_rpc_handlers(tuple(handlers))


async def start_grpc(
    fleet: Fleet,
    host: str,
    port: int,
    *,
    visibility: Visibility,
    options: GrpcOptions | None = None,
    credentials: grpc.ServerCredentials | None = None,
    drain: Drain | None = None,
    health_servicer: health.aio.HealthServicer | None = None,
    more: Callable[[Services], None] | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Start the gRPC server on ``host:port`` (0 picks a free port).

    Args:
        fleet: the clusters the services serve (owned by the caller, followed while the
            server runs): per call, the one the ``x-kube-cluster`` metadata names (missing:
            ``default``): its adapter, its shared watches (``Watch`` calls join them) and its
            catalog, which the generic ``ResourceService`` reads once per call.
        host: the address to listen on.
        port: the port, or 0 for any free one.
        visibility: which clusters of ``fleet`` a caller may see (built over it by the
            composition root): ``ListClusters``, refusals of names not served, fleet calls.
        options: server settings (defaults: :class:`GrpcOptions`).
        credentials: TLS (``None``: plaintext).
        drain: the application's drain: while draining, health says ``NOT_SERVING`` and
            new calls are refused with ``UNAVAILABLE`` (see
            :class:`~gateway.grpc.admission.Admission`).
        health_servicer: the health service, when the caller decides when the server is
            serving (:func:`follow_readiness`); by default it serves from the start.
        more: registers more services (behind the same admission, listed by reflection).

    Returns:
        The running server (the caller, the lifespan, stops it) and the bound port.
    """
    opts = options or GrpcOptions()
    c = contract()
    conversions = codec(c)
    file_descriptors(c)  # import the stubs: reflection answers from the descriptor pool
    served: set[str] = set()
    streams = AnonymousStreams(opts.anonymous_streams_per_peer, opts.anonymous_streams_total)
    server = grpc.aio.server(
        options=opts.channel_options(),
        maximum_concurrent_rpcs=opts.max_concurrent_rpcs,
        # Every defense of every call, in one interceptor: a streamed message passes
        # through no wrapper of its own.
        interceptors=(Admission(served, streams, drain),),
    )
    services = Services(server, served)

    # Fleet calls (ResourceService List/Watch with clusters) reach every cluster.
    fleet_streams = FleetStreams(fleet, visibility)

    def servicers(cluster: Cluster, opened: OpenStreams) -> list[ServicerBase]:
        a, hub = cluster.adapter, cluster.watches
        return [
            *(
                ResourceServicer(a, hub, svc, conversions, drain, opened=opened)
                for svc in c.services
            ),
            ResourceServiceServicer(
                a,
                hub,
                cluster.catalog,
                conversions,
                drain,
                opened=opened,
                fleet=fleet_streams,
                views=cluster.views,
            ),
        ]

    router = Router(fleet, visibility, servicers, routed_methods(c))
    services.add([*(s.full_name for s in c.services), SERVICE.full_name], router)
    services.add_methods(clusters.SERVICE.full_name, ClusterServicer(visibility).method_handlers())
    own_health = health_servicer is None
    if health_servicer is None:
        health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, services)
    if more is not None:
        more(services)
    names = [*services.names, reflection.SERVICE_NAME]
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.aio.ReflectionServicer(names), services
    )
    address = f"{host}:{port}"
    try:
        if credentials is not None:
            bound = server.add_secure_port(address, credentials)
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError:  # grpc's way of saying the bind failed
        bound = 0
    if bound == 0:
        router.close()
        fleet_streams.close()
        raise OSError(
            f"cannot bind the gRPC port {host}:{port}: in use by another process, or not an "
            "address of this host (--grpc-port, --host)"
        )
    await server.start()
    if own_health:
        await set_health(health_servicer, serving=True)
    if drain is not None:
        # Every service NOT_SERVING at once, and it stays so.
        drain.on_drain(health_servicer.enter_graceful_shutdown)
    log.info(
        "gRPC listening on %s:%d (%d typed resource services, %s and %s; clusters: %s)",
        host,
        bound,
        len(c.services),
        SERVICE.full_name,
        clusters.SERVICE.full_name,
        ", ".join(fleet.names()) or "none yet",
    )
    return server, bound


async def set_health(servicer: health.aio.HealthServicer, serving: bool) -> None:
    """Every service (and ``""``, the server) ``SERVING`` or ``NOT_SERVING``."""
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ("", *service_names(contract())):
        await servicer.set(name, status)
