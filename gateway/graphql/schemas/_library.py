"""Every use of strawberry's and graphql-core's internals, in one place.

The gateway builds its schema with strawberry but executes it with graphql-core directly
(:mod:`gateway.graphql.engine.execution`: parsed documents are cached, and plain-data selections
are completed by projecting the upstream dicts, :mod:`gateway.graphql.engine.projection`).  The
public API of the pinned versions (strawberry-graphql 0.341.2, graphql-core 3.3.2) covers
most of it: ``graphql.execute(..., executor_class=...)``, ``Executor.build``,
``Executor.build_per_event_executor``, ``create_source_event_stream``,
``execute_subscription_event``, and strawberry's ``StrawberryField`` (``is_basic_field``,
``base_resolver``).  What it does not offer is here, each with the reason:

* :func:`graphql_schema` — the graphql-core schema a ``strawberry.Schema`` built.  Strawberry
  has no public accessor; its maintainers point to ``Schema._schema``.
* :func:`strawberry_definition` — the strawberry type or field behind a graphql-core one.
  Strawberry's converter stores it in the graphql-core ``extensions`` under
  ``GraphQLCoreConverter.DEFINITION_BACKREF``, which strawberry's own validation rules read;
  it is not documented.
* :class:`CompletingExecutor` — a hook before graphql-core completes a value, and
  :func:`subselection`, the fields selected below one.  graphql-core documents subclassing
  ``Executor`` (``executor_class``) but says "the methods used internally for executing and
  completing fields are not part of the public API": the hook overrides ``complete_value``
  with 3.3's signature, and :func:`subselection` calls ``collect_subfields`` (marked
  private) and reads the ``FieldDetails`` of ``graphql.execution.collect_fields`` (not
  exported).
* :meth:`CompletingExecutor.build_per_event_executor` — graphql-core 3.3.2's per-event copy
  of a subscription's executor shares the memo of ``collect_subfields``
  (``Executor._relevant_sub_fields``) with the subscription's executor.  Every event collects
  its root fields anew, so every event would add entries to that memo for as long as the
  subscription lives; each copy gets a memo of its own instead.

* :class:`AcyclicExecutor` — graphql-core 3.3.2's executor holds two of its own bound methods
  (``async_helpers``): every execution is a reference cycle, with everything it holds, that
  only the cyclic collector frees.  Once its result is complete the executor lets go of
  them (``async_helpers`` is documented as the resolvers' helpers, not as the executor's
  state).

``tests/graphql/test_library.py`` asserts each of these as relied on here, so an upgrade
that changes one fails there first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine
from types import CoroutineType
from typing import Any, Final

import strawberry
from graphql import (
    FieldNode,
    GraphQLField,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    GraphQLResolveInfoHelpers,
    GraphQLSchema,
)
from graphql.execution import Executor
from graphql.execution.collect_fields import FieldDetailsList
from graphql.pyutils import Path
from strawberry.schema.schema_converter import GraphQLCoreConverter

__all__ = [
    "NATIVE",
    "NOT_COMPLETED",
    "AcyclicExecutor",
    "CompletingExecutor",
    "Fields",
    "Substitute",
    "graphql_schema",
    "strawberry_definition",
    "subselection",
]

#: The field nodes graphql-core completes at one position of the response (opaque outside
#: this module: only its identity and :func:`subselection` are used).  graphql-core memoises
#: what it collects below one, so the same selection keeps the same object during an
#: execution.
Fields = FieldDetailsList

#: What :meth:`CompletingExecutor.complete_directly` returns to let graphql-core complete.
NOT_COMPLETED: Final = object()


class Substitute:
    """What :meth:`CompletingExecutor.complete_directly` returns (or its coroutine resolves
    to) for graphql-core to complete ``value`` in place of the resolver's result (a body
    the completion had to decode first, the plain items of a shared page)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


_DEFINITION_KEY: Final = GraphQLCoreConverter.DEFINITION_BACKREF

#: ``extensions`` key of the fields and types :mod:`gateway.graphql.schemas.native` builds without
#: strawberry: ``"plain"`` (a field reading its JSON key), ``"raw"`` (the object itself),
#: ``"data"`` (an object type of upstream JSON the projection may complete), ``"input"`` (an
#: input field).
NATIVE: Final = "kube-gateway"


