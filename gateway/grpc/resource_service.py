"""The generic ``kubegateway.v1.ResourceService``: any served resource, objects as JSON or Struct.

Its contract is the hand-written ``protos/kubegateway/v1/resource.proto`` (fixed: it does not
change when the served set does).  Every call names its resource by ``group``, ``version``
and ``resource`` (the plural); :class:`ResourceServiceServicer` resolves it on the
:class:`~gateway.core.catalog.catalog.CatalogHolder`'s current catalog, once per call (an unknown
resource is ``NOT_FOUND`` before any upstream call), makes the
:class:`~gateway.core.calls.operations.Operation` of the method (with the ``subresource`` of
``Get``/``Replace``/``Patch``), checks its verb with
:meth:`~gateway.core.model.registry.Resource.check`
(``UNIMPLEMENTED`` when the resource does not serve it) and then serves it exactly as the
typed services do (:mod:`gateway.grpc.handling`: the same request options, metrics, statuses
and Watch loop through the hub).

Objects travel as a ``ResourceObject``: JSON bytes (the default), or a
``google.protobuf.Struct`` when the request's ``representation`` asks for it.  Requests take
either form.  ``read_mask`` paths are JSON field names (:func:`gateway.grpc.mask.parse_json`).
Answers are written as wire bytes directly (:mod:`gateway.core.lists.protowire`): the JSON text is
orjson's, a ``Struct`` is encoded straight from the decoded JSON.

Fleet calls: ``List`` and ``Watch`` take ``clusters`` (names, ``*`` for every cluster the
caller may see: :mod:`gateway.core.fleet.visibility`).  Then the call asks each named cluster
concurrently with the caller's credential (:mod:`gateway.core.fleet.fanout`), each resolving
the resource on its own catalog and refusing on its own (an unknown resource, a verb it
does not serve, RBAC): ``List`` answers one
``ClusterResourceList`` per cluster, its list (the same large-list path as a single List)
or its ``ClusterStatus`` (a ``google.rpc.Status`` on the wire, with the details a unary
error carries); ``Watch`` merges the clusters' watches
(:class:`~gateway.core.fleet.watches.FleetStream`), each event tagged with its ``cluster``, a
cluster whose part ends sending one event with its ``error`` while the others go on, and a
drain ending the call with the per-cluster resume point (``ErrorInfo`` metadata
``resumeFrom``, what ``resume_from`` takes).  Only a malformed request fails the call.
Without ``clusters`` nothing changes: the ``x-kube-cluster`` metadata's cluster answers.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import msgspec
import orjson

from gateway.core import (
    MAX_COUNT_GROUPS,
    MAX_VIEW_SORT_KEYS,
    MAX_VIEW_VALUES,
    Action,
    CatalogHolder,
    Cluster,
    ClusterLive,
    Credential,
    Drain,
    FleetEvent,
    FleetLivePage,
    FleetLiveSubscription,
    FleetLiveViews,
    FleetMember,
    FleetStreams,
    HubEvent,
    KubeAdapter,
    ListEncoding,
    LivePage,
    LiveSubscription,
    LiveViews,
    MergedItem,
    Operation,
    Resource,
    TooDeep,
    ViewContents,
    ViewPage,
    Views,
    ViewSpec,
    WatchHub,
    WatchSubscription,
    check_listed,
    check_resume,
    decode_fleet_cursor,
    deepjson,
    digest,
    each_cluster,
    encode_struct,
    errors,
    field_tag,
    interval_of,
    kind_model,
    length_prefixed,
    list_body,
    mask_camel,
    merge_views,
    open_fleet_stream,
    open_stream,
    perform,
    resolve_path,
    select,
    varint,
    view_spec,
    wire,
)
from gateway.grpc import mask as masks
from gateway.grpc.codec import LIST_SLICE, Codec, WireMemo, struct_json
from gateway.grpc.gen.kubegateway.v1 import common_pb2, resource_pb2
from gateway.grpc.handling import (
    OpenStreams,
    ServicerBase,
    core_call,
    invalid,
    pump,
    watch_call,
    watch_deadline,
    watch_stream,
)
from gateway.grpc.status import FleetDraining, status_message

__all__ = ["SERVICE", "ResourceServiceServicer"]

#: The service's descriptor (its full name: ``kubegateway.v1.ResourceService``).
SERVICE: Final = resource_pb2.DESCRIPTOR.services_by_name["ResourceService"]

_ACTIONS: Final[Mapping[str, Action]] = MappingProxyType(
    {
        "Get": "get",
        "List": "list",
        "Watch": "watch",
        "Create": "create",
        "Replace": "replace",
        "Patch": "patch",
        "Delete": "delete",
        "DeleteCollection": "deletecollection",
        # a view reads a list (the core's views review list and watch themselves)
        "View": "list",
        "WatchView": "list",
    }
)

#: What a call that names no served resource is counted as (``_`` is never in a plural, so
#: the metrics label cannot be a real resource's).
UNRESOLVED: Final = Resource(
    group="", version="", kind="", plural="_unresolved", singular="", namespaced=False
)

STRUCT: Final = resource_pb2.REPRESENTATION_STRUCT

# Field tags (all length-delimited) of the messages written as wire bytes.
_OBJECT_JSON: Final = field_tag(resource_pb2.ResourceObject.JSON_FIELD_NUMBER)
_OBJECT_STRUCT: Final = field_tag(resource_pb2.ResourceObject.STRUCT_FIELD_NUMBER)
_LIST_API_VERSION: Final = field_tag(resource_pb2.ResourceList.API_VERSION_FIELD_NUMBER)
_LIST_KIND: Final = field_tag(resource_pb2.ResourceList.KIND_FIELD_NUMBER)
_LIST_METADATA: Final = field_tag(resource_pb2.ResourceList.METADATA_FIELD_NUMBER)
_LIST_ITEMS: Final = field_tag(resource_pb2.ResourceList.ITEMS_FIELD_NUMBER)
_EVENT_OBJECT: Final = field_tag(resource_pb2.ResourceWatchEvent.OBJECT_FIELD_NUMBER)
_EVENT_CLUSTER: Final = field_tag(resource_pb2.ResourceWatchEvent.CLUSTER_FIELD_NUMBER)
_EVENT_ERROR: Final = field_tag(resource_pb2.ResourceWatchEvent.ERROR_FIELD_NUMBER)
_LIST_CLUSTERS: Final = field_tag(resource_pb2.ResourceList.CLUSTERS_FIELD_NUMBER)
_VIEW_EDGES: Final = field_tag(resource_pb2.ResourceView.EDGES_FIELD_NUMBER)
_EDGE_CURSOR: Final = field_tag(resource_pb2.ViewEdge.CURSOR_FIELD_NUMBER)
_EDGE_OBJECT: Final = field_tag(resource_pb2.ViewEdge.OBJECT_FIELD_NUMBER)
_EDGE_CLUSTER: Final = field_tag(resource_pb2.ViewEdge.CLUSTER_FIELD_NUMBER)
_VIEW_VERSION: Final = field_tag(resource_pb2.ResourceView.RESOURCE_VERSION_FIELD_NUMBER)
_MEMBER_CLUSTER: Final = field_tag(resource_pb2.ClusterResourceList.CLUSTER_FIELD_NUMBER)
_MEMBER_LIST: Final = field_tag(resource_pb2.ClusterResourceList.LIST_FIELD_NUMBER)
_MEMBER_ERROR: Final = field_tag(resource_pb2.ClusterResourceList.ERROR_FIELD_NUMBER)
# DeleteResourceResponse and DeleteCollectionResourcesResponse: the answer 1, a Status 2.
_RESULT: Final = field_tag(1)
_STATUS: Final = field_tag(2)

_EVENT_TYPES: Final[Mapping[str, int]] = MappingProxyType(
    {v.name: v.number for v in common_pb2.WatchEvent.Type.DESCRIPTOR.values}
)

JSON = dict[str, Any]


def _object_tag(representation: int) -> bytes:
    return _OBJECT_STRUCT if representation == STRUCT else _OBJECT_JSON


def object_bytes(obj: JSON, representation: int) -> bytes:
    """The wire bytes of a ``ResourceObject`` holding ``obj``: an object nested too deep
    for a ``Struct`` (past ``deepjson.FROZEN_DEPTH`` levels) is written as its JSON even
    when the caller asked for ``Struct``s (the ``representation`` oneof says which)."""
    if representation == STRUCT:
        try:
            return length_prefixed(_OBJECT_STRUCT, encode_struct(obj))
        except TooDeep:
            pass
    return length_prefixed(_OBJECT_JSON, deepjson.dumps(obj))


class ResourceServiceServicer(ServicerBase):
    """Serves ``kubegateway.v1.ResourceService`` over the resources of ``catalog``.

    Args:
        adapter: the shared upstream adapter.
        watches: the core's watch hub (``Watch`` joins it, with the typed services' subscribers).
        catalog: what is served; its current catalog is read once per call.
        conversions: the typed contract's codec (for ``ListMeta`` and ``Status``).
        drain: the application's drain.
        opened: the open streams of the cluster served (ended when it leaves the fleet).
        fleet: every served cluster, which of them a caller may see, and the open fleet
            watches (fleet calls: ``clusters``); ``None`` refuses fleet calls.
    """

    full_name = SERVICE.full_name

    def __init__(
        self,
        adapter: KubeAdapter,
        watches: WatchHub,
        catalog: CatalogHolder,
        conversions: Codec,
        drain: Drain | None = None,
        *,
        opened: OpenStreams | None = None,
        fleet: FleetStreams | None = None,
        views: Views | None = None,
    ) -> None:
        super().__init__(adapter, watches, drain, opened)
        self.catalog = catalog
        self.codec = conversions
        self.fleet = fleet
        self.views = views

    # -- plumbing ------------------------------------------------------------------------------

    def methods(self) -> Iterable[tuple[str, Any, bool]]:
        for method in SERVICE.methods:
            request = getattr(resource_pb2, method.input_type.name)
            yield method.name, request, method.server_streaming

    def operation(self, method: str, request: Any) -> Operation:
        action = _ACTIONS[method]
        if method == "WatchView":
            request = _watched_view(request)
        for field in ("version", "resource"):
            if not getattr(request, field):
                raise invalid(field, f"{field} is required", "FieldValueRequired")
        if _fleet_call(request):
            if self.fleet is None:
                raise invalid("clusters", "this server serves no fleet: leave clusters empty")
            # bounded before anything reads the list name by name
            check_listed(self.fleet.fleet, request.clusters)
            if isinstance(request, resource_pb2.WatchResourcesRequest):
                check_resume(self.fleet.fleet, len(request.resume_from), "resume_from")
            _check_fleet_request(request)
            try:  # counted as this cluster's resource; each cluster resolves its own
                resource = self.catalog.current.resource(
                    request.group, request.version, request.resource
                )
            except errors.UnknownResource:
                resource = UNRESOLVED
            return Operation(resource, action)
        if getattr(request, "resume_from", None):
            raise invalid("resume_from", "resume_from needs clusters (the clusters to watch)")
        resource = self.catalog.current.resource(request.group, request.version, request.resource)
        return Operation(resource, action, getattr(request, "subresource", "") or None)

    def admit(self, op: Operation, request: Any) -> None:
        if isinstance(request, resource_pb2.WatchViewRequest):
            request = _watched_view(request)
        if _fleet_call(request):
            if self.fleet is None:
                raise invalid("clusters", "this server serves no fleet: leave clusters empty")
            return  # each cluster admits its own operation (_member)
        self._admit(op, request)

    @staticmethod
    def _admit(op: Operation, request: Any) -> None:
        resource, sub = op.resource, op.subresource
        resource.check(op.verb, sub)
        if sub is not None and resource.subresources[sub].content != "json":
            raise errors.MethodNotSupported(
                f"{resource.plural}/{sub} is not a JSON subresource: its typed service serves it"
            )
        if request.namespace and not resource.namespaced:
            raise invalid(
                "namespace", f"{resource.plural} is cluster-scoped: namespace must be empty"
            )

    def unresolved(self, method: str) -> Operation:
        return Operation(UNRESOLVED, _ACTIONS[method])

    def metric_name(self, method: str, op: Operation) -> str:
        # a view reads a list, but is counted as GraphQL counts it: its own operation
        if method == "View":
            return "View"
        return "LiveView" if method == "WatchView" else op.name

    def _member(self, action: Action, request: Any, cluster: Cluster) -> Operation:
        """One cluster's operation of a fleet call, on that cluster's catalog, admitted.

        Raises:
            GatewayError: that cluster's refusal (the others are asked all the same).
        """
        resource = cluster.catalog.current.resource(
            request.group, request.version, request.resource
        )
        op = Operation(resource, action)
        self._admit(op, request)
        return op

    # -- request -> core ---------------------------------------------------------------------

    @staticmethod
    def _mask(request: Any) -> masks.Tree | None:
        if not request.HasField("read_mask"):
            return None
        return masks.parse_json(list(request.read_mask.paths))

    @staticmethod
    def _body(request: Any) -> JSON:
        which = request.object.WhichOneof("representation") if request.HasField("object") else None
        if which == "struct":
            return struct_json(request.object.struct)
        if which != "json":
            raise invalid("object", "object (json or struct) is required", "FieldValueRequired")
        try:
            body = orjson.loads(request.object.json)
        except orjson.JSONDecodeError:
            raise invalid("object.json", "object.json is not valid JSON") from None
        if not isinstance(body, dict):
            raise invalid("object.json", "object.json must be a JSON object")
        return body

    # -- answers -----------------------------------------------------------------------------

    async def answer(
        self,
        method: str,
        op: Operation,
        request: Any,
        credential: Credential,
        timeout: float | None,
    ) -> bytes:
        if method == "View":
            return await self._view(op, request, credential)
        if op.action == "list" and request.clusters:
            return await self._fleet_list(request, credential, timeout)
        mask = self._mask(request) if op.action in ("get", "list") else None
        call = core_call(op, request, namespace=request.namespace, body=lambda: self._body(request))
        rep = request.representation
        if op.action == "list":
            # As the typed lists: by the core's large-list scope (gateway.core.lists.large).
            return await self.adapter.large_lists.answer(
                lambda gzipped: list_body(
                    self.adapter, op, call, credential=credential, timeout=timeout, gzipped=gzipped
                ),
                self._list_encoding(rep, mask),
            )
        answer = await perform(self.adapter, op, call, credential=credential, timeout=timeout)
        if op.action in ("delete", "deletecollection"):
            if answer.get("kind") == "Status":
                return length_prefixed(_STATUS, self.codec.encode("Status", answer))
            if op.action == "delete":
                return length_prefixed(_RESULT, object_bytes(answer, rep))
            listed = await self.adapter.large_lists.encode(answer, self._list_encoding(rep, None))
            return length_prefixed(_RESULT, listed)
        if mask is not None:
            answer = masks.project(answer, mask, loose=True)
        return object_bytes(answer, rep)

    async def _view(self, op: Operation, request: Any, credential: Credential) -> bytes:
        """A page of a view (:mod:`gateway.core.views`): the request read as the plain
        data GraphQL's arguments are, validated by the same core (the same caps and
        messages), answered from the cluster's view caches."""
        if len(request.count_by) > MAX_COUNT_GROUPS:
            raise errors.InvalidView(f"`count_by` has more than {MAX_COUNT_GROUPS} fields")
        if request.clusters:
            return await self._fleet_view(request, credential)
        answer = await _one_view(
            self.views, self.catalog, op.resource, request, credential, after=request.after or None
        )
        page = answer.page
        head = resource_pb2.ResourceView(
            page_info=resource_pb2.ViewPageInfo(
                has_next_page=page.has_next,
                has_previous_page=page.has_previous,
                start_cursor=page.start_cursor or "",
                end_cursor=page.end_cursor or "",
            ),
            total=page.total,
            resource_version=page.resource_version,
            counts=answer.counts,
        )
        writer = self._objects(request)
        parts = [head.SerializeToString()]
        for cursor, written in zip(page.cursors, writer.page(page.contents), strict=True):
            parts.append(_edge(cursor, written, b""))
        return b"".join(parts)

    def _objects(self, request: Any) -> _Objects:
        """How a view's objects are written for ``request`` (its read mask, its
        representation), from their stored JSON (:class:`_Objects`)."""
        mask = self._mask(request)
        # the paths as one JSON text: unambiguous, and its hash kept by the bytes (a tuple
        # of many paths would be hashed again for every object looked up)
        key = None if mask is None else orjson.dumps(list(request.read_mask.paths))
        return _Objects(self.codec.memo, mask, key, request.representation)

    async def _fleet_view(self, request: Any, credential: Credential) -> bytes:
        """A view merged across the named clusters (:func:`gateway.core.views.merge.merge`):
        each asked concurrently for the first ``first`` items after its own position, by
        the same view as that cluster alone; a cluster's refusal is its own
        ``ClusterView.error``, a mistake of the caller's the call's ``INVALID_ARGUMENT``."""
        assert self.fleet is not None  # admitted: a fleet call needs a fleet
        positions = decode_fleet_cursor(None, request.after) if request.after else {}

        async def one(name: str, cluster: Cluster) -> _ViewAnswer:
            op = self._member("list", request, cluster)
            return await _one_view(
                cluster.views,
                cluster.catalog,
                op.resource,
                request,
                credential,
                after=positions.get(name),
            )

        fleet = self.fleet.fleet
        selection = await select(fleet, self.fleet.visibility.view(credential), request.clusters)
        results = await each_cluster(fleet, selection, one)
        for _name, result in results:  # the caller's mistake is the call's, not a cluster's
            if isinstance(result, errors.InvalidView):
                result.cluster = None
                raise result
        answered = [(n, r) for n, r in results if isinstance(r, _ViewAnswer)]
        head = resource_pb2.ResourceView()
        if answered:
            spec = answered[0][1].spec
            if request.after:
                decode_fleet_cursor(spec.sort, request.after)  # of this view's sort
            merged = await merge_views(
                spec.sort, spec.first, [(n, r.page) for n, r in answered], positions
            )
            head.page_info.CopyFrom(
                resource_pb2.ViewPageInfo(
                    has_next_page=merged.has_next,
                    has_previous_page=merged.has_previous,
                    start_cursor=merged.start_cursor or "",
                    end_cursor=merged.end_cursor or "",
                )
            )
            head.total = merged.total
            head.counts.extend(_summed([r.counts for _, r in answered], request.count_by))
        else:
            merged = None
            head.page_info.has_previous_page = bool(positions)
        for name, result in results:
            if isinstance(result, _ViewAnswer):
                head.clusters.add(
                    cluster=name,
                    total=result.page.total,
                    resource_version=result.page.resource_version,
                    counts=result.counts,
                )
            else:
                error = resource_pb2.ClusterStatus.FromString(_status_bytes(result))
                head.clusters.add(cluster=name, error=error)
        writer = self._objects(request)
        parts = [head.SerializeToString()]
        tags: dict[str, bytes] = {}
        for item in merged.items if merged is not None else ():
            tag = tags.get(item.cluster)
            if tag is None:
                tag = tags[item.cluster] = length_prefixed(_EDGE_CLUSTER, item.cluster.encode())
            parts.append(_edge(item.cursor, writer.item(item), tag))
        return b"".join(parts)

    def _list_encoding(self, rep: int, mask: masks.Tree | None) -> ListEncoding:
        """How a ``ResourceList`` is written (in slices of
        :data:`~gateway.grpc.codec.LIST_SLICE` items when large, as the typed lists are)."""

        def head(answer: Mapping[str, Any]) -> bytes:
            parts = []
            for tag, key in ((_LIST_API_VERSION, "apiVersion"), (_LIST_KIND, "kind")):
                value = answer.get(key)
                if isinstance(value, str) and value:
                    parts.append(length_prefixed(tag, value.encode()))
            meta = answer.get("metadata")
            if isinstance(meta, dict):
                parts.append(length_prefixed(_LIST_METADATA, self.codec.encode("ListMeta", meta)))
            return b"".join(parts)

        def items(run: Sequence[Any], parts: list[bytes]) -> None:
            for item in run:
                if item.__class__ is dict:
                    obj = masks.project(item, mask, loose=True) if mask is not None else item
                    parts.append(length_prefixed(_LIST_ITEMS, object_bytes(obj, rep)))

        # Without a read mask a list worker writes the same items (gateway.core.lists.jobs).
        as_struct = rep == STRUCT
        job = None if mask is not None else wire(_LIST_ITEMS, _object_tag(rep), as_struct=as_struct)
        return ListEncoding(head, items, LIST_SLICE, job)

    async def _fleet_list(
        self, request: Any, credential: Credential, timeout: float | None
    ) -> bytes:
        """A fleet ``List``: every named cluster's list (or error) at once, in the order
        named.  Each cluster stops at the call's deadline less a margin, so a slow cluster
        is its own ``DEADLINE_EXCEEDED`` and the others' lists still go out."""
        assert self.fleet is not None
        encoding = self._list_encoding(request.representation, self._mask(request))
        within = None if timeout is None else timeout - min(timeout * 0.1, 1.0)

        async def one(name: str, cluster: Cluster) -> bytes:
            op = self._member("list", request, cluster)
            call = core_call(op, request, namespace=request.namespace, body=dict)
            adapter = cluster.adapter
            try:
                async with asyncio.timeout(within):
                    return await adapter.large_lists.answer(
                        lambda gzipped: list_body(
                            adapter,
                            op,
                            call,
                            credential=credential,
                            timeout=within,
                            gzipped=gzipped,
                        ),
                        encoding,
                    )
            except TimeoutError:
                raise errors.Timeout(
                    f'cluster "{name}" did not answer within the call\'s deadline'
                ) from None

        parts: list[bytes] = []
        fleet = self.fleet.fleet
        selection = await select(fleet, self.fleet.visibility.view(credential), request.clusters)
        for name, result in await each_cluster(fleet, selection, one):
            member = length_prefixed(_MEMBER_CLUSTER, name.encode())
            if isinstance(result, bytes):
                head = member + _MEMBER_LIST + varint(len(result))
                parts += (_LIST_CLUSTERS, varint(len(head) + len(result)), head, result)
            else:
                member += length_prefixed(_MEMBER_ERROR, _status_bytes(result))
                parts.append(length_prefixed(_LIST_CLUSTERS, member))
        return b"".join(parts)

    def stream(
        self, method: str, op: Operation, request: Any, credential: Credential
    ) -> AsyncGenerator[bytes, None]:
        if method == "WatchView":
            return self._live_view(op, request, credential)
        mask = self._mask(request)
        rep = request.representation

        def encode(event: HubEvent) -> bytes:
            obj = event.object
            if mask is not None and event.type not in ("BOOKMARK", "RESYNC"):
                obj = masks.project(obj, mask, loose=True)
            head = varint(resource_pb2.ResourceWatchEvent.TYPE_FIELD_NUMBER << 3) + varint(
                _EVENT_TYPES[event.type]
            )
            if event.resource_version:
                head += length_prefixed(
                    field_tag(resource_pb2.ResourceWatchEvent.RESOURCE_VERSION_FIELD_NUMBER),
                    event.resource_version.encode(),
                )
            return head + length_prefixed(_EVENT_OBJECT, object_bytes(obj, rep))

        paths = tuple(request.read_mask.paths) if mask is not None else None
        # Not a typed service's key (those are a mask's paths or None).
        key = (SERVICE.full_name, rep == STRUCT, paths)

        def digest_of(obj: JSON) -> Any:
            return digest(
                deepjson.dumps(masks.project(obj, mask, loose=True) if mask is not None else obj)
            )

        if request.clusters:
            return self._fleet_watch(request, credential, key, encode, digest_of)
        return watch_stream(
            self.adapter,
            self.watches,
            op,
            request,
            namespace=request.namespace,
            credential=credential,
            key=key,
            encode=encode,
            digest_of=digest_of,
            opened=self.opened,
        )

    async def _live_view(
        self, op: Operation, request: Any, credential: Credential
    ) -> AsyncGenerator[bytes, None]:
        """A live view (``WatchView``): a subscriber of the core's live view of the request's
        view (:mod:`gateway.core.views.live`: one evaluation per view and batch of changes
        for every subscriber, GraphQL's and gRPC's alike, coalesced to one per interval,
        the subscriber budget's lease, the access rechecks, a slow reader ended alone).

        Each update is a ``ResourceView``, encoded once per page and encoding (read mask,
        representation, counts, notify) for every subscriber that asks for the same; an
        update whose message (short of its ``resource_version``) is the one this caller
        was sent last is not sent (a change of a field its read mask leaves out).  A drain
        ends the call ``UNAVAILABLE`` with the version of the last page sent (``ErrorInfo``
        metadata ``resourceVersion``), as a ``Watch``'s."""
        view = request.view
        if len(view.count_by) > MAX_COUNT_GROUPS:
            raise errors.InvalidView(f"`count_by` has more than {MAX_COUNT_GROUPS} fields")
        if view.clusters:
            async for data in self._fleet_live_view(request, credential):
                yield data
            return
        if self.views is None:
            raise errors.Unavailable("views are not served by this endpoint")
        live = LiveViews.of(self.views)
        interval = interval_of(
            request.interval_ms if request.HasField("interval_ms") else None, live.interval
        )
        spec, groups = await _view_spec(self.catalog, op.resource, view, after=view.after or None)
        notify = request.notify
        sub = await live.subscribe(
            spec, credential, interval=interval, notify=notify, every_change=bool(groups)
        )
        writer = self._objects(view)
        key = ("WatchView", writer.mask_key, writer.rep == STRUCT, tuple(view.count_by), notify)
        views = self.views

        async def encode(update: LivePage) -> tuple[bytes, bytes]:
            page = update.page
            counts = await _counts_of(
                views, update.spec, page, credential, count_by=view.count_by, groups=groups
            )
            head = resource_pb2.ResourceView(
                page_info=resource_pb2.ViewPageInfo(
                    has_next_page=page.has_next,
                    has_previous_page=page.has_previous,
                    start_cursor=page.start_cursor or "",
                    end_cursor=page.end_cursor or "",
                ),
                total=page.total,
                counts=counts,
            )
            parts = [head.SerializeToString()]
            if not notify:
                for cursor, written in zip(page.cursors, writer.page(page.contents), strict=True):
                    parts.append(_edge(cursor, written, b""))
            shown = b"".join(parts)
            # the version last (a field's order on the wire is free): what is shown is
            # the message short of it
            return shown, shown + length_prefixed(_VIEW_VERSION, page.resource_version.encode())

        def encoded(update: LivePage) -> asyncio.Future[tuple[bytes, bytes]]:
            return asyncio.ensure_future(encode(update))

        async for data in self._live_updates(sub, key, encoded, notify):
            yield data

    async def _live_updates(
        self,
        sub: LiveSubscription | FleetLiveSubscription,
        key: Any,
        encoded: Callable[[Any], asyncio.Future[tuple[bytes, bytes]]],
        notify: bool,
    ) -> AsyncGenerator[bytes, None]:
        """A live view's updates for one caller (a cluster's or a fleet's): each page's
        message encoded once per ``key`` for all its callers, sent when what it shows
        differs from what this caller was sent last; the stream is held open (drained with
        the gateway) and its subscription closed at the end."""
        end = sub.fail
        try:
            self.opened.hold(end)
            while True:
                update = await sub.next()
                if update is None:
                    return
                shown, data = await asyncio.shield(update.encoded(key, encoded))
                if not notify and sub.unchanged(shown):
                    continue  # nothing this caller is sent changed
                yield data
        except errors.Draining:
            # resumable from the last page this caller read, as a Watch is (a fleet's
            # has no one version: None)
            raise errors.Draining(resource_version=sub.resume) from None
        finally:
            self.opened.release(end)
            sub.close()

    async def _fleet_live_view(
        self, request: Any, credential: Credential
    ) -> AsyncGenerator[bytes, None]:
        """A live view merged across ``view.clusters`` (:mod:`gateway.core.views.livefleet`:
        one live fleet view per merged view for all its subscribers, GraphQL's and gRPC's,
        each cluster's own live view shared further).  Each update is the ``ResourceView``
        ``View`` answers with ``clusters`` (a cluster that refuses or fails is its own
        ``ClusterView.error``, the call goes on), sent when it differs, short of the
        clusters' ``resource_version``, from the one this caller was sent last."""
        assert self.fleet is not None  # admitted: a fleet call needs a fleet
        view = request.view
        fleet = self.fleet.fleet
        # the view read by the catalog of the cluster the call is addressed to, as
        # /fleet/graphql reads it by the default cluster's schema
        r = self.catalog.current.resource(view.group, view.version, view.resource)
        spec, groups = await _view_spec(self.catalog, r, view, after=None)
        positions = decode_fleet_cursor(spec.sort, view.after) if view.after else {}
        selection = await select(fleet, self.fleet.visibility.view(credential), view.clusters)
        unserved = frozenset(selection.missing)
        members: list[FleetMember] = []
        for name in selection.names:
            if name in unserved:
                members.append(FleetMember(name, None, selection.refusal(name)))
                continue
            try:
                cluster = fleet.get(name)
                self._member("list", view, cluster)  # its own catalog serves the kind
                if cluster.views is None:
                    raise errors.Unavailable("views are not served by this cluster")
                members.append(FleetMember(name, LiveViews.of(cluster.views)))
            except errors.GatewayError as exc:
                exc.cluster = name
                members.append(FleetMember(name, None, exc))
        default = next((m.live.interval for m in members if m.live is not None), 0.25)
        interval = interval_of(
            request.interval_ms if request.HasField("interval_ms") else None, default
        )
        notify = request.notify
        sub = await FleetLiveViews.of(fleet).subscribe(
            spec,
            members,
            positions,
            credential,
            interval=interval,
            notify=notify,
            every_change=bool(groups),
        )
        writer = self._objects(view)
        key = ("WatchView", writer.mask_key, writer.rep == STRUCT, tuple(view.count_by), notify)

        async def encode(update: FleetLivePage) -> tuple[bytes, bytes]:
            merged = update.merged
            counted: list[tuple[ClusterLive, list[Any]]] = []
            for part in update.parts:
                if part.page is None:
                    continue
                live_views = fleet.get(part.cluster).views
                assert live_views is not None
                counts = await _counts_of(
                    live_views,
                    part.page.spec,
                    part.page.page,
                    credential,
                    count_by=view.count_by,
                    groups=groups,
                )
                counted.append((part, counts))
            head = resource_pb2.ResourceView(
                page_info=resource_pb2.ViewPageInfo(
                    has_next_page=merged.has_next,
                    has_previous_page=merged.has_previous,
                    start_cursor=merged.start_cursor or "",
                    end_cursor=merged.end_cursor or "",
                ),
                total=merged.total,
                counts=_summed([c for _, c in counted], view.count_by) if groups else [],
            )
            versions = resource_pb2.ResourceView()
            by_name = {part.cluster: counts for part, counts in counted}
            for part in update.parts:
                if part.page is not None:
                    page = part.page.page
                    head.clusters.add(
                        cluster=part.cluster, total=page.total, counts=by_name[part.cluster]
                    )
                    versions.clusters.add(resource_version=page.resource_version)
                else:
                    assert part.error is not None
                    error = resource_pb2.ClusterStatus.FromString(_status_bytes(part.error))
                    head.clusters.add(cluster=part.cluster, error=error)
                    versions.clusters.add()
            parts = [head.SerializeToString()]
            if not notify:
                tags: dict[str, bytes] = {}
                for item in merged.items:
                    tag = tags.get(item.cluster)
                    if tag is None:
                        tag = length_prefixed(_EDGE_CLUSTER, item.cluster.encode())
                        tags[item.cluster] = tag
                    parts.append(_edge(item.cursor, writer.item(item), tag))
            shown = b"".join(parts)
            # each cluster's version (it moves with every change anywhere in the cluster)
            # written apart: what is shown is the message short of them
            with_versions = head.__class__()
            with_versions.CopyFrom(head)
            for entry, version in zip(with_versions.clusters, versions.clusters, strict=True):
                entry.resource_version = version.resource_version
            data = with_versions.SerializeToString() + shown[len(parts[0]) :]
            return shown, data

        def encoded(update: FleetLivePage) -> asyncio.Future[tuple[bytes, bytes]]:
            return asyncio.ensure_future(encode(update))

        async for data in self._live_updates(sub, key, encoded, notify):
            yield data

    async def _fleet_watch(
        self,
        request: Any,
        credential: Credential,
        key: Any,
        encode: Callable[[HubEvent], bytes],
        digest_of: Callable[[JSON], Any],
    ) -> AsyncGenerator[bytes, None]:
        """A fleet ``Watch``: every named cluster's watch, each from its own resume point,
        merged; each event is the cluster's own encoding (shared with that cluster's other
        subscribers) plus its ``cluster``."""
        assert self.fleet is not None
        fleet = self.fleet.fleet
        points = dict(request.resume_from)

        async def open_one(name: str, cluster: Cluster, point: str | None) -> WatchSubscription:
            op = self._member("watch", request, cluster)
            call = watch_call(request, namespace=request.namespace, resource_version=point)
            sub = await open_stream(
                cluster.adapter, cluster.watches, op, call, credential=credential
            )
            assert isinstance(sub, WatchSubscription)
            return sub

        deadline = watch_deadline(request)
        view = self.fleet.visibility.view(credential)
        selection = await select(fleet, view, request.clusters)
        stream = await open_fleet_stream(fleet, selection, open_one, view, points)
        self.fleet.add(stream)
        tags: dict[str, bytes] = {}

        def tag(name: str) -> bytes:
            found = tags.get(name)
            if found is None:
                found = tags[name] = length_prefixed(_EVENT_CLUSTER, name.encode())
            return found

        def message(event: FleetEvent) -> bytes:
            if event.event is not None:
                own: bytes = event.event.encoded(key, encode)
                return own + tag(event.cluster)
            assert event.error is not None
            if isinstance(event.error, errors.Draining):
                # the gateway is going: the whole call ends, resumable in every cluster
                raise FleetDraining(stream.resume)
            return tag(event.cluster) + length_prefixed(_EVENT_ERROR, _status_bytes(event.error))

        try:
            async for data in pump(stream, deadline, key, encode, digest_of, message=message):
                yield data
        finally:
            stream.close()


