"""The grpc.aio server: health and reflection now; the resource services join them."""

from __future__ import annotations

import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from gateway.core.adapter import KubeAdapter

log = logging.getLogger(__name__)


async def start_grpc(adapter: KubeAdapter, host: str, port: int) -> tuple[grpc.aio.Server, int]:
    """Start the gRPC server on ``host:port`` (0 picks a free port).

    Returns:
        The running server (the caller, the lifespan, stops it) and the bound port.
    """
    server = grpc.aio.server(
        options=[
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.keepalive_permit_without_calls", 1),
        ],
        compression=grpc.Compression.NoCompression,
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    services = [health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME]
    reflection.enable_server_reflection(services, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind the gRPC port {host}:{port}")
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    log.info("gRPC listening on %s:%d", host, bound)
    return server, bound
