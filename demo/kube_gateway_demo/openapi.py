"""``/openapi/v3`` and aggregated discovery, shaped like kube-apiserver v1.36 serves them.

OpenAPI v3: the index ``{"paths": {"apis/apps/v1": {"serverRelativeURL":
"/openapi/v3/apis/apps/v1?hash=<H>"}}}`` names one document per served group/version; ``H`` is
the upper-case hex SHA-512 of the document's bytes, so it changes exactly when the document
does.  A document is ``{"openapi": "3.0.0", "info", "paths", "components": {"schemas",
"securitySchemes"}}``: the served kinds, their list kinds and every definition they reach,
under the apiserver's ids (``io.k8s.api.apps.v1.Deployment``), with its v3 spelling (a
reference with siblings is ``{"description": ..., "allOf": [{"$ref": ...}]}``, non-pointer
structs carry ``"default": {}``) and a list and a get operation per resource.  A custom
resource's document is built from its CustomResourceDefinition as stored now (the id is the
reversed group: ``dev.kube-gateway.demo.v1.Widget``; the schema stays inline), so a changed
CRD schema changes that document and its hash only.

Aggregated discovery (``Accept: application/json;g=apidiscovery.k8s.io;v=v2;
as=APIGroupDiscoveryList`` on ``/api`` and ``/apis``): an ``APIGroupDiscoveryList`` with
every resource's scope, verbs, short names, categories and subresources.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import orjson

from gateway.core.model import schema as product_schema
from gateway.core.model.registry import Resource
from kube_gateway_demo import definitions
from kube_gateway_demo.catalog import DEMO_SCHEMA_FILE, SCHEMA_DIR, crd_definition_id

Obj = dict[str, Any]

AGGREGATED: Final = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
"""The media type of aggregated discovery (apidiscovery.k8s.io/v2)."""
NOT_ACCEPTABLE: Final = (
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
)

_V2: Final = "#/definitions/"
_V3: Final = "#/components/schemas/"
_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1."
#: Struct (not pointer) fields of the kinds: the apiserver gives them ``"default": {}``.
_STRUCT_FIELDS: Final = frozenset(("metadata", "spec", "status", "template", "strategy"))
_DESCRIPTIONS: Final = {
    "apiVersion": "APIVersion defines the versioned schema of this representation of an "
    "object. Servers should convert recognized schemas to the latest internal value, and may "
    "reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/"
    "sig-architecture/api-conventions.md#resources",
    "kind": "Kind is a string value representing the REST resource this object represents. "
    "Servers may infer this from the endpoint the client submits requests to. Cannot be "
    "updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/"
    "sig-architecture/api-conventions.md#types-kinds",
    "metadata": "Standard object's metadata. More info: https://git.k8s.io/community/"
    "contributors/devel/sig-architecture/api-conventions.md#metadata",
    "listMetadata": "Standard list metadata. More info: https://git.k8s.io/community/"
    "contributors/devel/sig-architecture/api-conventions.md#types-kinds",
}
_SECURITY: Final = {
    "BearerToken": {
        "type": "apiKey",
        "description": "Bearer Token authentication",
        "name": "authorization",
        "in": "header",
    }
}
#: The order kube-apiserver lists a custom resource's verbs in.
CUSTOM_VERBS: Final = (
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
)

#: The autoscaling/v1 Scale definitions a CRD's document carries when it declares a scale
#: subresource (as kube-apiserver v1.36 publishes them).
_SCALE_SCHEMAS: Final[Obj] = {
    "io.k8s.api.autoscaling.v1.Scale": {
        "description": "Scale represents a scaling request for a resource.",
        "type": "object",
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this representation "
                "of an object. Servers should convert recognized schemas to the "
                "latest internal value, and may reject unrecognized values. More "
                "info: "
                "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
                "type": "string",
            },
            "kind": {
                "description": "Kind is a string value representing the REST resource this "
                "object represents. Servers may infer this from the endpoint the "
                "client submits requests to. Cannot be updated. In CamelCase. "
                "More info: "
                "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
                "type": "string",
            },
            "metadata": {
                "description": "Standard object metadata; More info: "
                "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata.",
                "default": {},
                "allOf": [
                    {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
                ],
            },
            "spec": {
                "description": "spec defines the behavior of the scale. More info: "
                "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#spec-and-status.",
                "default": {},
                "allOf": [{"$ref": "#/components/schemas/io.k8s.api.autoscaling.v1.ScaleSpec"}],
            },
            "status": {
                "description": "status is the current status of the scale. More info: "
                "https://git.k8s.io/community/contributors/devel/sig-architecture/"
                "api-conventions.md#spec-and-status. "
                "Read-only.",
                "default": {},
                "allOf": [{"$ref": "#/components/schemas/io.k8s.api.autoscaling.v1.ScaleStatus"}],
            },
        },
        "x-kubernetes-group-version-kind": [
            {"group": "autoscaling", "kind": "Scale", "version": "v1"}
        ],
    },
    "io.k8s.api.autoscaling.v1.ScaleSpec": {
        "description": "ScaleSpec describes the attributes of a scale subresource.",
        "type": "object",
        "properties": {
            "replicas": {
                "description": "replicas is the desired number of instances for the scaled object.",
                "type": "integer",
                "format": "int32",
                "default": 0,
            }
        },
    },
    "io.k8s.api.autoscaling.v1.ScaleStatus": {
        "description": "ScaleStatus represents the current status of a scale subresource.",
        "type": "object",
        "required": ["replicas"],
        "properties": {
            "replicas": {
                "description": "replicas is the actual number of observed instances of the "
                "scaled object.",
                "type": "integer",
                "format": "int32",
                "default": 0,
            },
            "selector": {
                "description": "selector is the label query over pods that should match the "
                "replicas count. This is same as the label selector but in the "
                "string format to avoid introspection by clients. The string "
                "will be in the same format as the query-param syntax. More info "
                "about label selectors: "
                "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/",
                "type": "string",
            },
        },
    },
}


@functools.cache
def raw_definitions() -> Mapping[str, Obj]:
    """Every definition the demo knows, as written in the definitions files (v2 form)."""
    defs: dict[str, Obj] = {}
    paths = [product_schema.SCHEMA_DIR / name for name in product_schema.SCHEMA_FILES]
    for path in (*paths, Path(SCHEMA_DIR / DEMO_SCHEMA_FILE)):
        defs.update(json.loads(path.read_text("utf-8"))["definitions"])
    return defs


def document_hash(body: bytes) -> str:
    """The hash the index publishes for a document (SHA-512, upper-case hex)."""
    return hashlib.sha512(body).hexdigest().upper()


def gv_path(group: str, version: str) -> str:
    """The index key of a group/version: ``api/v1``, ``apis/apps/v1``."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_V2):
            yield ref[len(_V2) :]
        for key, value in node.items():
            if key != "$ref" or not isinstance(value, str):
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _closure(start: Iterable[str]) -> list[str]:
    defs = raw_definitions()
    seen: set[str] = set()
    stack = list(start)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack.extend(_refs(defs[name]))
    return sorted(seen)


def _is_struct(def_id: str) -> bool:
    return "properties" in raw_definitions()[def_id]


def _wrapper_v3(def_id: str, schema: Obj) -> Obj:
    # The wrapper types' v3 spelling (kube-openapi's OpenAPIV3OneOfTypes).
    out = {k: v for k, v in schema.items() if k == "description"}
    if def_id.endswith("intstr.IntOrString"):
        return {
            **out,
            "format": "int-or-string",
            "oneOf": [{"type": "integer"}, {"type": "string"}],
        }
    if def_id.endswith("resource.Quantity"):
        return {**out, "oneOf": [{"type": "string"}, {"type": "number"}]}
    return schema


def _v3(node: Any, field: str | None = None, *, item: bool = False) -> Any:
    """A v2 schema node in v3 spelling."""
    if isinstance(node, list):
        return [_v3(v) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_V2):
        target = ref[len(_V2) :]
        siblings = {k: _v3(v) for k, v in node.items() if k != "$ref"}
        wrapped: Obj = dict(siblings)
        struct = _is_struct(target)
        if struct and (item or field in _STRUCT_FIELDS):
            wrapped["default"] = {}
        if not wrapped:
            return {"$ref": _V3 + target}
        wrapped["allOf"] = [{"$ref": _V3 + target}]
        return wrapped
    out: Obj = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _v3(sub, name) for name, sub in value.items()}
        elif key == "items":
            out[key] = _v3(value, item=True)
        elif key == "additionalProperties" and isinstance(value, dict):
            sub = value.get("$ref")
            out[key] = (
                {"$ref": _V3 + sub[len(_V2) :]}
                if isinstance(sub, str) and sub.startswith(_V2)
                else _v3(value)
            )
        else:
            out[key] = value
    return out


