"""The root types (Query, Mutation, Subscription), built from the core's operations table.

Every operation of every resource (:func:`gateway.core.calls.operations.operations`) contributes its
fields, by one method per action; a unary resolver turns its arguments into a core
:class:`~gateway.core.calls.operations.Call` and runs
:func:`~gateway.core.calls.operations.perform` with
the caller's credential from ``info.context``; subscriptions read the watch hub or the log
follower.  No resolver builds a URL or knows a kind.

Naming (``Pod`` shown; ``Image`` is cluster-scoped and has no ``namespace`` argument):

=====================  ===============================================================
Query                  ``pod``, ``pods``, ``podStatus``, ``podEphemeralContainers``, ``podLog``
Mutation               ``createPod``, ``createPodFromManifest``, ``replacePod``,
                       ``replacePodFromManifest``, ``patchPod``, ``deletePod``,
                       ``deletePodCollection``, ``replacePodStatus``, ``patchPodStatus``, ...
Subscription           ``watchPods``, ``followPodLog``
=====================  ===============================================================

A list field whose plural equals its singular (``endpoints``) is suffixed ``List``.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Optional, cast

import strawberry
import yaml
from graphql import (
    GraphQLEnumType,
    GraphQLField,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLResolveInfo,
    GraphQLScalarType,
    GraphQLSchema,
)
from strawberry import Info
from strawberry.types.field import StrawberryField

from gateway.core import (
    REGISTRY,
    Call,
    DeleteOptions,
    ListOptions,
    LogOptions,
    Operation,
    Registry,
    Resource,
    Undecoded,
    WriteOptions,
    errors,
    list_body,
    operations,
    perform,
    schema,
)
from gateway.graphql.resolvers import arguments as A
from gateway.graphql.resolvers import views
from gateway.graphql.resolvers.arguments import Arg, WatchEventType
from gateway.graphql.resolvers.clusterinfo import clusters_field
from gateway.graphql.resolvers.context import Context
from gateway.graphql.resolvers.objects import GeneratedTypes, python_name, to_json
from gateway.graphql.resolvers.scalars import JSON
from gateway.graphql.resolvers.streams import LogLine, follow_log, watch

Run = Callable[[Context, dict[str, Any]], Awaitable[Any]]
Stream = Callable[..., Awaitable[AsyncIterable[Any]]]


def _lower(name: str) -> str:
    """A type name as the start of a field name: a leading acronym is lowered whole
    (``CSIDriver`` -> ``csiDriver``, ``HTTPRoute`` -> ``httpRoute``, ``Pod`` -> ``pod``)."""
    upper = len(name) - len(name.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    if upper <= 1:
        return name[:1].lower() + name[1:]
    if upper < len(name) and name[upper].islower():
        upper -= 1  # the last capital starts the next word
    return name[:upper].lower() + name[upper:]


def _camel(text: str) -> str:
    # CRD plurals may hold '-' or '.'; GraphQL names may not.
    first, *rest = (p for p in re.split(r"[^0-9A-Za-z]+", text) if p)
    return first + "".join(p[:1].upper() + p[1:] for p in rest)


def plural_type_name(r: Resource, name: str | None = None) -> str:
    """The plural in the casing of the kind: ``ServiceMonitors``, ``NetworkPolicies``.

    The plural is the resource's (``networkpolicies``); the part it shares with the kind
    takes the kind's capitals.  ``name`` is the resource's GraphQL type name: when another
    kind took the bare kind name (``EventsV1Event``), its prefix comes first.
    """
    kind, plural = r.kind, r.plural
    shared = 0
    while shared < min(len(kind), len(plural)) and kind[shared].lower() == plural[shared]:
        shared += 1
    rest = _camel(plural[shared:]) if plural[shared:].strip("-.") else ""
    if plural[shared : shared + 1] in ("-", "."):  # a separator starts a word
        rest = rest[:1].upper() + rest[1:]
    body = kind[:shared] + rest if shared else _camel(plural)
    body = body[:1].upper() + body[1:]
    if name is not None and name != kind and name.endswith(kind):
        body = name[: -len(kind)] + body
    return body


def list_field_name(r: Resource, name: str | None = None) -> str:
    """``pods``, ``serviceMonitors``, ``networkPolicies``; ``endpointsList`` where the
    plural equals the singular (see :func:`plural_type_name` for ``name``)."""
    plural = _lower(plural_type_name(r, name))
    return plural + "List" if r.plural == r.singular else plural


def _signature(args: Sequence[Arg], returns: Any) -> inspect.Signature:
    params = [inspect.Parameter("info", inspect.Parameter.KEYWORD_ONLY, annotation=Info)]
    for a in args:
        annotation: Any = Annotated[
            a.annotation,
            strawberry.argument(name=a.name, description=a.description),
        ]
        params.append(
            inspect.Parameter(
                python_name(a.name),
                inspect.Parameter.KEYWORD_ONLY,
                annotation=annotation,
                default=inspect.Parameter.empty if a.required else a.default,
            )
        )
    return inspect.Signature(params, return_annotation=returns)


def _names(args: Sequence[Arg]) -> dict[str, str]:
    return {python_name(a.name): a.name for a in args}


def query_field(run: Run, args: Sequence[Arg], returns: Any, description: str) -> StrawberryField:
    """A query or mutation field whose resolver is ``run(context, {graphql arg: value})``
    (:func:`install_direct` may later give graphql-core a shorter way to it)."""
    names = _names(args)

    async def resolver(info: Info[Context, None], **kwargs: Any) -> Any:
        return await run(info.context, {names[k]: v for k, v in kwargs.items()})

    resolver.__signature__ = _signature(args, returns)  # type: ignore[attr-defined]
    setattr(resolver, _RUN, run)
    return cast(
        StrawberryField,
        strawberry.field(resolver=resolver, graphql_type=returns, description=description),
    )


#: The attribute of a :func:`query_field` resolver holding its runner.
_RUN = "kube_gateway_run"
#: Leaf types strawberry converts to something else than graphql-core's value (``ID`` may
#: be a relay ``GlobalID``).
_CONVERTED_LEAVES = frozenset({"ID"})


def _leaf_arguments(field: GraphQLField) -> bool:
    """Are all of ``field``'s arguments scalars or enums (``ID`` aside), nullable or not?
    strawberry passes such a value to the resolver as graphql-core coerced it."""
    for argument in field.args.values():
        t = argument.type
        if isinstance(t, GraphQLNonNull):
            t = t.of_type
        if not isinstance(t, GraphQLScalarType | GraphQLEnumType) or t.name in _CONVERTED_LEAVES:
            return False
    return True


def _direct(run: Run) -> Callable[..., Awaitable[Any]]:
    def resolve(root: Any, info: GraphQLResolveInfo[Any], **args: Any) -> Awaitable[Any]:
        return run(info.context, args)

    return resolve


def install_direct(
    schema: GraphQLSchema, fields: Mapping[str, Mapping[str, StrawberryField]]
) -> int:
    """Let graphql-core call the runners of the unary root fields straight, skipping
    strawberry's resolver machinery (its ``Info``, argument conversion, extension chain and
    a coroutine: ~10 us of the ~200 us a small query's execution costs in the gateway,
    docs/performance.md).

    ``fields``: the strawberry fields :class:`RootBuilder` made, by root type name
    (``Query``, ``Mutation``).  Only fields whose arguments are all scalars or enums are
    given one: for those strawberry passes the values graphql-core coerced as they are, so
    ``run`` gets exactly what :func:`query_field`'s resolver gives it (the GraphQL
    argument names; arguments the request leaves out are absent).  Others (input objects,
    lists) keep strawberry's conversion.  Returns how many fields were given one.
    """
    given = 0
    for root_name, made in fields.items():
        root = schema.get_type(root_name)
        if not isinstance(root, GraphQLObjectType):
            continue
        for name, strawberry_field in made.items():
            base = strawberry_field.base_resolver
            run = getattr(base.wrapped_func, _RUN, None) if base is not None else None
            field = root.fields.get(name)
            if run is None or field is None or not _leaf_arguments(field):
                continue
            field.resolve = _direct(run)
            given += 1
    return given


def subscription_field(
    stream: Stream, args: Sequence[Arg], returns: Any, description: str
) -> StrawberryField:
    """A subscription field whose source is the core stream ``stream(context, args)`` opens
    (returned as it is: :mod:`gateway.graphql.engine.subscriptions` reads it)."""
    names = _names(args)

    async def resolver(info: Info[Context, None], **kwargs: Any) -> AsyncIterable[Any]:
        return await stream(info.context, {names[k]: v for k, v in kwargs.items()})

    resolver.__signature__ = _signature(args, returns)  # type: ignore[attr-defined]
    return cast(
        StrawberryField,
        strawberry.field(
            resolver=resolver,
            graphql_type=returns,
            description=description,
            is_subscription=True,
        ),
    )


# -- input documents -------------------------------------------------------------------------


#: Nodes a YAML manifest may expand to, aliases followed (a Pod is a few hundred).
YAML_MAX_NODES = 100_000


class _Expanded(Exception):
    """A YAML document that expands past :data:`YAML_MAX_NODES` (an alias bomb) or into
    itself."""


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """How many nodes ``root`` stands for with every alias followed, without following
    them: subtrees are sized once (aliases share nodes), so a bomb costs its text only."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        if children_done:
            visiting.discard(key)
            size = 1 + sum(sizes[id(c)] for c in children)
            if size > limit:
                raise _Expanded
            sizes[key] = size
            continue
        if key in visiting:
            raise _Expanded  # a node that contains itself
        visiting.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _load_yaml(text: str) -> Any:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, YAML_MAX_NODES)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def manifest(value: Any, *, what: str = "manifest") -> Any:
    """A JSON value, or YAML/JSON text (JSON is YAML), as a decoded document.

    YAML aliases are followed only up to :data:`YAML_MAX_NODES` nodes in all, so a few
    hundred bytes of anchors cannot expand into gigabytes.
    """
    if isinstance(value, str):
        try:
            value = _load_yaml(value)
        except _Expanded:
            raise errors.BadRequest(
                f"the {what} expands past {YAML_MAX_NODES} YAML nodes (aliases followed) "
                "or into itself"
            ) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise errors.BadRequest(f"the {what} is not valid YAML or JSON{where}") from None
    return value


