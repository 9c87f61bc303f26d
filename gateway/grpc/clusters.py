"""``kubegateway.v1.ClusterService``: the clusters this gateway serves, for a client to choose from.

Its contract is the hand-written ``protos/kubegateway/v1/cluster.proto``.  ``ListClusters``
answers, for every cluster of the :class:`~gateway.core.fleet.fleet.Fleet` the caller may see (by
default those that authenticate its credential, :mod:`gateway.core.fleet.visibility`; the default
first): the name callers put in ``x-kube-cluster``, the API server's URL, its version, its
readiness and how many resources the gateway serves from it.  A caller whose
``authorization`` is malformed, or who sends ``impersonate-*`` metadata, is refused as on
every other service.  Readiness and version are asked of every
cluster at once, each bounded, so one slow or unreachable cluster is listed not ready
without delaying the others; they are asked with the gateway's own credential (``/readyz``
and ``/version`` are public in Kubernetes), never the caller's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

import grpc

from gateway.core import Cluster, Visibility, errors
from gateway.grpc.calls import credential_of
from gateway.grpc.gen.kubegateway.v1 import cluster_pb2
from gateway.grpc.status import to_status

__all__ = ["SERVICE", "ClusterServicer"]

log = logging.getLogger(__name__)

#: The service's descriptor (its full name: ``kubegateway.v1.ClusterService``).
SERVICE: Final = cluster_pb2.DESCRIPTOR.services_by_name["ClusterService"]


class ClusterServicer:
    """Lists the clusters a caller may see (``visibility``'s, over the fleet: read at each
    call, added and removed ones show)."""

    def __init__(self, visibility: Visibility) -> None:
        self.visibility = visibility

    def method_handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        """The handler of every method of the service, by method name (registered by the
        server, whose admission parses each request and refuses what does not parse)."""
        return {
            "ListClusters": grpc.unary_unary_rpc_method_handler(
                self.list_clusters,
                request_deserializer=cluster_pb2.ListClustersRequest.FromString,
                response_serializer=cluster_pb2.ListClustersResponse.SerializeToString,
            )
        }

    async def list_clusters(
        self, request: cluster_pb2.ListClustersRequest, context: grpc.aio.ServicerContext
    ) -> cluster_pb2.ListClustersResponse:
        try:
            credential = credential_of(context.invocation_metadata())
            # RESOURCE_EXHAUSTED when a caller not known yet finds the reviews' budget spent
            served = await self.visibility.visible(credential)
        except errors.GatewayError as exc:
            await context.abort_with_status(to_status(exc))
            raise  # not reached: abort_with_status raises
        described = await asyncio.gather(*(_describe(name, c) for name, c in served))
        return cluster_pb2.ListClustersResponse(clusters=described)


async def _describe(name: str, cluster: Cluster) -> cluster_pb2.ServedCluster:
    ready, version = await asyncio.gather(cluster.readiness.ready(), cluster.version.get())
    return cluster_pb2.ServedCluster(
        name=name,
        server=cluster.server,
        version=version or "",
        ready=ready,
        served_resources=len(cluster.catalog.current.registry.records),
    )
