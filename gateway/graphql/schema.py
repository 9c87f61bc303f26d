"""The GraphQL schema: generated types, registry-built root fields, links, custom scalars."""

from __future__ import annotations

import functools

import strawberry
from strawberry.schema.config import StrawberryConfig

from gateway.core.registry import REGISTRY, Registry
from gateway.graphql.links import link_fields
from gateway.graphql.objects import dict_resolver, generate
from gateway.graphql.operations import RootBuilder
from gateway.graphql.scalars import SCALAR_MAP


def build_schema(registry: Registry = REGISTRY) -> strawberry.Schema:
    """Build the strawberry schema of ``registry`` from the schema source (no caching)."""
    types = generate(registry, extra=link_fields)
    query, mutation, subscription = RootBuilder(types, registry).build()
    return strawberry.Schema(
        query=query,
        mutation=mutation,
        subscription=subscription,
        config=StrawberryConfig(scalar_map=SCALAR_MAP, default_resolver=dict_resolver),
    )


@functools.cache
def gateway_schema() -> strawberry.Schema:
    """The schema of the gateway's registry, built once (it is immutable)."""
    return build_schema(REGISTRY)


def sdl() -> str:
    """The SDL of the gateway's schema, as committed in ``graphql_schema/schema.graphql``."""
    return gateway_schema().as_str() + "\n"