def _object_manifest(r: Resource, value: Any) -> dict[str, Any]:
    doc = manifest(value)
    if not isinstance(doc, dict):
        raise errors.BadRequest(f"the manifest must be a {r.kind} object")
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    if (kind is not None and kind != r.kind) or (
        api_version is not None and api_version != r.api_version
    ):
        raise errors.BadRequest(
            f"the manifest is a {api_version}/{kind}, not a {r.api_version}/{r.kind}"
        )
    return doc


def _patch_body(a: Mapping[str, Any]) -> Any:
    value = a["patch"]
    if isinstance(value, str) and a.get("type") is A.PatchKind.APPLY:
        return value  # YAML is the apply patch's own content type: sent as is
    return manifest(value, what="patch")


# -- the builder -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Result:
    """Output types of deletes, which answer with the object or with a Status."""

    delete: type
    delete_collection: type


def _result_types(r: Resource, types: GeneratedTypes) -> _Result:
    n = types.name(r)
    kind_cls, list_cls, status = types.kinds[n], types.lists[n], types.output("Status")
    delete = _object_or_status(
        f"{n}DeleteResult",
        "object",
        kind_cls,
        status,
        f"What a delete of a {r.kind} answers: the object (deletion pending, or as it was) "
        "or a Status.",
    )
    collection = _object_or_status(
        f"{n}DeleteCollectionResult",
        "list",
        list_cls,
        status,
        f"What a deleteCollection of {r.plural} answers: the deleted objects or a Status.",
    )
    return _Result(delete, collection)