@dataclasses.dataclass(frozen=True, slots=True)
class _ViewAnswer:
    """One cluster's answer to a ``View``: its spec, its page, its counts (as messages)."""

    spec: ViewSpec
    page: ViewPage
    counts: list[Any]


async def _one_view(
    views: Views | None,
    catalog: CatalogHolder,
    r: Resource,
    request: Any,
    credential: Credential,
    *,
    after: str | None,
) -> _ViewAnswer:
    """A page of ``request``'s view of one cluster, after ``after``, and its counts."""
    if views is None:
        raise errors.Unavailable("views are not served by this endpoint")
    spec, groups = await _view_spec(catalog, r, request, after=after)
    page = await views.page(spec, credential)
    counts = await _counts_of(
        views, spec, page, credential, count_by=request.count_by, groups=groups
    )
    return _ViewAnswer(spec, page, counts)


async def _view_spec(
    catalog: CatalogHolder, r: Resource, request: Any, *, after: str | None
) -> tuple[ViewSpec, list[Any]]:
    """The spec of ``request``'s view of ``r`` (validated by the core) and the field paths
    of its ``count_by``."""
    kind, lookup = await kind_model(catalog.current, r)
    spec = view_spec(
        r,
        kind,
        lookup,
        namespace=request.namespace or None,
        filter=_ViewFilter(request.filter) if request.HasField("filter") else None,
        search=request.search or None,
        sort=_view_sort(request.sort),
        first=request.first if request.HasField("first") else None,
        after=after,
        min_resource_version=request.min_resource_version or None,
    )
    return spec, [resolve_path(kind, by, lookup) for by in request.count_by]


