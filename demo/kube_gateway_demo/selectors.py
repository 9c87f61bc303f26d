"""Label and field selectors with the apiserver's grammar, matching rules and errors."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kube_gateway_demo.fielderrors import FieldError, aggregate, invalid
from kube_gateway_demo.status import bad_request

_LABEL_VALUE_RE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME_RE: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS1123_SUBDOMAIN_RE: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)

LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
QUALIFIED_NAME_MSG: Final = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def label_value_errors(value: str) -> list[str]:
    """``validation.IsValidLabelValue``."""
    errs: list[str] = []
    if len(value.encode()) > 63:
        errs.append("must be no more than 63 bytes")
    if not _LABEL_VALUE_RE.match(value):
        errs.append(LABEL_VALUE_MSG)
    return errs


def qualified_name_errors(value: str, *, what: str = "a qualified name") -> list[str]:
    """``validation.IsQualifiedName`` (label and annotation keys)."""
    parts = value.split("/")
    errs: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        elif len(prefix.encode()) > 253:
            errs.append("prefix part must be no more than 253 bytes")
        elif not DNS1123_SUBDOMAIN_RE.match(prefix):
            errs.append("prefix part " + DNS1123_SUBDOMAIN_MSG)
    else:
        return [
            f"{what} must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name.encode()) > 63:
        errs.append("name part must be no more than 63 bytes")
    if not _QUALIFIED_NAME_RE.match(name):
        errs.append(QUALIFIED_NAME_MSG)
    return errs


# --- label selectors -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Requirement:
    """One label requirement: ``key op values``."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """``Requirement.Matches``: ``!=`` and ``notin`` match objects without the key."""
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        try:
            have = int(labels[self.key])
        except ValueError:
            return False
        bound = int(next(iter(self.values)))
        return have > bound if self.op == "gt" else have < bound


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether every requirement holds for ``labels``."""
        if not self.requirements:
            return True
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    @property
    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.requirements


_SPECIAL: Final = "!=(),<>"
_OPERATORS: Final = "in, notin, =, ==, !=, gt, lt"


def _lex(text: str) -> list[str]:
    """Tokens of a label selector (``""`` stands for the end of the string)."""
    tokens: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch in _SPECIAL:
            two = text[i : i + 2]
            if two in ("!=", "=="):
                tokens.append(two)
                i += 2
            else:
                tokens.append(ch)
                i += 1
            continue
        start = i
        while i < len(text) and not text[i].isspace() and text[i] not in _SPECIAL:
            i += 1
        tokens.append(text[start:i])
    return tokens


def _ident(tok: str) -> bool:
    return tok != "" and tok not in ("!", "!=", "==", "=", "(", ")", ",", "<", ">")


class _Parser:
    """``labels.Parse``, structured as apimachinery's parser so its errors read the same."""

    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.pos = 0

    def peek(self) -> str:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ""

    def take(self) -> str:
        tok = self.peek()
        self.pos += 1
        return tok

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok = self.peek()
            if _ident(tok) or tok == "!":
                try:
                    reqs.append(self.requirement())
                except _ParseError as exc:
                    raise bad_request(f"unable to parse requirement: {exc}") from None
                nxt = self.take()
                if nxt == "":
                    return reqs
                if nxt == ",":
                    after = self.peek()
                    if not (_ident(after) or after == "!"):
                        raise bad_request(f"found '{after}', expected: identifier after ','")
                else:
                    raise bad_request(f"found '{nxt}', expected: ',' or 'end of string'")
            elif tok == "":
                return reqs
            else:
                raise bad_request(f"found '{tok}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> Requirement:
        negate = False
        tok = self.take()
        if tok == "!":
            negate = True
            tok = self.take()
        if not _ident(tok):
            raise _ParseError(f"found '{tok}', expected: identifier")
        key = tok
        key_errs = qualified_name_errors(key, what="a valid label key")
        if key_errs:
            raise _ParseError(str(invalid("<nil>", key, "; ".join(key_errs))))
        if negate:
            return _requirement(key, "!", [])
        if self.peek() in ("", ","):
            return _requirement(key, "exists", [])
        op_tok = self.take()
        ops = {"in": "in", "notin": "notin", "=": "=", "==": "=", "!=": "!=", ">": "gt", "<": "lt"}
        if op_tok not in ops:
            raise _ParseError(f"found '{op_tok}', expected: {_OPERATORS}")
        op = ops[op_tok]
        values = self.values() if op in ("in", "notin") else self.exact_value()
        return _requirement(key, op, values)

    def values(self) -> list[str]:
        tok = self.take()
        if tok != "(":
            raise _ParseError(f"found '{tok}' expected: '('")
        tok = self.peek()
        if tok == ")":
            self.take()
            return [""]
        if not (_ident(tok) or tok == ","):
            raise _ParseError(f"found '{tok}', expected: ',', ')' or identifier")
        found: list[str] = []
        while True:
            tok = self.take()
            if _ident(tok):
                found.append(tok)
                nxt = self.peek()
                if nxt == ",":
                    continue
                if nxt == ")":
                    self.take()
                    return found
                raise _ParseError(f"found '{nxt}', expected: ',' or ')'")
            if tok == ",":
                if not found:
                    found.append("")
                nxt = self.peek()
                if nxt == ")":
                    self.take()
                    found.append("")
                    return found
                if nxt == ",":
                    self.take()
                    found.append("")
                continue
            raise _ParseError(f"found '{tok}', expected: ',' or ')'")

    def exact_value(self) -> list[str]:
        tok = self.peek()
        if tok in ("", ","):
            return [""]
        tok = self.take()
        if _ident(tok):
            return [tok]
        raise _ParseError(f"found '{tok}', expected: identifier")


class _ParseError(Exception):
    pass


def parse_label_selector(text: str) -> LabelSelector:
    """``labels.Parse``: ``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``, ``>``, ``<``.

    Raises:
        DemoApiError: 400 BadRequest with the parser's message.
    """
    reqs = _Parser(text).parse()
    return LabelSelector(tuple(sorted(reqs, key=lambda r: r.key)))


def _requirement(key: str, op: str, values: list[str]) -> Requirement:
    errs: list[FieldError] = []
    if op in ("gt", "lt"):
        try:
            int(values[0])
        except ValueError:
            errs.append(
                invalid(
                    "values[0]", values[0], "for 'Gt', 'Lt' operators, the value must be an integer"
                )
            )
    else:
        for i, v in enumerate(values):
            for msg in label_value_errors(v):
                errs.append(invalid(f"values[{i}][{key}]", v, msg))
    if errs:
        raise _ParseError(aggregate(errs))
    return Requirement(key, op, frozenset(values))


# --- field selectors -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldTerm:
    """One field requirement: ``field=value`` or ``field!=value``."""

    field: str
    value: str
    negate: bool


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """A parsed field selector, checked against the resource's selectable fields."""

    terms: tuple[FieldTerm, ...] = ()

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Whether every term holds for ``fields`` (absent fields read as ``""``)."""
        for t in self.terms:
            have = fields.get(t.field, "")
            if (have == t.value) == t.negate:
                return False
        return True

    @property
    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.terms

    def exact(self, field: str) -> str | None:
        """The value a ``field=value`` term pins, if any (``metadata.name`` for one object)."""
        for t in self.terms:
            if t.field == field and not t.negate:
                return t.value
        return None


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            cur.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if escaped:
        cur.append("\\")
    parts.append("".join(cur))
    return parts


def _unescape(value: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value) and value[i + 1] in "\\,=":
            out.append(value[i + 1])
            i += 2
            continue
        if ch == "\\":
            raise ValueError(f"invalid escape sequence: {value[i : i + 2]}")
        if ch in "=,":
            raise ValueError(f"unescaped character in value: {ord(ch)}")
        out.append(ch)
        i += 1
    return "".join(out)


def _find_unescaped(text: str, needle: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(needle, i):
            return i
        i += 1
    return -1


def parse_field_selector(text: str, supported: frozenset[str]) -> FieldSelector:
    """``fields.ParseSelector`` plus the resource's field-label conversion.

    Raises:
        DemoApiError: 400 for bad syntax or a field the resource does not index.
    """
    text = text.strip()
    if not text:
        return FieldSelector()
    terms: list[FieldTerm] = []
    for part in _split_unescaped(text, ","):
        for op in ("!=", "==", "="):
            idx = _find_unescaped(part, op)
            if idx >= 0:
                field, raw = part[:idx], part[idx + len(op) :]
                try:
                    value = _unescape(raw)
                except ValueError as exc:
                    raise bad_request(f"invalid field selector: {exc}") from None
                terms.append(FieldTerm(field.strip(), value, op == "!="))
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
    for t in terms:
        if t.field not in supported:
            raise bad_request(f"field label not supported: {t.field}")
    return FieldSelector(tuple(terms))


FieldsFunc = Callable[[dict[str, Any]], dict[str, str]]


def meta_fields(obj: dict[str, Any], namespaced: bool) -> dict[str, str]:
    """``generic.ObjectMetaFieldsSet``: ``metadata.name`` (and ``metadata.namespace``)."""
    meta = obj.get("metadata") or {}
    out = {"metadata.name": str(meta.get("name", ""))}
    if namespaced:
        out["metadata.namespace"] = str(meta.get("namespace", ""))
    return out
