"""Extract the demo upstream's definitions file (the kinds it serves beyond the gateway's).

``demo/kube_gateway_demo/schemas/kubernetes-demo.json`` is generated, never edited by hand; the same
command that writes the gateway's file writes it (``scripts/extract_schemas.py [--check]``).
It holds, in the OpenAPI v2 ``definitions`` form of :mod:`scripts.kube_definitions`:

* every definition reachable from the kinds of :data:`~kube_gateway_demo.catalog.DEMO_REGISTRY`
  that Kubernetes defines (Deployment, Service, CustomResourceDefinition, ...), minus those
  the gateway's own file already has (both files are loaded together, each id once);
* the custom resources' kinds, translated from their CRDs' ``openAPIV3Schema`` (inline
  object schemas become definitions of their own, named after their path:
  ``dev.kube-gateway.demo.v1.WidgetSpec``), under the ids the apiserver gives them.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any, Final

from gateway.core.model.openapi import KEPT_KEYS
from gateway.core.model.registry import REGISTRY
from kube_gateway_demo.catalog import (
    CRDS,
    CUSTOM,
    DEMO_REGISTRY,
    DEMO_SCHEMA_FILE,
    SCHEMA_DIR,
    crd_definition_id,
)
from scripts import kube_definitions as core

_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1."
#: Structural-schema keys that only validate values: the model keeps none of them.
CRD_VALIDATION_KEYS: Final = frozenset(
    {
        "default",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "maxItems",
        "maxLength",
        "maxProperties",
        "maximum",
        "minItems",
        "minLength",
        "minProperties",
        "minimum",
        "multipleOf",
        "nullable",
        "pattern",
        "uniqueItems",
        "x-kubernetes-validations",
    }
)


def _camel(name: str) -> str:
    return name[:1].upper() + name[1:]


def crd_definitions(crd: Mapping[str, Any]) -> dict[str, Any]:
    """The definitions of a CRD's kinds (every served version), from ``openAPIV3Schema``.

    Raises:
        ExtractError: a schema key this translation does not know.
    """
    spec = crd["spec"]
    group, names = spec["group"], spec["names"]
    out: dict[str, Any] = {}
    for version in spec["versions"]:
        kind_id = crd_definition_id(group, version["name"], names["kind"])
        schema = dict(version["schema"]["openAPIV3Schema"])
        props = dict(schema.get("properties", {}))
        props["metadata"] = {"$ref": core.REF_PREFIX + _META + "ObjectMeta"}
        schema["properties"] = props
        out.update(_flatten(schema, kind_id))
        out[kind_id]["x-kubernetes-group-version-kind"] = [
            {"group": group, "kind": names["kind"], "version": version["name"]}
        ]
        list_id = crd_definition_id(group, version["name"], names["listKind"])
        out[list_id] = {
            "description": f"{names['listKind']} is a list of {names['kind']}",
            "properties": {
                "apiVersion": {"type": "string"},
                "items": {"items": {"$ref": core.REF_PREFIX + kind_id}, "type": "array"},
                "kind": {"type": "string"},
                "metadata": {"$ref": core.REF_PREFIX + _META + "ListMeta"},
            },
            "required": ["items"],
            "type": "object",
            "x-kubernetes-group-version-kind": [
                {"group": group, "kind": names["listKind"], "version": version["name"]}
            ],
        }
    return out


def _flatten(node: Mapping[str, Any], def_id: str) -> dict[str, Any]:
    """``node`` (an inline object schema) as definition ``def_id``, nested objects split off."""
    defs: dict[str, Any] = {}
    defs[def_id] = _translate(node, def_id, defs)
    return defs


def _translate(node: Mapping[str, Any], name: str, defs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in CRD_VALIDATION_KEYS:
            continue
        if key == "properties":
            props: dict[str, Any] = {}
            for prop, sub in value.items():
                props[prop] = _nested(sub, name + _camel(prop), defs)
            out[key] = props
        elif key == "items":
            out[key] = _nested(value, name, defs)
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = _nested(value, name + "Value", defs)
        elif key in KEPT_KEYS:
            out[key] = value
        else:
            raise core.ExtractError(f"{name}: unknown CRD schema key {key!r}")
    return out


def _nested(node: Mapping[str, Any], name: str, defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return dict(node)
    if "properties" in node:
        defs[name] = _translate(node, name, defs)
        description = node.get("description")
        ref: dict[str, Any] = {"$ref": core.REF_PREFIX + name}
        if description:
            ref["description"] = description
        return ref
    return _translate(node, name, defs)


def extract(source: Mapping[str, Any], supplements: Mapping[str, Any]) -> dict[str, Any]:
    """Build the demo's definitions document (pure: no I/O)."""
    product = core.extract(source, supplements)["definitions"]
    upstream = core._by_gvk(source)
    custom = {r.key for r in CUSTOM}
    roots: list[str] = []
    for resource in DEMO_REGISTRY.values():
        if resource.key in REGISTRY or resource.key in custom:
            continue
        for kind in (resource.kind, resource.list_kind):
            key = (resource.group, resource.version, kind)
            if key not in upstream:
                raise core.ExtractError(f"no definition for {resource.api_version} {kind}")
            roots.append(upstream[key])
    names = [n for n in core.reachable(source, roots) if n not in product]
    definitions = {name: core.normalize(source[name], name) for name in names}
    for crd in CRDS:
        definitions.update(crd_definitions(crd))
    return {
        "definitions": dict(sorted(definitions.items())),
        "info": {
            "title": f"Kubernetes {core.KUBERNETES_VERSION} definitions the demo upstream "
            "serves beyond the gateway's, and its custom resources",
            "version": core.KUBERNETES_VERSION,
            "x-generated-by": "scripts/extract_schemas.py (do not edit by hand)",
            "x-source": f"PyPI kubernetes-validate: {core.SOURCE_PATH}; "
            "demo/kube_gateway_demo/crds/ (CRDs)",
        },
    }


def generate() -> str:
    """The text ``kubernetes-demo.json`` should have."""
    return core.render(extract(core.load_source(), core.load_supplements()))


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with ``--check``, compare) the demo's definitions file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file differs")
    args = parser.parse_args(argv)
    return core.write_or_check(SCHEMA_DIR / DEMO_SCHEMA_FILE, generate(), check=args.check)
