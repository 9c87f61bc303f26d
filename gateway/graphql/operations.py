"""The root types (Query, Mutation, Subscription), built by one loop over the registry.

Each resource contributes the fields its verbs and subresources allow; every resolver is one
call on the core (:class:`~gateway.core.adapter.KubeAdapter` or a watch/log stream) with the
caller's credential from ``info.context``.  No resolver builds a URL or knows a kind.

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

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Annotated, Any, Optional, cast

import strawberry
import yaml
from strawberry import Info
from strawberry.types.field import StrawberryField

from gateway.core import errors
from gateway.core.registry import REGISTRY, Registry, Resource
from gateway.graphql import arguments as A
from gateway.graphql.arguments import Arg, WatchEventType
from gateway.graphql.context import Context
from gateway.graphql.objects import GeneratedTypes, python_name, to_json
from gateway.graphql.scalars import JSON
from gateway.graphql.streams import LogLine, follow_log, watch_events

Run = Callable[[Context, dict[str, Any]], Awaitable[Any]]
Stream = Callable[[Context, dict[str, Any]], AsyncIterator[Any]]

#: Display names of subresources in field names.
_SUBRESOURCE_NAMES = {"ephemeralcontainers": "EphemeralContainers", "log": "Log"}


def _sub_name(sub: str) -> str:
    return _SUBRESOURCE_NAMES.get(sub, sub[:1].upper() + sub[1:])


def _lower(name: str) -> str:
    return name[:1].lower() + name[1:]


def list_field_name(r: Resource) -> str:
    """``pods``; ``endpointsList`` where the plural equals the singular."""
    return r.plural + "List" if r.plural == r.singular else r.plural


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
    """A query or mutation field whose resolver is ``run(context, {graphql arg: value})``."""
    names = _names(args)

    async def resolver(info: Info[Context, None], **kwargs: Any) -> Any:
        return await run(info.context, {names[k]: v for k, v in kwargs.items()})

    resolver.__signature__ = _signature(args, returns)  # type: ignore[attr-defined]
    return cast(
        StrawberryField,
        strawberry.field(resolver=resolver, graphql_type=returns, description=description),
    )


def subscription_field(
    stream: Stream, args: Sequence[Arg], returns: Any, description: str
) -> StrawberryField:
    """A subscription field whose source is the async iterator ``stream(context, args)``."""
    names = _names(args)

    async def resolver(info: Info[Context, None], **kwargs: Any) -> AsyncIterator[Any]:
        source = stream(info.context, {names[k]: v for k, v in kwargs.items()})
        async with aclosing(source) as items:  # type: ignore[type-var]
            async for item in items:
                yield item

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
    kind_cls, list_cls, status = types.kinds[r.kind], types.lists[r.kind], types.output("Status")

    delete = type(f"{r.kind}DeleteResult", (), {"__module__": __name__})
    delete.__annotations__ = {
        "object": Optional[kind_cls],  # noqa: UP045
        "status": Optional[status],  # noqa: UP045
        "raw": Optional[JSON],  # noqa: UP045
    }
    for n in delete.__annotations__:
        setattr(delete, n, None)
    strawberry.type(
        delete,
        name=f"{r.kind}DeleteResult",
        description=f"What a delete of a {r.kind} answers: the object (deletion pending, or "
        "as it was) or a Status.",
    )
    collection = type(f"{r.kind}DeleteCollectionResult", (), {"__module__": __name__})
    collection.__annotations__ = {
        "list": Optional[list_cls],  # noqa: UP045
        "status": Optional[status],  # noqa: UP045
        "raw": Optional[JSON],  # noqa: UP045
    }
    for n in collection.__annotations__:
        setattr(collection, n, None)
    strawberry.type(
        collection,
        name=f"{r.kind}DeleteCollectionResult",
        description=f"What a deleteCollection of {r.plural} answers: the deleted objects "
        "or a Status.",
    )
    return _Result(delete, collection)


def _watch_event_type(r: Resource, types: GeneratedTypes) -> type:
    cls = type(f"{r.kind}WatchEvent", (), {"__module__": __name__})
    cls.__annotations__ = {
        "type": WatchEventType,
        "object": Optional[types.kinds[r.kind]],  # noqa: UP045
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
    return strawberry.type(cls, name=f"{r.kind}WatchEvent", description=f"A {r.kind} change.")


def _split(r: Resource, a: Mapping[str, Any]) -> str | None:
    return a.get("namespace") if r.namespaced else None


def _deleted(r: Resource, body: dict[str, Any]) -> dict[str, Any]:
    is_status = body.get("kind") == "Status"
    return {
        "object": None if is_status else body,
        "status": body if is_status else None,
        "raw": body,
    }


def _deleted_collection(body: dict[str, Any]) -> dict[str, Any]:
    is_status = body.get("kind") == "Status"
    return {"list": None if is_status else body, "status": body if is_status else None, "raw": body}


class RootBuilder:
    """Collects the root fields of every resource; :meth:`build` makes the root types."""

    def __init__(self, types: GeneratedTypes, registry: Registry = REGISTRY) -> None:
        self.types = types
        self.registry = registry
        self.query: dict[str, StrawberryField] = {}
        self.mutation: dict[str, StrawberryField] = {}
        self.subscription: dict[str, StrawberryField] = {}
        for r in registry.values():
            self._resource(r)

    def _resource(self, r: Resource) -> None:
        kind = self.types.kinds[r.kind]
        kind_in = self.types.kind_inputs[r.kind]
        obj: Any = Optional[kind]  # noqa: UP045
        ns: tuple[Arg, ...] = (A.NAMESPACE,) if r.namespaced else ()
        any_ns: tuple[Arg, ...] = (A.ANY_NAMESPACE,) if r.namespaced else ()
        named = (*ns, A.NAME)
        body = Arg("object", kind_in, f"The {r.kind}.", required=True)
        text = Arg(
            "manifest",
            JSON,
            f"The {r.kind} as a JSON object, or as YAML/JSON text.",
            required=True,
        )
        q, m, s = self.query, self.mutation, self.subscription
        single, kind_name = _lower(r.kind), r.kind

        if "get" in r.verbs:

            async def get(ctx: Context, a: dict[str, Any]) -> Any:
                return await ctx.adapter.get(
                    r, a["name"], namespace=_split(r, a), credential=ctx.credential
                )

            q[single] = query_field(get, named, obj, f"One {r.kind} by name.")
        if "list" in r.verbs:

            async def list_(ctx: Context, a: dict[str, Any]) -> Any:
                return await ctx.adapter.list(
                    r, namespace=_split(r, a), options=A.list_options(a), credential=ctx.credential
                )

            q[list_field_name(r)] = query_field(
                list_,
                (*any_ns, *A.LIST),
                Optional[self.types.lists[r.kind]],  # noqa: UP045
                f"One page of {r.plural}"
                + (" in a namespace, or in all namespaces." if r.namespaced else "."),
            )
        if "create" in r.verbs:

            async def create(ctx: Context, a: dict[str, Any]) -> Any:
                return await ctx.adapter.create(
                    r,
                    to_json(a["object"]),
                    namespace=_split(r, a),
                    write=A.write_options(a),
                    credential=ctx.credential,
                )

            async def create_text(ctx: Context, a: dict[str, Any]) -> Any:
                doc = _object_manifest(r, a["manifest"])
                namespace = _split(r, a) or (doc.get("metadata") or {}).get("namespace")
                if r.namespaced and not namespace:
                    raise errors.InvalidParameter(
                        f"{r.kind} is namespaced: give `namespace` or metadata.namespace",
                        causes=(errors.Cause("FieldValueRequired", "Required value", "namespace"),),
                    )
                return await ctx.adapter.create(
                    r, doc, namespace=namespace, write=A.write_options(a), credential=ctx.credential
                )

            m[f"create{kind_name}"] = query_field(
                create, (*ns, body, *A.WRITE), obj, f"Create a {r.kind}."
            )
            m[f"create{kind_name}FromManifest"] = query_field(
                create_text,
                ((*any_ns, text, *A.WRITE) if r.namespaced else (text, *A.WRITE)),
                obj,
                f"Create a {r.kind} from a JSON or YAML manifest "
                "(`namespace` defaults to the manifest's).",
            )
        self._writes(r, sub="", named=named, body=body, text=text, obj=obj)
        if "delete" in r.verbs:

            async def delete(ctx: Context, a: dict[str, Any]) -> Any:
                return _deleted(
                    r,
                    await ctx.adapter.delete(
                        r,
                        a["name"],
                        namespace=_split(r, a),
                        options=A.delete_options(a),
                        credential=ctx.credential,
                    ),
                )

            results = _result_types(r, self.types)
            m[f"delete{kind_name}"] = query_field(
                delete,
                (*named, *A.DELETE),
                Optional[results.delete],  # noqa: UP045
                f"Delete a {r.kind}.",
            )
            if "deletecollection" in r.verbs:

                async def delete_collection(ctx: Context, a: dict[str, Any]) -> Any:
                    return _deleted_collection(
                        await ctx.adapter.delete_collection(
                            r,
                            namespace=_split(r, a),
                            list_options=A.list_options(a),
                            options=A.delete_options(a),
                            credential=ctx.credential,
                        )
                    )

                m[f"delete{kind_name}Collection"] = query_field(
                    delete_collection,
                    (*ns, *A.LIST, *A.DELETE),
                    Optional[results.delete_collection],  # noqa: UP045
                    f"Delete every {r.kind} the selectors match.",
                )
        if "watch" in r.verbs:
            event_type = _watch_event_type(r, self.types)

            def watch(ctx: Context, a: dict[str, Any]) -> AsyncIterator[Any]:
                return watch_events(ctx, r, _split(r, a), a)

            s["watch" + r.plural[:1].upper() + r.plural[1:]] = subscription_field(
                watch,
                (*any_ns, *A.WATCH),
                event_type,
                f"Changes to {r.plural}: resumable, and exact across upstream closes and 410s.",
            )
        for sub in r.subresources.values():
            suffix = _sub_name(sub.name)
            if sub.content == "text" and "get" in sub.verbs:
                self._log(r, sub.name, suffix, named)
            elif sub.content == "json":
                if "get" in sub.verbs:
                    q[f"{single}{suffix}"] = self._sub_get(r, sub.name, named, obj)
                self._writes(r, sub=sub.name, named=named, body=body, text=text, obj=obj)

    def _sub_get(self, r: Resource, sub: str, named: tuple[Arg, ...], obj: Any) -> StrawberryField:
        async def get(ctx: Context, a: dict[str, Any]) -> Any:
            return await ctx.adapter.get(
                r, a["name"], namespace=_split(r, a), subresource=sub, credential=ctx.credential
            )

        return query_field(get, named, obj, f"The {sub} subresource of a {r.kind}.")

    def _writes(
        self,
        r: Resource,
        *,
        sub: str,
        named: tuple[Arg, ...],
        body: Arg,
        text: Arg,
        obj: Any,
    ) -> None:
        verbs = r.subresources[sub].verbs if sub else r.verbs
        suffix = _sub_name(sub) if sub else ""
        what = f"the {sub} subresource of a {r.kind}" if sub else f"a {r.kind}"
        subresource = sub or None
        m = self.mutation
        if "update" in verbs:

            async def replace(ctx: Context, a: dict[str, Any]) -> Any:
                return await ctx.adapter.replace(
                    r,
                    a["name"],
                    to_json(a["object"]),
                    namespace=_split(r, a),
                    subresource=subresource,
                    write=A.write_options(a),
                    credential=ctx.credential,
                )

            async def replace_text(ctx: Context, a: dict[str, Any]) -> Any:
                return await ctx.adapter.replace(
                    r,
                    a["name"],
                    _object_manifest(r, a["manifest"]),
                    namespace=_split(r, a),
                    subresource=subresource,
                    write=A.write_options(a),
                    credential=ctx.credential,
                )

            m[f"replace{r.kind}{suffix}"] = query_field(
                replace,
                (*named, body, *A.WRITE),
                obj,
                f"Replace {what} (metadata.resourceVersion, when set, guards against "
                "lost updates).",
            )
            m[f"replace{r.kind}{suffix}FromManifest"] = query_field(
                replace_text,
                (*named, text, *A.WRITE),
                obj,
                f"Replace {what} from a JSON or YAML manifest.",
            )
        if "patch" in verbs:

            async def patch(ctx: Context, a: dict[str, Any]) -> Any:
                return await ctx.adapter.patch(
                    r,
                    a["name"],
                    _patch_body(a),
                    patch_options=A.patch_options(a),
                    namespace=_split(r, a),
                    subresource=subresource,
                    write=A.write_options(a),
                    credential=ctx.credential,
                )

            m[f"patch{r.kind}{suffix}"] = query_field(
                patch, (*named, *A.PATCH, *A.WRITE), obj, f"Patch {what}."
            )

    def _log(self, r: Resource, sub: str, suffix: str, named: tuple[Arg, ...]) -> None:
        async def read(ctx: Context, a: dict[str, Any]) -> Any:
            data = await ctx.adapter.read_log(
                a["name"],
                namespace=a["namespace"],
                options=A.log_options(a),
                credential=ctx.credential,
            )
            return data.decode("utf-8", "replace")

        def follow(ctx: Context, a: dict[str, Any]) -> AsyncIterator[Any]:
            return follow_log(ctx, a["namespace"], a["name"], a)

        self.query[f"{_lower(r.kind)}{suffix}"] = query_field(
            read,
            (*named, *A.LOG),
            Optional[str],  # noqa: UP045
            f"The {sub} of a {r.kind} as text (invalid UTF-8 is replaced).",
        )
        self.subscription[f"follow{r.kind}{suffix}"] = subscription_field(
            follow,
            (*named, *(x for x in A.LOG if x.name != "previous")),
            LogLine,
            f"Follow the {sub} of a {r.kind} line by line; ends when the container stops.",
        )

    def build(self) -> tuple[type, type, type]:
        """The ``Query``, ``Mutation`` and ``Subscription`` classes."""
        roots = []
        for name, fields, doc in (
            ("Query", self.query, "Reads."),
            ("Mutation", self.mutation, "Writes; every one accepts `dryRun`."),
            ("Subscription", self.subscription, "Live changes and log follows."),
        ):
            cls = type(name, (), {"__module__": __name__, **dict(sorted(fields.items()))})
            roots.append(strawberry.type(cls, name=name, description=doc))
        return roots[0], roots[1], roots[2]
