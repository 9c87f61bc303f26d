"""What :mod:`gateway.graphql.schemas._library` relies on in strawberry and graphql-core internals.

Each test pins one internal as the gateway uses it, on a small schema of its own, so that an
upgrade of strawberry-graphql or graphql-core that changes it fails here, by name, rather
than somewhere in the projection or the subscriptions.
"""

from __future__ import annotations

import enum
import gc
import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest
import strawberry
from graphql import (
    ExecutionResult,
    Executor,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLSchema,
    create_source_event_stream,
    execute,
    execute_subscription_event,
    get_named_type,
    parse,
)
from strawberry.schema.config import StrawberryConfig

from gateway.graphql.schemas._library import (
    NOT_COMPLETED,
    AcyclicExecutor,
    CompletingExecutor,
    Fields,
    graphql_schema,
    strawberry_definition,
    subselection,
)


def _b() -> int:
    return 2


@strawberry.type
class Inner:
    a: int


@strawberry.type
class Thing:
    a: int
    b: int = strawberry.field(resolver=_b)
    inner: Inner


@strawberry.type
class Query:
    @strawberry.field
    def thing(self) -> Thing:
        return Thing(a=1, inner=Inner(a=10))

    @strawberry.field
    def things(self) -> list[Thing]:
        return [Thing(a=i, inner=Inner(a=10 + i)) for i in range(3)]


@strawberry.type
class Subscription:
    @strawberry.subscription
    async def things(self, count: int) -> AsyncIterator[Thing]:
        for i in range(count):
            yield Thing(a=i, inner=Inner(a=i))


SCHEMA = strawberry.Schema(query=Query, subscription=Subscription)


@strawberry.type
class Item:
    count: int
    continue_: str | None = strawberry.field(name="continue")


@strawberry.type
class Root:
    @strawberry.field
    def item(self) -> Item:
        return {"count": 3, "continue_": "x"}  # type: ignore[return-value]


def _run(document: str, executor_class: type[Executor[Any]] | None = None) -> ExecutionResult:
    result = execute(graphql_schema(SCHEMA), parse(document), executor_class=executor_class)
    assert isinstance(result, ExecutionResult)
    return result


def test_the_graphql_core_schema_is_the_one_strawberry_executes() -> None:
    built = graphql_schema(SCHEMA)
    assert isinstance(built, GraphQLSchema)
    assert built is graphql_schema(SCHEMA)
    document = "{ thing { a b inner { a } } }"
    direct = _run(document)
    assert direct.errors is None
    assert direct.data == {"thing": {"a": 1, "b": 2, "inner": {"a": 10}}}
    assert direct.data == SCHEMA.execute_sync(document).data


def test_strawberry_definitions_hang_on_the_graphql_core_types_and_fields() -> None:
    types = graphql_schema(SCHEMA).type_map
    thing = types["Thing"]
    assert isinstance(thing, GraphQLObjectType)
    assert strawberry_definition(thing).origin is Thing
    plain, resolved = (
        strawberry_definition(thing.fields["a"]),
        strawberry_definition(thing.fields["b"]),
    )
    assert (plain.is_basic_field, resolved.is_basic_field) == (True, False)
    assert plain.base_resolver is None
    assert resolved.base_resolver.wrapped_func is _b
    assert strawberry_definition(types["__Schema"]) is None


def test_a_basic_field_reads_its_source_through_the_default_resolver() -> None:
    # The projection reads a basic field's JSON key itself: exact only while strawberry
    # resolves such a field as default_resolver(source, python_name).
    calls: list[tuple[Any, str]] = []

    def recording(source: Any, name: str) -> Any:
        calls.append((source, name))
        return source[name]

    schema = strawberry.Schema(query=Root, config=StrawberryConfig(default_resolver=recording))
    item = graphql_schema(schema).type_map["Item"]
    assert isinstance(item, GraphQLObjectType)
    assert all(strawberry_definition(f).is_basic_field for f in item.fields.values())
    result = execute(graphql_schema(schema), parse("{ item { count continue } }"))
    assert isinstance(result, ExecutionResult)
    assert result.data == {"item": {"count": 3, "continue": "x"}}
    source = {"count": 3, "continue_": "x"}
    assert calls == [(source, "count"), (source, "continue_")]


def test_complete_value_has_the_signature_the_hook_overrides() -> None:
    assert list(inspect.signature(Executor.complete_value).parameters) == [
        "self",
        "return_type",
        "field_details_list",
        "info",
        "path",
        "result",
        "position_context",
    ]


class _Recording(CompletingExecutor):
    """Completes every ``Inner`` itself and records what it was asked."""

    seen: list[tuple[str, Any]]
    inner_fields: list[Fields]

    def complete_directly(self, return_type: GraphQLOutputType, fields: Fields, result: Any) -> Any:
        self.seen.append((str(return_type), result))
        if get_named_type(return_type).name == "Inner":
            self.inner_fields.append(fields)
            return {"a": -1}
        return NOT_COMPLETED


def _recording() -> type[_Recording]:
    return type("Recorder", (_Recording,), {"seen": [], "inner_fields": []})


def test_the_hook_is_asked_first_for_every_non_null_value() -> None:
    executor_class = _recording()
    result = _run("{ things { a inner { a } } }", executor_class)
    assert result.errors is None
    assert result.data == {"things": [{"a": i, "inner": {"a": -1}} for i in range(3)]}
    kinds = [kind for kind, _ in executor_class.seen]
    # Asked again for the type inside each non-null and list wrapper, like complete_value.
    assert kinds == ["[Thing!]!", "[Thing!]", *["Thing!", "Thing", "Int!", "Int", "Inner!"] * 3]
    # One field list per selection, whatever the number of values completed there: what
    # the projection's plan cache is keyed by.
    first, *rest = executor_class.inner_fields
    assert len(rest) == 2 and all(other is first for other in rest)


