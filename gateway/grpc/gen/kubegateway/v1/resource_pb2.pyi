from google.protobuf import any_pb2 as _any_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from gateway.grpc.gen.kubegateway.v1 import common_pb2 as _common_pb2
from gateway.grpc.gen.kubegateway.v1 import meta_pb2 as _meta_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Representation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPRESENTATION_UNSPECIFIED: _ClassVar[Representation]
    REPRESENTATION_JSON: _ClassVar[Representation]
    REPRESENTATION_STRUCT: _ClassVar[Representation]

class ViewOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VIEW_OP_UNSPECIFIED: _ClassVar[ViewOp]
    VIEW_OP_EQ: _ClassVar[ViewOp]
    VIEW_OP_NE: _ClassVar[ViewOp]
    VIEW_OP_IN: _ClassVar[ViewOp]
    VIEW_OP_NOT_IN: _ClassVar[ViewOp]
    VIEW_OP_PREFIX: _ClassVar[ViewOp]
    VIEW_OP_CONTAINS: _ClassVar[ViewOp]
    VIEW_OP_EXISTS: _ClassVar[ViewOp]
    VIEW_OP_LT: _ClassVar[ViewOp]
    VIEW_OP_LTE: _ClassVar[ViewOp]
    VIEW_OP_GT: _ClassVar[ViewOp]
    VIEW_OP_GTE: _ClassVar[ViewOp]

class ViewOrder(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VIEW_ORDER_UNSPECIFIED: _ClassVar[ViewOrder]
    VIEW_ORDER_ASC: _ClassVar[ViewOrder]
    VIEW_ORDER_DESC: _ClassVar[ViewOrder]
REPRESENTATION_UNSPECIFIED: Representation
REPRESENTATION_JSON: Representation
REPRESENTATION_STRUCT: Representation
VIEW_OP_UNSPECIFIED: ViewOp
VIEW_OP_EQ: ViewOp
VIEW_OP_NE: ViewOp
VIEW_OP_IN: ViewOp
VIEW_OP_NOT_IN: ViewOp
VIEW_OP_PREFIX: ViewOp
VIEW_OP_CONTAINS: ViewOp
VIEW_OP_EXISTS: ViewOp
VIEW_OP_LT: ViewOp
VIEW_OP_LTE: ViewOp
VIEW_OP_GT: ViewOp
VIEW_OP_GTE: ViewOp
VIEW_ORDER_UNSPECIFIED: ViewOrder
VIEW_ORDER_ASC: ViewOrder
VIEW_ORDER_DESC: ViewOrder

class ResourceObject(_message.Message):
    __slots__ = ("json", "struct")
    JSON_FIELD_NUMBER: _ClassVar[int]
    STRUCT_FIELD_NUMBER: _ClassVar[int]
    json: bytes
    struct: _struct_pb2.Struct
    def __init__(self, json: _Optional[bytes] = ..., struct: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ResourceList(_message.Message):
    __slots__ = ("api_version", "kind", "metadata", "items", "clusters")
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    api_version: str
    kind: str
    metadata: _meta_pb2.ListMeta
    items: _containers.RepeatedCompositeFieldContainer[ResourceObject]
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterResourceList]
    def __init__(self, api_version: _Optional[str] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ListMeta, _Mapping]] = ..., items: _Optional[_Iterable[_Union[ResourceObject, _Mapping]]] = ..., clusters: _Optional[_Iterable[_Union[ClusterResourceList, _Mapping]]] = ...) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("code", "message", "details")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    details: _containers.RepeatedCompositeFieldContainer[_any_pb2.Any]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., details: _Optional[_Iterable[_Union[_any_pb2.Any, _Mapping]]] = ...) -> None: ...

class ClusterResourceList(_message.Message):
    __slots__ = ("cluster", "list", "error")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    LIST_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    list: ResourceList
    error: ClusterStatus
    def __init__(self, cluster: _Optional[str] = ..., list: _Optional[_Union[ResourceList, _Mapping]] = ..., error: _Optional[_Union[ClusterStatus, _Mapping]] = ...) -> None: ...

