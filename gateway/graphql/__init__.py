"""The GraphQL front end: a schema generated from the core schema source, thin resolvers
over the shared core, and its transports (HTTP, SSE, ``graphql-transport-ws``,
``graphql-ws``, GraphiQL).

Public surface::

    from gateway.graphql import GraphQLApp, graphql_routes, sdl
"""

from __future__ import annotations

from gateway.graphql.endpoints.server import GraphQLApp, graphql_routes
from gateway.graphql.engine.limits import Limits
from gateway.graphql.schemas.seed import build_schema, gateway_schema, sdl

__all__ = ["GraphQLApp", "Limits", "build_schema", "gateway_schema", "graphql_routes", "sdl"]
