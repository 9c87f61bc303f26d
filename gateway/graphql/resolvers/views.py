"""Views in GraphQL: a Relay-style connection of every served kind (``podsView``).

For each kind with a ``list`` operation, the same data makes the same shape (the strawberry
seed schema through :class:`~gateway.graphql.resolvers.operations.RootBuilder`, a group's schema
through :mod:`gateway.graphql.schemas.native`)::

    podsView(namespace: String, filter: ViewFilter, search: String, sort: [ViewSort!],
             first: Int = 50, after: String, minResourceVersion: String): PodView

    type PodView { edges: [PodViewEdge!]! nodes: [Pod!]! pageInfo: ViewPageInfo!
                   total: Int! resourceVersion: String!
                   counts(groupBy: String!): [ViewCount!]! }

``nodes`` and ``edges.node`` are the kind's own type: the projection
(:mod:`gateway.graphql.engine.projection`) completes them as it completes a list's items.  What a
view means is the core's (:mod:`gateway.core.views`); here only the conversion of the
arguments and the answer's fields.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Optional

import strawberry
from graphql import GraphQLSchema
from strawberry.types.field import StrawberryField

from gateway.core import (
    LivePage,
    LiveSubscription,
    LiveViews,
    ObjectType,
    Resource,
    ViewContents,
    ViewCount,
    ViewPage,
    ViewSpec,
    errors,
    interval_of,
    resolve_path,
    view_spec,
)
from gateway.graphql.resolvers.arguments import Arg
from gateway.graphql.resolvers.context import Context

if TYPE_CHECKING:
    from gateway.core import Views

Lookup = Callable[[str], ObjectType]


@strawberry.enum(name="ViewOrder", description="A sort key's direction.")
class ViewOrder(enum.Enum):
    ASC = "asc"
    DESC = "desc"


@strawberry.enum(
    name="ViewOp",
    description="How a filter condition compares a field (typed: numbers as numbers, "
    "timestamps as instants).",
)
class ViewOp(enum.Enum):
    EQ = "eq"
    NE = "ne"
    IN = "in"
    NOT_IN = "notIn"
    PREFIX = "prefix"
    CONTAINS = "contains"
    EXISTS = "exists"
    LT = "lt"
    LTE = "lte"
    GT = "gt"
    GTE = "gte"


@strawberry.input(
    name="ViewFilter",
    description="A filter of a view: a condition (`field`, `op`, `value` or `values`), "
    "`and`/`or` of filters, `not` a filter, and/or label and field selectors with the "
    "apiserver's syntax; several given together are ANDed.",
)
class ViewFilter:
    and_: Optional[list[ViewFilter]] = strawberry.field(name="and", default=None)  # noqa: UP045
    or_: Optional[list[ViewFilter]] = strawberry.field(name="or", default=None)  # noqa: UP045
    not_: Optional[ViewFilter] = strawberry.field(name="not", default=None)  # noqa: UP045
    field: Optional[str] = strawberry.field(  # noqa: UP045
        default=None, description="A field path: `metadata.name`, `metadata.labels.app`."
    )
    op: Optional[ViewOp] = strawberry.field(default=None, description="Default EQ.")  # noqa: UP045
    value: Optional[str] = strawberry.field(  # noqa: UP045
        default=None, description="The value, as text (`42`, `2026-01-02T15:04:05Z`, `true`)."
    )
    values: Optional[list[str]] = strawberry.field(  # noqa: UP045
        default=None, description="The values of IN and NOT_IN."
    )
    label_selector: Optional[str] = strawberry.field(  # noqa: UP045
        name="labelSelector", default=None, description="`app=web,tier in (a,b),!canary`"
    )
    field_selector: Optional[str] = strawberry.field(  # noqa: UP045
        name="fieldSelector", default=None, description="`status.phase=Running`"
    )


@strawberry.input(name="ViewSort", description="A sort key of a view.")
class ViewSort:
    field: str = strawberry.field(description="A scalar field path.")
    order: ViewOrder = ViewOrder.ASC


@strawberry.type(name="ViewPageInfo", description="Where a page of a view stands (Relay).")
class ViewPageInfo:
    has_next_page: bool
    has_previous_page: bool
    start_cursor: Optional[str]  # noqa: UP045
    end_cursor: Optional[str]  # noqa: UP045


@strawberry.type(name="ViewCount", description="How many objects of a view have a value.")
class ViewCountType:
    value: Optional[str] = strawberry.field(description="The value as text; null: absent.")  # noqa: UP045
    count: int


_FILTER_NAMES = (
    ("and", "and_"),
    ("or", "or_"),
    ("not", "not_"),
    ("field", "field"),
    ("op", "op"),
    ("value", "value"),
    ("values", "values"),
    ("labelSelector", "label_selector"),
    ("fieldSelector", "field_selector"),
)


class _Filter(Mapping[str, Any]):
    """A :class:`ViewFilter` as the plain mapping the core reads, converted as it reads it
    (so a huge or deep filter is refused at the core's cap, not walked whole first)."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.keys_ = [g for g, p in _FILTER_NAMES if getattr(source, p, None) is not None]

    def __getitem__(self, key: str) -> Any:
        python = dict(_FILTER_NAMES)[key]
        value = getattr(self.source, python, None)
        if value is None:
            raise KeyError(key)
        if key in ("and", "or"):
            return _Filters(value)
        if key == "not":
            return _Filter(value)
        if key == "op":
            return value.value if isinstance(value, enum.Enum) else value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_)

    def __len__(self) -> int:
        return len(self.keys_)


