"""Compiled projections of upstream JSON: one generated function per object and selection.

The GraphQL fast path (:mod:`gateway.graphql.engine.projection`) decides *what* a selection reads
from the upstream dicts; this module turns that decision into code: a generated function per
object type and selection, which reads each key, passes a well-formed leaf through without a
call and raises :class:`Fallback` on anything it cannot pass through unchanged.

A plan is also written as a :data:`Spec`, plain tuples of names and numbers, so that a
process that holds no schema (a list worker, :mod:`gateway.core.lists.jobs`) can build the
same functions (:func:`build`) and project a list there.  Such a process has no scalar
serialisers: a value that would need one raises :class:`Fallback`, and the caller projects
the list itself the ordinary way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypedDict

import msgspec

Project = Callable[[Any], Any]

#: A plan as plain data: ``("leaf", scalar)``, ``("nonnull", inner)``,
#: ``("list", nullable_items, item)`` or ``("object", type_name, steps)``, a step being
#: ``(response key, how, JSON key, check, spec of its function or None, inline)``; a
#: ``READ`` step's function is ``("then", how, spec or None)``.
Spec = tuple[Any, ...]

#: Scalars whose serialisation is the identity for values of these Python types (``None``:
#: any value).
PASSTHROUGH: dict[str, tuple[type, ...] | None] = {
    "String": (str,),
    "ID": (str,),
    "Boolean": (bool,),
    "Int": (int,),  # and range-checked
    "Float": (float,),
    "JSON": None,
    "Quantity": (str,),
    "IntOrString": (int, str),
    "Time": (str,),
    "MicroTime": (str,),
    "Long": (int,),  # and range-checked
}
#: The range of the integer scalars (GraphQL's ``Int`` is 32-bit, the gateway's ``Long`` 64).
INT_RANGES: dict[str, tuple[int, int]] = {
    "Int": (-(2**31), 2**31 - 1),
    "Long": (-(2**63), 2**63 - 1),
}

#: How a step computes its value: copy the key's value, complete a leaf (or a nested
#: object) when not null, the object itself (``raw``), a constant (``__typename``), always
#: call the function (a non-null field), read by the Python name (``continue_``).
COPY, LEAF, SELF, CONST, ALWAYS, READ = 0, 1, 2, 3, 4, 5

#: For a leaf scalar, the test (on ``v``, not null) that sends a value to its serialiser:
#: a value failing none is its own serialisation.
CHECKS: dict[str, str] = {
    "String": "type({v}) is not str",
    "ID": "type({v}) is not str",
    "Boolean": "type({v}) is not bool",
    **{
        name: f"type({{v}}) is not int or not {low} <= {{v}} <= {high}"
        for name, (low, high) in INT_RANGES.items()
    },
    "Float": "type({v}) is not float or not isfinite({v})",
    "Quantity": "type({v}) is not str",
    "IntOrString": "type({v}) is not str and type({v}) is not int",
    "Time": "type({v}) is not str",
    "MicroTime": "type({v}) is not str",
}

#: Nested objects generated inline in their parent's function, at most this deep.
INLINE_DEPTH = 3

_MISSING = object()


class Fallback(Exception):
    """A value does not fit the plan: complete it the ordinary way."""


def dict_resolver(obj: Any, name: str) -> Any:
    """The GraphQL schema's default resolver: a field of an upstream dict, by its JSON name
    (a Python name ending in ``_``, such as ``continue_``, reads the key without it).

    Non-dict sources (the event and log-line records of subscriptions) use attributes.
    """
    if type(obj) is dict:
        value = obj.get(name, _MISSING)
        if value is _MISSING:
            return obj.get(name[:-1]) if name.endswith("_") else None
        return value
    return getattr(obj, name, None)


def identity(value: Any) -> Any:
    return value


def refuse(value: Any) -> Any:
    """The serialiser of a process that has none: the value is not passed through here."""
    raise Fallback


def leaf_of(scalar: str, otherwise: Project) -> Project | None:
    """A leaf scalar's completion: a well-formed value as it is, anything else given to
    ``otherwise`` (the scalar's serialiser, or :func:`refuse`).  ``None``: the identity."""
    ok = PASSTHROUGH[scalar]
    if ok is None:
        return None
    if scalar in INT_RANGES:
        low, high = INT_RANGES[scalar]

        def int_(value: Any) -> Any:
            if type(value) is int and low <= value <= high:
                return value
            return otherwise(value)

        return int_
    if scalar == "Float":

        def float_(value: Any) -> Any:
            if type(value) is float and math.isfinite(value):
                return value
            return otherwise(value)

        return float_

    def leaf(value: Any) -> Any:
        if type(value) in ok:
            return value
        return otherwise(value)

    return leaf


def nonnull_of(run_inner: Project) -> Project:
    def non_null(value: Any) -> Any:
        if value is None:
            raise Fallback
        out = run_inner(value)
        if out is None:
            raise Fallback
        return out

    return non_null


def list_of(run_item: Project, nullable_items: bool) -> Project:
    if nullable_items:

        def list_(value: Any) -> Any:
            if type(value) is not list:
                raise Fallback
            return [None if v is None else run_item(v) for v in value]

    else:

        def list_(value: Any) -> Any:
            if type(value) is not list:
                raise Fallback
            return [run_item(v) for v in value]

    return list_


def then(how: int, fn: Project | None) -> Project:
    """A step's completion of a value already read."""
    if how == COPY or fn is None:
        return identity
    if how == ALWAYS:
        return fn

    def leaf(value: Any) -> Any:
        return None if value is None else fn(value)

    return leaf


class Step:
    """One response key of an object: how its value is computed."""

    __slots__ = ("check", "fn", "how", "key", "name", "sub")

    def __init__(  # noqa: PLR0917
        self,
        key: str,
        how: int,
        name: str,
        fn: Project | None = None,
        check: str | None = None,
        sub: tuple[Step, ...] | None = None,
    ) -> None:
        self.key, self.how, self.name, self.fn, self.check = key, how, name, fn, check
        #: The steps of a nested object's projection, generated inline in its parent's.
        self.sub = sub


def generate(type_name: str, steps: tuple[Step, ...], done: frozenset[str]) -> Any:
    """The projection of an object as one generated function: no loop over the steps, no
    call for a well-formed leaf, nested objects inline.  With ``done``, it takes
    ``(value, done)`` and reads those response keys from ``done``."""
    env: dict[str, Any] = {
        "_Fallback": Fallback,
        "isfinite": math.isfinite,
        "dict_resolver": dict_resolver,
    }
    head = "value, done" if done else "value"
    lines = [f"def project({head}):"]
    result = _emit(steps, "value", "v", 1, env, lines, done)
    lines.append(f"    return {result}")
    code = "\n".join(lines) + "\n"
    exec(compile(code, f"<projection of {type_name}>", "exec"), env)
    return env["project"]


def _emit(  # noqa: PLR0917
    steps: tuple[Step, ...],
    src: str,
    prefix: str,
    depth: int,
    env: dict[str, Any],
    lines: list[str],
    done: frozenset[str] = frozenset(),
) -> str:
    """Append the code projecting the dict in variable ``src``; return the expression of
    the result (a dict display of the variables the code sets)."""
    pad = "    " * depth
    get = f"g_{prefix}"
    lines += [
        f"{pad}if type({src}) is not dict:",
        f"{pad}    raise _Fallback",
        f"{pad}{get} = {src}.get",
    ]
    values: list[str] = []
    for i, step in enumerate(steps):
        v = f"{prefix}_{i}"
        fn = f"f_{v}"
        env[fn] = step.fn
        key, name = repr(step.key), repr(step.name)
        if step.key in done:
            lines.append(f"{pad}{v} = done[{key}]")
        elif step.how == COPY:
            lines.append(f"{pad}{v} = {get}({name})")
        elif step.how == LEAF:
            lines.append(f"{pad}{v} = {get}({name})")
            if step.sub is not None and depth < INLINE_DEPTH:
                lines.append(f"{pad}if {v} is not None:")
                inner = _emit(step.sub, v, v, depth + 1, env, lines)
                lines.append(f"{pad}    {v} = {inner}")
                values.append(f"{key}: {v}")
                continue
            if step.check is not None:
                lines.append(f"{pad}if {v} is not None and ({step.check.format(v=v)}):")
            else:
                lines.append(f"{pad}if {v} is not None:")
            lines.append(f"{pad}    {v} = {fn}({v})")
        elif step.how == ALWAYS:
            lines.append(f"{pad}{v} = {fn}({get}({name}))")
        elif step.how == READ:
            lines.append(f"{pad}{v} = {fn}(dict_resolver({src}, {name}))")
        elif step.how == SELF:
            lines.append(f"{pad}{v} = {src}")
        else:
            lines.append(f"{pad}{v} = {name}")
        values.append(f"{key}: {v}")
    return "{" + ", ".join(values) + "}"


def build(spec: Spec) -> Project:
    """The projection a :data:`Spec` describes, built where no schema is at hand: a leaf
    that is not already its own serialisation raises :class:`Fallback`."""
    return _built(spec)[0]


def _built(spec: Spec) -> tuple[Project, tuple[Step, ...] | None]:
    kind = spec[0]
    if kind == "leaf":
        return leaf_of(spec[1], refuse) or identity, None
    if kind == "nonnull":
        return nonnull_of(_built(spec[1])[0]), None
    if kind == "list":
        return list_of(_built(spec[2])[0], spec[1]), None
    if kind != "object":
        raise ValueError(f"not a projection spec: {kind!r}")
    steps: list[Step] = []
    for key, how, name, check, fn_spec, inline in spec[2]:
        fn: Project | None = None
        sub: tuple[Step, ...] | None = None
        if fn_spec is not None and fn_spec[0] == "then":
            inner = None if fn_spec[2] is None else _built(fn_spec[2])[0]
            fn = then(fn_spec[1], inner)
        elif fn_spec is not None:
            fn, inner_steps = _built(fn_spec)
            sub = inner_steps if inline else None
        steps.append(Step(key, how, name, fn, check, sub))
    frozen = tuple(steps)
    return generate(spec[1], frozen, frozenset()), frozen


# -- reading only what a projection reads ------------------------------------------------------

#: A value read whole (a leaf, a copied or ``raw`` value): any JSON.
WHOLE: Final = "whole"


@dataclass(frozen=True, slots=True)
class Items:
    """The shape of a list: each item's."""

    item: Any


def shape(spec: Spec) -> Any:
    """What a projection reads of a value: :data:`WHOLE`, a dict of the keys it reads of an
    object (each key's shape), or :class:`Items` for a list.  A ``READ`` step reads its
    name and, for a Python name (``continue_``), the JSON key without the ``_``."""
    kind = spec[0]
    if kind == "leaf":
        return WHOLE
    if kind == "nonnull":
        return shape(spec[1])
    if kind == "list":
        return Items(shape(spec[2]))
    keys: dict[str, Any] = {}
    for _key, step_how, name, _check, step_spec, _inline in spec[2]:
        if step_how == SELF:
            return WHOLE
        if step_how == CONST:
            continue
        how, fn_spec = step_how, step_spec
        if fn_spec is not None and fn_spec[0] == "then":  # READ: how the value read goes on
            how, fn_spec = fn_spec[1], fn_spec[2]
        read = WHOLE if how == COPY or fn_spec is None else shape(fn_spec)
        names = (name, name[:-1]) if name.endswith("_") else (name,)
        for json_name in names:
            keys[json_name] = merged(keys[json_name], read) if json_name in keys else read
    return keys


def merged(a: Any, b: Any) -> Any:
    """What two projections of one value read together."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for key, read in b.items():
            out[key] = merged(out[key], read) if key in out else read
        return out
    if isinstance(a, Items) and isinstance(b, Items):
        return Items(merged(a.item, b.item))
    return WHOLE  # one of them reads it whole, or they disagree on its type


def reader(read: Any) -> Callable[[bytes | memoryview], Any]:
    """A decoder of JSON that builds only what the :func:`shape` ``read`` reads: the keys
    of an object nobody reads are parsed (the JSON is checked whole) but not built.

    Where it answers, the values it builds are those ``orjson.loads`` builds, but for an
    integer past 64 bits (an ``int`` here, a ``float`` there); a value of another type than
    the shape's (an object where it reads a list, or the reverse) raises
    ``msgspec.ValidationError``, and JSON nested past the interpreter's recursion limit
    ``RecursionError``.  What it does not check where it skips: the UTF-8 of strings
    (``orjson`` refuses a body that is not UTF-8 anywhere;
    :func:`gateway.core.lists.jobs.read_part` and ``work`` check it), and numbers past a
    double's range (``1e400``, which ``orjson`` refuses): a skipped one is left unread and
    the list answered, where the whole decode refuses the body.  No Kubernetes apiserver
    writes such a number, the answer holds nothing of it, and looking for one would cost a
    scan of the whole body, most of what reading only a part saves.
    """
    return msgspec.json.Decoder(_typed(read)).decode


def _typed(read: Any) -> Any:
    if isinstance(read, Items):
        return list[_typed(read.item)] | None  # type: ignore[misc]
    if isinstance(read, dict):
        fields = {key: _typed(sub) for key, sub in read.items()}
        return TypedDict("Read", fields, total=False) | None  # type: ignore[operator]
    return Any
