"""The ``/graphql`` endpoint: one ASGI app for HTTP, SSE and both WebSocket protocols."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import strawberry
from starlette.requests import Request
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from gateway.core.adapter import Credential
from gateway.graphql import http, websocket
from gateway.graphql.context import Context
from gateway.graphql.execution import Engine
from gateway.graphql.fanout import Hub
from gateway.graphql.graphiql import STATIC_DIR
from gateway.graphql.limits import Limits
from gateway.graphql.schema import gateway_schema


class GraphQLApp:
    """Serves GraphQL at one path; the adapter comes from ``app.state.runtime.adapter``.

    Args:
        schema: the schema (the gateway's by default).
        limits: request, connection and subscriber limits.

    Attributes:
        engine: parses, validates and executes operations.
        hub: the shared subscription feeds (their tasks end with their last subscriber).
    """

    def __init__(
        self, schema: strawberry.Schema | None = None, limits: Limits | None = None
    ) -> None:
        self.limits = limits or Limits()
        self.engine = Engine(schema or gateway_schema(), self.limits)
        self.hub = Hub(self.engine, self.limits.max_queue)

    def context(self, scope: MutableMapping[str, Any], credential: Credential) -> Context:
        """A fresh operation context for a caller (the adapter and hub are the lifespan's)."""
        runtime = scope["app"].state.runtime
        return Context(runtime.adapter, credential, runtime.watches)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await websocket.serve(self, WebSocket(scope, receive, send))
            return
        response = await http.handle(self, Request(scope, receive))
        await response(scope, receive, send)


def graphql_routes(app: GraphQLApp | None = None, path: str = "/graphql") -> list[BaseRoute]:
    """The routes of the GraphQL endpoint, GraphiQL's assets included."""
    app = app or GraphQLApp()
    return [
        Route(path, app, methods=["GET", "POST"]),
        WebSocketRoute(path, app),
        Mount(f"{path}/static", StaticFiles(directory=STATIC_DIR), name="graphql-static"),
    ]
