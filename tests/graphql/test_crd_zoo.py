"""Every shape a structural CRD schema allows builds a working group schema.

The zoo (:mod:`tests.support.crdzoo`) is fed to the real builder as the OpenAPI v3 document
the apiserver publishes for it (:mod:`tests.support.crdopenapi`; the end-to-end zoo test
checks the two agree).  The group schema has exactly the shape the strawberry generator
makes for the same kinds, its scalars give every value of an object back exactly, and a kind
whose types cannot be built is left out of its group (said in the schema's description and,
once, in the log), not the group.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from graphql import (
    GraphQLField,
    GraphQLObjectType,
    GraphQLSchema,
    get_named_type,
    graphql_sync,
)

from gateway.core.catalog.catalog import Catalog
from gateway.graphql.schemas._library import graphql_schema
from gateway.graphql.schemas.schema import CatalogSchema, printed, schema_for_catalog
from gateway.graphql.schemas.seed import build_schema, gateway_schema
from tests.graphql.test_catalog_schema import _shape
from tests.support import crdopenapi, crdzoo

GROUP = crdzoo.GROUP


@pytest.fixture(scope="module")
def zoo() -> CatalogSchema:
    return schema_for_catalog(crdopenapi.catalog(crdzoo.crds()), scope=GROUP)


def _type(built: CatalogSchema, name: str) -> GraphQLObjectType:
    found = graphql_schema(built.schema).get_type(name)
    assert isinstance(found, GraphQLObjectType), name
    return found


def test_every_shape_builds_with_the_strawberry_generators_shape(zoo: CatalogSchema) -> None:
    assert not zoo.left_out and not zoo.undescribed
    schema = graphql_schema(zoo.schema)
    assert schema.description is None
    by_strawberry = graphql_schema(build_schema(zoo.registry, zoo.model))
    assert _shape(schema) == _shape(by_strawberry)


def test_each_shape_has_the_graphql_type_its_values_need(zoo: CatalogSchema) -> None:
    spec = {name: str(f.type) for name, f in _type(zoo, "ZooSpec").fields.items()}
    expected = {
        "number": "Float", "float": "Float", "double": "Float", "numbers": "[Float]",
        "matrix": "[[Float]]", "bounded": "Float", "enumNumber": "Float",
        "integer": "Long", "int64": "Long", "int32": "Int", "big": "[Long]", "bigPlain": "Long",
        "intOrString": "IntOrString", "anyOfIntOrString": "IntOrString",
        "intOrStringFormat": "IntOrString",
        "anything": "JSON", "free": "JSON", "freeItems": "[JSON]", "freeList": "[JSON]",
        "freeWithKnown": "ZooSpecFreeWithKnown", "freeDeep": "ZooSpecFreeDeep",
        "mapOfStrings": "JSON", "mapOfNumbers": "JSON", "mapOfObjects": "JSON",
        "mapOfArrays": "JSON", "mapOfMaps": "JSON",
        "oneOfRequired": "ZooSpecOneOfRequired", "anyOfBounds": "Long", "allOfString": "String",
        "enumString": "String", "enumInteger": "Long", "dateTime": "Time", "bytes": "String",
        "embedded": "ZooSpecEmbedded", "nullableObject": "ZooSpecNullableObject",
        "mapList": "[ZooSpecMapListItem]", "setList": "[String]",
        "deep": "ZooSpecDeep", "wide": "ZooSpecWide",
    }  # fmt: skip
    assert {k: spec[k] for k in expected} == expected
    # Properties GraphQL cannot spell travel in `raw` only; GraphQL's and our own names are
    # fields like any other (`raw` is the object's own, as on every type).
    names = set(_type(zoo, "ZooSpecNames").fields)
    assert names == {"Query", "String", "JSON", "Float", "metadata", "events", "raw",
                     "continue", "type", "kind"}  # fmt: skip
    assert len(_type(zoo, "ZooSpecWide").fields) == crdzoo.WIDTH + 1
    assert {"apiVersion", "kind", "metadata"} <= set(_type(zoo, "ZooSpecEmbeddedTyped").fields)
    # 60 levels: each a type of its own, the last one's leaf a Float.
    t, depth = _type(zoo, "ZooSpecDeep"), 1
    while "next" in t.fields:
        t, depth = get_named_type(t.fields["next"].type), depth + 1  # type: ignore[assignment]
    assert depth == crdzoo.DEPTH and str(t.fields["leaf"].type) == "Float"


def test_kinds_named_like_graphql_and_gateway_types_get_names_of_their_own(
    zoo: CatalogSchema,
) -> None:
    schema = graphql_schema(zoo.schema)
    for builtin in ("Query", "String", "JSON", "Float", "Pod"):
        # the built-in keeps its name and meaning; the kind is prefixed by its package
        assert schema.get_type(builtin) is graphql_schema(zoo.schema).type_map[builtin]
        kind = _type(zoo, f"ZooV1{builtin}")
        assert "spec" in kind.fields and "raw" in kind.fields
    query = schema.query_type
    assert query is not None
    assert {"zooV1Queries", "zooV1Floats", "zooV1JSONs", "zooV1Pods", "zooV1Strings"} <= set(
        query.fields
    )
    seed = graphql_schema(gateway_schema()).query_type
    assert seed is not None
    assert query.fields["pods"] is seed.fields["pods"]  # the seed's Pods are untouched
    assert str(query.fields["zoos"].type) == "ZooList"
    assert str(query.fields["zooV1Pods"].type) == "ZooV1PodList"


def _values(built: CatalogSchema, obj: dict[str, Any], selection: str) -> dict[str, Any]:
    """``obj`` (as the upstream's JSON bytes parse it) read through the group's own ``Zoo``
    type: the builder's fields and scalars, graphql-core's execution."""
    schema = graphql_schema(built.schema)
    zoo_type = _type(built, "Zoo")
    wire = json.loads(json.dumps(obj))
    reader = GraphQLSchema(
        query=GraphQLObjectType("Read", {"zoo": GraphQLField(zoo_type, resolve=lambda *_: wire)}),
        types=list(schema.type_map.values()),
    )
    result = graphql_sync(reader, "{ zoo " + selection + " }")
    assert result.errors is None, result.errors
    assert result.data is not None
    return json.loads(json.dumps(result.data["zoo"]))  # type: ignore[no-any-return]


def _selection(t: GraphQLObjectType, depth: int = 0) -> str:
    """Every field of ``t`` (``raw`` included) but the link fields, to any depth."""
    parts = []
    for name, f in t.fields.items():
        if f.resolve is None or f.args:
            continue
        inner = get_named_type(f.type)
        if isinstance(inner, GraphQLObjectType):
            parts.append(f"{name} {_selection(inner, depth + 1)}")
        else:
            parts.append(name)
    return "{ " + " ".join(parts) + " }"


def _known(value: Any, t: GraphQLObjectType) -> Any:
    """``value`` cut to what the type's fields name, and the whole in ``raw``."""
    if not isinstance(value, dict):
        return value
    out = {"raw": value}
    for name, f in t.fields.items():
        if name == "raw" or f.resolve is None or f.args:
            continue
        inner = get_named_type(f.type)
        v = value.get(name)
        if isinstance(inner, GraphQLObjectType):
            v = [_known(i, inner) for i in v] if isinstance(v, list) else _known(v, inner)
        out[name] = v
    return out


def test_every_value_comes_back_exactly(zoo: CatalogSchema) -> None:
    obj = crdzoo.example("Zoo", "all")
    spec_type = _type(zoo, "ZooSpec")
    got = _values(zoo, obj, "{ spec " + _selection(spec_type) + " raw }")
    assert len(json.dumps(got)) > len(json.dumps(obj))  # every level read, raw included
    assert got["raw"] == obj  # the whole object, byte for byte after a JSON round trip
    assert got["spec"] == _known(obj["spec"], spec_type)
    spec = got["spec"]
    # the values a lossy conversion would change, one by one
    assert spec["number"] == 1.5 and spec["double"] == -2.75e-10
    assert spec["big"] == list(crdzoo.BIG) and spec["bigPlain"] == 2**53 + 3
    assert spec["int32"] == 2**31 - 1 and spec["int64"] == -(2**40)
    assert spec["mapOfNumbers"] == {"half": 0.5, "big": 2**53 + 1}
    assert spec["mapOfMaps"] == {"outer": {"inner": 2**62}}
    assert spec["intOrString"] == 8080 and spec["anyOfIntOrString"] == "http"
    assert spec["anything"] == ["a", 1, {"b": None}]
    assert spec["free"] == obj["spec"]["free"]
    assert spec["freeWithKnown"]["count"] == 3.5
    assert spec["freeWithKnown"]["raw"] == obj["spec"]["freeWithKnown"]  # the unknown in raw
    assert spec["embedded"]["raw"] == obj["spec"]["embedded"]
    assert spec["names"]["Query"] == 5.5 and spec["names"]["continue"] == 12.5
    assert spec["nullableNumber"] is None and spec["enumString"] == "a-b"
    assert len(spec["wide"]) == crdzoo.WIDTH + 1


def test_a_corpus_of_real_crds_builds_every_group() -> None:
    """The real CRDs of the corpus (the end-to-end corpus test installs them): every group's
    schema builds with every kind, and has the strawberry generator's shape."""
    from tests.support import crdcorpus

    crds = crdcorpus.load(crdcorpus.CORPUS)
    catalog = crdopenapi.catalog(crds)
    for group in crdcorpus.groups(crds):
        built = schema_for_catalog(catalog, scope=group)
        assert not built.left_out and not built.undescribed, group
        assert len(built.registry) - len(catalog.registry) + len(crds) >= 1
        if group == "networking.istio.io":  # the group that answered 500 (number fields)
            assert "  virtualServices(" in printed(built.schema)
            assert _shape(graphql_schema(built.schema)) == _shape(
                graphql_schema(build_schema(built.registry, built.model))
            )


def _broken_and_good() -> Catalog:
    """A group of two kinds whose document has one kind with a shape the builder does not
    know (a list-map-keys that is no list: the apiserver would not publish it)."""
    good, bad = (
        crdzoo.crd("Good", "goods", crdzoo._small()),
        crdzoo.crd("Bad", "bads", crdzoo._small()),
    )
    catalog = crdopenapi.catalog([good, bad])
    doc = catalog.groups[(GROUP, "v1")].openapi
    assert doc is not None
    bad_schema = doc["components"]["schemas"][f"{crdopenapi.package(GROUP)}.v1.Bad"]
    bad_schema["properties"]["spec"]["properties"]["ratio"]["x-kubernetes-list-map-keys"] = 7
    return catalog


def test_a_kind_that_cannot_be_built_is_left_out_of_its_group_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gateway.graphql")
    first = schema_for_catalog(_broken_and_good(), scope=GROUP)
    again = schema_for_catalog(_broken_and_good(), scope=GROUP)  # a rebuild: no new line
    for built in (first, again):
        assert set(built.left_out) == {"Bad"}
        assert built.left_out["Bad"].startswith("TypeError: ")
        schema = graphql_schema(built.schema)
        assert schema.query_type is not None
        assert {"good", "goods"} <= set(schema.query_type.fields)
        assert not {"bad", "bads"} & set(schema.query_type.fields)
        answer = graphql_sync(schema, "{ __schema { description } }")
        assert answer.data is not None
        description = answer.data["__schema"]["description"]
        assert "Bad: TypeError: " in description and "Good" not in description
    (record,) = [r for r in caplog.records if "Bad" in r.getMessage()]
    assert record.levelno == logging.ERROR and record.exc_info is None
    assert f"not serving Bad of API group {GROUP}" in record.getMessage()
    assert "Traceback" not in caplog.text


def test_a_group_whose_every_kind_is_broken_still_serves_the_seed_and_says_why() -> None:
    """Every kind broken: nothing to serve but the seed kinds, and the description says so."""
    catalog = _broken_and_good()
    doc = catalog.groups[(GROUP, "v1")].openapi
    assert doc is not None
    good = doc["components"]["schemas"][f"{crdopenapi.package(GROUP)}.v1.Good"]
    good["properties"]["spec"]["properties"]["ratio"]["enum"] = 3
    built = schema_for_catalog(catalog, scope=GROUP)
    assert set(built.left_out) == {"Bad", "Good"}
    assert "pods" in graphql_schema(built.schema).query_type.fields  # type: ignore[union-attr]
