from google.protobuf import field_mask_pb2 as _field_mask_pb2
from gateway.grpc.gen.kubegateway.v1 import common_pb2 as _common_pb2
from gateway.grpc.gen.kubegateway.v1 import core_pb2 as _core_pb2
from gateway.grpc.gen.kubegateway.v1 import meta_pb2 as _meta_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetEventRequest(_message.Message):
    __slots__ = ("namespace", "name", "read_mask")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_MASK_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    read_mask: _field_mask_pb2.FieldMask
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., read_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("namespace", "label_selector", "field_selector", "limit", "resource_version", "resource_version_match", "timeout_seconds", "read_mask")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FIELD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_MATCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    READ_MASK_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    label_selector: str
    field_selector: str
    limit: int
    resource_version: str
    resource_version_match: str
    timeout_seconds: int
    read_mask: _field_mask_pb2.FieldMask
    def __init__(self, namespace: _Optional[str] = ..., label_selector: _Optional[str] = ..., field_selector: _Optional[str] = ..., limit: _Optional[int] = ..., resource_version: _Optional[str] = ..., resource_version_match: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., read_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., **kwargs) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("namespace", "label_selector", "field_selector", "resource_version", "resource_version_match", "send_initial_events", "allow_watch_bookmarks", "timeout_seconds", "read_mask", "changed_fields_only")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FIELD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_MATCH_FIELD_NUMBER: _ClassVar[int]
    SEND_INITIAL_EVENTS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_WATCH_BOOKMARKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    READ_MASK_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELDS_ONLY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    label_selector: str
    field_selector: str
    resource_version: str
    resource_version_match: str
    send_initial_events: bool
    allow_watch_bookmarks: bool
    timeout_seconds: int
    read_mask: _field_mask_pb2.FieldMask
    changed_fields_only: bool
    def __init__(self, namespace: _Optional[str] = ..., label_selector: _Optional[str] = ..., field_selector: _Optional[str] = ..., resource_version: _Optional[str] = ..., resource_version_match: _Optional[str] = ..., send_initial_events: _Optional[bool] = ..., allow_watch_bookmarks: _Optional[bool] = ..., timeout_seconds: _Optional[int] = ..., read_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., changed_fields_only: _Optional[bool] = ...) -> None: ...

class CreateEventRequest(_message.Message):
    __slots__ = ("namespace", "object", "raw_json", "dry_run", "field_manager", "field_validation")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    RAW_JSON_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FIELD_MANAGER_FIELD_NUMBER: _ClassVar[int]
    FIELD_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    object: _core_pb2.Event
    raw_json: bytes
    dry_run: bool
    field_manager: str
    field_validation: str
    def __init__(self, namespace: _Optional[str] = ..., object: _Optional[_Union[_core_pb2.Event, _Mapping]] = ..., raw_json: _Optional[bytes] = ..., dry_run: _Optional[bool] = ..., field_manager: _Optional[str] = ..., field_validation: _Optional[str] = ...) -> None: ...

class ReplaceEventRequest(_message.Message):
    __slots__ = ("namespace", "name", "object", "raw_json", "dry_run", "field_manager", "field_validation")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    RAW_JSON_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FIELD_MANAGER_FIELD_NUMBER: _ClassVar[int]
    FIELD_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    object: _core_pb2.Event
    raw_json: bytes
    dry_run: bool
    field_manager: str
    field_validation: str
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., object: _Optional[_Union[_core_pb2.Event, _Mapping]] = ..., raw_json: _Optional[bytes] = ..., dry_run: _Optional[bool] = ..., field_manager: _Optional[str] = ..., field_validation: _Optional[str] = ...) -> None: ...

class PatchEventRequest(_message.Message):
    __slots__ = ("namespace", "name", "patch_type", "patch", "dry_run", "field_manager", "field_validation", "force")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATCH_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FIELD_MANAGER_FIELD_NUMBER: _ClassVar[int]
    FIELD_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    patch_type: _common_pb2.PatchType
    patch: bytes
    dry_run: bool
    field_manager: str
    field_validation: str
    force: bool
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., patch_type: _Optional[_Union[_common_pb2.PatchType, str]] = ..., patch: _Optional[bytes] = ..., dry_run: _Optional[bool] = ..., field_manager: _Optional[str] = ..., field_validation: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteEventRequest(_message.Message):
    __slots__ = ("namespace", "name", "options")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    options: _meta_pb2.DeleteOptions
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., options: _Optional[_Union[_meta_pb2.DeleteOptions, _Mapping]] = ...) -> None: ...

class DeleteEventResponse(_message.Message):
    __slots__ = ("object", "status")
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    object: _core_pb2.Event
    status: _meta_pb2.Status
    def __init__(self, object: _Optional[_Union[_core_pb2.Event, _Mapping]] = ..., status: _Optional[_Union[_meta_pb2.Status, _Mapping]] = ...) -> None: ...

class DeleteCollectionEventsRequest(_message.Message):
    __slots__ = ("namespace", "label_selector", "field_selector", "limit", "resource_version", "resource_version_match", "timeout_seconds", "options")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FIELD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_MATCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    label_selector: str
    field_selector: str
    limit: int
    resource_version: str
    resource_version_match: str
    timeout_seconds: int
    options: _meta_pb2.DeleteOptions
    def __init__(self, namespace: _Optional[str] = ..., label_selector: _Optional[str] = ..., field_selector: _Optional[str] = ..., limit: _Optional[int] = ..., resource_version: _Optional[str] = ..., resource_version_match: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., options: _Optional[_Union[_meta_pb2.DeleteOptions, _Mapping]] = ..., **kwargs) -> None: ...

class DeleteCollectionEventsResponse(_message.Message):
    __slots__ = ("list", "status")
    LIST_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    list: _core_pb2.EventList
    status: _meta_pb2.Status
    def __init__(self, list: _Optional[_Union[_core_pb2.EventList, _Mapping]] = ..., status: _Optional[_Union[_meta_pb2.Status, _Mapping]] = ...) -> None: ...