class _Filters(Sequence[Any]):
    def __init__(self, items: Sequence[Any]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: Any) -> Any:
        return _Filter(self.items[i])


def _sort(value: Any) -> list[Any] | None:
    if value is None:
        return None
    if len(value) > 64:  # the core's cap is smaller: refused there, after a short walk
        value = value[:65]
    return [
        s
        if isinstance(s, Mapping)
        else {"field": s.field, "order": getattr(s.order, "value", s.order)}
        for s in value
    ]


class Edge:
    __slots__ = ("cursor", "node")

    def __init__(self, cursor: str, node: Any) -> None:
        self.cursor, self.node = cursor, node


class PageInfo:
    """Where a page stands (``ViewPageInfo``), its cursors written when read."""

    __slots__ = ("page",)

    def __init__(self, page: ViewPage) -> None:
        self.page = page

    @property
    def has_next_page(self) -> bool:
        return self.page.has_next

    @property
    def has_previous_page(self) -> bool:
        return self.page.has_previous

    @property
    def start_cursor(self) -> str | None:
        return self.page.start_cursor

    @property
    def end_cursor(self) -> str | None:
        return self.page.end_cursor


#: A view's fields read as attributes (the executor completes them directly where it can:
#: :mod:`gateway.graphql.engine.projection`), by GraphQL name: :class:`ViewAnswer`'s scalars
#: and :class:`PageInfo`'s.
VIEW_FIELDS = {"total": "total", "resourceVersion": "resource_version"}
PAGE_INFO_FIELDS = {
    "hasNextPage": "has_next_page",
    "hasPreviousPage": "has_previous_page",
    "startCursor": "start_cursor",
    "endCursor": "end_cursor",
}


class SharedItems(Sequence[Any]):
    """The objects of a page (:class:`~gateway.core.views.evaluate.Contents`, their JSON),
    with what completions made of them (:attr:`ViewPage.renderings
    <gateway.core.views.evaluate.Page.renderings>` for a page its callers share, the core
    keeping it with its order): the executor's projection of a selection reads only what it
    selects of each object (:meth:`read`), and is made once and shared by every answer that
    selects the same (read only).  Any executor may complete it as the list it is (the
    objects then decoded whole)."""

    __slots__ = ("contents", "made")

    def __init__(self, contents: ViewContents, made: dict[Any, Any] | None) -> None:
        self.contents = contents
        #: Projections by plan (``None``: a page of one caller, nothing kept).
        self.made = made

    @property
    def items(self) -> list[Any]:
        """The objects, decoded whole."""
        return self.contents.objects

    def read(self, spec: Any) -> list[Any]:
        """The objects as the projection of an item's plan ``spec`` reads them
        (:meth:`~gateway.core.views.evaluate.Contents.read`)."""
        return self.contents.read(spec)

    def __len__(self) -> int:
        return len(self.contents)

    def __getitem__(self, i: Any) -> Any:
        return self.contents.objects[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.contents.objects)


