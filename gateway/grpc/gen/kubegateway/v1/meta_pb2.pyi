from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeleteOptions(_message.Message):
    __slots__ = ("apiVersion", "dryRun", "gracePeriodSeconds", "ignoreStoreReadErrorWithClusterBreakingPotential", "kind", "orphanDependents", "preconditions", "propagationPolicy")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    DRYRUN_FIELD_NUMBER: _ClassVar[int]
    GRACEPERIODSECONDS_FIELD_NUMBER: _ClassVar[int]
    IGNORESTOREREADERRORWITHCLUSTERBREAKINGPOTENTIAL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ORPHANDEPENDENTS_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    PROPAGATIONPOLICY_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    dryRun: _containers.RepeatedScalarFieldContainer[str]
    gracePeriodSeconds: int
    ignoreStoreReadErrorWithClusterBreakingPotential: bool
    kind: str
    orphanDependents: bool
    preconditions: Preconditions
    propagationPolicy: str
    def __init__(self, apiVersion: _Optional[str] = ..., dryRun: _Optional[_Iterable[str]] = ..., gracePeriodSeconds: _Optional[int] = ..., ignoreStoreReadErrorWithClusterBreakingPotential: _Optional[bool] = ..., kind: _Optional[str] = ..., orphanDependents: _Optional[bool] = ..., preconditions: _Optional[_Union[Preconditions, _Mapping]] = ..., propagationPolicy: _Optional[str] = ...) -> None: ...

class LabelSelector(_message.Message):
    __slots__ = ("matchExpressions", "matchLabels")
    class MatchLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MATCHEXPRESSIONS_FIELD_NUMBER: _ClassVar[int]
    MATCHLABELS_FIELD_NUMBER: _ClassVar[int]
    matchExpressions: _containers.RepeatedCompositeFieldContainer[LabelSelectorRequirement]
    matchLabels: _containers.ScalarMap[str, str]
    def __init__(self, matchExpressions: _Optional[_Iterable[_Union[LabelSelectorRequirement, _Mapping]]] = ..., matchLabels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class LabelSelectorRequirement(_message.Message):
    __slots__ = ("key", "operator", "values")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    key: str
    operator: str
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, key: _Optional[str] = ..., operator: _Optional[str] = ..., values: _Optional[_Iterable[str]] = ...) -> None: ...

class ListMeta(_message.Message):
    __slots__ = ("remainingItemCount", "resourceVersion", "selfLink", "shardInfo")
    CONTINUE_FIELD_NUMBER: _ClassVar[int]
    REMAININGITEMCOUNT_FIELD_NUMBER: _ClassVar[int]
    RESOURCEVERSION_FIELD_NUMBER: _ClassVar[int]
    SELFLINK_FIELD_NUMBER: _ClassVar[int]
    SHARDINFO_FIELD_NUMBER: _ClassVar[int]
    remainingItemCount: int
    resourceVersion: str
    selfLink: str
    shardInfo: ShardInfo
    def __init__(self, remainingItemCount: _Optional[int] = ..., resourceVersion: _Optional[str] = ..., selfLink: _Optional[str] = ..., shardInfo: _Optional[_Union[ShardInfo, _Mapping]] = ..., **kwargs) -> None: ...

class ManagedFieldsEntry(_message.Message):
    __slots__ = ("apiVersion", "fieldsType", "fieldsV1", "manager", "operation", "subresource", "time")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    FIELDSTYPE_FIELD_NUMBER: _ClassVar[int]
    FIELDSV1_FIELD_NUMBER: _ClassVar[int]
    MANAGER_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    SUBRESOURCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    fieldsType: str
    fieldsV1: _struct_pb2.Struct
    manager: str
    operation: str
    subresource: str
    time: str
    def __init__(self, apiVersion: _Optional[str] = ..., fieldsType: _Optional[str] = ..., fieldsV1: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., manager: _Optional[str] = ..., operation: _Optional[str] = ..., subresource: _Optional[str] = ..., time: _Optional[str] = ...) -> None: ...

