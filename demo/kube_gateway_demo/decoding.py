"""Request bodies into objects, with the apiserver's decoder errors: a create or update body
(JSON or YAML), the typed decoding of a written object (unknown fields, wrong JSON types), a
JSON, merge or strategic merge patch, and a server-side apply configuration."""

from __future__ import annotations

from typing import Any, Final, Literal

import orjson
import yaml

from gateway.core.model.registry import Resource
from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo import structure
from kube_gateway_demo.jsonutil import clone, json_type, load_json, load_yaml
from kube_gateway_demo.options import DemoWriteOptions
from kube_gateway_demo.status import bad_request, internal, invalid
from kube_gateway_demo.storage import Obj
from kube_gateway_demo.strategy import Strategy

PatchType = Literal["json", "merge", "strategic", "apply"]

PATCH_CONTENT_TYPES: Final[dict[str, PatchType]] = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}


def decode_body(res: Resource, strat: Strategy, raw: bytes, content_type: str) -> Obj:
    """Decode a create/update body (JSON or YAML).

    Raises:
        DemoApiError: 400 for anything that is not an object.
    """
    prefix = (
        f"the object provided is unrecognized (must be of type {res.kind}): couldn't get "
        "version/kind; json parse error: "
    )
    try:
        value = load_yaml(raw) if "yaml" in content_type else load_json(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"{prefix}{exc}") from None
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise bad_request(f"{prefix}json: cannot unmarshal {json_type(value)} into an object")
    if strat.custom_resource:
        # the unstructured decoder needs both halves of the type meta
        if not value.get("kind"):
            raise bad_request(
                f"the object provided is unrecognized (must be of type {res.kind}): Object "
                f"'Kind' is missing in '{raw.decode('utf-8', 'replace')}'"
            )
        if value.get("apiVersion") != res.api_version:
            raise bad_request(
                f"the API version in the data ({value.get('apiVersion') or ''}) does "
                f"not match the expected API version ({res.api_version})"
            )
    return value


def decode_typed(
    res: Resource,
    strat: Strategy,
    obj: Obj,
    opts: DemoWriteOptions,
    origin: str,
    *,
    patch: Any = None,
) -> tuple[Obj, list[str]]:
    """Decode into the Go type: drop unknown fields, fail on wrong JSON types.

    ``origin`` is where the object came from: ``body`` (a create or update), or the patch
    type that produced it (then ``patch`` is the patch, which the errors quote).

    Returns:
        The object (a copy, with the resource's kind and apiVersion) and the warnings.
    """
    obj = clone(obj)
    if origin == "body":
        _check_type_meta(res, obj)
    result = strat.decode(obj, res.version)
    strict = [f"unknown field {fe.go_quote(u)}" for u in result.unknown]
    strict_msg = "strict decoding error: " + ", ".join(strict) if strict else ""
    if strat.custom_resource:
        # no Go struct: wrong types are the schema validation's to report (422)
        result.type_error = None
    if origin == "body":
        version = fe.go_quote(res.version)
        prefix = f"{res.kind} in version {version} cannot be handled as a {res.kind}: "
        if result.type_error:
            raise bad_request(prefix + result.type_error)
        if strict_msg and opts.field_validation == "Strict":
            raise bad_request(prefix + strict_msg)
    elif origin in ("json", "merge", "strategic"):
        value: Any = fe.go_map(patch) if origin == "strategic" else orjson.dumps(patch).decode()
        if result.type_error:
            raise invalid("", "", "", [fe.invalid("patch", value, result.type_error)])
        if strict_msg and opts.field_validation == "Strict":
            raise invalid("", "", "", [fe.invalid("patch", value, strict_msg)])
    warnings = strict if opts.field_validation == "Warn" else []
    if not isinstance(obj.get("metadata", {}), dict):
        raise bad_request("metadata must be an object")
    obj["kind"], obj["apiVersion"] = res.kind, res.api_version
    return obj, warnings


def _check_type_meta(res: Resource, obj: Obj) -> None:
    """The decoder's verdict on a body's ``apiVersion``/``kind``."""
    kind = str(obj.get("kind") or res.kind)
    api_version = str(obj.get("apiVersion") or res.api_version)
    if api_version == res.api_version and kind == res.kind:
        return
    version = fe.go_quote(api_version.rsplit("/", 1)[-1])
    prefix = f"{kind} in version {version} cannot be handled as a {res.kind}: "
    raise bad_request(
        f"{prefix}no kind {fe.go_quote(kind)} is registered for version "
        f'{fe.go_quote(api_version)} in scheme "pkg/runtime/scheme.go:111"'
    )


def decode_patch(body: bytes, patch_type: PatchType) -> Any:
    """Decode a JSON, merge or strategic merge patch, worded like the patch handler."""
    prefix = "" if patch_type == "strategic" else "error decoding patch: "
    try:
        value = load_json(body)
    except ValueError as exc:
        raise bad_request(f"{prefix}{exc}") from None
    target = {
        "json": (list, "[]handlers.jsonPatchOp"),
        "merge": (dict, "map[string]interface {}"),
        "strategic": (dict, "map[string]interface {}"),
    }
    want, go_type = target[patch_type]
    if not isinstance(value, want):
        raise bad_request(
            f"{prefix}json: cannot unmarshal {json_type(value)} into Go value of type {go_type}"
        )
    return value


def decode_apply(res: Resource, strat: Strategy, name: str, body: bytes) -> Obj:
    """Decode a server-side apply configuration (YAML) for the object ``name``: the right
    kind and version, no managed fields, and nothing the schema does not declare.

    Raises:
        DemoApiError: 400 for a configuration that is not one of ``res``, a bare 500 (as
            structured-merge-diff fails) for fields the schema does not have.
    """
    try:
        config = load_yaml(body)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise bad_request(
            f"error decoding YAML: error converting YAML to JSON: yaml: {problem}"
        ) from None
    if not isinstance(config, dict):
        raise bad_request(
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot "
            f"unmarshal {json_type(config)} into Go value of type "
            "map[string]interface {}"
        )
    version = config.get("apiVersion") or ""
    if version != res.api_version:
        raise bad_request(
            "Incorrect version specified in apply patch. Specified patch version: "
            f"{version}, expected: {res.api_version}"
        )
    if config.get("kind") != res.kind:
        raise bad_request(
            "Incorrect kind specified in apply patch. Specified patch kind: "
            f"{config.get('kind') or ''}, expected: {res.kind}"
        )
    meta = config.get("metadata")
    if meta is None:
        meta = config["metadata"] = {}
    if not isinstance(meta, dict):
        raise bad_request("error decoding patch: metadata must be an object")
    if meta.get("managedFields") is not None:
        raise bad_request("metadata.managedFields must be nil")
    if meta.get("name") and meta["name"] != name:
        raise bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
        )
    meta.setdefault("name", name)
    result = strat.decode(clone(config), res.version)
    if result.unknown or result.type_error:
        what = (
            f".{result.unknown[0]}: field not declared in schema"
            if result.unknown
            else structure.smd_type_error(result)
        )
        # structured-merge-diff's plain error: the apiserver answers it as a bare 500; it
        # names the object as the patch does (no namespace unless the patch has one)
        where = f"{meta.get('namespace') or ''}/{name}; {_gvk(res)}"
        raise internal(f"failed to create typed patch object ({where}): {what}", reason="")
    return config


def _gvk(res: Resource) -> str:
    return f"{res.group}/{res.version}, Kind={res.kind}"
