"""Discovered kinds' schemas from OpenAPI v3 documents: normalisation, hoisting, names."""

from __future__ import annotations

from typing import Any

from gateway.core.model import openapi
from gateway.core.model.registry import Resource
from gateway.core.model.schema import ListOf, MapOf, Ref, Scalar, seed_model

META = "io.k8s.apimachinery.pkg.apis.meta.v1."


def crd_document(group: str, kind: str, package: str, spec: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI v3 document shaped like the apiserver's for one custom resource."""
    gvk = [{"group": group, "version": "v1", "kind": kind}]
    list_gvk = [{"group": group, "version": "v1", "kind": kind + "List"}]
    return {
        "openapi": "3.0.0",
        "components": {
            "schemas": {
                f"{package}.v1.{kind}": {
                    "type": "object",
                    "x-kubernetes-group-version-kind": gvk,
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"allOf": [{"$ref": f"#/components/schemas/{META}ObjectMeta"}]},
                        "spec": spec,
                    },
                },
                f"{package}.v1.{kind}List": {
                    "type": "object",
                    "x-kubernetes-group-version-kind": list_gvk,
                    "required": ["items"],
                    "properties": {
                        "items": {
                            "type": "array",
                            "items": {"$ref": f"#/components/schemas/{package}.v1.{kind}"},
                        },
                        "metadata": {"allOf": [{"$ref": f"#/components/schemas/{META}ListMeta"}]},
                    },
                },
            }
        },
    }


SPEC = {
    "type": "object",
    "description": "What the widget should be.",
    "properties": {
        "size": {"type": "integer", "format": "int32", "default": 1},
        "port": {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
        },
        "either": {"oneOf": [{"type": "string"}, {"type": "object"}]},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "parts": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "required": ["name", "ghost"],
                "properties": {"name": {"type": "string"}},
            },
        },
        "limits": {
            "type": "object",
            "additionalProperties": {"type": "object", "properties": {"max": {"type": "number"}}},
        },
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "weird": {"type": "object", "x-kubernetes-list-type": "nonsense", "properties": {}},
        "bad-name": {"type": "string"},
    },
}  # fmt: skip


def widget(group: str, package: str) -> Resource:
    return Resource(group, "v1", "Widget", "widgets", "widget", True)


def test_a_custom_resource_tree_is_hoisted_into_named_types() -> None:
    model = openapi.extend(
        seed_model(),
        [crd_document("a.example.com", "Widget", "com.example.a", SPEC)],
        [widget("a.example.com", "com.example.a")],
    )
    kind = model.kind_type("a.example.com", "v1", "Widget")
    assert kind.short_name == "Widget"
    assert kind.field("metadata").type == Ref(META + "ObjectMeta")  # the seed's own type
    spec = model.object_type(kind.field("spec").type.type_name)  # type: ignore[union-attr]
    assert spec.short_name == "WidgetSpec"
    assert spec.description == "What the widget should be."
    types = {f.json_name: f.type for f in spec.fields}
    assert "bad-name" not in types  # not a GraphQL name: reachable through `raw` only
    assert types["size"] == Scalar("int32")
    assert types["port"] == Scalar("int-or-string")
    assert types["either"] == Scalar("json")
    assert types["labels"] == MapOf(Scalar("string"))
    assert types["free"] == Scalar("json")
    assert types["parts"] == ListOf(Ref("com.example.a.v1.WidgetSpecPartsItem"))
    assert types["limits"] == MapOf(Ref("com.example.a.v1.WidgetSpecLimitsValue"))
    part = model.object_type("WidgetSpecPartsItem")
    assert [(f.json_name, f.required) for f in part.fields] == [("name", True)]
    parts = spec.field("parts")
    assert (parts.list_type, parts.list_map_keys) == ("map", ("name",))
    assert spec.field("weird").list_type is None
    # The seed model is untouched, and its names are kept.
    assert "Widget" not in seed_model().by_short
    assert model.object_type("ObjectMeta") is seed_model().object_type("ObjectMeta")


def test_two_custom_resources_with_one_kind_get_distinct_stable_names() -> None:
    docs = [
        crd_document("a.example.com", "Widget", "com.example.a", SPEC),
        crd_document("b.example.com", "Widget", "com.example.b", SPEC),
    ]
    both = [widget("a.example.com", "com.example.a"), widget("b.example.com", "com.example.b")]
    model = openapi.extend(seed_model(), docs, both)
    a = model.kind_type("a.example.com", "v1", "Widget").short_name
    b = model.kind_type("b.example.com", "v1", "Widget").short_name
    assert (a, b) == ("Widget", "BV1Widget")
    assert len(model.by_short) == len(model.types)

    # Names are a function of the set of types, not of the order they arrive in: the same
    # documents and kinds listed the other way round name every type the same.
    reversed_model = openapi.extend(seed_model(), docs[::-1], both[::-1])
    assert {t.name: t.short_name for t in reversed_model.types.values()} == {
        t.name: t.short_name for t in model.types.values()
    }
    # b alone (in a schema of its own) has the bare name.
    only_b = openapi.extend(seed_model(), docs[1:], both[1:])
    assert only_b.kind_type("b.example.com", "v1", "Widget").short_name == "Widget"


def test_a_kubernetes_kind_keeps_its_name_and_seed_kinds_are_never_renamed() -> None:
    # events.k8s.io's Event meets the seed's core Event: the seed keeps the bare name.
    doc = crd_document("events.k8s.io", "Event", "io.k8s.api.events", {"type": "string"})
    events = Resource("events.k8s.io", "v1", "Event", "events", "event", True)
    model = openapi.extend(seed_model(), [doc], [events])
    assert model.kind_type("", "v1", "Event").short_name == "Event"
    assert model.kind_type("events.k8s.io", "v1", "Event").short_name == "EventsV1Event"


def test_only_types_reachable_from_served_kinds_are_built() -> None:
    doc = crd_document("a.example.com", "Widget", "com.example.a", SPEC)
    doc["components"]["schemas"]["com.example.a.v1.Unused"] = {
        "type": "object",
        "properties": {"x": {"type": "string"}},
    }
    model = openapi.extend(seed_model(), [doc], [widget("a.example.com", "com.example.a")])
    assert "com.example.a.v1.Unused" not in model.types
    nothing = openapi.extend(seed_model(), [doc], [])
    assert nothing.types.keys() == seed_model().types.keys()
