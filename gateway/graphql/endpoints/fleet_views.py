"""Merged views on ``/fleet/graphql``: one view of a kind across clusters (issue 29, goal 4).

For each view field of ``/graphql`` (``podsView``...), the fleet endpoint's root has a field
of the same name and arguments (less ``minResourceVersion``, a version of one cluster; plus
``clusters``) whose answer is one connection over every named cluster::

    podsView(clusters: [String!], namespace, filter, search, sort, first, after): FleetPodView
    type FleetPodView { edges: [FleetPodViewEdge!]! nodes: [Pod!]! pageInfo: ViewPageInfo!
                        total: Int! counts(groupBy: String!): [ViewCount!]!
                        clusters: [FleetViewCluster!]! }
    type FleetPodViewEdge { cursor: String! cluster: String! node: Pod! }
    type FleetViewCluster { cluster: String! total: Int resourceVersion: String
                            counts(groupBy: String!): [ViewCount!] error: ClusterError }

Each cluster is asked concurrently for the first ``first`` items after its own position, by
its own view field resolver (the same core, caches, reviews and caps as a view of that
cluster alone, with the caller's credential); :func:`gateway.core.views.merge.merge` takes
the first ``first`` of them in the view's order, the cluster name last among the
tiebreakers, and the fleet cursor holds every cluster's position.  A cluster that refuses or
fails is left out of the page: its ``clusters`` entry has its ``error``, and its ``total``
(and ``resourceVersion``, ``counts``) fail with that cluster's error (``errors[].path`` names
the entry, ``extensions.cluster`` the cluster); the others' items are served.  A mistake of
the caller's (a bad filter, a bad cursor) is the whole field's ``BAD_USER_INPUT``.  Each
node's relations are loaded from its own cluster (:meth:`FleetContext.at`).

Each merged view field is a subscription too (:func:`merged_live_view_fields`): the same
arguments plus ``interval`` and ``notify``, the same answer, kept live by the core's live
fleet view (:mod:`gateway.core.views.livefleet`: each cluster's own live view, merged once
for every subscriber of the same merged view); each update is rendered as the query's
answer, each cluster's part by that cluster's own live view field resolver.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field, replace
from typing import Any

from graphql import (
    GraphQLArgument,
    GraphQLField,
    GraphQLInt,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    GraphQLString,
    default_field_resolver,
    get_named_type,
)

from gateway.core import (
    FleetLivePage,
    FleetLiveSubscription,
    FleetLiveViews,
    FleetMember,
    LiveViews,
    MergedPage,
    ViewContents,
    ViewCount,
    ViewSpec,
    decode_fleet_cursor,
    errors,
    interval_of,
    merge_views,
    merged_contents,
)
from gateway.graphql.errors import code_of
from gateway.graphql.resolvers.views import (
    PageEdges,
    PageNode,
    SharedItems,
    SpecOf,
    live_view_spec,
    selects,
)

Info = GraphQLResolveInfo[Any]


@dataclass(slots=True)
class ClusterPart:
    """One cluster's part of a merged view: its answer (``ViewAnswer``), or its error."""

    cluster: str
    answer: Any = None
    error: errors.GatewayError | None = None

    def check(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.answer


@dataclass(slots=True)
class MergedAnswer:
    """What a merged view field answers (its fields read these)."""

    page: MergedPage
    parts: list[ClusterPart]
    spec: ViewSpec | None
    page_info: dict[str, Any] = field(default_factory=dict)
    _contents: ViewContents | None = None

    @property
    def contents(self) -> ViewContents:
        """The page's objects (:func:`~gateway.core.views.merge.merged_contents`: each
        cluster's JSON of its own, written for a selection by that cluster's writer)."""
        found = self._contents
        if found is None:
            found = self._contents = merged_contents(self.page.items)
        return found

    @property
    def nodes(self) -> SharedItems:
        """The page's objects as a cluster's view answers its own (the executor writes a
        selection of plain fields from their JSON, or reads only what it selects; any other
        completion decodes them whole)."""
        return SharedItems(self.contents, None)

    @property
    def edges(self) -> PageEdges:
        """The page's edges: the executor writes ``cursor``, ``cluster`` (a column of
        strings: :attr:`PageEdges.columns`) and a node of plain fields as a cluster's view's
        edges are written; completed the ordinary way, each is a :class:`MergedEdge`."""
        items = self.page.items

        def make(j: int, node: PageNode) -> MergedEdge:
            item = items[j]
            return MergedEdge(item.cursor, item.cluster, node)

        return PageEdges(
            self.contents,
            [item.cursor for item in items],
            {"cluster": [item.cluster for item in items]},
            make,
        )


@dataclass(slots=True)
class MergedEdge:
    """An edge of a merged view: its fleet cursor, its cluster and its node (read for the
    node's selection as the cluster's own edges' nodes are: :class:`PageNode`)."""

    cursor: str
    cluster: str
    node: PageNode


def _is_view(f: GraphQLField) -> bool:
    t = get_named_type(f.type)
    return (
        isinstance(t, GraphQLObjectType)
        and {"edges", "nodes", "pageInfo", "total", "counts"} <= set(t.fields)
        and {"first", "after", "sort", "filter"} <= set(f.args)
    )


def merged_view_fields(
    query: GraphQLObjectType,
    clusters_arg: GraphQLArgument,
    cluster_error: GraphQLObjectType,
) -> dict[str, GraphQLField]:
    """The merged view field of each view field of ``query`` (a cluster's query type)."""
    out: dict[str, GraphQLField] = {}
    member: GraphQLObjectType | None = None
    for name, base in query.fields.items():
        if not name.endswith("View") or not _is_view(base):
            continue
        view = get_named_type(base.type)
        assert isinstance(view, GraphQLObjectType)
        edge = get_named_type(view.fields["edges"].type)
        assert isinstance(edge, GraphQLObjectType)
        node_type = edge.fields["node"].type
        counts = view.fields["counts"]
        if member is None:
            member = _cluster_type(counts, cluster_error)
        out[name] = _merged_field(base, view, node_type, counts, member, clusters_arg)
    return out


def _cluster_type(counts: GraphQLField, cluster_error: GraphQLObjectType) -> GraphQLObjectType:
    count_list = counts.type.of_type if isinstance(counts.type, GraphQLNonNull) else counts.type
    return GraphQLObjectType(
        "FleetViewCluster",
        lambda: {
            "cluster": GraphQLField(
                GraphQLNonNull(GraphQLString),
                resolve=lambda p, i: p.cluster,
                description="The cluster's name.",
            ),
            "total": GraphQLField(
                GraphQLInt,
                resolve=lambda p, i: p.check().total,
                description="How many objects the view selects in this cluster (null, with "
                "the cluster's error in `errors`, when it did not answer).",
            ),
            "resourceVersion": GraphQLField(
                GraphQLString,
                resolve=lambda p, i: p.check().resource_version,
                description="The version of this cluster the answer reflects.",
            ),
            "counts": GraphQLField(
                count_list,
                args=counts.args,
                resolve=_cluster_counts,
                description="This cluster's objects of the view counted by a field's value.",
            ),
            "error": GraphQLField(
                cluster_error,
                resolve=lambda p, i: (
                    None
                    if p.error is None
                    else {"code": code_of(p.error), "message": p.error.message}
                ),
                description="Why this cluster is not in the answer (it refused the caller, "
                "failed, or is not served); null when it answered.",
            ),
        },
        description="One cluster's part of a merged view.",
    )


async def _cluster_counts(part: ClusterPart, info: Info, groupBy: str) -> list[ViewCount]:
    answer = part.check()
    found: list[ViewCount] = await answer.counts(groupBy)
    return found


def _merged_field(  # noqa: PLR0917 (the parts of one field, each named once)
    base: GraphQLField,
    view: GraphQLObjectType,
    node_type: GraphQLOutputType,
    counts: GraphQLField,
    member: GraphQLObjectType,
    clusters_arg: GraphQLArgument,
) -> GraphQLField:
    resolve_base = base.resolve or default_field_resolver
    edge = GraphQLObjectType(
        f"Fleet{view.name}Edge",
        lambda: {
            "cursor": GraphQLField(
                GraphQLNonNull(GraphQLString),
                resolve=lambda item, i: item.cursor,
                description="The fleet position right after this object (`after`).",
            ),
            "cluster": GraphQLField(
                GraphQLNonNull(GraphQLString),
                resolve=lambda item, i: item.cluster,
                description="The cluster this object is in.",
            ),
            "node": GraphQLField(node_type, resolve=lambda edge, i: edge.node),
        },
        description=f"An object of a merged {view.name} and its cluster.",
    )
    page_info = get_named_type(view.fields["pageInfo"].type)
    fleet_view = GraphQLObjectType(
        f"Fleet{view.name}",
        lambda: {
            "edges": GraphQLField(
                GraphQLNonNull(GraphQLList(GraphQLNonNull(edge))),
                resolve=lambda a, i: a.edges,
            ),
            "nodes": GraphQLField(view.fields["nodes"].type, resolve=lambda a, i: a.nodes),
            "pageInfo": GraphQLField(GraphQLNonNull(page_info), resolve=lambda a, i: a.page_info),
            "total": GraphQLField(
                GraphQLNonNull(GraphQLInt),
                resolve=lambda a, i: a.page.total,
                description="How many objects the view selects in every cluster that answered.",
            ),
            "counts": GraphQLField(
                counts.type,
                args=counts.args,
                resolve=_total_counts,
                description="The objects of every cluster that answered, counted by a field's "
                "value (a cluster's own: `clusters { counts }`).",
            ),
            "clusters": GraphQLField(
                GraphQLNonNull(GraphQLList(GraphQLNonNull(member))),
                resolve=lambda a, i: a.parts,
                description="Each named cluster's part, in the order named.",
            ),
        },
        description=f"A {view.name} merged across clusters: one order, one cursor.",
    )
    args = {k: v for k, v in base.args.items() if k != "minResourceVersion"}
    args["clusters"] = clusters_arg

    async def resolve(root: Any, info: Info, **raw: Any) -> MergedAnswer:
        ctx = info.context
        clusters = raw.pop("clusters", None)
        after = raw.pop("after", None)
        selection = await ctx.select(clusters)
        unserved = frozenset(selection.missing)
        # every cluster's position: each is checked by its cluster's view (a cursor of
        # that view's sort, well formed), the whole against the sort once answered
        positions = decode_fleet_cursor(None, after) if after is not None else {}

        async def one(name: str) -> ClusterPart:
            if name in unserved:
                return ClusterPart(name, error=selection.refusal(name))
            try:
                member_ctx = ctx.member(name)
                asked = dict(raw)
                if name in positions:
                    asked["after"] = positions[name]
                result = resolve_base(None, info._replace(context=member_ctx), **asked)
                if inspect.isawaitable(result):
                    result = await result
                return ClusterPart(name, answer=result)
            except errors.GatewayError as exc:
                exc.cluster = name
                return ClusterPart(name, error=exc)

        parts = list(await asyncio.gather(*(one(n) for n in selection.names)))
        for part in parts:  # the caller's mistake is the field's, not a cluster's
            if isinstance(part.error, errors.InvalidView):
                part.error.cluster = None
                raise part.error
        answered = [(p.cluster, p.answer.page) for p in parts if p.answer is not None]
        spec = next((p.answer._spec for p in parts if p.answer is not None), None)
        if spec is None:  # no cluster answered
            page = MergedPage([], positions, 0, False, bool(positions), None, None)
        else:
            if after is not None:
                decode_fleet_cursor(spec.sort, after)  # of this view's sort, or refused
            page = await merge_views(spec.sort, spec.first, answered, positions)
        return _answer(ctx, info, page, parts, spec)

    return GraphQLField(
        fleet_view,
        args=args,
        resolve=resolve,
        description=f"{base.description} Merged across the named clusters: one order (the "
        "cluster name breaks the last ties), one cursor, each object tagged with its "
        "cluster; a cluster that fails is left out, its error its own.",
    )


def _answer(
    ctx: Any, info: Info, page: MergedPage, parts: list[ClusterPart], spec: ViewSpec | None
) -> MergedAnswer:
    ctx.merged.update(
        ((info.path.key, key, j), item.cluster)
        for j, item in enumerate(page.items)
        for key in ("edges", "nodes")
    )
    return MergedAnswer(
        page,
        parts,
        spec,
        {
            "has_next_page": page.has_next,
            "has_previous_page": page.has_previous,
            "start_cursor": page.start_cursor,
            "end_cursor": page.end_cursor,
        },
    )


async def _total_counts(answer: MergedAnswer, info: Info, groupBy: str) -> list[ViewCount]:
    """The counts of every cluster that answered, summed by value (most frequent first)."""
    answered = [p.answer for p in answer.parts if p.answer is not None]
    found = await asyncio.gather(*(a.counts(groupBy) for a in answered))
    total: dict[str | None, int] = {}
    for groups in found:
        for c in groups:
            total[c.value] = total.get(c.value, 0) + c.count
    out = [ViewCount(v, n) for v, n in total.items()]
    out.sort(key=lambda c: (-c.count, c.value is None, c.value or ""))
    return out


# -- live fleet views ----------------------------------------------------------------------


def merged_live_view_fields(
    subscription: GraphQLObjectType, merged: dict[str, GraphQLField]
) -> dict[str, GraphQLField]:
    """The live form of each merged view field (``subscription { podsView(clusters...) }``):
    the merged view's page at once, then again whenever what it shows changes
    (:mod:`gateway.core.views.livefleet`), for each live view field of ``subscription`` (a
    cluster's subscription type) whose merged query field is in ``merged``."""
    out: dict[str, GraphQLField] = {}
    for name, base in subscription.fields.items():
        spec_of = live_view_spec(base.subscribe)
        query = merged.get(name)
        if spec_of is None or query is None or base.resolve is None:
            continue
        out[name] = _live_merged_field(base, query, spec_of)
    return out


def _live_merged_field(base: GraphQLField, query: GraphQLField, spec_of: SpecOf) -> GraphQLField:
    resolve_base = base.resolve
    assert resolve_base is not None
    args = dict(query.args)
    args["interval"] = base.args["interval"]
    args["notify"] = base.args["notify"]

    async def subscribe(root: Any, info: Info, **raw: Any) -> FleetLiveSubscription:
        ctx = info.context
        clusters = raw.pop("clusters", None)
        after = raw.pop("after", None)
        spec = spec_of(raw)  # the caller's mistakes: the whole field's BAD_USER_INPUT
        positions = decode_fleet_cursor(spec.sort, after) if after is not None else {}
        selection = await ctx.select(clusters)
        unserved = frozenset(selection.missing)
        members: list[FleetMember] = []
        for name in selection.names:
            if name in unserved:
                members.append(FleetMember(name, None, selection.refusal(name)))
                continue
            try:
                views = ctx.fleet.get(name).views
                if views is None:
                    raise errors.Unavailable("views are not served by this cluster")
                members.append(FleetMember(name, LiveViews.of(views)))
            except errors.GatewayError as exc:  # removed since it was selected
                exc.cluster = name
                members.append(FleetMember(name, None, exc))
        default = next((m.live.interval for m in members if m.live is not None), 0.25)
        with ctx.adapter.metrics.operation("graphql", "LiveView", spec.resource.key):
            return await FleetLiveViews.of(ctx.fleet).subscribe(
                spec,
                members,
                positions,
                ctx.credential,
                interval=interval_of(raw.get("interval"), default),
                notify=bool(raw.get("notify")),
                every_change=selects(info, "counts"),
            )

    def resolve(root: FleetLivePage, info: Info, **raw: Any) -> MergedAnswer:
        ctx = info.context
        notify = bool(raw.get("notify"))
        parts: list[ClusterPart] = []
        for part in root.parts:
            if part.page is None:
                parts.append(ClusterPart(part.cluster, error=part.error))
                continue
            try:
                member_ctx = ctx.member(part.cluster)
            except errors.GatewayError as exc:  # removed since
                exc.cluster = part.cluster
                parts.append(ClusterPart(part.cluster, error=exc))
                continue
            answer = resolve_base(part.page, info._replace(context=member_ctx), notify=notify)
            parts.append(ClusterPart(part.cluster, answer=answer))
        page = root.merged
        if notify:  # only that the page changed: the client refetches the query
            page = replace(page, items=[])
        return _answer(ctx, info, page, parts, root.spec)

    return GraphQLField(
        query.type,
        args=args,
        subscribe=subscribe,
        resolve=resolve,
        description=f"{base.description} Merged across the named clusters as the query of "
        "the same name is; a cluster that refuses or fails is shown with its error and the "
        "others stay live (it comes back when it answers again).",
    )
