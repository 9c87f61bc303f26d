"""``read_mask``: parse a ``google.protobuf.FieldMask`` against a kind, cut JSON objects down to it.

Paths use the contract's (Kubernetes JSON) field names relative to the object, e.g.
``metadata.name`` or ``spec.containers.image``; a path may pass through repeated messages
(it then applies to every element), not through maps or free-form JSON.  The snake_case form
a JSON-encoded FieldMask produces (``metadata.resource_version``) is accepted too.

Masks are applied to the decoded JSON *before* conversion, so a narrow mask also makes the
conversion cheaper.

The generic ``ResourceService`` has no message to check paths against: :func:`parse_json`
takes any dot-separated path of JSON field names, and :func:`project` with ``loose=True``
reads a snake_case segment the object does not have under its camelCase name (a
JSON-encoded FieldMask turns ``metadata.resourceVersion`` into ``metadata.resource_version``).
A segment may also name a key of a map (``metadata.labels.app``): in JSON a map is an object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from gateway.core import errors
from gateway.core import mask_camel as _camel
from gateway.core import mask_project as project
from gateway.grpc.contract import Contract, ProtoField, ProtoMessage

__all__ = ["Tree", "parse", "parse_json", "project"]

Tree: TypeAlias = dict[str, "Tree | None"]
"""Selected fields: ``None`` selects a field whole, a dict selects inside it."""


def _lookup(msg: ProtoMessage, name: str) -> ProtoField | None:
    for candidate in (name, _camel(name)):
        for f in msg.fields:
            if f.name == candidate:
                return f
    return None


def _invalid(index: int, path: str, why: str) -> errors.Cause:
    return errors.Cause(
        "FieldValueInvalid", f'Invalid value: "{path}": {why}', f"read_mask.paths[{index}]"
    )


def parse(paths: Sequence[str], message: str, c: Contract) -> Tree | None:
    """The selection tree of ``paths`` on the message ``message``; ``None`` for an empty mask.

    Raises:
        InvalidParameter: a path names no field, or selects inside a scalar, map or Struct
            (one cause per bad path, field ``read_mask.paths[i]``).
    """
    if not paths:
        return None
    tree: Tree = {}
    causes: list[errors.Cause] = []
    for index, path in enumerate(paths):
        node: Tree = tree
        msg = c.messages[message]
        parts = path.split(".")
        for depth, part in enumerate(parts):
            f = _lookup(msg, part)
            if f is None:
                causes.append(_invalid(index, path, f"{msg.name} has no field {part!r}"))
                break
            if depth == len(parts) - 1:
                node[f.name] = None
                break
            target = c.messages.get(f.type)
            if target is None:
                causes.append(_invalid(index, path, f"cannot select inside {msg.name}.{f.name}"))
                break
            child = node.get(f.name, {})
            if child is None:
                break  # an earlier path selected the whole field
            node[f.name] = child
            node, msg = child, target
    if causes:
        raise errors.InvalidParameter(
            f"read_mask is invalid: {'; '.join(cause.message for cause in causes)}",
            causes=tuple(causes),
        )
    return tree


def parse_json(paths: Sequence[str]) -> Tree | None:
    """The selection tree of JSON field-name paths (no schema); ``None`` for an empty mask.

    Raises:
        InvalidParameter: a path with an empty segment (one cause per bad path).
    """
    if not paths:
        return None
    tree: Tree = {}
    causes: list[errors.Cause] = []
    for index, path in enumerate(paths):
        parts = path.split(".")
        if not all(parts):
            causes.append(_invalid(index, path, "a path is field names joined by '.'"))
            continue
        node: Tree | None = tree
        for depth, part in enumerate(parts):
            if node is None:
                break  # an earlier path selected the whole field
            if depth == len(parts) - 1:
                node[part] = None
            else:
                node = node.setdefault(part, {})
    if causes:
        raise errors.InvalidParameter(
            f"read_mask is invalid: {'; '.join(cause.message for cause in causes)}",
            causes=tuple(causes),
        )
    return tree
