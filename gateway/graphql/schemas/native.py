"""An API group's GraphQL schema, built as graphql-core types straight from the field model.

The seed schema is built once with strawberry (:func:`gateway.graphql.schemas.seed.gateway_schema`)
and published as the SDL.  A group's schema (``/apis/<group>/graphql``) is the seed schema
plus that group's kinds; it is built when a caller first uses it, so it must be cheap:
strawberry spends ~5 ms per root field and ~0.5 s converting the seed types again, where
graphql-core objects cost microseconds.  So a group's schema *reuses the seed schema's
graphql-core types as they are* (``Pod``, ``ObjectMeta``, the scalars, the argument enums,
every seed root field) and builds only the group's own types and fields here.

What a generated type looks like is the same as in :mod:`gateway.graphql.resolvers.objects` and
:mod:`gateway.graphql.resolvers.operations` (the same names, nullability, descriptions, ``raw``,
``events``, root fields and arguments), and so is what a resolver does: unary fields run the
same :func:`~gateway.graphql.resolvers.operations` runners, subscriptions the same streams,
relations
the same batched resolvers.  Arguments are converted exactly as strawberry converts the seed
field's (``convert_arguments`` with the seed field's arguments); an ``object`` argument
arrives as the plain JSON dict graphql-core coerces it to.

The projection (:mod:`gateway.graphql.engine.projection`) recognises the fields made here by their
``extensions`` (:data:`EXTENSION`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from graphql import (
    GraphQLArgument,
    GraphQLField,
    GraphQLInputField,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNamedType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    GraphQLSchema,
    specified_scalar_types,
    validate_schema,
)
from strawberry.types.arguments import convert_arguments

from gateway.core import (
    COLLECTOR_HOLD,
    REGISTRY,
    RELATIONS,
    Operation,
    Registry,
    Resource,
    WatchSubscription,
    operations,
    schema,
)
from gateway.graphql.resolvers import operations as ops
from gateway.graphql.resolvers.links import relation_resolver
from gateway.graphql.resolvers.objects import EXTRA_ROOTS
from gateway.graphql.resolvers.streams import watch
from gateway.graphql.resolvers.views import (
    LIVE_VIEW_DESCRIPTION,
    VIEW_DESCRIPTION,
    live_view_resolvers,
    view_resolver,
)
from gateway.graphql.schemas._library import NATIVE, graphql_schema, strawberry_definition
from gateway.graphql.schemas.seed import gateway_schema

EXTENSION: Final = NATIVE

_SCALARS: Final[Mapping[schema.ScalarKind, str]] = {
    "string": "String",
    "int32": "Int",
    "int64": "Long",
    "double": "Float",
    "boolean": "Boolean",
    "bytes": "String",
    "quantity": "Quantity",
    "int-or-string": "IntOrString",
    "time": "Time",
    "microtime": "MicroTime",
    "json": "JSON",
}


Info = GraphQLResolveInfo[Any]


#: GraphQL's own scalars, which the seed schema's type map holds only when a seed field
#: uses one: no seed field is a ``Float``, so a group whose kinds have a ``type: number``
#: field takes it from here (graphql-core reserves the name: it is always this object).
#: ``Float`` is a double: an integral number beyond 2^53 in a ``type: number`` field comes
#: back rounded there, exactly in ``raw``.
_STANDARD: Final[Mapping[str, GraphQLNamedType]] = specified_scalar_types

_ROOTS: Final = frozenset(("Query", "Mutation", "Subscription"))

#: The ``extensions`` of the types and fields made here, one object each for all of them
#: (graphql-core keeps the dict it is given, and nothing changes it): a dict per field was
#: the largest single cost of a large group's schema.
_DATA: Final[dict[str, Any]] = {EXTENSION: "data"}
_PLAIN: Final[dict[str, Any]] = {EXTENSION: "plain"}
_RAW: Final[dict[str, Any]] = {EXTENSION: "raw"}
#: (an input field given none gets an empty dict of its own: 64 bytes each)
_INPUT: Final[dict[str, Any]] = {EXTENSION: "input"}


def _read(source: Any, info: Info) -> Any:
    """A field of upstream JSON: its key (the projection reads it the same way)."""
    return source.get(info.field_name) if type(source) is dict else None


def _itself(source: Any, info: Info, **args: Any) -> Any:
    return source


def _attribute(name: str, source: Any, info: Info) -> Any:
    return getattr(source, name, None)


class _Seed:
    """The seed schema's graphql-core pieces a group's schema reuses."""

    def __init__(self) -> None:
        self.strawberry = gateway_schema()
        self.schema = graphql_schema(self.strawberry)
        self.types = self.schema.type_map
        #: The seed's types by identity: every group's schema shares them as they are.
        self.ids = frozenset(id(t) for t in self.types.values())
        self.model_ids = frozenset(schema.seed_model().types)
        roots = (self.schema.query_type, self.schema.mutation_type, self.schema.subscription_type)
        assert all(r is not None for r in roots)
        self.query, self.mutation, self.subscription = (r.fields for r in roots)  # type: ignore[union-attr]
        self.fields = {**self.query, **self.mutation, **self.subscription}
        self.scalar_registry = self.strawberry.schema_converter.scalar_registry
        self.config = self.strawberry.config


@functools.cache
def _seed() -> _Seed:
    return _Seed()


class GroupBuilder:
    """Builds one scope's schema: the seed schema plus ``resources`` typed by ``model``."""

    def __init__(self, model: schema.Model, resources: Sequence[Resource]) -> None:
        self.seed = _seed()
        self.model = model
        self.resources = list(resources)
        self.registry = Registry((*REGISTRY.values(), *self.resources))
        self.outputs: dict[str, GraphQLNamedType] = {}
        self.inputs: dict[str, GraphQLInputObjectType] = {}
        self.kinds: dict[str, GraphQLObjectType] = {}
        #: The GraphQL type name of each resource's kind, by registry key.
        self.names: dict[str, str] = {}
        for r in self.resources:
            self.names[r.key] = model.kind_type(r.group, r.version, r.kind).short_name
        self._links = self._relations()

    def discard(self) -> None:
        """Break the reference cycles of a build that failed (each type made here and its
        fields thunk, a method of this builder): the serving gateway may have frozen part
        of it already (:mod:`gateway.graphql.engine.collector`), and a frozen cycle is never
        collected.  The seed's types, which every schema shares, are left whole."""
        seed = self.seed.types
        made: list[GraphQLNamedType] = [*self.outputs.values(), *self.inputs.values()]
        for t in made:
            if seed.get(t.name) is not t:
                t.__dict__.clear()
        self.__dict__.clear()

    # -- types -----------------------------------------------------------------------------

    def _scalar(self, kind: schema.ScalarKind) -> GraphQLNamedType:
        name = _SCALARS[kind]
        found = self.seed.types.get(name)
        return found if found is not None else _STANDARD[name]

    def _output_ref(self, ref: schema.TypeRef) -> GraphQLOutputType:
        if isinstance(ref, schema.Scalar):
            return self._scalar(ref.kind)  # type: ignore[return-value]
        if isinstance(ref, schema.MapOf):
            return self._scalar("json")  # type: ignore[return-value]
        if isinstance(ref, schema.ListOf):
            return GraphQLList(self._output_ref(ref.item))
        return self.output(ref.type_name)

    def _input_ref(self, ref: schema.TypeRef) -> GraphQLInputType:
        if isinstance(ref, schema.Scalar):
            return self._scalar(ref.kind)  # type: ignore[return-value]
        if isinstance(ref, schema.MapOf):
            return self._scalar("json")  # type: ignore[return-value]
        if isinstance(ref, schema.ListOf):
            return GraphQLList(GraphQLNonNull(self._input_ref(ref.item)))
        return self.input(ref.type_name)

    def output(self, def_id: str) -> GraphQLObjectType:
        """The output type of a definition: the seed schema's own, or one made here."""
        t = self.model.types[def_id]
        found = self.outputs.get(t.short_name)
        if found is None:
            seed = self.seed.types.get(t.short_name)
            if def_id in self.seed.model_ids and isinstance(seed, GraphQLObjectType):
                found = seed
            else:
                found = GraphQLObjectType(
                    t.short_name,
                    functools.partial(self._output_fields, t),
                    description=t.description or None,
                    extensions=_DATA,
                )
            self.outputs[t.short_name] = found
        assert isinstance(found, GraphQLObjectType)
        return found

    def _output_fields(self, t: schema.ObjectType) -> dict[str, GraphQLField]:
        fields = {
            f.json_name: GraphQLField(
                self._output_ref(f.type),
                description=f.description or None,
                resolve=_read,
                extensions=_PLAIN,
            )
            for f in t.fields
        }
        fields["raw"] = GraphQLField(
            self._scalar("json"),  # type: ignore[arg-type]
            description="The object exactly as the upstream sent it (fields newer than "
            "this schema included).",
            resolve=_itself,
            extensions=_RAW,
        )
        for name, link in self._links.get(t.short_name, {}).items():
            fields.setdefault(name, link())
        return fields

    def input(self, def_id: str) -> GraphQLInputObjectType:
        t = self.model.types[def_id]
        name = f"{t.short_name}Input"
        found = self.inputs.get(name)
        if found is None:
            seed = self.seed.types.get(name)
            if def_id in self.seed.model_ids and isinstance(seed, GraphQLInputObjectType):
                found = seed
            else:
                found = GraphQLInputObjectType(
                    name,
                    functools.partial(self._input_fields, t),
                    description=t.description or None,
                )
            self.inputs[name] = found
        return found

    def _input_fields(self, t: schema.ObjectType) -> dict[str, GraphQLInputField]:
        return {
            f.json_name: GraphQLInputField(
                self._input_ref(f.type), description=f.description or None, extensions=_INPUT
            )
            for f in t.fields
        }

    def _relations(self) -> dict[str, dict[str, Callable[[], GraphQLField]]]:
        """Link fields of the group's kinds (``events`` on every kind, and every relation
        whose two kinds are served), as thunks: a target kind may not be built yet."""
        out: dict[str, dict[str, Callable[[], GraphQLField]]] = {}
        mine = {r.key: r for r in self.resources}
        for rel in RELATIONS:
            target = self.registry.get(rel.target)
            if target is None:
                continue
            sources = (
                [r for r in mine.values() if r.key != rel.target]
                if rel.source == "*"
                else [mine[rel.source]]
                if rel.source in mine
                else []
            )
            for source in sources:
                type_name = self.names[source.key]
                kind = self.model.kind_type(source.group, source.version, source.kind)
                fields = out.setdefault(type_name, {})
                if rel.name in {f.json_name for f in kind.fields} or rel.name in fields:
                    continue
                fields[rel.name] = functools.partial(
                    self._relation_field,
                    target,
                    rel.many,
                    relation_resolver(rel, source, target),
                    rel.description,
                )
        return out

    def _relation_field(
        self, target: Resource, many: bool, resolve: Any, description: str
    ) -> GraphQLField:
        kind = self._kind(target)
        return GraphQLField(
            GraphQLList(GraphQLNonNull(kind)) if many else kind,
            resolve=resolve,
            description=description,
        )

    def _kind(self, r: Resource) -> GraphQLObjectType:
        if r.key in REGISTRY:
            found = self.seed.types[r.kind]
            assert isinstance(found, GraphQLObjectType)
            return found
        return self.output(self.model.kind_type(r.group, r.version, r.kind).name)

    def _list(self, r: Resource) -> GraphQLObjectType:
        return self.output(self.model.kind_type(r.group, r.version, r.list_kind).name)

    # -- root fields -----------------------------------------------------------------------

    def build(self, description: str | None = None) -> GraphQLSchema:
        """The schema: the seed roots plus every operation of the group's kinds."""
        query: dict[str, GraphQLField] = dict(self.seed.query)
        mutation: dict[str, GraphQLField] = dict(self.seed.mutation)
        subscription: dict[str, GraphQLField] = dict(self.seed.subscription)
        for r in self.resources:
            for op in operations(r):
                self._operation(op, query, mutation, subscription)
        seed_roots = (self.seed.schema.query_type, self.seed.schema.mutation_type)
        roots = [
            GraphQLObjectType(
                name, dict(sorted(fields.items())), description=seed.description if seed else None
            )
            for name, fields, seed in (
                ("Query", query, seed_roots[0]),
                ("Mutation", mutation, seed_roots[1]),
            )
        ]
        sub_seed = self.seed.schema.subscription_type
        subscription_type = GraphQLObjectType(
            "Subscription",
            dict(sorted(subscription.items())),
            description=sub_seed.description if sub_seed else None,
        )
        extra = [self.output(def_id) for def_id in EXTRA_ROOTS]
        return GraphQLSchema(
            query=roots[0],
            mutation=roots[1],
            subscription=subscription_type,
            types=[
                *(t for name, t in self.seed.types.items() if name not in _ROOTS),
                *extra,
            ],
            directives=self.seed.schema.directives,
            description=description,
        )

    def _args(self, seed_field: str, r: Resource, **replace: GraphQLArgument) -> dict[str, Any]:
        args = dict(self.seed.fields[seed_field].args)
        if not r.namespaced:
            args.pop("namespace", None)
        args.update(replace)
        return args

    def _unary(  # noqa: PLR0917
        self,
        op: Operation,
        seed_field: str,
        returns: GraphQLOutputType,
        description: str,
        body: ops.Body = ops._no_body,
        shape: ops.Shape | None = None,
        **replace: GraphQLArgument,
    ) -> GraphQLField:
        run = ops._runner(op, body, shape)
        convert = _converter(self.seed, seed_field)

        async def resolve(root: Any, info: Info, **raw: Any) -> Any:
            return await run(info.context, convert(raw))

        return GraphQLField(
            returns,
            args=self._args(seed_field, op.resource, **replace),
            resolve=resolve,
            description=description,
        )

    def _operation(
        self,
        op: Operation,
        query: dict[str, GraphQLField],
        mutation: dict[str, GraphQLField],
        subscription: dict[str, GraphQLField],
    ) -> None:
        r = op.resource
        n = self.names[r.key]
        kind = self._kind(r)
        lower = ops._lower(n)
        what = (
            f"the {op.subresource} subresource of a {r.kind}" if op.subresource else f"a {r.kind}"
        )
        obj = GraphQLArgument(
            GraphQLNonNull(self.input(self.model.kind_type(r.group, r.version, r.kind).name)),
            description=f"The {r.kind}.",
        )
        manifest = GraphQLArgument(
            self.seed.fields["createPodFromManifest"].args["manifest"].type,
            description=f"The {r.kind} as a JSON object, or as YAML/JSON text.",
        )
        if op.action == "get":
            query[lower + op.display] = self._unary(
                op,
                "pod",
                kind,
                f"The {op.subresource} subresource of a {r.kind}."
                if op.subresource
                else f"One {r.kind} by name.",
            )
        elif op.action == "list":
            query[ops.list_field_name(r, n)] = self._unary(
                op,
                "pods",
                self._list(r),
                f"One page of {r.plural}"
                + (" in a namespace, or in all namespaces." if r.namespaced else "."),
            )
            name = ops.list_field_name(r, n) + "View"
            query[name] = self._view(r, n, kind)
            if "watch" in r.verbs:  # the live view: the same field as a subscription
                subscription[name] = self._live_view(r, query[name].type)
        elif op.action == "watch":
            subscription["watch" + ops.plural_type_name(r, n)] = self._watch(op, n, kind)
        elif op.action == "create":
            mutation[f"create{n}"] = self._unary(
                op, "createPod", kind, f"Create a {r.kind}.", ops._object_body, object=obj
            )
            mutation[f"create{n}FromManifest"] = self._unary(
                op,
                "createPodFromManifest",
                kind,
                f"Create a {r.kind} from a JSON or YAML manifest "
                "(`namespace` defaults to the manifest's).",
                ops._manifest_body,
                manifest=manifest,
            )
        elif op.action == "replace":
            name = f"replace{n}{op.display}"
            mutation[name] = self._unary(
                op,
                "replacePod",
                kind,
                f"Replace {what} (metadata.resourceVersion, when set, guards against lost "
                "updates).",
                ops._object_body,
                object=obj,
            )
            mutation[f"{name}FromManifest"] = self._unary(
                op,
                "replacePodFromManifest",
                kind,
                f"Replace {what} from a JSON or YAML manifest.",
                ops._manifest_body,
                manifest=manifest,
            )
        elif op.action == "patch":
            mutation[f"patch{n}{op.display}"] = self._unary(
                op, "patchPod", kind, f"Patch {what}.", ops._patch_document
            )
        elif op.action == "delete":
            mutation[f"delete{n}"] = self._unary(
                op,
                "deletePod",
                self._result(n, "object", kind, f"What a delete of a {r.kind} answers: the "
                             "object (deletion pending, or as it was) or a Status."),
                f"Delete a {r.kind}.",
                shape=ops._deleted,
            )  # fmt: skip
        elif op.action == "deletecollection":
            mutation[f"delete{n}Collection"] = self._unary(
                op,
                "deletePodCollection",
                self._result(n, "list", self._list(r), f"What a deleteCollection of "
                             f"{r.plural} answers: the deleted objects or a Status.",
                             suffix="DeleteCollectionResult"),
                f"Delete every {r.kind} the selectors match.",
                shape=ops._deleted_collection,
            )  # fmt: skip

    def _view(self, r: Resource, n: str, kind: GraphQLObjectType) -> GraphQLField:
        """The kind's view field and its connection types, shaped as the seed's
        (:mod:`gateway.graphql.resolvers.views`)."""
        seed_view, seed_edge = self.seed.types["PodView"], self.seed.types["PodViewEdge"]
        assert isinstance(seed_view, GraphQLObjectType)
        assert isinstance(seed_edge, GraphQLObjectType)
        edge = GraphQLObjectType(
            f"{n}ViewEdge",
            {
                "cursor": GraphQLField(
                    seed_edge.fields["cursor"].type, resolve=functools.partial(_attribute, "cursor")
                ),
                "node": GraphQLField(
                    GraphQLNonNull(kind), resolve=functools.partial(_attribute, "node")
                ),
            },
            description=f"A {n} of a view.",
        )
        seed = seed_view.fields

        async def counts(root: Any, info: Info, groupBy: str) -> Any:
            return await root.counts(groupBy)

        view = GraphQLObjectType(
            f"{n}View",
            {
                "counts": GraphQLField(
                    seed["counts"].type,
                    args=seed["counts"].args,
                    resolve=counts,
                    description=seed["counts"].description,
                ),
                "edges": GraphQLField(
                    GraphQLNonNull(GraphQLList(GraphQLNonNull(edge))),
                    resolve=functools.partial(_attribute, "edges"),
                    description=seed["edges"].description,
                ),
                "nodes": GraphQLField(
                    GraphQLNonNull(GraphQLList(GraphQLNonNull(kind))),
                    resolve=functools.partial(_attribute, "nodes"),
                    description=seed["nodes"].description,
                ),
                **{
                    name: GraphQLField(
                        seed[name].type,
                        resolve=functools.partial(_attribute, attribute),
                        description=seed[name].description,
                    )
                    for name, attribute in (
                        ("pageInfo", "page_info"),
                        ("resourceVersion", "resource_version"),
                        ("total", "total"),
                    )
                },
            },
            description=f"A page of a view of {n} objects, its total and counts.",
        )
        kind_type = self.model.kind_type(r.group, r.version, r.kind)
        return GraphQLField(
            view,
            args=self._args_of(self.seed.query["podsView"].args, r),  # not the live one
            resolve=view_resolver(r, kind_type, self.model.object_type),
            description=VIEW_DESCRIPTION.format(plural=r.plural),
        )

    def _live_view(self, r: Resource, view: GraphQLOutputType) -> GraphQLField:
        """The kind's live view field, shaped as the seed's
        (:func:`gateway.graphql.resolvers.views.live_view_resolvers`)."""
        kind_type = self.model.kind_type(r.group, r.version, r.kind)
        subscribe, resolve = live_view_resolvers(r, kind_type, self.model.object_type)
        seed = self.seed.subscription["podsView"]
        return GraphQLField(
            GraphQLNonNull(view),  # type: ignore[arg-type]
            args=self._args_of(seed.args, r),
            subscribe=subscribe,
            resolve=resolve,
            description=LIVE_VIEW_DESCRIPTION.format(plural=r.plural),
        )

    @staticmethod
    def _args_of(seed: Mapping[str, GraphQLArgument], r: Resource) -> dict[str, Any]:
        args = dict(seed)
        if not r.namespaced:
            args.pop("namespace", None)
        return args

    def _result(
        self,
        n: str,
        answer: str,
        answer_type: GraphQLObjectType,
        description: str,
        suffix: str = "DeleteResult",
    ) -> GraphQLObjectType:
        status = self.seed.types["Status"]
        assert isinstance(status, GraphQLObjectType)
        return GraphQLObjectType(
            f"{n}{suffix}",
            {
                answer: GraphQLField(answer_type, resolve=_read),
                "status": GraphQLField(status, resolve=_read),
                "raw": GraphQLField(self._scalar("json"), resolve=_read),  # type: ignore[arg-type]
            },
            description=description,
        )

    def _watch(self, op: Operation, n: str, kind: GraphQLObjectType) -> GraphQLField:
        r = op.resource
        seed_event = self.seed.types["PodWatchEvent"]
        assert isinstance(seed_event, GraphQLObjectType)
        seed_fields = seed_event.fields
        event = GraphQLObjectType(
            f"{n}WatchEvent",
            {
                "type": GraphQLField(
                    seed_fields["type"].type,
                    resolve=functools.partial(_attribute, "type"),
                    description=seed_fields["type"].description,
                ),
                "object": GraphQLField(
                    kind,
                    resolve=functools.partial(_attribute, "object"),
                    description=seed_fields["object"].description,
                ),
                "resourceVersion": GraphQLField(
                    seed_fields["resourceVersion"].type,
                    resolve=functools.partial(_attribute, "resource_version"),
                    description=seed_fields["resourceVersion"].description,
                ),
            },
            description=f"A {r.kind} change.",
        )
        convert = _converter(self.seed, "watchPods")

        async def subscribe(root: Any, info: Info, **raw: Any) -> WatchSubscription:
            return await watch(info.context, convert(raw), op=op)

        return GraphQLField(
            GraphQLNonNull(event),
            args=self._args("watchPods", r),
            subscribe=subscribe,
            resolve=_itself,
            description=f"Changes to {r.plural}: resumable, and exact across upstream closes "
            "and 410s.",
        )


