"""Which cluster serves a call: the ``x-kube-cluster`` metadata, looked up on the fleet per call.

A gateway serves one or more clusters (:class:`~gateway.core.fleet.fleet.Fleet`); every resource
service (the typed ones and the generic ``ResourceService``) serves each of them.  The
:class:`Router` keeps, per served cluster, the method handlers of that cluster's servicers
(its adapter, watch hub and catalog), built once when the cluster joins the fleet; grpc asks
the router for the handler of each call (:meth:`Router.service`), which reads the
``x-kube-cluster`` metadata (missing or empty: ``default``) and returns that cluster's
handler: one scan of the call's metadata and two dict lookups, however many clusters are
served, and nothing stacked on the call or its messages.

The router follows the fleet (:meth:`~gateway.core.fleet.fleet.Fleet.listen`): a cluster added
while the server runs is served from its next call; a removed one's open streams (``Watch``,
followed ``GetLog``) end with :class:`~gateway.core.errors.ClusterRemoved` (``NOT_FOUND``,
saying the cluster was removed) and new calls naming it are refused with ``NOT_FOUND``
naming the clusters the caller may see (:mod:`gateway.core.fleet.visibility`), as any unknown
name is.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from gateway.core import ANONYMOUS, DEFAULT, Cluster, Credential, Fleet, Visibility, errors
from gateway.grpc.admission import CLUSTER_METADATA
from gateway.grpc.calls import credential_of
from gateway.grpc.handling import OpenStreams, ServicerBase
from gateway.grpc.status import to_status

__all__ = ["CLUSTER_METADATA", "Router", "cluster_name"]

log = logging.getLogger(__name__)

#: What serves one cluster: its servicers, each over the cluster's adapter, hub and catalog.
Servicers = Callable[[Cluster, OpenStreams], Iterable[ServicerBase]]


def cluster_name(metadata: Iterable[tuple[str, Any]] | None) -> str:
    """The cluster a call names (grpc lowercases metadata keys; missing or empty:
    ``default``).  What is not a cluster name never gets here: the admission refuses it
    (:func:`~gateway.grpc.admission.cluster_name_refusal`)."""
    for key, value in metadata or ():
        if key == CLUSTER_METADATA:
            name = value.decode() if isinstance(value, bytes) else value
            return name or DEFAULT
    return DEFAULT


@dataclass(slots=True)
class _Served:
    """One served cluster's method handlers, by full method path, and its open streams."""

    handlers: dict[str, grpc.RpcMethodHandler]
    opened: OpenStreams


class Router(grpc.GenericRpcHandler):  # type: ignore[misc]
    """The resource services of every cluster of ``fleet``, chosen per call.

    Args:
        fleet: the served clusters (followed while the router lives).
        visibility: which of them a caller may see (what a refusal names).
        servicers: builds one cluster's servicers.
        methods: every routed method, ``(full path, server streaming)``: a call naming a
            cluster that is not served is refused on these with ``NOT_FOUND``.
    """

    def __init__(
        self,
        fleet: Fleet,
        visibility: Visibility,
        servicers: Servicers,
        methods: Sequence[tuple[str, bool]],
    ) -> None:
        self._fleet = fleet
        self._visibility = visibility
        self._servicers = servicers
        self._served: dict[str, _Served] = {}
        self._refusals: Mapping[str, grpc.RpcMethodHandler] = {
            path: _refusal(self._refuse, streaming) for path, streaming in methods
        }
        for name, cluster in fleet:
            self._served[name] = self._serve(cluster)
        self._stop = fleet.listen(self._changed)

    def close(self) -> None:
        """Stop following the fleet (the server stopped)."""
        self._stop()

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        """The handler of a call: its method on the cluster its metadata names."""
        served = self._served.get(cluster_name(handler_call_details.invocation_metadata))
        if served is None:
            return self._refusals.get(handler_call_details.method)
        return served.handlers.get(handler_call_details.method)

    def _serve(self, cluster: Cluster) -> _Served:
        opened = OpenStreams()
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for servicer in self._servicers(cluster, opened):
            for method, handler in servicer.method_handlers().items():
                handlers[f"/{servicer.full_name}/{method}"] = handler
        return _Served(handlers, opened)

    def _changed(self, name: str, cluster: Cluster | None) -> None:
        old = self._served.pop(name, None)
        if cluster is not None:
            self._served[name] = self._serve(cluster)
        if old is None:
            return
        if cluster is None:
            log.info(
                "gRPC: cluster %s removed; ending its %d open stream(s)", name, len(old.opened)
            )
            old.opened.end(errors.ClusterRemoved(name))
        else:
            old.opened.end(
                errors.Unavailable(f'cluster "{name}" was reconfigured: call again to continue')
            )

    async def _refuse(self, metadata: Iterable[tuple[str, Any]] | None) -> errors.GatewayError:
        """The refusal of a call naming a cluster that is not served, naming the clusters
        the caller may see."""
        name = cluster_name(metadata)
        if name not in self._fleet.names():
            return await self._visibility.unknown(name, _caller(metadata))
        # served by the fleet but not (yet) routed: cannot happen, listeners are synchronous
        return errors.Unavailable("the cluster is not served yet")


def _caller(metadata: Iterable[tuple[str, Any]] | None) -> Credential:
    """The caller of a refused call, only to word its refusal (malformed: told of none)."""
    try:
        return credential_of(metadata)
    except errors.GatewayError:
        return ANONYMOUS


def _refusal(
    refuse: Callable[[Any], Awaitable[errors.GatewayError]], streaming: bool
) -> grpc.RpcMethodHandler:
    """A handler refusing every call with the error ``refuse`` makes of its metadata (one
    coroutine serves both kinds: grpc awaits a streaming handler that is a coroutine)."""

    async def refused(request: Any, context: grpc.aio.ServicerContext) -> None:
        error = await refuse(context.invocation_metadata())
        await context.abort_with_status(to_status(error))

    if streaming:
        return grpc.unary_stream_rpc_method_handler(refused)
    return grpc.unary_unary_rpc_method_handler(refused)