def graphql_schema(schema: strawberry.Schema | GraphQLSchema) -> GraphQLSchema:
    """The graphql-core schema that ``schema`` executes (a graphql-core schema is its own)."""
    if isinstance(schema, GraphQLSchema):
        return schema
    built: GraphQLSchema = schema._schema
    return built


def strawberry_definition(element: GraphQLNamedType | GraphQLField) -> Any:
    """The strawberry definition of a graphql-core type or field (a strawberry type
    definition, a ``StrawberryField``...), or ``None`` for one strawberry did not build."""
    return (element.extensions or {}).get(_DEFINITION_KEY)


def subselection(
    executor: Executor[Any], object_type: GraphQLObjectType, fields: Fields
) -> dict[str, tuple[FieldNode, Fields]] | None:
    """What ``fields`` select on ``object_type``: per response key, its first field node and
    the fields graphql-core completes there; ``None`` when the selection has an ``@defer``.
    """
    grouped, defers, _ = executor.collect_subfields(object_type, fields)
    if defers:
        return None
    return {key: (group[0].node, group) for key, group in grouped.items()}


class AcyclicExecutor(Executor[Any]):
    """graphql-core's executor, whose own reference cycle is broken once its result is
    complete."""

    def execute_operation(self, serially: bool | None = None) -> Any:
        """graphql-core's, and once the result is complete the executor's own reference
        cycle broken (it holds its methods in ``async_helpers``): freed by reference
        counting with all it holds, not left to the cyclic collector, and never frozen for
        good with a schema build that froze what was in flight
        (:mod:`gateway.graphql.engine.collector`)."""
        result = super().execute_operation(serially)
        if self.is_awaitable(result):
            return self._detached_after(result)
        self.async_helpers = _FINISHED
        return result

    async def _detached_after(self, result: Awaitable[Any]) -> Any:
        try:
            return await result
        finally:
            self.async_helpers = _FINISHED


class CompletingExecutor(AcyclicExecutor):
    """graphql-core's executor, asking :meth:`complete_directly` first for every value."""

    def complete_directly(self, return_type: GraphQLOutputType, fields: Fields, result: Any) -> Any:
        """The completed value of ``result``, or :data:`NOT_COMPLETED` to let graphql-core
        complete it (the default), or a :class:`Substitute` for graphql-core to complete in
        its place, or a coroutine resolving to any of these (the value is then completed
        over several event-loop steps).  Only called for a non-null ``result``."""
        return NOT_COMPLETED

    def complete_value(  # noqa: PLR0917
        self,
        return_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        info: GraphQLResolveInfo[Any],
        path: Path,
        result: Any,
        position_context: Any,
    ) -> Any:
        if result is not None:
            done = self.complete_directly(return_type, field_details_list, result)
            if done is not NOT_COMPLETED:
                if type(done) is CoroutineType:
                    return self._complete_later(
                        done, return_type, field_details_list, info, path, result, position_context
                    )
                if type(done) is not Substitute:
                    return done
                result = done.value  # graphql-core completes this in place of the result
        return super().complete_value(
            return_type, field_details_list, info, path, result, position_context
        )

    async def _complete_later(  # noqa: PLR0917
        self,
        later: Coroutine[Any, Any, Any],
        return_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        info: GraphQLResolveInfo[Any],
        path: Path,
        result: Any,
        position_context: Any,
    ) -> Any:
        """Await what :meth:`complete_directly` completes over several steps; when that is
        :data:`NOT_COMPLETED`, let graphql-core complete ``result`` (a :class:`Substitute`'s
        value).  graphql-core awaits an awaitable ``complete_value`` wherever it completes a
        value (a field, a list item)."""
        done = await later
        if type(done) is Substitute:
            result, done = done.value, NOT_COMPLETED
        if done is NOT_COMPLETED:
            done = super().complete_value(
                return_type, field_details_list, info, path, result, position_context
            )
            if self.is_awaitable(done):
                done = await done
        return done

    def build_per_event_executor(self, payload: Any) -> Executor[Any]:
        executor = super().build_per_event_executor(payload)
        executor._relevant_sub_fields = {}
        return executor


def _finished(*args: Any) -> Any:
    raise RuntimeError("the execution is over")


#: What an executor's ``async_helpers`` are once its execution is complete.
_FINISHED: Final = GraphQLResolveInfoHelpers(gather=_finished, track=_finished)
