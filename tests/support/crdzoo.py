"""The CRD zoo: custom resources with every shape a structural OpenAPI v3 schema allows.

:data:`ZOO` is one kind, ``Zoo``, whose ``spec`` holds each shape once: numbers with and
without formats, integers (int32, int64, beyond 2^53), int-or-string (the extension and the
``anyOf`` spelling), ``x-kubernetes-preserve-unknown-fields`` at several depths and beside
properties, ``additionalProperties`` maps of scalars, objects, arrays and maps,
validation-only ``anyOf``/``oneOf``/``allOf``/``not``, enums whose values are not GraphQL
names, defaults, nullable fields, a 60-level-deep and a 2,000-property-wide object, property
names GraphQL cannot spell or that collide with its built-ins and ours, embedded resources,
``date-time``, ``byte`` and other string formats.  :data:`COLLIDERS` are kinds named like
GraphQL's and the gateway's own types (``Query``, ``Float``, ``JSON``, ``Pod``...).

:func:`example` is an object of a kind with every field set (the values the end-to-end test
sends and expects back); :func:`crds` the CRDs to install.
"""

from __future__ import annotations

import copy
from typing import Any, Final

GROUP: Final = "zoo.kube-gateway.dev"
VERSION: Final = "v1"
DEPTH: Final = 60
WIDTH: Final = 2000
#: Integers a double cannot hold: 2^53 + 1 and the int64 extremes.
BIG: Final = (2**53 + 1, 2**63 - 1, -(2**63))
#: Enum values that are not GraphQL names.
ODD_ENUM: Final = ("", "a-b", "1x", "true", "null", "Ok", "with space")
#: Property names GraphQL cannot spell, or that are GraphQL's or the gateway's own names.
ODD_NAMES: Final = (
    "__typename", "a-b", "1x", "with.dot", "_under", "Query", "String", "JSON", "Float",
    "metadata", "events", "raw", "continue", "type", "__schema", "kind",
)  # fmt: skip


def _deep(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "object", "properties": {"leaf": {"type": "number"}}}
    for _ in range(depth - 1):
        node = {"type": "object", "properties": {"next": node, "n": {"type": "integer"}}}
    return node


def _spec() -> dict[str, Any]:
    s = {"type": "string"}
    n = {"type": "number"}
    return {
        "type": "object",
        "description": "Every shape a structural schema allows.",
        "properties": {
            # numbers
            "number": n,
            "float": {"type": "number", "format": "float"},
            "double": {"type": "number", "format": "double"},
            "numbers": {"type": "array", "items": n},
            "matrix": {"type": "array", "items": {"type": "array", "items": n}},
            "bounded": {"type": "number", "minimum": 0, "maximum": 10, "exclusiveMaximum": True,
                        "multipleOf": 0.5},
            # integers
            "integer": {"type": "integer"},
            "int32": {"type": "integer", "format": "int32"},
            "int64": {"type": "integer", "format": "int64"},
            "big": {"type": "array", "items": {"type": "integer", "format": "int64"}},
            "bigPlain": {"type": "integer"},
            # int-or-string
            "intOrString": {"x-kubernetes-int-or-string": True},
            "anyOfIntOrString": {
                "x-kubernetes-int-or-string": True,
                "anyOf": [{"type": "integer"}, {"type": "string"}],
            },
            "intOrStringFormat": {"type": "string", "format": "int-or-string"},
            # preserve-unknown-fields
            "anything": {"x-kubernetes-preserve-unknown-fields": True},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "freeWithKnown": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"known": s, "count": n},
            },
            "freeDeep": {"type": "object", "properties": {"inner": {"type": "object",
                         "properties": {"free": {"type": "object",
                                                 "x-kubernetes-preserve-unknown-fields": True}}}}},
            "freeItems": {"type": "array", "items": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            "freeList": {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": True}},
            # maps
            "mapOfStrings": {"type": "object", "additionalProperties": s},
            "mapOfNumbers": {"type": "object", "additionalProperties": n},
            "mapOfObjects": {"type": "object", "additionalProperties": {
                "type": "object", "properties": {"x": n, "name": s}}},
            "mapOfArrays": {"type": "object",
                            "additionalProperties": {"type": "array", "items": n}},
            "mapOfMaps": {"type": "object", "additionalProperties": {
                "type": "object", "additionalProperties": {"type": "integer"}}},
            # validation-only combinators
            "oneOfRequired": {
                "type": "object",
                "properties": {"a": s, "b": n},
                "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
            },
            "anyOfBounds": {"type": "integer", "anyOf": [{"minimum": 0}, {"maximum": -10}]},
            "allOfString": {"type": "string", "allOf": [{"minLength": 1}, {"maxLength": 20}],
                            "not": {"enum": ["forbidden"]}},
            "notNumber": {"type": "number", "not": {"enum": [13]}},
            # enums, defaults, nullable
            "enumString": {"type": "string", "enum": list(ODD_ENUM)},
            "enumInteger": {"type": "integer", "enum": [1, 2, 3]},
            "enumNumber": {"type": "number", "enum": [0.5, 1.5]},
            "defaulted": {"type": "string", "default": "fallback"},
            "defaultedNumber": {"type": "number", "default": 2.5},
            "defaultedObject": {"type": "object", "default": {"on": True},
                                "properties": {"on": {"type": "boolean"}}},
            "nullableString": {"type": "string", "nullable": True},
            "nullableNumber": {"type": "number", "nullable": True},
            "nullableObject": {"type": "object", "nullable": True, "properties": {"v": n}},
            # formats
            "dateTime": {"type": "string", "format": "date-time"},
            "date": {"type": "string", "format": "date"},
            "bytes": {"type": "string", "format": "byte"},
            "duration": {"type": "string", "format": "duration"},
            "uuid": {"type": "string", "format": "uuid"},
            "boolean": {"type": "boolean"},
            # embedded resources
            "embedded": {"type": "object", "x-kubernetes-embedded-resource": True,
                         "x-kubernetes-preserve-unknown-fields": True},
            "embeddedTyped": {"type": "object", "x-kubernetes-embedded-resource": True,
                              "properties": {"spec": {"type": "object", "properties": {"n": n}}}},
            # lists with semantics
            "mapList": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "required": ["name"],
                                  "properties": {"name": s, "weight": n}}},
            "setList": {"type": "array", "x-kubernetes-list-type": "set", "items": s},
            # odd property names
            "names": {"type": "object",
                      "properties": {name: n for name in ODD_NAMES}},
            # very deep, very wide
            "deep": _deep(DEPTH),
            "wide": {"type": "object",
                     "properties": {f"p{i}": (n if i % 2 else s) for i in range(WIDTH)}},
        },
    }  # fmt: skip


