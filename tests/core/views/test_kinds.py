"""The field model of a kind for a front end without a schema (``gateway/core/views/kinds.py``):
a seed kind from the curated schema, a discovered kind from its group's OpenAPI document
(built once per catalog and group/version), an undescribed one refused clearly."""

from __future__ import annotations

import asyncio
from types import MappingProxyType
from typing import Any

import pytest

from gateway.core import errors
from gateway.core.catalog.catalog import Catalog, GroupVersion
from gateway.core.model.registry import POD, REGISTRY, Registry, Resource
from gateway.core.views.kinds import kind_model
from gateway.core.views.spec import resolve_path

WIDGET = Resource(
    group="demo.example.com",
    version="v1",
    kind="Widget",
    plural="widgets",
    singular="widget",
    namespaced=True,
)

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
DOCUMENT: dict[str, Any] = {
    "components": {
        "schemas": {
            "com.example.demo.v1.Widget": {
                "type": "object",
                "x-kubernetes-group-version-kind": [
                    {"group": "demo.example.com", "version": "v1", "kind": "Widget"}
                ],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"allOf": [{"$ref": f"#/components/schemas/{OBJECT_META}"}]},
                    "spec": {
                        "type": "object",
                        "properties": {"size": {"type": "integer", "format": "int64"}},
                    },
                },
            },
            "com.example.demo.v1.WidgetList": {
                "type": "object",
                "x-kubernetes-group-version-kind": [
                    {"group": "demo.example.com", "version": "v1", "kind": "WidgetList"}
                ],
                "properties": {
                    "items": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/com.example.demo.v1.Widget"},
                    }
                },
            },
        }
    }
}


def _catalog(document: dict[str, Any] | None) -> Catalog:
    gv = GroupVersion("demo.example.com", "v1", (WIDGET,), openapi=document)
    return Catalog(
        Registry((*REGISTRY.values(), WIDGET)),
        MappingProxyType({("demo.example.com", "v1"): gv}),
    )


async def test_a_seed_kind_is_the_curated_schemas() -> None:
    kind, lookup = await kind_model(_catalog(None), POD)
    assert resolve_path(kind, "status.phase", lookup).kind == "string"
    with pytest.raises(errors.InvalidView, match=r"did you mean 'metadata\.name'"):
        resolve_path(kind, "metadata.nmae", lookup)


async def test_a_discovered_kind_is_typed_from_its_document_once_per_catalog() -> None:
    catalog = _catalog(DOCUMENT)
    (kind, lookup), (again, _) = await asyncio.gather(
        kind_model(catalog, WIDGET), kind_model(catalog, WIDGET)
    )
    assert again is kind  # one build, shared by callers asking at once
    assert resolve_path(kind, "spec.size", lookup).kind == "int64"
    assert resolve_path(kind, "metadata.labels.app", lookup).kind == "string"
    with pytest.raises(errors.InvalidView, match="field 'spec' is an object"):
        resolve_path(kind, "spec", lookup)


async def test_an_undescribed_kind_has_no_view() -> None:
    with pytest.raises(errors.InvalidView, match="has no schema the gateway could read"):
        await kind_model(_catalog(None), WIDGET)
