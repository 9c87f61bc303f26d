"""Upstream JSON written as the typed protobuf messages of the gRPC contract (``Pod``,
``PodList``...), by plain data: a :class:`Design` (the contract's serialized file
descriptors, each message's plan and each message's field shapes) that the gRPC codec
(:mod:`gateway.grpc.codec`) builds once from the schema, and a :class:`Writer` that
writes with it.

The same writer runs in the gateway (the codec's, over its generated classes) and in a list
worker (:func:`gateway.core.lists.jobs.typed`: the worker builds the classes from the
design's descriptors, once per design), so a typed list a worker writes is the bytes the
gateway would write (``tests/grpc/test_typed_workers.py``).

How a message is written, in three steps:

1. A per-message *plan*, computed once from the schema, visits only the paths that need
   something: ``int-or-string`` values (``"port": 8080`` is a string field in the contract)
   become strings, and free-form JSON values (``google.protobuf.Struct``, e.g.
   ``metadata.managedFields[].fieldsV1``) are taken out of the dict.  Dicts are copied only
   where they change; the input is never mutated.  Each plan is compiled into straight-line
   Python (:func:`_fixer_source`).
2. The message constructor (upb, C) builds the rest, and ``SerializeToString`` writes it,
   deterministically: map entries sorted by key, so the bytes do not depend on the
   process's hash seed (upb's map order otherwise differs from one process to the next).
3. The taken-out JSON is appended as wire bytes (:mod:`gateway.core.lists.protowire`):
   protobuf merges a repeated occurrence of a message field, so the appended bytes land
   inside the right sub-message; a list that holds JSON somewhere below is written element
   by element.

Fields the contract does not know (an upstream newer than the schema) make the constructor
refuse the dict (``ValueError``); only then does the object take the *tolerant* path, a full
walk by the field shapes that drops unknown fields and coerces or drops values of the wrong
JSON type (told to :attr:`Writer.dropped` once per field), so one odd object costs a slower
conversion, never an error.
"""

from __future__ import annotations

import hashlib
import pickle
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from gateway.core.lists.protowire import StructCache, varint

__all__ = [
    "IOS",
    "JSON_OP",
    "LIST_MSG",
    "MAP_MSG",
    "MSG",
    "Design",
    "Mask",
    "PlanEntry",
    "Shape",
    "Writer",
    "project",
]

# plan operations
IOS: Final = 0  # int-or-string: a JSON number becomes its decimal string
JSON_OP: Final = 1  # free-form JSON: encoded as Struct wire bytes
MSG: Final = 2  # a message that needs something below
LIST_MSG: Final = 3  # a list of such messages
MAP_MSG: Final = 4  # a map of such messages

#: (field, operation, message, tag, JSON below) entries of one message's plan.
PlanEntry = tuple[str, int, str, bytes, bool]
#: A field's shape, for the tolerant path: ``("s", kind)`` a scalar of the schema's kind,
#: ``("r", message)`` a message, ``("l", shape)`` a list of, ``("m", shape)`` a map of.
Shape: TypeAlias = tuple[str, Any]
#: A read mask's selection: ``None`` selects a field whole, a dict selects inside it.
Mask: TypeAlias = dict[str, "Mask | None"]

JSON = dict[str, Any]
Converter = Callable[[Any], Any]
#: A compiled plan: the dict for the constructor, and the wire bytes to append.
Fixer = Callable[[JSON], tuple[JSON, bytes]]
#: Hears what the tolerant path dropped: a ``%s`` format and its arguments (once each).
Dropped = Callable[..., None]

_DROP: Final = object()
_INT32: Final = range(-(2**31), 2**31)
_INT64: Final = range(-(2**63), 2**63)
_SNAKE: Final = re.compile(r"_([a-z0-9])")