class PageReads:
    """A page's objects as the projections of its edges' nodes read them: each plan's read
    of the whole page made once (:meth:`~gateway.core.views.evaluate.Contents.read`), for
    all the nodes of one answer's edges."""

    __slots__ = ("by_spec", "contents")

    def __init__(self, contents: ViewContents) -> None:
        self.contents = contents
        self.by_spec: dict[Any, list[Any]] = {}

    def read(self, spec: Any) -> list[Any]:
        found = self.by_spec.get(spec)
        if found is None:
            found = self.by_spec[spec] = self.contents.read(spec)
        return found


class PageNode(Mapping[str, Any]):
    """An edge's node: the ``at``-th object of a page, which the executor's projection of
    a selection reads only in part (:meth:`PageReads.read`: the page's objects read for
    the selection once, as ``nodes`` are); completed any other way, it is the object
    decoded whole (a read-only mapping of it)."""

    __slots__ = ("at", "reads")

    def __init__(self, reads: PageReads, at: int) -> None:
        self.reads, self.at = reads, at

    @property
    def whole(self) -> dict[str, Any]:
        """The object, decoded whole (with the page's others, once)."""
        return self.reads.contents.objects[self.at]

    def read(self, spec: Any) -> Any:
        """The object as the projection of its plan ``spec`` reads it."""
        return self.reads.read(spec)[self.at]

    def __getitem__(self, key: str) -> Any:
        return self.whole[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.whole)

    def __len__(self) -> int:
        return len(self.whole)


class PageEdges(Sequence[Edge]):
    """A page's edges (made when completed the ordinary way), with the page's objects and
    cursors for an executor that writes them as JSON itself (:mod:`gateway.graphql.engine.
    projection`).

    ``columns``: further string fields of each edge (a merged view's ``cluster``), by field
    name, one string per edge, which the executor may write as it writes ``cursor``;
    ``make(i, node)``: the ``i``-th edge as graphql-core completes it (by default an
    :class:`Edge`), which must answer those fields with the same strings."""

    __slots__ = ("_edges", "_make", "columns", "contents", "cursors")

    def __init__(
        self,
        contents: ViewContents,
        cursors: list[str],
        columns: Mapping[str, Sequence[str]] | None = None,
        make: Callable[[int, PageNode], Any] | None = None,
    ) -> None:
        self.contents, self.cursors = contents, cursors
        self.columns: Mapping[str, Sequence[str]] = columns or {}
        self._make = make
        self._edges: list[Any] | None = None

    @property
    def edges(self) -> list[Any]:
        found = self._edges
        if found is None:
            reads = PageReads(self.contents)
            make = self._make
            if make is None:
                found = [Edge(c, PageNode(reads, i)) for i, c in enumerate(self.cursors)]
            else:
                found = [make(i, PageNode(reads, i)) for i in range(len(self.cursors))]
            self._edges = found
        return found

    def __len__(self) -> int:
        return len(self.cursors)

    def __getitem__(self, i: Any) -> Any:
        return self.edges[i]

    def __iter__(self) -> Iterator[Edge]:
        return iter(self.edges)


class ViewAnswer:
    """What a view field answers (its fields read these attributes)."""

    __slots__ = ("_ctx", "_kind", "_lookup", "_spec", "page", "page_info", "resource_version")

    def __init__(
        self, ctx: Context, spec: ViewSpec, kind: ObjectType, lookup: Lookup, page: ViewPage
    ) -> None:
        self._ctx, self._spec, self._kind, self._lookup = ctx, spec, kind, lookup
        self.page = page
        self.page_info = PageInfo(page)
        self.resource_version = page.resource_version

    @property
    def nodes(self) -> Sequence[Any]:
        page = self.page
        return SharedItems(page.contents, page.renderings)

    @property
    def edges(self) -> Sequence[Edge]:
        return PageEdges(self.page.contents, self.page.cursors)

    @property
    def total(self) -> int:
        return self.page.total

    async def counts(self, group_by: str) -> list[ViewCount]:
        by = resolve_path(self._kind, group_by, self._lookup)
        spec = self._spec
        if spec.min_resource_version is None:  # the counts of the page's own version
            spec = _at_least(spec, self.resource_version)
        _total, _version, groups = await _views(self._ctx).counts(spec, by, self._ctx.credential)
        return groups


