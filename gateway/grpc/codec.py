"""JSON dict <-> message conversion, fast enough for lists of thousands of pods.

Decoded upstream JSON feeds the (upb, C) message constructor directly: the contract keeps the
Kubernetes JSON field names, so ``Pod(**pod_dict)`` builds the whole tree in C.  The codec's
main output is the *wire bytes* of the answer (what the server sends), built in three steps:

1. A per-message *plan*, computed once from the schema, visits only the paths that need
   something: ``int-or-string`` values (``"port": 8080`` is a string field in the contract)
   become strings, and free-form JSON values (``google.protobuf.Struct``, e.g.
   ``metadata.managedFields[].fieldsV1``) are taken out of the dict.  Dicts are copied only
   where they change; the input is never mutated.
2. The message constructor builds the rest in C, and ``SerializeToString`` writes it.
3. The taken-out JSON is appended as wire bytes (:mod:`gateway.core.lists.protowire`): a
``Struct`` built
   through the Python API costs more than decoding the whole pod, its encoding costs little
   and is cached.  Protobuf merges a repeated occurrence of a message field, so the appended
   bytes land inside the right sub-message; a list that holds JSON somewhere below is
   encoded element by element.

Fields the contract does not know (an upstream newer than the schema) make the constructor
refuse the dict (``ValueError``); only then does the object take the *tolerant* path, a full
walk that drops unknown fields (logged once per field) and coerces or drops values of the
wrong JSON type, so one odd object costs a slower conversion, never an error.

The reverse direction (requests that carry an object) walks the message's set fields; it
turns ``int-or-string`` digits back into JSON numbers and whole ``Struct`` numbers back into
integers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from google.protobuf import struct_pb2
from google.protobuf.message import Message

from gateway.core import (
    ListEncoding,
    ListOf,
    MapOf,
    Ref,
    Scalar,
    StructCache,
    TypeRef,
    WatchEvent,
    encode_now,
    field_tag,
    length_prefixed,
    schema,
    varint,
)
from gateway.grpc import mask as masks
from gateway.grpc.contract import STRUCT, Contract, contract
from gateway.grpc.messages import message_class

__all__ = ["Codec", "codec", "struct_json"]

log = logging.getLogger(__name__)

JSON = dict[str, Any]

# plan operations
_IOS: Final = 0  # int-or-string: a JSON number becomes its decimal string
_JSON: Final = 1  # free-form JSON: encoded as Struct wire bytes
_MSG: Final = 2  # a message that needs something below
_LIST_MSG: Final = 3  # a list of such messages
_MAP_MSG: Final = 4  # a map of such messages

_DROP: Final = object()
_INT32: Final = range(-(2**31), 2**31)
_INT64: Final = range(-(2**63), 2**63)
_DIGITS: Final = frozenset("0123456789")

#: Items of a large list encoded between two yields to the event loop (~0.3-0.5 ms of
#: realistic pods on one core).  Small: a small request waits about one slice at each of the
#: 15-20 loop turns it takes, so its latency grows by ~20 slices while lists convert
#: (measured with ``tests/bench/bench_loop_hold.py``: 50 items per slice kept small gets'
#: p99 at 5-15x idle, 5 items at 2-8x), while ~1,000 yields add no measurable time to the
#: list itself.
LIST_SLICE: Final = 5

#: (field, operation, message, tag, JSON below) entries of one message's plan.
PlanEntry = tuple[str, int, str, bytes, bool]
Converter = Callable[[Any], Any]
#: A compiled plan: the dict for the constructor, and the wire bytes to append.
Fixer = Callable[[JSON], tuple[JSON, bytes]]


def _fixer_source(
    number: int, name: str, plan: tuple[PlanEntry, ...], index: dict[str, int]
) -> str:
    """The source of ``fix_<number>(d)`` for one message's plan.

    ``out`` is copied from ``d`` on the first change only; ``tail`` collects wire bytes of
    values taken out of the dict (Struct, string maps, lists that hold JSON below).
    """
    lines = [f"def fix_{number}(d):", "    out = d", "    tail = b''"]

    def emit(depth: int, *code: str) -> None:
        lines.extend("    " * depth + c for c in code)

    def cow(depth: int) -> None:
        emit(depth, "if out is d:")
        emit(depth + 1, "out = dict(d)")

    for key, op, sub, tag, json_below in plan:
        k, t, where = repr(key), repr(tag), repr(f"{name}.{key}")
        fix = f"fix_{index[sub]}" if sub else ""
        emit(1, f"v = d.get({k})")
        if op == _IOS:
            emit(1, "if v.__class__ is int:")
            cow(2)
            emit(2, f"out[{k}] = str(v)")
            continue
        emit(1, "if v is not None:")
        if op == _JSON or (op == _MAP_MSG and json_below):
            # taken out of the dict, written as wire bytes
            cow(2)
            emit(2, f"del out[{k}]")
            if op == _JSON:
                emit(2, "if v.__class__ is dict:")
                emit(3, "b = struct(v)", f"tail += {t} + varint(len(b)) + b")
            else:  # map entries are messages {1: key, 2: value}
                emit(2, "if v.__class__ is dict:")
                emit(3, "for mk, x in v.items():")
                emit(4, "if x.__class__ is dict:")
                emit(
                    5,
                    "kb = str(mk).encode()",
                    f"b = encode(x, {sub!r})",
                    "e = b'\\n' + varint(len(kb)) + kb + b'\\x12' + varint(len(b)) + b",
                    f"tail += {t} + varint(len(e)) + e",
                )
            emit(2, "else:")
            emit(3, f"drop({where}, v)")
            continue
        if op == _LIST_MSG and json_below:
            # Elements keep their place in the dict unless one of them has wire bytes to
            # append: then the whole list is written element by element, in order.
            emit(2, "if v.__class__ is list:")
            emit(3, f"fixed = [{fix}(x) if x.__class__ is dict else (x, b'') for x in v]")
            emit(3, "if any(tl for _, tl in fixed):")
            cow(4)
            emit(4, f"del out[{k}]", "for y, tl in fixed:")
            emit(5, "if y.__class__ is dict:")
            emit(6, f"b = classes[{sub!r}](**y).SerializeToString() + tl")
            emit(6, f"tail += {t} + varint(len(b)) + b")
            emit(3, "elif any(y is not x for (y, _), x in zip(fixed, v)):")
            cow(4)
            emit(4, f"out[{k}] = [y for y, _ in fixed]")
            continue
        if op == _MSG:
            emit(2, "if v.__class__ is dict:")
            emit(3, f"nv, t = {fix}(v)", "if t:")
            emit(4, f"tail += {t} + varint(len(t)) + t")
            emit(3, "if nv is not v:")
            cow(4)
            emit(4, f"out[{k}] = nv")
        elif op == _LIST_MSG:
            emit(2, "if v.__class__ is list:")
            emit(3, "nv = None", "for i, x in enumerate(v):")
            emit(4, "if x.__class__ is dict:")
            emit(5, f"y = {fix}(x)[0]", "if y is not x:")
            emit(6, "if nv is None:")
            emit(7, "nv = list(v)")
            emit(6, "nv[i] = y")
            emit(3, "if nv is not None:")
            cow(4)
            emit(4, f"out[{k}] = nv")
        else:  # _MAP_MSG
            emit(2, "if v.__class__ is dict:")
            entry = f"{fix}(x)[0] if x.__class__ is dict else x"
            emit(3, f"nv = {{mk: {entry} for mk, x in v.items()}}")
            emit(3, "if any(nv[mk] is not v[mk] for mk in v):")
            cow(4)
            emit(4, f"out[{k}] = nv")
    emit(1, "return out, tail")
    return "\n".join(lines) + "\n"


def _ios_to_json(value: str) -> str | int:
    """An int-or-string travels as a string; digits go back upstream as a JSON number."""
    body = value[1:] if value[:1] == "-" else value
    if body and len(body) <= 18 and set(body) <= _DIGITS:
        return int(value)
    return value


def _struct_value(v: struct_pb2.Value) -> Any:
    which = v.WhichOneof("kind")
    if which == "struct_value":
        return struct_json(v.struct_value)
    if which == "list_value":
        return [_struct_value(x) for x in v.list_value.values]
    if which == "number_value":
        n = v.number_value
        return int(n) if n.is_integer() and abs(n) < 2**53 else n
    if which == "string_value":
        return v.string_value
    if which == "bool_value":
        return v.bool_value
    return None


def struct_json(s: struct_pb2.Struct) -> JSON:
    """The JSON object of a ``Struct`` (whole numbers back as integers)."""
    return {k: _struct_value(v) for k, v in s.fields.items()}


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


class Codec:
    """Converts between upstream JSON and the messages of one contract.

    Args:
        c: the contract (its object messages mirror :mod:`gateway.core.model.schema`).
    """

    def __init__(self, c: Contract) -> None:
        self.contract = c
        self._classes: dict[str, Any] = {name: message_class(name, c) for name in c.messages}
        self._types = {
            name: schema.object_type(m.schema_type)
            for name, m in c.messages.items()
            if m.schema_type is not None
        }
        self.structs = StructCache()
        self._plans: dict[str, tuple[PlanEntry, ...]] = {}
        self._json_below: dict[str, bool] = {}
        self._ios: dict[str, frozenset[str]] = {}
        self._tolerant: dict[str, dict[str, Converter]] = {}
        self._warned: set[tuple[str, str]] = set()
        self._build_plans()
        self._fixers = self._compile()
        self._kinds = {
            kind: (obj, lst, self._classes[obj], self._classes[lst])
            for kind, (obj, lst) in c.kinds.items()
        }
        self._items_tag = {
            lst: field_tag(self._classes[lst].DESCRIPTOR.fields_by_name["items"].number)
            for _, lst in c.kinds.values()
        }
        self._watch_event = self._classes["WatchEvent"]
        fields = self._watch_event.DESCRIPTOR.fields_by_name
        self._member_tag = {
            kind: field_tag(fields[member].number) for kind, member in c.watch_members.items()
        }
        enum = self._watch_event.DESCRIPTOR.enum_types_by_name["Type"]
        self._event_types: dict[str, int] = {v.name: v.number for v in enum.values}

    # -- plans -----------------------------------------------------------------------------

    def _short(self, ref: TypeRef) -> str:
        assert isinstance(ref, Ref)
        return schema.object_type(ref.type_name).short_name

    def _marks(self) -> tuple[set[str], set[str]]:
        """Messages with an int-or-string / free-form JSON somewhere below (a fixed point)."""
        ios: set[str] = set()
        json: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, t in self._types.items():
                for f in t.fields:
                    ft = f.type
                    while isinstance(ft, ListOf | MapOf):
                        ft = ft.item if isinstance(ft, ListOf) else ft.value
                    for marks, scalar in ((ios, "int-or-string"), (json, "json")):
                        if name in marks:
                            continue
                        if (isinstance(ft, Scalar) and ft.kind == scalar) or (
                            isinstance(ft, Ref) and self._short(ft) in marks
                        ):
                            marks.add(name)
                            changed = True
        return ios, json

    def _build_plans(self) -> None:
        ios_below, json_below = self._marks()
        needs = ios_below | json_below
        for name, t in self._types.items():
            numbers = self._classes[name].DESCRIPTOR.fields_by_name
            plan: list[PlanEntry] = []
            ios: set[str] = set()
            for f in t.fields:
                ft, key = f.type, f.json_name
                tag = field_tag(numbers[key].number)
                if isinstance(ft, Scalar):
                    if ft.kind == "int-or-string":
                        plan.append((key, _IOS, "", tag, False))
                        ios.add(key)
                    elif ft.kind == "json":
                        plan.append((key, _JSON, "", tag, True))
                    continue
                # Lists and maps of int-or-string or JSON do not occur in the schema; the
                # constructor refuses such a value and the tolerant path converts it.
                inner: TypeRef = ft
                op = _MSG
                if isinstance(ft, ListOf):
                    inner, op = ft.item, _LIST_MSG
                elif isinstance(ft, MapOf):
                    inner, op = ft.value, _MAP_MSG
                if isinstance(inner, Ref) and self._short(inner) in needs:
                    sub = self._short(inner)
                    plan.append((key, op, sub, tag, sub in json_below))
            self._plans[name] = tuple(plan)
            self._json_below[name] = name in json_below
            self._ios[name] = frozenset(ios)

    # -- dict -> wire bytes ------------------------------------------------------------------

    def _compile(self) -> dict[str, Fixer]:
        """One straight-line Python function per message plan (see :func:`_fixer_source`).

        A generic loop over plan entries costs ~3 µs per visited dict in CPython; generated
        code with the field names, tags and callees inlined costs a fraction of that, and a
        pod visits about ten dicts.
        """
        names = sorted(self._plans)
        index = {name: i for i, name in enumerate(names)}
        namespace: dict[str, Any] = {
            "varint": varint,
            "struct": self.structs.encode,
            "encode": self._encode,
            "drop": self._drop,
            "classes": self._classes,
        }
        source = "\n".join(
            _fixer_source(i, name, self._plans[name], index) for i, name in enumerate(names)
        )
        exec(compile(source, "<gateway.grpc.codec fixers>", "exec"), namespace)
        return {name: namespace[f"fix_{index[name]}"] for name in names}

    def _encode(self, d: JSON, name: str) -> bytes:
        """The wire bytes of the message ``name`` holding the JSON object ``d``."""
        cls = self._classes[name]
        fix = self._fixers[name]
        try:
            fixed, tail = fix(d)
            body = cls(**fixed).SerializeToString()
        except (ValueError, TypeError):
            fixed, tail = fix(self._tolerant_dict(d, name))
            body = cls(**fixed).SerializeToString()
        return bytes(body + tail) if tail else bytes(body)

    def encode(self, name: str, obj: JSON) -> bytes:
        """The wire bytes of the contract message ``name`` built from a decoded JSON object.

        Never fails on upstream data: unknown fields are dropped and values of the wrong type
        coerced or dropped (see the module docstring).
        """
        return self._encode(obj, name)

    def message(self, name: str, obj: JSON) -> Any:
        """:meth:`encode`, parsed back into a message object (for small, cold answers)."""
        return self._classes[name].FromString(self._encode(obj, name))

    def object_bytes(self, kind: str, obj: JSON, mask: masks.Tree | None = None) -> bytes:
        """An object of a served kind (``Pod``...), optionally cut down to ``mask``."""
        if mask is not None:
            obj = masks.project(obj, mask)
        return self._encode(obj, self._kinds[kind][0])

    def list_bytes(self, kind: str, obj: JSON, mask: masks.Tree | None = None) -> bytes:
        """A ``<Kind>List`` from a decoded list response; ``mask`` applies to each item."""
        return encode_now(obj, self.list_encoding(kind, mask))

    def list_encoding(self, kind: str, mask: masks.Tree | None = None) -> ListEncoding:
        """How a ``<Kind>List`` is written, for the large-list scope to write it in slices
        (:meth:`gateway.core.lists.large.LargeLists.encode`: the same bytes as
        :meth:`list_bytes`)."""
        _, lst, _, _ = self._kinds[kind]

        def head(obj: Mapping[str, Any]) -> bytes:
            return self._encode({k: v for k, v in obj.items() if k != "items"}, lst)

        def items(run: Sequence[Any], parts: list[bytes]) -> None:
            self._encode_items(kind, run, mask, parts)

        return ListEncoding(head, items, LIST_SLICE)

    def _encode_items(
        self, kind: str, items: Sequence[Any], mask: masks.Tree | None, parts: list[bytes]
    ) -> None:
        """Append the ``items`` fields of a ``<Kind>List`` (length-prefixed) to ``parts``."""
        item, lst, _, _ = self._kinds[kind]
        tag = self._items_tag[lst]
        encode = self._encode
        project = masks.project
        for i in items:
            if i.__class__ is dict:
                b = encode(project(i, mask) if mask is not None else i, item)
                parts.append(tag + varint(len(b)))  # not + b: the join copies b once
                parts.append(b)

    def watch_event_bytes(
        self, kind: str, event: WatchEvent, mask: masks.Tree | None = None
    ) -> bytes:
        """A ``WatchEvent`` carrying an object of ``kind``.

        ``mask`` applies to ADDED / MODIFIED / DELETED objects; BOOKMARK and RESYNC markers
        are sent whole (their annotations are the point of them).
        """
        obj = event.object
        if mask is not None and event.type not in ("BOOKMARK", "RESYNC"):
            obj = masks.project(obj, mask)
        head: bytes = self._watch_event(
            type=self._event_types[event.type], resource_version=event.resource_version
        ).SerializeToString()
        return head + length_prefixed(
            self._member_tag[kind], self._encode(obj, self._kinds[kind][0])
        )

    def parse(self, name: str, data: bytes) -> Any:
        """Wire bytes back into a message object of ``name``."""
        return self._classes[name].FromString(data)

    # -- dict -> message: tolerant path -------------------------------------------------------

    def _tolerant_dict(self, d: JSON, name: str) -> JSON:
        fields = self._tolerant.get(name)
        if fields is None:
            fields = self._tolerant[name] = {
                f.json_name: self._converter(f.type, f"{name}.{f.json_name}")
                for f in self._types[name].fields
            }
        out: JSON = {}
        for k, v in d.items():
            convert = fields.get(k)
            if convert is None:
                if (name, k) not in self._warned:
                    self._warned.add((name, k))
                    log.info("dropping %s.%s: the field is not in the contract", name, k)
                continue
            if v is None:
                continue
            value = convert(v)
            if value is not _DROP:
                out[k] = value
        return out

    def _converter(self, t: TypeRef, where: str) -> Converter:
        if isinstance(t, Scalar):
            return self._scalar(t.kind, where)
        if isinstance(t, Ref):
            sub = self._short(t)

            def message(v: Any) -> Any:
                if isinstance(v, dict):
                    return self._tolerant_dict(v, sub)
                return self._drop(where, v)

            return message
        if isinstance(t, ListOf):
            item = self._converter(t.item, where)

            def listed(v: Any) -> Any:
                if not isinstance(v, list):
                    return self._drop(where, v)
                return [y for y in (item(x) for x in v if x is not None) if y is not _DROP]

            return listed
        value = self._converter(t.value, where)

        def mapped(v: Any) -> Any:
            if not isinstance(v, dict):
                return self._drop(where, v)
            out = {str(k): value(x) for k, x in v.items() if x is not None}
            return {k: x for k, x in out.items() if x is not _DROP}

        return mapped

    def _drop(self, where: str, value: Any) -> Any:
        key = (where, type(value).__name__)
        if key not in self._warned:
            self._warned.add(key)
            log.info("dropping %s: a %s does not fit the contract", where, type(value).__name__)
        return _DROP

    def _scalar(self, kind: str, where: str) -> Converter:
        drop = self._drop

        def string(v: Any) -> Any:
            if isinstance(v, str):
                return v
            return str(v) if _is_number(v) else drop(where, v)

        def integer(bounds: range) -> Converter:
            def convert(v: Any) -> Any:
                if (isinstance(v, float) and v.is_integer()) or (
                    isinstance(v, str) and v.strip().lstrip("-").isdigit()
                ):
                    v = int(v)
                if isinstance(v, int) and not isinstance(v, bool) and v in bounds:
                    return v
                return drop(where, v)

            return convert

        def double(v: Any) -> Any:
            return float(v) if _is_number(v) else drop(where, v)

        def boolean(v: Any) -> Any:
            return v if isinstance(v, bool) else drop(where, v)

        def struct(v: Any) -> Any:
            return v if isinstance(v, dict) else drop(where, v)

        if kind == "int32":
            return integer(_INT32)
        if kind == "int64":
            return integer(_INT64)
        if kind == "double":
            return double
        if kind == "boolean":
            return boolean
        if kind == "json":
            return struct
        return string  # string, bytes, quantity, int-or-string, time, microtime

    # -- message -> dict ----------------------------------------------------------------------

    def to_json(self, msg: Message) -> JSON:
        """The JSON object of a message, as the upstream expects it (only set fields)."""
        ios = self._ios.get(msg.DESCRIPTOR.name, frozenset())
        out: JSON = {}
        for fd, value in msg.ListFields():
            key = fd.name
            mt = fd.message_type
            if mt is None:
                if fd.is_repeated:
                    out[key] = list(value)
                elif key in ios:
                    out[key] = _ios_to_json(value)
                else:
                    out[key] = value
            elif mt.GetOptions().map_entry:
                if mt.fields_by_name["value"].message_type is None:
                    out[key] = dict(value)
                else:
                    out[key] = {k: self.to_json(v) for k, v in value.items()}
            elif mt.full_name == STRUCT:
                out[key] = [struct_json(v) for v in value] if fd.is_repeated else struct_json(value)
            elif fd.is_repeated:
                out[key] = [self.to_json(v) for v in value]
            else:
                out[key] = self.to_json(value)
        return out


def codec(c: Contract | None = None) -> Codec:
    """The codec of a contract (of the gateway's own by default), built once."""
    return _codec(c or contract())


@functools.cache
def _codec(c: Contract) -> Codec:
    return Codec(c)