@dataclass(frozen=True, slots=True)
class Design:
    """How the messages of one contract are written, as plain data (pickled into a list
    worker's job once per codec: :attr:`blob`)."""

    #: The contract's files and every file they import, serialized ``FileDescriptorProto``,
    #: each after the files it imports.
    files: tuple[bytes, ...]
    #: The contract's package, with its trailing dot (``kubegateway.v1.``).
    package: str
    #: Each message's plan (messages without one need nothing done).
    plans: tuple[tuple[str, tuple[PlanEntry, ...]], ...]
    #: Each message's fields and their shapes, in the schema's order.
    shapes: tuple[tuple[str, tuple[tuple[str, Shape], ...]], ...]

    @property
    def blob(self) -> bytes:
        """The design pickled (what a list worker's job carries)."""
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @property
    def key(self) -> str:
        """A digest of the design: a worker keeps the writer it built under it."""
        return hashlib.sha256(self.blob).hexdigest()[:32]

    def classes(self) -> dict[str, Any]:
        """The message classes of the design's messages, built from its descriptors (in a
        pool of their own: a worker has no generated modules)."""
        from google.protobuf import descriptor_pool, message_factory

        pool = descriptor_pool.DescriptorPool()
        for data in self.files:
            pool.AddSerializedFile(data)
        return {
            name: message_factory.GetMessageClass(pool.FindMessageTypeByName(self.package + name))
            for name, _ in self.shapes
        }


def files_of(descriptors: Iterable[Any]) -> tuple[bytes, ...]:
    """The serialized ``FileDescriptorProto`` of ``descriptors`` (``FileDescriptor``) and of
    every file they import, each after its imports."""
    done: dict[str, bytes] = {}

    def visit(fd: Any) -> None:
        if fd.name in done:
            return
        for dep in fd.dependencies:
            visit(dep)
        done[fd.name] = fd.serialized_pb

    for fd in descriptors:
        visit(fd)
    return tuple(done.values())


def camel(name: str) -> str:
    """A snake_case field name (a JSON-encoded FieldMask's) in camelCase: ``resource_version``
    -> ``resourceVersion``."""
    return _SNAKE.sub(lambda m: m.group(1).upper(), name)


def project(obj: dict[str, Any], tree: Mask, *, loose: bool = False) -> dict[str, Any]:
    """A new dict with only the fields of ``obj`` a read mask selects (``obj`` is not
    modified).

    ``loose``: a snake_case key ``obj`` lacks is read under its camelCase name.
    """
    out: dict[str, Any] = {}
    for selected, sub in tree.items():
        key = selected
        value = obj.get(key)
        if value is None:
            if not loose or "_" not in key:
                continue
            key = camel(key)
            value = obj.get(key)
            if value is None:
                continue
        if sub is None:
            out[key] = value
        elif value.__class__ is dict:
            out[key] = project(value, sub, loose=loose)
        elif value.__class__ is list:
            out[key] = [project(x, sub, loose=loose) for x in value if x.__class__ is dict]
    return out


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
        if op == IOS:
            emit(1, "if v.__class__ is int:")
            cow(2)
            emit(2, f"out[{k}] = str(v)")
            continue
        emit(1, "if v is not None:")
        if op == JSON_OP or (op == MAP_MSG and json_below):
            # taken out of the dict, written as wire bytes
            cow(2)
            emit(2, f"del out[{k}]")
            if op == JSON_OP:
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
        if op == LIST_MSG and json_below:
            # Elements keep their place in the dict unless one of them has wire bytes to
            # append: then the whole list is written element by element, in order.
            emit(2, "if v.__class__ is list:")
            emit(3, f"fixed = [{fix}(x) if x.__class__ is dict else (x, b'') for x in v]")
            emit(3, "if any(tl for _, tl in fixed):")
            cow(4)
            emit(4, f"del out[{k}]", "for y, tl in fixed:")
            emit(5, "if y.__class__ is dict:")
            emit(6, f"b = classes[{sub!r}](**y).SerializeToString(deterministic=True) + tl")
            emit(6, f"tail += {t} + varint(len(b)) + b")
            emit(3, "elif any(y is not x for (y, _), x in zip(fixed, v)):")
            cow(4)
            emit(4, f"out[{k}] = [y for y, _ in fixed]")
            continue
        if op == MSG:
            emit(2, "if v.__class__ is dict:")
            emit(3, f"nv, t = {fix}(v)", "if t:")
            emit(4, f"tail += {t} + varint(len(t)) + t")
            emit(3, "if nv is not v:")
            cow(4)
            emit(4, f"out[{k}] = nv")
        elif op == LIST_MSG:
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
        else:  # MAP_MSG
            emit(2, "if v.__class__ is dict:")
            entry = f"{fix}(x)[0] if x.__class__ is dict else x"
            emit(3, f"nv = {{mk: {entry} for mk, x in v.items()}}")
            emit(3, "if any(nv[mk] is not v[mk] for mk in v):")
            cow(4)
            emit(4, f"out[{k}] = nv")
    emit(1, "return out, tail")
    return "\n".join(lines) + "\n"


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _ignore(fmt: str, *args: Any) -> None:
    """Hears nothing of what was dropped (the default)."""


