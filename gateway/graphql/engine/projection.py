"""The fast path: complete plain-data selections by projecting dicts, not per-field resolvers.

A stock GraphQL execution calls a resolver and a completion step for every field of every
object: for a list of 5,000 pods selecting 15 fields that is most of a second of Python
(docs/performance.md).  The generated Kubernetes types are plain data (every field is its
JSON key), so when a selection below a field touches only such fields, the result is a
projection of the upstream dict, computed here by a plan compiled once per selection: one
generated function per object type and selection, which reads each key, passes a
well-formed leaf through without a call and sends anything else to the scalar's own
serialiser.

The plan is used only when it is exactly equivalent: any field with its own resolver
(links, ``raw`` excepted), an abstract type, ``@defer``, or a value the serialiser would
change or refuse (a null where the schema says non-null, a wrong shape, an ``Int`` out of
range) makes the executor complete that value the ordinary way, so errors and partial data
are the spec's.  ``tests/graphql/test_projection_differential.py`` holds the two to the same
data, errors and bytes on generated queries and damaged data.

A large list (``LARGE_LIST`` items or more) is completed :data:`SLICE` items per event-loop
step, so that other callers are served in between; the core's large-list scope
(:mod:`gateway.core.lists.large`, the operation's adapter's) holds the cyclic collector off
from the first slice and frees the decoded body the same way once nothing else holds it.
Like any asynchronous resolver, such a list lets the other fields of its operation complete
meanwhile: the errors of fields completing concurrently may come in another order than a
synchronous completion would give.

A small list body (and, with list workers, :mod:`gateway.core.lists.pool`, a large one)
reaches its field's completion undecoded (the resolver asked for it:
``LargeLists.handed_on(..., deferrable=True)``), and the core's large-list scope is given a
plan's plain-data form (:attr:`Plan.spec`): a small body is projected in this process from
only what the selection reads, without decoding the rest (``LargeLists.projected_here``), a
large one in a worker process (``LargeLists.projected``), and the projected JSON is embedded
in the answer as it is; a body neither can project is decoded here and completed as above.
The generated code is :mod:`gateway.core.lists.projections`'s, the same in every place.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping
from types import CoroutineType
from typing import Any, cast

import orjson
from graphql import (
    FragmentSpreadNode,
    GraphQLEnumType,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
    GraphQLString,
    InlineFragmentNode,
    SelectionSetNode,
    Undefined,
)

from gateway.core import (
    ALWAYS,
    CHECKS,
    CONST,
    COPY,
    LARGE_LIST,
    LEAF,
    PASSTHROUGH,
    READ,
    SELF,
    Fallback,
    LargeLists,
    OperationTimer,
    Project,
    Spec,
    Step,
    Undecoded,
    dict_resolver,
    generate,
    identity,
    is_large,
    leaf_of,
    list_of,
    nonnull_of,
    then,
)
from gateway.graphql.resolvers.context import Context
from gateway.graphql.resolvers.objects import resolve_raw
from gateway.graphql.resolvers.views import (
    PAGE_INFO_FIELDS,
    VIEW_FIELDS,
    LiveAnswer,
    PageEdges,
    PageInfo,
    PageNode,
    SharedItems,
    ViewAnswer,
)
from gateway.graphql.schemas._library import (
    NATIVE,
    NOT_COMPLETED,
    CompletingExecutor,
    Fields,
    Substitute,
    strawberry_definition,
    subselection,
)

_NO_PLAN = object()


def _native(field: GraphQLField) -> Any:
    return field.extensions.get(NATIVE) if field.extensions else None


def _is_plain(field: GraphQLField) -> bool:
    """A field strawberry resolves with the schema's default resolver (its JSON key), or
    one :mod:`gateway.graphql.schemas.native` made to read its JSON key."""
    if _native(field) == "plain":
        return True
    definition = strawberry_definition(field)
    return bool(getattr(definition, "is_basic_field", False))


def _is_raw(field: GraphQLField) -> bool:
    if _native(field) == "raw":
        return True
    definition = strawberry_definition(field)
    resolver = getattr(definition, "base_resolver", None)
    return resolver is not None and getattr(resolver, "wrapped_func", None) is resolve_raw


def _leaf(scalar: GraphQLScalarType) -> Project | None:
    if scalar.name not in PASSTHROUGH:
        return None
    return leaf_of(scalar.name, _serializer(scalar))


def _serializer(scalar: GraphQLScalarType) -> Project:
    """The scalar's serialiser where graphql-core would accept its result; anything else
    (an error, or null: graphql-core reports it) falls back."""
    serialize = scalar.serialize

    def run(value: Any) -> Any:
        try:
            out = serialize(value)
        except Exception:
            raise Fallback from None
        if out is None or out is Undefined:
            raise Fallback
        return out

    return run


#: Items of a large list projected in one event-loop step (a few milliseconds of work).
SLICE = 250
#: Plans kept per engine across executions (each holds its document's field nodes alive).
SHARED_PLANS = 1024
#: Projections kept per shared page (:class:`SharedItems`): one per selection its callers
#: make (the first ones kept; a plan of an execution of its own is never asked again).
SHARED_RENDERINGS = 4


class Plan:
    """The compiled completion of one type under one selection.

    Attributes:
        run: completes a non-null value, or raises :class:`Fallback`.
        kind: ``"nonnull"``, ``"list"``, ``"leaf"`` or ``"object"``.
        inner: the plan of the wrapped type (non-null) or of the items (list).
        nullable_items: a list whose items may be null.
        lists: an object's list-valued fields ``(response key, JSON key, plan)``, which a
            large list may be completed in slices for (:meth:`ProjectingExecutor._sliced`).
    """

    __slots__ = (
        "_done",
        "_source",
        "inner",
        "kind",
        "lists",
        "nullable_items",
        "run",
        "spec",
        "steps",
    )

    def __init__(
        self,
        kind: str,
        run: Project,
        inner: Plan | None = None,
        *,
        nullable_items: bool = False,
        lists: tuple[tuple[str, str, Plan], ...] = (),
        source: tuple[str, Callable[[frozenset[str]], Callable[[Any, Any], Any]]] | None = None,
        steps: tuple[Step, ...] | None = None,
        spec: Spec = (),
    ) -> None:
        self.kind = kind
        #: The plan as plain data (:mod:`gateway.core.lists.projections`), for a list worker.
        self.spec = spec
        self.run = run
        self.inner = inner
        self.nullable_items = nullable_items
        self.lists = lists
        self._source = source
        #: An object's steps (for the generated code of a parent object).
        self.steps = steps
        self._done: dict[frozenset[str], Callable[[Any, Any], Any]] = {}

    def with_done(self, keys: frozenset[str]) -> Callable[[Any, Any], Any]:
        """This object's projection taking the fields ``keys`` already completed:
        ``f(value, done)`` with ``done[key]`` their values."""
        fn = self._done.get(keys)
        if fn is None:
            assert self._source is not None
            fn = self._done[keys] = self._source[1](keys)
        return fn


class ProjectingExecutor(CompletingExecutor):
    """A graphql-core executor that projects plain-data subtrees in one compiled step.

    Plans are cached per execution (each event of a subscription is one), keyed by the
    identity of the collected field list, which graphql-core memoises.  A large list
    (``LARGE_LIST`` items or more, or a list object with as many ``items``) is completed
    in slices of :data:`SLICE` items, yielding to the event loop in between.
    """

    _plans: dict[tuple[int, int], Any]
    #: Names of the object types the projection may complete (the generated types).
    data_types: frozenset[str] = frozenset()
    #: Plans that do not depend on the variables (no ``@skip``/``@include`` below them),
    #: shared by every execution of the engine: a cached document's field nodes are the same
    #: objects in every request, so the plan compiled for them once serves all (one per
    #: :func:`executor_for` class, that is per engine and schema; bounded, least recent out).
    shared_plans: OrderedDict[tuple[int, tuple[int, ...]], tuple[Any, tuple[Any, ...]]]
    _varies: bool
    _own_large_lists: LargeLists

    def complete_directly(self, return_type: GraphQLOutputType, fields: Fields, result: Any) -> Any:
        if type(return_type) is GraphQLScalarType:
            return NOT_COMPLETED
        if type(result) is Undecoded:
            return self._undecoded(return_type, fields, result)
        if type(result) is SharedItems:
            return self._shared(return_type, fields, result)
        if type(result) is ViewAnswer or type(result) is LiveAnswer:
            return self._view_answer(return_type, fields, result)
        if type(result) is PageNode:
            return self._page_node(return_type, fields, result)
        if type(result) is PageEdges:
            written = self._page_edges(return_type, fields, result)
            return NOT_COMPLETED if written is None else orjson.Fragment(written)
        plan = self._plan(return_type, fields)
        if is_large(result):
            if plan is not None:
                return self._sliced(plan, result)
            # Completed the ordinary way in this step: the collector is held off until it
            # ends, when the decoded body is dropped (it need never traverse it).
            self._large_lists().hold_until_next_turn()
            return NOT_COMPLETED
        if plan is not None:
            try:
                return plan.run(result)
            except Fallback:
                pass
        return NOT_COMPLETED

    def _shared(self, return_type: GraphQLOutputType, fields: Fields, shared: SharedItems) -> Any:
        """The items of a view's page, read for the selection (only the keys its plan reads
        of each object decoded: :meth:`SharedItems.read`) and projected, once per selection
        for all the callers of a page they share (the projection is read only, as the items
        are); graphql-core completes the whole objects where no plan applies."""
        plan = self._plan(return_type, fields)
        made = shared.made
        found = None if made is None else made.get(plan)
        if found is not None:
            return found
        if plan is None:
            return Substitute(shared.items)
        item = _item_spec(plan.spec)
        if item is not None and not shared.contents.decoded:
            # written as JSON straight from each object's, where that is exactly what the
            # projection of its objects would be written as (embedded in the answer unread)
            json = shared.contents.json(plan.spec)
            if json is not None:
                found = orjson.Fragment(json)
                if made is not None and len(made) < SHARED_RENDERINGS:
                    made[plan] = found
                return found
        # only what the selection reads of each object is decoded
        items = shared.items if item is None else shared.read(item)
        if len(items) >= LARGE_LIST:
            # in slices, as any large list (not kept: such a page is not shared); when it
            # does not fit the plan, graphql-core completes the page's whole objects
            return self._sliced(plan, items)
        try:
            found = plan.run(items)
        except Fallback:
            return Substitute(shared.items)
        if made is not None and len(made) < SHARED_RENDERINGS:
            made[plan] = found
        return found

    def _view_answer(
        self, return_type: GraphQLOutputType, fields: Fields, answer: ViewAnswer
    ) -> Any:
        """A view's answer (``podsView { total resourceVersion pageInfo { ... } nodes { ... }
        edges { ... } }``) completed as one dict in the selection's order, its nodes and
        edges as :meth:`_shared` and :meth:`_page_edges` complete them, instead of
        graphql-core executing each of its few fields (a resolver, its info and a
        completion each: about a tenth of a distinct view's CPU).  :data:`NOT_COMPLETED`
        (graphql-core completes it all) for anything else: ``counts`` (its own
        resolver), a field with arguments, a value another completion would refuse or
        change (a total past ``Int``), nodes or edges this does not complete here (a page
        of the largest size, completed in slices; objects only graphql-core completes)."""
        found = self._object_selection(return_type, fields)
        if found is None:
            return NOT_COMPLETED
        t, selected, out = found
        for key, (node, sub) in selected.items():
            name = node.name.value
            field = t.fields.get(name)
            if field is None or node.arguments:
                return NOT_COMPLETED
            if name == "nodes":
                value = self._view_nodes(field.type, sub, answer)
            elif name == "edges":
                edges = answer.edges
                if type(edges) is not PageEdges:  # a live view's notice: none
                    value = [] if type(edges) is list and not edges else NOT_COMPLETED
                else:
                    written = self._page_edges(field.type, sub, edges)
                    value = NOT_COMPLETED if written is None else orjson.Fragment(written)
            elif name == "pageInfo":
                value = self._plain(field.type, sub, answer.page_info, PAGE_INFO_FIELDS)
            else:
                attribute = VIEW_FIELDS.get(name)
                if attribute is None:
                    return NOT_COMPLETED
                value = _scalar(field.type, getattr(answer, attribute))
            if value is NOT_COMPLETED:
                return NOT_COMPLETED
            out[key] = value
        return out

    def _object_selection(
        self, return_type: GraphQLOutputType, fields: Fields
    ) -> tuple[GraphQLObjectType, dict[str, Any], dict[str, Any]] | None:
        """The object type of ``return_type``, its fields selected by ``fields`` but
        ``__typename``, and the answer begun with the ``__typename`` ones in place (the
        selection's order); ``None`` where it is not an object or nothing is selected."""
        t = return_type.of_type if isinstance(return_type, GraphQLNonNull) else return_type
        if not isinstance(t, GraphQLObjectType):
            return None
        selected = subselection(self, t, fields)
        if not selected:
            return None
        out: dict[str, Any] = {}
        rest: dict[str, Any] = {}
        for key, found in selected.items():
            if found[0].name.value == "__typename":
                out[key] = t.name
            else:
                out[key] = None  # its place in the selection's order, filled by the caller
                rest[key] = found
        return t, rest, out

    def _view_nodes(
        self, return_type: GraphQLOutputType, fields: Fields, answer: ViewAnswer
    ) -> Any:
        """A view answer's ``nodes`` as :meth:`_shared` completes them, or
        :data:`NOT_COMPLETED` where graphql-core would have to (a page of the largest size
        is completed in slices, over several steps)."""
        nodes = answer.nodes
        if type(nodes) is list and not nodes:  # a live view's notice: none
            return []
        if type(nodes) is not SharedItems or len(nodes) >= LARGE_LIST:
            return NOT_COMPLETED
        value = self._shared(return_type, fields, nodes)
        return NOT_COMPLETED if type(value) is Substitute else value

    def _plain(
        self,
        return_type: GraphQLOutputType,
        fields: Fields,
        value: Any,
        attributes: Mapping[str, str],
    ) -> Any:
        """An object of scalar fields read as attributes of ``value`` (a view's
        :class:`PageInfo`), completed as graphql-core completes it, or
        :data:`NOT_COMPLETED`."""
        found = None if type(value) is not PageInfo else self._object_selection(return_type, fields)
        if found is None:
            return NOT_COMPLETED
        t, selected, out = found
        for key, (node, _sub) in selected.items():
            name = node.name.value
            field = t.fields.get(name)
            attribute = attributes.get(name)
            if field is None or attribute is None or node.arguments:
                return NOT_COMPLETED
            done = _scalar(field.type, getattr(value, attribute))
            if done is NOT_COMPLETED:
                return NOT_COMPLETED
            out[key] = done
        return out

    def _page_edges(
        self, return_type: GraphQLOutputType, fields: Fields, edges: PageEdges
    ) -> bytes | None:
        """A view's ``edges { cursor node { ... } }`` written as JSON: each node's as
        ``nodes`` are (:meth:`~gateway.core.views.evaluate.Contents.json_items`), between
        the edge's own keys (under their response keys, aliases and ``__typename``
        included; the edges' further string fields, :attr:`PageEdges.columns`, a merged
        view's ``cluster``, as ``cursor`` is); ``None`` (graphql-core completes the edges,
        their nodes read for the selection: :meth:`_page_node`) for anything else, or
        where the nodes are not written."""
        t = return_type
        if not isinstance(t, GraphQLNonNull) or not isinstance(t.of_type, GraphQLList):
            return None
        item = t.of_type.of_type
        if not isinstance(item, GraphQLNonNull) or not isinstance(item.of_type, GraphQLObjectType):
            return None
        edge = item.of_type
        selected = subselection(self, edge, fields)
        if not selected:
            return None
        cursors = edges.cursors
        columns: list[tuple[bytes, list[bytes]]] = []
        for key, (node, sub) in selected.items():
            name = node.name.value
            if node.arguments:
                return None
            values: list[bytes]
            if name == "__typename":
                values = [orjson.dumps(edge.name)] * len(cursors)
            elif name == "node":
                field = edge.fields[name]
                plan = self._plan(field.type, sub)
                if plan is None or not isinstance(field.type, GraphQLNonNull):
                    return None
                found = edges.contents.json_items(("nonnull", ("list", False, plan.spec)))
                if found is None:
                    return None
                values = found
            elif name == "cursor" and all(type(c) is str for c in cursors):
                values = list(map(orjson.dumps, cursors))
            else:
                column = edges.columns.get(name)
                if column is None or not _strings(edge.fields[name].type, column, len(cursors)):
                    return None
                values = list(map(orjson.dumps, column))
            columns.append((orjson.dumps(key) + b":", values))
        parts = [
            b"{" + b",".join([k + v[i] for k, v in columns]) + b"}" for i in range(len(cursors))
        ]
        return b"[" + b",".join(parts) + b"]"

    def _page_node(self, return_type: GraphQLOutputType, fields: Fields, node: PageNode) -> Any:
        """An edge's node, read for the selection as the page's ``nodes`` are (the page's
        objects read for its plan once per answer: :class:`PageNode`); graphql-core
        completes the whole object where no plan applies."""
        plan = self._plan(return_type, fields)
        if plan is None:
            return Substitute(node.whole)
        spec = plan.spec
        while spec[0] == "nonnull":
            spec = spec[1]
        if spec[0] != "object":
            return Substitute(node.whole)
        try:
            return plan.run(node.read(spec))
        except Fallback:
            return Substitute(node.whole)

    def _undecoded(self, return_type: GraphQLOutputType, fields: Fields, body: Undecoded) -> Any:
        """A list body the large-list scope handed on undecoded: a small one projected here
        and now from only what the selection reads (``LargeLists.projected_here``), a large
        one by a list worker (``LargeLists.projected``), into JSON embedded as it is; or,
        when neither can (no plan for this selection, a value only a serialiser here can
        complete, no worker), decoded and completed as any decoded list is."""
        operation, body.operation = body.operation, None
        try:
            plan = self._plan(return_type, fields)
            spec = None if plan is None else plan.spec
            done = self._large_lists().projected_here(body, spec)
        except BaseException as exc:
            if operation is not None:
                operation.end(exc)
            raise
        if done is not None:
            if operation is not None:
                operation.end()
            return orjson.Fragment(done)
        return self._projected(return_type, fields, body, spec, operation)

    async def _projected(
        self,
        return_type: GraphQLOutputType,
        fields: Fields,
        body: Undecoded,
        spec: Spec | None,
        operation: OperationTimer | None,
    ) -> Any:
        """The rest of :meth:`_undecoded`, which ends the list's ``operation`` (its
        resolver left it to the completion) once the body is projected or decoded."""
        try:
            value = await self._large_lists().projected(body, spec)
        except BaseException as exc:
            if operation is not None:
                operation.end(exc)
            raise
        if operation is not None:
            operation.end()
        if type(value) is bytes:
            return orjson.Fragment(value)
        done = self.complete_directly(return_type, fields, value)
        if type(done) is CoroutineType:
            done = await done
        return Substitute(value) if done is NOT_COMPLETED else done

    async def _sliced(self, plan: Plan, value: Any) -> Any:
        """Complete a large value in slices, then let the core free it in slices.

        Returns :data:`NOT_COMPLETED` when the value does not fit the plan: the executor
        then completes all of it the ordinary way.
        """
        try:
            return await self._large_lists().complete(
                value, lambda v: _in_slices(plan, v), per_turn=SLICE
            )
        except Fallback:
            return NOT_COMPLETED

    def _large_lists(self) -> LargeLists:
        """The large-list scope's owner: the operation's adapter's (one executor without a
        gateway context, as in the differential tests, gets one of its own)."""
        context = self.context_value
        if isinstance(context, Context):
            return context.adapter.large_lists
        try:
            return self._own_large_lists
        except AttributeError:
            self._own_large_lists = LargeLists()
            return self._own_large_lists

    def _plan(self, return_type: GraphQLOutputType, fdl: Fields) -> Plan | None:
        try:
            plans = self._plans
        except AttributeError:
            plans = self._plans = {}
        key = (id(return_type), id(fdl))
        plan = plans.get(key, _NO_PLAN)
        if plan is _NO_PLAN:
            nodes = tuple(fd.node for fd in fdl)
            shared_key = (id(return_type), tuple(map(id, nodes)))
            shared = self.shared_plans.get(shared_key)
            if shared is not None:
                # The stored nodes are kept alive with the plan: equal ids, same nodes.
                plan = shared[0]
                self.shared_plans.move_to_end(shared_key)
            else:
                named = return_type
                while isinstance(named, GraphQLNonNull | GraphQLList):
                    named = named.of_type
                self._varies = False
                plan = (
                    self._compile(return_type, fdl)
                    if isinstance(named, GraphQLObjectType) and named.name in self.data_types
                    else None
                )
                if not self._varies:
                    self.shared_plans[shared_key] = (plan, (return_type, *nodes))
                    while len(self.shared_plans) > SHARED_PLANS:
                        self.shared_plans.popitem(last=False)
            # Keep fdl alive with its plan so that its id cannot be reused.
            plans[key] = plan
            plans[(id(fdl), 0)] = fdl
        return cast("Plan | None", plan)

    def _compile(self, t: GraphQLOutputType, fdl: Fields) -> Plan | None:
        if isinstance(t, GraphQLNonNull):
            inner = self._compile(t.of_type, fdl)
            if inner is None:
                return None
            return Plan("nonnull", nonnull_of(inner.run), inner, spec=("nonnull", inner.spec))
        if isinstance(t, GraphQLList):
            item = self._compile(t.of_type, fdl)
            if item is None:
                return None
            nullable_items = not isinstance(t.of_type, GraphQLNonNull)
            return Plan(
                "list",
                list_of(item.run, nullable_items),
                item,
                nullable_items=nullable_items,
                spec=("list", nullable_items, item.spec),
            )
        if isinstance(t, GraphQLScalarType):
            if t.name not in PASSTHROUGH:
                return None
            return Plan("leaf", _leaf(t) or identity, spec=("leaf", t.name))
        if isinstance(t, GraphQLEnumType) or not isinstance(t, GraphQLObjectType):
            return None
        if t.name not in self.data_types:
            return None
        return self._compile_object(t, fdl)

    def _compile_object(self, t: GraphQLObjectType, fdl: Fields) -> Plan | None:
        if not self._varies and any(
            _directed(fd.node.selection_set, self.fragments, set()) for fd in fdl
        ):
            self._varies = True  # what is selected here depends on the variables
        selected = subselection(self, t, fdl)
        if selected is None:
            return None
        steps: list[Step] = []
        specs: list[Spec] = []
        lists: list[tuple[str, str, Plan]] = []
        for response_key, (node, sub) in selected.items():
            name = node.name.value
            if name == "__typename":
                steps.append(Step(response_key, CONST, t.name))
                specs.append((response_key, CONST, t.name, None, None, False))
                continue
            field = t.fields.get(name)
            if field is None:
                return None
            if _is_raw(field):
                steps.append(Step(response_key, SELF, ""))
                specs.append((response_key, SELF, "", None, None, False))
                continue
            if not _is_plain(field) or node.arguments:
                return None
            ft = field.type
            python_name = name if _native(field) == "plain" else _python_name(field)
            if python_name is None:
                return None
            check: str | None = None
            plan = None
            if isinstance(ft, GraphQLScalarType):
                if ft.name not in PASSTHROUGH:
                    return None
                fn = _leaf(ft)
                how = LEAF if fn else COPY
                check = CHECKS.get(ft.name)
                fn_spec: Spec | None = ("leaf", ft.name) if fn else None
            else:
                plan = self._compile(ft, sub)
                if plan is None:
                    return None
                fn = plan.run
                fn_spec = plan.spec
                # A non-null field: its plan sees a null (and falls back on it).
                how = ALWAYS if isinstance(ft, GraphQLNonNull) else LEAF
                if python_name == name and plan.kind in ("list", "nonnull"):
                    lists.append((response_key, name, plan))
            if python_name != name:
                # The schema's resolver reads the Python name first (``continue_``).
                steps.append(Step(response_key, READ, python_name, then(how, fn)))
                specs.append((response_key, READ, python_name, None, ("then", how, fn_spec), False))
            else:
                inline = (
                    plan.steps
                    if plan is not None and how == LEAF and plan.kind == "object"
                    else None
                )
                steps.append(Step(response_key, how, name, fn, check, inline))
                specs.append((response_key, how, name, check, fn_spec, inline is not None))
        frozen = tuple(steps)

        def source(done: frozenset[str]) -> Callable[[Any, Any], Any]:
            return cast("Callable[[Any, Any], Any]", generate(t.name, frozen, done))

        run = generate(t.name, frozen, frozenset())
        return Plan(
            "object",
            run,
            lists=tuple(lists),
            source=(t.name, source),
            steps=frozen,
            spec=("object", t.name, tuple(specs)),
        )


#: The scalars of a view's answer and page info, by name: the test of a value graphql-core
#: serialises as it is (``Int``: a 32-bit integer).
_SCALARS: dict[str, Callable[[Any], bool]] = {
    "Int": lambda v: type(v) is int and -(2**31) <= v < 2**31,
    "String": lambda v: type(v) is str,
    "Boolean": lambda v: type(v) is bool,
}


def _scalar(return_type: GraphQLOutputType, value: Any) -> Any:
    """``value`` as graphql-core completes it for a field of ``return_type`` (a nullable or
    non-null ``Int``, ``String`` or ``Boolean``), or :data:`NOT_COMPLETED` where it would
    serialise it otherwise or refuse it (a null where the schema says non-null)."""
    t = return_type
    nonnull = isinstance(t, GraphQLNonNull)
    if nonnull:
        t = t.of_type  # type: ignore[union-attr]
    if value is None:
        return NOT_COMPLETED if nonnull else None
    if not isinstance(t, GraphQLScalarType):
        return NOT_COMPLETED
    test = _SCALARS.get(t.name)
    if test is None or not test(value):
        return NOT_COMPLETED
    return value


def _strings(t: GraphQLOutputType, values: Any, count: int) -> bool:
    """Whether ``values`` are what graphql-core completes a ``String`` field of type ``t``
    with, one per edge, as they are (strings only: a null is graphql-core's to refuse)."""
    if isinstance(t, GraphQLNonNull):
        t = t.of_type
    return t is GraphQLString and len(values) == count and all(type(v) is str for v in values)


def _item_spec(spec: Spec) -> Spec | None:
    """The plan of a list's objects in the plan ``spec`` of the list (``None``: not a list
    of objects)."""
    while spec[0] == "nonnull":
        spec = spec[1]
    if spec[0] != "list":
        return None
    item: Spec = spec[2]
    while item[0] == "nonnull":
        item = item[1]
    return item if item[0] == "object" else None


async def _in_slices(plan: Plan, value: Any) -> Any:
    """``plan.run(value)``, a large list in it completed :data:`SLICE` items per step."""
    if plan.kind == "nonnull":
        assert plan.inner is not None
        if value is None:
            raise Fallback
        out = await _in_slices(plan.inner, value)
        if out is None:
            raise Fallback
        return out
    if plan.kind == "list" and type(value) is list and len(value) > SLICE:
        assert plan.inner is not None
        item = plan.inner.run
        items: list[Any] = []
        for start in range(0, len(value), SLICE):
            if start:
                await asyncio.sleep(0)
            chunk = value[start : start + SLICE]
            if plan.nullable_items:
                items += [None if v is None else item(v) for v in chunk]
            else:
                items += [item(v) for v in chunk]
        return items
    if plan.kind == "object" and type(value) is dict:
        done: dict[str, Any] = {}
        for response_key, name, inner in plan.lists:
            v = value.get(name)
            if type(v) is list and len(v) >= LARGE_LIST:
                done[response_key] = await _in_slices(inner, v)
        if done:
            return plan.with_done(frozenset(done))(value, done)
    return plan.run(value)


def _python_name(field: GraphQLField) -> str | None:
    """The key the schema's default resolver reads for ``field``, or ``None`` when that is
    not :func:`~gateway.core.lists.projections.dict_resolver`."""
    definition = strawberry_definition(field)
    if getattr(definition, "default_resolver", None) is not dict_resolver:
        return None
    name = getattr(definition, "python_name", None)
    return name if isinstance(name, str) else None


def _directed(
    selection_set: SelectionSetNode | None,
    fragments: Mapping[str, Any],
    seen: set[str],
) -> bool:
    """Does a selection set (its fragments included, not its fields' own selections) hold a
    directive (``@skip``/``@include``: what it selects then depends on the variables)?"""
    if selection_set is None:
        return False
    for selection in selection_set.selections:
        if selection.directives:
            return True
        if isinstance(selection, InlineFragmentNode):
            if _directed(selection.selection_set, fragments, seen):
                return True
        elif isinstance(selection, FragmentSpreadNode):
            name = selection.name.value
            if name not in seen:
                seen.add(name)
                details = fragments.get(name)  # graphql-core's FragmentDetails
                if details is None:
                    continue
                if details.variable_signatures or _directed(
                    details.definition.selection_set, fragments, seen
                ):
                    return True
    return False


def executor_for(data_types: frozenset[str]) -> type[ProjectingExecutor]:
    """A :class:`ProjectingExecutor` subclass that may project ``data_types``, with its own
    cache of shared plans: one an engine dismantled gave back (:func:`release_executor`),
    else a new one."""
    try:
        cls = _SPARE.pop()
    except IndexError:
        return type(
            "SchemaProjectingExecutor",
            (ProjectingExecutor,),
            {"data_types": data_types, "shared_plans": OrderedDict()},
        )
    cls.data_types = data_types
    cls.shared_plans = OrderedDict()
    return cls


def release_executor(cls: type[ProjectingExecutor]) -> None:
    """``cls`` (from :func:`executor_for`) serves no engine any more: emptied and kept for
    the next one.  A class is in a reference cycle with itself (its ``__mro__``), so only a
    cyclic collection frees it, and the serving gateway freezes what lives through a schema
    build out of every collection (:mod:`gateway.graphql.engine.collector`): one class
    dropped per group schema given back would never be freed, with the type names it
    holds (a large group's: ~0.5 MB)."""
    cls.shared_plans = OrderedDict()
    cls.data_types = frozenset()
    if len(_SPARE) < SPARE_EXECUTORS:
        _SPARE.append(cls)


#: Executor classes kept for reuse (:func:`release_executor`); more than the engines ever
#: alive at once are never made, this only bounds a burst of releases.
SPARE_EXECUTORS = 256
_SPARE: list[type[ProjectingExecutor]] = []