async def _counts_of(
    views: Views,
    spec: ViewSpec,
    page: ViewPage,
    credential: Credential,
    *,
    count_by: Sequence[str],
    groups: Sequence[Any],
) -> list[Any]:
    """The ``ViewCounts`` of each of ``count_by`` (its path in ``groups``), at the page's
    version or later."""
    counts: list[Any] = []
    if groups:
        # the counts of the page's own version (as GraphQL's `counts`)
        at = dataclasses.replace(
            spec,
            min_resource_version=spec.min_resource_version
            or (page.resource_version if page.resource_version.isdigit() else None),
        )
        for text, by in zip(count_by, groups, strict=True):
            _total, _version, found = await views.counts(at, by, credential)
            counts.append(
                resource_pb2.ViewCounts(
                    group_by=text,
                    counts=[
                        resource_pb2.ViewCount(value=c.value, count=c.count)
                        if c.value is not None
                        else resource_pb2.ViewCount(count=c.count)
                        for c in found
                    ],
                )
            )
    return counts


def _summed(per_cluster: Sequence[Sequence[Any]], count_by: Sequence[str]) -> list[Any]:
    """Every cluster's counts of each ``count_by`` added up, most frequent first."""
    out = []
    for i, text in enumerate(count_by):
        total: dict[str | None, int] = {}
        for counts in per_cluster:
            for c in counts[i].counts:
                value = c.value if c.HasField("value") else None
                total[value] = total.get(value, 0) + c.count
        ordered = sorted(total.items(), key=lambda vc: (-vc[1], vc[0] is None, vc[0] or ""))
        out.append(
            resource_pb2.ViewCounts(
                group_by=text,
                counts=[
                    resource_pb2.ViewCount(value=v, count=n)
                    if v is not None
                    else resource_pb2.ViewCount(count=n)
                    for v, n in ordered
                ],
            )
        )
    return out


