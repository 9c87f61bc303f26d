from gateway.grpc.gen.kubegateway.v1 import coordination_pb2 as _coordination_pb2
from gateway.grpc.gen.kubegateway.v1 import core_pb2 as _core_pb2
from gateway.grpc.gen.kubegateway.v1 import image_pb2 as _image_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PatchType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PATCH_TYPE_UNSPECIFIED: _ClassVar[PatchType]
    PATCH_TYPE_JSON: _ClassVar[PatchType]
    PATCH_TYPE_MERGE: _ClassVar[PatchType]
    PATCH_TYPE_STRATEGIC_MERGE: _ClassVar[PatchType]
    PATCH_TYPE_APPLY: _ClassVar[PatchType]
PATCH_TYPE_UNSPECIFIED: PatchType
PATCH_TYPE_JSON: PatchType
PATCH_TYPE_MERGE: PatchType
PATCH_TYPE_STRATEGIC_MERGE: PatchType
PATCH_TYPE_APPLY: PatchType

class WatchEvent(_message.Message):
    __slots__ = ("type", "resource_version", "pod", "event", "endpoints", "lease", "image")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TYPE_UNSPECIFIED: _ClassVar[WatchEvent.Type]
        ADDED: _ClassVar[WatchEvent.Type]
        MODIFIED: _ClassVar[WatchEvent.Type]
        DELETED: _ClassVar[WatchEvent.Type]
        BOOKMARK: _ClassVar[WatchEvent.Type]
        RESYNC: _ClassVar[WatchEvent.Type]
    TYPE_UNSPECIFIED: WatchEvent.Type
    ADDED: WatchEvent.Type
    MODIFIED: WatchEvent.Type
    DELETED: WatchEvent.Type
    BOOKMARK: WatchEvent.Type
    RESYNC: WatchEvent.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    type: WatchEvent.Type
    resource_version: str
    pod: _core_pb2.Pod
    event: _core_pb2.Event
    endpoints: _core_pb2.Endpoints
    lease: _coordination_pb2.Lease
    image: _image_pb2.Image
    def __init__(self, type: _Optional[_Union[WatchEvent.Type, str]] = ..., resource_version: _Optional[str] = ..., pod: _Optional[_Union[_core_pb2.Pod, _Mapping]] = ..., event: _Optional[_Union[_core_pb2.Event, _Mapping]] = ..., endpoints: _Optional[_Union[_core_pb2.Endpoints, _Mapping]] = ..., lease: _Optional[_Union[_coordination_pb2.Lease, _Mapping]] = ..., image: _Optional[_Union[_image_pb2.Image, _Mapping]] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...
