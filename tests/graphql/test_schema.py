"""The committed SDL matches the code; the schema is generated from the schema source."""

from __future__ import annotations

from pathlib import Path

from gateway.core.model import schema as source
from gateway.graphql.schemas._library import graphql_schema
from gateway.graphql.schemas.seed import gateway_schema, sdl

SDL_FILE = Path(__file__).resolve().parents[2] / "graphql_schema" / "schema.graphql"


def test_committed_sdl_matches_the_code() -> None:
    assert SDL_FILE.read_text(encoding="utf-8") == sdl(), (
        "graphql_schema/schema.graphql drifted from the code: run `make graphql-schema`"
    )


def test_every_field_of_every_type_comes_from_the_schema_source() -> None:
    types = graphql_schema(gateway_schema()).type_map
    for kind, obj in source.kinds().items():
        for t in source.reachable(obj.name):
            gql = types[t.short_name]
            names = set(gql.fields)  # type: ignore[attr-defined]
            assert {f.json_name for f in t.fields} <= names, t.short_name
            assert "raw" in names
            assert f"{t.short_name}Input" in types, t.short_name
        assert kind in types
    for scalar in ("Quantity", "IntOrString", "Time", "MicroTime", "Long", "JSON"):
        assert scalar in types
    pod_spec = types["PodSpec"].fields  # type: ignore[attr-defined]
    assert str(pod_spec["activeDeadlineSeconds"].type) == "Long"
    assert str(pod_spec["containers"].type) == "[Container]"
    assert str(types["Container"].fields["resources"].type) == "ResourceRequirements"  # type: ignore[attr-defined]
    assert str(types["ContainerPort"].fields["containerPort"].type) == "Int"  # type: ignore[attr-defined]
    assert str(types["HTTPGetAction"].fields["port"].type) == "IntOrString"  # type: ignore[attr-defined]
    assert str(types["ListMeta"].fields["continue"].type) == "String"  # type: ignore[attr-defined]