class Writer:
    """Writes decoded JSON objects as the messages of one :class:`Design`.

    Args:
        design: the messages' plans and shapes.
        classes: their message classes (by default built from the design's descriptors).
        dropped: hears what the tolerant path drops, a ``%s`` format and its arguments,
            once per field and type.
    """

    def __init__(
        self,
        design: Design,
        classes: Mapping[str, Any] | None = None,
        dropped: Dropped = _ignore,
    ) -> None:
        self.design = design
        self._classes = dict(classes) if classes is not None else design.classes()
        self._plans = dict(design.plans)
        self._shapes = dict(design.shapes)
        self.dropped = dropped
        self.structs = StructCache()
        self._tolerant: dict[str, dict[str, Converter]] = {}
        self._warned: set[tuple[str, str]] = set()
        self._fixers = self._compile()

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
            "encode": self.encode,
            "drop": self._drop,
            "classes": self._classes,
        }
        source = "\n".join(
            _fixer_source(i, name, self._plans[name], index) for i, name in enumerate(names)
        )
        exec(compile(source, "<gateway.core.lists.typedwire fixers>", "exec"), namespace)
        return {name: namespace[f"fix_{index[name]}"] for name in names}

    def encode(self, d: JSON, name: str) -> bytes:
        """The wire bytes of the message ``name`` holding the JSON object ``d``.

        Never fails on upstream data: unknown fields are dropped and values of the wrong
        type coerced or dropped (see the module docstring).
        """
        cls = self._classes[name]
        fix = self._fixers[name]
        try:
            fixed, tail = fix(d)
            body = cls(**fixed).SerializeToString(deterministic=True)
        except (ValueError, TypeError):
            fixed, tail = fix(self._tolerant_dict(d, name))
            body = cls(**fixed).SerializeToString(deterministic=True)
        return bytes(body + tail) if tail else bytes(body)

    def items(
        self, name: str, tag: bytes, items: Sequence[Any], mask: Mask | None, parts: list[bytes]
    ) -> None:
        """Append each object of ``items`` as the message ``name``, a field ``tag``
        (length-prefixed), cut down to ``mask`` first when there is one; what is not an
        object is skipped."""
        encode = self.encode
        for i in items:
            if i.__class__ is dict:
                b = encode(project(i, mask) if mask is not None else i, name)
                parts.append(tag + varint(len(b)))  # not + b: the join copies b once
                parts.append(b)

    # -- the tolerant path --------------------------------------------------------------------

    def _tolerant_dict(self, d: JSON, name: str) -> JSON:
        fields = self._tolerant.get(name)
        if fields is None:
            fields = self._tolerant[name] = {
                key: self._converter(shape, f"{name}.{key}") for key, shape in self._shapes[name]
            }
        out: JSON = {}
        for k, v in d.items():
            convert = fields.get(k)
            if convert is None:
                if (name, k) not in self._warned:
                    self._warned.add((name, k))
                    self.dropped("dropping %s.%s: the field is not in the contract", name, k)
                continue
            if v is None:
                continue
            value = convert(v)
            if value is not _DROP:
                out[k] = value
        return out

    def _converter(self, shape: Shape, where: str) -> Converter:
        what, inside = shape
        if what == "s":
            return self._scalar(inside, where)
        if what == "r":

            def message(v: Any) -> Any:
                if isinstance(v, dict):
                    return self._tolerant_dict(v, inside)
                return self._drop(where, v)

            return message
        if what == "l":
            item = self._converter(inside, where)

            def listed(v: Any) -> Any:
                if not isinstance(v, list):
                    return self._drop(where, v)
                return [y for y in (item(x) for x in v if x is not None) if y is not _DROP]

            return listed
        value = self._converter(inside, where)

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
            self.dropped("dropping %s: a %s does not fit the contract", where, type(value).__name__)
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
