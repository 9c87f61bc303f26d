"""A minimal valid object of a CRD's kind, made from its schema (for the corpus test).

:func:`example` walks a version's ``openAPIV3Schema`` and sets what validation asks for:
every ``required`` property, the first ``enum`` value, a value of each ``format``
(``date-time``, ``duration``, ``uri``...), a string matching the ``pattern`` among a few
candidates, lengths, bounds and item counts within their limits, and ``oneOf``/``anyOf``
branches' ``required`` properties (the first branch).  What it cannot satisfy are the CEL
rules (``x-kubernetes-validations``): :func:`has_cel` says whether a schema has any, and the
corpus test names each kind the apiserver refuses with its message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_FORMATS: dict[str, str] = {
    "date-time": "2024-01-02T03:04:05Z",
    "date": "2024-01-02",
    "duration": "30s",
    "byte": "aGVsbG8=",
    "uri": "https://example.com/a",
    "url": "https://example.com/a",
    "hostname": "example.com",
    "ipv4": "10.0.0.1",
    "ipv6": "fd00::1",
    "ip": "10.0.0.1",
    "cidr": "10.0.0.0/24",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "email": "a@example.com",
    "password": "secret",
    "int-or-string": "1",
}

#: Strings tried, in order, against a ``pattern`` (Go's RE2 and Python agree on these).
_CANDIDATES: tuple[str, ...] = (
    "a", "example", "example.com", "a1", "1", "10", "1s", "30s", "5m", "1h", "http", "HTTP",
    "A", "Ab", "GET", "/", "/a", "https://example.com", "example.com:80", "10.0.0.1",
    "10.0.0.0/24", "a-b", "a_b", "a.b", "v1", "1.0.0", "100m", "1Gi", "true", "0", "ab12",
    "a=b", "*", "*.example.com", "x-a", "1.5", "::1", "a@example.com", "Ready", "TCP",
    "example.com/v1", "a/b", "v1/a",
)  # fmt: skip


def has_cel(node: Any) -> bool:
    """Does the schema (anywhere) carry ``x-kubernetes-validations`` rules?"""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            if n.get("x-kubernetes-validations"):
                return True
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
    return False


def _string(node: Mapping[str, Any]) -> str:
    fmt = node.get("format")
    pattern = node.get("pattern")
    low, high = int(node.get("minLength", 0)), node.get("maxLength")
    candidates = [_FORMATS[fmt]] if fmt in _FORMATS else []
    candidates += list(_CANDIDATES)
    for c in candidates:
        if len(c) < low:
            c = c + "a" * (low - len(c))  # noqa: PLW2901
        if high is not None and len(c) > int(high):
            continue
        if pattern is None:
            return c
        try:
            if re.search(pattern, c):
                return c
        except re.error:
            return c
    return "a" * max(low, 1)


def _number(node: Mapping[str, Any], integer: bool) -> int | float:
    low, high = node.get("minimum"), node.get("maximum")
    value: float = 1
    if low is not None and value < low:
        value = low
    if node.get("exclusiveMinimum") and low is not None and value <= low:
        value = low + 1
    if high is not None and value > high:
        value = high
    if node.get("exclusiveMaximum") and high is not None and value >= high:
        value = high - 1
    return int(value) if integer else value


def value(node: Mapping[str, Any], depth: int = 0) -> Any:
    """A valid value of ``node`` (a structural schema), as small as validation allows."""
    if node.get("enum"):
        return node["enum"][0]
    if "default" in node:
        return node["default"]
    if node.get("x-kubernetes-int-or-string"):
        return 1
    kind = node.get("type")
    if kind == "string":
        return _string(node)
    if kind in ("integer", "number"):
        return _number(node, kind == "integer")
    if kind == "boolean":
        return True
    if kind == "array":
        items = node.get("items") or {}
        count = int(node.get("minItems", 0))
        if node.get("x-kubernetes-list-type") in ("set", "map") and count > 1:
            count = 1  # distinct items: beyond one, a small example cannot promise it
        return [value(items, depth + 1) for _ in range(count)]
    if kind == "object" or "properties" in node:
        return _object(node, depth)
    return {}


def _object(node: Mapping[str, Any], depth: int) -> dict[str, Any]:
    props: Mapping[str, Any] = node.get("properties") or {}
    required = list(node.get("required") or [])
    for branch in (node.get("oneOf") or node.get("anyOf") or [])[:1]:
        required += [r for r in branch.get("required", []) if r not in required]
    out: dict[str, Any] = {}
    for name in required:
        if name in props:
            out[name] = value(props[name], depth + 1)
    extra = node.get("additionalProperties")
    low = int(node.get("minProperties", 0))
    if len(out) < low:
        for name in props:
            if name not in out and len(out) < low:
                out[name] = value(props[name], depth + 1)
        if isinstance(extra, dict):
            while len(out) < low:
                out[f"k{len(out)}"] = value(extra, depth + 1)
    return out


def example(crd: Mapping[str, Any], version: str, name: str) -> dict[str, Any]:
    """An object of ``crd``'s kind in ``version`` named ``name``, minimal and valid (CEL
    rules aside)."""
    spec = crd["spec"]
    served = next(v for v in spec["versions"] if v["name"] == version)
    root = (served.get("schema") or {}).get("openAPIV3Schema") or {}
    body = {
        k: v for k, v in _object(root, 0).items() if k not in ("apiVersion", "kind", "metadata")
    }
    props = root.get("properties") or {}
    if "spec" in props and "spec" not in body:
        body["spec"] = _object(props["spec"], 1)
    return {
        "apiVersion": f"{spec['group']}/{version}",
        "kind": spec["names"]["kind"],
        "metadata": {"name": name},
        **body,
    }
