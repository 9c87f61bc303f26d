"""The GraphQL schema of a catalog: discovered kinds beside the seed ones, collision-free."""

from __future__ import annotations

from gateway.core.catalog import Catalog, GroupVersion
from gateway.core.registry import REGISTRY, Registry, Resource, Subresource
from gateway.graphql.schema import schema_for_catalog, sdl, version_priority
from tests.core.test_openapi import SPEC, crd_document

_RW = frozenset(("get", "update", "patch"))


def _widget(group: str, version: str = "v1", **extra: object) -> Resource:
    return Resource(group, version, "Widget", "widgets", "widget", True, **extra)  # type: ignore[arg-type]


def _catalog(*pairs: tuple[Resource, dict[str, object]]) -> Catalog:
    groups = {(r.group, r.version): GroupVersion(r.group, r.version, (r,), doc) for r, doc in pairs}
    return Catalog(Registry((*REGISTRY.values(), *(r for r, _ in pairs))), groups, 1)


def test_versions_order_like_kubernetes() -> None:
    ordered = sorted(["v1alpha1", "v1", "v2beta1", "v1beta2", "v2", "foo", "v1beta1"],
                     key=version_priority, reverse=True)  # fmt: skip
    assert ordered == ["v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "foo"]


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


def test_the_highest_version_is_served_and_seed_resources_keep_their_version() -> None:
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
            (beta, doc_beta),
            (ga, crd_document("a.example.com", "Widget", "com.example.a", SPEC)),
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
