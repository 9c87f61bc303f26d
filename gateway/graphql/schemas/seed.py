"""The seed resources' strawberry schema, built once, and the strawberry build itself.

A module of its own below :mod:`gateway.graphql.schemas.schema` (a catalog's schemas) and
:mod:`gateway.graphql.schemas.native` (a group's schema, which reuses the seed schema's graphql-core
types): both need it, and ``schema`` imports ``native``, so living in either would make an
import circle.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import strawberry
from strawberry.schema.config import StrawberryConfig

from gateway.core import REGISTRY, Model, Registry, dict_resolver
from gateway.graphql.resolvers import views
from gateway.graphql.resolvers.links import link_fields
from gateway.graphql.resolvers.objects import Built, generate
from gateway.graphql.resolvers.operations import RootBuilder, install_direct
from gateway.graphql.resolvers.scalars import SCALAR_MAP
from gateway.graphql.schemas._library import graphql_schema

__all__ = ["build_schema", "build_with_classes", "gateway_schema", "sdl", "seed_build"]


def build_schema(
    registry: Registry = REGISTRY,
    model: Model | None = None,
    previous: Mapping[str, Built] | None = None,
) -> strawberry.Schema:
    """Build the strawberry schema of ``registry`` from the schema source (no caching)."""
    return build_with_classes(registry, model, previous)[0]


def build_with_classes(
    registry: Registry, model: Model | None, previous: Mapping[str, Built] | None
) -> tuple[strawberry.Schema, Mapping[str, Built]]:
    types = generate(registry, extra=link_fields, model=model, previous=previous)
    roots = RootBuilder(types, registry)
    query, mutation, subscription = roots.build()
    built = strawberry.Schema(
        query=query,
        mutation=mutation,
        subscription=subscription,
        config=StrawberryConfig(scalar_map=SCALAR_MAP, default_resolver=dict_resolver),
    )
    install_direct(graphql_schema(built), {"Query": roots.query, "Mutation": roots.mutation})
    views.install(graphql_schema(built), roots.view_resolvers, roots.live_resolvers)
    return built, types.built


@functools.cache
def seed_build() -> tuple[strawberry.Schema, Mapping[str, Built]]:
    return build_with_classes(REGISTRY, None, None)


def gateway_schema() -> strawberry.Schema:
    """The schema of the gateway's registry, built once (it is immutable)."""
    return seed_build()[0]


def sdl() -> str:
    """The SDL of the gateway's schema, as committed in ``graphql_schema/schema.graphql``."""
    return gateway_schema().as_str() + "\n"