class GetResourceRequest(_message.Message):
    __slots__ = ("group", "version", "resource", "namespace", "name", "subresource", "read_mask", "representation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUBRESOURCE_FIELD_NUMBER: _ClassVar[int]
    READ_MASK_FIELD_NUMBER: _ClassVar[int]
    REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    version: str
    resource: str
    namespace: str
    name: str
    subresource: str
    read_mask: _field_mask_pb2.FieldMask
    representation: Representation
    def __init__(self, group: _Optional[str] = ..., version: _Optional[str] = ..., resource: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., subresource: _Optional[str] = ..., read_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., representation: _Optional[_Union[Representation, str]] = ...) -> None: ...

class ListResourcesRequest(_message.Message):
    __slots__ = ("group", "version", "resource", "namespace", "label_selector", "field_selector", "limit", "resource_version", "resource_version_match", "timeout_seconds", "read_mask", "representation", "clusters")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FIELD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_MATCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    READ_MASK_FIELD_NUMBER: _ClassVar[int]
    REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    group: str
    version: str
    resource: str
    namespace: str
    label_selector: str
    field_selector: str
    limit: int
    resource_version: str
    resource_version_match: str
    timeout_seconds: int
    read_mask: _field_mask_pb2.FieldMask
    representation: Representation
    clusters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., version: _Optional[str] = ..., resource: _Optional[str] = ..., namespace: _Optional[str] = ..., label_selector: _Optional[str] = ..., field_selector: _Optional[str] = ..., limit: _Optional[int] = ..., resource_version: _Optional[str] = ..., resource_version_match: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., read_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., representation: _Optional[_Union[Representation, str]] = ..., clusters: _Optional[_Iterable[str]] = ..., **kwargs) -> None: ...

