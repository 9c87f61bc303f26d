"""``/clusters/{name}/graphql``: every served cluster's GraphQL endpoints, by name.

``/graphql`` (and ``/apis/{group}/graphql``) serve the default cluster; each cluster of the
fleet (:class:`~gateway.core.fleet.fleet.Fleet`) gets endpoints of its own under
``/clusters/{name}/``, with its own schemas (a :class:`~gateway.graphql.endpoints.live.LiveSchema`
on
its catalog) and subscribers, made when the fleet adds the cluster and closed when it
removes it.  ``/clusters/default/graphql`` is ``/graphql`` itself.

A name the fleet does not serve answers 404 with the NOT_FOUND error naming the clusters the
caller may see (:mod:`gateway.core.fleet.visibility`; the caller is the request's
``Authorization`` header, so a WebSocket upgrade without one is told of none).  When a
cluster is removed its subscribers get a final ``CLUSTER_REMOVED`` error (then complete);
when it is replaced (its kubeconfig changed) they get ``UNAVAILABLE`` and subscribe again,
to the new one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send

from gateway.core import (
    ANONYMOUS,
    DEFAULT,
    Cluster,
    Credential,
    credential_of_authorization,
    errors,
)
from gateway.graphql.endpoints.fleet import FleetEndpoint
from gateway.graphql.endpoints.live import GROUP_IDLE_SECONDS, GroupEndpoint, LiveSchema, refuse
from gateway.graphql.endpoints.server import GraphQLApp, graphql_routes
from gateway.graphql.errors import format_exception

__all__ = ["ClusterEndpoints", "cluster_routes"]

log = logging.getLogger("gateway.graphql")


@dataclass(slots=True)
class _Served:
    """One cluster's endpoints: ``graphql`` and its group endpoints."""

    graphql: GraphQLApp
    groups: GroupEndpoint
    live: LiveSchema | None

    def end(self, error: Exception) -> None:
        ending = functools.partial(_always, error)
        self.graphql.subscriptions.end_where(ending)
        if self.live is not None:
            for entry in self.live.groups.values():
                entry.app.subscriptions.end_where(ending)

    def drain(self) -> None:
        self.graphql.subscriptions.drain()
        if self.live is not None:
            self.live.drain()

    async def aclose(self) -> None:
        await self.graphql.subscriptions.aclose()
        if self.live is not None:
            await self.live.aclose()


def _always(error: Exception, prepared: object) -> Exception:
    return error


class ClusterEndpoints:
    """The GraphQL endpoints of every cluster of a fleet (see the module docstring).

    Made once the fleet serves its default cluster: that one is served by ``root`` and
    ``groups``; every other cluster gets endpoints of its own, each made with its cluster,
    as the fleet adds it (those it holds already at once).

    Args:
        root: ``/graphql``, the default cluster's endpoint; the others copy its admission,
            fleet and visibility.
        groups: ``/apis/{group}/graphql``, the default cluster's group endpoints.
        live: what keeps the default cluster's schemas (``None``: discovery is off).
    """

    def __init__(
        self,
        root: GraphQLApp,
        groups: GroupEndpoint,
        live: LiveSchema | None,
        *,
        group_idle_seconds: float = GROUP_IDLE_SECONDS,
    ) -> None:
        self.root = root
        #: How long each cluster's unused group schemas are kept.
        self.group_idle_seconds = group_idle_seconds
        self.fleet = root.fleet
        self.visibility = root.visibility
        self.served: dict[str, _Served] = {DEFAULT: _Served(root, groups, live)}
        #: ``/fleet/graphql``: every cluster at once.
        self.everywhere = FleetEndpoint(root)
        self._closing: set[asyncio.Task[None]] = set()
        for name, cluster in self.fleet:
            self._heard(name, cluster)
        self._stop_listening = self.fleet.listen(self._heard)

    def _heard(self, name: str, cluster: Cluster | None) -> None:
        if name == DEFAULT:
            return  # the root's: made by the composition root, never replaced
        old = self.served.pop(name, None)
        if cluster is not None:
            self.served[name] = self._serve(cluster)
        if old is not None:
            if cluster is None:
                old.end(errors.ClusterRemoved(name))
            else:
                old.end(
                    errors.Unavailable(
                        f'cluster "{name}" was reconfigured: subscribe again to follow it'
                    )
                )
            task = asyncio.get_running_loop().create_task(old.aclose(), name=f"close-{name}")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _serve(self, cluster: Cluster) -> _Served:
        app = self.root.sibling(cluster=cluster)
        live = None
        if cluster.reloader is not None:
            live = LiveSchema(app, cluster.catalog, idle_seconds=self.group_idle_seconds)
            live.start(rebuild=True)
        return _Served(app, GroupEndpoint(app, live), live)

    def drain(self) -> None:
        """End every subscription of the clusters other than the default (whose endpoints
        the composition root drains itself) and the fleet endpoint's."""
        self.everywhere.subscriptions.drain()
        for name, served in list(self.served.items()):
            if name != DEFAULT:
                served.drain()

    async def aclose(self) -> None:
        self._stop_listening()
        self.everywhere.close()
        await self.everywhere.subscriptions.aclose()
        for name, served in list(self.served.items()):
            if name != DEFAULT:
                await served.aclose()
        self.served.clear()
        await asyncio.gather(*self._closing, return_exceptions=True)

    async def _find(self, scope: Scope) -> _Served:
        name = scope["path_params"]["name"]
        served = self.served.get(name)
        if served is None:
            if name not in self.fleet.names():
                raise await self.visibility.unknown(name, _caller(scope))
            raise errors.NotFound(f'cluster "{name}" is not served yet')  # being added
        return served

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            served = await self._find(scope)
        except errors.NotFound as exc:
            await refuse(scope, receive, send, exc, 404)
            return
        if "group" in scope["path_params"]:
            await served.groups(scope, receive, send)
        else:
            await served.graphql(scope, receive, send)

    async def graphiql_settings(self, request: Request) -> Response:
        try:
            served = await self._find(request.scope)
        except errors.NotFound as exc:
            return await _refused(request, exc)
        return await served.graphql.graphiql_settings(request)


def _caller(scope: Scope) -> Credential:
    """The caller of a request naming a cluster, by its ``Authorization`` header: only to
    word the refusal of a name that is not served (a malformed header is told of no
    cluster; the endpoint it would reach refuses it properly)."""
    try:
        return credential_of_authorization(Headers(scope=scope).get("authorization"))
    except errors.GatewayError:
        return ANONYMOUS


async def _refused(request: Request, exc: errors.NotFound) -> Response:
    return JSONResponse({"errors": [format_exception(exc)]}, status_code=404)


def cluster_routes(
    endpoints: ClusterEndpoints, prefix: str = "/clusters/{name}"
) -> list[BaseRoute]:
    """The routes of every cluster's endpoints (GraphiQL's assets are ``/graphql``'s) and
    of the fleet endpoint."""
    routes: list[BaseRoute] = graphql_routes(endpoints.everywhere, "/fleet/graphql")
    for path in (f"{prefix}/graphql", f"{prefix}/apis/{{group}}/graphql"):
        routes += [
            Route(path, endpoints, methods=["GET", "POST"]),
            WebSocketRoute(path, endpoints),
            Route(f"{path}/graphiql.json", endpoints.graphiql_settings, methods=["GET"]),
        ]
    return routes
