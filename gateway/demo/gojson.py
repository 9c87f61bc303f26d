"""JSON decoding that fails and warns the way Go's ``encoding/json`` (and sigs.k8s.io/json)
does: the same error texts, and duplicate fields reported with their paths."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "bool",
    int: "number",
    float: "number",
}


class GoJSONError(ValueError):
    """A decode failure, with Go's message."""


@dataclass(slots=True)
class Decoded:
    """A decoded document and the duplicate fields it contained."""

    value: Any
    duplicates: list[str] = field(default_factory=list)


def json_type(value: Any) -> str:
    """Go's name for a JSON value's type (``object``, ``array``, ``string``...)."""
    if value is None:
        return "null"
    return _JSON_TYPES.get(type(value), "object")


def _quote_char(ch: str) -> str:
    if ch == "'":
        return "'\\''"
    if ch == '"':
        return "'\"'"
    if ch.isprintable():
        return f"'{ch}'"
    return "'" + json.dumps(ch)[1:-1] + "'"


def _context(text: str, pos: int) -> str:
    """The innermost open container at ``pos`` (``{``, ``[`` or ``""`` at top level)."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text[:pos]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def go_message(exc: json.JSONDecodeError) -> str:
    """Go's ``encoding/json`` message for the error Python's decoder raised."""
    text, pos = exc.doc, exc.pos
    if pos >= len(text) or exc.msg.startswith("Unterminated string"):
        return "unexpected end of JSON input"
    ch = _quote_char(text[pos])
    if exc.msg == "Expecting property name enclosed in double quotes":
        return f"invalid character {ch} looking for beginning of object key string"
    if exc.msg == "Expecting ':' delimiter":
        return f"invalid character {ch} after object key"
    if exc.msg == "Expecting ',' delimiter":
        if _context(text, pos) == "{":
            return f"invalid character {ch} after object key:value pair"
        return f"invalid character {ch} after array element"
    if exc.msg == "Extra data":
        return f"invalid character {ch} after top-level value"
    if exc.msg.startswith("Invalid control character"):
        return f"invalid character {ch} in string literal"
    if exc.msg.startswith("Invalid \\escape"):
        return f"invalid character {ch} in string escape code"
    literal = {"t": "true", "f": "false", "n": "null"}.get(text[pos])
    if literal is not None:
        for i, want in enumerate(literal):
            if pos + i >= len(text):
                return "unexpected end of JSON input"
            if text[pos + i] != want:
                return (
                    f"invalid character {_quote_char(text[pos + i])} in literal {literal} "
                    f"(expecting {_quote_char(want)})"
                )
    return f"invalid character {ch} looking for beginning of value"


class _Pairs(list[tuple[str, Any]]):
    """An object as decoded, before duplicates are resolved."""


def _resolve(value: Any, path: str, dups: list[str]) -> Any:
    if isinstance(value, _Pairs):
        out: dict[str, Any] = {}
        for key, item in value:
            sub = f"{path}.{key}" if path else key
            if key in out:
                dups.append(sub)
            out[key] = _resolve(item, sub, dups)
        return out
    if isinstance(value, list):
        return [_resolve(item, f"{path}[{i}]", dups) for i, item in enumerate(value)]
    return value


def loads(raw: bytes) -> Decoded:
    """Decode ``raw``, noting duplicate fields (the last value wins, as in Go).

    Raises:
        GoJSONError: with Go's message.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GoJSONError("invalid character in string literal") from None
    try:
        parsed = json.loads(text, object_pairs_hook=_Pairs)
    except json.JSONDecodeError as exc:
        raise GoJSONError(go_message(exc)) from None
    dups: list[str] = []
    value = _resolve(parsed, "", dups)
    return Decoded(value, dups)


def summarize(data: bytes, max_length: int = 30) -> str:
    """``summarizeData``: the body as text when it looks like an object, else hex."""
    if not data:
        return "<empty>"
    if data[:1] == b"{":
        if len(data) > max_length:
            return data[:max_length].decode("utf-8", "replace") + " ..."
        return data.decode("utf-8", "replace")
    if len(data) > max_length:
        return data[:max_length].hex() + " ..."
    return data.hex()
