"""The GraphQL schema of a catalog: discovered kinds beside the seed ones, collision-free."""

from __future__ import annotations

from gateway.core.catalog import Catalog, GroupVersion
from gateway.core.registry import REGISTRY, Registry, Resource, Subresource
from gateway.graphql.schema import schema_for_catalog, sdl
from tests.core.test_openapi import SPEC, crd_document

_RW = frozenset(("get", "update", "patch"))


def _widget(group: str, version: str = "v1", **extra: object) -> Resource:
    return Resource(group, version, "Widget", "widgets", "widget", True, **extra)  # type: ignore[arg-type]


def _catalog(*pairs: tuple[Resource, dict[str, object]]) -> Catalog:
    groups = {(r.group, r.version): GroupVersion(r.group, r.version, (r,), doc) for r, doc in pairs}
    return Catalog(Registry((*REGISTRY.values(), *(r for r, _ in pairs))), groups, 1)


def test_two_groups_with_one_kind_get_distinct_root_fields_and_the_seed_sdl_is_unchanged() -> None:
    a = _widget(
        "a.example.com",
        subresources={"status": Subresource("status", _RW), "scale": Subresource("scale", _RW)},
    )
    b = _widget("b.example.com")
    built = schema_for_catalog(
        _catalog(
            (a, crd_document("a.example.com", "Widget", "com.example.a", SPEC)),
            (b, crd_document("b.example.com", "Widget", "com.example.b", SPEC)),
        )
    )
    query = built.schema.get_type_by_name("Query")
    mutation = built.schema.get_type_by_name("Mutation")
    subscription = built.schema.get_type_by_name("Subscription")
    assert query is not None and mutation is not None and subscription is not None
    queries = {f.name for f in query.fields}  # type: ignore[attr-defined]
    mutations = {f.name for f in mutation.fields}  # type: ignore[attr-defined]
    watches = {f.name for f in subscription.fields}  # type: ignore[attr-defined]
    assert {"widget", "widgets", "widgetStatus", "bV1Widget", "bV1Widgets"} <= queries
    assert {"createWidget", "createBV1Widget", "patchWidgetStatus", "patchBV1Widget"} <= mutations
    assert not any("Scale" in m for m in mutations)  # scale answers another kind: gRPC only
    weird = built.schema.get_type_by_name("WidgetSpec")
    assert weird is not None
    spec_fields = {f.name: f.type for f in weird.fields}  # type: ignore[attr-defined]
    assert "weird" in spec_fields  # an object with no nameable field is JSON, not an empty type
    assert {"watchWidgets", "watchBV1Widgets", "watchPods"} <= watches
    # Every seed field and type is still there, as published.
    seed = sdl()
    for line in seed.splitlines():
        if line.startswith("type ") or line.startswith("input "):
            assert line in built.schema.as_str(), line


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
        )
    )
    served = {(r.group, r.version, r.plural) for r in built.registry.values()}
    assert ("a.example.com", "v1", "widgets") in served
    assert ("a.example.com", "v1beta1", "widgets") not in served
    assert ("coordination.k8s.io", "v1beta1", "leases") not in served
    assert len(built.registry) == len(REGISTRY) + 1


def test_a_kind_the_openapi_does_not_describe_is_left_out() -> None:
    undescribed = Resource("c.example.com", "v1", "Thing", "things", "thing", False)
    built = schema_for_catalog(_catalog((undescribed, {"components": {"schemas": {}}})))
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
    first = schema_for_catalog(_catalog((a, spec_v1)))
    second = schema_for_catalog(_catalog((a, spec_v2)), first)
    assert second.schema.as_str() == schema_for_catalog(_catalog((a, spec_v2))).schema.as_str()
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


def test_documents_passed_in_type_a_catalog_that_only_names_them() -> None:
    """The live schema loads a catalog's documents on the event loop and passes them in: the
    same schema as with the documents inline."""
    a = _widget("a.example.com")
    doc = crd_document("a.example.com", "Widget", "com.example.a", SPEC)
    inline = schema_for_catalog(_catalog((a, doc)))
    named = _catalog((a, doc))
    named = Catalog(
        named.registry,
        {
            k: GroupVersion(gv.group, gv.version, gv.resources, None, "H1")
            for k, gv in named.groups.items()
        },
        named.generation,
    )
    assert "  widgets(" not in schema_for_catalog(named).schema.as_str()
    passed = schema_for_catalog(named, documents={("a.example.com", "v1"): doc})
    assert passed.schema.as_str() == inline.schema.as_str()