def _operations(res: Resource, kind_ref: str, list_ref: str, tag: str) -> Obj:
    gvk = {"group": res.group, "version": res.version, "kind": res.kind}
    base = f"/apis/{res.group}/{res.version}" if res.group else f"/api/{res.version}"
    scoped = f"{base}/namespaces/{{namespace}}" if res.namespaced else base
    prefix = "Namespaced" if res.namespaced else ""
    op_tag = tag[:1].upper() + tag[1:]

    def op(action: str, verb: str, ref: str, desc: str) -> Obj:
        content = {"application/json": {"schema": {"$ref": _V3 + ref}}}
        return {
            "get": {
                "tags": [tag],
                "description": desc,
                "operationId": f"{verb}{op_tag}{prefix}{res.kind}",
                "responses": {
                    "200": {"description": "OK", "content": content},
                    "401": {"description": "Unauthorized"},
                },
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
            }
        }

    return {
        f"{scoped}/{res.plural}": op("list", "list", list_ref, f"list objects of kind {res.kind}"),
        f"{scoped}/{res.plural}/{{name}}": op(
            "get", "read", kind_ref, f"read the specified {res.kind}"
        ),
    }


def _tag(group: str, version: str) -> str:
    name = group.replace("-", ".").split(".")
    base = name[0] + "".join(p[:1].upper() + p[1:] for p in name[1:]) if group else "core"
    return f"{base}_{version}"


def builtin_document(group: str, version: str, resources: Iterable[Resource]) -> Obj:
    """The OpenAPI v3 document of a built-in (or aggregated) group/version."""
    roots: list[str] = [_META + n for n in ("DeleteOptions", "Status", "WatchEvent")]
    paths: Obj = {}
    tag = _tag(group, version)
    for res in resources:
        kind = definitions.kind_type(res.group, res.version, res.kind).name
        lst = definitions.kind_type(res.group, res.version, res.list_kind).name
        roots += [kind, lst]
        paths.update(_operations(res, kind, lst, tag))
    defs = raw_definitions()
    schemas = {name: _wrapper_v3(name, _v3(defs[name])) for name in _closure(roots)}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "1.36"},
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": schemas, "securitySchemes": _SECURITY},
    }


def custom_document(crds: Obj | list[Obj], version: str) -> Obj:
    """The OpenAPI v3 document of a custom resource group/version, from its CRDs (every CRD
    of the group serving that version, as stored now)."""
    defs = raw_definitions()
    meta = _closure(_META + n for n in ("ObjectMeta", "ListMeta", "Status", "DeleteOptions"))
    schemas: Obj = {name: _wrapper_v3(name, _v3(defs[name])) for name in meta}
    paths: Obj = {}
    group = ""
    for crd in crds if isinstance(crds, list) else [crds]:
        group = crd["spec"]["group"]
        kind_id, list_id, kind, listed, res = _custom_kind(crd, version)
        schemas[kind_id] = kind
        schemas[list_id] = listed
        served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
        if "scale" in (served.get("subresources") or {}):
            schemas.update(json.loads(json.dumps(_SCALE_SCHEMAS)))
        paths.update(_operations(res, kind_id, list_id, _tag(group, version)))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": dict(sorted(schemas.items())), "securitySchemes": _SECURITY},
    }


