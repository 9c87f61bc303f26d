"""The OpenAPI v3 document the kube-apiserver publishes for a CRD's group/version, made here.

``/openapi/v3/apis/<group>/<version>`` of a custom resource group is built by the
apiextensions-apiserver from each CRD's structural schema: the schema is *unfolded*
(``x-kubernetes-int-or-string`` gains ``anyOf: [integer, string]``, an
``x-kubernetes-embedded-resource`` object gains ``apiVersion``, ``kind`` and ``metadata``),
the kind's ``apiVersion``, ``kind`` and ``metadata`` (a reference to ``ObjectMeta``) are set,
and a list kind is added; both carry ``x-kubernetes-group-version-kind``.  Definition ids are
the reversed group, the version and the kind (``io.istio.networking.v1.VirtualService``).

Fast tests feed these documents to the real schema builder, so every shape a CRD can have is
covered without an apiserver; the end-to-end zoo test checks that the schema built from the
apiserver's own document is the one built from this one.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from gateway.core.catalog.catalog import Catalog, GroupVersion
from gateway.core.model.registry import REGISTRY, Registry, Resource, Subresource

META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_REF = "#/components/schemas/"
_CONVENTIONS = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
#: The apiserver's own words for the fields it adds (kube-openapi's ``TypeMeta`` docs).
API_VERSION: Final = (
    "APIVersion defines the versioned schema of this representation of an object. Servers "
    "should convert recognized schemas to the latest internal value, and may reject "
    f"unrecognized values. More info: {_CONVENTIONS}#resources"
)
KIND: Final = (
    "Kind is a string value representing the REST resource this object represents. Servers "
    "may infer this from the endpoint the client submits requests to. Cannot be updated. In "
    f"CamelCase. More info: {_CONVENTIONS}#types-kinds"
)


def package(group: str) -> str:
    """The definition id prefix of a group: ``networking.istio.io`` -> ``io.istio.networking``."""
    return ".".join(reversed(group.split(".")))


_EMBEDDED_API_VERSION: Final = (
    "apiVersion defines the versioned schema of this representation of an object. More "
    f"info: {_CONVENTIONS}#resources"
)
_EMBEDDED_KIND: Final = (
    "kind is a string value representing the type of this object. In CamelCase. More info: "
    f"{_CONVENTIONS}#types-kinds"
)


def _metadata(meta: str, anchor: str) -> dict[str, Any]:
    what = "object's metadata" if meta == "ObjectMeta" else "list metadata"
    return {
        "description": f"Standard {what}. More info: {_CONVENTIONS}#{anchor}",
        "allOf": [{"$ref": f"{_REF}{META}{meta}"}],
    }


def _unfold(node: Any) -> None:
    """Unfold the vendor extensions in place, as the apiserver does before publishing."""
    stack = [node]
    while stack:
        n = stack.pop()
        if not isinstance(n, dict):
            continue
        if n.get("x-kubernetes-int-or-string") and not n.get("anyOf"):
            n["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if n.get("x-kubernetes-embedded-resource"):
            props = n.setdefault("properties", {})
            props["apiVersion"] = {"type": "string", "description": _EMBEDDED_API_VERSION}
            props["kind"] = {"type": "string", "description": _EMBEDDED_KIND}
            props["metadata"] = _metadata("ObjectMeta", "metadata")
            n["required"] = ["kind", "apiVersion"]
        for key in ("properties", "patternProperties"):
            if isinstance(n.get(key), dict):
                stack.extend(n[key].values())
        for key in ("items", "additionalProperties", "not"):
            if isinstance(n.get(key), dict):
                stack.append(n[key])
        for key in ("allOf", "anyOf", "oneOf"):
            if isinstance(n.get(key), list):
                stack.extend(n[key])


def schemas(crd: Mapping[str, Any], version: str) -> dict[str, Any]:
    """The ``components.schemas`` entries of one CRD version (the kind and its list)."""
    spec = crd["spec"]
    group, kind = spec["group"], spec["names"]["kind"]
    served = next(v for v in spec["versions"] if v["name"] == version)
    root = copy.deepcopy((served.get("schema") or {}).get("openAPIV3Schema") or {})
    _unfold(root)
    root.setdefault("type", "object")
    props = root.setdefault("properties", {})
    props["apiVersion"] = {"type": "string", "description": API_VERSION}
    props["kind"] = {"type": "string", "description": KIND}
    props["metadata"] = _metadata("ObjectMeta", "metadata")
    gvk = {"group": group, "version": version, "kind": kind}
    root["x-kubernetes-group-version-kind"] = [gvk]
    prefix = f"{package(group)}.{version}."
    listed = {
        "type": "object",
        "description": f"{kind}List is a list of {kind}",
        "required": ["items"],
        "properties": {
            "apiVersion": dict(props["apiVersion"]),
            "items": {
                "type": "array",
                "description": f"List of {spec['names']['plural']}. More info: {_CONVENTIONS}",
                "items": {"$ref": f"{_REF}{prefix}{kind}"},
            },
            "kind": dict(props["kind"]),
            "metadata": _metadata("ListMeta", "types-kinds"),
        },
        "x-kubernetes-group-version-kind": [{**gvk, "kind": f"{kind}List"}],
    }
    return {f"{prefix}{kind}": root, f"{prefix}{kind}List": listed}


def document(crds: Iterable[Mapping[str, Any]], group: str, version: str) -> dict[str, Any]:
    """The OpenAPI v3 document of ``group/version``: every CRD of ``crds`` that serves it."""
    found: dict[str, Any] = {}
    for crd in crds:
        if crd["spec"]["group"] != group:
            continue
        if any(v["name"] == version and v.get("served") for v in crd["spec"]["versions"]):
            found.update(schemas(crd, version))
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
            "paths": {}, "components": {"schemas": found}}  # fmt: skip


_VERSION = re.compile(r"v(\d+)(?:(alpha|beta)(\d+))?")


def _priority(version: str) -> tuple[int, int, int, str]:
    """Kubernetes' version order: GA before beta before alpha, higher first, others last."""
    m = _VERSION.fullmatch(version)
    if m is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0), version)


def resource(crd: Mapping[str, Any]) -> Resource:
    """The resource discovery reports for ``crd``: its preferred served version."""
    spec = crd["spec"]
    served = sorted(
        (v for v in spec["versions"] if v.get("served")), key=lambda v: _priority(v["name"])
    )
    version = served[0]
    subresources = {}
    if (version.get("subresources") or {}).get("status") is not None:
        subresources["status"] = Subresource("status", frozenset(("get", "update", "patch")))
    names = spec["names"]
    return Resource(
        spec["group"],
        version["name"],
        names["kind"],
        names["plural"],
        names.get("singular") or names["kind"].lower(),
        spec["scope"] == "Namespaced",
        subresources=subresources,
    )


def catalog(crds: Sequence[Mapping[str, Any]]) -> Catalog:
    """A catalog serving ``crds`` as discovery would, their OpenAPI v3 documents inline."""
    found = [resource(c) for c in crds]
    by_gv: dict[tuple[str, str], list[Resource]] = {}
    for r in found:
        by_gv.setdefault((r.group, r.version), []).append(r)
    groups = {
        (g, v): GroupVersion(g, v, tuple(rs), document(crds, g, v)) for (g, v), rs in by_gv.items()
    }
    return Catalog(
        Registry((*REGISTRY.values(), *found)),
        groups,
        1,
        crd_groups=frozenset(r.group for r in found),
    )