def _edge(cursor: str, written: bytes, tag: bytes) -> bytes:
    """A ``ViewEdge`` (with its ``cluster`` tag, if any) as a ``ResourceView.edges`` entry:
    ``written`` is its ``ResourceObject`` (:class:`_Objects`)."""
    edge = (
        length_prefixed(_EDGE_CURSOR, cursor.encode())
        + length_prefixed(_EDGE_OBJECT, written)
        + tag
    )
    return length_prefixed(_VIEW_EDGES, edge)


#: What a view's object is remembered as in the codec's memo of wire bytes, beside the
#: typed lists' objects (whose message names have no dot), by representation.
_MEMO_JSON: Final = "ResourceObject.json"
_MEMO_STRUCT: Final = "ResourceObject.struct"
#: An object's members, each as its JSON text; an array's elements (``msgspec`` delimits
#: them, building no value).
_RAW_MEMBERS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAW_ELEMENTS: Final = msgspec.json.Decoder(list[msgspec.Raw])
#: Brackets in an object's JSON past which it is not read in parts: well under the nesting
#: past which a whole decode (:func:`gateway.core.support.deepjson.loads`) differs from
#: ``orjson``'s, which reads each part.
_RAW_BRACKETS: Final = 512
_OPEN_OBJECT: Final = ord("{")
_OPEN_ARRAY: Final = ord("[")
_NULL: Final = b"null"