class WatchResourcesRequest(_message.Message):
    __slots__ = ("group", "version", "resource", "namespace", "label_selector", "field_selector", "resource_version", "resource_version_match", "send_initial_events", "allow_watch_bookmarks", "timeout_seconds", "read_mask", "representation", "changed_fields_only", "clusters", "resume_from")
    class ResumeFromEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FIELD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_MATCH_FIELD_NUMBER: _ClassVar[int]
    SEND_INITIAL_EVENTS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_WATCH_BOOKMARKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    READ_MASK_FIELD_NUMBER: _ClassVar[int]
    REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELDS_ONLY_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_FIELD_NUMBER: _ClassVar[int]
    group: str
    version: str
    resource: str
    namespace: str
    label_selector: str
    field_selector: str
    resource_version: str
    resource_version_match: str
    send_initial_events: bool
    allow_watch_bookmarks: bool
    timeout_seconds: int
    read_mask: _field_mask_pb2.FieldMask
    representation: Representation
    changed_fields_only: bool
    clusters: _containers.RepeatedScalarFieldContainer[str]
    resume_from: _containers.ScalarMap[str, str]
    def __init__(self, group: _Optional[str] = ..., version: _Optional[str] = ..., resource: _Optional[str] = ..., namespace: _Optional[str] = ..., label_selector: _Optional[str] = ..., field_selector: _Optional[str] = ..., resource_version: _Optional[str] = ..., resource_version_match: _Optional[str] = ..., send_initial_events: _Optional[bool] = ..., allow_watch_bookmarks: _Optional[bool] = ..., timeout_seconds: _Optional[int] = ..., read_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., representation: _Optional[_Union[Representation, str]] = ..., changed_fields_only: _Optional[bool] = ..., clusters: _Optional[_Iterable[str]] = ..., resume_from: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ResourceWatchEvent(_message.Message):
    __slots__ = ("type", "resource_version", "object", "cluster", "error")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    type: _common_pb2.WatchEvent.Type
    resource_version: str
    object: ResourceObject
    cluster: str
    error: ClusterStatus
    def __init__(self, type: _Optional[_Union[_common_pb2.WatchEvent.Type, str]] = ..., resource_version: _Optional[str] = ..., object: _Optional[_Union[ResourceObject, _Mapping]] = ..., cluster: _Optional[str] = ..., error: _Optional[_Union[ClusterStatus, _Mapping]] = ...) -> None: ...

class CreateResourceRequest(_message.Message):
    __slots__ = ("group", "version", "resource", "namespace", "object", "dry_run", "field_manager", "field_validation", "representation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FIELD_MANAGER_FIELD_NUMBER: _ClassVar[int]
    FIELD_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    version: str
    resource: str
    namespace: str
    object: ResourceObject
    dry_run: bool
    field_manager: str
    field_validation: str
    representation: Representation
    def __init__(self, group: _Optional[str] = ..., version: _Optional[str] = ..., resource: _Optional[str] = ..., namespace: _Optional[str] = ..., object: _Optional[_Union[ResourceObject, _Mapping]] = ..., dry_run: _Optional[bool] = ..., field_manager: _Optional[str] = ..., field_validation: _Optional[str] = ..., representation: _Optional[_Union[Representation, str]] = ...) -> None: ...

class ReplaceResourceRequest(_message.Message):
    __slots__ = ("group", "version", "resource", "namespace", "name", "subresource", "object", "dry_run", "field_manager", "field_validation", "representation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUBRESOURCE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FIELD_MANAGER_FIELD_NUMBER: _ClassVar[int]
    FIELD_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    version: str
    resource: str
    namespace: str
    name: str
    subresource: str
    object: ResourceObject
    dry_run: bool
    field_manager: str
    field_validation: str
    representation: Representation
    def __init__(self, group: _Optional[str] = ..., version: _Optional[str] = ..., resource: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., subresource: _Optional[str] = ..., object: _Optional[_Union[ResourceObject, _Mapping]] = ..., dry_run: _Optional[bool] = ..., field_manager: _Optional[str] = ..., field_validation: _Optional[str] = ..., representation: _Optional[_Union[Representation, str]] = ...) -> None: ...

class PatchResourceRequest(_message.Message):
    __slots__ = ("group", "version", "resource", "namespace", "name", "subresource", "patch_type", "patch", "dry_run", "field_manager", "field_validation", "force", "representation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUBRESOURCE_FIELD_NUMBER: _ClassVar[int]
    PATCH_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FIELD_MANAGER_FIELD_NUMBER: _ClassVar[int]
    FIELD_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    version: str
    resource: str
    namespace: str
    name: str
    subresource: str
    patch_type: _common_pb2.PatchType
    patch: bytes
    dry_run: bool
    field_manager: str
    field_validation: str
    force: bool
    representation: Representation
    def __init__(self, group: _Optional[str] = ..., version: _Optional[str] = ..., resource: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., subresource: _Optional[str] = ..., patch_type: _Optional[_Union[_common_pb2.PatchType, str]] = ..., patch: _Optional[bytes] = ..., dry_run: _Optional[bool] = ..., field_manager: _Optional[str] = ..., field_validation: _Optional[str] = ..., force: _Optional[bool] = ..., representation: _Optional[_Union[Representation, str]] = ...) -> None: ...

class DeleteResourceRequest(_message.Message):
    __slots__ = ("group", "version", "resource", "namespace", "name", "options", "representation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    version: str
    resource: str
    namespace: str
    name: str
    options: _meta_pb2.DeleteOptions
    representation: Representation
    def __init__(self, group: _Optional[str] = ..., version: _Optional[str] = ..., resource: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., options: _Optional[_Union[_meta_pb2.DeleteOptions, _Mapping]] = ..., representation: _Optional[_Union[Representation, str]] = ...) -> None: ...

class DeleteResourceResponse(_message.Message):
    __slots__ = ("object", "status")
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    object: ResourceObject
    status: _meta_pb2.Status
    def __init__(self, object: _Optional[_Union[ResourceObject, _Mapping]] = ..., status: _Optional[_Union[_meta_pb2.Status, _Mapping]] = ...) -> None: ...

class DeleteCollectionResourcesRequest(_message.Message):
    __slots__ = ("group", "version", "resource", "namespace", "label_selector", "field_selector", "limit", "resource_version", "resource_version_match", "timeout_seconds", "options", "representation")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FIELD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_MATCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
    group: str
    version: str
    resource: str
    namespace: str
    label_selector: str
    field_selector: str
    limit: int
    resource_version: str
    resource_version_match: str
    timeout_seconds: int
    options: _meta_pb2.DeleteOptions
    representation: Representation
    def __init__(self, group: _Optional[str] = ..., version: _Optional[str] = ..., resource: _Optional[str] = ..., namespace: _Optional[str] = ..., label_selector: _Optional[str] = ..., field_selector: _Optional[str] = ..., limit: _Optional[int] = ..., resource_version: _Optional[str] = ..., resource_version_match: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., options: _Optional[_Union[_meta_pb2.DeleteOptions, _Mapping]] = ..., representation: _Optional[_Union[Representation, str]] = ..., **kwargs) -> None: ...

class DeleteCollectionResourcesResponse(_message.Message):
    __slots__ = ("list", "status")
    LIST_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    list: ResourceList
    status: _meta_pb2.Status
    def __init__(self, list: _Optional[_Union[ResourceList, _Mapping]] = ..., status: _Optional[_Union[_meta_pb2.Status, _Mapping]] = ...) -> None: ...

class ViewFilter(_message.Message):
    __slots__ = ("all_of", "any_of", "negate", "field", "op", "value", "values", "label_selector", "field_selector")
    ALL_OF_FIELD_NUMBER: _ClassVar[int]
    ANY_OF_FIELD_NUMBER: _ClassVar[int]
    NEGATE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FIELD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    all_of: _containers.RepeatedCompositeFieldContainer[ViewFilter]
    any_of: _containers.RepeatedCompositeFieldContainer[ViewFilter]
    negate: ViewFilter
    field: str
    op: ViewOp
    value: str
    values: _containers.RepeatedScalarFieldContainer[str]
    label_selector: str
    field_selector: str
    def __init__(self, all_of: _Optional[_Iterable[_Union[ViewFilter, _Mapping]]] = ..., any_of: _Optional[_Iterable[_Union[ViewFilter, _Mapping]]] = ..., negate: _Optional[_Union[ViewFilter, _Mapping]] = ..., field: _Optional[str] = ..., op: _Optional[_Union[ViewOp, str]] = ..., value: _Optional[str] = ..., values: _Optional[_Iterable[str]] = ..., label_selector: _Optional[str] = ..., field_selector: _Optional[str] = ...) -> None: ...

class ViewSort(_message.Message):
    __slots__ = ("field", "order")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    field: str
    order: ViewOrder
    def __init__(self, field: _Optional[str] = ..., order: _Optional[_Union[ViewOrder, str]] = ...) -> None: ...

class ViewResourcesRequest(_message.Message):
    __slots__ = ("group", "version", "resource", "namespace", "filter", "search", "sort", "first", "after", "min_resource_version", "count_by", "read_mask", "representation", "clusters")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    SORT_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    MIN_RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    COUNT_BY_FIELD_NUMBER: _ClassVar[int]
    READ_MASK_FIELD_NUMBER: _ClassVar[int]
    REPRESENTATION_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    group: str
    version: str
    resource: str
    namespace: str
    filter: ViewFilter
    search: str
    sort: _containers.RepeatedCompositeFieldContainer[ViewSort]
    first: int
    after: str
    min_resource_version: str
    count_by: _containers.RepeatedScalarFieldContainer[str]
    read_mask: _field_mask_pb2.FieldMask
    representation: Representation
    clusters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., version: _Optional[str] = ..., resource: _Optional[str] = ..., namespace: _Optional[str] = ..., filter: _Optional[_Union[ViewFilter, _Mapping]] = ..., search: _Optional[str] = ..., sort: _Optional[_Iterable[_Union[ViewSort, _Mapping]]] = ..., first: _Optional[int] = ..., after: _Optional[str] = ..., min_resource_version: _Optional[str] = ..., count_by: _Optional[_Iterable[str]] = ..., read_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., representation: _Optional[_Union[Representation, str]] = ..., clusters: _Optional[_Iterable[str]] = ...) -> None: ...

class WatchViewRequest(_message.Message):
    __slots__ = ("view", "interval_ms", "notify")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_FIELD_NUMBER: _ClassVar[int]
    view: ViewResourcesRequest
    interval_ms: int
    notify: bool
    def __init__(self, view: _Optional[_Union[ViewResourcesRequest, _Mapping]] = ..., interval_ms: _Optional[int] = ..., notify: _Optional[bool] = ...) -> None: ...

class ViewEdge(_message.Message):
    __slots__ = ("cursor", "object", "cluster")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    object: ResourceObject
    cluster: str
    def __init__(self, cursor: _Optional[str] = ..., object: _Optional[_Union[ResourceObject, _Mapping]] = ..., cluster: _Optional[str] = ...) -> None: ...

class ViewPageInfo(_message.Message):
    __slots__ = ("has_next_page", "has_previous_page", "start_cursor", "end_cursor")
    HAS_NEXT_PAGE_FIELD_NUMBER: _ClassVar[int]
    HAS_PREVIOUS_PAGE_FIELD_NUMBER: _ClassVar[int]
    START_CURSOR_FIELD_NUMBER: _ClassVar[int]
    END_CURSOR_FIELD_NUMBER: _ClassVar[int]
    has_next_page: bool
    has_previous_page: bool
    start_cursor: str
    end_cursor: str
    def __init__(self, has_next_page: _Optional[bool] = ..., has_previous_page: _Optional[bool] = ..., start_cursor: _Optional[str] = ..., end_cursor: _Optional[str] = ...) -> None: ...

class ViewCount(_message.Message):
    __slots__ = ("value", "count")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    value: str
    count: int
    def __init__(self, value: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class ViewCounts(_message.Message):
    __slots__ = ("group_by", "counts")
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    group_by: str
    counts: _containers.RepeatedCompositeFieldContainer[ViewCount]
    def __init__(self, group_by: _Optional[str] = ..., counts: _Optional[_Iterable[_Union[ViewCount, _Mapping]]] = ...) -> None: ...

class ResourceView(_message.Message):
    __slots__ = ("edges", "page_info", "total", "resource_version", "counts", "clusters")
    EDGES_FIELD_NUMBER: _ClassVar[int]
    PAGE_INFO_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    edges: _containers.RepeatedCompositeFieldContainer[ViewEdge]
    page_info: ViewPageInfo
    total: int
    resource_version: str
    counts: _containers.RepeatedCompositeFieldContainer[ViewCounts]
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterView]
    def __init__(self, edges: _Optional[_Iterable[_Union[ViewEdge, _Mapping]]] = ..., page_info: _Optional[_Union[ViewPageInfo, _Mapping]] = ..., total: _Optional[int] = ..., resource_version: _Optional[str] = ..., counts: _Optional[_Iterable[_Union[ViewCounts, _Mapping]]] = ..., clusters: _Optional[_Iterable[_Union[ClusterView, _Mapping]]] = ...) -> None: ...

class ClusterView(_message.Message):
    __slots__ = ("cluster", "total", "resource_version", "counts", "error")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    total: int
    resource_version: str
    counts: _containers.RepeatedCompositeFieldContainer[ViewCounts]
    error: ClusterStatus
    def __init__(self, cluster: _Optional[str] = ..., total: _Optional[int] = ..., resource_version: _Optional[str] = ..., counts: _Optional[_Iterable[_Union[ViewCounts, _Mapping]]] = ..., error: _Optional[_Union[ClusterStatus, _Mapping]] = ...) -> None: ...
