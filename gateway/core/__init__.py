"""The core's front door: everything the front ends (and the README's and docs' examples) use.

The core is layered in subpackages, bottom up: ``support`` (a coalescing cache, wake-ups, JSON
at any depth), ``process`` (metrics, tracing, the drain, the C heap), ``model`` (the registry,
the schema, OpenAPI, relations, options), ``lists`` (large lists: slices, projections, the
protobuf wire, worker processes), ``upstream`` (configuration, credentials, the httpx clients,
budgets, the adapter, identity), ``watch`` (watchers, the hub, changed-fields filters, access
reviews, log follows), ``catalog`` (discovery, OpenAPI documents, reloads), ``views``
(sorted, filtered, counted pages of whole lists, from caches the hub feeds), ``fleet``
(clusters, the fleet, fan-out, merged watches, visibility) and ``calls`` (``perform`` and
``open_stream``, the two entry points of every operation).  Each imports only from below it
(``tests/gateway/test_layers.py``).  What is not named here is the core's own business.
"""

from __future__ import annotations

from gateway.core import errors
from gateway.core.calls.operations import (
    Action,
    Call,
    Operation,
    get_body,
    list_body,
    operations,
    perform,
)
from gateway.core.calls.streaming import LogStream, ReadAhead, Stream, open_stream
from gateway.core.catalog import openapi_documents
from gateway.core.catalog.catalog import Catalog, CatalogHolder, GroupVersionKey
from gateway.core.catalog.discovery import ResourcePatterns
from gateway.core.errors import GatewayError, Internal, Unauthorized, UnknownResource
from gateway.core.fleet.cluster import DEFAULT, Cluster
from gateway.core.fleet.fanout import (
    FleetStreams,
    Selection,
    check_listed,
    check_resume,
    each_cluster,
    open_fleet_stream,
    select,
)
from gateway.core.fleet.fleet import Fleet
from gateway.core.fleet.visibility import View, Visibility
from gateway.core.fleet.watches import FleetEvent, FleetStream, decode_resume
from gateway.core.lists.body import Undecoded
from gateway.core.lists.jobs import Job, split_typed, typed, wire
from gateway.core.lists.large import LARGE_LIST, LargeLists, ListEncoding, encode_now, is_large
from gateway.core.lists.projections import (
    ALWAYS,
    CHECKS,
    CONST,
    COPY,
    LEAF,
    PASSTHROUGH,
    READ,
    SELF,
    Fallback,
    Project,
    Spec,
    Step,
    dict_resolver,
    generate,
    identity,
    leaf_of,
    list_of,
    nonnull_of,
    then,
)
from gateway.core.lists.protowire import (
    TooDeep,
    encode_struct,
    field_tag,
    length_prefixed,
    varint,
)
from gateway.core.lists.typedwire import (
    IOS,
    JSON_OP,
    LIST_MSG,
    MAP_MSG,
    MSG,
    Design,
    PlanEntry,
    Shape,
    Writer,
    files_of,
)
from gateway.core.lists.typedwire import camel as mask_camel
from gateway.core.lists.typedwire import project as mask_project
from gateway.core.model import openapi, schema
from gateway.core.model.options import (
    DeleteOptions,
    ListOptions,
    LogOptions,
    PatchOptions,
    PatchType,
    Preconditions,
    WriteOptions,
)
from gateway.core.model.registry import POD, REGISTRY, Registry, Resource
from gateway.core.model.relations import RELATIONS, Relation
from gateway.core.model.schema import (
    ListOf,
    MapOf,
    Model,
    ObjectType,
    Ref,
    Scalar,
    ScalarKind,
    SchemaError,
    TypeRef,
    seed_model,
)
from gateway.core.model.values import JSON
from gateway.core.process import heap, tracing
from gateway.core.process.collector import HOLD as COLLECTOR_HOLD
from gateway.core.process.drain import Drain
from gateway.core.process.metrics import UPSTREAM_SECONDS, OperationTimer
from gateway.core.support import deepjson
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.budget import scope_of
from gateway.core.upstream.config import ConfigError
from gateway.core.upstream.credentials import (
    ANONYMOUS,
    Credential,
    credential_of_authorization,
    credential_of_token,
)
from gateway.core.upstream.identity import refuse_impersonation
from gateway.core.views.cache import Views
from gateway.core.views.evaluate import Contents as ViewContents
from gateway.core.views.evaluate import Count as ViewCount
from gateway.core.views.evaluate import Page as ViewPage
from gateway.core.views.kinds import kind_model
from gateway.core.views.live import LivePage, LiveSubscription, LiveViews, interval_of
from gateway.core.views.livefleet import (
    ClusterLive,
    FleetLivePage,
    FleetLiveSubscription,
    FleetLiveViews,
    FleetMember,
)
from gateway.core.views.merge import MergedItem, MergedPage, decode_fleet_cursor, merged_contents
from gateway.core.views.merge import merge_off_loop as merge_views
from gateway.core.views.spec import MAX_COUNT_GROUPS, ViewSpec, resolve_path, view_spec
from gateway.core.views.spec import MAX_SORT_KEYS as MAX_VIEW_SORT_KEYS
from gateway.core.views.spec import MAX_VALUES as MAX_VIEW_VALUES
from gateway.core.watch.changed import Digest, StreamChanges, digest
from gateway.core.watch.hub import HubEvent, WatchHub, WatchSubscription
from gateway.core.watch.logfollow import RawLine
from gateway.core.watch.watcher import Watcher, WatchEvent

