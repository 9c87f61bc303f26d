"""The fast path: complete plain-data selections by projecting dicts, not per-field resolvers.

A stock GraphQL execution calls a resolver and a completion step for every field of every
object: for a list of 5,000 pods selecting 15 fields that is most of a second of Python
(README, "Architecture").  The generated Kubernetes types are plain data (every field is its
JSON key), so when a selection below a field touches only such fields, the result is a
projection of the upstream dict, computed here by a plan compiled once per selection.

The plan is used only when it is exactly equivalent: any field with its own resolver
(links, ``raw`` excepted), an abstract type, ``@defer``, or a value of the wrong shape makes
the executor complete that value the ordinary way, so errors and partial data are the
spec's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

from graphql import (
    GraphQLEnumType,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
)

from gateway.core.gcpause import LARGE_LIST, pause_until_next_turn
from gateway.graphql._library import (
    NOT_COMPLETED,
    CompletingExecutor,
    Fields,
    strawberry_definition,
    subselection,
)
from gateway.graphql.objects import dict_resolver, resolve_raw

Project = Callable[[Any], Any]

#: Scalars whose serialisation is the identity for values of these Python types (``None``:
#: any value).
_PASSTHROUGH: dict[str, tuple[type, ...] | None] = {
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
_INT_RANGES: dict[str, tuple[int, int]] = {
    "Int": (-(2**31), 2**31 - 1),
    "Long": (-(2**63), 2**63 - 1),
}
_NO_PLAN = object()


class _Fallback(Exception):
    """A value does not fit the plan: complete it the ordinary way."""


def _is_plain(field: GraphQLField) -> bool:
    """A field strawberry resolves with the schema's default resolver (its JSON key)."""
    definition = strawberry_definition(field)
    return bool(getattr(definition, "is_basic_field", False))


def _is_raw(field: GraphQLField) -> bool:
    definition = strawberry_definition(field)
    resolver = getattr(definition, "base_resolver", None)
    return resolver is not None and getattr(resolver, "wrapped_func", None) is resolve_raw


def _leaf(scalar: GraphQLScalarType) -> Project | None:
    if scalar.name not in _PASSTHROUGH:
        return None
    ok = _PASSTHROUGH[scalar.name]
    serialize = scalar.serialize
    if ok is None:
        return None  # identity: the caller copies the value
    if scalar.name in _INT_RANGES:
        low, high = _INT_RANGES[scalar.name]

        def int_(value: Any) -> Any:
            if type(value) is int and low <= value <= high:
                return value
            try:
                return serialize(value)
            except Exception:
                raise _Fallback from None

        return int_
    if scalar.name == "Float":

        def float_(value: Any) -> Any:
            if type(value) is float and math.isfinite(value):
                return value
            try:
                return serialize(value)
            except Exception:
                raise _Fallback from None

        return float_

    def leaf(value: Any) -> Any:
        if type(value) in ok:
            return value
        try:
            return serialize(value)
        except Exception:
            raise _Fallback from None

    return leaf