class _Objects:
    """A view's objects written as ``ResourceObject``s for one read mask and representation,
    from each object's stored JSON (what its page holds: :class:`~gateway.core.views.
    evaluate.Contents`): the bytes :func:`object_bytes` writes of :func:`masks.project
    <gateway.grpc.mask.project>` of the object decoded whole, without that decode.

    Each object's writing is looked up in the codec's memo of wire bytes
    (:class:`~gateway.grpc.codec.WireMemo`) by its exact JSON (and the read mask's paths and
    the representation): an object shown by an earlier page unchanged costs a hash of its
    JSON (its ``bytes`` keep the hash), a changed one (other JSON) is written anew.  One not
    there is read in parts (:func:`_raw_project`: only what the read mask selects decoded;
    the rest delimited, not built), or decoded whole where its page decoded it already or
    where the parts may not decode as the whole does (deep JSON; a part ``msgspec``
    refuses)."""

    __slots__ = ("mask", "mask_key", "memo", "rep", "tag")

    def __init__(self, memo: WireMemo, mask: masks.Tree | None, mask_key: Any, rep: int) -> None:
        self.memo, self.mask, self.mask_key, self.rep = memo, mask, mask_key, rep
        self.tag = _MEMO_STRUCT if rep == STRUCT else _MEMO_JSON

    def page(self, contents: ViewContents) -> list[bytes]:
        """Every object of a page, in order."""
        objects = contents.objects if contents.decoded else None
        return [
            self.one(raw, None if objects is None else objects[i])
            for i, raw in enumerate(contents.raws)
        ]

    def item(self, item: MergedItem) -> bytes:
        """An object of a merged page."""
        contents = item.contents
        return self.one(item.raw, contents.objects[item.at] if contents.decoded else None)

    def one(self, raw: bytes, obj: JSON | None) -> bytes:
        """The object whose stored JSON is ``raw`` (``obj``: decoded already, if it is)."""
        key = (self.tag, self.mask_key, raw)
        memo = self.memo
        found = memo.get(key)
        if found is None:
            found = self._write(raw, obj)
            memo.put(key, found)
        return found

    def _write(self, raw: bytes, obj: JSON | None) -> bytes:
        mask = self.mask
        if mask is None:
            return object_bytes(deepjson.loads(raw) if obj is None else obj, self.rep)
        if obj is None and raw.count(b"{") + raw.count(b"[") < _RAW_BRACKETS:
            try:
                return object_bytes(_raw_project(raw, mask), self.rep)
            except (msgspec.DecodeError, orjson.JSONDecodeError, RecursionError):
                pass  # decoded whole, as the page would be: its error, if any, is that one
        if obj is None:
            obj = deepjson.loads(raw)
        return object_bytes(masks.project(obj, mask, loose=True), self.rep)