def _object_or_status(name: str, answer: str, cls: type, status: type, description: str) -> type:
    """A strawberry type with ``answer`` (of ``cls``), ``status`` and ``raw``, all nullable."""
    result = type(name, (), {"__module__": __name__})
    result.__annotations__ = {
        answer: Optional[cls],  # noqa: UP045
        "status": Optional[status],  # noqa: UP045
        "raw": Optional[JSON],  # noqa: UP045
    }
    for n in result.__annotations__:
        setattr(result, n, None)
    strawberry.type(result, name=name, description=description)
    return result


def _watch_event_type(r: Resource, types: GeneratedTypes) -> type:
    n = types.name(r)
    cls = type(f"{n}WatchEvent", (), {"__module__": __name__})
    cls.__annotations__ = {
        "type": WatchEventType,
        "object": Optional[types.kinds[n]],  # noqa: UP045
        "resource_version": Optional[str],  # noqa: UP045
    }
    cls.type = strawberry.field(description="ADDED, MODIFIED, DELETED, BOOKMARK or RESYNC.")  # type: ignore[attr-defined]
    cls.object = strawberry.field(  # type: ignore[attr-defined]
        default=None,
        description="The object (DELETED: its last state; BOOKMARK/RESYNC: a marker with only "
        "metadata.resourceVersion and annotations).",
    )
    cls.resource_version = strawberry.field(  # type: ignore[attr-defined]
        default=None, description="Pass this as `resourceVersion` to resume after this event."
    )
    return strawberry.type(cls, name=f"{n}WatchEvent", description=f"A {r.kind} change.")


