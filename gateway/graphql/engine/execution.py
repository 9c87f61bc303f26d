"""Parse, validate, limit and execute operations against the strawberry schema.

Every transport goes through :class:`Engine`: a document is parsed, validated and checked
against the limits once (an LRU cache keyed by its text), then executed by graphql-core
with the :class:`~gateway.graphql.engine.projection.ProjectingExecutor` over the strawberry-built
schema, whose resolvers are strawberry's.  Responses are plain dicts, serialised by the
transports with orjson.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterable, Awaitable, Mapping
from concurrent.futures import ThreadPoolExecutor
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

from gateway.core import GatewayError
from gateway.graphql.engine.limits import (
    Limits,
    check_document,
    check_fragment_cycles,
    count_values,
)
from gateway.graphql.engine.projection import ProjectingExecutor, executor_for
from gateway.graphql.errors import ApiError, format_error, format_exception
from gateway.graphql.schemas._library import (
    NATIVE,
    AcyclicExecutor,
    graphql_schema,
    strawberry_definition,
)

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
    #: Whether the document reads the schema (``__schema``, ``__type``): introspection,
    #: which only callers the cluster authenticates may run.
    reads_schema: bool = False

    @property
    def kind(self) -> OperationKind:
        return self.operation.operation.value


def _bad(message: str, code: str = "BAD_REQUEST", status: int = 400) -> RequestError:
    return RequestError(
        [format_exception(ApiError(message, code=code, http_status=status))], status
    )


class _OverBudget(BaseException):
    """Raised inside an introspection's execution when it has produced its budget of
    values: a ``BaseException``, so graphql-core's field error handling (which catches
    ``Exception``) does not turn it into one error per remaining field, and the execution
    stops at once."""


class _Tally:
    """One bounded execution's count of completed values against its budget."""

    __slots__ = ("budget", "resolved", "slice_started")

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.resolved = 0
        self.slice_started = time.perf_counter()


#: An introspection's thread works at most this long (seconds) before it pauses...
INTROSPECTION_SLICE_S = 0.002
#: ... for this long, holding no GIL: the event loop gets the interpreter at once, and on a
#: machine short of CPU an introspection (a budget-stopped hostile one included) takes at
#: most about half of one core from the process, not all of it (measured by the soak's
#: stall trace: 30-240 ms GIL waits before, with the 1 ms switch interval).
INTROSPECTION_PAUSE_S = 0.002
#: Values completed between two looks at the clock (~0.1-0.3 ms of work).
_CLOCK_EVERY = 64


#: The tally of the bounded execution running on this thread (executions are synchronous).
_BOUND = threading.local()


class _BoundedExecutor(AcyclicExecutor):
    """graphql-core's executor, stopped once it has completed its tally's ``budget`` values
    (:func:`_bounded_execute` sets the tally of the thread's execution: one class for all,
    not a class per execution, whose cycle a freeze could keep for good).  It runs on an
    introspection thread only (:class:`Introspections`), in slices of
    :data:`INTROSPECTION_SLICE_S` with a pause of :data:`INTROSPECTION_PAUSE_S` between two.

    What is counted is each value completed (a field's value, each item of a list, each
    wrapper's), not each field resolved: the work of an execution follows its values.  A
    document that selects ``fields`` of ``type`` of ``fields`` completes ~2.3 values a field
    where the full introspection completes ~1.6, and cost ~11 us a field against ~5
    (4.7 against 3.2 us a value, graphql-core 3.3, the gateway's schema): counted by fields,
    a budget of 1.5 introspections let such a document work ~4.5 introspections' CPU before
    its refusal; counted by values, ~2.2."""

    def complete_value(self, *args: Any, **kwargs: Any) -> Any:
        tally: _Tally = _BOUND.tally
        tally.resolved += 1
        if tally.resolved > tally.budget:
            raise _OverBudget
        if not tally.resolved % _CLOCK_EVERY:
            now = time.perf_counter()
            if now - tally.slice_started >= INTROSPECTION_SLICE_S:
                time.sleep(INTROSPECTION_PAUSE_S)  # on an introspection thread, never the loop
                tally.slice_started = time.perf_counter()
        return super().complete_value(*args, **kwargs)


