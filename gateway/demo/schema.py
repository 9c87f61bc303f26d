"""Field schemas of the served kinds, for typed decoding (unknown fields, wrong JSON types).

The apiserver decodes a request body into Go structs: unknown fields are dropped (and, with
``fieldValidation=Warn``/``Strict``, reported), and a value of the wrong JSON type fails the
request.  The core and coordination kinds take their field tables from the ``kubernetes``
package's generated models; the OpenShift ``Image`` is described here from its API reference.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Final

# OpenShift image.openshift.io/v1 types (from the seed's field tables).
_IMAGE_TYPES: Final[dict[str, dict[str, str]]] = {
    "ImageV1Image": {
        "kind": "str",
        "apiVersion": "str",
        "metadata": "V1ObjectMeta",
        "dockerImageReference": "str",
        "dockerImageMetadata": "object",
        "dockerImageMetadataVersion": "str",
        "dockerImageManifest": "str",
        "dockerImageLayers": "List[ImageV1ImageLayer]",
        "signatures": "List[ImageV1ImageSignature]",
        "dockerImageSignatures": "List[str]",
        "dockerImageManifestMediaType": "str",
        "dockerImageConfig": "str",
        "dockerImageManifests": "List[ImageV1ImageManifest]",
    },
    "ImageV1ImageLayer": {"name": "str", "size": "int", "mediaType": "str"},
    "ImageV1ImageManifest": {
        "digest": "str",
        "mediaType": "str",
        "manifestSize": "int",
        "architecture": "str",
        "os": "str",
        "variant": "str",
    },
    "ImageV1ImageSignature": {
        "kind": "str",
        "apiVersion": "str",
        "metadata": "object",
        "type": "str",
        "content": "str",
        "conditions": "List[ImageV1SignatureCondition]",
        "imageIdentity": "str",
        "signedClaims": "Dict[str, str]",
        "created": "datetime",
        "issuedBy": "ImageV1SignatureIssuer",
        "issuedTo": "ImageV1SignatureSubject",
    },
    "ImageV1SignatureCondition": {
        "type": "str",
        "status": "str",
        "lastProbeTime": "datetime",
        "lastTransitionTime": "datetime",
        "reason": "str",
        "message": "str",
    },
    "ImageV1SignatureIssuer": {"organization": "str", "commonName": "str"},
    "ImageV1SignatureSubject": {"organization": "str", "commonName": "str", "publicKeyID": "str"},
}

CUSTOM_REQUIRED: Final[dict[str, tuple[str, ...]]] = {
    "ImageV1Image": ("dockerImageLayers",),
    "ImageV1ImageLayer": ("name", "size", "mediaType"),
    "ImageV1ImageSignature": ("type", "content"),
    "ImageV1SignatureCondition": ("type", "status"),
    "ImageV1SignatureSubject": ("publicKeyID",),
    "ImageV1ImageManifest": ("digest", "mediaType", "manifestSize", "architecture", "os"),
}
"""``required`` of the Image CRD's structural schema (the reference cluster serves Image as a
CustomResourceDefinition, ``tests/e2e/manifests``), in schema order."""

ROOT_TYPES: Final[dict[str, str]] = {
    "Pod": "V1Pod",
    "Event": "CoreV1Event",
    "Endpoints": "V1Endpoints",
    "Lease": "V1Lease",
    "Image": "ImageV1Image",
    "Namespace": "V1Namespace",
}

_LIST_RE: Final = re.compile(r"^List\[(.+)\]$")
_DICT_RE: Final = re.compile(r"^Dict\[str, (.+)\]$")

_GO_SCALARS: Final[dict[str, str]] = {
    "str": "string",
    "int": "int64",
    "bool": "bool",
    "float": "float64",
    "datetime": "v1.Time",
}


@functools.cache
def _struct(name: str) -> dict[str, str] | None:
    if name in _IMAGE_TYPES:
        return _IMAGE_TYPES[name]
    from kubernetes.client import models  # heavy (~1 s): imported on first use only

    cls = getattr(models, name, None)
    if cls is None or not hasattr(cls, "openapi_types"):
        return None
    return {cls.attribute_map[attr]: typ for attr, typ in cls.openapi_types.items()}


def warm() -> None:
    """Load the generated models now, so the first write does not pay the import."""
    for root in ROOT_TYPES.values():
        _struct(root)


def _go_type(typ: str) -> str:
    if m := _LIST_RE.match(typ):
        return "[]" + _go_type(m.group(1))
    if m := _DICT_RE.match(typ):
        return "map[string]" + _go_type(m.group(1))
    if typ in _GO_SCALARS:
        return _GO_SCALARS[typ]
    if typ == "object":
        return "interface {}"
    short = re.sub(r"^(V1|CoreV1|ImageV1)", "", typ)
    return ("v1." if typ.startswith(("V1", "CoreV1", "ImageV1")) else "") + short


def _smd_kind(typ: str) -> str:
    if _LIST_RE.match(typ):
        return "list"
    if _DICT_RE.match(typ) or typ not in ("str", "datetime", "int", "float", "bool"):
        return "map"
    return {
        "str": "string",
        "datetime": "string",
        "bool": "bool",
        "int": "numeric (int or float)",
        "float": "numeric (int or float)",
    }[typ]


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


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


@dataclass(slots=True)
class DecodeResult:
    """What typed decoding found: unknown field paths and the first type error."""

    unknown: list[str] = field(default_factory=list)
    type_error: str | None = None
    #: where the first type error is, what the schema expected there, and what was found
    type_path: str = ""
    type_expected: str = ""
    type_value: Any = None


def decode(kind: str, obj: dict[str, Any]) -> DecodeResult:
    """Drop unknown fields from ``obj`` in place, like decoding into the Go type would.

    Returns:
        The unknown field paths (``spec.foo``, ``spec.containers[0].bar``) in document
        order, and a ``json: cannot unmarshal ...`` message for the first type mismatch.
    """
    result = DecodeResult()
    root = ROOT_TYPES.get(kind)
    if root is None:
        return result
    _walk_struct(root, obj, "", result, root)
    return result


def _walk_struct(
    typ: str, obj: dict[str, Any], path: str, result: DecodeResult, struct_name: str
) -> None:
    fields = _struct(typ)
    if fields is None:
        return
    for key in list(obj):
        sub = f"{path}.{key}" if path else key
        if key not in fields:
            result.unknown.append(sub)
            del obj[key]
            continue
        _walk_value(fields[key], obj[key], sub, result, typ)


def _walk_value(typ: str, value: Any, path: str, result: DecodeResult, parent: str) -> None:
    if value is None or typ == "object":
        return
    mismatch = False
    if m := _LIST_RE.match(typ):
        if not isinstance(value, list):
            mismatch = True
        else:
            for i, item in enumerate(value):
                _walk_value(m.group(1), item, f"{path}[{i}]", result, parent)
    elif m := _DICT_RE.match(typ):
        if not isinstance(value, dict):
            mismatch = True
        else:
            for k, item in value.items():
                _walk_value(m.group(1), item, f"{path}.{k}", result, parent)
    elif typ in ("str", "datetime"):
        mismatch = not isinstance(value, str)
    elif typ == "int":
        mismatch = isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        )
    elif typ == "float":
        mismatch = isinstance(value, bool) or not isinstance(value, int | float)
    elif typ == "bool":
        mismatch = not isinstance(value, bool)
    elif isinstance(value, dict):
        _walk_struct(typ, value, path, result, typ)
    else:
        mismatch = True
    if mismatch and result.type_error is None:
        result.type_path, result.type_value = path, value
        result.type_expected = _smd_kind(typ)
        struct = re.sub(r"^(V1|CoreV1|ImageV1)", "", parent)
        result.type_error = (
            f"json: cannot unmarshal {_json_type(value)} into Go struct field "
            f"{struct}.{path} of type {_go_type(typ)}"
        )


_OPENAPI_TYPES: Final[dict[str, str]] = {
    "str": "string",
    "datetime": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
}


def _openapi_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def validate_custom(kind: str, obj: dict[str, Any]) -> list[Any]:
    """Structural-schema validation of a custom resource, worded like the apiserver's
    (``dockerImageLayers: Invalid value: "string": dockerImageLayers in body must be of type
    array: "string"``; ``dockerImageLayers[0].size: Required value``).

    Returns:
        ``FieldError`` values (imported lazily to keep this module dependency-free).
    """
    from gateway.demo import fielderrors as fe

    errors: list[Any] = []

    def type_error(path: str, expected: str, value: Any) -> None:
        got = _openapi_type(value)
        errors.append(
            fe.invalid(path, got, f"{path} in body must be of type {expected}: {fe.go_quote(got)}")
        )

    def walk_struct(typ: str, value: dict[str, Any], path: str) -> None:
        fields = _struct(typ) or {}
        for req in CUSTOM_REQUIRED.get(typ, ()):
            if value.get(req) is None:
                errors.append(fe.required(f"{path}.{req}" if path else req, ""))
        for key, sub_type in fields.items():
            if (
                key in value
                and value[key] is not None
                and not (path == "" and key in ("apiVersion", "kind", "metadata"))
            ):
                walk(sub_type, value[key], f"{path}.{key}" if path else key)

    def walk(typ: str, value: Any, path: str) -> None:
        if typ == "object":
            if not isinstance(value, dict):
                type_error(path, "object", value)
        elif m := _LIST_RE.match(typ):
            if not isinstance(value, list):
                type_error(path, "array", value)
                return
            for i, item in enumerate(value):
                if item is not None:
                    walk(m.group(1), item, f"{path}[{i}]")
        elif m := _DICT_RE.match(typ):
            if not isinstance(value, dict):
                type_error(path, "object", value)
                return
            for k, item in value.items():
                if item is not None:
                    walk(m.group(1), item, f"{path}.{k}")
        elif typ in _OPENAPI_TYPES:
            expected = _OPENAPI_TYPES[typ]
            got = _openapi_type(value)
            if got != expected and not (expected == "number" and got == "integer"):
                type_error(path, expected, value)
        elif not isinstance(value, dict):
            type_error(path, "object", value)
        else:
            walk_struct(typ, value, path)

    walk_struct(ROOT_TYPES[kind], obj, "")
    return errors
