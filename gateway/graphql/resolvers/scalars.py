"""The custom scalars of the GraphQL API and the Kubernetes wire types they stand for.

Each scalar is a ``NewType`` (what the generated annotations use) plus a
:class:`~strawberry.types.scalar.ScalarDefinition` in :data:`SCALAR_MAP` (what the schema
config maps it to).  Output values pass through unchanged: the upstream JSON already has the
wire shape, so the serialisers only guard against values of the wrong kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NewType

import strawberry
from graphql import GraphQLError
from strawberry.types.scalar import ScalarDefinition

from gateway.core import ScalarKind

Quantity = NewType("Quantity", str)
IntOrString = NewType("IntOrString", object)
Time = NewType("Time", str)
MicroTime = NewType("MicroTime", str)
Long = NewType("Long", int)
JSON = NewType("JSON", object)

_INT64 = (-(2**63), 2**63 - 1)


def _quantity_out(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise GraphQLError(f"Quantity cannot represent {value!r}")


def _quantity_in(value: Any) -> str:
    # Kubernetes accepts numbers for quantities in JSON ("cpu": 1) and canonicalises them.
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise GraphQLError(f"Quantity must be a string such as '500m' or '1Gi', not {value!r}")


def _int_or_string(value: Any) -> int | str:
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise GraphQLError(f"IntOrString must be an integer or a string, not {value!r}")


def _time(name: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if isinstance(value, str):
            return value
        raise GraphQLError(f"{name} must be an RFC 3339 string, not {value!r}")

    return convert


def _long(value: Any) -> int:
    if isinstance(value, bool):
        raise GraphQLError(f"Long cannot represent {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise GraphQLError(f"Long cannot represent {value!r}") from None
    if isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
        return value
    raise GraphQLError(f"Long must be a 64-bit integer, not {value!r}")


def _identity(value: Any) -> Any:
    return value


def _scalar(
    name: str,
    description: str,
    convert: Callable[[Any], Any],
    *,
    parse_value: Callable[[Any], Any] | None = None,
    specified_by_url: str | None = None,
) -> ScalarDefinition:
    """A scalar that ``convert`` checks both ways, unless input has a ``parse_value`` of its own."""
    return strawberry.scalar(
        name=name,
        description=description,
        specified_by_url=specified_by_url,
        serialize=convert,
        parse_value=parse_value or convert,
    )


SCALAR_MAP: Mapping[object, ScalarDefinition] = {
    Quantity: _scalar(
        "Quantity",
        "A Kubernetes resource quantity such as `500m`, `2` or `1Gi`.",
        _quantity_out,
        parse_value=_quantity_in,
        specified_by_url="https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/",
    ),
    IntOrString: _scalar(
        "IntOrString",
        "An integer or a string (a port number or a port name, `25%`...).",
        _int_or_string,
    ),
    Time: _scalar(
        "Time",
        "An RFC 3339 timestamp with second precision (`2024-01-02T03:04:05Z`).",
        _time("Time"),
    ),
    MicroTime: _scalar(
        "MicroTime", "An RFC 3339 timestamp with microsecond precision.", _time("MicroTime")
    ),
    Long: _scalar(
        "Long", "A 64-bit integer (GraphQL `Int` is 32-bit); also accepted as a string.", _long
    ),
    JSON: _scalar(
        "JSON",
        "Any JSON value: free-form maps, `RawExtension`, `FieldsV1`, raw objects.",
        _identity,
        specified_by_url="https://www.rfc-editor.org/rfc/rfc8259",
    ),
}

#: The Python annotation for each scalar kind of :mod:`gateway.core.model.schema`.
SCALAR_TYPES: Mapping[ScalarKind, object] = {
    "string": str,
    "int32": int,
    "int64": Long,
    "double": float,
    "boolean": bool,
    "bytes": str,  # base64 text on the JSON wire
    "quantity": Quantity,
    "int-or-string": IntOrString,
    "time": Time,
    "microtime": MicroTime,
    "json": JSON,
}