def _converter(seed: _Seed, seed_field: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Converts graphql-core's argument values as strawberry converts the seed field's (an
    ``object`` argument, the kind's own input, is the JSON dict graphql-core made)."""
    definition = strawberry_definition(seed.fields[seed_field])
    arguments = [a for a in definition.arguments if a.graphql_name != "object"]
    names = {a.python_name: a.graphql_name or a.python_name for a in arguments}

    def convert(raw: dict[str, Any]) -> dict[str, Any]:
        obj = raw.pop("object", None)
        kwargs = convert_arguments(raw, arguments, seed.scalar_registry, seed.config)
        out = {names[k]: v for k, v in kwargs.items()}
        if obj is not None:
            out["object"] = obj
        return out

    return convert


def build_group_schema(
    model: schema.Model, resources: Sequence[Resource], *, description: str | None = None
) -> GraphQLSchema:
    """The schema of a group's scope: the seed schema plus ``resources`` typed by ``model``.

    Validated here (every field thunk resolved, the result kept by graphql-core), so the
    builder's thread does that work, not the first request on the event loop.

    Raises:
        SchemaError: the types do not make a valid schema.
    """
    builder = GroupBuilder(model, resources)
    try:
        built = builder.build(description)
        _resolve_fields(built)
        # graphql-core's validation makes a graph of temporaries in reference cycles (an
        # InputObjectFiniteValueState per input type, with its lists); a collection in the
        # middle of it promotes them, and a build's freeze then keeps them, and the input
        # types they point at, for good (found frozen by tests/bench/heaptrace: 5,400 of
        # them after 3 builds of a wide group).  No collection while it runs: they die
        # young, and the next collection of the youngest generation frees them.
        with COLLECTOR_HOLD.held():
            problems = validate_schema(built)
        if problems:
            built.__dict__.clear()
            raise schema.SchemaError("; ".join(p.message for p in problems[:5]))
    except BaseException:
        builder.discard()
        raise
    return built


def _resolve_fields(built: GraphQLSchema) -> None:
    """Resolve every type's field thunk (and an object's interfaces): the schema's own
    objects, built while the collector steps as for the rest of the build
    (``gateway/graphql/engine/collector.py``), not under the validation's hold."""
    for named in built.type_map.values():
        if isinstance(named, GraphQLObjectType | GraphQLInterfaceType):
            _ = named.fields, named.interfaces
        elif isinstance(named, GraphQLInputObjectType):
            _ = named.fields


def made_by_builders(built: GraphQLSchema) -> list[Any]:
    """What holds the reference cycles of a group's schema: every object and input type of
    it a :class:`GroupBuilder` made (a type's fields thunk is a method of its builder,
    which holds every type it made), and those builders.  Clearing their attributes (and
    the schema's) lets reference counting free the schema whole.  Never the seed's types,
    which every group's schema shares, nor a scalar, an enum or an introspection type,
    which may be graphql-core's own singletons."""
    shared = _seed().ids
    builders: dict[int, GroupBuilder] = {}
    owned: list[Any] = []
    for name, named in list(built.__dict__.get("type_map", {}).items()):
        if (
            isinstance(named, GraphQLObjectType | GraphQLInputObjectType)
            and not name.startswith("__")
            and id(named) not in shared
        ):
            owner = getattr(getattr(named.__dict__.get("_fields"), "func", None), "__self__", None)
            if isinstance(owner, GroupBuilder):
                builders[id(owner)] = owner
            owned.append(named)
    return [*owned, *builders.values()]


def discard_schema(built: GraphQLSchema) -> None:
    """Break up a group's schema built only to be dropped (at once, in the building
    thread): see :func:`made_by_builders`."""
    owned = made_by_builders(built)
    built.__dict__.clear()
    for o in owned:
        o.__dict__.clear()