def _cyclic_garbage(executor_class: type[Executor[Any]] | None, runs: int) -> int:
    """Objects only the cyclic collector frees that ``runs`` executions leave behind."""
    document = parse("{ things { a b inner { a } } }")
    gc.collect()
    gc.disable()
    try:
        for _ in range(runs):
            result = execute(graphql_schema(SCHEMA), document, executor_class=executor_class)
            assert isinstance(result, ExecutionResult) and result.errors is None
            del result
        return gc.collect()
    finally:
        gc.enable()


def test_an_executor_is_a_reference_cycle_until_acyclic_lets_go() -> None:
    """graphql-core's executor holds its own bound methods (``async_helpers``): each
    execution is cyclic garbage with all it holds.  :class:`AcyclicExecutor` lets go of
    them once the result is complete, so reference counting frees the execution whole
    (a serving gateway freezes what lives through a schema build: a cycle frozen is never
    freed)."""
    assert _cyclic_garbage(None, 10) >= 10 * 5
    assert _cyclic_garbage(AcyclicExecutor, 10) == 0


async def test_an_awaited_execution_lets_go_once_complete() -> None:
    @strawberry.type
    class Slow:
        @strawberry.field
        async def value(self) -> int:
            return 7

    schema = graphql_schema(strawberry.Schema(query=Slow))
    document = parse("{ value }")  # parsed once: its tokens are a cycle (a doubly linked list)
    gc.collect()
    gc.disable()
    try:
        for _ in range(10):
            result = execute(schema, document, executor_class=AcyclicExecutor)
            assert inspect.isawaitable(result)
            assert (await result).data == {"value": 7}
            del result
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_subselection_groups_by_response_key_and_refuses_defer() -> None:
    found: list[Any] = []

    class Selecting(CompletingExecutor):
        def complete_directly(
            self, return_type: GraphQLOutputType, fields: Fields, result: Any
        ) -> Any:
            if isinstance(return_type, GraphQLObjectType) and return_type.name == "Thing":
                found.append(subselection(self, return_type, fields))
            return NOT_COMPLETED

    assert _run("{ thing { a x: a b inner { a } } }", Selecting).errors is None
    (selected,) = found
    assert selected is not None
    assert list(selected) == ["a", "x", "b", "inner"]
    assert [node.name.value for node, _ in selected.values()] == ["a", "a", "b", "inner"]
    assert all(isinstance(group, list) and group for _, group in selected.values())
    found.clear()
    assert _run("{ thing { a ... @defer { b } } }", Selecting).errors is None
    assert found == [None]


async def _subscribe_events(executor_class: type[Executor[Any]], count: int) -> Executor[Any]:
    built = executor_class.build(
        graphql_schema(SCHEMA),
        parse(f"subscription {{ things(count: {count}) {{ inner {{ a }} }} }}"),
    )
    assert isinstance(built, Executor)
    stream = create_source_event_stream(built)
    if inspect.isawaitable(stream):
        stream = await stream
    assert not isinstance(stream, ExecutionResult)
    i = 0
    async for payload in stream:
        result = execute_subscription_event(built.build_per_event_executor(payload))
        if inspect.isawaitable(result):
            result = await result
        assert result.data == {"things": {"inner": {"a": i}}}
        i += 1
    assert i == count
    return built


@pytest.mark.parametrize("count", [1, 50])
async def test_graphql_core_shares_the_subfield_memo_with_per_event_executors(count: int) -> None:
    # The reason for CompletingExecutor.build_per_event_executor: with the stock executor
    # the subscription's memo keeps two entries (things, inner) for every event.
    built = await _subscribe_events(Executor, count)
    assert built.build_per_event_executor(None)._relevant_sub_fields is built._relevant_sub_fields
    assert len(built._relevant_sub_fields) == 2 * count


@pytest.mark.parametrize("count", [1, 50])
async def test_a_subscription_executor_does_not_grow_with_its_events(count: int) -> None:
    built = await _subscribe_events(CompletingExecutor, count)
    assert built._relevant_sub_fields == {}


@strawberry.enum
class _Colour(enum.Enum):
    RED = "red"


def test_strawberry_passes_scalar_and_enum_arguments_as_graphql_core_coerced_them() -> None:
    """What :func:`~gateway.graphql.resolvers.operations.install_direct` relies on: for
    scalar and enum arguments strawberry's resolver gets the values graphql-core coerced,
    unchanged, and only those the request gave (or that have a schema default)."""
    from gateway.graphql.resolvers.operations import install_direct

    seen: dict[str, Any] = {}

    @strawberry.type
    class Query:
        @strawberry.field
        def pick(
            self,
            name: str,
            count: int | None = None,
            colour: _Colour | None = None,
            flag: bool | None = False,
        ) -> str:
            seen.update(name=name, count=count, colour=colour, flag=flag)
            return "ok"

    built = graphql_schema(strawberry.Schema(query=Query))
    document = parse('{ pick(name: "a", colour: RED) }')
    assert execute(built, document).data == {"pick": "ok"}  # type: ignore[union-attr]
    given: dict[str, Any] = {}
    field = built.query_type.fields["pick"]  # type: ignore[union-attr]
    field.resolve = lambda root, info, **args: given.update(args) or "ok"
    assert execute(built, document).data == {"pick": "ok"}  # type: ignore[union-attr]
    # defaults are the schema's, given by graphql-core either way
    assert given == {"name": "a", "count": None, "colour": _Colour.RED, "flag": False}
    assert {k: v for k, v in seen.items() if k in given} == given
    assert install_direct(built, {}) == 0  # nothing made by the RootBuilder here