def crd(kind: str, plural: str, spec: dict[str, Any], *, namespaced: bool = True) -> dict[str, Any]:
    """A CRD of the zoo's group with one version, a status subresource and ``spec``."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": spec,
                                "status": {
                                    "type": "object",
                                    "properties": {"ratio": {"type": "number"},
                                                   "observed": {"type": "integer"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }  # fmt: skip


def _small() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"ratio": {"type": "number"}, "name": {"type": "string"}},
    }


ZOO: Final = crd("Zoo", "zoos", _spec())
#: Kinds named like GraphQL's own types, the gateway's and a seed kind's.
COLLIDERS: Final = (
    crd("Query", "queries", _small()),
    crd("Float", "floats", _small(), namespaced=False),
    crd("JSON", "jsons", _small()),
    crd("Pod", "pods", _small()),
    crd("String", "strings", _small(), namespaced=False),
)


def crds() -> list[dict[str, Any]]:
    """Every CRD of the zoo (deep copies: callers may change them)."""
    return copy.deepcopy([ZOO, *COLLIDERS])


def _deep_value(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 0.25}
    for i in range(depth - 1):
        value = {"next": value, "n": i}
    return value


def spec_example() -> dict[str, Any]:
    """A ``Zoo`` spec with every field set, with values a lossy conversion would change."""
    return {
        "number": 1.5, "float": 0.1, "double": -2.75e-10, "numbers": [1.5, 2, -0.125],
        "matrix": [[1.5, 2.5], [], [3]], "bounded": 9.5,
        "integer": 42, "int32": 2**31 - 1, "int64": -(2**40), "big": list(BIG),
        "bigPlain": 2**53 + 3,
        "intOrString": 8080, "anyOfIntOrString": "http", "intOrStringFormat": "25%",
        "anything": ["a", 1, {"b": None}],
        "free": {"x": {"y": [1, 2.5, "z"]}, "t": True},
        "freeWithKnown": {"known": "k", "count": 3.5, "extra": {"deep": [1]}},
        "freeDeep": {"inner": {"free": {"q": {"r": 1}}}},
        "freeItems": [{"a": 1}, {"b": {"c": "d"}}],
        "freeList": [1, "two", {"three": 3}],
        "mapOfStrings": {"a": "x", "b-c": "y"},
        "mapOfNumbers": {"half": 0.5, "big": 2**53 + 1},
        "mapOfObjects": {"one": {"x": 1.25, "name": "n"}},
        "mapOfArrays": {"k": [0.5, 1]},
        "mapOfMaps": {"outer": {"inner": 2**62}},
        "oneOfRequired": {"b": 2.5},
        "anyOfBounds": 5,
        "allOfString": "allowed",
        "notNumber": 12.5,
        "enumString": "a-b", "enumInteger": 2, "enumNumber": 1.5,
        "defaulted": "set", "defaultedNumber": 3.25, "defaultedObject": {"on": False},
        "nullableString": None, "nullableNumber": None, "nullableObject": None,
        "dateTime": "2024-01-02T03:04:05Z", "date": "2024-01-02",
        "bytes": "aGVsbG8=", "duration": "1h30m", "uuid": "123e4567-e89b-12d3-a456-426614174000",
        "boolean": True,
        "embedded": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inner"},
                     "data": {"k": "v"}},
        "embeddedTyped": {"apiVersion": "x/v1", "kind": "Thing", "metadata": {"name": "t"},
                          "spec": {"n": 0.75}},
        "mapList": [{"name": "a", "weight": 0.5}, {"name": "b", "weight": 2}],
        "setList": ["x", "y"],
        "names": {name: i + 0.5 for i, name in enumerate(ODD_NAMES)},
        "deep": _deep_value(DEPTH),
        "wide": {f"p{i}": (i + 0.5 if i % 2 else f"s{i}") for i in range(WIDTH)},
    }  # fmt: skip


def example(kind: str, name: str) -> dict[str, Any]:
    """An object of ``kind`` with every field set (``Zoo``), or a small one (a collider)."""
    spec = spec_example() if kind == "Zoo" else {"ratio": 0.5, "name": kind}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }
