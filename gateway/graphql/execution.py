"""Parse, validate, limit and execute operations against the strawberry schema.

Every transport goes through :class:`Engine`: a document is parsed, validated and checked
against the limits once (an LRU cache keyed by its text), then executed by graphql-core
with the :class:`~gateway.graphql.projection.ProjectingExecutor` over the strawberry-built
schema, whose resolvers are strawberry's.  Responses are plain dicts, serialised by the
transports with orjson.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import OrderedDict
from collections.abc import AsyncIterable, Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import orjson
import strawberry
from graphql import (
    DocumentNode,
    ExecutionResult,
    FieldNode,
    GraphQLError,
    GraphQLNamedType,
    GraphQLSchema,
    ListTypeNode,
    NonNullTypeNode,
    OperationDefinitionNode,
    create_source_event_stream,
    execute,
    execute_subscription_event,
    get_introspection_query,
    get_operation_ast,
    parse,
    print_ast,
    validate,
)

from gateway.core.errors import GatewayError
from gateway.graphql._library import NATIVE, graphql_schema, strawberry_definition
from gateway.graphql.errors import ApiError, format_error, format_exception
from gateway.graphql.limits import Limits, check_document, check_fragment_cycles
from gateway.graphql.projection import ProjectingExecutor, executor_for

OperationKind = Literal["query", "mutation", "subscription"]
Response = dict[str, Any]


class RequestError(Exception):
    """A request that cannot execute (bad syntax, invalid, over a limit): errors, no data."""

    def __init__(
        self,
        errors: list[dict[str, Any]],
        status: int = 400,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(errors[0]["message"] if errors else "bad request")
        self.errors = errors
        self.status = status
        #: HTTP headers of the refusal (a persisted query's miss is not to be cached).
        self.headers = dict(headers or {})

    def response(self) -> Response:
        return {"errors": self.errors}


@dataclass(frozen=True, slots=True)
class Prepared:
    """A parsed, validated and limit-checked operation of a document."""

    query: str
    document: DocumentNode
    operation: OperationDefinitionNode
    operation_name: str | None
    #: The engine (and so the schema) that validated it, which also executes it: an
    #: operation prepared before a schema swap finishes on the schema it was checked against.
    engine: Engine | None = field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> OperationKind:
        return self.operation.operation.value


def _bad(message: str, code: str = "BAD_REQUEST", status: int = 400) -> RequestError:
    return RequestError(
        [format_exception(ApiError(message, code=code, http_status=status))], status
    )


class Engine:
    """Executes GraphQL operations for every transport.

    Args:
        schema: the schema: strawberry's (its graphql-core schema is executed) or a
            graphql-core one (a group's, :mod:`gateway.graphql.native`).
        limits: depth / alias / complexity limits applied to every document.
        cache_size: distinct documents kept parsed and validated.
    """

    def __init__(
        self, schema: strawberry.Schema | GraphQLSchema, limits: Limits, cache_size: int = 512
    ) -> None:
        self.schema = schema
        self.graphql_schema: GraphQLSchema = graphql_schema(schema)
        self.limits = limits
        #: Valid documents only (a failure is cheap to find again and must not evict
        #: valid ones), bounded in count and in bytes of text.
        self._documents: OrderedDict[str, DocumentNode] = OrderedDict()
        self._cached_bytes = 0
        self._cache_size = cache_size
        #: Answers to introspection-only operations, by document, operation and variables.
        self._introspections: OrderedDict[IntrospectionKey, Response] = OrderedDict()
        self._introspecting: dict[IntrospectionKey, asyncio.Future[Response]] = {}
        data_types = frozenset(
            name
            for name, t in self.graphql_schema.type_map.items()
            if not name.startswith("__") and _is_generated(t)
        )
        self.executor_class: type[ProjectingExecutor] = executor_for(data_types)

    # -- preparing -------------------------------------------------------------------------

    def _document(self, query: str) -> DocumentNode:
        cached = self._documents.get(query)
        if cached is not None:
            self._documents.move_to_end(query)
            return cached
        document = self._parse(query)  # raises RequestError: never cached
        self._documents[query] = document
        self._cached_bytes += len(query)
        while self._documents and (
            len(self._documents) > self._cache_size or self._cached_bytes > self.limits.cache_bytes
        ):
            evicted, _ = self._documents.popitem(last=False)
            self._cached_bytes -= len(evicted)
        return document

    def _parse(self, query: str) -> DocumentNode:
        """Cheap before expensive: size, then a token-limited parse, then the depth, alias
        and complexity limits, and only then the schema validation."""
        limits = self.limits
        if len(query) > limits.max_document_bytes:
            raise _bad(
                f"the GraphQL document is larger than {limits.max_document_bytes} bytes",
                code="DOCUMENT_TOO_LARGE",
                status=413,
            )
        try:
            document = parse(query, no_location=False, max_tokens=limits.max_tokens)
            check_fragment_cycles(document)
            check_document(document, limits)
        except GraphQLError as error:
            error.extensions = {**(error.extensions or {}), "code": "GRAPHQL_PARSE_FAILED"}
            raise RequestError([format_error(error)]) from None
        except ApiError as exc:
            raise RequestError([format_exception(exc)]) from None
        except RecursionError:
            # braces nested thousands deep: the parser itself recurses
            raise _bad("the GraphQL document nests too deeply", code="QUERY_TOO_DEEP") from None
        errors = validate(self.graphql_schema, document)
        if errors:
            raise RequestError([format_error(e) for e in errors])
        return document

    def prepare(self, query: Any, operation_name: Any = None) -> Prepared:
        """Parse (cached), validate and limit-check; pick the operation.

        Raises:
            RequestError: the request cannot be executed.
        """
        if not isinstance(query, str) or not query.strip():
            raise _bad("a GraphQL request needs a `query` string")
        if operation_name is not None and not isinstance(operation_name, str):
            raise _bad("`operationName` must be a string")
        document = self._document(query)
        operation = get_operation_ast(document, operation_name)
        if operation is None:
            message = (
                f"unknown operation named {operation_name!r}"
                if operation_name
                else "the document has several operations: give `operationName`"
            )
            raise _bad(message)
        return Prepared(query, document, operation, operation_name, self)

    # -- executing -------------------------------------------------------------------------

    async def execute(
        self,
        prepared: Prepared,
        variables: Mapping[str, Any] | None,
        context: Any,
        root: Any = None,
    ) -> Response:
        """Execute a query or mutation; field errors come back as partial data."""
        if prepared.engine is not None and prepared.engine is not self:
            return await prepared.engine.execute(prepared, variables, context, root)
        refused = _overlong_list(prepared, variables)
        if refused is not None:
            return refused
        key = _introspection_key(prepared, variables)
        if key is not None:
            return await self._introspect(key, prepared, variables)
        result = execute(
            self.graphql_schema,
            prepared.document,
            root_value=root,
            context_value=context,
            variable_values=dict(variables) if variables else None,
            operation_name=prepared.operation_name,
            executor_class=self.executor_class,
        )
        if inspect.isawaitable(result):
            result = await result
        return format_result(result)

    async def _introspect(
        self, key: IntrospectionKey, prepared: Prepared, variables: Mapping[str, Any] | None
    ) -> Response:
        """An operation that reads only the schema: the same answer for every caller, so it
        is kept (GraphiQL and code generators ask the same large document again and again),
        computed once however many ask at once, and in a worker thread: a large schema's
        full introspection is seconds of work that must not hold the event loop."""
        cached = self._introspections.get(key)
        if cached is not None:
            self._introspections.move_to_end(key)
            return cached
        running = self._introspecting.get(key)
        if running is None:
            running = asyncio.ensure_future(
                asyncio.to_thread(self._introspection, prepared, variables)
            )
            self._introspecting[key] = running
            running.add_done_callback(lambda _: self._introspecting.pop(key, None))
        response = await asyncio.shield(running)
        if "errors" not in response:
            self._introspections[key] = response
            while len(self._introspections) > INTROSPECTIONS_KEPT:
                self._introspections.popitem(last=False)
        return response

    async def warm_introspection(self) -> None:
        """Answer the standard full introspection (GraphiQL's, graphql-core's and most
        clients' first request) before anyone asks."""
        await self.execute(self.prepare(get_introspection_query()), None, None)

    def _introspection(self, prepared: Prepared, variables: Mapping[str, Any] | None) -> Response:
        result = execute(
            self.graphql_schema,
            prepared.document,
            variable_values=dict(variables) if variables else None,
            operation_name=prepared.operation_name,
        )
        assert not inspect.isawaitable(result)  # introspection resolves synchronously
        return format_result(result)

    def subscriber(
        self, prepared: Prepared, variables: Mapping[str, Any] | None, context: Any
    ) -> ProjectingExecutor | Response:
        """The executor of a subscription for one subscriber's context, or an error response
        (variables that do not fit the document)."""
        if prepared.engine is not None and prepared.engine is not self:
            return prepared.engine.subscriber(prepared, variables, context)
        refused = _overlong_list(prepared, variables)
        if refused is not None:
            return refused
        executor = self.executor_class.build(
            self.graphql_schema,
            prepared.document,
            None,
            context,
            dict(variables) if variables else None,
            prepared.operation_name,
        )
        if isinstance(executor, list):
            return {"errors": [format_error(e) for e in executor]}
        return cast(ProjectingExecutor, executor)

    @staticmethod
    async def source(executor: ProjectingExecutor) -> AsyncIterable[Any] | Response:
        """Start a subscription's source stream (``CreateSourceEventStream``): what the root
        field's resolver returns (a core stream for the gateway's own fields), or an error
        response when the subscription cannot start.

        Raises:
            GatewayError: what refused to open the stream (a budget, the upstream's 403...):
                the subscription fails as if its stream had broken at once.
        """
        stream = create_source_event_stream(executor)
        if inspect.isawaitable(stream):
            stream = await stream
        if isinstance(stream, ExecutionResult):
            errors_ = stream.errors or []
            if len(errors_) == 1 and isinstance(errors_[0].original_error, GatewayError):
                raise errors_[0].original_error
            return format_result(stream)
        return stream

    @staticmethod
    def render(executor: ProjectingExecutor, payload: Any) -> Response | Awaitable[Response]:
        """Execute the subscription document for one source event: the response at once
        when no resolver had to wait (the usual case), else an awaitable of it."""
        result = execute_subscription_event(executor.build_per_event_executor(payload))
        if inspect.isawaitable(result):
            return _formatted(result)
        return format_result(result)


async def _formatted(result: Awaitable[ExecutionResult]) -> Response:
    return format_result(await result)


#: An introspection-only operation: its document, operation name and variables.
IntrospectionKey = tuple[str, str | None, bytes]
#: Introspection answers an engine keeps (each a few MB for a large schema).
INTROSPECTIONS_KEPT = 4
_INTROSPECTION_FIELDS = frozenset(("__schema", "__type", "__typename"))


def _introspection_key(
    prepared: Prepared, variables: Mapping[str, Any] | None
) -> IntrospectionKey | None:
    """The cache key of an operation that reads only the schema (every root selection is
    ``__schema``, ``__type`` or ``__typename``), else ``None``."""
    operation = prepared.operation
    if operation.operation.value != "query":
        return None
    for selection in operation.selection_set.selections:
        if not isinstance(selection, FieldNode) or selection.name.value not in (
            _INTROSPECTION_FIELDS
        ):
            return None
        if selection.directives:
            return None
    try:
        frozen = orjson.dumps(dict(variables or {}), option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    # The document as printed, not as sent: GraphiQL's (graphql-js) and graphql-core's
    # introspection queries differ only in their layout.
    return (print_ast(prepared.document), prepared.operation_name, frozen)


#: Items a list-typed variable may hold, checked before graphql-core coerces it item by
#: item (seconds of the event loop for a 4 MB list); the fields bound their own lists
#: further (a fleet call's ``clusters``: :func:`gateway.core.fleetops.check_listed`).
MAX_LIST_VARIABLE_ITEMS = 1_000


def _overlong_list(prepared: Prepared, variables: Mapping[str, Any] | None) -> Response | None:
    """The refusal of a list-typed variable over :data:`MAX_LIST_VARIABLE_ITEMS`, before
    any coercion, or ``None``."""
    if not variables:
        return None
    for definition in prepared.operation.variable_definitions or ():
        type_node = definition.type
        if isinstance(type_node, NonNullTypeNode):
            type_node = type_node.type
        if not isinstance(type_node, ListTypeNode):
            continue
        name = definition.variable.name.value
        value = variables.get(name)
        if isinstance(value, list) and len(value) > MAX_LIST_VARIABLE_ITEMS:
            message = (
                f"variable ${name} holds {len(value)} items; a list variable holds at most "
                f"{MAX_LIST_VARIABLE_ITEMS}"
            )
            return {"errors": [format_exception(ApiError(message, code="BAD_REQUEST"))]}
    return None


def format_result(result: ExecutionResult) -> Response:
    """An execution result as the response dict (``errors`` first when present)."""
    out: Response = {}
    if result.errors:
        out["errors"] = [format_error(e) for e in result.errors]
        if result.data is None and all(not e.path for e in result.errors):
            return out  # a request error: execution never started, so no `data`
    out["data"] = result.data
    return out


def _is_generated(t: GraphQLNamedType) -> bool:
    if (getattr(t, "extensions", None) or {}).get(NATIVE) == "data":
        return True
    definition = strawberry_definition(t)
    origin = getattr(definition, "origin", None)
    return getattr(origin, "__module__", None) == "gateway.graphql.objects" and not getattr(
        definition, "is_input", False
    )
