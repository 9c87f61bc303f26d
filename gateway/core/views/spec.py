"""A view's spec: what a caller asks of a whole list, validated against the kind's field model.

A view names a kind, a namespace (or all), a filter tree, a free-text search, sort keys, a
page size, a cursor and the least resourceVersion it must reflect.  :func:`view_spec` turns
the front end's plain values (dicts, lists, strings: GraphQL input objects and, later, gRPC
messages come in as the same plain data) into a :class:`ViewSpec` whose every field path has
been resolved against the kind's schema (:mod:`gateway.core.model.schema`), so evaluation
never meets an unknown path.  Everything a caller can get wrong is refused here with
:class:`~gateway.core.errors.InvalidView` (``BAD_USER_INPUT``, ``INVALID_ARGUMENT``) and a
message that names the field: an unknown path with the nearest names ("did you mean"), a
path that ends on an object, a list or free-form JSON, a value of the wrong type, a page or
a filter past its cap, a cursor that is malformed or belongs to another sort.

The cursor is the sort key tuple of the last item of a page (keyset pagination), written as
base64url JSON with a digest of the sort it belongs to; it is validated, not signed: any
well-typed cursor is a position in the order and shows nothing the caller may not list.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import functools
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeAlias, cast

import orjson

from gateway.core import errors
from gateway.core.model.registry import Resource
from gateway.core.model.schema import ListOf, MapOf, ObjectType, Ref, Scalar, ScalarKind

#: Items per page: the default and the most a caller may ask.
DEFAULT_PAGE: Final = 50
MAX_PAGE: Final = 500
#: Filter nodes (conditions, and/or/not, selector requirements) in one view.
MAX_FILTER_NODES: Final = 64
#: Nesting of and/or/not.
MAX_FILTER_DEPTH: Final = 8
#: Values of one ``in``/``notIn``.
MAX_VALUES: Final = 100
#: Characters of one value, a search, a path, a selector.
MAX_TEXT: Final = 1024
#: Sort keys (the (namespace, name) tiebreaker comes on top).
MAX_SORT_KEYS: Final = 4
#: Characters of a cursor.
MAX_CURSOR: Final = 4096
#: Fields one view answer is counted by (gRPC's ``count_by``; GraphQL's ``counts`` fields
#: are bounded by the query's own limits).
MAX_COUNT_GROUPS: Final = 8

Op: TypeAlias = Literal[
    "eq", "ne", "in", "notIn", "prefix", "contains", "exists", "lt", "lte", "gt", "gte"
]
OPS: Final[frozenset[str]] = frozenset(
    ("eq", "ne", "in", "notIn", "prefix", "contains", "exists", "lt", "lte", "gt", "gte")
)
_TEXT_KINDS: Final = frozenset(("string", "bytes", "quantity", "int-or-string"))
_NUMBER_KINDS: Final = frozenset(("int32", "int64", "double"))
_TIME_KINDS: Final = frozenset(("time", "microtime"))

#: Looks an object type up by definition id (the kind's model).
TypeLookup: TypeAlias = Callable[[str], ObjectType]


def _refuse(message: str) -> errors.InvalidView:
    return errors.InvalidView(message)


# -- field paths -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldPath:
    """A field path resolved against the kind's schema.

    Attributes:
        text: the path as the caller wrote it (``metadata.labels.app``).
        keys: the JSON keys read, in order (a map's key is one, dots and all).
        kind: what the value is (:data:`~gateway.core.model.schema.ScalarKind`).
    """

    text: str
    keys: tuple[str, ...]
    kind: ScalarKind

    def read(self, obj: Any) -> Any:
        """The value at this path, or ``None`` where it is absent."""
        for key in self.keys:
            if type(obj) is not dict:
                return None
            obj = obj.get(key)
        return obj


def resolve_path(kind: ObjectType, path: str, lookup: TypeLookup) -> FieldPath:
    """``path`` (dot-separated JSON names) resolved in ``kind``.

    A map of scalars (``metadata.labels``) takes the rest of the path as its key
    (``metadata.labels.app.kubernetes.io/name``); a map of objects takes the next segment.

    Raises:
        InvalidView: unknown field (with the nearest names), a path through or ending on a
            list, an object or free-form JSON.
    """
    if not isinstance(path, str) or not path.strip():
        raise _refuse("a field path is empty: name a field, e.g. `metadata.name`")
    if len(path) > MAX_TEXT:
        raise _refuse(f"a field path is longer than {MAX_TEXT} characters")
    parts = path.split(".")
    t: ObjectType = kind
    keys: list[str] = []
    i = 0
    while i < len(parts):
        seg = parts[i]
        try:
            f = t.field(seg)
        except KeyError:
            names = [f.json_name for f in t.fields]
            where = ".".join(parts[:i]) or kind.short_name
            near = difflib.get_close_matches(seg, names, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(repr('.'.join([*parts[:i], n])) for n in near)}?"
            raise _refuse(
                f"unknown field {path!r}: {where} has no field {seg!r}"
                + (hint if near else f" (its fields: {', '.join(names[:20])})")
            ) from None
        keys.append(seg)
        ref = f.type
        done = ".".join(parts[: i + 1])
        i += 1
        if isinstance(ref, MapOf):
            if i >= len(parts):
                raise _refuse(
                    f"field {done!r} is a map, not a scalar: name one of its keys, "
                    f"e.g. `{done}.<key>`"
                )
            if isinstance(ref.value, Scalar):
                keys.append(".".join(parts[i:]))
                return _scalar_path(path, keys, ref.value, path)
            keys.append(parts[i])
            i += 1
            ref = ref.value
        if isinstance(ref, ListOf):
            raise _refuse(
                f"field {done!r} is a list: views filter, sort and count by scalar fields "
                "only (not through lists)"
            )
        if isinstance(ref, Scalar):
            if i < len(parts):
                raise _refuse(f"field {done!r} is a scalar: it has no field {parts[i]!r}")
            return _scalar_path(path, keys, ref, done)
        if isinstance(ref, Ref):
            t = lookup(ref.type_name)
            if i >= len(parts):
                first = t.fields[0].json_name if t.fields else "name"
                raise _refuse(
                    f"field {done!r} is an object ({t.short_name}), not a scalar: name one "
                    f"of its fields, e.g. `{done}.{first}`"
                )
            continue
        raise _refuse(f"field {done!r} is not a scalar")
    raise _refuse(f"field {path!r} is not a scalar")  # pragma: no cover (loop returns)


def _scalar_path(text: str, keys: list[str], scalar: Scalar, done: str) -> FieldPath:
    if scalar.kind == "json":
        raise _refuse(
            f"field {done!r} holds free-form JSON, not a scalar: views filter, sort and count "
            "by scalar fields only"
        )
    return FieldPath(text, tuple(keys), scalar.kind)


# -- values ------------------------------------------------------------------------------------


def typed_value(path: FieldPath, value: Any) -> Any:
    """A caller's value (a string, as GraphQL sends it) as the field's type compares it.

    Numbers compare as numbers, timestamps as instants (normalised to the form Kubernetes
    writes, UTC, so that they compare as stored), booleans as booleans.

    Raises:
        InvalidView: the value is not of the field's type.
    """
    if value is None:
        raise _refuse(f"the condition on {path.text!r} needs a value")
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    if len(text) > MAX_TEXT:
        raise _refuse(f"a value for {path.text!r} is longer than {MAX_TEXT} characters")
    kind = path.kind
    if kind in _NUMBER_KINDS:
        try:
            number = float(text) if kind == "double" else int(text)
        except ValueError:
            raise _refuse(
                f"field {path.text!r} is a number ({kind}): {text[:64]!r} is not one"
            ) from None
        return number
    if kind == "boolean":
        if text not in ("true", "false"):
            raise _refuse(f"field {path.text!r} is a boolean: give `true` or `false`")
        return text == "true"
    if kind in _TIME_KINDS:
        try:
            at = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise _refuse(
                f"field {path.text!r} is a timestamp: {text[:64]!r} is not RFC 3339 "
                "(e.g. 2026-01-02T15:04:05Z)"
            ) from None
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        at = at.astimezone(UTC)
        if kind == "microtime":
            return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return text


# -- the filter tree -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Condition:
    """``path op value(s)``; ``values`` are typed (:func:`typed_value`)."""

    path: FieldPath
    op: Op
    values: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class AllOf:
    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class NoneOf:
    part: Node


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One requirement of a label selector (the apiserver's semantics)."""

    key: str
    op: Literal["=", "!=", "in", "notin", "exists", "!"]
    values: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    """One requirement of a field selector: the field's value as text, ``""`` when absent."""

    path: FieldPath
    equal: bool
    value: str


Node: TypeAlias = Condition | AllOf | AnyOf | NoneOf | LabelRequirement | FieldRequirement

_FILTER_KEYS: Final = frozenset(
    ("and", "or", "not", "field", "op", "value", "values", "labelSelector", "fieldSelector")
)


class _Budget:
    def __init__(self) -> None:
        self.nodes = 0

    def take(self, n: int = 1) -> None:
        self.nodes += n
        if self.nodes > MAX_FILTER_NODES:
            raise _refuse(
                f"the filter is too complex: more than {MAX_FILTER_NODES} conditions "
                "(and/or/not and selector requirements count)"
            )


def compile_filter(raw: Any, kind: ObjectType, lookup: TypeLookup) -> Node | None:
    """The filter tree of a view from plain data.

    ``raw`` is a mapping with any of ``and``/``or`` (lists of filters), ``not`` (a filter),
    ``field`` + ``op`` + ``value``/``values`` (a condition), ``labelSelector``,
    ``fieldSelector`` (strings with the apiserver's syntax); several keys in one mapping
    are ANDed.

    Raises:
        InvalidView: anything malformed, unknown or past the caps.
    """
    if raw is None:
        return None
    return _node(raw, kind, lookup, _Budget(), 1)


def _node(raw: Any, kind: ObjectType, lookup: TypeLookup, budget: _Budget, depth: int) -> Node:
    if depth > MAX_FILTER_DEPTH:
        raise _refuse(f"the filter is nested deeper than {MAX_FILTER_DEPTH} levels")
    if not isinstance(raw, Mapping):
        raise _refuse("a filter is an object: {field, op, value}, {and: [...]}, ...")
    raw = {k: v for k, v in raw.items() if v is not None}
    unknown = set(raw) - _FILTER_KEYS
    if unknown:
        raise _refuse(f"unknown filter key {sorted(unknown)[0]!r}")
    budget.take()
    parts: list[Node] = []
    for key in ("and", "or"):
        if key in raw:
            items = raw[key]
            if not isinstance(items, Sequence) or isinstance(items, str | bytes):
                raise _refuse(f"`{key}` takes a list of filters")
            inner = tuple(_node(x, kind, lookup, budget, depth + 1) for x in items)
            parts.append(AllOf(inner) if key == "and" else AnyOf(inner))
    if "not" in raw:
        parts.append(NoneOf(_node(raw["not"], kind, lookup, budget, depth + 1)))
    if "field" in raw or "op" in raw:
        parts.append(_condition(raw, kind, lookup, budget))
    elif "value" in raw or "values" in raw:
        raise _refuse("a `value` needs a `field` and an `op`")
    if "labelSelector" in raw:
        parts.extend(parse_label_selector(raw["labelSelector"], budget))
    if "fieldSelector" in raw:
        parts.extend(parse_field_selector(raw["fieldSelector"], kind, lookup, budget))
    if not parts:
        raise _refuse("an empty filter: give a condition, `and`, `or`, `not` or a selector")
    return parts[0] if len(parts) == 1 else AllOf(tuple(parts))


def _condition(raw: Mapping[str, Any], kind: ObjectType, lookup: TypeLookup, b: _Budget) -> Node:
    if "field" not in raw:
        raise _refuse("a condition needs a `field`")
    given = raw.get("op") or "eq"
    given = getattr(given, "value", given)  # an enum whose values are the ops (GraphQL's)
    if given not in OPS:
        raise _refuse(f"unknown op {str(given)[:32]!r}: one of {', '.join(sorted(OPS))}")
    op = cast(Op, given)
    path = resolve_path(kind, raw["field"], lookup)
    if op in ("in", "notIn"):
        values = raw.get("values")
        if values is None or isinstance(values, str) or not isinstance(values, Sequence):
            raise _refuse(f"`{op}` on {path.text!r} takes `values`, a list")
        if len(values) > MAX_VALUES:
            raise _refuse(f"`{op}` on {path.text!r} has more than {MAX_VALUES} values")
        b.take(max(0, len(values) // 10))
        return Condition(path, op, tuple(typed_value(path, v) for v in values))
    if "values" in raw:
        raise _refuse(f"`values` is for `in` and `notIn`; `{op}` takes `value`")
    if op == "exists":
        wanted = raw.get("value", "true")
        if wanted not in ("true", "false", True, False):
            raise _refuse(f"`exists` on {path.text!r} takes `true` (the default) or `false`")
        return Condition(path, op, (wanted in ("true", True),))
    if op in ("prefix", "contains") and path.kind not in _TEXT_KINDS:
        raise _refuse(
            f"`{op}` compares text; field {path.text!r} is {path.kind}: use eq, lt, gt..."
        )
    return Condition(path, op, (typed_value(path, raw.get("value")),))


_LABEL_KEY = re.compile(
    r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?)?$")
_SET = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*(?:(notin|in)\s*\(([^()]*)\)\s*)?$")
_EQ = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")


def _split_selector(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def parse_label_selector(text: Any, budget: _Budget | None = None) -> list[LabelRequirement]:
    """A label selector as the apiserver reads it (``a=b``, ``a==b``, ``a!=b``,
    ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``).

    Raises:
        InvalidView: the selector does not parse (the message quotes the bad part).
    """
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise _refuse(f"`labelSelector` is a string of at most {MAX_TEXT} characters")
    budget = budget or _Budget()
    found: list[LabelRequirement] = []
    if not text.strip():
        return found
    for part in _split_selector(text):
        budget.take()
        eq = _EQ.match(part)
        if eq is not None:
            key, op, value = eq.groups()
            _label(key, value, part)
            found.append(LabelRequirement(key, "!=" if op == "!=" else "=", frozenset((value,))))
            continue
        m = _SET.match(part)
        if m is None:
            raise _refuse(f"`labelSelector` does not parse at {part.strip()[:64]!r}")
        bang, key, op, values = m.groups()
        if bang and op:
            raise _refuse(f"`labelSelector` does not parse at {part.strip()[:64]!r}")
        if op:
            items = frozenset(v.strip() for v in values.split(",") if v.strip())
            for v in items:
                _label(key, v, part)
            if not items:
                raise _refuse(f"`labelSelector`: {op} needs values at {part.strip()[:64]!r}")
            found.append(LabelRequirement(key, "in" if op == "in" else "notin", items))
        else:
            _label(key, "", part)
            found.append(LabelRequirement(key, "!" if bang else "exists"))
    return found


def _label(key: str, value: str, part: str) -> None:
    if not _LABEL_KEY.match(key) or len(key.rpartition("/")[2]) > 63:
        raise _refuse(f"`labelSelector`: {key[:64]!r} is not a valid label key")
    if not _LABEL_VALUE.match(value) or len(value) > 63:
        raise _refuse(f"`labelSelector`: {value[:64]!r} is not a valid label value")


def parse_field_selector(
    text: Any, kind: ObjectType, lookup: TypeLookup, budget: _Budget | None = None
) -> list[FieldRequirement]:
    """A field selector (``path=value``, ``path==value``, ``path!=value``, comma-ANDed),
    each path resolved in the kind (any scalar field, not only those the apiserver indexes).

    Raises:
        InvalidView: the selector does not parse, or names an unknown field.
    """
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise _refuse(f"`fieldSelector` is a string of at most {MAX_TEXT} characters")
    budget = budget or _Budget()
    found: list[FieldRequirement] = []
    if not text.strip():
        return found
    for part in text.split(","):
        budget.take()
        m = re.match(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if m is None:
            raise _refuse(f"`fieldSelector` does not parse at {part.strip()[:64]!r}")
        key, op, value = m.groups()
        found.append(FieldRequirement(resolve_path(kind, key, lookup), op != "!=", value))
    return found


# -- sort, cursor, spec --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SortKey:
    path: FieldPath
    descending: bool = False


def compile_sort(raw: Any, kind: ObjectType, lookup: TypeLookup) -> tuple[SortKey, ...]:
    """Sort keys from ``[{field, order}]`` (``order``: ``asc``/``desc``, any case).

    Raises:
        InvalidView: too many keys, an unknown order, a path that is not a scalar.
    """
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise _refuse("`sort` is a list of {field, order}")
    if len(raw) > MAX_SORT_KEYS:
        raise _refuse(f"`sort` has more than {MAX_SORT_KEYS} keys")
    keys = []
    for item in raw:
        if not isinstance(item, Mapping) or "field" not in item:
            raise _refuse("a sort key is {field, order}")
        order = item.get("order") or "asc"
        order = str(getattr(order, "value", order)).lower()  # an enum of asc/desc too
        if order not in ("asc", "desc"):
            raise _refuse(f"a sort order is ASC or DESC, not {order[:16]!r}")
        keys.append(SortKey(resolve_path(kind, item["field"], lookup), order == "desc"))
    return tuple(keys)


Position: TypeAlias = tuple[Any, ...]
"""A place in a view's order: the sort keys' values (``(rank, value)`` each, see
:func:`gateway.core.views.evaluate.sort_value`), then namespace and name."""


@functools.lru_cache(maxsize=256)
def sort_digest(sort: tuple[SortKey, ...]) -> str:
    """The digest of a sort a cursor carries (once per sort: every cursor of a page)."""
    text = ";".join(f"{k.path.text}:{'d' if k.descending else 'a'}" for k in sort)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def encode_cursor(sort: tuple[SortKey, ...], position: Position) -> str:
    """The opaque cursor of ``position`` in an order by ``sort``."""
    payload = orjson.dumps([sort_digest(sort), *position])
    return base64.urlsafe_b64encode(payload).decode().rstrip("=")


def decode_cursor(sort: tuple[SortKey, ...], cursor: Any) -> Position:
    """The position a cursor names, checked against this view's sort.

    Raises:
        InvalidView: malformed, of another sort, or with values of the wrong shape.
    """
    bad = (
        "`after` is not a cursor of this view (malformed, edited, or from another sort): "
        "take `pageInfo.endCursor` of this view's last page, or start again without `after`"
    )
    if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_CURSOR:
        raise _refuse(bad)
    try:
        data = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise _refuse(bad) from None
    if not isinstance(data, list) or len(data) != len(sort) + 3 or data[0] != sort_digest(sort):
        raise _refuse(bad)
    keys = data[1 : 1 + len(sort)]
    namespace, name = data[-2], data[-1]
    if not isinstance(namespace, str) or not isinstance(name, str):
        raise _refuse(bad)
    position: list[Any] = []
    for key in keys:
        if (
            not isinstance(key, list)
            or len(key) != 2
            or key[0] not in (0, 1, 2)
            or not isinstance(key[1], str | int | float | bool)
        ):
            raise _refuse(bad)
        position.append((key[0], key[1]))
    return (*position, namespace, name)


@dataclass(frozen=True, slots=True)
class ViewSpec:
    """A validated view of one kind.

    Attributes:
        resource: the kind's resource.
        namespace: one namespace, or ``None`` for all (cluster-scoped kinds: ``None``).
        filter: the filter tree, or ``None``.
        search: lower-cased free text matched against name, namespace, labels and
            annotations (keys and values), or ``None``.
        sort: the sort keys; (namespace, name) ascending breaks ties.
        first: the page size (0: no items, only total and counts).
        after: the position after which the page starts.
        min_resource_version: the least resourceVersion the answer must reflect.
    """

    resource: Resource
    namespace: str | None
    filter: Node | None = None
    search: str | None = None
    sort: tuple[SortKey, ...] = ()
    first: int = DEFAULT_PAGE
    after: Position | None = None
    min_resource_version: str | None = None

    @property
    def order_key(self) -> tuple[Any, ...]:
        """What the order of the matching items depends on (not the page)."""
        return (self.filter, self.search, self.sort)


def view_spec(
    resource: Resource,
    kind: ObjectType,
    lookup: TypeLookup,
    *,
    namespace: str | None = None,
    filter: Any = None,
    search: str | None = None,
    sort: Any = None,
    first: int | None = None,
    after: str | None = None,
    min_resource_version: str | None = None,
) -> ViewSpec:
    """A view's spec from a caller's plain values, validated against ``kind``.

    Raises:
        InvalidView: anything the caller got wrong (see the module).
    """
    if first is None:
        first = DEFAULT_PAGE
    if not isinstance(first, int) or first < 0 or first > MAX_PAGE:
        raise _refuse(f"`first` is a page size from 0 to {MAX_PAGE}; {first} is not")
    if search is not None:
        if not isinstance(search, str) or len(search) > MAX_TEXT:
            raise _refuse(f"`search` is text of at most {MAX_TEXT} characters")
        search = search.strip().lower() or None
    if min_resource_version is not None and not (
        isinstance(min_resource_version, str) and min_resource_version.isdigit()
    ):
        raise _refuse("`minResourceVersion` is a resourceVersion this gateway answered with")
    keys = compile_sort(sort, kind, lookup)
    return ViewSpec(
        resource=resource,
        namespace=namespace if resource.namespaced else None,
        filter=compile_filter(filter, kind, lookup),
        search=search,
        sort=keys,
        first=first,
        after=decode_cursor(keys, after) if after is not None else None,
        min_resource_version=min_resource_version,
    )
