"""The GraphQL schema of a catalog: discovered kinds beside the seed ones, collision-free."""

from __future__ import annotations

from gateway.core.catalog import Catalog, GroupVersion
from gateway.core.registry import REGISTRY, Registry, Resource, Subresource
from gateway.graphql.schema import (
    BUILT_IN,
    CatalogSchema,
    group_scopes,
    schema_for_catalog,
    scope_of,
    sdl,
)
from tests.core.test_openapi import SPEC, crd_document

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
    assert "Widget" not in root.schema.as_str()
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
    weird = built.schema.get_type_by_name("WidgetSpec")
    assert weird is not None
    spec_fields = {f.name: f.type for f in weird.fields}  # type: ignore[attr-defined]
    assert "weird" in spec_fields  # an object with no nameable field is JSON, not an empty type
    # Every seed field and type is still there, as published.
    for line in sdl().splitlines():
        if line.startswith("type ") or line.startswith("input "):
            assert line in built.schema.as_str(), line


def test_names_in_kubernetes_own_groups_are_a_function_of_the_catalog() -> None:
    """Two of Kubernetes' own groups (``*.k8s.io``) with one kind name share /graphql: the
    kind's bare name goes to the group whose definitions sort first, the other is prefixed
    by its package, whatever the order the catalog lists them in; plurals are camelCase."""
    a = Resource("a.k8s.io", "v1", "NetworkWidget", "networkwidgets", "networkwidget", True)
    b = Resource("b.k8s.io", "v1", "NetworkWidget", "networkwidgets", "networkwidget", True)
    doc_a = crd_document("a.k8s.io", "NetworkWidget", "io.k8s.a", SPEC)
    doc_b = crd_document("b.k8s.io", "NetworkWidget", "io.k8s.b", SPEC)
    one = schema_for_catalog(_catalog((a, doc_a), (b, doc_b))).schema.as_str()
    other = schema_for_catalog(_catalog((b, doc_b), (a, doc_a))).schema.as_str()
    assert one == other
    assert "  networkWidgets(" in one and "  bV1NetworkWidgets(" not in one
    assert "  bv1NetworkWidgets(" in one and "  watchBV1NetworkWidgets(" in one
    assert "type BV1NetworkWidget " in one


def _roots(built: CatalogSchema) -> tuple[set[str], set[str], set[str]]:
    query = built.schema.get_type_by_name("Query")
    mutation = built.schema.get_type_by_name("Mutation")
    subscription = built.schema.get_type_by_name("Subscription")
    assert query is not None and mutation is not None and subscription is not None
    return (
        {f.name for f in query.fields},  # type: ignore[attr-defined]
        {f.name for f in mutation.fields},  # type: ignore[attr-defined]
        {f.name for f in subscription.fields},  # type: ignore[attr-defined]
    )


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
    assert "  things(" not in built.schema.as_str()


def test_a_rebuild_reuses_unchanged_classes_and_equals_a_fresh_build() -> None:
    """Reusing the previous build's classes is invisible: the rebuilt schema prints exactly
    as one built from nothing, after a CRD's schema changed and after a relation's target
    kind appeared (Node.pods needs pods; a Node-only catalog has no such field)."""
    a = _widget("a.example.com")
    spec_v1 = crd_document("a.example.com", "Widget", "com.example.a", SPEC)
    grown = {**SPEC, "properties": {**SPEC["properties"], "added": {"type": "boolean"}}}
    spec_v2 = crd_document("a.example.com", "Widget", "com.example.a", grown)
    scope = "a.example.com"
    first = schema_for_catalog(_catalog((a, spec_v1)), scope=scope)
    second = schema_for_catalog(_catalog((a, spec_v2)), first, scope=scope)
    fresh = schema_for_catalog(_catalog((a, spec_v2)), scope=scope)
    assert second.schema.as_str() == fresh.schema.as_str()
    assert "added: Boolean" in second.schema.as_str()
    reused = [k for k, b in second.built.items() if first.built.get(k) == b]
    assert "io.k8s.api.core.v1.PodSpec" in reused  # an unchanged nested type kept its class
    assert "com.example.a.v1.WidgetSpec" not in reused  # the changed one did not

    # A seed type that gains a link field (ObjectReference.pod is there from the start;
    # here the ReplicaSet kind appears and Pod gains `replicaSet`): never half-linked.
    rs_doc = crd_document("apps", "ReplicaSet", "io.k8s.api.apps", {"type": "object"})
    replicasets = Resource("apps", "v1", "ReplicaSet", "replicasets", "replicaset", True)
    third = schema_for_catalog(_catalog((a, spec_v2), (replicasets, rs_doc)), second)
    fresh = schema_for_catalog(_catalog((a, spec_v2), (replicasets, rs_doc)))
    assert third.schema.as_str() == fresh.schema.as_str()
    assert "replicaSet: ReplicaSet" in third.schema.as_str()