def _raw_project(raw: bytes | memoryview, tree: masks.Tree) -> JSON:
    """``masks.project(orjson.loads(raw), tree, loose=True)``, decoding only what ``tree``
    selects: each object on the way delimited into its members' JSON, each selected leaf
    decoded by ``orjson`` (the same values as in the whole decode: the same parser, the
    same text).

    Raises:
        msgspec.DecodeError: ``raw`` is not a JSON object.
        orjson.JSONDecodeError: a selected part is not JSON.
    """
    members = _RAW_MEMBERS.decode(raw)
    out: JSON = {}
    for selected, sub in tree.items():
        key = selected
        text = _present(members.get(key))
        if text is None:
            if "_" not in key:
                continue
            key = mask_camel(key)
            text = _present(members.get(key))
            if text is None:
                continue
        if sub is None:
            out[key] = orjson.loads(text)
        elif text[0] == _OPEN_OBJECT:
            out[key] = _raw_project(text, sub)
        elif text[0] == _OPEN_ARRAY:
            elements = [memoryview(x) for x in _RAW_ELEMENTS.decode(text)]
            out[key] = [_raw_project(x, sub) for x in elements if x[0] == _OPEN_OBJECT]
    return out


def _present(found: msgspec.Raw | None) -> memoryview | None:
    """A member's JSON, ``None`` where it is absent or ``null`` (as ``obj.get(key)``)."""
    if found is None:
        return None
    text = memoryview(found)
    return None if len(text) == len(_NULL) and text.tobytes() == _NULL else text