def _at_least(spec: ViewSpec, version: str) -> ViewSpec:
    from dataclasses import replace

    return replace(spec, min_resource_version=version if version.isdigit() else None)


def _views(ctx: Context) -> Views:
    views = ctx.views
    if views is None:
        raise errors.Unavailable("views are not served by this endpoint")
    return views


async def run_view(
    ctx: Context, a: Mapping[str, Any], r: Resource, kind: ObjectType, lookup: Lookup
) -> ViewAnswer:
    """The body of a view field (``a``: its arguments by GraphQL name, as graphql-core
    coerced them: plain dicts and lists, enum members; or strawberry's inputs)."""
    views = _views(ctx)
    with ctx.adapter.metrics.operation("graphql", "View", r.key):
        spec = _spec_of(a, r, kind, lookup)
        page = await views.page(spec, ctx.credential)
    return ViewAnswer(ctx, spec, kind, lookup, page)


def _spec_of(a: Mapping[str, Any], r: Resource, kind: ObjectType, lookup: Lookup) -> ViewSpec:
    raw = a.get("filter")
    return view_spec(
        r,
        kind,
        lookup,
        namespace=a.get("namespace"),
        filter=raw if raw is None or isinstance(raw, Mapping) else _Filter(raw),
        search=a.get("search"),
        sort=_sort(a.get("sort")),
        first=a.get("first"),
        after=a.get("after"),
        min_resource_version=a.get("minResourceVersion"),
    )


Resolve = Callable[..., Awaitable[Any]]


def view_resolver(r: Resource, kind: ObjectType, lookup: Lookup) -> Resolve:
    """A graphql-core resolver of ``r``'s view field that reads the arguments as
    graphql-core coerced them.

    Strawberry's own argument conversion builds an input object per filter node at about
    150 µs each (3 s for a hostile filter of 20,000 conditions, before any cap could
    refuse it); the coerced values are plain data the core reads, and refuses at its caps
    after a short walk."""

    async def resolve(root: Any, info: Any, **raw: Any) -> Any:
        return await run_view(info.context, raw, r, kind, lookup)

    return resolve


def install(
    schema: GraphQLSchema,
    resolvers: Mapping[str, Resolve],
    live: Mapping[str, tuple[Resolve, Callable[..., Any]]] | None = None,
) -> None:
    """Give the view fields of a strawberry-built schema :func:`view_resolver`'s resolvers,
    and its live view fields :func:`live_view_resolvers`' (what
    :mod:`gateway.graphql.schemas.native` gives its own)."""
    query = schema.query_type
    assert query is not None
    for name, resolve in resolvers.items():
        query.fields[name].resolve = resolve
    subscription = schema.subscription_type
    for name, (subscribe, each) in (live or {}).items():
        assert subscription is not None
        subscription.fields[name].subscribe = subscribe
        subscription.fields[name].resolve = each


# -- live views ----------------------------------------------------------------------------


class LiveAnswer(ViewAnswer):
    """An update of a live view; in notify mode without its objects (the client refetches
    the page with the view query)."""

    __slots__ = ("_notify",)

    def __init__(  # noqa: PLR0917
        self,
        ctx: Context,
        spec: ViewSpec,
        kind: ObjectType,
        lookup: Lookup,
        page: ViewPage,
        notify: bool,
    ) -> None:
        super().__init__(ctx, spec, kind, lookup, page)
        self._notify = notify

    @property
    def nodes(self) -> Sequence[Any]:
        return [] if self._notify else super().nodes

    @property
    def edges(self) -> Sequence[Edge]:
        return [] if self._notify else super().edges