def _custom_kind(crd: Obj, version: str) -> tuple[str, str, Obj, Obj, Resource]:
    spec = crd["spec"]
    group, names = spec["group"], spec["names"]
    list_kind = names.get("listKind") or f"{names['kind']}List"
    served = next(v for v in spec["versions"] if v["name"] == version)
    kind_id = crd_definition_id(group, version, names["kind"])
    list_id = crd_definition_id(group, version, list_kind)
    schema = (served.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"}
    kind = json.loads(json.dumps(schema))
    props = kind.setdefault("properties", {})
    for key in ("apiVersion", "kind"):
        props[key] = {"description": _DESCRIPTIONS[key], "type": "string"}
    props["metadata"] = {
        "description": _DESCRIPTIONS["metadata"],
        "allOf": [{"$ref": _V3 + _META + "ObjectMeta"}],
    }
    kind["properties"] = {k: props[k] for k in sorted(props)}
    kind["x-kubernetes-group-version-kind"] = [
        {"group": group, "kind": names["kind"], "version": version}
    ]
    listed = {
        "description": f"{list_kind} is a list of {names['kind']}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": _DESCRIPTIONS["apiVersion"], "type": "string"},
            "items": {
                "description": f"List of {names['plural']}. More info: https://git.k8s.io/"
                "community/contributors/devel/sig-architecture/api-conventions.md",
                "type": "array",
                "items": {"$ref": _V3 + kind_id},
            },
            "kind": {"description": _DESCRIPTIONS["kind"], "type": "string"},
            "metadata": {
                "description": _DESCRIPTIONS["listMetadata"],
                "allOf": [{"$ref": _V3 + _META + "ListMeta"}],
            },
        },
        "x-kubernetes-group-version-kind": [
            {"group": group, "kind": list_kind, "version": version}
        ],
    }
    res = Resource(
        group=group,
        version=version,
        kind=names["kind"],
        plural=names["plural"],
        singular=names.get("singular", ""),
        namespaced=spec.get("scope") == "Namespaced",
    )
    return kind_id, list_id, kind, listed, res


def render(doc: Obj) -> bytes:
    """A document's bytes (what the hash is of)."""
    return orjson.dumps(doc)


# --- aggregated discovery ------------------------------------------------------------------


def wants_aggregated(accept: str) -> bool | None:
    """Negotiate discovery's ``Accept`` as kube-apiserver v1.36 does: aggregated discovery
    whenever any clause asks for apidiscovery.k8s.io/v2 (wherever it stands, whatever its
    ``q``), else the legacy answer when any clause admits plain JSON.

    Returns:
        True for aggregated discovery, False for the legacy answer, None when nothing
        offered is served (406).
    """
    if not accept.strip():
        return False
    legacy = False
    for clause in accept.split(","):
        parts = [p.strip() for p in clause.split(";")]
        media = parts[0].lower()
        params = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        params.pop("q", None)
        if media not in ("application/json", "application/yaml", "*/*", "application/*"):
            continue
        if not params:
            legacy = True
        elif (
            media == "application/json"
            and params.get("g") == "apidiscovery.k8s.io"
            and params.get("v") == "v2"
            and params.get("as") == "APIGroupDiscoveryList"
        ):
            return True
    return False if legacy else None


def _response_kind(res: Resource, kind: str | None = None, *, custom: bool) -> Obj:
    if custom:
        return {"group": res.group, "version": res.version, "kind": kind or res.kind}
    return {"group": "", "version": "", "kind": kind or res.kind}


def discovery_resource(res: Resource, categories: list[str] | None, *, custom: bool) -> Obj:
    """One ``APIResourceDiscovery`` entry."""
    verbs = [v for v in CUSTOM_VERBS if v in res.verbs] if custom else sorted(res.verbs)
    entry: Obj = {
        "resource": res.plural,
        "responseKind": _response_kind(res, custom=custom),
        "scope": "Namespaced" if res.namespaced else "Cluster",
        "singularResource": res.singular,
        "verbs": verbs,
    }
    if res.short_names:
        entry["shortNames"] = list(res.short_names)
    if categories:
        entry["categories"] = list(categories)
    subs = [
        {
            "subresource": sub.name,
            "responseKind": (
                {"group": "autoscaling", "version": "v1", "kind": "Scale"}
                if custom and sub.name == "scale"
                else _response_kind(res, custom=custom)
            ),
            "verbs": sorted(sub.verbs),
        }
        for sub in sorted(res.subresources.values(), key=lambda s: (s.name != "status", s.name))
    ]
    if subs:
        entry["subresources"] = subs
    return entry


def discovery_list(items: list[Obj]) -> Obj:
    """An ``APIGroupDiscoveryList``."""
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }
