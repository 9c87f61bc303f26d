"""JSON dict <-> message conversion, fast enough for lists of thousands of pods.

Decoded upstream JSON feeds the (upb, C) message constructor directly: the contract keeps the
Kubernetes JSON field names, so ``Pod(**pod_dict)`` builds the whole tree in C.  The codec's
main output is the *wire bytes* of the answer (what the server sends).  It reads the schema
once into a *design*, plain data (:class:`~gateway.core.lists.typedwire.Design`: the
contract's serialized file descriptors, a per-message *plan* of the paths that need
something, ``int-or-string`` values and free-form JSON, and each field's shape), and writes
with the core's :class:`~gateway.core.lists.typedwire.Writer` of that design, which has the
three steps (the plans compiled to Python, the constructor, the ``Struct`` wire bytes
appended) and the *tolerant* path for fields the contract does not know (dropped, logged
here once per field).  A list worker builds the same writer from the same design
(:func:`gateway.core.lists.jobs.typed`), so a large typed list is written there, by two
workers at once when there are two (:meth:`Codec.list_encoding`), the same bytes.

A small typed list (``PodService/List`` of a body under 256 KiB, under 500 items) is
written from its bytes (:meth:`Codec.small_list`): the body delimited in one scan (its
items and the other members its list message has), each object looked
up by its exact JSON text in a bounded memo of what was written before (:class:`WireMemo`),
and decoded and written only when it is not there: an object listed again unchanged costs a
hash of its text (docs/performance.md, "Seventh round").

The reverse direction (requests that carry an object) walks the message's set fields; it
turns ``int-or-string`` digits back into JSON numbers and whole ``Struct`` numbers back into
integers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec
import orjson
from google.protobuf import struct_pb2
from google.protobuf.message import Message

from gateway.core import (
    IOS,
    JSON_OP,
    LARGE_LIST,
    LIST_MSG,
    MAP_MSG,
    MSG,
    Design,
    Job,
    ListEncoding,
    ListOf,
    MapOf,
    PlanEntry,
    Ref,
    Scalar,
    Shape,
    TypeRef,
    WatchEvent,
    Writer,
    encode_now,
    field_tag,
    files_of,
    length_prefixed,
    schema,
    split_typed,
    typed,
    varint,
)
from gateway.grpc import mask as masks
from gateway.grpc.contract import PACKAGE, STRUCT, Contract, contract
from gateway.grpc.messages import file_descriptors, message_class

__all__ = ["Codec", "WireMemo", "codec", "struct_json"]

log = logging.getLogger(__name__)

JSON = dict[str, Any]

_DIGITS: Final = frozenset("0123456789")

#: Items of a large list encoded between two yields to the event loop (~0.3-0.5 ms of
#: realistic pods on one core).  Small: a small request waits about one slice at each of the
#: 15-20 loop turns it takes, so its latency grows by ~20 slices while lists convert
#: (measured with ``tests/bench/bench_loop_hold.py``: 50 items per slice kept small gets'
#: p99 at 5-15x idle, 5 items at 2-8x), while ~1,000 yields add no measurable time to the
#: list itself.
LIST_SLICE: Final = 5

#: A large typed list is written by this many list workers at once (when there are as many),
#: each delimiting the body and writing its run of the items.
LIST_PARTS: Final = 2

#: The bytes of objects' wire encodings the codec remembers (:class:`WireMemo`), keys (the
#: upstream's JSON of each object) included.
MEMO_BYTES: Final = 8 * 1024 * 1024
#: An object's JSON longer than this is written each time, never remembered.
MEMO_ITEM_BYTES: Final = 64 * 1024
#: What an entry costs beside its two byte strings (the key tuple, the dict slot, the
#: objects' headers), counted against :data:`MEMO_BYTES`.
_MEMO_OVERHEAD: Final = 200

#: A list body's members, each as its JSON text; its items, each as its JSON text
#: (delimited by ``msgspec``, which builds no value).
_MEMBERS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ELEMENTS: Final = msgspec.json.Decoder(list[msgspec.Raw] | None)


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


def _body_decoder(name: str, head: Sequence[str]) -> msgspec.json.Decoder[Any]:
    """A decoder of a list body that delimits its ``items`` (each as its JSON text) and the
    other members a list message has (``head``: each as its JSON text), in one scan; a
    member the message does not have is a ``msgspec.ValidationError``."""
    unset: Any = msgspec.UNSET
    fields: list[Any] = [(k, msgspec.Raw | msgspec.UnsetType, unset) for k in head]
    fields.append(("items", list[msgspec.Raw] | None | msgspec.UnsetType, unset))
    struct = msgspec.defstruct(f"_{name}Body", fields, forbid_unknown_fields=True)
    return msgspec.json.Decoder(struct)


class WireMemo:
    """The wire bytes of objects written lately, by the exact JSON text the upstream sent
    for each (and the message and read mask it was written as): at most ``limit`` bytes of
    keys and values together, the oldest entries dropped first.

    Writing an object is a pure function of its JSON text, its message and its read mask
    (:class:`~gateway.core.lists.typedwire.Writer`), so an object the upstream sends again
    unchanged (same bytes) is answered with the bytes written the first time: no decode, no
    plan, no constructor.  Any change to the object (a new ``resourceVersion`` at least)
    changes its text, and so misses.  Only what a caller was just sent by the upstream, with
    its own credential, is ever looked up.
    """

    __slots__ = ("_entries", "hits", "item_limit", "limit", "misses", "size")

    def __init__(self, limit: int = MEMO_BYTES, item_limit: int = MEMO_ITEM_BYTES) -> None:
        self.limit = limit
        self.item_limit = item_limit
        self._entries: dict[tuple[str, Any, bytes], bytes] = {}
        #: Bytes held, keys and values and :data:`_MEMO_OVERHEAD` per entry.
        self.size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[str, Any, bytes]) -> bytes | None:
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def put(self, key: tuple[str, Any, bytes], value: bytes) -> None:
        """Remember ``value`` under ``key`` (not when its JSON is over ``item_limit``)."""
        if len(key[2]) > self.item_limit or key in self._entries:
            return
        entries = self._entries
        entries[key] = value
        self.size += len(key[2]) + len(value) + _MEMO_OVERHEAD
        while self.size > self.limit:
            oldest = next(iter(entries))
            dropped = entries.pop(oldest)
            self.size -= len(oldest[2]) + len(dropped) + _MEMO_OVERHEAD

    def clear(self) -> None:
        self._entries.clear()
        self.size = 0


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
        self._plans: dict[str, tuple[PlanEntry, ...]] = {}
        self._ios: dict[str, frozenset[str]] = {}
        self._logged: set[tuple[str, tuple[Any, ...]]] = set()
        self._build_plans()
        #: The plans and shapes as plain data; a list worker writes with them too.
        self.design = self._design()
        self._design_blob = self.design.blob
        self._design_key = self.design.key
        self._writer = Writer(self.design, self._classes, self._dropped)
        #: Runs a typed list is split into, one per list worker, at most (measured:
        #: ``tests/bench/grpc_conversion.py``).
        self.list_parts = LIST_PARTS
        #: The Struct encodings remembered (``fieldsV1``).
        self.structs = self._writer.structs
        #: The objects of small lists written lately (:meth:`small_list`).
        self.memo = WireMemo()
        self._kinds = {
            kind: (obj, lst, self._classes[obj], self._classes[lst])
            for kind, (obj, lst) in c.kinds.items()
        }
        self._items_tag = {
            lst: field_tag(self._classes[lst].DESCRIPTOR.fields_by_name["items"].number)
            for _, lst in c.kinds.values()
        }
        #: Each list message's members but ``items`` (its head), and a decoder that
        #: delimits a body of that message in one scan (:meth:`small_list`).
        self._heads = {
            lst: tuple(f.name for f in self._classes[lst].DESCRIPTOR.fields if f.name != "items")
            for _, lst in c.kinds.values()
        }
        self._bodies = {lst: _body_decoder(lst, head) for lst, head in self._heads.items()}
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
                        plan.append((key, IOS, "", tag, False))
                        ios.add(key)
                    elif ft.kind == "json":
                        plan.append((key, JSON_OP, "", tag, True))
                    continue
                # Lists and maps of int-or-string or JSON do not occur in the schema; the
                # constructor refuses such a value and the tolerant path converts it.
                inner: TypeRef = ft
                op = MSG
                if isinstance(ft, ListOf):
                    inner, op = ft.item, LIST_MSG
                elif isinstance(ft, MapOf):
                    inner, op = ft.value, MAP_MSG
                if isinstance(inner, Ref) and self._short(inner) in needs:
                    sub = self._short(inner)
                    plan.append((key, op, sub, tag, sub in json_below))
            self._plans[name] = tuple(plan)
            self._ios[name] = frozenset(ios)

    # -- dict -> wire bytes ------------------------------------------------------------------

    def _design(self) -> Design:
        """The plans and shapes as plain data (:mod:`gateway.core.lists.typedwire`)."""
        shapes = tuple(
            (name, tuple((f.json_name, self._shape(f.type)) for f in t.fields))
            for name, t in self._types.items()
        )
        return Design(
            files=files_of(file_descriptors(self.contract)),
            package=f"{PACKAGE}.",
            plans=tuple(self._plans.items()),
            shapes=shapes,
        )

    def _shape(self, t: TypeRef) -> Shape:
        if isinstance(t, Scalar):
            return ("s", t.kind)
        if isinstance(t, Ref):
            return ("r", self._short(t))
        if isinstance(t, ListOf):
            return ("l", self._shape(t.item))
        return ("m", self._shape(t.value))

    def _dropped(self, fmt: str, *args: Any) -> None:
        """What the writer dropped (in this process or a list worker's), logged once."""
        if (fmt, args) not in self._logged:
            self._logged.add((fmt, args))
            log.info(fmt, *args)

    def encode(self, name: str, obj: JSON) -> bytes:
        """The wire bytes of the contract message ``name`` built from a decoded JSON object.

        Never fails on upstream data: unknown fields are dropped and values of the wrong type
        coerced or dropped (see the module docstring).
        """
        return self._writer.encode(obj, name)

    def message(self, name: str, obj: JSON) -> Any:
        """:meth:`encode`, parsed back into a message object (for small, cold answers)."""
        return self._classes[name].FromString(self._writer.encode(obj, name))

    def object_bytes(self, kind: str, obj: JSON, mask: masks.Tree | None = None) -> bytes:
        """An object of a served kind (``Pod``...), optionally cut down to ``mask``."""
        if mask is not None:
            obj = masks.project(obj, mask)
        return self._writer.encode(obj, self._kinds[kind][0])

    def list_bytes(self, kind: str, obj: JSON, mask: masks.Tree | None = None) -> bytes:
        """A ``<Kind>List`` from a decoded list response; ``mask`` applies to each item."""
        return encode_now(obj, self.list_encoding(kind, mask))

    def list_encoding(self, kind: str, mask: masks.Tree | None = None) -> ListEncoding:
        """How a ``<Kind>List`` is written, for the large-list scope to write it in slices
        (:meth:`gateway.core.lists.large.LargeLists.encode`: the same bytes as
        :meth:`list_bytes`)."""
        _, lst, _, _ = self._kinds[kind]

        def head(obj: Mapping[str, Any]) -> bytes:
            return self._writer.encode({k: v for k, v in obj.items() if k != "items"}, lst)

        def items(run: Sequence[Any], parts: list[bytes]) -> None:
            self._encode_items(kind, run, mask, parts)

        # list workers write the items with the same design (and the head's JSON comes
        # back for ``head``): the same bytes
        item, items_tag = self._kinds[kind][0], self._items_tag[lst]
        key, design = self._design_key, self._design_blob

        def split(workers: int) -> list[Job]:
            n = max(1, min(workers, self.list_parts))
            return [typed(key, design, item, items_tag, mask, part=(i, n)) for i in range(n)]

        def finish(answers: Sequence[bytes]) -> bytes:
            parts: list[bytes | memoryview] = []
            for i, done in enumerate(answers):
                rest, notes, written = split_typed(done)
                for fmt, *args in notes:
                    self._dropped(fmt, *args)
                parts.append(head(rest) if i == 0 else b"")
                parts.append(written)
            return b"".join(parts)

        return ListEncoding(head, items, LIST_SLICE, split(1)[0], split, finish)

    def small_list(
        self,
        kind: str,
        data: bytes,
        mask: masks.Tree | None = None,
        mask_key: Any = None,
        *,
        cap: int = 0,
    ) -> bytes | None:
        """The ``<Kind>List`` of a small list body, written from its bytes: the same bytes as
        :meth:`list_bytes` of the body decoded, or ``None`` when that is not sure (the body
        is not a JSON object whose ``items`` is an array of what ``orjson`` reads, or it is
        over ``cap``: the caller then decodes it the ordinary way, which says what is wrong;
        or it holds :data:`~gateway.core.lists.large.LARGE_LIST` items or more, which the
        large-list scope writes a few at a time, letting the event loop go in between).

        The body is delimited, not decoded (``msgspec``), in one scan: its items and the
        other members its list message has, each as its JSON text.  A body with a member the
        message does not have (or ``items`` not an array) is delimited as before instead,
        its members first, its items then (the writer drops and logs that member, as the
        ordinary path does).  What is not an item is decoded (the list's head), and each
        item is looked up in :attr:`memo` by its JSON text (with ``mask_key``, which names
        ``mask``: the read mask's paths), and decoded and written only when it is not
        there.  An unchanged object listed again costs a hash of its
        text, not a decode and a conversion.
        """
        item, lst, _, _ = self._kinds[kind]
        try:
            try:
                body = self._bodies[lst].decode(data)  # one scan: the members the message has
            except msgspec.ValidationError:  # a member it does not (or a wrong shape): two
                members = _MEMBERS.decode(data)
                listed = members.pop("items", None)
                raws = _ELEMENTS.decode(listed) if listed is not None else None
                rest = {k: orjson.loads(bytes(v)) for k, v in members.items()}
            else:
                raws = body.items or None
                rest = {
                    k: orjson.loads(bytes(v))
                    for k in self._heads[lst]
                    if (v := getattr(body, k)) is not msgspec.UNSET
                }
        except (msgspec.DecodeError, orjson.JSONDecodeError, RecursionError):
            return None
        if raws is not None and len(raws) >= LARGE_LIST:
            return None  # written in slices by the large-list scope, the loop let go between
        if cap:
            meta = rest.get("metadata") or {}
            if meta.__class__ is not dict or meta.get("continue") or len(raws or ()) > cap:
                return None
        tag = self._items_tag[lst]
        parts = [self._writer.encode(rest, lst)]
        for raw in raws or ():
            try:
                written = self._written(item, mask, mask_key, bytes(raw))
            except (orjson.JSONDecodeError, RecursionError):
                return None
            if written is None:
                continue  # not an object: skipped, as the writer skips it
            parts.append(tag + varint(len(written)))
            parts.append(written)
        return b"".join(parts)

    def _written(
        self, item: str, mask: masks.Tree | None, mask_key: Any, raw: bytes
    ) -> bytes | None:
        """The object whose JSON text is ``raw`` written as ``item`` (cut to ``mask``, which
        ``mask_key`` names): from :attr:`memo`, or decoded, written and kept there; ``None``
        where the JSON is not an object.

        Raises:
            orjson.JSONDecodeError, RecursionError: ``raw`` is not JSON ``orjson`` reads.
        """
        key = (item, mask_key, raw)
        written = self.memo.get(key)
        if written is None:
            obj = orjson.loads(raw)
            if obj.__class__ is not dict:
                return None
            written = self._writer.encode(
                masks.project(obj, mask) if mask is not None else obj, item
            )
            self.memo.put(key, written)
        return written

    def object_from_bytes(
        self, kind: str, data: bytes, mask: masks.Tree | None = None, mask_key: Any = None
    ) -> bytes | None:
        """An object of a served kind from the body the upstream sent for it (a ``Get``'s):
        the same bytes as :meth:`object_bytes` of the body decoded, looked up in :attr:`memo`
        by its exact JSON text (with its message and ``mask_key``, which names ``mask``) as
        a small list's items are, decoded and written only when it is not there.  ``None``
        when that is not sure (not a JSON object ``orjson`` reads): the caller then decodes
        it the ordinary way, which says what is wrong.
        """
        try:
            return self._written(self._kinds[kind][0], mask, mask_key, data)
        except (orjson.JSONDecodeError, RecursionError):
            return None

    def _encode_items(
        self, kind: str, items: Sequence[Any], mask: masks.Tree | None, parts: list[bytes]
    ) -> None:
        """Append the ``items`` fields of a ``<Kind>List`` (length-prefixed) to ``parts``."""
        item, lst, _, _ = self._kinds[kind]
        self._writer.items(item, self._items_tag[lst], items, mask, parts)

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
            self._member_tag[kind], self._writer.encode(obj, self._kinds[kind][0])
        )

    def parse(self, name: str, data: bytes) -> Any:
        """Wire bytes back into a message object of ``name``."""
        return self._classes[name].FromString(data)

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