class ProjectingExecutor(CompletingExecutor):
    """A graphql-core executor that projects plain-data subtrees in one compiled step.

    Plans are cached per execution (each event of a subscription is one), keyed by the
    identity of the collected field list, which graphql-core memoises.
    """

    _plans: dict[tuple[int, int], Any]
    #: Names of the object types the projection may complete (the generated types).
    data_types: frozenset[str] = frozenset()

    def complete_directly(self, return_type: GraphQLOutputType, fields: Fields, result: Any) -> Any:
        if type(return_type) is GraphQLScalarType:
            return NOT_COMPLETED
        if _large(result):
            # First: any allocation may start a collection.  The decoded body is dropped
            # when this step ends, so the collector need never traverse it.
            pause_until_next_turn()
        plan = self._plan(return_type, fields)
        if plan is not None:
            try:
                return plan(result)
            except _Fallback:
                pass
        return NOT_COMPLETED

    def _plan(self, return_type: GraphQLOutputType, fdl: Fields) -> Project | None:
        try:
            plans = self._plans
        except AttributeError:
            plans = self._plans = {}
        key = (id(return_type), id(fdl))
        plan = plans.get(key, _NO_PLAN)
        if plan is _NO_PLAN:
            named = return_type
            while isinstance(named, GraphQLNonNull | GraphQLList):
                named = named.of_type
            plan = (
                self._compile(return_type, fdl)
                if isinstance(named, GraphQLObjectType) and named.name in self.data_types
                else None
            )
            # Keep fdl alive with its plan so that its id cannot be reused.
            plans[key] = plan
            plans[(id(fdl), 0)] = fdl
        return cast("Project | None", plan)

    def _compile(self, t: GraphQLOutputType, fdl: Fields) -> Project | None:
        if isinstance(t, GraphQLNonNull):
            inner = self._compile(t.of_type, fdl)
            if inner is None:
                return None

            def non_null(value: Any) -> Any:
                if value is None:
                    raise _Fallback
                out = inner(value)
                if out is None:
                    raise _Fallback
                return out

            return non_null
        if isinstance(t, GraphQLList):
            item = self._compile(t.of_type, fdl)
            if item is None:
                return None
            nullable_item = not isinstance(t.of_type, GraphQLNonNull)

            def list_(value: Any) -> Any:
                if type(value) is not list:
                    raise _Fallback
                if nullable_item:
                    return [None if v is None else item(v) for v in value]
                return [item(v) for v in value]

            return list_
        if isinstance(t, GraphQLScalarType):
            leaf = _leaf(t)
            if leaf is None and t.name not in _PASSTHROUGH:
                return None
            return leaf if leaf is not None else _identity
        if isinstance(t, GraphQLEnumType) or not isinstance(t, GraphQLObjectType):
            return None
        if t.name not in self.data_types:
            return None
        return self._compile_object(t, fdl)

    def _compile_object(self, t: GraphQLObjectType, fdl: Fields) -> Project | None:
        selected = subselection(self, t, fdl)
        if selected is None:
            return None
        steps: list[tuple[str, str, int, Project | None]] = []
        for response_key, (node, sub) in selected.items():
            name = node.name.value
            if name == "__typename":
                steps.append((response_key, t.name, _CONST, None))
                continue
            field = t.fields.get(name)
            if field is None:
                return None
            if _is_raw(field):
                steps.append((response_key, "", _SELF, None))
                continue
            if not _is_plain(field) or node.arguments:
                return None
            ft = field.type
            python_name = _python_name(field)
            if python_name is None:
                return None
            if isinstance(ft, GraphQLScalarType) and ft.name in _PASSTHROUGH:
                fn = _leaf(ft)
                how = _LEAF if fn else _COPY
            else:
                fn = self._compile(ft, sub)
                if fn is None:
                    return None
                # A non-null field: its plan sees a null (and falls back on it).
                how = _ALWAYS if isinstance(ft, GraphQLNonNull) else _LEAF
            if python_name != name:
                # The schema's resolver reads the Python name first (``continue_``).
                steps.append((response_key, python_name, _READ, _then(how, fn)))
            else:
                steps.append((response_key, name, how, fn))
        frozen = tuple(steps)

        def project(value: Any) -> dict[str, Any]:
            if type(value) is not dict:
                raise _Fallback
            out: dict[str, Any] = {}
            get = value.get
            for response_key, name, how, fn in frozen:
                if how is _COPY:
                    out[response_key] = get(name)
                elif how is _LEAF:
                    v = get(name)
                    out[response_key] = None if v is None else fn(v)  # type: ignore[misc]
                elif how is _SELF:
                    out[response_key] = value
                elif how is _CONST:
                    out[response_key] = name
                elif how is _ALWAYS:
                    out[response_key] = fn(get(name))  # type: ignore[misc]
                else:
                    out[response_key] = fn(dict_resolver(value, name))  # type: ignore[misc]
            return out

        return project


def _python_name(field: GraphQLField) -> str | None:
    """The key the schema's default resolver reads for ``field``, or ``None`` when that is
    not :func:`~gateway.graphql.objects.dict_resolver`."""
    definition = strawberry_definition(field)
    if getattr(definition, "default_resolver", None) is not dict_resolver:
        return None
    name = getattr(definition, "python_name", None)
    return name if isinstance(name, str) else None


def _then(how: int, fn: Project | None) -> Project:
    """A step's completion of a value already read."""
    if how == _COPY or fn is None:
        return _identity
    if how == _ALWAYS:
        return fn

    def leaf(value: Any) -> Any:
        return None if value is None else fn(value)

    return leaf


_COPY, _LEAF, _SELF, _CONST, _ALWAYS, _READ = 0, 1, 2, 3, 4, 5


def _large(value: Any) -> bool:
    """A large decoded upstream list (or a list object with a large ``items``)."""
    if type(value) is dict:
        value = value.get("items")
    return type(value) is list and len(value) >= LARGE_LIST


def _identity(value: Any) -> Any:
    return value


def executor_for(data_types: frozenset[str]) -> type[ProjectingExecutor]:
    """A :class:`ProjectingExecutor` subclass that may project ``data_types``."""
    return type("SchemaProjectingExecutor", (ProjectingExecutor,), {"data_types": data_types})
