from google.protobuf import field_mask_pb2 as _field_mask_pb2
from gateway.grpc.gen.kubegateway.v1 import common_pb2 as _common_pb2
from gateway.grpc.gen.kubegateway.v1 import image_pb2 as _image_pb2
from gateway.grpc.gen.kubegateway.v1 import meta_pb2 as _meta_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetImageRequest(_message.Message):
    __slots__ = ("name", "read_mask")
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_MASK_FIELD_NUMBER: _ClassVar[int]
    name: str
    read_mask: _field_mask_pb2.FieldMask
    def __init__(self, name: _Optional[str] = ..., read_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class ListImagesRequest(_message.Message):
    __slots__ = ("label_selector", "field_selector", "limit", "resource_version", "resource_version_match", "timeout_seconds", "read_mask")
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FIELD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_MATCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    READ_MASK_FIELD_NUMBER: _ClassVar[int]
    label_selector: str
    field_selector: str
    limit: int
    resource_version: str
    resource_version_match: str
    timeout_seconds: int
    read_mask: _field_mask_pb2.FieldMask
    def __init__(self, label_selector: _Optional[str] = ..., field_selector: _Optional[str] = ..., limit: _Optional[int] = ..., resource_version: _Optional[str] = ..., resource_version_match: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., read_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., **kwargs) -> None: ...

class WatchImagesRequest(_message.Message):
    __slots__ = ("label_selector", "field_selector", "resource_version", "resource_version_match", "send_initial_events", "allow_watch_bookmarks", "timeout_seconds", "read_mask", "changed_fields_only")
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FIELD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_MATCH_FIELD_NUMBER: _ClassVar[int]
    SEND_INITIAL_EVENTS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_WATCH_BOOKMARKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    READ_MASK_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELDS_ONLY_FIELD_NUMBER: _ClassVar[int]
    label_selector: str
    field_selector: str
    resource_version: str
    resource_version_match: str
    send_initial_events: bool
    allow_watch_bookmarks: bool
    timeout_seconds: int
    read_mask: _field_mask_pb2.FieldMask
    changed_fields_only: bool
    def __init__(self, label_selector: _Optional[str] = ..., field_selector: _Optional[str] = ..., resource_version: _Optional[str] = ..., resource_version_match: _Optional[str] = ..., send_initial_events: _Optional[bool] = ..., allow_watch_bookmarks: _Optional[bool] = ..., timeout_seconds: _Optional[int] = ..., read_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., changed_fields_only: _Optional[bool] = ...) -> None: ...

class CreateImageRequest(_message.Message):
    __slots__ = ("object", "raw_json", "dry_run", "field_manager", "field_validation")
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    RAW_JSON_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FIELD_MANAGER_FIELD_NUMBER: _ClassVar[int]
    FIELD_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    object: _image_pb2.Image
    raw_json: bytes
    dry_run: bool
    field_manager: str
    field_validation: str
    def __init__(self, object: _Optional[_Union[_image_pb2.Image, _Mapping]] = ..., raw_json: _Optional[bytes] = ..., dry_run: _Optional[bool] = ..., field_manager: _Optional[str] = ..., field_validation: _Optional[str] = ...) -> None: ...

class ReplaceImageRequest(_message.Message):
    __slots__ = ("name", "object", "raw_json", "dry_run", "field_manager", "field_validation")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    RAW_JSON_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FIELD_MANAGER_FIELD_NUMBER: _ClassVar[int]
    FIELD_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    object: _image_pb2.Image
    raw_json: bytes
    dry_run: bool
    field_manager: str
    field_validation: str
    def __init__(self, name: _Optional[str] = ..., object: _Optional[_Union[_image_pb2.Image, _Mapping]] = ..., raw_json: _Optional[bytes] = ..., dry_run: _Optional[bool] = ..., field_manager: _Optional[str] = ..., field_validation: _Optional[str] = ...) -> None: ...

class PatchImageRequest(_message.Message):
    __slots__ = ("name", "patch_type", "patch", "dry_run", "field_manager", "field_validation", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATCH_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FIELD_MANAGER_FIELD_NUMBER: _ClassVar[int]
    FIELD_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    patch_type: _common_pb2.PatchType
    patch: bytes
    dry_run: bool
    field_manager: str
    field_validation: str
    force: bool
    def __init__(self, name: _Optional[str] = ..., patch_type: _Optional[_Union[_common_pb2.PatchType, str]] = ..., patch: _Optional[bytes] = ..., dry_run: _Optional[bool] = ..., field_manager: _Optional[str] = ..., field_validation: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteImageRequest(_message.Message):
    __slots__ = ("name", "options")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    options: _meta_pb2.DeleteOptions
    def __init__(self, name: _Optional[str] = ..., options: _Optional[_Union[_meta_pb2.DeleteOptions, _Mapping]] = ...) -> None: ...

class DeleteImageResponse(_message.Message):
    __slots__ = ("object", "status")
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    object: _image_pb2.Image
    status: _meta_pb2.Status
    def __init__(self, object: _Optional[_Union[_image_pb2.Image, _Mapping]] = ..., status: _Optional[_Union[_meta_pb2.Status, _Mapping]] = ...) -> None: ...

class DeleteCollectionImagesRequest(_message.Message):
    __slots__ = ("label_selector", "field_selector", "limit", "resource_version", "resource_version_match", "timeout_seconds", "options")
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FIELD_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_MATCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    label_selector: str
    field_selector: str
    limit: int
    resource_version: str
    resource_version_match: str
    timeout_seconds: int
    options: _meta_pb2.DeleteOptions
    def __init__(self, label_selector: _Optional[str] = ..., field_selector: _Optional[str] = ..., limit: _Optional[int] = ..., resource_version: _Optional[str] = ..., resource_version_match: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., options: _Optional[_Union[_meta_pb2.DeleteOptions, _Mapping]] = ..., **kwargs) -> None: ...

class DeleteCollectionImagesResponse(_message.Message):
    __slots__ = ("list", "status")
    LIST_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    list: _image_pb2.ImageList
    status: _meta_pb2.Status
    def __init__(self, list: _Optional[_Union[_image_pb2.ImageList, _Mapping]] = ..., status: _Optional[_Union[_meta_pb2.Status, _Mapping]] = ...) -> None: ...