def _deleted(body: dict[str, Any]) -> dict[str, Any]:
    is_status = body.get("kind") == "Status"
    return {
        "object": None if is_status else body,
        "status": body if is_status else None,
        "raw": body,
    }


def _deleted_collection(body: dict[str, Any]) -> dict[str, Any]:
    is_status = body.get("kind") == "Status"
    return {"list": None if is_status else body, "status": body if is_status else None, "raw": body}


def _call(op: Operation, a: Mapping[str, Any], body: Any = None) -> Call:
    """The core :class:`Call` of a field's arguments: only the options its operation takes."""
    takes = op.spec.options
    return Call(
        namespace=a.get("namespace"),
        name=a.get("name") or "",
        body=body,
        list=A.list_options(a) if "list" in takes else ListOptions(),
        write=A.write_options(a) if "write" in takes else WriteOptions(),
        patch=A.patch_options(a) if "patch" in takes else None,
        delete=A.delete_options(a) if "delete" in takes else DeleteOptions(),
        log=A.log_options(a) if "log" in takes else LogOptions(),
    )


Body = Callable[[Operation, Mapping[str, Any]], Any]
Shape = Callable[[Any], Any]


def _no_body(op: Operation, a: Mapping[str, Any]) -> Any:
    return None


def _object_body(op: Operation, a: Mapping[str, Any]) -> Any:
    return to_json(a["object"])


def _manifest_body(op: Operation, a: Mapping[str, Any]) -> Any:
    return _object_manifest(op.resource, a["manifest"])


def _patch_document(op: Operation, a: Mapping[str, Any]) -> Any:
    return _patch_body(a)


def _runner(op: Operation, body: Body = _no_body, shape: Shape | None = None) -> Run:
    """The resolver body of a unary field: one :func:`perform` with the caller's credential."""

    async def run(ctx: Context, a: dict[str, Any]) -> Any:
        timer = ctx.adapter.metrics.operation("graphql", op.name, op.resource.key)
        with timer:
            call = _call(op, a, body(op, a))
            if op.action == "list":
                # Handed on to the projection, which completes it in this step; the core's
                # large-list scope decodes the body, or, deferrable, may hand it on as it
                # came, to be projected from its bytes (a small one) or by a list worker
                # (gateway.core.lists.large).
                answer = await ctx.adapter.large_lists.handed_on(
                    lambda gzipped: list_body(
                        ctx.adapter, op, call, credential=ctx.credential, gzipped=gzipped
                    ),
                    deferrable=shape is None,  # completed by the projection
                )
                if type(answer) is Undecoded:
                    # ended by the projection, with a refusal found there (over the cap)
                    answer.operation = timer.later()
            else:
                answer = await perform(ctx.adapter, op, call, credential=ctx.credential)
        return shape(answer) if shape is not None else answer

    return run


