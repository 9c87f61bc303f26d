"""The GraphQL schema of a catalog: discovered kinds beside the seed ones, collision-free."""

from __future__ import annotations

import dataclasses
from typing import Any

from graphql import GraphQLInputObjectType, GraphQLObjectType, GraphQLSchema

from gateway.core.catalog.catalog import Catalog, GroupVersion
from gateway.core.model.registry import REGISTRY, Registry, Resource, Subresource
from gateway.graphql.schemas._library import graphql_schema
from gateway.graphql.schemas.schema import (
    BUILT_IN,
    CatalogSchema,
    group_scopes,
    printed,
    schema_for_catalog,
    scope_of,
)
from gateway.graphql.schemas.seed import build_schema, gateway_schema, sdl
from tests.core.model.test_openapi import SPEC, crd_document

_RW = frozenset(("get", "update", "patch"))


def _widget(group: str, version: str = "v1", **extra: object) -> Resource:
    return Resource(group, version, "Widget", "widgets", "widget", True, **extra)  # type: ignore[arg-type]


def _catalog(*pairs: tuple[Resource, dict[str, object]]) -> Catalog:
    groups = {(r.group, r.version): GroupVersion(r.group, r.version, (r,), doc) for r, doc in pairs}
    return Catalog(Registry((*REGISTRY.values(), *(r for r, _ in pairs))), groups, 1)


def test_each_group_has_its_own_schema_and_the_seed_sdl_is_unchanged() -> None:
    """Two custom resource groups serving one kind name: each in its own group schema, under
    the bare names; /graphql has neither."""
    a = _widget(
        "a.example.com",
        subresources={"status": Subresource("status", _RW), "scale": Subresource("scale", _RW)},
    )
    b = _widget("b.example.com")
    catalog = _catalog(
        (a, crd_document("a.example.com", "Widget", "com.example.a", SPEC)),
        (b, crd_document("b.example.com", "Widget", "com.example.b", SPEC)),
    )
    assert group_scopes(catalog) == {"a.example.com", "b.example.com"}
    assert scope_of(a) == "a.example.com" and scope_of(REGISTRY["pods"]) == BUILT_IN
    root = schema_for_catalog(catalog)
    assert "Widget" not in printed(root.schema)
    assert root.schema.as_str() == sdl().rstrip("\n")  # nothing but the seed kinds
    for group in ("a.example.com", "b.example.com"):
        built = schema_for_catalog(catalog, scope=group)
        queries, mutations, watches = _roots(built)
        assert {"widget", "widgets", "pods"} <= queries
        assert {"createWidget", "patchWidget"} <= mutations
        assert {"watchWidgets", "watchPods"} <= watches
        assert not any("V1Widget" in name for name in queries | mutations | watches)
    built = schema_for_catalog(catalog, scope="a.example.com")
    queries, mutations, _ = _roots(built)
    assert "widgetStatus" in queries and "patchWidgetStatus" in mutations
    assert not any("Scale" in m for m in mutations)  # scale answers another kind: gRPC only
    weird = graphql_schema(built.schema).get_type("WidgetSpec")
    assert isinstance(weird, GraphQLObjectType)
    spec_fields = weird.fields
    assert "weird" in spec_fields  # an object with no nameable field is JSON, not an empty type
    # Every seed type is there, as published: the seed schema's own objects.
    seed = graphql_schema(gateway_schema()).type_map
    group = graphql_schema(built.schema).type_map
    for name, t in seed.items():
        if name not in ("Query", "Mutation", "Subscription"):
            assert group[name] is t, name


def test_names_in_kubernetes_own_groups_are_a_function_of_the_catalog() -> None:
    """Two of Kubernetes' own groups (``*.k8s.io``) with one kind name share /graphql: the
    kind's bare name goes to the group whose definitions sort first, the other is prefixed
    by its package, whatever the order the catalog lists them in; plurals are camelCase."""
    a = Resource("a.k8s.io", "v1", "NetworkWidget", "networkwidgets", "networkwidget", True)
    b = Resource("b.k8s.io", "v1", "NetworkWidget", "networkwidgets", "networkwidget", True)
    doc_a = crd_document("a.k8s.io", "NetworkWidget", "io.k8s.a", SPEC)
    doc_b = crd_document("b.k8s.io", "NetworkWidget", "io.k8s.b", SPEC)
    one = printed(schema_for_catalog(_catalog((a, doc_a), (b, doc_b))).schema)
    other = printed(schema_for_catalog(_catalog((b, doc_b), (a, doc_a))).schema)
    assert one == other
    assert "  networkWidgets(" in one and "  bV1NetworkWidgets(" not in one
    assert "  bv1NetworkWidgets(" in one and "  watchBV1NetworkWidgets(" in one
    assert "type BV1NetworkWidget " in one


