"""The GraphQL schema: generated types, registry-built root fields, links, custom scalars.

The seed resources' schema is built once (:func:`gateway_schema`, committed as the SDL).
With discovery on, :func:`schema_for_catalog` builds the schema of a whole catalog: the seed
kinds as they are, plus one version of every discovered resource (its group's preferred
version), typed from the cluster's OpenAPI v3.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import strawberry
from strawberry.schema.config import StrawberryConfig

from gateway.core import openapi
from gateway.core.catalog import Catalog, GroupVersionKey
from gateway.core.registry import REGISTRY, Registry, Resource
from gateway.core.schema import Model, seed_model
from gateway.graphql._library import graphql_schema
from gateway.graphql.links import link_fields
from gateway.graphql.objects import Built, dict_resolver, generate
from gateway.graphql.operations import RootBuilder
from gateway.graphql.scalars import SCALAR_MAP

log = logging.getLogger("gateway.graphql")


def build_schema(
    registry: Registry = REGISTRY,
    model: Model | None = None,
    previous: Mapping[str, Built] | None = None,
) -> strawberry.Schema:
    """Build the strawberry schema of ``registry`` from the schema source (no caching)."""
    return _build(registry, model, previous)[0]


def _build(
    registry: Registry, model: Model | None, previous: Mapping[str, Built] | None
) -> tuple[strawberry.Schema, Mapping[str, Built]]:
    types = generate(registry, extra=link_fields, model=model, previous=previous)
    query, mutation, subscription = RootBuilder(types, registry).build()
    built = strawberry.Schema(
        query=query,
        mutation=mutation,
        subscription=subscription,
        config=StrawberryConfig(scalar_map=SCALAR_MAP, default_resolver=dict_resolver),
    )
    return built, types.built


@functools.cache
def _seed_build() -> tuple[strawberry.Schema, Mapping[str, Built]]:
    return _build(REGISTRY, None, None)


def gateway_schema() -> strawberry.Schema:
    """The schema of the gateway's registry, built once (it is immutable)."""
    return _seed_build()[0]


def sdl() -> str:
    """The SDL of the gateway's schema, as committed in ``graphql_schema/schema.graphql``."""
    return gateway_schema().as_str() + "\n"


@dataclass(frozen=True, slots=True)
class CatalogSchema:
    """The GraphQL schema of one catalog and what it was built from."""

    schema: strawberry.Schema
    #: The type model (seed plus discovered kinds); the next build keeps its names.
    model: Model
    #: The resources GraphQL serves, by registry key.
    registry: Registry
    #: Discovered resources left out because the OpenAPI does not describe their kind.
    undescribed: frozenset[str] = frozenset()
    #: The generated classes, by definition id (the next build reuses unchanged ones).
    built: Mapping[str, Built] = field(default_factory=dict)


def _graphql_view(r: Resource) -> Resource:
    # GraphQL types a subresource's answer as the object's kind; `status` is one, but
    # `scale` answers an autoscaling/v1 Scale (served generically through gRPC instead).
    kept = {name: sub for name, sub in r.subresources.items() if name == "status"}
    return dataclasses.replace(r, subresources=MappingProxyType(kept))


def served_in_graphql(catalog: Catalog) -> list[Resource]:
    """The discovered resources GraphQL serves: one version per group and resource, the
    group's preferred one (the catalog's first record of a key), and none of a seed
    resource's other versions (the seed's curated version is the one)."""
    out = []
    for r in catalog.registry.values():  # the first record of each key: the preferred
        if r.key in REGISTRY:  # a seed resource, in any version
            continue
        if "get" not in r.verbs:  # create-only (bindings, reviews): no object to type
            continue
        out.append(_graphql_view(r))
    return sorted(out, key=lambda r: r.key)


@functools.cache
def _reserved_names() -> frozenset[str]:
    """Every type name of the seed schema (roots, scalars, results, events, inputs)."""
    return frozenset(graphql_schema(gateway_schema()).type_map)


def schema_for_catalog(
    catalog: Catalog,
    previous: CatalogSchema | None = None,
    documents: Mapping[GroupVersionKey, Mapping[str, Any]] | None = None,
) -> CatalogSchema:
    """Build the GraphQL schema of everything ``catalog`` serves.

    A discovered resource whose kind the cluster's OpenAPI does not describe is left out
    (logged); a root field name that would clash is given to the first resource only.
    ``documents`` are the catalog's OpenAPI documents (:func:`gateway.core.documents.load`,
    read on the event loop before this runs in a thread); ``None``: the inline ones.
    """
    discovered = served_in_graphql(catalog)
    if documents is None:
        documents = {k: gv.openapi for k, gv in catalog.groups.items() if gv.openapi is not None}
    # in the catalog's order: a definition two documents carry is the first one's
    docs = [documents[key] for key in catalog.groups if key in documents]
    model = openapi.extend(
        seed_model(),
        docs,
        discovered,
        previous=previous.model if previous is not None else None,
        reserved=_reserved_names(),
    )
    described = []
    undescribed = set()
    for r in discovered:
        if (r.group, r.version, r.kind) in model.by_gvk and (
            r.group,
            r.version,
            r.list_kind,
        ) in model.by_gvk:
            described.append(r)
            continue
        undescribed.add(r.key)
        if previous is None or r.key not in previous.undescribed:
            log.warning(
                "not serving %s/%s over GraphQL (yet): the cluster's OpenAPI does not "
                "describe %s; the generic gRPC ResourceService serves it",
                r.key,
                r.version,
                r.kind,
            )
    registry = Registry((*REGISTRY.values(), *described))
    # Unchanged nested types keep their classes: the previous build's, else the seed's.
    reuse = previous.built if previous is not None else _seed_build()[1]
    built, classes = _build(registry, model, reuse)
    return CatalogSchema(built, model, registry, frozenset(undescribed), classes)