def _bounded_execute(
    budget: int, schema: GraphQLSchema, document: DocumentNode, **kwargs: Any
) -> tuple[Any, _Tally]:
    """``execute`` completing at most ``budget`` values, and its tally.

    Raises:
        _OverBudget: the execution would resolve more (the tally is in its ``args``).
    """
    tally = _BOUND.tally = _Tally(budget)
    try:
        return execute(schema, document, executor_class=_BoundedExecutor, **kwargs), tally
    except _OverBudget:
        raise _OverBudget(tally) from None
    finally:
        _BOUND.tally = None


class BoundedThreads:
    """A few threads of their own and a bounded queue: work that must hold neither the event
    loop nor the default thread pool (which list workers and schema builds use).

    Args:
        name: the threads' name prefix.
        busy: what a caller refused because every place is taken is told.
        workers: threads.
        waiting: calls that may wait for a thread; more are refused (``TOO_MANY_REQUESTS``,
            retry after a second).
    """

    def __init__(self, name: str, busy: str, workers: int, waiting: int) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self._busy = busy
        self._admitted = 0
        self._max = workers + waiting

    @property
    def running(self) -> int:
        """Calls running or waiting now."""
        return self._admitted

    async def run(self, work: Any, *args: Any) -> Any:
        """Run ``work(*args)`` on one of the threads.

        Raises:
            ApiError: ``TOO_MANY_REQUESTS``: the threads are busy and the queue is full.
        """
        if self._admitted >= self._max:
            raise ApiError(self._busy, code="TOO_MANY_REQUESTS", http_status=429, retryAfter=1)
        self._admitted += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, work, *args)
        finally:
            self._admitted -= 1

    def cpu_seconds(self) -> float:
        """The CPU time its threads have used so far (each thread's own clock; time a thread
        waits or pauses is not counted)."""
        threads = list(getattr(self._pool, "_threads", ()))
        return sum(
            time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            for t in threads
            if t.ident is not None and t.is_alive()
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Introspections(BoundedThreads):
    """Where every endpoint's introspections run (a large schema's answer is seconds of
    work).

    One per gateway (the :class:`~gateway.graphql.engine.admission.Admission` holds it), shared by
    every engine.  What one introspection may produce is bounded by its engine: at most
    :data:`INTROSPECTION_FACTOR` times the values of the schema's full standard
    introspection (which is what GraphiQL and code generators ask), so a small document
    that multiplies ``__schema`` through aliases and fragments is refused, not computed.
    """

    def __init__(self, workers: int = 1, waiting: int = 8) -> None:
        super().__init__(
            "introspection",
            "too many schema introspections are running: retry in a second",
            workers,
            waiting,
        )


class Coercions(BoundedThreads):
    """Where the ``variables`` of a request too large to coerce on the event loop are coerced
    (graphql-core coerces each value in Python, ~6 us each: a 1 MB input, 0.6 s).

    One per gateway (the :class:`~gateway.graphql.engine.admission.Admission` holds it), shared
    by every engine.  The admission bounds what one request may send
    (``Limits.max_variable_values``).
    """

    def __init__(self, workers: int = 1, waiting: int = 16) -> None:
        super().__init__(
            "coercion",
            "too many requests with large variables are waiting: retry in a second",
            workers,
            waiting,
        )


#: Variables of more values than this (at any depth) are coerced on a :class:`Coercions`
#: thread; fewer (every ordinary request: ~6 ms at most) on the event loop, at no thread hop.
COERCED_ON_LOOP = 1_000


#: An introspection may complete this many times the values of the full standard one (the
#: richest variant GraphiQL and code generators send).
INTROSPECTION_FACTOR = 1.5
_RICHEST_INTROSPECTION = get_introspection_query(
    descriptions=True,
    specified_by_url=True,
    directive_is_repeatable=True,
    schema_description=True,
    input_value_deprecation=True,
    one_of=True,
)
#: ... and at least this many (a tiny schema's budget would refuse honest documents).
INTROSPECTION_FLOOR = 32_000


def _unlinked(document: DocumentNode) -> DocumentNode:
    """``document`` with its tokens linked forward only: graphql-core links them both ways,
    a reference cycle as long as the document, which only the cyclic collector frees (a
    document the cache drops, or one a schema build froze in flight, would never be:
    :mod:`gateway.graphql.engine.collector`).  Nothing reads ``prev`` once it is parsed."""
    token = document.loc.start_token if document.loc is not None else None
    while token is not None:
        token.prev = None
        token = token.next
    return document


class Engine:
    """Executes GraphQL operations for every transport.

    Args:
        schema: the schema: strawberry's (its graphql-core schema is executed) or a
            graphql-core one (a group's, :mod:`gateway.graphql.schemas.native`).
        limits: depth / alias / complexity limits applied to every document.
        cache_size: distinct documents kept parsed and validated.
        introspections: where introspections run (the gateway's, shared by every engine;
            one of its own when not given).
        coercions: where large ``variables`` are coerced (likewise).
    """

    def __init__(
        self,
        schema: strawberry.Schema | GraphQLSchema,
        limits: Limits,
        cache_size: int = 512,
        introspections: Introspections | None = None,
        coercions: Coercions | None = None,
    ) -> None:
        self.schema = schema
        self.introspections = introspections or Introspections()
        self.coercions = coercions or Coercions()
        #: Values the schema's full standard introspection completes (0: not counted yet).
        self._standard_values = 0
        self.graphql_schema: GraphQLSchema = graphql_schema(schema)
        self.limits = limits
        #: Valid documents only (a failure is cheap to find again and must not evict
        #: valid ones), bounded in count and in bytes of text.
        self._documents: OrderedDict[str, tuple[DocumentNode, bool]] = OrderedDict()
        self._cached_bytes = 0
        self._cache_size = cache_size
        #: Answers to introspection-only operations, by document, operation and variables.
        self._introspections: OrderedDict[IntrospectionKey, Response] = OrderedDict()
        self._introspecting: dict[IntrospectionKey, asyncio.Future[tuple[Response, int]]] = {}
        #: Refusals of introspections over their budget, by the digest of their key.
        self._refused: OrderedDict[bytes, Response] = OrderedDict()
        data_types = frozenset(
            name
            for name, t in self.graphql_schema.type_map.items()
            if not name.startswith("__") and _is_generated(t)
        )
        self.executor_class: type[ProjectingExecutor] = executor_for(data_types)

    # -- preparing -------------------------------------------------------------------------

    def _document(self, query: str) -> tuple[DocumentNode, bool]:
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

    def _parse(self, query: str) -> tuple[DocumentNode, bool]:
        """Cheap before expensive: size, then a token-limited parse, then the depth, alias
        and complexity limits, and only then the schema validation.  Returns the document
        and whether it reads the schema."""
        limits = self.limits
        if len(query) > limits.max_document_bytes:
            raise _bad(
                f"the GraphQL document is larger than {limits.max_document_bytes} bytes",
                code="DOCUMENT_TOO_LARGE",
                status=413,
            )
        try:
            document = _unlinked(parse(query, no_location=False, max_tokens=limits.max_tokens))
            check_fragment_cycles(document)
            reads_schema = check_document(document, limits)
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
        return document, reads_schema

    def prepare(self, query: Any, operation_name: Any = None) -> Prepared:
        """Parse (cached), validate and limit-check; pick the operation.

        Raises:
            RequestError: the request cannot be executed.
        """
        if not isinstance(query, str) or not query.strip():
            raise _bad("a GraphQL request needs a `query` string")
        if operation_name is not None and not isinstance(operation_name, str):
            raise _bad("`operationName` must be a string")
        document, reads_schema = self._document(query)
        operation = get_operation_ast(document, operation_name)
        if operation is None:
            message = (
                f"unknown operation named {operation_name!r}"
                if operation_name
                else "the document has several operations: give `operationName`"
            )
            raise _bad(message)
        return Prepared(query, document, operation, operation_name, self, reads_schema)

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
        key = _introspection_key(prepared, variables)
        if key is not None:
            return await self._introspect(key, prepared, variables)
        if variables and count_values(variables, COERCED_ON_LOOP) > COERCED_ON_LOOP:
            return await self._execute_coerced_aside(prepared, variables, context, root)
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

    async def _execute_coerced_aside(
        self, prepared: Prepared, variables: Mapping[str, Any], context: Any, root: Any
    ) -> Response:
        """:meth:`execute` of an operation whose variables are large: graphql-core's
        executor is built (the variables coerced) on a :class:`Coercions` thread, then the
        operation executes on the event loop, as graphql-core's ``execute`` would."""
        try:
            executor = await self.coercions.run(
                self.executor_class.build,
                self.graphql_schema,
                prepared.document,
                root,
                context,
                dict(variables),
                prepared.operation_name,
            )
        except ApiError as exc:
            return {"errors": [format_exception(exc)]}
        if isinstance(executor, list):
            return format_result(ExecutionResult(None, errors=executor))
        result = executor.execute_operation()
        if inspect.isawaitable(result):
            result = await result
        assert isinstance(result, ExecutionResult)  # no @defer or @stream in the schemas
        return format_result(result)

    async def _introspect(
        self, key: IntrospectionKey, prepared: Prepared, variables: Mapping[str, Any] | None
    ) -> Response:
        """An operation that reads only the schema: the same answer for every caller, so it
        is kept (GraphiQL and code generators ask the same large document again and again),
        computed once however many ask at once, on the gateway's introspection threads
        (:class:`Introspections`), and bounded in what it may produce."""
        cached = self._introspections.get(key)
        if cached is not None:
            self._introspections.move_to_end(key)
            return cached
        digest = hashlib.sha256(repr(key).encode()).digest()
        refused = self._refused.get(digest)
        if refused is not None:  # over its budget before: the same work, the same refusal
            self._refused.move_to_end(digest)
            return refused
        running = self._introspecting.get(key)
        if running is None:
            running = asyncio.ensure_future(
                self.introspections.run(self._introspection, prepared, variables)
            )
            self._introspecting[key] = running
            running.add_done_callback(lambda _: self._introspecting.pop(key, None))
        try:
            response, resolved = await asyncio.shield(running)
        except ApiError as exc:
            return {"errors": [format_exception(exc)]}
        # Only answers no larger than the standard one are kept: what an engine keeps is
        # what honest clients ask, whatever else is asked of it.
        if "errors" not in response and resolved <= self._standard_values:
            self._introspections[key] = response
            while len(self._introspections) > INTROSPECTIONS_KEPT:
                self._introspections.popitem(last=False)
        elif _over_budget(response):
            # ... and a document refused for its size is refused again at once, not after
            # the same 1.5 introspections of work (a hostile client repeats itself); kept by
            # digest (a few bytes each, whatever the document's size)
            self._refused[digest] = response
            while len(self._refused) > REFUSALS_KEPT:
                self._refused.popitem(last=False)
        return response

    async def warm_introspection(self) -> None:
        """Answer the standard full introspection (GraphiQL's, graphql-core's and most
        clients' first request) before anyone asks."""
        await self.execute(self.prepare(get_introspection_query()), None, None)
        await self.introspections.run(self._budget)

    def _budget(self) -> int:
        """The values an introspection may complete, sized on first use by the full standard
        introspection (run once: its size is the schema's, not a caller's)."""
        if not self._standard_values:
            standard = self.prepare(_RICHEST_INTROSPECTION)
            _, counted = _bounded_execute(1 << 62, self.graphql_schema, standard.document)
            self._standard_values = counted.resolved
        return max(int(INTROSPECTION_FACTOR * self._standard_values), INTROSPECTION_FLOOR)

    def _introspection(
        self, prepared: Prepared, variables: Mapping[str, Any] | None
    ) -> tuple[Response, int]:
        budget = self._budget()
        try:
            result, tally = _bounded_execute(
                budget,
                self.graphql_schema,
                prepared.document,
                variable_values=dict(variables) if variables else None,
                operation_name=prepared.operation_name,
            )
        except _OverBudget as over:
            error = ApiError(
                f"the introspection would resolve more than {budget} values (1.5 times the "
                "schema's full introspection): ask for the full introspection once instead",
                code="QUERY_TOO_COMPLEX",
            )
            return {"errors": [format_exception(error)]}, over.args[0].resolved
        assert not inspect.isawaitable(result)  # introspection resolves synchronously
        return format_result(result), tally.resolved

    async def subscriber(
        self, prepared: Prepared, variables: Mapping[str, Any] | None, context: Any
    ) -> ProjectingExecutor | Response:
        """The executor of a subscription for one subscriber's context, or an error response
        (variables that do not fit the document).  Large ``variables`` are coerced on a
        :class:`Coercions` thread, as for :meth:`execute`."""
        if prepared.engine is not None and prepared.engine is not self:
            return await prepared.engine.subscriber(prepared, variables, context)
        build = (
            self.graphql_schema,
            prepared.document,
            None,
            context,
            dict(variables) if variables else None,
            prepared.operation_name,
        )
        if variables and count_values(variables, COERCED_ON_LOOP) > COERCED_ON_LOOP:
            try:
                executor = await self.coercions.run(self.executor_class.build, *build)
            except ApiError as exc:
                return {"errors": [format_exception(exc)]}
        else:
            executor = self.executor_class.build(*build)
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
#: Refusals of introspections over their budget an engine keeps (a few hundred bytes each).
REFUSALS_KEPT = 64


def _over_budget(response: Response) -> bool:
    """Is ``response`` the refusal of an introspection that reached its budget?"""
    errors_: list[dict[str, Any]] = response.get("errors") or []
    return len(errors_) == 1 and (errors_[0].get("extensions") or {}).get("code") == (
        "QUERY_TOO_COMPLEX"
    )


_INTROSPECTION_FIELDS = frozenset(("__schema", "__type", "__typename"))


def _introspection_key(
    prepared: Prepared, variables: Mapping[str, Any] | None
) -> IntrospectionKey | None:
    """The cache key of an operation that reads only the schema (every root selection is
    ``__schema``, ``__type`` or ``__typename``, one at least of the first two), else
    ``None``.  ``{ __typename }`` alone (a client's ping) is answered as any query: it
    resolves to a name, and sizing an introspection's budget would execute the schema's
    whole introspection first (seconds of CPU for a large group's first ping)."""
    operation = prepared.operation
    if operation.operation.value != "query":
        return None
    reads = False
    for selection in operation.selection_set.selections:
        if not isinstance(selection, FieldNode) or selection.name.value not in (
            _INTROSPECTION_FIELDS
        ):
            return None
        if selection.directives:
            return None
        reads = reads or selection.name.value != "__typename"
    if not reads:
        return None
    try:
        frozen = orjson.dumps(dict(variables or {}), option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    # The document as printed, not as sent: GraphiQL's (graphql-js) and graphql-core's
    # introspection queries differ only in their layout.
    return (print_ast(prepared.document), prepared.operation_name, frozen)


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
    return getattr(
        origin, "__module__", None
    ) == "gateway.graphql.resolvers.objects" and not getattr(definition, "is_input", False)
