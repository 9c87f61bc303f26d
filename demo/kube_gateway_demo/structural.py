"""A custom resource's structural schema, applied as the apiextensions-apiserver applies it to
a CustomResourceDefinition created at run time: pruning (unknown fields dropped and reported,
nulls of non-nullable fields dropped), defaulting, then validation worded like the apiserver's
(``spec.size: Invalid value: "string": spec.size in body must be of type integer: "string"``).

It walks the ``openAPIV3Schema`` of the CRD as stored, so a changed CRD applies its new
schema to the next write.  ``metadata`` is ObjectMeta's (validated by the strategy), and
``apiVersion``/``kind`` are the decoder's.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Final

from kube_gateway_demo import fielderrors as fe

Obj = dict[str, Any]

_ROOT_OWN: Final = frozenset(("apiVersion", "kind", "metadata"))
_JSON_TYPES: Final = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def json_type(value: Any) -> str:
    """The OpenAPI type of a decoded JSON value."""
    return _JSON_TYPES.get(type(value), "object")


def _preserves(schema: Obj) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


def prune(schema: Obj, obj: Obj) -> list[str]:
    """Prune and default ``obj`` (a whole custom resource) in place.

    Returns:
        The paths of the unknown fields dropped (``spec.junk``), in document order.
    """
    unknown: list[str] = []
    props = schema.get("properties") or {}
    for key in list(obj):
        if key in _ROOT_OWN:
            continue
        sub = props.get(key)
        if sub is None:
            if not _preserves(schema):
                unknown.append(key)
                del obj[key]
            continue
        if obj[key] is None and not sub.get("nullable"):
            del obj[key]
            continue
        obj[key] = _prune(sub, obj[key], key, unknown)
    _default(props, obj, unknown)
    return unknown


def _default(props: Obj, obj: Obj, unknown: list[str]) -> None:
    for key, sub in props.items():
        if key not in obj and "default" in sub and key not in _ROOT_OWN:
            obj[key] = _prune(sub, copy.deepcopy(sub["default"]), key, [])


def _prune(schema: Obj, value: Any, path: str, unknown: list[str]) -> Any:
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is not None:
            for key in list(value):
                sub = props.get(key)
                where = f"{path}.{key}"
                if sub is None:
                    if not _preserves(schema):
                        unknown.append(where)
                        del value[key]
                elif value[key] is None and not sub.get("nullable"):
                    del value[key]
                else:
                    value[key] = _prune(sub, value[key], where, unknown)
            _default(props, value, unknown)
        elif isinstance(extra, dict):
            for key in list(value):
                if value[key] is None and not extra.get("nullable"):
                    del value[key]
                else:
                    value[key] = _prune(extra, value[key], f"{path}.{key}", unknown)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            return [_prune(items, v, f"{path}[{i}]", unknown) for i, v in enumerate(value)]
    return value


def validate(schema: Obj, obj: Obj) -> list[fe.FieldError]:
    """Validate a pruned custom resource against its schema (``metadata`` excluded)."""
    errors: list[fe.FieldError] = []
    top = {k: v for k, v in obj.items() if k not in _ROOT_OWN}
    _check_object(schema, top, "", errors, root=True)
    return errors


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check(schema: Obj, value: Any, path: str, errors: list[fe.FieldError]) -> None:
    if value is None:
        if not schema.get("nullable"):
            detail = f'{path} in body must be of type {schema.get("type")}: "null"'
            errors.append(fe.invalid(path, "null", detail))
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, int | str) or isinstance(value, bool):
            got = json_type(value)
            detail = f"{path} in body must be of type integer,string: {fe.go_quote(got)}"
            errors.append(fe.invalid(path, got, detail))
        return
    expected = schema.get("type")
    got = json_type(value)
    whole = isinstance(value, float) and expected == "integer" and value.is_integer()
    if expected and got != expected and (expected, got) != ("number", "integer") and not whole:
        detail = f"{path} in body must be of type {expected}: {fe.go_quote(got)}"
        errors.append(fe.invalid(path, got, detail))
        return
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        errors.append(fe.not_supported(path, value, [_shown(e) for e in enum]))
    if isinstance(value, str):
        _check_string(schema, value, path, errors)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(schema, value, path, errors)
    elif isinstance(value, dict):
        _check_object(schema, value, path, errors)
    elif isinstance(value, list):
        items = schema.get("items")
        if "maxItems" in schema and len(value) > int(schema["maxItems"]):
            detail = f"{path} in body should have at most {schema['maxItems']} items"
            errors.append(fe.invalid(path, len(value), detail))
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _check(items, item, f"{path}[{i}]", errors)


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _check_string(schema: Obj, value: str, path: str, errors: list[fe.FieldError]) -> None:
    if "maxLength" in schema and len(value) > int(schema["maxLength"]):
        errors.append(fe.too_long(path, int(schema["maxLength"])))
    if "minLength" in schema and len(value) < int(schema["minLength"]):
        detail = f"{path} in body should be at least {schema['minLength']} chars long"
        errors.append(fe.invalid(path, value, detail))
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and re.search(pattern, value) is None:
        detail = f"{path} in body should match '{pattern}'"
        errors.append(fe.invalid(path, value, detail))


def _check_number(schema: Obj, value: float, path: str, errors: list[fe.FieldError]) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        detail = f"{path} in body should be greater than or equal to {schema['minimum']}"
        errors.append(fe.invalid(path, value, detail))
    if "maximum" in schema and value > schema["maximum"]:
        detail = f"{path} in body should be less than or equal to {schema['maximum']}"
        errors.append(fe.invalid(path, value, detail))


def _check_object(
    schema: Obj, value: Obj, path: str, errors: list[fe.FieldError], *, root: bool = False
) -> None:
    props = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if name in _ROOT_OWN and root:
            continue
        if value.get(name) is None:
            errors.append(fe.required(_join(path, name), ""))
    for key, item in value.items():
        sub = props.get(key)
        if sub is None:
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                _check(extra, item, _join(path, key), errors)
            continue
        _check(sub, item, _join(path, key), errors)


def get_path(obj: Obj, path: str) -> Any:
    """The value at a ``.spec.replicas`` JSON path (None when absent)."""
    value: Any = obj
    for part in path.strip(".").split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def set_path(obj: Obj, path: str, value: Any) -> None:
    """Set the value at a ``.spec.replicas`` JSON path, making the objects on the way."""
    parts = path.strip(".").split(".")
    target = obj
    for part in parts[:-1]:
        nxt = target.get(part)
        if not isinstance(nxt, dict):
            nxt = target[part] = {}
        target = nxt
    target[parts[-1]] = value