class ObjectMeta(_message.Message):
    __slots__ = ("annotations", "creationTimestamp", "deletionGracePeriodSeconds", "deletionTimestamp", "finalizers", "generateName", "generation", "labels", "managedFields", "name", "namespace", "ownerReferences", "resourceVersion", "selfLink", "uid")
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    CREATIONTIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DELETIONGRACEPERIODSECONDS_FIELD_NUMBER: _ClassVar[int]
    DELETIONTIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    FINALIZERS_FIELD_NUMBER: _ClassVar[int]
    GENERATENAME_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MANAGEDFIELDS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OWNERREFERENCES_FIELD_NUMBER: _ClassVar[int]
    RESOURCEVERSION_FIELD_NUMBER: _ClassVar[int]
    SELFLINK_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    annotations: _containers.ScalarMap[str, str]
    creationTimestamp: str
    deletionGracePeriodSeconds: int
    deletionTimestamp: str
    finalizers: _containers.RepeatedScalarFieldContainer[str]
    generateName: str
    generation: int
    labels: _containers.ScalarMap[str, str]
    managedFields: _containers.RepeatedCompositeFieldContainer[ManagedFieldsEntry]
    name: str
    namespace: str
    ownerReferences: _containers.RepeatedCompositeFieldContainer[OwnerReference]
    resourceVersion: str
    selfLink: str
    uid: str
    def __init__(self, annotations: _Optional[_Mapping[str, str]] = ..., creationTimestamp: _Optional[str] = ..., deletionGracePeriodSeconds: _Optional[int] = ..., deletionTimestamp: _Optional[str] = ..., finalizers: _Optional[_Iterable[str]] = ..., generateName: _Optional[str] = ..., generation: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., managedFields: _Optional[_Iterable[_Union[ManagedFieldsEntry, _Mapping]]] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ..., ownerReferences: _Optional[_Iterable[_Union[OwnerReference, _Mapping]]] = ..., resourceVersion: _Optional[str] = ..., selfLink: _Optional[str] = ..., uid: _Optional[str] = ...) -> None: ...

class OwnerReference(_message.Message):
    __slots__ = ("apiVersion", "blockOwnerDeletion", "controller", "kind", "name", "uid")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    BLOCKOWNERDELETION_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    blockOwnerDeletion: bool
    controller: bool
    kind: str
    name: str
    uid: str
    def __init__(self, apiVersion: _Optional[str] = ..., blockOwnerDeletion: _Optional[bool] = ..., controller: _Optional[bool] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., uid: _Optional[str] = ...) -> None: ...

class Preconditions(_message.Message):
    __slots__ = ("resourceVersion", "uid")
    RESOURCEVERSION_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    resourceVersion: str
    uid: str
    def __init__(self, resourceVersion: _Optional[str] = ..., uid: _Optional[str] = ...) -> None: ...

class ShardInfo(_message.Message):
    __slots__ = ("selector",)
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    selector: str
    def __init__(self, selector: _Optional[str] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ("apiVersion", "code", "details", "kind", "message", "metadata", "reason", "status")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    code: int
    details: StatusDetails
    kind: str
    message: str
    metadata: ListMeta
    reason: str
    status: str
    def __init__(self, apiVersion: _Optional[str] = ..., code: _Optional[int] = ..., details: _Optional[_Union[StatusDetails, _Mapping]] = ..., kind: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Union[ListMeta, _Mapping]] = ..., reason: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

class StatusCause(_message.Message):
    __slots__ = ("field", "message", "reason")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    field: str
    message: str
    reason: str
    def __init__(self, field: _Optional[str] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class StatusDetails(_message.Message):
    __slots__ = ("causes", "group", "kind", "name", "retryAfterSeconds", "uid")
    CAUSES_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RETRYAFTERSECONDS_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    causes: _containers.RepeatedCompositeFieldContainer[StatusCause]
    group: str
    kind: str
    name: str
    retryAfterSeconds: int
    uid: str
    def __init__(self, causes: _Optional[_Iterable[_Union[StatusCause, _Mapping]]] = ..., group: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., retryAfterSeconds: _Optional[int] = ..., uid: _Optional[str] = ...) -> None: ...