_VIEW_KEYS: Final = (
    ("and", "all_of"),
    ("or", "any_of"),
    ("not", "negate"),
    ("field", "field"),
    ("op", "op"),
    ("value", "value"),
    ("values", "values"),
    ("labelSelector", "label_selector"),
    ("fieldSelector", "field_selector"),
)
_VIEW_OPS: Final[Mapping[int, str]] = MappingProxyType(
    {
        v.number: "".join(
            w.capitalize() if i else w.lower()
            for i, w in enumerate(v.name.removeprefix("VIEW_OP_").split("_"))
        )
        for v in resource_pb2.ViewOp.DESCRIPTOR.values
        if v.number
    }
)


class _ViewFilter(Mapping[str, Any]):
    """A ``ViewFilter`` message as the plain mapping the core reads (GraphQL's names),
    converted as it reads it, so a huge or deep filter is refused at the core's caps after
    a short walk.  Proto3 has no "unset" for most fields: an empty string, an empty list
    and ``VIEW_OP_UNSPECIFIED`` are absent (so IN with no values is refused, as GraphQL refuses
    IN without ``values``)."""

    __slots__ = ("keys_", "message")

    def __init__(self, message: Any) -> None:
        self.message = message
        self.keys_ = [g for g, _ in _VIEW_KEYS if self._has(g)]

    def _has(self, key: str) -> bool:
        m = self.message
        if key == "not":
            return bool(m.HasField("negate"))
        if key == "value":
            return bool(m.HasField("value"))
        if key == "op":
            return bool(m.op)
        if key == "values":
            return len(m.values) > 0
        return bool(len(getattr(m, dict(_VIEW_KEYS)[key])))

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys_:
            raise KeyError(key)
        m = self.message
        if key in ("and", "or"):
            return _ViewFilters(getattr(m, dict(_VIEW_KEYS)[key]))
        if key == "not":
            return _ViewFilter(m.negate)
        if key == "op":
            return _VIEW_OPS.get(m.op, str(m.op))
        if key == "values":
            values = m.values
            # the core's cap is smaller: refused there, without copying them all
            return (
                list(values[: MAX_VIEW_VALUES + 1])
                if len(values) > MAX_VIEW_VALUES
                else list(values)
            )
        return getattr(m, dict(_VIEW_KEYS)[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_)

    def __len__(self) -> int:
        return len(self.keys_)


class _ViewFilters(Sequence[Any]):
    __slots__ = ("items",)

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: Any) -> Any:
        return _ViewFilter(self.items[i])