__all__ = [
    "ALWAYS",
    "ANONYMOUS",
    "CHECKS",
    "COLLECTOR_HOLD",
    "CONST",
    "COPY",
    "DEFAULT",
    "IOS",
    "JSON",
    "JSON_OP",
    "LARGE_LIST",
    "LEAF",
    "LIST_MSG",
    "MAP_MSG",
    "MAX_COUNT_GROUPS",
    "MAX_VIEW_SORT_KEYS",
    "MAX_VIEW_VALUES",
    "MSG",
    "PASSTHROUGH",
    "POD",
    "READ",
    "REGISTRY",
    "RELATIONS",
    "SELF",
    "UPSTREAM_SECONDS",
    "Action",
    "Call",
    "Catalog",
    "CatalogHolder",
    "Cluster",
    "ClusterLive",
    "ConfigError",
    "Credential",
    "DeleteOptions",
    "Design",
    "Digest",
    "Drain",
    "Fallback",
    "Fleet",
    "FleetEvent",
    "FleetLivePage",
    "FleetLiveSubscription",
    "FleetLiveViews",
    "FleetMember",
    "FleetStream",
    "FleetStreams",
    "GatewayError",
    "GroupVersionKey",
    "HubEvent",
    "Internal",
    "Job",
    "KubeAdapter",
    "LargeLists",
    "ListEncoding",
    "ListOf",
    "ListOptions",
    "LivePage",
    "LiveSubscription",
    "LiveViews",
    "LogOptions",
    "LogStream",
    "MapOf",
    "MergedItem",
    "MergedPage",
    "Model",
    "ObjectType",
    "Operation",
    "OperationTimer",
    "PatchOptions",
    "PatchType",
    "PlanEntry",
    "Preconditions",
    "Project",
    "RawLine",
    "ReadAhead",
    "Ref",
    "Registry",
    "Relation",
    "Resource",
    "ResourcePatterns",
    "Scalar",
    "ScalarKind",
    "SchemaError",
    "Selection",
    "Shape",
    "Spec",
    "Step",
    "Stream",
    "StreamChanges",
    "TooDeep",
    "TypeRef",
    "Unauthorized",
    "Undecoded",
    "UnknownResource",
    "View",
    "ViewContents",
    "ViewCount",
    "ViewPage",
    "ViewSpec",
    "Views",
    "Visibility",
    "WatchEvent",
    "WatchHub",
    "WatchSubscription",
    "Watcher",
    "WriteOptions",
    "Writer",
    "check_listed",
    "check_resume",
    "credential_of_authorization",
    "credential_of_token",
    "decode_fleet_cursor",
    "decode_resume",
    "deepjson",
    "dict_resolver",
    "digest",
    "each_cluster",
    "encode_now",
    "encode_struct",
    "errors",
    "field_tag",
    "files_of",
    "generate",
    "get_body",
    "heap",
    "identity",
    "interval_of",
    "is_large",
    "kind_model",
    "leaf_of",
    "length_prefixed",
    "list_body",
    "list_of",
    "mask_camel",
    "mask_project",
    "merge_views",
    "merged_contents",
    "nonnull_of",
    "open_fleet_stream",
    "open_stream",
    "openapi",
    "openapi_documents",
    "operations",
    "perform",
    "refuse_impersonation",
    "resolve_path",
    "schema",
    "scope_of",
    "seed_model",
    "select",
    "split_typed",
    "then",
    "tracing",
    "typed",
    "varint",
    "view_spec",
    "wire",
]
