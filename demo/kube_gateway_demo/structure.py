"""The demo's structural checks, walked over the product's schema
(:mod:`gateway.core.model.schema`).

The apiserver decodes a request body into the kind's Go type: unknown fields are dropped
(and, with ``fieldValidation=Warn``/``Strict``, reported) and a value of the wrong JSON type
fails the request; a custom resource is checked against its structural schema instead.  The
demo does the same with the definitions the gateway itself is generated from: it shares the
data (schema, registry), never the gateway's request code, so the fake still judges the
gateway independently.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.core.model.schema import Field, ListOf, MapOf, Ref, Scalar, TypeRef
from kube_gateway_demo import definitions as schema
from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo.jsonutil import json_type

Obj = dict[str, Any]

_GO_SCALARS: Final[Mapping[str, str]] = {
    "string": "string",
    "int32": "int32",
    "int64": "int64",
    "double": "float64",
    "boolean": "bool",
    "bytes": "[]uint8",
    "quantity": "resource.Quantity",
    "int-or-string": "intstr.IntOrString",
    "time": "v1.Time",
    "microtime": "v1.MicroTime",
    "json": "interface {}",
}
#: OpenAPI ``type`` of each scalar, for custom-resource validation (None: not checked).
_OPENAPI: Final[Mapping[str, str | None]] = {
    "string": "string",
    "bytes": "string",
    "time": "string",
    "microtime": "string",
    "int32": "integer",
    "int64": "integer",
    "double": "number",
    "boolean": "boolean",
    "quantity": None,
    "int-or-string": None,
    "json": None,
}


@functools.cache
def fields(type_name: str) -> Mapping[str, Field]:
    """The fields of an object type by JSON name."""
    return {f.json_name: f for f in schema.object_type(type_name).fields}


def object_of(t: TypeRef | None) -> str | None:
    """The definition id behind ``t`` (or behind its list or map items), if it is an object."""
    while isinstance(t, ListOf | MapOf):
        t = t.item if isinstance(t, ListOf) else t.value
    return t.type_name if isinstance(t, Ref) else None


def child(type_name: str | None, key: str) -> tuple[Field | None, str | None]:
    """The field ``key`` of ``type_name`` and the object type its values (or items) have."""
    if not type_name:  # no schema model (a custom resource defined at run time)
        return None, None
    f = fields(type_name).get(key)
    return f, object_of(f.type) if f is not None else None


def is_atomic(f: Field | None, type_name: str | None) -> bool:
    """Whether a struct value is owned and replaced as a whole (``+structType=atomic``)."""
    if f is not None and f.map_type == "atomic":
        return True
    return bool(type_name) and schema.object_type(str(type_name)).map_type == "atomic"


def go_type(t: TypeRef) -> str:
    """The Go type a field decodes into (``[]v1.Container``, ``map[string]string``)."""
    if isinstance(t, ListOf):
        return "[]" + go_type(t.item)
    if isinstance(t, MapOf):
        return "map[string]" + go_type(t.value)
    if isinstance(t, Ref):
        parts = t.type_name.split(".")
        return f"{parts[-2]}.{parts[-1]}"
    return _GO_SCALARS[t.kind]


def _scalar_ok(kind: str, value: Any) -> bool:
    if kind == "json":
        return True
    if kind in ("string", "bytes", "time", "microtime"):
        return isinstance(value, str)
    if isinstance(value, bool):
        return kind == "boolean"
    if kind in ("int32", "int64"):
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind in ("double", "quantity"):
        return isinstance(value, int | float) or (kind == "quantity" and isinstance(value, str))
    if kind == "int-or-string":
        return isinstance(value, int | str)
    return False


@dataclass(slots=True)
class DecodeResult:
    """What typed decoding found: unknown field paths and the first type error."""

    unknown: list[str] = field(default_factory=list)
    type_error: str | None = None
    #: where the first type error is, what the schema expected there, and what was found
    type_path: str = ""
    type_expected: str = ""
    type_value: Any = None


def decode(type_name: str, obj: Obj) -> DecodeResult:
    """Drop unknown fields from ``obj`` in place, as decoding into the Go type would.

    Returns:
        The unknown field paths (``spec.foo``, ``spec.containers[0].bar``) in document
        order, and a ``json: cannot unmarshal ...`` message for the first type mismatch.
    """
    result = DecodeResult()
    _decode_struct(type_name, obj, "", result)
    return result


def _decode_struct(type_name: str, obj: Obj, path: str, result: DecodeResult) -> None:
    known = fields(type_name)
    for key in list(obj):
        sub = f"{path}.{key}" if path else key
        f = known.get(key)
        if f is None:
            result.unknown.append(sub)
            del obj[key]
        else:
            _decode_value(f.type, obj[key], sub, result, type_name)


def _decode_value(t: TypeRef, value: Any, path: str, result: DecodeResult, parent: str) -> None:
    if value is None:
        return
    if isinstance(t, ListOf):
        ok = isinstance(value, list)
        for i, item in enumerate(value if ok else ()):
            _decode_value(t.item, item, f"{path}[{i}]", result, parent)
    elif isinstance(t, MapOf):
        ok = isinstance(value, dict)
        for k, item in (value if ok else {}).items():
            _decode_value(t.value, item, f"{path}.{k}", result, parent)
    elif isinstance(t, Ref):
        ok = isinstance(value, dict)
        if ok:
            _decode_struct(t.type_name, value, path, result)
    else:
        ok = _scalar_ok(t.kind, value)
    if not ok and result.type_error is None:
        result.type_path, result.type_value = path, value
        result.type_expected = _smd_kind(t)
        struct = schema.object_type(parent).short_name
        result.type_error = (
            f"json: cannot unmarshal {json_type(value)} into Go struct field "
            f"{struct}.{path} of type {go_type(t)}"
        )


def _smd_kind(t: TypeRef) -> str:
    if isinstance(t, ListOf):
        return "list"
    if isinstance(t, MapOf | Ref):
        return "map"
    if t.kind == "boolean":
        return "bool"
    if t.kind in ("int32", "int64", "double"):
        return "numeric (int or float)"
    return "string"


def smd_type_error(result: DecodeResult) -> str:
    """structured-merge-diff's wording for the first type error (``expected string, got``)."""
    value = result.type_value
    if isinstance(value, bool):
        shown = "true" if value else "false"
    elif isinstance(value, str):
        shown = '"' + value.replace('"', '\\"') + '"'
    elif isinstance(value, int | float):
        shown = str(value)
    elif isinstance(value, list):
        shown = "[]interface {}{...}"
    else:
        shown = "map[string]interface {}{...}"
    return (
        f".{result.type_path}: expected {result.type_expected}, got "
        f"&value.valueUnstructured{{Value:{shown}}}"
    )