def _view_sort(keys: Sequence[Any]) -> list[dict[str, str]] | None:
    if not keys:
        return None
    # the core refuses more than its cap: a few past it are enough to say so
    return [
        {"field": k.field, "order": "desc" if k.order == resource_pb2.VIEW_ORDER_DESC else "asc"}
        for k in keys[: MAX_VIEW_SORT_KEYS + 1]
    ]


def _watched_view(request: Any) -> Any:
    """The view a ``WatchViewRequest`` keeps live (with ``view.clusters``: merged across
    them, :meth:`ResourceServiceServicer._fleet_live_view`)."""
    return request.view


def _fleet_call(request: Any) -> bool:
    """Whether a request names clusters (a fleet List or Watch)."""
    return bool(getattr(request, "clusters", None))


def _check_fleet_request(request: Any) -> None:
    """Refuse what a fleet call cannot mean (before any cluster is asked).

    Raises:
        InvalidParameter: an empty cluster name; a ``continue`` token (one cluster's list
            only); a ``resource_version`` to watch from (each cluster has its own:
            ``resume_from``).
    """
    if any(not name for name in request.clusters):
        raise invalid("clusters", 'a cluster name is empty (name clusters, or "*" for all)')
    if getattr(request, "continue", ""):
        raise invalid(
            "continue",
            "a continue token is one cluster's: page on with that cluster alone "
            "(x-kube-cluster, no clusters)",
        )
    if isinstance(request, resource_pb2.WatchResourcesRequest):
        if request.resource_version:
            raise invalid(
                "resource_version",
                "with clusters, each cluster resumes from its own version: use resume_from",
            )
        if any(not k or not v for k, v in request.resume_from.items()):
            raise invalid("resume_from", "resume_from maps cluster names to resourceVersions")


def _status_bytes(error: errors.GatewayError) -> bytes:
    """A cluster's error as ``ClusterStatus`` bytes (the wire form of ``google.rpc.Status``)."""
    return bytes(status_message(error).SerializeToString())
