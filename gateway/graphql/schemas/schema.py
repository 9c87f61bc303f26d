"""The GraphQL schema: generated types, registry-built root fields, links, custom scalars.

The seed resources' schema is built once (:mod:`gateway.graphql.schemas.seed`, committed as the
SDL).
With discovery on, :func:`schema_for_catalog` builds the schema of a whole catalog: the seed
kinds as they are, plus one version of every discovered resource (its group's preferred
version), typed from the cluster's OpenAPI v3.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import strawberry
from graphql import GraphQLSchema, print_schema, specified_scalar_types

from gateway.core import (
    REGISTRY,
    Catalog,
    GroupVersionKey,
    Model,
    Registry,
    Resource,
    openapi,
    seed_model,
)
from gateway.graphql.resolvers.objects import Built
from gateway.graphql.schemas._library import graphql_schema
from gateway.graphql.schemas.native import build_group_schema, discard_schema
from gateway.graphql.schemas.seed import build_with_classes, gateway_schema, seed_build

log = logging.getLogger("gateway.graphql")


@dataclass(frozen=True, slots=True, weakref_slot=True)
class CatalogSchema:
    """The GraphQL schema of one catalog and what it was built from."""

    schema: strawberry.Schema | GraphQLSchema
    #: The type model (seed plus discovered kinds); the next build keeps its names.
    model: Model
    #: The resources GraphQL serves, by registry key.
    registry: Registry
    #: Discovered resources left out because the OpenAPI does not describe their kind.
    undescribed: frozenset[str] = frozenset()
    #: The generated classes, by definition id (the next build reuses unchanged ones).
    built: Mapping[str, Built] = field(default_factory=dict)
    #: Kinds of a group left out because their types could not be built: kind -> why.
    left_out: Mapping[str, str] = field(default_factory=dict)


def _graphql_view(r: Resource) -> Resource:
    # GraphQL types a subresource's answer as the object's kind; `status` is one, but
    # `scale` answers an autoscaling/v1 Scale (served generically through gRPC instead).
    kept = {name: sub for name, sub in r.subresources.items() if name == "status"}
    return dataclasses.replace(r, subresources=MappingProxyType(kept))


#: The scope of ``/graphql``: the seed kinds and Kubernetes' own API groups.
BUILT_IN: Final = ""


def built_in_group(group: str, crd_groups: frozenset[str] | None = frozenset()) -> bool:
    """Is ``group`` one of Kubernetes' own API groups?  The core group, the groups without
    a dot (``apps``, ``batch``, ``policy``...) and ``*.k8s.io`` (a suffix only API-reviewed
    groups may use), unless a CRD defines it (Gateway API's ``gateway.networking.k8s.io``
    is a CRD group: the apiserver's own API is fixed by its version, a CRD group is not)."""
    if crd_groups is not None and group in crd_groups:
        return False
    return group == "" or "." not in group or group.endswith(".k8s.io")


def scope_of(r: Resource, crd_groups: frozenset[str] | None = frozenset()) -> str:
    """The GraphQL schema that serves ``r``: :data:`BUILT_IN` (``/graphql``) for the seed
    kinds and Kubernetes' own groups, else the one of its API group
    (``/apis/<group>/graphql``).  A function of the resource and the catalog's CRD groups
    alone, so installing a CRD never adds to, renames in or retypes the schema of another
    group."""
    return BUILT_IN if r.key in REGISTRY or built_in_group(r.group, crd_groups) else r.group


def served_in_graphql(catalog: Catalog, scope: str = BUILT_IN) -> list[Resource]:
    """The discovered resources of ``scope`` GraphQL serves: one version per group and
    resource, the group's preferred one (the catalog's first record of a key), and none of
    a seed resource's other versions (the seed's curated version is the one)."""
    return list(_scopes(catalog).get(scope, ()))


def group_scopes(catalog: Catalog) -> frozenset[str]:
    """The API groups served in schemas of their own (``/apis/<group>/graphql``)."""
    found: frozenset[str] | None = catalog.derived.get("graphql-groups")
    if found is None:
        found = frozenset(s for s in _scopes(catalog) if s != BUILT_IN)
        catalog.derived["graphql-groups"] = found
    return found


def scope_inputs(catalog: Catalog, scope: str = BUILT_IN) -> tuple[Any, ...]:
    """What the schema of ``scope`` is built from: the same value, the same schema (a
    catalog swap that leaves it equal needs no rebuild).  Kept with the catalog: every
    request to a group's endpoint and every readiness probe asks."""
    key = f"graphql-inputs:{scope}"
    inputs: tuple[Any, ...] | None = catalog.derived.get(key)
    if inputs is None:
        served = _scopes(catalog).get(scope, ())
        keys = sorted({(r.group, r.version) for r in served})
        inputs = (served, tuple((k, _hash(catalog, k)) for k in keys))
        catalog.derived[key] = inputs
    return inputs


def _scopes(catalog: Catalog) -> dict[str, tuple[Resource, ...]]:
    """The discovered resources GraphQL serves in each scope, sorted by key: computed once
    per catalog (readiness probes and every catalog swap ask; it walks the whole catalog)."""
    cached: dict[str, tuple[Resource, ...]] | None = catalog.derived.get("graphql-scopes")
    if cached is not None:
        return cached
    out: dict[str, list[Resource]] = {}
    for r in catalog.registry.values():  # the first record of each key: the preferred
        if r.key in REGISTRY:  # a seed resource, in any version
            continue
        if "get" not in r.verbs:  # create-only (bindings, reviews): no object to type
            continue
        out.setdefault(scope_of(r, catalog.crd_groups), []).append(_graphql_view(r))
    scopes = {k: tuple(sorted(v, key=lambda r: r.key)) for k, v in out.items()}
    catalog.derived["graphql-scopes"] = scopes
    return scopes


def scope_documents(catalog: Catalog, scope: str = BUILT_IN) -> list[tuple[str, str]]:
    """The group/versions whose OpenAPI documents type the kinds of ``scope``."""
    return sorted({(r.group, r.version) for r in served_in_graphql(catalog, scope)})


def _hash(catalog: Catalog, key: tuple[str, str]) -> Any:
    gv = catalog.groups.get(key)
    if gv is None:
        return None
    return gv.openapi_hash or id(gv.openapi)


@functools.cache
def _reserved_names() -> frozenset[str]:
    """Every type name of the seed schema (roots, scalars, results, events, inputs), and
    GraphQL's own scalars: ``Float`` or ``ID`` is not in the seed's type map (no seed field
    uses it) but a group's schema may use it, and graphql-core reserves the names."""
    return frozenset(graphql_schema(gateway_schema()).type_map) | specified_scalar_types.keys()


def schema_for_catalog(
    catalog: Catalog,
    previous: CatalogSchema | None = None,
    *,
    scope: str = BUILT_IN,
    documents: Mapping[GroupVersionKey, Mapping[str, Any]] | None = None,
) -> CatalogSchema:
    """Build the GraphQL schema of ``scope`` (:func:`scope_of`): the seed kinds plus the
    discovered kinds of that scope.  Pure and synchronous: callers run it in a worker
    thread, with the documents already read (:func:`gateway.core.catalog.openapi_documents.load` of
    :func:`scope_documents`; by default the ones the catalog carries inline).

    A discovered resource whose kind the cluster's OpenAPI does not describe is left out
    (logged).  Every name is a function of the scope's types alone (see
    :func:`gateway.core.model.openapi.extend`).
    """
    discovered = served_in_graphql(catalog, scope)
    if documents is None:
        documents = {
            key: gv.openapi for key, gv in catalog.groups.items() if gv.openapi is not None
        }
    docs = [documents[key] for key in scope_documents(catalog, scope) if key in documents]
    if scope != BUILT_IN:  # a group's: the seed schema's own types plus graphql-core ones
        return _group_schema(scope, discovered, docs, previous)
    model, registry, undescribed = _typed(discovered, docs, previous)
    # Unchanged nested types keep their classes: the previous build's, else the seed's.
    reuse = previous.built if previous is not None else seed_build()[1]
    built, classes = build_with_classes(registry, model, reuse)
    return CatalogSchema(built, model, registry, frozenset(undescribed), classes)


def _typed(
    discovered: Sequence[Resource],
    docs: Sequence[Mapping[str, Any]],
    previous: CatalogSchema | None,
    *,
    quiet: bool = False,
) -> tuple[Model, Registry, set[str]]:
    """The model of ``discovered`` (typed by ``docs``), the registry of the described ones
    and the keys of the undescribed ones (logged unless ``previous`` left them out too)."""
    model = openapi.extend(seed_model(), docs, discovered, reserved=_reserved_names())
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
        if not quiet and (previous is None or r.key not in previous.undescribed):
            log.warning(
                "not serving %s/%s over GraphQL (yet): the cluster's OpenAPI does not "
                "describe %s; the generic gRPC ResourceService serves it",
                r.key,
                r.version,
                r.kind,
            )
    return model, Registry((*REGISTRY.values(), *described)), undescribed


def _group_build(
    discovered: Sequence[Resource],
    docs: Sequence[Mapping[str, Any]],
    previous: CatalogSchema | None,
    left_out: Mapping[str, str] | None = None,
    *,
    quiet: bool = False,
) -> CatalogSchema:
    model, registry, undescribed = _typed(discovered, docs, previous, quiet=quiet)
    described = [r for r in discovered if r.key in registry and r.key not in REGISTRY]
    description = None
    if left_out:
        description = "Kinds of this API group left out of its GraphQL schema (their " + (
            "objects are served by the gRPC ResourceService): "
            + "; ".join(f"{kind}: {why}" for kind, why in sorted(left_out.items()))
        )
    return CatalogSchema(
        build_group_schema(model, described, description=description),
        model,
        registry,
        frozenset(undescribed),
        left_out=MappingProxyType(dict(left_out or {})),
    )


def _group_schema(
    group: str,
    discovered: Sequence[Resource],
    docs: Sequence[Mapping[str, Any]],
    previous: CatalogSchema | None,
) -> CatalogSchema:
    """The schema of an API group.  A kind whose types cannot be built (a bug, or a shape
    of OpenAPI the builder does not know) is left out, not the group: its other kinds are
    served, and the schema's description and the log (once) say which kind and why."""
    try:
        return _group_build(discovered, docs, previous)
    except Exception:
        # Which kinds fail on their own?  Only a broken group pays for this search.
        left_out: dict[str, str] = {}
        for r in discovered:
            try:
                probe = _group_build([r], docs, None, quiet=True)
            except Exception as exc:  # any failure is this kind's
                left_out[r.kind] = _reason(exc)
            else:  # built only to know: broken up, or a frozen part would never be freed
                assert isinstance(probe.schema, GraphQLSchema)
                discard_schema(probe.schema)
        if not left_out:
            raise  # only together do they fail: no one kind to leave out
    kept = [r for r in discovered if r.kind not in left_out]
    built = _group_build(kept, docs, previous, left_out)
    for kind, why in left_out.items():
        _report(group, kind, why)
    return built


def _reason(exc: Exception) -> str:
    """One line saying why a kind could not be built (no traceback)."""
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = text[:199] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


#: The (group, kind, reason) triples logged so far: a left-out kind is logged once, not at
#: every build of its group (each process logs it once).  Bounded, oldest out first.
_REPORTED: OrderedDict[tuple[str, str, str], None] = OrderedDict()
_REPORTED_MAX: Final = 4096
_reported_lock = threading.Lock()


def _report(group: str, kind: str, why: str) -> None:
    with _reported_lock:
        key = (group, kind, why)
        if key in _REPORTED:
            _REPORTED.move_to_end(key)
            return
        _REPORTED[key] = None
        while len(_REPORTED) > _REPORTED_MAX:
            _REPORTED.popitem(last=False)
    log.error(
        "not serving %s of API group %s over GraphQL: its schema could not be built (%s); "
        "the group's other kinds are served, the gRPC ResourceService serves this one",
        kind,
        group,
        why,
    )


def printed(schema: strawberry.Schema | GraphQLSchema) -> str:
    """The SDL of a scope's schema (the same printer for either kind)."""
    return print_schema(graphql_schema(schema))