def selects(info: Any, name: str) -> bool:
    """Whether the root field's selection reads ``name`` (through fragments)."""
    fragments = getattr(info, "fragments", None) or {}
    stack = [n.selection_set for n in info.field_nodes]
    while stack:
        selection_set = stack.pop()
        if selection_set is None:
            continue
        for selection in selection_set.selections:
            kind = selection.kind
            if kind == "field":
                if selection.name.value == name:
                    return True
            elif kind == "inline_fragment":
                stack.append(selection.selection_set)
            elif kind == "fragment_spread":
                fragment = fragments.get(selection.name.value)
                if fragment is not None:
                    stack.append(fragment.selection_set)
    return False


def live_view_resolvers(
    r: Resource, kind: ObjectType, lookup: Lookup
) -> tuple[Resolve, Callable[..., Any]]:
    """The ``subscribe`` and per-update ``resolve`` of ``r``'s live view field: the source
    is the caller's :class:`~gateway.core.LiveSubscription` (shared evaluation, coalescing,
    leases: :mod:`gateway.core.views.live`); each update renders as the query's answer."""

    async def subscribe(root: Any, info: Any, **raw: Any) -> LiveSubscription:
        ctx: Context = info.context
        live = LiveViews.of(_views(ctx))
        with ctx.adapter.metrics.operation("graphql", "LiveView", r.key):
            spec = _spec_of(raw, r, kind, lookup)
            return await live.subscribe(
                spec,
                ctx.credential,
                interval=interval_of(raw.get("interval"), live.interval),
                notify=bool(raw.get("notify")),
                every_change=selects(info, "counts"),
            )

    def resolve(root: LivePage, info: Any, **raw: Any) -> LiveAnswer:
        return LiveAnswer(info.context, root.spec, kind, lookup, root.page, bool(raw.get("notify")))

    _LIVE_SPECS[subscribe] = lambda raw: _spec_of(raw, r, kind, lookup)
    return subscribe, resolve


SpecOf = Callable[[Mapping[str, Any]], ViewSpec]
_LIVE_SPECS: weakref.WeakKeyDictionary[Callable[..., Any], SpecOf] = weakref.WeakKeyDictionary()


def live_view_spec(subscribe: Callable[..., Any] | None) -> SpecOf | None:
    """How the live view field whose ``subscribe`` this is reads its arguments into a
    :class:`~gateway.core.ViewSpec` (``None``: not a live view field); the fleet's live
    views build theirs with it (:mod:`gateway.graphql.endpoints.fleet_views`)."""
    if subscribe is None:
        return None
    return _LIVE_SPECS.get(subscribe)


def live_view_args(r: Resource) -> tuple[Arg, ...]:
    """The arguments of a live view field: the view's, and how it is kept live."""
    return (
        *view_args(r),
        Arg(
            "interval",
            Optional[int],  # noqa: UP045
            "At most one update per this many milliseconds (50 to 10000; default "
            "--live-view-interval-ms, 250).",
        ),
        Arg(
            "notify",
            Optional[bool],  # noqa: UP045
            "Only say that the page changed (`nodes` and `edges` empty: refetch the view "
            "query); default false.",
        ),
    )


LIVE_VIEW_DESCRIPTION = (
    "A live view of {plural}: the view's page at once, then again whenever what it shows "
    "changes (objects entering, leaving or moving, a selected field, the total), at most "
    "once per `interval`."
)


async def _unset(ctx: Context, a: dict[str, Any]) -> Any:  # replaced by install()
    raise errors.Internal("the live view field was not installed")


def live_view_field(
    r: Resource, returns: Any, subscription_field: Callable[..., StrawberryField]
) -> StrawberryField:
    """The seed schema's live view field of ``r`` (its ``subscribe`` and ``resolve`` are
    :func:`live_view_resolvers`', given once the schema is built, :func:`install`)."""
    return subscription_field(
        _unset, live_view_args(r), returns, LIVE_VIEW_DESCRIPTION.format(plural=r.plural)
    )


# -- the fields ----------------------------------------------------------------------------


