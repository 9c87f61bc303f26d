from gateway.grpc.gen.kubegateway.v1 import meta_pb2 as _meta_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Lease(_message.Message):
    __slots__ = ("apiVersion", "kind", "metadata", "spec")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    kind: str
    metadata: _meta_pb2.ObjectMeta
    spec: LeaseSpec
    def __init__(self, apiVersion: _Optional[str] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ObjectMeta, _Mapping]] = ..., spec: _Optional[_Union[LeaseSpec, _Mapping]] = ...) -> None: ...

class LeaseList(_message.Message):
    __slots__ = ("apiVersion", "items", "kind", "metadata")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    items: _containers.RepeatedCompositeFieldContainer[Lease]
    kind: str
    metadata: _meta_pb2.ListMeta
    def __init__(self, apiVersion: _Optional[str] = ..., items: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ListMeta, _Mapping]] = ...) -> None: ...

class LeaseSpec(_message.Message):
    __slots__ = ("acquireTime", "holderIdentity", "leaseDurationSeconds", "leaseTransitions", "preferredHolder", "renewTime", "strategy")
    ACQUIRETIME_FIELD_NUMBER: _ClassVar[int]
    HOLDERIDENTITY_FIELD_NUMBER: _ClassVar[int]
    LEASEDURATIONSECONDS_FIELD_NUMBER: _ClassVar[int]
    LEASETRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    PREFERREDHOLDER_FIELD_NUMBER: _ClassVar[int]
    RENEWTIME_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    acquireTime: str
    holderIdentity: str
    leaseDurationSeconds: int
    leaseTransitions: int
    preferredHolder: str
    renewTime: str
    strategy: str
    def __init__(self, acquireTime: _Optional[str] = ..., holderIdentity: _Optional[str] = ..., leaseDurationSeconds: _Optional[int] = ..., leaseTransitions: _Optional[int] = ..., preferredHolder: _Optional[str] = ..., renewTime: _Optional[str] = ..., strategy: _Optional[str] = ...) -> None: ...