def _openapi_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def validate_custom(type_name: str, obj: Obj) -> list[fe.FieldError]:
    """Structural-schema validation of a custom resource, worded like the apiserver's
    (``dockerImageLayers: Invalid value: "string": dockerImageLayers in body must be of type
    array: "string"``; ``dockerImageLayers[0].size: Required value``)."""
    errors: list[fe.FieldError] = []

    def check(t: TypeRef, value: Any, path: str) -> None:
        if isinstance(t, Scalar):
            expected = _OPENAPI[t.kind]
        else:
            expected = "array" if isinstance(t, ListOf) else "object"
        got = _openapi_type(value)
        if expected is not None and got != expected and (expected, got) != ("number", "integer"):
            detail = f"{path} in body must be of type {expected}: {fe.go_quote(got)}"
            errors.append(fe.invalid(path, got, detail))
        elif isinstance(t, ListOf):
            for i, item in enumerate(value):
                if item is not None:
                    check(t.item, item, f"{path}[{i}]")
        elif isinstance(t, MapOf):
            for k, item in value.items():
                if item is not None:
                    check(t.value, item, f"{path}.{k}")
        elif isinstance(t, Ref):
            struct(t.type_name, value, path)

    def struct(type_name: str, value: Obj, path: str) -> None:
        known = fields(type_name).values()
        for f in known:
            if f.required and value.get(f.json_name) is None:
                errors.append(fe.required(f"{path}.{f.json_name}" if path else f.json_name, ""))
        for f in known:
            if value.get(f.json_name) is not None:
                check(f.type, value[f.json_name], f"{path}.{f.json_name}" if path else f.json_name)

    top = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    struct(type_name, top, "")
    return errors