def _roots(built: CatalogSchema) -> tuple[set[str], set[str], set[str]]:
    schema = graphql_schema(built.schema)
    query, mutation = schema.query_type, schema.mutation_type
    subscription = schema.subscription_type
    assert query is not None and mutation is not None and subscription is not None
    return set(query.fields), set(mutation.fields), set(subscription.fields)


def test_the_preferred_version_is_served_and_seed_resources_keep_their_version() -> None:
    """Discovery lists a group's preferred version first; that one is served over GraphQL
    (every version stays reachable through the generic gRPC service)."""
    beta = _widget("a.example.com", "v1beta1")
    ga = _widget("a.example.com")
    doc_beta = crd_document("a.example.com", "Widget", "com.example.a", SPEC)
    doc_beta["components"]["schemas"] = {
        k.replace(".v1.", ".v1beta1."): {
            **v,
            "x-kubernetes-group-version-kind": [
                {**g, "version": "v1beta1"} for g in v["x-kubernetes-group-version-kind"]
            ],
        }
        for k, v in doc_beta["components"]["schemas"].items()
    }
    other_leases = Resource("coordination.k8s.io", "v1beta1", "Lease", "leases", "lease", True)
    built = schema_for_catalog(
        _catalog(
            (ga, crd_document("a.example.com", "Widget", "com.example.a", SPEC)),
            (beta, doc_beta),
            (other_leases, {}),
        ),
        scope="a.example.com",
    )
    served = {(r.group, r.version, r.plural) for r in built.registry.values()}
    assert ("a.example.com", "v1", "widgets") in served
    assert ("a.example.com", "v1beta1", "widgets") not in served
    assert ("coordination.k8s.io", "v1beta1", "leases") not in served
    assert len(built.registry) == len(REGISTRY) + 1


def test_a_kind_the_openapi_does_not_describe_is_left_out() -> None:
    undescribed = Resource("c.example.com", "v1", "Thing", "things", "thing", False)
    built = schema_for_catalog(
        _catalog((undescribed, {"components": {"schemas": {}}})), scope="c.example.com"
    )
    assert len(built.registry) == len(REGISTRY)
    assert "  things(" not in printed(built.schema)


def test_a_rebuild_reuses_unchanged_classes_and_equals_a_fresh_build() -> None:
    """Reusing the previous build's classes is invisible: the rebuilt schema prints exactly
    as one built from nothing, after a CRD's schema changed and after a relation's target
    kind appeared (Node.pods needs pods; a Node-only catalog has no such field)."""
    a = _widget("x.k8s.io")  # one of Kubernetes' own groups: /graphql's schema
    spec_v1 = crd_document("x.k8s.io", "Widget", "io.k8s.x", SPEC)
    grown = {**SPEC, "properties": {**SPEC["properties"], "added": {"type": "boolean"}}}
    spec_v2 = crd_document("x.k8s.io", "Widget", "io.k8s.x", grown)
    first = schema_for_catalog(_catalog((a, spec_v1)))
    second = schema_for_catalog(_catalog((a, spec_v2)), first)
    fresh = schema_for_catalog(_catalog((a, spec_v2)))
    assert second.schema.as_str() == fresh.schema.as_str()
    assert "added: Boolean" in second.schema.as_str()
    reused = [k for k, b in second.built.items() if first.built.get(k) == b]
    assert "io.k8s.api.core.v1.PodSpec" in reused  # an unchanged nested type kept its class
    assert "io.k8s.x.v1.WidgetSpec" not in reused  # the changed one did not

    # A seed type that gains a link field (ObjectReference.pod is there from the start;
    # here the ReplicaSet kind appears and Pod gains `replicaSet`): never half-linked.
    rs_doc = crd_document("apps", "ReplicaSet", "io.k8s.api.apps", {"type": "object"})
    replicasets = Resource("apps", "v1", "ReplicaSet", "replicasets", "replicaset", True)
    third = schema_for_catalog(_catalog((a, spec_v2), (replicasets, rs_doc)), second)
    fresh = schema_for_catalog(_catalog((a, spec_v2), (replicasets, rs_doc)))
    assert third.schema.as_str() == fresh.schema.as_str()
    assert "replicaSet: ReplicaSet" in third.schema.as_str()


def test_documents_passed_in_type_a_catalog_that_only_names_them() -> None:
    """The live schema loads a catalog's documents on the event loop and passes them in: the
    same schema as with the documents inline."""
    a = _widget("a.example.com")
    doc = crd_document("a.example.com", "Widget", "com.example.a", SPEC)
    inline = schema_for_catalog(_catalog((a, doc)), scope="a.example.com")
    named = _catalog((a, doc))
    named = Catalog(
        named.registry,
        {
            k: GroupVersion(gv.group, gv.version, gv.resources, None, "H1")
            for k, gv in named.groups.items()
        },
        named.generation,
    )
    scope = "a.example.com"
    assert "  widgets(" not in printed(schema_for_catalog(named, scope=scope).schema)
    passed = schema_for_catalog(named, scope=scope, documents={("a.example.com", "v1"): doc})
    assert "  widgets(" in printed(passed.schema)
    assert printed(passed.schema) == printed(inline.schema)


def _shape(schema: GraphQLSchema) -> dict[str, Any]:
    """Every type of a schema as data: kind, description, fields with their types,
    descriptions and arguments (types, defaults, descriptions)."""
    out: dict[str, Any] = {}
    for name, t in schema.type_map.items():
        if name.startswith("__"):
            continue
        if not isinstance(t, (GraphQLObjectType, GraphQLInputObjectType)):
            out[name] = (type(t).__name__, t.description)
            continue
        fields = {}
        for field_name, f in t.fields.items():
            args = {
                a: (str(arg.type), repr(arg.default_value), arg.description)
                for a, arg in getattr(f, "args", {}).items()
            }
            fields[field_name] = (str(f.type), f.description, args)
        out[name] = (type(t).__name__, t.description, fields)
    return out


def test_a_group_schema_has_exactly_the_shape_strawberry_would_build() -> None:
    """A group's schema is built as graphql-core types (cheap enough to build on first use);
    every type, field, argument, default and description is what the strawberry generator
    makes for the same kinds (the seed schema's and /graphql's generator)."""
    a = _widget(
        "a.example.com",
        subresources={"status": Subresource("status", _RW), "scale": Subresource("scale", _RW)},
    )
    cluster = Resource("a.example.com", "v1", "Gizmo", "gizmos", "gizmo", False)
    doc = crd_document("a.example.com", "Widget", "com.example.a", SPEC)
    gizmo = crd_document("a.example.com", "Gizmo", "com.example.a", SPEC)
    doc["components"]["schemas"].update(gizmo["components"]["schemas"])
    catalog = Catalog(
        Registry((*REGISTRY.values(), a, cluster)),
        {("a.example.com", "v1"): GroupVersion("a.example.com", "v1", (a, cluster), doc)},
        1,
    )
    built = schema_for_catalog(catalog, scope="a.example.com")
    assert {"widgets", "gizmos"} <= set(graphql_schema(built.schema).type_map["Query"].fields)  # type: ignore[union-attr]
    by_strawberry = build_schema(built.registry, built.model)
    assert _shape(graphql_schema(built.schema)) == _shape(graphql_schema(by_strawberry))


def test_a_crd_group_has_its_own_schema_even_under_k8s_io() -> None:
    """Gateway API's group ends in ``.k8s.io`` but is a CRD's: it is not the apiserver's own
    API, so it gets a schema of its own and /graphql stays what the Kubernetes version has."""
    gateways = Resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways", "gateway", True)
    doc = crd_document("gateway.networking.k8s.io", "Gateway", "io.k8s.networking.gateway", SPEC)
    catalog = _catalog((gateways, doc))
    assert scope_of(gateways) == BUILT_IN  # by its name alone
    crd = dataclasses.replace(catalog, crd_groups=frozenset({"gateway.networking.k8s.io"}))
    assert group_scopes(crd) == {"gateway.networking.k8s.io"}
    assert "  gateways(" not in printed(schema_for_catalog(crd).schema)
    own = schema_for_catalog(crd, scope="gateway.networking.k8s.io")
    assert "  gateways(" in printed(own.schema)
