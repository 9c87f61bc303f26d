"""``/fleet/graphql``: one query or subscription over many clusters, per-cluster answers.

The fleet endpoint serves the default cluster's schema (``/graphql``'s, discovered kinds
included) reshaped for many clusters; it follows that schema as it is rebuilt:

- ``fleet(clusters: [String!])`` (default, or ``"*"`` where it stands: every cluster the
  caller may see, :mod:`gateway.core.fleet.visibility`) lists one ``ClusterQuery`` per cluster,
  which has every query field of ``/graphql`` answered by that cluster, with the caller's
  credential, all clusters concurrently.  A cluster that refuses or fails gives that
  cluster's error for that field only (``errors[].path`` names the member,
  ``extensions.cluster`` the cluster) and the others answer: partial results, never
  all-or-nothing.  Names the gateway does not serve are members whose ``error`` says so and
  whose fields are null, with one error for them all (never one per field and name).  A
  list longer than a fleet call may name is refused (:func:`~gateway.core.fleet.fanout.select`).
  A member's relations (a pod's events...) are loaded from its own cluster.
- ``mutation { fleet(clusters: [String!]!) }`` lists one ``ClusterMutation`` per named
  cluster (naming them is required: ``"*"`` for every cluster the caller may see), which
  has every mutation of ``/graphql`` done in that cluster, partial in the same way.
- ``podsView(clusters: [String!], ...)`` (each kind's view field of ``/graphql``, at the
  root): one view merged across the named clusters, globally sorted, one cursor, each
  object tagged with its cluster, each cluster's error its own
  (:mod:`gateway.graphql.endpoints.fleet_views`).
- ``subscription { podsView(clusters: [String!], ..., interval, notify) }`` (each kind's
  live view field of ``/graphql``): the merged view kept live, each cluster's error its own
  part of each update, the subscription going on
  (:func:`gateway.graphql.endpoints.fleet_views.merged_live_view_fields`,
  :mod:`gateway.core.views.livefleet`).
- ``watchX(clusters: [String!], resumeFrom: JSON, ...)`` merges the watch of every named
  cluster (:class:`~gateway.core.fleet.watches.FleetStream`); each event carries its
  ``cluster`` and that cluster's ``resourceVersion``.  ``resumeFrom`` is an object of
  cluster names to resourceVersions (what the client gathered from events, or a drain's
  ``resumeFrom``, or the SSE ``Last-Event-ID``): each cluster resumes from its own point.
  A cluster whose part ends (it refuses the caller, the cluster is removed) sends one
  payload with its error (``extensions.cluster``) and the subscription goes on with the
  others; it completes when every cluster's part has ended.

A kind the default cluster serves and another does not answers NOT_FOUND for that cluster.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    GraphQLArgument,
    GraphQLField,
    GraphQLInt,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLResolveInfo,
    GraphQLScalarType,
    GraphQLSchema,
    GraphQLString,
    default_field_resolver,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.core import (
    Cluster,
    Credential,
    Fleet,
    FleetEvent,
    FleetStream,
    FleetStreams,
    ListOptions,
    Selection,
    View,
    WatchSubscription,
    check_resume,
    decode_resume,
    errors,
    open_fleet_stream,
    select,
)
from gateway.graphql.endpoints.fleet_views import merged_live_view_fields, merged_view_fields
from gateway.graphql.endpoints.server import GraphQLApp
from gateway.graphql.errors import code_of
from gateway.graphql.resolvers.context import Context
from gateway.graphql.transport.graphiql import settings_response

__all__ = ["FleetContext", "FleetEndpoint", "fleet_schema"]

log = logging.getLogger("gateway.graphql")

Info = GraphQLResolveInfo[Any]


@dataclass(slots=True)
class Missing:
    """The names one ``fleet`` field asked for that the gateway does not serve: their one
    error, told by the first of their fields to resolve (the others are null)."""

    error: errors.GatewayError
    told: bool = False


@dataclass(slots=True)
class Member:
    """One cluster of a ``fleet`` field: its context, or why it has none."""

    name: str
    context: Context | None
    error: errors.GatewayError | None = None
    #: Set on a name the gateway does not serve: the field's one error for all of them.
    missing: Missing | None = None

    def refuse(self) -> None:
        """A field of a member without a context: its error, raised, or (a name not
        served whose field's error was told already) nothing, the field then null."""
        if self.missing is not None:
            if self.missing.told:
                return
            self.missing.told = True
            raise self.missing.error
        assert self.error is not None
        raise self.error


@dataclass(slots=True)
class FleetContext(Context):
    """An operation's context on the fleet endpoint: a context per cluster, made on use.

    Resolvers below a ``fleet`` member or inside a fleet event find their cluster's
    context with :meth:`at`.
    """

    fleet: Fleet = field(default_factory=Fleet)
    #: The member contexts, by cluster (one per operation: its loaders are shared).
    by_cluster: dict[str, Context] = field(default_factory=dict)
    #: The members placed by each ``fleet`` field: (response key, index) -> member.
    placed: dict[tuple[Any, Any], Member] = field(default_factory=dict)
    #: The open fleet watches of the endpoint, which follow the fleet's changes.
    streams: FleetStreams | None = None
    #: What this operation's caller sees, asked at most once (made on first use).
    seen: View | None = None
    #: The cluster of each object of a merged view's page: (response key, "edges" or
    #: "nodes", index) -> cluster (:mod:`gateway.graphql.endpoints.fleet_views`).
    merged: dict[tuple[Any, Any, Any], str] = field(default_factory=dict)

    def member(self, name: str) -> Context:
        """The context of cluster ``name`` for this operation.

        Raises:
            NotFound: the cluster is not served (the message names no other cluster:
                the resolvers ask :attr:`visibility` for the caller's message).
        """
        cluster: Cluster = self.fleet.get(name)
        context = self.by_cluster.get(name)
        if context is None or context.adapter is not cluster.adapter:  # new, or replaced
            context = Context(
                cluster.adapter,
                self.credential,
                cluster.watches,
                request_id=self.request_id,
                clusters=self.clusters,
                visibility=self.visibility,
                views=cluster.views,
            )
            self.by_cluster[name] = context
        return context

    async def select(self, asked: Sequence[str] | None) -> Selection:
        """The clusters an operation names, each once (``None``, or ``"*"`` where it
        stands: every cluster the caller may see and its token may reach unasked), as
        gRPC's fleet calls name them; bounded, the caller's visible clusters asked at most
        once per operation."""
        return await select(self.fleet, self.view(), asked)

    def view(self) -> View:
        """What this operation's caller sees, asked at most once."""
        if self.seen is None:
            assert self.visibility is not None, "a fleet context is made with its visibility"
            self.seen = self.visibility.view(self.credential)
        return self.seen

    def at(self, info: Info) -> Context:
        """The context of the cluster whose data ``info``'s field is part of."""
        root = info.root_value
        if isinstance(root, FleetEvent):
            return self.member(root.cluster)
        if self.merged:  # below an object of a merged view: that object's cluster
            keys = info.path.as_list()
            if len(keys) >= 3:
                origin = self.merged.get((keys[0], keys[1], keys[2]))
                if origin is not None:
                    return self.member(origin)
        path, prev = info.path, info.path.prev
        while prev is not None and prev.prev is not None:
            path, prev = prev, prev.prev
        if prev is None:
            return self
        placed = self.placed.get((prev.key, path.key))
        if placed is None:
            return self
        if placed.context is None:
            assert placed.error is not None
            raise placed.error
        return placed.context

    def reset_loaders(self) -> None:
        self._loaders = None
        for context in self.by_cluster.values():
            context.reset_loaders()


# -- the schema --------------------------------------------------------------------------


async def _members(root: Any, info: Info, clusters: list[str] | None = None) -> list[Member]:
    ctx = info.context
    assert isinstance(ctx, FleetContext)
    selection = await ctx.select(clusters)
    all_missing = selection.refusal_of_all()
    missing = Missing(all_missing) if all_missing is not None else None
    unserved = frozenset(selection.missing)
    members = []
    for index, name in enumerate(selection.names):
        if name in unserved:
            member = Member(name, None, selection.refusal(name), missing)
        else:
            try:
                member = Member(name, ctx.member(name))
            except errors.GatewayError as exc:  # removed since it was selected
                exc.cluster = name
                member = Member(name, None, exc)
        ctx.placed[(info.path.key, index)] = member
        members.append(member)
    return members


def _member_name(member: Member, info: Info) -> str:
    return member.name


def _member_error(member: Member, info: Info) -> dict[str, Any] | None:
    error = member.error
    if error is None:
        return None
    return {"code": code_of(error), "message": error.message}


def _in_member(base: GraphQLField) -> GraphQLField:
    """``base``, answered by the member's cluster (its errors tagged with the cluster)."""
    resolve = base.resolve or default_field_resolver

    async def resolve_in(member: Member, info: Info, **args: Any) -> Any:
        if member.context is None:
            member.refuse()
            return None
        try:
            result = resolve(None, info._replace(context=member.context), **args)
            if inspect.isawaitable(result):
                result = await result
        except errors.GatewayError as exc:
            exc.cluster = member.name
            raise
        return result

    return GraphQLField(
        base.type,
        args=base.args,
        resolve=resolve_in,
        description=base.description,
        deprecation_reason=base.deprecation_reason,
        extensions=base.extensions,
    )


def _resources_field(json: GraphQLScalarType) -> GraphQLField:
    """``resources(group, version, resource, ...)``: any kind a member's cluster serves,
    listed as its upstream JSON.  The fleet's typed fields are the default cluster's kinds;
    this one reaches a kind only some clusters serve (a CRD of one cluster), by the
    member's own catalog, as gRPC's ResourceService does."""
    text = GraphQLString
    return GraphQLField(
        json,
        args={
            "group": GraphQLArgument(GraphQLNonNull(text), description='"" for the core group.'),
            "version": GraphQLArgument(GraphQLNonNull(text)),
            "resource": GraphQLArgument(GraphQLNonNull(text), description="The plural name."),
            "namespace": GraphQLArgument(text, description="Omitted: every namespace."),
            "labelSelector": GraphQLArgument(text),
            "fieldSelector": GraphQLArgument(text),
            "limit": GraphQLArgument(GraphQLInt),
            "continue": GraphQLArgument(text, description="This cluster's own token."),
        },
        resolve=_resources,
        description="Any kind this cluster serves, listed as the cluster sent it (untyped): "
        "for a kind the typed fields do not have, such as a custom resource of one cluster. "
        "A cluster that does not serve it answers NOT_FOUND (a hint names the plural).",
    )


async def _resources(member: Member, info: Info, **args: Any) -> Any:
    if member.context is None:
        member.refuse()
        return None
    ctx = info.context
    assert isinstance(ctx, FleetContext)
    try:
        cluster = ctx.fleet.get(member.name)
        resource = cluster.catalog.current.resource(
            args["group"], args["version"], args["resource"]
        )
        options = ListOptions(
            label_selector=args.get("labelSelector"),
            field_selector=args.get("fieldSelector"),
            limit=args.get("limit"),
            continue_=args.get("continue"),
        )
        return await member.context.adapter.list(
            resource,
            namespace=args.get("namespace") if resource.namespaced else None,
            options=options,
            credential=member.context.credential,
        )
    except errors.GatewayError as exc:
        exc.cluster = member.name
        raise


_CLUSTERS_ARG = GraphQLArgument(
    GraphQLList(GraphQLNonNull(GraphQLString)),
    description='The clusters to ask, by name; "*" (or no list) stands for every cluster '
    "that authenticates the caller.",
)


def _fleet_watch(base: GraphQLField, json: GraphQLScalarType) -> GraphQLField:
    """The fleet form of a ``watchX`` field: every named cluster's watch, merged."""
    event = base.type.of_type if isinstance(base.type, GraphQLNonNull) else base.type
    assert isinstance(event, GraphQLObjectType)
    fleet_event = GraphQLObjectType(
        f"Fleet{event.name}",
        lambda: {
            "cluster": GraphQLField(
                GraphQLNonNull(GraphQLString),
                resolve=_event_cluster,
                description="The cluster this change happened in.",
            ),
            **event.fields,
        },
        description=f"{event.description} In one cluster of the fleet.",
    )
    version = base.args.get("resourceVersion")
    version_key = (version.out_name or "resourceVersion") if version is not None else None
    args = {k: v for k, v in base.args.items() if k != "resourceVersion"}
    args["clusters"] = _CLUSTERS_ARG
    args["resumeFrom"] = GraphQLArgument(
        json,
        description='Resume each cluster after its own resourceVersion: {"east": "123", '
        '"west": "456"} (the last `resourceVersion` seen of each `cluster`, or a drain\'s '
        "`resumeFrom`); a cluster not named starts as the other arguments say.",
    )
    subscribe_base = base.subscribe
    assert subscribe_base is not None

    async def subscribe(
        root: Any,
        info: Info,
        clusters: list[str] | None = None,
        resumeFrom: Any = None,
        **kwargs: Any,
    ) -> FleetStream:
        ctx = info.context
        assert isinstance(ctx, FleetContext)
        resume = resumeFrom if resumeFrom is not None else ctx.resume_from
        if isinstance(resume, dict):
            check_resume(ctx.fleet, len(resume))  # before it is read entry by entry
        points = decode_resume(resume)
        selection = await ctx.select(clusters)

        async def open_one(name: str, cluster: Cluster, point: str | None) -> WatchSubscription:
            member = ctx.member(name)
            asked = dict(kwargs)
            if version_key is not None and point is not None:
                asked[version_key] = point
            opened = subscribe_base(None, info._replace(context=member), **asked)
            while inspect.isawaitable(opened):
                opened = await opened
            assert isinstance(opened, WatchSubscription)
            return opened

        stream = await open_fleet_stream(ctx.fleet, selection, open_one, ctx.view(), points)
        if ctx.streams is not None:
            ctx.streams.add(stream)
        return stream

    return GraphQLField(
        GraphQLNonNull(fleet_event),
        args=args,
        subscribe=subscribe,
        resolve=_event,
        description=f"{base.description} Merged over the named clusters; each event says its "
        "cluster.",
    )


def _event(root: FleetEvent, info: Info, **args: Any) -> FleetEvent:
    if root.error is not None:
        raise root.error
    return root


def _event_cluster(root: FleetEvent, info: Info) -> str:
    return root.cluster


_MEMBER_ERROR = GraphQLObjectType(
    "ClusterError",
    {
        "code": GraphQLField(
            GraphQLNonNull(GraphQLString),
            description="The error's code, as in errors[].extensions.code (NOT_FOUND...).",
        ),
        "message": GraphQLField(GraphQLNonNull(GraphQLString)),
    },
    description="Why a cluster of the fleet cannot be asked at all (it is not served).",
)


def fleet_schema(base: GraphQLSchema) -> GraphQLSchema:
    """The fleet endpoint's schema for ``base`` (a cluster endpoint's schema)."""
    query = base.query_type
    assert query is not None
    member_fields: dict[str, GraphQLField] = {
        "cluster": GraphQLField(
            GraphQLNonNull(GraphQLString), resolve=_member_name, description="The cluster's name."
        ),
        "error": GraphQLField(
            _MEMBER_ERROR,
            resolve=_member_error,
            description="Set when the cluster cannot be asked at all; then every field of "
            "this member fails with it.",
        ),
    }
    member_fields.update(
        (name, _in_member(f)) for name, f in query.fields.items() if name != "clusters"
    )
    json = base.type_map.get("JSON")
    if isinstance(json, GraphQLScalarType) and "resources" not in member_fields:
        member_fields["resources"] = _resources_field(json)
    member = GraphQLObjectType(
        "ClusterQuery",
        member_fields,
        description="What one cluster of the fleet answers: every query of /graphql.",
    )
    root_fields = {
        "fleet": GraphQLField(
            GraphQLNonNull(GraphQLList(GraphQLNonNull(member))),
            args={"clusters": _CLUSTERS_ARG},
            resolve=_members,
            description="Ask several clusters at once, concurrently: one entry per cluster, "
            "in the order named.  A cluster's errors stay its own (errors[].path names its "
            "entry, extensions.cluster the cluster); the others answer.",
        ),
    }
    if "clusters" in query.fields:
        root_fields = {"clusters": query.fields["clusters"], **root_fields}
    # one view of each kind merged across clusters (fleet_views)
    merged = merged_view_fields(query, _CLUSTERS_ARG, _MEMBER_ERROR)
    root_fields.update(merged)
    mutation = None
    if base.mutation_type is not None:
        mutation = _fleet_mutation(base.mutation_type, member_fields)
    subscription = None
    if base.subscription_type is not None and isinstance(json, GraphQLScalarType):
        watches = {
            name: _fleet_watch(f, json)
            for name, f in base.subscription_type.fields.items()
            if name.startswith("watch")
        }
        # each merged view, live (fleet_views)
        watches.update(merged_live_view_fields(base.subscription_type, merged))
        if watches:
            subscription = GraphQLObjectType("Subscription", watches)
    return GraphQLSchema(
        query=GraphQLObjectType("Query", root_fields, description="The fleet's queries."),
        mutation=mutation,
        subscription=subscription,
        directives=base.directives,
    )


def _fleet_mutation(
    base: GraphQLObjectType, member_fields: dict[str, GraphQLField]
) -> GraphQLObjectType:
    """``fleet(clusters: [String!]!)`` on the mutation type: one ``ClusterMutation`` per
    named cluster, which has every mutation of ``/graphql`` done in that cluster.

    The clusters must be named (``"*"`` names every cluster the caller may see): a write to
    every cluster is never what an omitted argument means.  Members are written
    concurrently, and so are the fields of one member (they are not root fields): steps
    that must follow each other are separate ``fleet`` fields, which run in order.
    """
    member = GraphQLObjectType(
        "ClusterMutation",
        {
            "cluster": member_fields["cluster"],
            "error": member_fields["error"],
            **{name: _in_member(f) for name, f in base.fields.items()},
        },
        description="What one cluster of the fleet does: every mutation of /graphql.",
    )
    return GraphQLObjectType(
        "Mutation",
        {
            "fleet": GraphQLField(
                GraphQLNonNull(GraphQLList(GraphQLNonNull(member))),
                args={
                    "clusters": GraphQLArgument(
                        GraphQLNonNull(GraphQLList(GraphQLNonNull(GraphQLString))),
                        description='The clusters to write to, by name ("*": every cluster '
                        "that authenticates the caller); required.",
                    )
                },
                resolve=_members,
                description="Write to several clusters at once, concurrently: one entry per "
                "cluster, in the order named.  A cluster's errors stay its own "
                "(errors[].path names its entry, extensions.cluster the cluster); the others "
                "are written.  Separate `fleet` fields run one after the other.",
            )
        },
        description="The fleet's mutations.",
    )


# -- the endpoint ------------------------------------------------------------------------


class FleetEndpoint(GraphQLApp):
    """``/fleet/graphql``: the fleet schema of ``root``'s current schema, for every cluster
    of ``root``'s fleet, shown to each caller as ``root``'s visibility says (``root``'s
    cluster, the default, answers GraphiQL's settings).

    The schema follows ``root``'s: the first request after ``root`` swapped derives the new
    one in a worker thread (the event loop keeps serving; concurrent requests share it).
    """

    def __init__(self, root: GraphQLApp) -> None:
        self.root = root
        self._base = root.engine
        # The root's admission: the same document policy, limits and origins.
        super().__init__(
            fleet_schema(root.engine.graphql_schema),
            admission=root.admission,
            cluster=root.cluster,
            fleet=root.fleet,
            visibility=root.visibility,
        )
        #: The open fleet watches: a removed cluster's part ends, a reconfigured one's
        #: goes on on the new cluster, a new cluster joins the watches of every cluster.
        self.streams = FleetStreams(self.fleet, self.visibility)
        self._deriving: asyncio.Lock | None = None

    def context(self, credential: Credential) -> Context:
        # On the default cluster (the root's), every cluster's context made on use.
        return self.made_context(FleetContext, credential, fleet=self.fleet, streams=self.streams)

    async def graphiql_settings(self, request: Request) -> Response:
        """GraphiQL's settings: on the demo, tabs that ask every cluster."""
        return settings_response(demo=self.cluster.demo, group=None, fleet=True)

    async def _follow_root(self) -> None:
        if self._deriving is None:
            self._deriving = asyncio.Lock()
        async with self._deriving:
            base = self.root.engine
            if base is self._base:
                return
            schema = await asyncio.to_thread(fleet_schema, base.graphql_schema)
            self._base = base
            self.use_schema(schema)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.root.engine is not self._base:
            await self._follow_root()
        await super().__call__(scope, receive, send)

    def close(self) -> None:
        """Stop following the fleet."""
        self.streams.close()
