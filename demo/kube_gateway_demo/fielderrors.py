"""Field-level validation errors, printed like ``k8s.io/apimachinery/pkg/util/validation/field``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

_OMIT: Final = object()

_TYPE_TEXT: Final[dict[str, str]] = {
    "FieldValueRequired": "Required value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueNotFound": "Not found",
    "FieldValueTooLong": "Too long",
    "FieldValueTypeInvalid": "Invalid value",
    "InternalError": "Internal error",
}


@dataclass(frozen=True, slots=True)
class FieldError:
    """One ``field.Error``: a type (the cause reason), a field path, a bad value, a detail."""

    type: str
    field: str
    bad_value: Any = _OMIT
    detail: str = ""

    def body(self) -> str:
        """``Error.ErrorBody()``: the message without the field path."""
        text = _TYPE_TEXT.get(self.type, self.type)
        if (
            self.type
            not in (
                "FieldValueRequired",
                "FieldValueForbidden",
                "FieldValueTooLong",
                "InternalError",
            )
            and self.bad_value is not _OMIT
        ):
            text = f"{text}: {go_value(self.bad_value)}"
        if self.detail:
            text = f"{text}: {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> dict[str, str]:
        """This error as a ``StatusCause``."""
        return {"reason": self.type, "message": self.body(), "field": self.field}


class RawValue(str):
    """A bad value printed verbatim (``%#v`` of a Go type, e.g. ``0x0`` for a uint64)."""

    __slots__ = ()


def go_value(value: Any) -> str:
    """Render a bad value the way ``ErrorBody`` does (``%q`` strings, ``%v`` numbers)."""
    if isinstance(value, RawValue):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, list | tuple):
        # newer apimachinery prints slices as JSON
        return "[" + ",".join(go_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return go_map(value)
    return go_quote(str(value))


def go_map(value: Any) -> str:
    """Go's ``%+v`` of a decoded JSON value (``map[a:1 b:map[c:d]]``)."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_map(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_map(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def go_quote(value: str) -> str:
    """Go's ``%q`` for a string (printable characters kept, the rest escaped)."""
    out = ['"']
    for ch in value:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) > 0xFF else f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def aggregate(errors: Sequence[FieldError]) -> str:
    """``ErrorList.ToAggregate().Error()``: one message, or ``[a, b]`` for several."""
    seen: list[str] = []
    for err in errors:
        text = str(err)
        if text not in seen:
            seen.append(text)
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"


def required(field: str, detail: str = "") -> FieldError:
    """``field.Required``."""
    return FieldError("FieldValueRequired", field, _OMIT, detail)


def invalid(field: str, value: Any, detail: str = "") -> FieldError:
    """``field.Invalid``."""
    return FieldError("FieldValueInvalid", field, value, detail)


def forbidden(field: str, detail: str) -> FieldError:
    """``field.Forbidden``."""
    return FieldError("FieldValueForbidden", field, _OMIT, detail)


def not_supported(field: str, value: Any, supported: Iterable[str]) -> FieldError:
    """``field.NotSupported``."""
    quoted = ", ".join(go_quote(s) for s in supported)
    return FieldError("FieldValueNotSupported", field, value, f"supported values: {quoted}")


def duplicate(field: str, value: Any) -> FieldError:
    """``field.Duplicate``."""
    return FieldError("FieldValueDuplicate", field, value)


def not_found(field: str, value: Any) -> FieldError:
    """``field.NotFound``."""
    return FieldError("FieldValueNotFound", field, value)


def too_long(field: str, max_length: int) -> FieldError:
    """``field.TooLong``."""
    return FieldError("FieldValueTooLong", field, _OMIT, f"may not be more than {max_length} bytes")
