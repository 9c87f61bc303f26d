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
from gateway.graphql.objects import resolve_raw

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
    "Long": (int,),
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
    if scalar.name == "Int":

        def int_(value: Any) -> Any:
            if type(value) is int and -(2**31) <= value < 2**31:
                return value
            try:
                return serialize(value)
            except Exception:
                raise _Fallback from None

        return int_

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
            if isinstance(ft, GraphQLScalarType) and ft.name in _PASSTHROUGH:
                leaf = _leaf(ft)
                steps.append((response_key, name, _LEAF if leaf else _COPY, leaf))
                continue
            sub_plan = self._compile(ft, sub)
            if sub_plan is None:
                return None
            steps.append((response_key, name, _LEAF, sub_plan))
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
                else:
                    out[response_key] = name
            return out

        return project


_COPY, _LEAF, _SELF, _CONST = 0, 1, 2, 3


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
