"""The ``/graphql`` endpoint: one ASGI app for HTTP, SSE and both WebSocket protocols."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import strawberry
from graphql import FieldNode, GraphQLSchema
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.core import (
    Cluster,
    Credential,
    Drain,
    Fleet,
    Unauthorized,
    UnknownResource,
    Visibility,
)
from gateway.graphql.engine.admission import Admission
from gateway.graphql.engine.execution import Prepared
from gateway.graphql.engine.limits import Limits
from gateway.graphql.engine.persisted import Persisted
from gateway.graphql.engine.subscriptions import Subscriptions
from gateway.graphql.resolvers.context import Context
from gateway.graphql.schemas.seed import gateway_schema
from gateway.graphql.transport import http, websocket
from gateway.graphql.transport.graphiql import NOSNIFF, STATIC_DIR, settings_response

#: An operation context's type.
C = TypeVar("C", bound=Context)


class _WithHeaders:
    """Adds fixed headers to every HTTP response of an ASGI app."""

    def __init__(self, app: ASGIApp, headers: Mapping[str, str]) -> None:
        self.app = app
        self.raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.raw]}
            await send(message)

        await self.app(scope, receive, sending)


class GraphQLApp:
    """Serves GraphQL at one path for one cluster of a fleet.

    Every endpoint is made with what it serves, once that exists: ``/graphql``'s by the
    lifespan once it built the default cluster and the fleet (its routes are mounted then:
    :func:`~gateway.app.create_app`), the others from it (:meth:`sibling`).

    Args:
        schema: the schema (the gateway's by default).
        admission: the gateway's admission rules (:mod:`gateway.graphql.engine.admission`):
            required, so no endpoint exists without them; endpoints made from this one
            (:meth:`sibling`) share it.
        cluster: the cluster its operations run against (its adapter and watch hub).
        fleet: every cluster the gateway serves, for the ``clusters`` query.
        visibility: which of ``fleet`` a caller may see (built over it by the composition
            root): the ``clusters`` query, and whether a caller may read the schema.

    Attributes:
        engine: parses, validates and executes operations.
        subscriptions: the endpoint's subscribers, by shared execution.
    """

    def __init__(
        self,
        schema: strawberry.Schema | GraphQLSchema | None = None,
        *,
        admission: Admission,
        cluster: Cluster,
        fleet: Fleet,
        visibility: Visibility,
    ) -> None:
        if not isinstance(admission, Admission):
            raise TypeError("a GraphQL endpoint needs the gateway's Admission")
        self.admission = admission
        self.cluster = cluster
        #: Every served cluster (the ``clusters`` query's).
        self.fleet = fleet
        #: Which clusters a caller may see.
        self.visibility = visibility
        self.engine = admission.engine(schema or gateway_schema())
        self.subscriptions = Subscriptions(self.engine)

    @property
    def limits(self) -> Limits:
        return self.admission.limits

    @property
    def drain(self) -> Drain:
        return self.admission.drain

    @property
    def allowed_origins(self) -> frozenset[str]:
        """Foreign browser origins whose pages may open WebSockets (and CORS requests)."""
        return self.admission.allowed_origins

    @property
    def persisted(self) -> Persisted:
        """Which documents it serves (trusted documents, APQ): the gateway's one."""
        return self.admission.persisted

    def sibling(
        self,
        schema: strawberry.Schema | GraphQLSchema | None = None,
        *,
        cluster: Cluster | None = None,
    ) -> GraphQLApp:
        """Another endpoint with this one's admission, fleet and visibility: a group's (on
        this one's cluster), another cluster's (on ``cluster``)."""
        return GraphQLApp(
            schema,
            admission=self.admission,
            cluster=self.cluster if cluster is None else cluster,
            fleet=self.fleet,
            visibility=self.visibility,
        )

    def use_schema(self, schema: strawberry.Schema | GraphQLSchema) -> int:
        """Serve ``schema`` from now on.

        Operations already prepared finish on the schema they were validated against; a
        subscription whose root field the new schema lacks (its resource is no longer served)
        ends with a NotFound error saying so.  Returns how many shared executions ended.
        """
        engine = self.admission.engine(schema)
        self.engine = engine
        self.subscriptions.engine = engine
        subscription = engine.graphql_schema.subscription_type
        served = set(subscription.fields) if subscription is not None else set()

        def ended(prepared: Prepared) -> Exception | None:
            for selection in prepared.operation.selection_set.selections:
                if isinstance(selection, FieldNode) and selection.name.value not in served:
                    if selection.name.value.startswith("__"):
                        continue
                    return UnknownResource(
                        f"{selection.name.value} is no longer served: its resource was removed "
                        "from the cluster (or from the gateway's --resources)"
                    )
            return None

        return self.subscriptions.end_where(ended)

    async def caller(self, prepared: Prepared, credential: Credential) -> Credential:
        """The credential an admitted operation runs with: in impersonate mode the user the
        home cluster says the token is; and an operation that reads the schema runs only
        for a caller the endpoint's cluster authenticates (Kubernetes serves discovery to
        authenticated users only: a schema names every kind and CRD a cluster serves).

        Raises:
            Unauthorized: the operation reads the schema and the cluster does not
                authenticate the caller.
        """
        cluster = self.cluster
        credential = await cluster.adapter.identity.identified(credential)
        if prepared.reads_schema and not await self.visibility.authenticates(
            cluster.name, credential
        ):
            raise Unauthorized(
                "reading the schema (__schema, __type) needs a credential the cluster "
                "authenticates: send Authorization: Bearer <token>"
            )
        return credential

    def context(self, credential: Credential) -> Context:
        """A fresh operation context for a caller on the endpoint's cluster."""
        return self.made_context(Context, credential)

    def made_context(self, kind: type[C], credential: Credential, **more: Any) -> C:
        """An operation context of ``kind`` on the endpoint's cluster, with ``more``."""
        cluster = self.cluster
        return kind(
            cluster.adapter,
            credential,
            cluster.watches,
            clusters=[c for _, c in self.fleet],
            visibility=self.visibility,
            views=cluster.views,
            **more,
        )

    async def graphiql_settings(self, request: Request) -> Response:
        """``GET <endpoint>/graphiql.json``: GraphiQL's start-up settings for the
        endpoint's cluster (its demo tokens only for the gateway's own demo upstream)."""
        return settings_response(demo=self.cluster.demo, group=request.path_params.get("group"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await websocket.serve(self, scope, receive, send)
            return
        # A POST (every query and mutation of a GraphQL client) is read straight off the
        # scope; GET (GraphiQL, queries in the URL, EventSource) through Starlette's Request.
        request = (
            http.Posted(scope, receive) if scope["method"] == "POST" else Request(scope, receive)
        )
        response = await http.handle(self, request)
        await response(scope, receive, send)


def graphql_routes(app: GraphQLApp, path: str = "/graphql") -> list[BaseRoute]:
    """The routes of the GraphQL endpoint, GraphiQL's assets and settings included."""
    return [
        Route(path, app, methods=["GET", "POST"]),
        WebSocketRoute(path, app),
        Route(f"{path}/graphiql.json", app.graphiql_settings, methods=["GET"]),
        Mount(
            f"{path}/static",
            _WithHeaders(StaticFiles(directory=STATIC_DIR), NOSNIFF),
            name="graphql-static",
        ),
    ]