def view_args(r: Resource) -> tuple[Arg, ...]:
    """The arguments of a view field (``namespace`` for namespaced kinds)."""
    namespace = (
        (Arg("namespace", Optional[str], "The namespace; omit it for all namespaces."),)  # noqa: UP045
        if r.namespaced
        else ()
    )
    return (
        *namespace,
        Arg("filter", Optional[ViewFilter], "Which objects (default: all)."),  # noqa: UP045
        Arg(
            "search",
            Optional[str],  # noqa: UP045
            "Free text, case-insensitive, in names, namespaces, labels and annotations.",
        ),
        Arg(
            "sort",
            Optional[list[ViewSort]],  # noqa: UP045
            "Sort keys, most significant first; ties by (namespace, name).",
        ),
        Arg("first", Optional[int], "Items per page (0 to 500; default 50)."),  # noqa: UP045
        Arg("after", Optional[str], "The `endCursor` of the previous page."),  # noqa: UP045
        Arg(
            "minResourceVersion",
            Optional[str],  # noqa: UP045
            "Answer at this resourceVersion or later (read your own write).",
        ),
    )


VIEW_DESCRIPTION = (
    "A view of {plural}: filtered, searched, sorted, in pages by cursor, with a total and "
    "counts, answered from a cache the gateway keeps while views use it."
)


def view_types(name: str, kind_cls: type) -> type:
    """The strawberry connection type ``{name}View`` (and its edge) of a kind."""
    edge = type(f"{name}ViewEdge", (), {"__module__": __name__})
    edge.__annotations__ = {"cursor": str, "node": kind_cls}
    edge_cls = strawberry.type(edge, name=f"{name}ViewEdge", description=f"A {name} of a view.")

    async def counts(
        root: ViewAnswer,
        group_by: Annotated[
            str, strawberry.argument(name="groupBy", description="A scalar field path.")
        ],
    ) -> list[ViewCountType]:
        return await root.counts(group_by)  # type: ignore[return-value]

    view = type(
        f"{name}View",
        (),
        {
            "__module__": __name__,
            "counts": strawberry.field(
                resolver=counts,
                description="The view's objects (all pages) counted by a field's value, "
                "most frequent first.",
            ),
            "edges": strawberry.field(description="The page's objects with their cursors."),
            "nodes": strawberry.field(description="The page's objects."),
            "page_info": strawberry.field(description="Where the page stands."),
            "total": strawberry.field(description="How many objects the view selects."),
            "resource_version": strawberry.field(
                description="The resourceVersion the answer reflects."
            ),
        },
    )
    view.__annotations__ = {
        "edges": list[edge_cls],  # type: ignore[valid-type]
        "nodes": list[kind_cls],  # type: ignore[valid-type]
        "page_info": ViewPageInfo,
        "total": int,
        "resource_version": str,
    }
    return strawberry.type(
        view,
        name=f"{name}View",
        description=f"A page of a view of {name} objects, its total and counts.",
    )


def view_field(
    r: Resource,
    kind: ObjectType,
    lookup: Lookup,
    returns: Any,
    query_field: Callable[..., StrawberryField],
) -> StrawberryField:
    """The seed schema's view field of ``r`` (made with the operations' ``query_field``;
    its resolver is replaced by :func:`view_resolver`'s once the schema is built,
    :func:`install`)."""

    async def run(ctx: Context, a: dict[str, Any]) -> Any:
        return await run_view(ctx, a, r, kind, lookup)

    return query_field(
        run,
        view_args(r),
        Optional[returns],  # noqa: UP045
        VIEW_DESCRIPTION.format(plural=r.plural),
    )


__all__ = [
    "LIVE_VIEW_DESCRIPTION",
    "PAGE_INFO_FIELDS",
    "VIEW_FIELDS",
    "Edge",
    "LiveAnswer",
    "PageEdges",
    "PageInfo",
    "ViewAnswer",
    "ViewCountType",
    "ViewFilter",
    "ViewOp",
    "ViewOrder",
    "ViewPageInfo",
    "ViewSort",
    "install",
    "live_view_args",
    "live_view_field",
    "live_view_resolvers",
    "live_view_spec",
    "run_view",
    "selects",
    "view_args",
    "view_field",
    "view_resolver",
    "view_types",
]
