from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListClustersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServedCluster(_message.Message):
    __slots__ = ("name", "server", "version", "ready", "served_resources")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    SERVED_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    name: str
    server: str
    version: str
    ready: bool
    served_resources: int
    def __init__(self, name: _Optional[str] = ..., server: _Optional[str] = ..., version: _Optional[str] = ..., ready: _Optional[bool] = ..., served_resources: _Optional[int] = ...) -> None: ...

class ListClustersResponse(_message.Message):
    __slots__ = ("clusters",)
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    clusters: _containers.RepeatedCompositeFieldContainer[ServedCluster]
    def __init__(self, clusters: _Optional[_Iterable[_Union[ServedCluster, _Mapping]]] = ...) -> None: ...