def _decoded_log(data: bytes) -> str:
    return data.decode("utf-8", "replace")


class RootBuilder:
    """Collects the root fields of every operation of every resource (the core's table);
    :meth:`build` makes the root types."""

    def __init__(self, types: GeneratedTypes, registry: Registry = REGISTRY) -> None:
        self.types = types
        self.registry = registry
        self.query: dict[str, StrawberryField] = {}
        self.mutation: dict[str, StrawberryField] = {}
        self.subscription: dict[str, StrawberryField] = {}
        #: The resolvers the view fields get once the schema is built (``views.install``).
        self.view_resolvers: dict[str, views.Resolve] = {}
        #: The live view fields' ``subscribe`` and ``resolve``, given the same way.
        self.live_resolvers: dict[str, tuple[views.Resolve, Callable[..., Any]]] = {}
        for r in registry.values():
            for op in operations(r):
                getattr(self, f"_{op.action}")(op)

    # -- shapes shared by a resource's fields --------------------------------------------------

    def _object(self, r: Resource) -> Any:
        return Optional[self.types.kinds[self.types.name(r)]]  # noqa: UP045

    @staticmethod
    def _named(r: Resource) -> tuple[Arg, ...]:
        return (A.NAMESPACE, A.NAME) if r.namespaced else (A.NAME,)

    @staticmethod
    def _any_namespace(r: Resource) -> tuple[Arg, ...]:
        return (A.ANY_NAMESPACE,) if r.namespaced else ()

    def _body_arg(self, r: Resource) -> Arg:
        inputs = self.types.kind_inputs[self.types.name(r)]
        return Arg("object", inputs, f"The {r.kind}.", required=True)

    @staticmethod
    def _manifest_arg(r: Resource) -> Arg:
        return Arg(
            "manifest", JSON, f"The {r.kind} as a JSON object, or as YAML/JSON text.", required=True
        )

    @staticmethod
    def _what(op: Operation) -> str:
        r = op.resource
        return (
            f"the {op.subresource} subresource of a {r.kind}" if op.subresource else f"a {r.kind}"
        )

    # -- one method per action -------------------------------------------------------------

    def _get(self, op: Operation) -> None:
        r = op.resource
        what = (
            f"The {op.subresource} subresource of a {r.kind}."
            if op.subresource
            else f"One {r.kind} by name."
        )
        self.query[_lower(self.types.name(r)) + op.display] = query_field(
            _runner(op), self._named(r), self._object(r), what
        )

    def _list(self, op: Operation) -> None:
        r = op.resource
        self.query[list_field_name(r, self.types.name(r))] = query_field(
            _runner(op),
            (*self._any_namespace(r), *A.LIST),
            Optional[self.types.lists[self.types.name(r)]],  # noqa: UP045
            f"One page of {r.plural}"
            + (" in a namespace, or in all namespaces." if r.namespaced else "."),
        )
        self._view(r)

    def _view(self, r: Resource) -> None:
        """The kind's view (:mod:`gateway.graphql.resolvers.views`), from the same data."""
        name = self.types.name(r)
        built = self.types.built
        field, kind = list_field_name(r, name) + "View", self.types.kind_types[name]

        def lookup(def_id: str) -> schema.ObjectType:
            return built[def_id].object_type

        view_type = views.view_types(name, self.types.kinds[name])
        self.query[field] = views.view_field(r, kind, lookup, view_type, query_field)
        self.view_resolvers[field] = views.view_resolver(r, kind, lookup)
        if "watch" in r.verbs:  # the live view: the same field as a subscription
            self.subscription[field] = views.live_view_field(r, view_type, subscription_field)
            self.live_resolvers[field] = views.live_view_resolvers(r, kind, lookup)

    def _watch(self, op: Operation) -> None:
        r = op.resource

        self.subscription["watch" + plural_type_name(r, self.types.name(r))] = subscription_field(
            functools.partial(watch, op=op),
            (*self._any_namespace(r), *A.WATCH),
            _watch_event_type(r, self.types),
            f"Changes to {r.plural}: resumable, and exact across upstream closes and 410s.",
        )

    def _create(self, op: Operation) -> None:
        r = op.resource
        ns = (A.NAMESPACE,) if r.namespaced else ()
        n = self.types.name(r)
        self.mutation[f"create{n}"] = query_field(
            _runner(op, _object_body),
            (*ns, self._body_arg(r), *A.WRITE),
            self._object(r),
            f"Create a {r.kind}.",
        )
        self.mutation[f"create{n}FromManifest"] = query_field(
            _runner(op, _manifest_body),
            (*self._any_namespace(r), self._manifest_arg(r), *A.WRITE),
            self._object(r),
            f"Create a {r.kind} from a JSON or YAML manifest "
            "(`namespace` defaults to the manifest's).",
        )

    def _replace(self, op: Operation) -> None:
        r, what = op.resource, self._what(op)
        name = f"replace{self.types.name(r)}{op.display}"
        self.mutation[name] = query_field(
            _runner(op, _object_body),
            (*self._named(r), self._body_arg(r), *A.WRITE),
            self._object(r),
            f"Replace {what} (metadata.resourceVersion, when set, guards against lost updates).",
        )
        self.mutation[f"{name}FromManifest"] = query_field(
            _runner(op, _manifest_body),
            (*self._named(r), self._manifest_arg(r), *A.WRITE),
            self._object(r),
            f"Replace {what} from a JSON or YAML manifest.",
        )

    def _patch(self, op: Operation) -> None:
        r = op.resource
        self.mutation[f"patch{self.types.name(r)}{op.display}"] = query_field(
            _runner(op, _patch_document),
            (*self._named(r), *A.PATCH, *A.WRITE),
            self._object(r),
            f"Patch {self._what(op)}.",
        )

    def _delete(self, op: Operation) -> None:
        r = op.resource
        self.mutation[f"delete{self.types.name(r)}"] = query_field(
            _runner(op, shape=_deleted),
            (*self._named(r), *A.DELETE),
            Optional[_result_types(r, self.types).delete],  # noqa: UP045
            f"Delete a {r.kind}.",
        )

    def _deletecollection(self, op: Operation) -> None:
        r = op.resource
        ns = (A.NAMESPACE,) if r.namespaced else ()
        self.mutation[f"delete{self.types.name(r)}Collection"] = query_field(
            _runner(op, shape=_deleted_collection),
            (*ns, *A.LIST, *A.DELETE),
            Optional[_result_types(r, self.types).delete_collection],  # noqa: UP045
            f"Delete every {r.kind} the selectors match.",
        )

    def _log(self, op: Operation) -> None:
        r, named = op.resource, self._named(op.resource)

        self.query[_lower(r.kind) + op.display] = query_field(
            _runner(op, shape=_decoded_log),
            (*named, *A.LOG),
            Optional[str],  # noqa: UP045
            f"The {op.subresource} of a {r.kind} as text (invalid UTF-8 is replaced).",
        )
        self.subscription[f"follow{r.kind}{op.display}"] = subscription_field(
            functools.partial(follow_log, op=op),
            (*named, *(x for x in A.LOG if x.name != "previous")),
            LogLine,
            f"Follow the {op.subresource} of a {r.kind} line by line; ends when the container "
            "stops.",
        )

    def build(self) -> tuple[type, type, type]:
        """The ``Query``, ``Mutation`` and ``Subscription`` classes."""
        self.query.setdefault("clusters", clusters_field())  # a resource's own name wins
        roots = []
        for name, fields, doc in (
            ("Query", self.query, "Reads."),
            ("Mutation", self.mutation, "Writes; every one accepts `dryRun`."),
            ("Subscription", self.subscription, "Live changes and log follows."),
        ):
            cls = type(name, (), {"__module__": __name__, **dict(sorted(fields.items()))})
            roots.append(strawberry.type(cls, name=name, description=doc))
        return roots[0], roots[1], roots[2]
