from gateway.grpc.gen.kubegateway.v1 import meta_pb2 as _meta_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AWSElasticBlockStoreVolumeSource(_message.Message):
    __slots__ = ("fsType", "partition", "readOnly", "volumeID")
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    VOLUMEID_FIELD_NUMBER: _ClassVar[int]
    fsType: str
    partition: int
    readOnly: bool
    volumeID: str
    def __init__(self, fsType: _Optional[str] = ..., partition: _Optional[int] = ..., readOnly: _Optional[bool] = ..., volumeID: _Optional[str] = ...) -> None: ...

class Affinity(_message.Message):
    __slots__ = ("nodeAffinity", "podAffinity", "podAntiAffinity")
    NODEAFFINITY_FIELD_NUMBER: _ClassVar[int]
    PODAFFINITY_FIELD_NUMBER: _ClassVar[int]
    PODANTIAFFINITY_FIELD_NUMBER: _ClassVar[int]
    nodeAffinity: NodeAffinity
    podAffinity: PodAffinity
    podAntiAffinity: PodAntiAffinity
    def __init__(self, nodeAffinity: _Optional[_Union[NodeAffinity, _Mapping]] = ..., podAffinity: _Optional[_Union[PodAffinity, _Mapping]] = ..., podAntiAffinity: _Optional[_Union[PodAntiAffinity, _Mapping]] = ...) -> None: ...

class AppArmorProfile(_message.Message):
    __slots__ = ("localhostProfile", "type")
    LOCALHOSTPROFILE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    localhostProfile: str
    type: str
    def __init__(self, localhostProfile: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class AzureDiskVolumeSource(_message.Message):
    __slots__ = ("cachingMode", "diskName", "diskURI", "fsType", "kind", "readOnly")
    CACHINGMODE_FIELD_NUMBER: _ClassVar[int]
    DISKNAME_FIELD_NUMBER: _ClassVar[int]
    DISKURI_FIELD_NUMBER: _ClassVar[int]
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    cachingMode: str
    diskName: str
    diskURI: str
    fsType: str
    kind: str
    readOnly: bool
    def __init__(self, cachingMode: _Optional[str] = ..., diskName: _Optional[str] = ..., diskURI: _Optional[str] = ..., fsType: _Optional[str] = ..., kind: _Optional[str] = ..., readOnly: _Optional[bool] = ...) -> None: ...

class AzureFileVolumeSource(_message.Message):
    __slots__ = ("readOnly", "secretName", "shareName")
    READONLY_FIELD_NUMBER: _ClassVar[int]
    SECRETNAME_FIELD_NUMBER: _ClassVar[int]
    SHARENAME_FIELD_NUMBER: _ClassVar[int]
    readOnly: bool
    secretName: str
    shareName: str
    def __init__(self, readOnly: _Optional[bool] = ..., secretName: _Optional[str] = ..., shareName: _Optional[str] = ...) -> None: ...

class CSIVolumeSource(_message.Message):
    __slots__ = ("driver", "fsType", "nodePublishSecretRef", "readOnly", "volumeAttributes")
    class VolumeAttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    NODEPUBLISHSECRETREF_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    VOLUMEATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    driver: str
    fsType: str
    nodePublishSecretRef: LocalObjectReference
    readOnly: bool
    volumeAttributes: _containers.ScalarMap[str, str]
    def __init__(self, driver: _Optional[str] = ..., fsType: _Optional[str] = ..., nodePublishSecretRef: _Optional[_Union[LocalObjectReference, _Mapping]] = ..., readOnly: _Optional[bool] = ..., volumeAttributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("add", "drop")
    ADD_FIELD_NUMBER: _ClassVar[int]
    DROP_FIELD_NUMBER: _ClassVar[int]
    add: _containers.RepeatedScalarFieldContainer[str]
    drop: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, add: _Optional[_Iterable[str]] = ..., drop: _Optional[_Iterable[str]] = ...) -> None: ...

class CephFSVolumeSource(_message.Message):
    __slots__ = ("monitors", "path", "readOnly", "secretFile", "secretRef", "user")
    MONITORS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    SECRETFILE_FIELD_NUMBER: _ClassVar[int]
    SECRETREF_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    monitors: _containers.RepeatedScalarFieldContainer[str]
    path: str
    readOnly: bool
    secretFile: str
    secretRef: LocalObjectReference
    user: str
    def __init__(self, monitors: _Optional[_Iterable[str]] = ..., path: _Optional[str] = ..., readOnly: _Optional[bool] = ..., secretFile: _Optional[str] = ..., secretRef: _Optional[_Union[LocalObjectReference, _Mapping]] = ..., user: _Optional[str] = ...) -> None: ...

class CinderVolumeSource(_message.Message):
    __slots__ = ("fsType", "readOnly", "secretRef", "volumeID")
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    SECRETREF_FIELD_NUMBER: _ClassVar[int]
    VOLUMEID_FIELD_NUMBER: _ClassVar[int]
    fsType: str
    readOnly: bool
    secretRef: LocalObjectReference
    volumeID: str
    def __init__(self, fsType: _Optional[str] = ..., readOnly: _Optional[bool] = ..., secretRef: _Optional[_Union[LocalObjectReference, _Mapping]] = ..., volumeID: _Optional[str] = ...) -> None: ...

class ClusterTrustBundleProjection(_message.Message):
    __slots__ = ("labelSelector", "name", "optional", "path", "signerName")
    LABELSELECTOR_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIGNERNAME_FIELD_NUMBER: _ClassVar[int]
    labelSelector: _meta_pb2.LabelSelector
    name: str
    optional: bool
    path: str
    signerName: str
    def __init__(self, labelSelector: _Optional[_Union[_meta_pb2.LabelSelector, _Mapping]] = ..., name: _Optional[str] = ..., optional: _Optional[bool] = ..., path: _Optional[str] = ..., signerName: _Optional[str] = ...) -> None: ...

class ConfigMapEnvSource(_message.Message):
    __slots__ = ("name", "optional")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    optional: bool
    def __init__(self, name: _Optional[str] = ..., optional: _Optional[bool] = ...) -> None: ...

class ConfigMapKeySelector(_message.Message):
    __slots__ = ("key", "name", "optional")
    KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    key: str
    name: str
    optional: bool
    def __init__(self, key: _Optional[str] = ..., name: _Optional[str] = ..., optional: _Optional[bool] = ...) -> None: ...

class ConfigMapProjection(_message.Message):
    __slots__ = ("items", "name", "optional")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[KeyToPath]
    name: str
    optional: bool
    def __init__(self, items: _Optional[_Iterable[_Union[KeyToPath, _Mapping]]] = ..., name: _Optional[str] = ..., optional: _Optional[bool] = ...) -> None: ...

class ConfigMapVolumeSource(_message.Message):
    __slots__ = ("defaultMode", "items", "name", "optional")
    DEFAULTMODE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    defaultMode: int
    items: _containers.RepeatedCompositeFieldContainer[KeyToPath]
    name: str
    optional: bool
    def __init__(self, defaultMode: _Optional[int] = ..., items: _Optional[_Iterable[_Union[KeyToPath, _Mapping]]] = ..., name: _Optional[str] = ..., optional: _Optional[bool] = ...) -> None: ...

class Container(_message.Message):
    __slots__ = ("args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "name", "ports", "readinessProbe", "resizePolicy", "resources", "restartPolicy", "restartPolicyRules", "securityContext", "startupProbe", "stdin", "stdinOnce", "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices", "volumeMounts", "workingDir")
    ARGS_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    ENVFROM_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    IMAGEPULLPOLICY_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    LIVENESSPROBE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    READINESSPROBE_FIELD_NUMBER: _ClassVar[int]
    RESIZEPOLICY_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    RESTARTPOLICY_FIELD_NUMBER: _ClassVar[int]
    RESTARTPOLICYRULES_FIELD_NUMBER: _ClassVar[int]
    SECURITYCONTEXT_FIELD_NUMBER: _ClassVar[int]
    STARTUPPROBE_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    STDINONCE_FIELD_NUMBER: _ClassVar[int]
    TERMINATIONMESSAGEPATH_FIELD_NUMBER: _ClassVar[int]
    TERMINATIONMESSAGEPOLICY_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    VOLUMEDEVICES_FIELD_NUMBER: _ClassVar[int]
    VOLUMEMOUNTS_FIELD_NUMBER: _ClassVar[int]
    WORKINGDIR_FIELD_NUMBER: _ClassVar[int]
    args: _containers.RepeatedScalarFieldContainer[str]
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.RepeatedCompositeFieldContainer[EnvVar]
    envFrom: _containers.RepeatedCompositeFieldContainer[EnvFromSource]
    image: str
    imagePullPolicy: str
    lifecycle: Lifecycle
    livenessProbe: Probe
    name: str
    ports: _containers.RepeatedCompositeFieldContainer[ContainerPort]
    readinessProbe: Probe
    resizePolicy: _containers.RepeatedCompositeFieldContainer[ContainerResizePolicy]
    resources: ResourceRequirements
    restartPolicy: str
    restartPolicyRules: _containers.RepeatedCompositeFieldContainer[ContainerRestartRule]
    securityContext: SecurityContext
    startupProbe: Probe
    stdin: bool
    stdinOnce: bool
    terminationMessagePath: str
    terminationMessagePolicy: str
    tty: bool
    volumeDevices: _containers.RepeatedCompositeFieldContainer[VolumeDevice]
    volumeMounts: _containers.RepeatedCompositeFieldContainer[VolumeMount]
    workingDir: str
    def __init__(self, args: _Optional[_Iterable[str]] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Iterable[_Union[EnvVar, _Mapping]]] = ..., envFrom: _Optional[_Iterable[_Union[EnvFromSource, _Mapping]]] = ..., image: _Optional[str] = ..., imagePullPolicy: _Optional[str] = ..., lifecycle: _Optional[_Union[Lifecycle, _Mapping]] = ..., livenessProbe: _Optional[_Union[Probe, _Mapping]] = ..., name: _Optional[str] = ..., ports: _Optional[_Iterable[_Union[ContainerPort, _Mapping]]] = ..., readinessProbe: _Optional[_Union[Probe, _Mapping]] = ..., resizePolicy: _Optional[_Iterable[_Union[ContainerResizePolicy, _Mapping]]] = ..., resources: _Optional[_Union[ResourceRequirements, _Mapping]] = ..., restartPolicy: _Optional[str] = ..., restartPolicyRules: _Optional[_Iterable[_Union[ContainerRestartRule, _Mapping]]] = ..., securityContext: _Optional[_Union[SecurityContext, _Mapping]] = ..., startupProbe: _Optional[_Union[Probe, _Mapping]] = ..., stdin: _Optional[bool] = ..., stdinOnce: _Optional[bool] = ..., terminationMessagePath: _Optional[str] = ..., terminationMessagePolicy: _Optional[str] = ..., tty: _Optional[bool] = ..., volumeDevices: _Optional[_Iterable[_Union[VolumeDevice, _Mapping]]] = ..., volumeMounts: _Optional[_Iterable[_Union[VolumeMount, _Mapping]]] = ..., workingDir: _Optional[str] = ...) -> None: ...

class ContainerExtendedResourceRequest(_message.Message):
    __slots__ = ("containerName", "requestName", "resourceName")
    CONTAINERNAME_FIELD_NUMBER: _ClassVar[int]
    REQUESTNAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCENAME_FIELD_NUMBER: _ClassVar[int]
    containerName: str
    requestName: str
    resourceName: str
    def __init__(self, containerName: _Optional[str] = ..., requestName: _Optional[str] = ..., resourceName: _Optional[str] = ...) -> None: ...

class ContainerPort(_message.Message):
    __slots__ = ("containerPort", "hostIP", "hostPort", "name", "protocol")
    CONTAINERPORT_FIELD_NUMBER: _ClassVar[int]
    HOSTIP_FIELD_NUMBER: _ClassVar[int]
    HOSTPORT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    containerPort: int
    hostIP: str
    hostPort: int
    name: str
    protocol: str
    def __init__(self, containerPort: _Optional[int] = ..., hostIP: _Optional[str] = ..., hostPort: _Optional[int] = ..., name: _Optional[str] = ..., protocol: _Optional[str] = ...) -> None: ...

class ContainerResizePolicy(_message.Message):
    __slots__ = ("resourceName", "restartPolicy")
    RESOURCENAME_FIELD_NUMBER: _ClassVar[int]
    RESTARTPOLICY_FIELD_NUMBER: _ClassVar[int]
    resourceName: str
    restartPolicy: str
    def __init__(self, resourceName: _Optional[str] = ..., restartPolicy: _Optional[str] = ...) -> None: ...

class ContainerRestartRule(_message.Message):
    __slots__ = ("action", "exitCodes")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    EXITCODES_FIELD_NUMBER: _ClassVar[int]
    action: str
    exitCodes: ContainerRestartRuleOnExitCodes
    def __init__(self, action: _Optional[str] = ..., exitCodes: _Optional[_Union[ContainerRestartRuleOnExitCodes, _Mapping]] = ...) -> None: ...

class ContainerRestartRuleOnExitCodes(_message.Message):
    __slots__ = ("operator", "values")
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    operator: str
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, operator: _Optional[str] = ..., values: _Optional[_Iterable[int]] = ...) -> None: ...

class ContainerState(_message.Message):
    __slots__ = ("running", "terminated", "waiting")
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    running: ContainerStateRunning
    terminated: ContainerStateTerminated
    waiting: ContainerStateWaiting
    def __init__(self, running: _Optional[_Union[ContainerStateRunning, _Mapping]] = ..., terminated: _Optional[_Union[ContainerStateTerminated, _Mapping]] = ..., waiting: _Optional[_Union[ContainerStateWaiting, _Mapping]] = ...) -> None: ...

class ContainerStateRunning(_message.Message):
    __slots__ = ("startedAt",)
    STARTEDAT_FIELD_NUMBER: _ClassVar[int]
    startedAt: str
    def __init__(self, startedAt: _Optional[str] = ...) -> None: ...

class ContainerStateTerminated(_message.Message):
    __slots__ = ("containerID", "exitCode", "finishedAt", "message", "reason", "signal", "startedAt")
    CONTAINERID_FIELD_NUMBER: _ClassVar[int]
    EXITCODE_FIELD_NUMBER: _ClassVar[int]
    FINISHEDAT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STARTEDAT_FIELD_NUMBER: _ClassVar[int]
    containerID: str
    exitCode: int
    finishedAt: str
    message: str
    reason: str
    signal: int
    startedAt: str
    def __init__(self, containerID: _Optional[str] = ..., exitCode: _Optional[int] = ..., finishedAt: _Optional[str] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ..., signal: _Optional[int] = ..., startedAt: _Optional[str] = ...) -> None: ...

class ContainerStateWaiting(_message.Message):
    __slots__ = ("message", "reason")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    message: str
    reason: str
    def __init__(self, message: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ContainerStatus(_message.Message):
    __slots__ = ("allocatedResources", "allocatedResourcesStatus", "containerID", "image", "imageID", "lastState", "name", "ready", "resources", "restartCount", "started", "state", "stopSignal", "user", "volumeMounts")
    class AllocatedResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ALLOCATEDRESOURCES_FIELD_NUMBER: _ClassVar[int]
    ALLOCATEDRESOURCESSTATUS_FIELD_NUMBER: _ClassVar[int]
    CONTAINERID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    IMAGEID_FIELD_NUMBER: _ClassVar[int]
    LASTSTATE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    RESTARTCOUNT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STOPSIGNAL_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    VOLUMEMOUNTS_FIELD_NUMBER: _ClassVar[int]
    allocatedResources: _containers.ScalarMap[str, str]
    allocatedResourcesStatus: _containers.RepeatedCompositeFieldContainer[ResourceStatus]
    containerID: str
    image: str
    imageID: str
    lastState: ContainerState
    name: str
    ready: bool
    resources: ResourceRequirements
    restartCount: int
    started: bool
    state: ContainerState
    stopSignal: str
    user: ContainerUser
    volumeMounts: _containers.RepeatedCompositeFieldContainer[VolumeMountStatus]
    def __init__(self, allocatedResources: _Optional[_Mapping[str, str]] = ..., allocatedResourcesStatus: _Optional[_Iterable[_Union[ResourceStatus, _Mapping]]] = ..., containerID: _Optional[str] = ..., image: _Optional[str] = ..., imageID: _Optional[str] = ..., lastState: _Optional[_Union[ContainerState, _Mapping]] = ..., name: _Optional[str] = ..., ready: _Optional[bool] = ..., resources: _Optional[_Union[ResourceRequirements, _Mapping]] = ..., restartCount: _Optional[int] = ..., started: _Optional[bool] = ..., state: _Optional[_Union[ContainerState, _Mapping]] = ..., stopSignal: _Optional[str] = ..., user: _Optional[_Union[ContainerUser, _Mapping]] = ..., volumeMounts: _Optional[_Iterable[_Union[VolumeMountStatus, _Mapping]]] = ...) -> None: ...

class ContainerUser(_message.Message):
    __slots__ = ("linux",)
    LINUX_FIELD_NUMBER: _ClassVar[int]
    linux: LinuxContainerUser
    def __init__(self, linux: _Optional[_Union[LinuxContainerUser, _Mapping]] = ...) -> None: ...

class DownwardAPIProjection(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[DownwardAPIVolumeFile]
    def __init__(self, items: _Optional[_Iterable[_Union[DownwardAPIVolumeFile, _Mapping]]] = ...) -> None: ...

class DownwardAPIVolumeFile(_message.Message):
    __slots__ = ("fieldRef", "mode", "path", "resourceFieldRef")
    FIELDREF_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RESOURCEFIELDREF_FIELD_NUMBER: _ClassVar[int]
    fieldRef: ObjectFieldSelector
    mode: int
    path: str
    resourceFieldRef: ResourceFieldSelector
    def __init__(self, fieldRef: _Optional[_Union[ObjectFieldSelector, _Mapping]] = ..., mode: _Optional[int] = ..., path: _Optional[str] = ..., resourceFieldRef: _Optional[_Union[ResourceFieldSelector, _Mapping]] = ...) -> None: ...

class DownwardAPIVolumeSource(_message.Message):
    __slots__ = ("defaultMode", "items")
    DEFAULTMODE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    defaultMode: int
    items: _containers.RepeatedCompositeFieldContainer[DownwardAPIVolumeFile]
    def __init__(self, defaultMode: _Optional[int] = ..., items: _Optional[_Iterable[_Union[DownwardAPIVolumeFile, _Mapping]]] = ...) -> None: ...

class EmptyDirVolumeSource(_message.Message):
    __slots__ = ("medium", "sizeLimit")
    MEDIUM_FIELD_NUMBER: _ClassVar[int]
    SIZELIMIT_FIELD_NUMBER: _ClassVar[int]
    medium: str
    sizeLimit: str
    def __init__(self, medium: _Optional[str] = ..., sizeLimit: _Optional[str] = ...) -> None: ...

class EndpointAddress(_message.Message):
    __slots__ = ("hostname", "ip", "nodeName", "targetRef")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    NODENAME_FIELD_NUMBER: _ClassVar[int]
    TARGETREF_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    ip: str
    nodeName: str
    targetRef: ObjectReference
    def __init__(self, hostname: _Optional[str] = ..., ip: _Optional[str] = ..., nodeName: _Optional[str] = ..., targetRef: _Optional[_Union[ObjectReference, _Mapping]] = ...) -> None: ...

class EndpointPort(_message.Message):
    __slots__ = ("appProtocol", "name", "port", "protocol")
    APPPROTOCOL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    appProtocol: str
    name: str
    port: int
    protocol: str
    def __init__(self, appProtocol: _Optional[str] = ..., name: _Optional[str] = ..., port: _Optional[int] = ..., protocol: _Optional[str] = ...) -> None: ...

class EndpointSubset(_message.Message):
    __slots__ = ("addresses", "notReadyAddresses", "ports")
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    NOTREADYADDRESSES_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    addresses: _containers.RepeatedCompositeFieldContainer[EndpointAddress]
    notReadyAddresses: _containers.RepeatedCompositeFieldContainer[EndpointAddress]
    ports: _containers.RepeatedCompositeFieldContainer[EndpointPort]
    def __init__(self, addresses: _Optional[_Iterable[_Union[EndpointAddress, _Mapping]]] = ..., notReadyAddresses: _Optional[_Iterable[_Union[EndpointAddress, _Mapping]]] = ..., ports: _Optional[_Iterable[_Union[EndpointPort, _Mapping]]] = ...) -> None: ...

class Endpoints(_message.Message):
    __slots__ = ("apiVersion", "kind", "metadata", "subsets")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SUBSETS_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    kind: str
    metadata: _meta_pb2.ObjectMeta
    subsets: _containers.RepeatedCompositeFieldContainer[EndpointSubset]
    def __init__(self, apiVersion: _Optional[str] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ObjectMeta, _Mapping]] = ..., subsets: _Optional[_Iterable[_Union[EndpointSubset, _Mapping]]] = ...) -> None: ...

class EndpointsList(_message.Message):
    __slots__ = ("apiVersion", "items", "kind", "metadata")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    items: _containers.RepeatedCompositeFieldContainer[Endpoints]
    kind: str
    metadata: _meta_pb2.ListMeta
    def __init__(self, apiVersion: _Optional[str] = ..., items: _Optional[_Iterable[_Union[Endpoints, _Mapping]]] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ListMeta, _Mapping]] = ...) -> None: ...

class EnvFromSource(_message.Message):
    __slots__ = ("configMapRef", "prefix", "secretRef")
    CONFIGMAPREF_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    SECRETREF_FIELD_NUMBER: _ClassVar[int]
    configMapRef: ConfigMapEnvSource
    prefix: str
    secretRef: SecretEnvSource
    def __init__(self, configMapRef: _Optional[_Union[ConfigMapEnvSource, _Mapping]] = ..., prefix: _Optional[str] = ..., secretRef: _Optional[_Union[SecretEnvSource, _Mapping]] = ...) -> None: ...

class EnvVar(_message.Message):
    __slots__ = ("name", "value", "valueFrom")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VALUEFROM_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    valueFrom: EnvVarSource
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., valueFrom: _Optional[_Union[EnvVarSource, _Mapping]] = ...) -> None: ...

class EnvVarSource(_message.Message):
    __slots__ = ("configMapKeyRef", "fieldRef", "fileKeyRef", "resourceFieldRef", "secretKeyRef")
    CONFIGMAPKEYREF_FIELD_NUMBER: _ClassVar[int]
    FIELDREF_FIELD_NUMBER: _ClassVar[int]
    FILEKEYREF_FIELD_NUMBER: _ClassVar[int]
    RESOURCEFIELDREF_FIELD_NUMBER: _ClassVar[int]
    SECRETKEYREF_FIELD_NUMBER: _ClassVar[int]
    configMapKeyRef: ConfigMapKeySelector
    fieldRef: ObjectFieldSelector
    fileKeyRef: FileKeySelector
    resourceFieldRef: ResourceFieldSelector
    secretKeyRef: SecretKeySelector
    def __init__(self, configMapKeyRef: _Optional[_Union[ConfigMapKeySelector, _Mapping]] = ..., fieldRef: _Optional[_Union[ObjectFieldSelector, _Mapping]] = ..., fileKeyRef: _Optional[_Union[FileKeySelector, _Mapping]] = ..., resourceFieldRef: _Optional[_Union[ResourceFieldSelector, _Mapping]] = ..., secretKeyRef: _Optional[_Union[SecretKeySelector, _Mapping]] = ...) -> None: ...

class EphemeralContainer(_message.Message):
    __slots__ = ("args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "name", "ports", "readinessProbe", "resizePolicy", "resources", "restartPolicy", "restartPolicyRules", "securityContext", "startupProbe", "stdin", "stdinOnce", "targetContainerName", "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices", "volumeMounts", "workingDir")
    ARGS_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    ENVFROM_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    IMAGEPULLPOLICY_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    LIVENESSPROBE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    READINESSPROBE_FIELD_NUMBER: _ClassVar[int]
    RESIZEPOLICY_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    RESTARTPOLICY_FIELD_NUMBER: _ClassVar[int]
    RESTARTPOLICYRULES_FIELD_NUMBER: _ClassVar[int]
    SECURITYCONTEXT_FIELD_NUMBER: _ClassVar[int]
    STARTUPPROBE_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    STDINONCE_FIELD_NUMBER: _ClassVar[int]
    TARGETCONTAINERNAME_FIELD_NUMBER: _ClassVar[int]
    TERMINATIONMESSAGEPATH_FIELD_NUMBER: _ClassVar[int]
    TERMINATIONMESSAGEPOLICY_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    VOLUMEDEVICES_FIELD_NUMBER: _ClassVar[int]
    VOLUMEMOUNTS_FIELD_NUMBER: _ClassVar[int]
    WORKINGDIR_FIELD_NUMBER: _ClassVar[int]
    args: _containers.RepeatedScalarFieldContainer[str]
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.RepeatedCompositeFieldContainer[EnvVar]
    envFrom: _containers.RepeatedCompositeFieldContainer[EnvFromSource]
    image: str
    imagePullPolicy: str
    lifecycle: Lifecycle
    livenessProbe: Probe
    name: str
    ports: _containers.RepeatedCompositeFieldContainer[ContainerPort]
    readinessProbe: Probe
    resizePolicy: _containers.RepeatedCompositeFieldContainer[ContainerResizePolicy]
    resources: ResourceRequirements
    restartPolicy: str
    restartPolicyRules: _containers.RepeatedCompositeFieldContainer[ContainerRestartRule]
    securityContext: SecurityContext
    startupProbe: Probe
    stdin: bool
    stdinOnce: bool
    targetContainerName: str
    terminationMessagePath: str
    terminationMessagePolicy: str
    tty: bool
    volumeDevices: _containers.RepeatedCompositeFieldContainer[VolumeDevice]
    volumeMounts: _containers.RepeatedCompositeFieldContainer[VolumeMount]
    workingDir: str
    def __init__(self, args: _Optional[_Iterable[str]] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Iterable[_Union[EnvVar, _Mapping]]] = ..., envFrom: _Optional[_Iterable[_Union[EnvFromSource, _Mapping]]] = ..., image: _Optional[str] = ..., imagePullPolicy: _Optional[str] = ..., lifecycle: _Optional[_Union[Lifecycle, _Mapping]] = ..., livenessProbe: _Optional[_Union[Probe, _Mapping]] = ..., name: _Optional[str] = ..., ports: _Optional[_Iterable[_Union[ContainerPort, _Mapping]]] = ..., readinessProbe: _Optional[_Union[Probe, _Mapping]] = ..., resizePolicy: _Optional[_Iterable[_Union[ContainerResizePolicy, _Mapping]]] = ..., resources: _Optional[_Union[ResourceRequirements, _Mapping]] = ..., restartPolicy: _Optional[str] = ..., restartPolicyRules: _Optional[_Iterable[_Union[ContainerRestartRule, _Mapping]]] = ..., securityContext: _Optional[_Union[SecurityContext, _Mapping]] = ..., startupProbe: _Optional[_Union[Probe, _Mapping]] = ..., stdin: _Optional[bool] = ..., stdinOnce: _Optional[bool] = ..., targetContainerName: _Optional[str] = ..., terminationMessagePath: _Optional[str] = ..., terminationMessagePolicy: _Optional[str] = ..., tty: _Optional[bool] = ..., volumeDevices: _Optional[_Iterable[_Union[VolumeDevice, _Mapping]]] = ..., volumeMounts: _Optional[_Iterable[_Union[VolumeMount, _Mapping]]] = ..., workingDir: _Optional[str] = ...) -> None: ...

class EphemeralVolumeSource(_message.Message):
    __slots__ = ("volumeClaimTemplate",)
    VOLUMECLAIMTEMPLATE_FIELD_NUMBER: _ClassVar[int]
    volumeClaimTemplate: PersistentVolumeClaimTemplate
    def __init__(self, volumeClaimTemplate: _Optional[_Union[PersistentVolumeClaimTemplate, _Mapping]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("action", "apiVersion", "count", "eventTime", "firstTimestamp", "involvedObject", "kind", "lastTimestamp", "message", "metadata", "reason", "related", "reportingComponent", "reportingInstance", "series", "source", "type")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    EVENTTIME_FIELD_NUMBER: _ClassVar[int]
    FIRSTTIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    INVOLVEDOBJECT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LASTTIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RELATED_FIELD_NUMBER: _ClassVar[int]
    REPORTINGCOMPONENT_FIELD_NUMBER: _ClassVar[int]
    REPORTINGINSTANCE_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    action: str
    apiVersion: str
    count: int
    eventTime: str
    firstTimestamp: str
    involvedObject: ObjectReference
    kind: str
    lastTimestamp: str
    message: str
    metadata: _meta_pb2.ObjectMeta
    reason: str
    related: ObjectReference
    reportingComponent: str
    reportingInstance: str
    series: EventSeries
    source: EventSource
    type: str
    def __init__(self, action: _Optional[str] = ..., apiVersion: _Optional[str] = ..., count: _Optional[int] = ..., eventTime: _Optional[str] = ..., firstTimestamp: _Optional[str] = ..., involvedObject: _Optional[_Union[ObjectReference, _Mapping]] = ..., kind: _Optional[str] = ..., lastTimestamp: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ObjectMeta, _Mapping]] = ..., reason: _Optional[str] = ..., related: _Optional[_Union[ObjectReference, _Mapping]] = ..., reportingComponent: _Optional[str] = ..., reportingInstance: _Optional[str] = ..., series: _Optional[_Union[EventSeries, _Mapping]] = ..., source: _Optional[_Union[EventSource, _Mapping]] = ..., type: _Optional[str] = ...) -> None: ...

class EventList(_message.Message):
    __slots__ = ("apiVersion", "items", "kind", "metadata")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    items: _containers.RepeatedCompositeFieldContainer[Event]
    kind: str
    metadata: _meta_pb2.ListMeta
    def __init__(self, apiVersion: _Optional[str] = ..., items: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ListMeta, _Mapping]] = ...) -> None: ...

class EventSeries(_message.Message):
    __slots__ = ("count", "lastObservedTime")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    LASTOBSERVEDTIME_FIELD_NUMBER: _ClassVar[int]
    count: int
    lastObservedTime: str
    def __init__(self, count: _Optional[int] = ..., lastObservedTime: _Optional[str] = ...) -> None: ...

class EventSource(_message.Message):
    __slots__ = ("component", "host")
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    component: str
    host: str
    def __init__(self, component: _Optional[str] = ..., host: _Optional[str] = ...) -> None: ...

class ExecAction(_message.Message):
    __slots__ = ("command",)
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    command: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, command: _Optional[_Iterable[str]] = ...) -> None: ...

class FCVolumeSource(_message.Message):
    __slots__ = ("fsType", "lun", "readOnly", "targetWWNs", "wwids")
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    LUN_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    TARGETWWNS_FIELD_NUMBER: _ClassVar[int]
    WWIDS_FIELD_NUMBER: _ClassVar[int]
    fsType: str
    lun: int
    readOnly: bool
    targetWWNs: _containers.RepeatedScalarFieldContainer[str]
    wwids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, fsType: _Optional[str] = ..., lun: _Optional[int] = ..., readOnly: _Optional[bool] = ..., targetWWNs: _Optional[_Iterable[str]] = ..., wwids: _Optional[_Iterable[str]] = ...) -> None: ...

class FileKeySelector(_message.Message):
    __slots__ = ("key", "optional", "path", "volumeName")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VOLUMENAME_FIELD_NUMBER: _ClassVar[int]
    key: str
    optional: bool
    path: str
    volumeName: str
    def __init__(self, key: _Optional[str] = ..., optional: _Optional[bool] = ..., path: _Optional[str] = ..., volumeName: _Optional[str] = ...) -> None: ...

class FlexVolumeSource(_message.Message):
    __slots__ = ("driver", "fsType", "options", "readOnly", "secretRef")
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    SECRETREF_FIELD_NUMBER: _ClassVar[int]
    driver: str
    fsType: str
    options: _containers.ScalarMap[str, str]
    readOnly: bool
    secretRef: LocalObjectReference
    def __init__(self, driver: _Optional[str] = ..., fsType: _Optional[str] = ..., options: _Optional[_Mapping[str, str]] = ..., readOnly: _Optional[bool] = ..., secretRef: _Optional[_Union[LocalObjectReference, _Mapping]] = ...) -> None: ...

class FlockerVolumeSource(_message.Message):
    __slots__ = ("datasetName", "datasetUUID")
    DATASETNAME_FIELD_NUMBER: _ClassVar[int]
    DATASETUUID_FIELD_NUMBER: _ClassVar[int]
    datasetName: str
    datasetUUID: str
    def __init__(self, datasetName: _Optional[str] = ..., datasetUUID: _Optional[str] = ...) -> None: ...

class GCEPersistentDiskVolumeSource(_message.Message):
    __slots__ = ("fsType", "partition", "pdName", "readOnly")
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PDNAME_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    fsType: str
    partition: int
    pdName: str
    readOnly: bool
    def __init__(self, fsType: _Optional[str] = ..., partition: _Optional[int] = ..., pdName: _Optional[str] = ..., readOnly: _Optional[bool] = ...) -> None: ...

class GRPCAction(_message.Message):
    __slots__ = ("port", "service")
    PORT_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    port: int
    service: str
    def __init__(self, port: _Optional[int] = ..., service: _Optional[str] = ...) -> None: ...

class GitRepoVolumeSource(_message.Message):
    __slots__ = ("directory", "repository", "revision")
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    directory: str
    repository: str
    revision: str
    def __init__(self, directory: _Optional[str] = ..., repository: _Optional[str] = ..., revision: _Optional[str] = ...) -> None: ...

class GlusterfsVolumeSource(_message.Message):
    __slots__ = ("endpoints", "path", "readOnly")
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    endpoints: str
    path: str
    readOnly: bool
    def __init__(self, endpoints: _Optional[str] = ..., path: _Optional[str] = ..., readOnly: _Optional[bool] = ...) -> None: ...

class HTTPGetAction(_message.Message):
    __slots__ = ("host", "httpHeaders", "path", "port", "scheme")
    HOST_FIELD_NUMBER: _ClassVar[int]
    HTTPHEADERS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    host: str
    httpHeaders: _containers.RepeatedCompositeFieldContainer[HTTPHeader]
    path: str
    port: str
    scheme: str
    def __init__(self, host: _Optional[str] = ..., httpHeaders: _Optional[_Iterable[_Union[HTTPHeader, _Mapping]]] = ..., path: _Optional[str] = ..., port: _Optional[str] = ..., scheme: _Optional[str] = ...) -> None: ...

class HTTPHeader(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class HostAlias(_message.Message):
    __slots__ = ("hostnames", "ip")
    HOSTNAMES_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    hostnames: _containers.RepeatedScalarFieldContainer[str]
    ip: str
    def __init__(self, hostnames: _Optional[_Iterable[str]] = ..., ip: _Optional[str] = ...) -> None: ...

class HostIP(_message.Message):
    __slots__ = ("ip",)
    IP_FIELD_NUMBER: _ClassVar[int]
    ip: str
    def __init__(self, ip: _Optional[str] = ...) -> None: ...

class HostPathVolumeSource(_message.Message):
    __slots__ = ("path", "type")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    path: str
    type: str
    def __init__(self, path: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class ISCSIVolumeSource(_message.Message):
    __slots__ = ("chapAuthDiscovery", "chapAuthSession", "fsType", "initiatorName", "iqn", "iscsiInterface", "lun", "portals", "readOnly", "secretRef", "targetPortal")
    CHAPAUTHDISCOVERY_FIELD_NUMBER: _ClassVar[int]
    CHAPAUTHSESSION_FIELD_NUMBER: _ClassVar[int]
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    INITIATORNAME_FIELD_NUMBER: _ClassVar[int]
    IQN_FIELD_NUMBER: _ClassVar[int]
    ISCSIINTERFACE_FIELD_NUMBER: _ClassVar[int]
    LUN_FIELD_NUMBER: _ClassVar[int]
    PORTALS_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    SECRETREF_FIELD_NUMBER: _ClassVar[int]
    TARGETPORTAL_FIELD_NUMBER: _ClassVar[int]
    chapAuthDiscovery: bool
    chapAuthSession: bool
    fsType: str
    initiatorName: str
    iqn: str
    iscsiInterface: str
    lun: int
    portals: _containers.RepeatedScalarFieldContainer[str]
    readOnly: bool
    secretRef: LocalObjectReference
    targetPortal: str
    def __init__(self, chapAuthDiscovery: _Optional[bool] = ..., chapAuthSession: _Optional[bool] = ..., fsType: _Optional[str] = ..., initiatorName: _Optional[str] = ..., iqn: _Optional[str] = ..., iscsiInterface: _Optional[str] = ..., lun: _Optional[int] = ..., portals: _Optional[_Iterable[str]] = ..., readOnly: _Optional[bool] = ..., secretRef: _Optional[_Union[LocalObjectReference, _Mapping]] = ..., targetPortal: _Optional[str] = ...) -> None: ...

class ImageVolumeSource(_message.Message):
    __slots__ = ("pullPolicy", "reference")
    PULLPOLICY_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    pullPolicy: str
    reference: str
    def __init__(self, pullPolicy: _Optional[str] = ..., reference: _Optional[str] = ...) -> None: ...

class ImageVolumeStatus(_message.Message):
    __slots__ = ("imageRef",)
    IMAGEREF_FIELD_NUMBER: _ClassVar[int]
    imageRef: str
    def __init__(self, imageRef: _Optional[str] = ...) -> None: ...

class KeyToPath(_message.Message):
    __slots__ = ("key", "mode", "path")
    KEY_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    key: str
    mode: int
    path: str
    def __init__(self, key: _Optional[str] = ..., mode: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class Lifecycle(_message.Message):
    __slots__ = ("postStart", "preStop", "stopSignal")
    POSTSTART_FIELD_NUMBER: _ClassVar[int]
    PRESTOP_FIELD_NUMBER: _ClassVar[int]
    STOPSIGNAL_FIELD_NUMBER: _ClassVar[int]
    postStart: LifecycleHandler
    preStop: LifecycleHandler
    stopSignal: str
    def __init__(self, postStart: _Optional[_Union[LifecycleHandler, _Mapping]] = ..., preStop: _Optional[_Union[LifecycleHandler, _Mapping]] = ..., stopSignal: _Optional[str] = ...) -> None: ...

class LifecycleHandler(_message.Message):
    __slots__ = ("exec", "httpGet", "sleep", "tcpSocket")
    EXEC_FIELD_NUMBER: _ClassVar[int]
    HTTPGET_FIELD_NUMBER: _ClassVar[int]
    SLEEP_FIELD_NUMBER: _ClassVar[int]
    TCPSOCKET_FIELD_NUMBER: _ClassVar[int]
    exec: ExecAction
    httpGet: HTTPGetAction
    sleep: SleepAction
    tcpSocket: TCPSocketAction
    def __init__(self, exec: _Optional[_Union[ExecAction, _Mapping]] = ..., httpGet: _Optional[_Union[HTTPGetAction, _Mapping]] = ..., sleep: _Optional[_Union[SleepAction, _Mapping]] = ..., tcpSocket: _Optional[_Union[TCPSocketAction, _Mapping]] = ...) -> None: ...

class LinuxContainerUser(_message.Message):
    __slots__ = ("gid", "supplementalGroups", "uid")
    GID_FIELD_NUMBER: _ClassVar[int]
    SUPPLEMENTALGROUPS_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    gid: int
    supplementalGroups: _containers.RepeatedScalarFieldContainer[int]
    uid: int
    def __init__(self, gid: _Optional[int] = ..., supplementalGroups: _Optional[_Iterable[int]] = ..., uid: _Optional[int] = ...) -> None: ...

class LocalObjectReference(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class NFSVolumeSource(_message.Message):
    __slots__ = ("path", "readOnly", "server")
    PATH_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    path: str
    readOnly: bool
    server: str
    def __init__(self, path: _Optional[str] = ..., readOnly: _Optional[bool] = ..., server: _Optional[str] = ...) -> None: ...

class NodeAffinity(_message.Message):
    __slots__ = ("preferredDuringSchedulingIgnoredDuringExecution", "requiredDuringSchedulingIgnoredDuringExecution")
    PREFERREDDURINGSCHEDULINGIGNOREDDURINGEXECUTION_FIELD_NUMBER: _ClassVar[int]
    REQUIREDDURINGSCHEDULINGIGNOREDDURINGEXECUTION_FIELD_NUMBER: _ClassVar[int]
    preferredDuringSchedulingIgnoredDuringExecution: _containers.RepeatedCompositeFieldContainer[PreferredSchedulingTerm]
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector
    def __init__(self, preferredDuringSchedulingIgnoredDuringExecution: _Optional[_Iterable[_Union[PreferredSchedulingTerm, _Mapping]]] = ..., requiredDuringSchedulingIgnoredDuringExecution: _Optional[_Union[NodeSelector, _Mapping]] = ...) -> None: ...

class NodeAllocatableResourceClaimStatus(_message.Message):
    __slots__ = ("containers", "resourceClaimName", "resources")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    RESOURCECLAIMNAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    containers: _containers.RepeatedScalarFieldContainer[str]
    resourceClaimName: str
    resources: _containers.ScalarMap[str, str]
    def __init__(self, containers: _Optional[_Iterable[str]] = ..., resourceClaimName: _Optional[str] = ..., resources: _Optional[_Mapping[str, str]] = ...) -> None: ...

class NodeSelector(_message.Message):
    __slots__ = ("nodeSelectorTerms",)
    NODESELECTORTERMS_FIELD_NUMBER: _ClassVar[int]
    nodeSelectorTerms: _containers.RepeatedCompositeFieldContainer[NodeSelectorTerm]
    def __init__(self, nodeSelectorTerms: _Optional[_Iterable[_Union[NodeSelectorTerm, _Mapping]]] = ...) -> None: ...

class NodeSelectorRequirement(_message.Message):
    __slots__ = ("key", "operator", "values")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    key: str
    operator: str
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, key: _Optional[str] = ..., operator: _Optional[str] = ..., values: _Optional[_Iterable[str]] = ...) -> None: ...

class NodeSelectorTerm(_message.Message):
    __slots__ = ("matchExpressions", "matchFields")
    MATCHEXPRESSIONS_FIELD_NUMBER: _ClassVar[int]
    MATCHFIELDS_FIELD_NUMBER: _ClassVar[int]
    matchExpressions: _containers.RepeatedCompositeFieldContainer[NodeSelectorRequirement]
    matchFields: _containers.RepeatedCompositeFieldContainer[NodeSelectorRequirement]
    def __init__(self, matchExpressions: _Optional[_Iterable[_Union[NodeSelectorRequirement, _Mapping]]] = ..., matchFields: _Optional[_Iterable[_Union[NodeSelectorRequirement, _Mapping]]] = ...) -> None: ...

class ObjectFieldSelector(_message.Message):
    __slots__ = ("apiVersion", "fieldPath")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    FIELDPATH_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    fieldPath: str
    def __init__(self, apiVersion: _Optional[str] = ..., fieldPath: _Optional[str] = ...) -> None: ...

class ObjectReference(_message.Message):
    __slots__ = ("apiVersion", "fieldPath", "kind", "name", "namespace", "resourceVersion", "uid")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    FIELDPATH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RESOURCEVERSION_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    fieldPath: str
    kind: str
    name: str
    namespace: str
    resourceVersion: str
    uid: str
    def __init__(self, apiVersion: _Optional[str] = ..., fieldPath: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ..., resourceVersion: _Optional[str] = ..., uid: _Optional[str] = ...) -> None: ...

class PersistentVolumeClaimSpec(_message.Message):
    __slots__ = ("accessModes", "dataSource", "dataSourceRef", "resources", "selector", "storageClassName", "volumeAttributesClassName", "volumeMode", "volumeName")
    ACCESSMODES_FIELD_NUMBER: _ClassVar[int]
    DATASOURCE_FIELD_NUMBER: _ClassVar[int]
    DATASOURCEREF_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    STORAGECLASSNAME_FIELD_NUMBER: _ClassVar[int]
    VOLUMEATTRIBUTESCLASSNAME_FIELD_NUMBER: _ClassVar[int]
    VOLUMEMODE_FIELD_NUMBER: _ClassVar[int]
    VOLUMENAME_FIELD_NUMBER: _ClassVar[int]
    accessModes: _containers.RepeatedScalarFieldContainer[str]
    dataSource: TypedLocalObjectReference
    dataSourceRef: TypedObjectReference
    resources: VolumeResourceRequirements
    selector: _meta_pb2.LabelSelector
    storageClassName: str
    volumeAttributesClassName: str
    volumeMode: str
    volumeName: str
    def __init__(self, accessModes: _Optional[_Iterable[str]] = ..., dataSource: _Optional[_Union[TypedLocalObjectReference, _Mapping]] = ..., dataSourceRef: _Optional[_Union[TypedObjectReference, _Mapping]] = ..., resources: _Optional[_Union[VolumeResourceRequirements, _Mapping]] = ..., selector: _Optional[_Union[_meta_pb2.LabelSelector, _Mapping]] = ..., storageClassName: _Optional[str] = ..., volumeAttributesClassName: _Optional[str] = ..., volumeMode: _Optional[str] = ..., volumeName: _Optional[str] = ...) -> None: ...

class PersistentVolumeClaimTemplate(_message.Message):
    __slots__ = ("metadata", "spec")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    metadata: _meta_pb2.ObjectMeta
    spec: PersistentVolumeClaimSpec
    def __init__(self, metadata: _Optional[_Union[_meta_pb2.ObjectMeta, _Mapping]] = ..., spec: _Optional[_Union[PersistentVolumeClaimSpec, _Mapping]] = ...) -> None: ...

class PersistentVolumeClaimVolumeSource(_message.Message):
    __slots__ = ("claimName", "readOnly")
    CLAIMNAME_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    claimName: str
    readOnly: bool
    def __init__(self, claimName: _Optional[str] = ..., readOnly: _Optional[bool] = ...) -> None: ...

class PhotonPersistentDiskVolumeSource(_message.Message):
    __slots__ = ("fsType", "pdID")
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    PDID_FIELD_NUMBER: _ClassVar[int]
    fsType: str
    pdID: str
    def __init__(self, fsType: _Optional[str] = ..., pdID: _Optional[str] = ...) -> None: ...

class Pod(_message.Message):
    __slots__ = ("apiVersion", "kind", "metadata", "spec", "status")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    kind: str
    metadata: _meta_pb2.ObjectMeta
    spec: PodSpec
    status: PodStatus
    def __init__(self, apiVersion: _Optional[str] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ObjectMeta, _Mapping]] = ..., spec: _Optional[_Union[PodSpec, _Mapping]] = ..., status: _Optional[_Union[PodStatus, _Mapping]] = ...) -> None: ...

class PodAffinity(_message.Message):
    __slots__ = ("preferredDuringSchedulingIgnoredDuringExecution", "requiredDuringSchedulingIgnoredDuringExecution")
    PREFERREDDURINGSCHEDULINGIGNOREDDURINGEXECUTION_FIELD_NUMBER: _ClassVar[int]
    REQUIREDDURINGSCHEDULINGIGNOREDDURINGEXECUTION_FIELD_NUMBER: _ClassVar[int]
    preferredDuringSchedulingIgnoredDuringExecution: _containers.RepeatedCompositeFieldContainer[WeightedPodAffinityTerm]
    requiredDuringSchedulingIgnoredDuringExecution: _containers.RepeatedCompositeFieldContainer[PodAffinityTerm]
    def __init__(self, preferredDuringSchedulingIgnoredDuringExecution: _Optional[_Iterable[_Union[WeightedPodAffinityTerm, _Mapping]]] = ..., requiredDuringSchedulingIgnoredDuringExecution: _Optional[_Iterable[_Union[PodAffinityTerm, _Mapping]]] = ...) -> None: ...

class PodAffinityTerm(_message.Message):
    __slots__ = ("labelSelector", "matchLabelKeys", "mismatchLabelKeys", "namespaceSelector", "namespaces", "topologyKey")
    LABELSELECTOR_FIELD_NUMBER: _ClassVar[int]
    MATCHLABELKEYS_FIELD_NUMBER: _ClassVar[int]
    MISMATCHLABELKEYS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACESELECTOR_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGYKEY_FIELD_NUMBER: _ClassVar[int]
    labelSelector: _meta_pb2.LabelSelector
    matchLabelKeys: _containers.RepeatedScalarFieldContainer[str]
    mismatchLabelKeys: _containers.RepeatedScalarFieldContainer[str]
    namespaceSelector: _meta_pb2.LabelSelector
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    topologyKey: str
    def __init__(self, labelSelector: _Optional[_Union[_meta_pb2.LabelSelector, _Mapping]] = ..., matchLabelKeys: _Optional[_Iterable[str]] = ..., mismatchLabelKeys: _Optional[_Iterable[str]] = ..., namespaceSelector: _Optional[_Union[_meta_pb2.LabelSelector, _Mapping]] = ..., namespaces: _Optional[_Iterable[str]] = ..., topologyKey: _Optional[str] = ...) -> None: ...

class PodAntiAffinity(_message.Message):
    __slots__ = ("preferredDuringSchedulingIgnoredDuringExecution", "requiredDuringSchedulingIgnoredDuringExecution")
    PREFERREDDURINGSCHEDULINGIGNOREDDURINGEXECUTION_FIELD_NUMBER: _ClassVar[int]
    REQUIREDDURINGSCHEDULINGIGNOREDDURINGEXECUTION_FIELD_NUMBER: _ClassVar[int]
    preferredDuringSchedulingIgnoredDuringExecution: _containers.RepeatedCompositeFieldContainer[WeightedPodAffinityTerm]
    requiredDuringSchedulingIgnoredDuringExecution: _containers.RepeatedCompositeFieldContainer[PodAffinityTerm]
    def __init__(self, preferredDuringSchedulingIgnoredDuringExecution: _Optional[_Iterable[_Union[WeightedPodAffinityTerm, _Mapping]]] = ..., requiredDuringSchedulingIgnoredDuringExecution: _Optional[_Iterable[_Union[PodAffinityTerm, _Mapping]]] = ...) -> None: ...

class PodCertificateProjection(_message.Message):
    __slots__ = ("certificateChainPath", "credentialBundlePath", "keyPath", "keyType", "maxExpirationSeconds", "signerName", "userAnnotations")
    class UserAnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CERTIFICATECHAINPATH_FIELD_NUMBER: _ClassVar[int]
    CREDENTIALBUNDLEPATH_FIELD_NUMBER: _ClassVar[int]
    KEYPATH_FIELD_NUMBER: _ClassVar[int]
    KEYTYPE_FIELD_NUMBER: _ClassVar[int]
    MAXEXPIRATIONSECONDS_FIELD_NUMBER: _ClassVar[int]
    SIGNERNAME_FIELD_NUMBER: _ClassVar[int]
    USERANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    certificateChainPath: str
    credentialBundlePath: str
    keyPath: str
    keyType: str
    maxExpirationSeconds: int
    signerName: str
    userAnnotations: _containers.ScalarMap[str, str]
    def __init__(self, certificateChainPath: _Optional[str] = ..., credentialBundlePath: _Optional[str] = ..., keyPath: _Optional[str] = ..., keyType: _Optional[str] = ..., maxExpirationSeconds: _Optional[int] = ..., signerName: _Optional[str] = ..., userAnnotations: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PodCondition(_message.Message):
    __slots__ = ("lastProbeTime", "lastTransitionTime", "message", "observedGeneration", "reason", "status", "type")
    LASTPROBETIME_FIELD_NUMBER: _ClassVar[int]
    LASTTRANSITIONTIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OBSERVEDGENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    lastProbeTime: str
    lastTransitionTime: str
    message: str
    observedGeneration: int
    reason: str
    status: str
    type: str
    def __init__(self, lastProbeTime: _Optional[str] = ..., lastTransitionTime: _Optional[str] = ..., message: _Optional[str] = ..., observedGeneration: _Optional[int] = ..., reason: _Optional[str] = ..., status: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class PodDNSConfig(_message.Message):
    __slots__ = ("nameservers", "options", "searches")
    NAMESERVERS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SEARCHES_FIELD_NUMBER: _ClassVar[int]
    nameservers: _containers.RepeatedScalarFieldContainer[str]
    options: _containers.RepeatedCompositeFieldContainer[PodDNSConfigOption]
    searches: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, nameservers: _Optional[_Iterable[str]] = ..., options: _Optional[_Iterable[_Union[PodDNSConfigOption, _Mapping]]] = ..., searches: _Optional[_Iterable[str]] = ...) -> None: ...

class PodDNSConfigOption(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class PodExtendedResourceClaimStatus(_message.Message):
    __slots__ = ("requestMappings", "resourceClaimName")
    REQUESTMAPPINGS_FIELD_NUMBER: _ClassVar[int]
    RESOURCECLAIMNAME_FIELD_NUMBER: _ClassVar[int]
    requestMappings: _containers.RepeatedCompositeFieldContainer[ContainerExtendedResourceRequest]
    resourceClaimName: str
    def __init__(self, requestMappings: _Optional[_Iterable[_Union[ContainerExtendedResourceRequest, _Mapping]]] = ..., resourceClaimName: _Optional[str] = ...) -> None: ...

class PodIP(_message.Message):
    __slots__ = ("ip",)
    IP_FIELD_NUMBER: _ClassVar[int]
    ip: str
    def __init__(self, ip: _Optional[str] = ...) -> None: ...

class PodList(_message.Message):
    __slots__ = ("apiVersion", "items", "kind", "metadata")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    items: _containers.RepeatedCompositeFieldContainer[Pod]
    kind: str
    metadata: _meta_pb2.ListMeta
    def __init__(self, apiVersion: _Optional[str] = ..., items: _Optional[_Iterable[_Union[Pod, _Mapping]]] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ListMeta, _Mapping]] = ...) -> None: ...

class PodOS(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PodReadinessGate(_message.Message):
    __slots__ = ("conditionType",)
    CONDITIONTYPE_FIELD_NUMBER: _ClassVar[int]
    conditionType: str
    def __init__(self, conditionType: _Optional[str] = ...) -> None: ...

class PodResourceClaim(_message.Message):
    __slots__ = ("name", "resourceClaimName", "resourceClaimTemplateName")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCECLAIMNAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCECLAIMTEMPLATENAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    resourceClaimName: str
    resourceClaimTemplateName: str
    def __init__(self, name: _Optional[str] = ..., resourceClaimName: _Optional[str] = ..., resourceClaimTemplateName: _Optional[str] = ...) -> None: ...

class PodResourceClaimStatus(_message.Message):
    __slots__ = ("name", "resourceClaimName")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCECLAIMNAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    resourceClaimName: str
    def __init__(self, name: _Optional[str] = ..., resourceClaimName: _Optional[str] = ...) -> None: ...

class PodSchedulingGate(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PodSchedulingGroup(_message.Message):
    __slots__ = ("podGroupName",)
    PODGROUPNAME_FIELD_NUMBER: _ClassVar[int]
    podGroupName: str
    def __init__(self, podGroupName: _Optional[str] = ...) -> None: ...

class PodSecurityContext(_message.Message):
    __slots__ = ("appArmorProfile", "fsGroup", "fsGroupChangePolicy", "runAsGroup", "runAsNonRoot", "runAsUser", "seLinuxChangePolicy", "seLinuxOptions", "seccompProfile", "supplementalGroups", "supplementalGroupsPolicy", "sysctls", "windowsOptions")
    APPARMORPROFILE_FIELD_NUMBER: _ClassVar[int]
    FSGROUP_FIELD_NUMBER: _ClassVar[int]
    FSGROUPCHANGEPOLICY_FIELD_NUMBER: _ClassVar[int]
    RUNASGROUP_FIELD_NUMBER: _ClassVar[int]
    RUNASNONROOT_FIELD_NUMBER: _ClassVar[int]
    RUNASUSER_FIELD_NUMBER: _ClassVar[int]
    SELINUXCHANGEPOLICY_FIELD_NUMBER: _ClassVar[int]
    SELINUXOPTIONS_FIELD_NUMBER: _ClassVar[int]
    SECCOMPPROFILE_FIELD_NUMBER: _ClassVar[int]
    SUPPLEMENTALGROUPS_FIELD_NUMBER: _ClassVar[int]
    SUPPLEMENTALGROUPSPOLICY_FIELD_NUMBER: _ClassVar[int]
    SYSCTLS_FIELD_NUMBER: _ClassVar[int]
    WINDOWSOPTIONS_FIELD_NUMBER: _ClassVar[int]
    appArmorProfile: AppArmorProfile
    fsGroup: int
    fsGroupChangePolicy: str
    runAsGroup: int
    runAsNonRoot: bool
    runAsUser: int
    seLinuxChangePolicy: str
    seLinuxOptions: SELinuxOptions
    seccompProfile: SeccompProfile
    supplementalGroups: _containers.RepeatedScalarFieldContainer[int]
    supplementalGroupsPolicy: str
    sysctls: _containers.RepeatedCompositeFieldContainer[Sysctl]
    windowsOptions: WindowsSecurityContextOptions
    def __init__(self, appArmorProfile: _Optional[_Union[AppArmorProfile, _Mapping]] = ..., fsGroup: _Optional[int] = ..., fsGroupChangePolicy: _Optional[str] = ..., runAsGroup: _Optional[int] = ..., runAsNonRoot: _Optional[bool] = ..., runAsUser: _Optional[int] = ..., seLinuxChangePolicy: _Optional[str] = ..., seLinuxOptions: _Optional[_Union[SELinuxOptions, _Mapping]] = ..., seccompProfile: _Optional[_Union[SeccompProfile, _Mapping]] = ..., supplementalGroups: _Optional[_Iterable[int]] = ..., supplementalGroupsPolicy: _Optional[str] = ..., sysctls: _Optional[_Iterable[_Union[Sysctl, _Mapping]]] = ..., windowsOptions: _Optional[_Union[WindowsSecurityContextOptions, _Mapping]] = ...) -> None: ...

class PodSpec(_message.Message):
    __slots__ = ("activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers", "dnsConfig", "dnsPolicy", "enableServiceLinks", "ephemeralContainers", "hostAliases", "hostIPC", "hostNetwork", "hostPID", "hostUsers", "hostname", "hostnameOverride", "imagePullSecrets", "initContainers", "nodeName", "nodeSelector", "os", "overhead", "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "resourceClaims", "resources", "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates", "schedulingGroup", "securityContext", "serviceAccount", "serviceAccountName", "setHostnameAsFQDN", "shareProcessNamespace", "subdomain", "terminationGracePeriodSeconds", "tolerations", "topologySpreadConstraints", "volumes")
    class NodeSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class OverheadEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTIVEDEADLINESECONDS_FIELD_NUMBER: _ClassVar[int]
    AFFINITY_FIELD_NUMBER: _ClassVar[int]
    AUTOMOUNTSERVICEACCOUNTTOKEN_FIELD_NUMBER: _ClassVar[int]
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    DNSCONFIG_FIELD_NUMBER: _ClassVar[int]
    DNSPOLICY_FIELD_NUMBER: _ClassVar[int]
    ENABLESERVICELINKS_FIELD_NUMBER: _ClassVar[int]
    EPHEMERALCONTAINERS_FIELD_NUMBER: _ClassVar[int]
    HOSTALIASES_FIELD_NUMBER: _ClassVar[int]
    HOSTIPC_FIELD_NUMBER: _ClassVar[int]
    HOSTNETWORK_FIELD_NUMBER: _ClassVar[int]
    HOSTPID_FIELD_NUMBER: _ClassVar[int]
    HOSTUSERS_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    HOSTNAMEOVERRIDE_FIELD_NUMBER: _ClassVar[int]
    IMAGEPULLSECRETS_FIELD_NUMBER: _ClassVar[int]
    INITCONTAINERS_FIELD_NUMBER: _ClassVar[int]
    NODENAME_FIELD_NUMBER: _ClassVar[int]
    NODESELECTOR_FIELD_NUMBER: _ClassVar[int]
    OS_FIELD_NUMBER: _ClassVar[int]
    OVERHEAD_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONPOLICY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PRIORITYCLASSNAME_FIELD_NUMBER: _ClassVar[int]
    READINESSGATES_FIELD_NUMBER: _ClassVar[int]
    RESOURCECLAIMS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    RESTARTPOLICY_FIELD_NUMBER: _ClassVar[int]
    RUNTIMECLASSNAME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULERNAME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULINGGATES_FIELD_NUMBER: _ClassVar[int]
    SCHEDULINGGROUP_FIELD_NUMBER: _ClassVar[int]
    SECURITYCONTEXT_FIELD_NUMBER: _ClassVar[int]
    SERVICEACCOUNT_FIELD_NUMBER: _ClassVar[int]
    SERVICEACCOUNTNAME_FIELD_NUMBER: _ClassVar[int]
    SETHOSTNAMEASFQDN_FIELD_NUMBER: _ClassVar[int]
    SHAREPROCESSNAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SUBDOMAIN_FIELD_NUMBER: _ClassVar[int]
    TERMINATIONGRACEPERIODSECONDS_FIELD_NUMBER: _ClassVar[int]
    TOLERATIONS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGYSPREADCONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    activeDeadlineSeconds: int
    affinity: Affinity
    automountServiceAccountToken: bool
    containers: _containers.RepeatedCompositeFieldContainer[Container]
    dnsConfig: PodDNSConfig
    dnsPolicy: str
    enableServiceLinks: bool
    ephemeralContainers: _containers.RepeatedCompositeFieldContainer[EphemeralContainer]
    hostAliases: _containers.RepeatedCompositeFieldContainer[HostAlias]
    hostIPC: bool
    hostNetwork: bool
    hostPID: bool
    hostUsers: bool
    hostname: str
    hostnameOverride: str
    imagePullSecrets: _containers.RepeatedCompositeFieldContainer[LocalObjectReference]
    initContainers: _containers.RepeatedCompositeFieldContainer[Container]
    nodeName: str
    nodeSelector: _containers.ScalarMap[str, str]
    os: PodOS
    overhead: _containers.ScalarMap[str, str]
    preemptionPolicy: str
    priority: int
    priorityClassName: str
    readinessGates: _containers.RepeatedCompositeFieldContainer[PodReadinessGate]
    resourceClaims: _containers.RepeatedCompositeFieldContainer[PodResourceClaim]
    resources: ResourceRequirements
    restartPolicy: str
    runtimeClassName: str
    schedulerName: str
    schedulingGates: _containers.RepeatedCompositeFieldContainer[PodSchedulingGate]
    schedulingGroup: PodSchedulingGroup
    securityContext: PodSecurityContext
    serviceAccount: str
    serviceAccountName: str
    setHostnameAsFQDN: bool
    shareProcessNamespace: bool
    subdomain: str
    terminationGracePeriodSeconds: int
    tolerations: _containers.RepeatedCompositeFieldContainer[Toleration]
    topologySpreadConstraints: _containers.RepeatedCompositeFieldContainer[TopologySpreadConstraint]
    volumes: _containers.RepeatedCompositeFieldContainer[Volume]
    def __init__(self, activeDeadlineSeconds: _Optional[int] = ..., affinity: _Optional[_Union[Affinity, _Mapping]] = ..., automountServiceAccountToken: _Optional[bool] = ..., containers: _Optional[_Iterable[_Union[Container, _Mapping]]] = ..., dnsConfig: _Optional[_Union[PodDNSConfig, _Mapping]] = ..., dnsPolicy: _Optional[str] = ..., enableServiceLinks: _Optional[bool] = ..., ephemeralContainers: _Optional[_Iterable[_Union[EphemeralContainer, _Mapping]]] = ..., hostAliases: _Optional[_Iterable[_Union[HostAlias, _Mapping]]] = ..., hostIPC: _Optional[bool] = ..., hostNetwork: _Optional[bool] = ..., hostPID: _Optional[bool] = ..., hostUsers: _Optional[bool] = ..., hostname: _Optional[str] = ..., hostnameOverride: _Optional[str] = ..., imagePullSecrets: _Optional[_Iterable[_Union[LocalObjectReference, _Mapping]]] = ..., initContainers: _Optional[_Iterable[_Union[Container, _Mapping]]] = ..., nodeName: _Optional[str] = ..., nodeSelector: _Optional[_Mapping[str, str]] = ..., os: _Optional[_Union[PodOS, _Mapping]] = ..., overhead: _Optional[_Mapping[str, str]] = ..., preemptionPolicy: _Optional[str] = ..., priority: _Optional[int] = ..., priorityClassName: _Optional[str] = ..., readinessGates: _Optional[_Iterable[_Union[PodReadinessGate, _Mapping]]] = ..., resourceClaims: _Optional[_Iterable[_Union[PodResourceClaim, _Mapping]]] = ..., resources: _Optional[_Union[ResourceRequirements, _Mapping]] = ..., restartPolicy: _Optional[str] = ..., runtimeClassName: _Optional[str] = ..., schedulerName: _Optional[str] = ..., schedulingGates: _Optional[_Iterable[_Union[PodSchedulingGate, _Mapping]]] = ..., schedulingGroup: _Optional[_Union[PodSchedulingGroup, _Mapping]] = ..., securityContext: _Optional[_Union[PodSecurityContext, _Mapping]] = ..., serviceAccount: _Optional[str] = ..., serviceAccountName: _Optional[str] = ..., setHostnameAsFQDN: _Optional[bool] = ..., shareProcessNamespace: _Optional[bool] = ..., subdomain: _Optional[str] = ..., terminationGracePeriodSeconds: _Optional[int] = ..., tolerations: _Optional[_Iterable[_Union[Toleration, _Mapping]]] = ..., topologySpreadConstraints: _Optional[_Iterable[_Union[TopologySpreadConstraint, _Mapping]]] = ..., volumes: _Optional[_Iterable[_Union[Volume, _Mapping]]] = ...) -> None: ...

class PodStatus(_message.Message):
    __slots__ = ("allocatedResources", "conditions", "containerStatuses", "ephemeralContainerStatuses", "extendedResourceClaimStatus", "hostIP", "hostIPs", "initContainerStatuses", "message", "nodeAllocatableResourceClaimStatuses", "nominatedNodeName", "observedGeneration", "phase", "podIP", "podIPs", "qosClass", "reason", "resize", "resourceClaimStatuses", "resources", "startTime")
    class AllocatedResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ALLOCATEDRESOURCES_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    CONTAINERSTATUSES_FIELD_NUMBER: _ClassVar[int]
    EPHEMERALCONTAINERSTATUSES_FIELD_NUMBER: _ClassVar[int]
    EXTENDEDRESOURCECLAIMSTATUS_FIELD_NUMBER: _ClassVar[int]
    HOSTIP_FIELD_NUMBER: _ClassVar[int]
    HOSTIPS_FIELD_NUMBER: _ClassVar[int]
    INITCONTAINERSTATUSES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODEALLOCATABLERESOURCECLAIMSTATUSES_FIELD_NUMBER: _ClassVar[int]
    NOMINATEDNODENAME_FIELD_NUMBER: _ClassVar[int]
    OBSERVEDGENERATION_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    PODIP_FIELD_NUMBER: _ClassVar[int]
    PODIPS_FIELD_NUMBER: _ClassVar[int]
    QOSCLASS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    RESOURCECLAIMSTATUSES_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    STARTTIME_FIELD_NUMBER: _ClassVar[int]
    allocatedResources: _containers.ScalarMap[str, str]
    conditions: _containers.RepeatedCompositeFieldContainer[PodCondition]
    containerStatuses: _containers.RepeatedCompositeFieldContainer[ContainerStatus]
    ephemeralContainerStatuses: _containers.RepeatedCompositeFieldContainer[ContainerStatus]
    extendedResourceClaimStatus: PodExtendedResourceClaimStatus
    hostIP: str
    hostIPs: _containers.RepeatedCompositeFieldContainer[HostIP]
    initContainerStatuses: _containers.RepeatedCompositeFieldContainer[ContainerStatus]
    message: str
    nodeAllocatableResourceClaimStatuses: _containers.RepeatedCompositeFieldContainer[NodeAllocatableResourceClaimStatus]
    nominatedNodeName: str
    observedGeneration: int
    phase: str
    podIP: str
    podIPs: _containers.RepeatedCompositeFieldContainer[PodIP]
    qosClass: str
    reason: str
    resize: str
    resourceClaimStatuses: _containers.RepeatedCompositeFieldContainer[PodResourceClaimStatus]
    resources: ResourceRequirements
    startTime: str
    def __init__(self, allocatedResources: _Optional[_Mapping[str, str]] = ..., conditions: _Optional[_Iterable[_Union[PodCondition, _Mapping]]] = ..., containerStatuses: _Optional[_Iterable[_Union[ContainerStatus, _Mapping]]] = ..., ephemeralContainerStatuses: _Optional[_Iterable[_Union[ContainerStatus, _Mapping]]] = ..., extendedResourceClaimStatus: _Optional[_Union[PodExtendedResourceClaimStatus, _Mapping]] = ..., hostIP: _Optional[str] = ..., hostIPs: _Optional[_Iterable[_Union[HostIP, _Mapping]]] = ..., initContainerStatuses: _Optional[_Iterable[_Union[ContainerStatus, _Mapping]]] = ..., message: _Optional[str] = ..., nodeAllocatableResourceClaimStatuses: _Optional[_Iterable[_Union[NodeAllocatableResourceClaimStatus, _Mapping]]] = ..., nominatedNodeName: _Optional[str] = ..., observedGeneration: _Optional[int] = ..., phase: _Optional[str] = ..., podIP: _Optional[str] = ..., podIPs: _Optional[_Iterable[_Union[PodIP, _Mapping]]] = ..., qosClass: _Optional[str] = ..., reason: _Optional[str] = ..., resize: _Optional[str] = ..., resourceClaimStatuses: _Optional[_Iterable[_Union[PodResourceClaimStatus, _Mapping]]] = ..., resources: _Optional[_Union[ResourceRequirements, _Mapping]] = ..., startTime: _Optional[str] = ...) -> None: ...

class PortworxVolumeSource(_message.Message):
    __slots__ = ("fsType", "readOnly", "volumeID")
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    VOLUMEID_FIELD_NUMBER: _ClassVar[int]
    fsType: str
    readOnly: bool
    volumeID: str
    def __init__(self, fsType: _Optional[str] = ..., readOnly: _Optional[bool] = ..., volumeID: _Optional[str] = ...) -> None: ...

class PreferredSchedulingTerm(_message.Message):
    __slots__ = ("preference", "weight")
    PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    preference: NodeSelectorTerm
    weight: int
    def __init__(self, preference: _Optional[_Union[NodeSelectorTerm, _Mapping]] = ..., weight: _Optional[int] = ...) -> None: ...

class Probe(_message.Message):
    __slots__ = ("exec", "failureThreshold", "grpc", "httpGet", "initialDelaySeconds", "periodSeconds", "successThreshold", "tcpSocket", "terminationGracePeriodSeconds", "timeoutSeconds")
    EXEC_FIELD_NUMBER: _ClassVar[int]
    FAILURETHRESHOLD_FIELD_NUMBER: _ClassVar[int]
    GRPC_FIELD_NUMBER: _ClassVar[int]
    HTTPGET_FIELD_NUMBER: _ClassVar[int]
    INITIALDELAYSECONDS_FIELD_NUMBER: _ClassVar[int]
    PERIODSECONDS_FIELD_NUMBER: _ClassVar[int]
    SUCCESSTHRESHOLD_FIELD_NUMBER: _ClassVar[int]
    TCPSOCKET_FIELD_NUMBER: _ClassVar[int]
    TERMINATIONGRACEPERIODSECONDS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUTSECONDS_FIELD_NUMBER: _ClassVar[int]
    exec: ExecAction
    failureThreshold: int
    grpc: GRPCAction
    httpGet: HTTPGetAction
    initialDelaySeconds: int
    periodSeconds: int
    successThreshold: int
    tcpSocket: TCPSocketAction
    terminationGracePeriodSeconds: int
    timeoutSeconds: int
    def __init__(self, exec: _Optional[_Union[ExecAction, _Mapping]] = ..., failureThreshold: _Optional[int] = ..., grpc: _Optional[_Union[GRPCAction, _Mapping]] = ..., httpGet: _Optional[_Union[HTTPGetAction, _Mapping]] = ..., initialDelaySeconds: _Optional[int] = ..., periodSeconds: _Optional[int] = ..., successThreshold: _Optional[int] = ..., tcpSocket: _Optional[_Union[TCPSocketAction, _Mapping]] = ..., terminationGracePeriodSeconds: _Optional[int] = ..., timeoutSeconds: _Optional[int] = ...) -> None: ...

class ProjectedVolumeSource(_message.Message):
    __slots__ = ("defaultMode", "sources")
    DEFAULTMODE_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    defaultMode: int
    sources: _containers.RepeatedCompositeFieldContainer[VolumeProjection]
    def __init__(self, defaultMode: _Optional[int] = ..., sources: _Optional[_Iterable[_Union[VolumeProjection, _Mapping]]] = ...) -> None: ...

class QuobyteVolumeSource(_message.Message):
    __slots__ = ("group", "readOnly", "registry", "tenant", "user", "volume")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    group: str
    readOnly: bool
    registry: str
    tenant: str
    user: str
    volume: str
    def __init__(self, group: _Optional[str] = ..., readOnly: _Optional[bool] = ..., registry: _Optional[str] = ..., tenant: _Optional[str] = ..., user: _Optional[str] = ..., volume: _Optional[str] = ...) -> None: ...

class RBDVolumeSource(_message.Message):
    __slots__ = ("fsType", "image", "keyring", "monitors", "pool", "readOnly", "secretRef", "user")
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    KEYRING_FIELD_NUMBER: _ClassVar[int]
    MONITORS_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    SECRETREF_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    fsType: str
    image: str
    keyring: str
    monitors: _containers.RepeatedScalarFieldContainer[str]
    pool: str
    readOnly: bool
    secretRef: LocalObjectReference
    user: str
    def __init__(self, fsType: _Optional[str] = ..., image: _Optional[str] = ..., keyring: _Optional[str] = ..., monitors: _Optional[_Iterable[str]] = ..., pool: _Optional[str] = ..., readOnly: _Optional[bool] = ..., secretRef: _Optional[_Union[LocalObjectReference, _Mapping]] = ..., user: _Optional[str] = ...) -> None: ...

class ResourceClaim(_message.Message):
    __slots__ = ("name", "request")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    name: str
    request: str
    def __init__(self, name: _Optional[str] = ..., request: _Optional[str] = ...) -> None: ...

class ResourceFieldSelector(_message.Message):
    __slots__ = ("containerName", "divisor", "resource")
    CONTAINERNAME_FIELD_NUMBER: _ClassVar[int]
    DIVISOR_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    containerName: str
    divisor: str
    resource: str
    def __init__(self, containerName: _Optional[str] = ..., divisor: _Optional[str] = ..., resource: _Optional[str] = ...) -> None: ...

class ResourceHealth(_message.Message):
    __slots__ = ("health", "message", "resourceID")
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESOURCEID_FIELD_NUMBER: _ClassVar[int]
    health: str
    message: str
    resourceID: str
    def __init__(self, health: _Optional[str] = ..., message: _Optional[str] = ..., resourceID: _Optional[str] = ...) -> None: ...

class ResourceRequirements(_message.Message):
    __slots__ = ("claims", "limits", "requests")
    class LimitsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class RequestsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[ResourceClaim]
    limits: _containers.ScalarMap[str, str]
    requests: _containers.ScalarMap[str, str]
    def __init__(self, claims: _Optional[_Iterable[_Union[ResourceClaim, _Mapping]]] = ..., limits: _Optional[_Mapping[str, str]] = ..., requests: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ResourceStatus(_message.Message):
    __slots__ = ("name", "resources")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    name: str
    resources: _containers.RepeatedCompositeFieldContainer[ResourceHealth]
    def __init__(self, name: _Optional[str] = ..., resources: _Optional[_Iterable[_Union[ResourceHealth, _Mapping]]] = ...) -> None: ...

class SELinuxOptions(_message.Message):
    __slots__ = ("level", "role", "type", "user")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    level: str
    role: str
    type: str
    user: str
    def __init__(self, level: _Optional[str] = ..., role: _Optional[str] = ..., type: _Optional[str] = ..., user: _Optional[str] = ...) -> None: ...

class ScaleIOVolumeSource(_message.Message):
    __slots__ = ("fsType", "gateway", "protectionDomain", "readOnly", "secretRef", "sslEnabled", "storageMode", "storagePool", "system", "volumeName")
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_FIELD_NUMBER: _ClassVar[int]
    PROTECTIONDOMAIN_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    SECRETREF_FIELD_NUMBER: _ClassVar[int]
    SSLENABLED_FIELD_NUMBER: _ClassVar[int]
    STORAGEMODE_FIELD_NUMBER: _ClassVar[int]
    STORAGEPOOL_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    VOLUMENAME_FIELD_NUMBER: _ClassVar[int]
    fsType: str
    gateway: str
    protectionDomain: str
    readOnly: bool
    secretRef: LocalObjectReference
    sslEnabled: bool
    storageMode: str
    storagePool: str
    system: str
    volumeName: str
    def __init__(self, fsType: _Optional[str] = ..., gateway: _Optional[str] = ..., protectionDomain: _Optional[str] = ..., readOnly: _Optional[bool] = ..., secretRef: _Optional[_Union[LocalObjectReference, _Mapping]] = ..., sslEnabled: _Optional[bool] = ..., storageMode: _Optional[str] = ..., storagePool: _Optional[str] = ..., system: _Optional[str] = ..., volumeName: _Optional[str] = ...) -> None: ...

class SeccompProfile(_message.Message):
    __slots__ = ("localhostProfile", "type")
    LOCALHOSTPROFILE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    localhostProfile: str
    type: str
    def __init__(self, localhostProfile: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class SecretEnvSource(_message.Message):
    __slots__ = ("name", "optional")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    optional: bool
    def __init__(self, name: _Optional[str] = ..., optional: _Optional[bool] = ...) -> None: ...

class SecretKeySelector(_message.Message):
    __slots__ = ("key", "name", "optional")
    KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    key: str
    name: str
    optional: bool
    def __init__(self, key: _Optional[str] = ..., name: _Optional[str] = ..., optional: _Optional[bool] = ...) -> None: ...

class SecretProjection(_message.Message):
    __slots__ = ("items", "name", "optional")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[KeyToPath]
    name: str
    optional: bool
    def __init__(self, items: _Optional[_Iterable[_Union[KeyToPath, _Mapping]]] = ..., name: _Optional[str] = ..., optional: _Optional[bool] = ...) -> None: ...

class SecretVolumeSource(_message.Message):
    __slots__ = ("defaultMode", "items", "optional", "secretName")
    DEFAULTMODE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    SECRETNAME_FIELD_NUMBER: _ClassVar[int]
    defaultMode: int
    items: _containers.RepeatedCompositeFieldContainer[KeyToPath]
    optional: bool
    secretName: str
    def __init__(self, defaultMode: _Optional[int] = ..., items: _Optional[_Iterable[_Union[KeyToPath, _Mapping]]] = ..., optional: _Optional[bool] = ..., secretName: _Optional[str] = ...) -> None: ...

class SecurityContext(_message.Message):
    __slots__ = ("allowPrivilegeEscalation", "appArmorProfile", "capabilities", "privileged", "procMount", "readOnlyRootFilesystem", "runAsGroup", "runAsNonRoot", "runAsUser", "seLinuxOptions", "seccompProfile", "windowsOptions")
    ALLOWPRIVILEGEESCALATION_FIELD_NUMBER: _ClassVar[int]
    APPARMORPROFILE_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    PROCMOUNT_FIELD_NUMBER: _ClassVar[int]
    READONLYROOTFILESYSTEM_FIELD_NUMBER: _ClassVar[int]
    RUNASGROUP_FIELD_NUMBER: _ClassVar[int]
    RUNASNONROOT_FIELD_NUMBER: _ClassVar[int]
    RUNASUSER_FIELD_NUMBER: _ClassVar[int]
    SELINUXOPTIONS_FIELD_NUMBER: _ClassVar[int]
    SECCOMPPROFILE_FIELD_NUMBER: _ClassVar[int]
    WINDOWSOPTIONS_FIELD_NUMBER: _ClassVar[int]
    allowPrivilegeEscalation: bool
    appArmorProfile: AppArmorProfile
    capabilities: Capabilities
    privileged: bool
    procMount: str
    readOnlyRootFilesystem: bool
    runAsGroup: int
    runAsNonRoot: bool
    runAsUser: int
    seLinuxOptions: SELinuxOptions
    seccompProfile: SeccompProfile
    windowsOptions: WindowsSecurityContextOptions
    def __init__(self, allowPrivilegeEscalation: _Optional[bool] = ..., appArmorProfile: _Optional[_Union[AppArmorProfile, _Mapping]] = ..., capabilities: _Optional[_Union[Capabilities, _Mapping]] = ..., privileged: _Optional[bool] = ..., procMount: _Optional[str] = ..., readOnlyRootFilesystem: _Optional[bool] = ..., runAsGroup: _Optional[int] = ..., runAsNonRoot: _Optional[bool] = ..., runAsUser: _Optional[int] = ..., seLinuxOptions: _Optional[_Union[SELinuxOptions, _Mapping]] = ..., seccompProfile: _Optional[_Union[SeccompProfile, _Mapping]] = ..., windowsOptions: _Optional[_Union[WindowsSecurityContextOptions, _Mapping]] = ...) -> None: ...

class ServiceAccountTokenProjection(_message.Message):
    __slots__ = ("audience", "expirationSeconds", "path")
    AUDIENCE_FIELD_NUMBER: _ClassVar[int]
    EXPIRATIONSECONDS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    audience: str
    expirationSeconds: int
    path: str
    def __init__(self, audience: _Optional[str] = ..., expirationSeconds: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class SleepAction(_message.Message):
    __slots__ = ("seconds",)
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    seconds: int
    def __init__(self, seconds: _Optional[int] = ...) -> None: ...

class StorageOSVolumeSource(_message.Message):
    __slots__ = ("fsType", "readOnly", "secretRef", "volumeName", "volumeNamespace")
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    SECRETREF_FIELD_NUMBER: _ClassVar[int]
    VOLUMENAME_FIELD_NUMBER: _ClassVar[int]
    VOLUMENAMESPACE_FIELD_NUMBER: _ClassVar[int]
    fsType: str
    readOnly: bool
    secretRef: LocalObjectReference
    volumeName: str
    volumeNamespace: str
    def __init__(self, fsType: _Optional[str] = ..., readOnly: _Optional[bool] = ..., secretRef: _Optional[_Union[LocalObjectReference, _Mapping]] = ..., volumeName: _Optional[str] = ..., volumeNamespace: _Optional[str] = ...) -> None: ...

class Sysctl(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class TCPSocketAction(_message.Message):
    __slots__ = ("host", "port")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: str
    def __init__(self, host: _Optional[str] = ..., port: _Optional[str] = ...) -> None: ...

class Toleration(_message.Message):
    __slots__ = ("effect", "key", "operator", "tolerationSeconds", "value")
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    TOLERATIONSECONDS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    effect: str
    key: str
    operator: str
    tolerationSeconds: int
    value: str
    def __init__(self, effect: _Optional[str] = ..., key: _Optional[str] = ..., operator: _Optional[str] = ..., tolerationSeconds: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...

class TopologySpreadConstraint(_message.Message):
    __slots__ = ("labelSelector", "matchLabelKeys", "maxSkew", "minDomains", "nodeAffinityPolicy", "nodeTaintsPolicy", "topologyKey", "whenUnsatisfiable")
    LABELSELECTOR_FIELD_NUMBER: _ClassVar[int]
    MATCHLABELKEYS_FIELD_NUMBER: _ClassVar[int]
    MAXSKEW_FIELD_NUMBER: _ClassVar[int]
    MINDOMAINS_FIELD_NUMBER: _ClassVar[int]
    NODEAFFINITYPOLICY_FIELD_NUMBER: _ClassVar[int]
    NODETAINTSPOLICY_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGYKEY_FIELD_NUMBER: _ClassVar[int]
    WHENUNSATISFIABLE_FIELD_NUMBER: _ClassVar[int]
    labelSelector: _meta_pb2.LabelSelector
    matchLabelKeys: _containers.RepeatedScalarFieldContainer[str]
    maxSkew: int
    minDomains: int
    nodeAffinityPolicy: str
    nodeTaintsPolicy: str
    topologyKey: str
    whenUnsatisfiable: str
    def __init__(self, labelSelector: _Optional[_Union[_meta_pb2.LabelSelector, _Mapping]] = ..., matchLabelKeys: _Optional[_Iterable[str]] = ..., maxSkew: _Optional[int] = ..., minDomains: _Optional[int] = ..., nodeAffinityPolicy: _Optional[str] = ..., nodeTaintsPolicy: _Optional[str] = ..., topologyKey: _Optional[str] = ..., whenUnsatisfiable: _Optional[str] = ...) -> None: ...

class TypedLocalObjectReference(_message.Message):
    __slots__ = ("apiGroup", "kind", "name")
    APIGROUP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    apiGroup: str
    kind: str
    name: str
    def __init__(self, apiGroup: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class TypedObjectReference(_message.Message):
    __slots__ = ("apiGroup", "kind", "name", "namespace")
    APIGROUP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    apiGroup: str
    kind: str
    name: str
    namespace: str
    def __init__(self, apiGroup: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class Volume(_message.Message):
    __slots__ = ("awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "hostPath", "image", "iscsi", "name", "nfs", "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume", "projected", "quobyte", "rbd", "scaleIO", "secret", "storageos", "vsphereVolume")
    AWSELASTICBLOCKSTORE_FIELD_NUMBER: _ClassVar[int]
    AZUREDISK_FIELD_NUMBER: _ClassVar[int]
    AZUREFILE_FIELD_NUMBER: _ClassVar[int]
    CEPHFS_FIELD_NUMBER: _ClassVar[int]
    CINDER_FIELD_NUMBER: _ClassVar[int]
    CONFIGMAP_FIELD_NUMBER: _ClassVar[int]
    CSI_FIELD_NUMBER: _ClassVar[int]
    DOWNWARDAPI_FIELD_NUMBER: _ClassVar[int]
    EMPTYDIR_FIELD_NUMBER: _ClassVar[int]
    EPHEMERAL_FIELD_NUMBER: _ClassVar[int]
    FC_FIELD_NUMBER: _ClassVar[int]
    FLEXVOLUME_FIELD_NUMBER: _ClassVar[int]
    FLOCKER_FIELD_NUMBER: _ClassVar[int]
    GCEPERSISTENTDISK_FIELD_NUMBER: _ClassVar[int]
    GITREPO_FIELD_NUMBER: _ClassVar[int]
    GLUSTERFS_FIELD_NUMBER: _ClassVar[int]
    HOSTPATH_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ISCSI_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NFS_FIELD_NUMBER: _ClassVar[int]
    PERSISTENTVOLUMECLAIM_FIELD_NUMBER: _ClassVar[int]
    PHOTONPERSISTENTDISK_FIELD_NUMBER: _ClassVar[int]
    PORTWORXVOLUME_FIELD_NUMBER: _ClassVar[int]
    PROJECTED_FIELD_NUMBER: _ClassVar[int]
    QUOBYTE_FIELD_NUMBER: _ClassVar[int]
    RBD_FIELD_NUMBER: _ClassVar[int]
    SCALEIO_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    STORAGEOS_FIELD_NUMBER: _ClassVar[int]
    VSPHEREVOLUME_FIELD_NUMBER: _ClassVar[int]
    awsElasticBlockStore: AWSElasticBlockStoreVolumeSource
    azureDisk: AzureDiskVolumeSource
    azureFile: AzureFileVolumeSource
    cephfs: CephFSVolumeSource
    cinder: CinderVolumeSource
    configMap: ConfigMapVolumeSource
    csi: CSIVolumeSource
    downwardAPI: DownwardAPIVolumeSource
    emptyDir: EmptyDirVolumeSource
    ephemeral: EphemeralVolumeSource
    fc: FCVolumeSource
    flexVolume: FlexVolumeSource
    flocker: FlockerVolumeSource
    gcePersistentDisk: GCEPersistentDiskVolumeSource
    gitRepo: GitRepoVolumeSource
    glusterfs: GlusterfsVolumeSource
    hostPath: HostPathVolumeSource
    image: ImageVolumeSource
    iscsi: ISCSIVolumeSource
    name: str
    nfs: NFSVolumeSource
    persistentVolumeClaim: PersistentVolumeClaimVolumeSource
    photonPersistentDisk: PhotonPersistentDiskVolumeSource
    portworxVolume: PortworxVolumeSource
    projected: ProjectedVolumeSource
    quobyte: QuobyteVolumeSource
    rbd: RBDVolumeSource
    scaleIO: ScaleIOVolumeSource
    secret: SecretVolumeSource
    storageos: StorageOSVolumeSource
    vsphereVolume: VsphereVirtualDiskVolumeSource
    def __init__(self, awsElasticBlockStore: _Optional[_Union[AWSElasticBlockStoreVolumeSource, _Mapping]] = ..., azureDisk: _Optional[_Union[AzureDiskVolumeSource, _Mapping]] = ..., azureFile: _Optional[_Union[AzureFileVolumeSource, _Mapping]] = ..., cephfs: _Optional[_Union[CephFSVolumeSource, _Mapping]] = ..., cinder: _Optional[_Union[CinderVolumeSource, _Mapping]] = ..., configMap: _Optional[_Union[ConfigMapVolumeSource, _Mapping]] = ..., csi: _Optional[_Union[CSIVolumeSource, _Mapping]] = ..., downwardAPI: _Optional[_Union[DownwardAPIVolumeSource, _Mapping]] = ..., emptyDir: _Optional[_Union[EmptyDirVolumeSource, _Mapping]] = ..., ephemeral: _Optional[_Union[EphemeralVolumeSource, _Mapping]] = ..., fc: _Optional[_Union[FCVolumeSource, _Mapping]] = ..., flexVolume: _Optional[_Union[FlexVolumeSource, _Mapping]] = ..., flocker: _Optional[_Union[FlockerVolumeSource, _Mapping]] = ..., gcePersistentDisk: _Optional[_Union[GCEPersistentDiskVolumeSource, _Mapping]] = ..., gitRepo: _Optional[_Union[GitRepoVolumeSource, _Mapping]] = ..., glusterfs: _Optional[_Union[GlusterfsVolumeSource, _Mapping]] = ..., hostPath: _Optional[_Union[HostPathVolumeSource, _Mapping]] = ..., image: _Optional[_Union[ImageVolumeSource, _Mapping]] = ..., iscsi: _Optional[_Union[ISCSIVolumeSource, _Mapping]] = ..., name: _Optional[str] = ..., nfs: _Optional[_Union[NFSVolumeSource, _Mapping]] = ..., persistentVolumeClaim: _Optional[_Union[PersistentVolumeClaimVolumeSource, _Mapping]] = ..., photonPersistentDisk: _Optional[_Union[PhotonPersistentDiskVolumeSource, _Mapping]] = ..., portworxVolume: _Optional[_Union[PortworxVolumeSource, _Mapping]] = ..., projected: _Optional[_Union[ProjectedVolumeSource, _Mapping]] = ..., quobyte: _Optional[_Union[QuobyteVolumeSource, _Mapping]] = ..., rbd: _Optional[_Union[RBDVolumeSource, _Mapping]] = ..., scaleIO: _Optional[_Union[ScaleIOVolumeSource, _Mapping]] = ..., secret: _Optional[_Union[SecretVolumeSource, _Mapping]] = ..., storageos: _Optional[_Union[StorageOSVolumeSource, _Mapping]] = ..., vsphereVolume: _Optional[_Union[VsphereVirtualDiskVolumeSource, _Mapping]] = ...) -> None: ...

class VolumeDevice(_message.Message):
    __slots__ = ("devicePath", "name")
    DEVICEPATH_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    devicePath: str
    name: str
    def __init__(self, devicePath: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class VolumeMount(_message.Message):
    __slots__ = ("mountPath", "mountPropagation", "name", "readOnly", "recursiveReadOnly", "subPath", "subPathExpr")
    MOUNTPATH_FIELD_NUMBER: _ClassVar[int]
    MOUNTPROPAGATION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    RECURSIVEREADONLY_FIELD_NUMBER: _ClassVar[int]
    SUBPATH_FIELD_NUMBER: _ClassVar[int]
    SUBPATHEXPR_FIELD_NUMBER: _ClassVar[int]
    mountPath: str
    mountPropagation: str
    name: str
    readOnly: bool
    recursiveReadOnly: str
    subPath: str
    subPathExpr: str
    def __init__(self, mountPath: _Optional[str] = ..., mountPropagation: _Optional[str] = ..., name: _Optional[str] = ..., readOnly: _Optional[bool] = ..., recursiveReadOnly: _Optional[str] = ..., subPath: _Optional[str] = ..., subPathExpr: _Optional[str] = ...) -> None: ...

class VolumeMountStatus(_message.Message):
    __slots__ = ("mountPath", "name", "readOnly", "recursiveReadOnly", "volumeStatus")
    MOUNTPATH_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    RECURSIVEREADONLY_FIELD_NUMBER: _ClassVar[int]
    VOLUMESTATUS_FIELD_NUMBER: _ClassVar[int]
    mountPath: str
    name: str
    readOnly: bool
    recursiveReadOnly: str
    volumeStatus: VolumeStatus
    def __init__(self, mountPath: _Optional[str] = ..., name: _Optional[str] = ..., readOnly: _Optional[bool] = ..., recursiveReadOnly: _Optional[str] = ..., volumeStatus: _Optional[_Union[VolumeStatus, _Mapping]] = ...) -> None: ...

class VolumeProjection(_message.Message):
    __slots__ = ("clusterTrustBundle", "configMap", "downwardAPI", "podCertificate", "secret", "serviceAccountToken")
    CLUSTERTRUSTBUNDLE_FIELD_NUMBER: _ClassVar[int]
    CONFIGMAP_FIELD_NUMBER: _ClassVar[int]
    DOWNWARDAPI_FIELD_NUMBER: _ClassVar[int]
    PODCERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    SERVICEACCOUNTTOKEN_FIELD_NUMBER: _ClassVar[int]
    clusterTrustBundle: ClusterTrustBundleProjection
    configMap: ConfigMapProjection
    downwardAPI: DownwardAPIProjection
    podCertificate: PodCertificateProjection
    secret: SecretProjection
    serviceAccountToken: ServiceAccountTokenProjection
    def __init__(self, clusterTrustBundle: _Optional[_Union[ClusterTrustBundleProjection, _Mapping]] = ..., configMap: _Optional[_Union[ConfigMapProjection, _Mapping]] = ..., downwardAPI: _Optional[_Union[DownwardAPIProjection, _Mapping]] = ..., podCertificate: _Optional[_Union[PodCertificateProjection, _Mapping]] = ..., secret: _Optional[_Union[SecretProjection, _Mapping]] = ..., serviceAccountToken: _Optional[_Union[ServiceAccountTokenProjection, _Mapping]] = ...) -> None: ...

class VolumeResourceRequirements(_message.Message):
    __slots__ = ("limits", "requests")
    class LimitsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class RequestsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    limits: _containers.ScalarMap[str, str]
    requests: _containers.ScalarMap[str, str]
    def __init__(self, limits: _Optional[_Mapping[str, str]] = ..., requests: _Optional[_Mapping[str, str]] = ...) -> None: ...

class VolumeStatus(_message.Message):
    __slots__ = ("image",)
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    image: ImageVolumeStatus
    def __init__(self, image: _Optional[_Union[ImageVolumeStatus, _Mapping]] = ...) -> None: ...

class VsphereVirtualDiskVolumeSource(_message.Message):
    __slots__ = ("fsType", "storagePolicyID", "storagePolicyName", "volumePath")
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    STORAGEPOLICYID_FIELD_NUMBER: _ClassVar[int]
    STORAGEPOLICYNAME_FIELD_NUMBER: _ClassVar[int]
    VOLUMEPATH_FIELD_NUMBER: _ClassVar[int]
    fsType: str
    storagePolicyID: str
    storagePolicyName: str
    volumePath: str
    def __init__(self, fsType: _Optional[str] = ..., storagePolicyID: _Optional[str] = ..., storagePolicyName: _Optional[str] = ..., volumePath: _Optional[str] = ...) -> None: ...

class WeightedPodAffinityTerm(_message.Message):
    __slots__ = ("podAffinityTerm", "weight")
    PODAFFINITYTERM_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    podAffinityTerm: PodAffinityTerm
    weight: int
    def __init__(self, podAffinityTerm: _Optional[_Union[PodAffinityTerm, _Mapping]] = ..., weight: _Optional[int] = ...) -> None: ...

class WindowsSecurityContextOptions(_message.Message):
    __slots__ = ("gmsaCredentialSpec", "gmsaCredentialSpecName", "hostProcess", "runAsUserName")
    GMSACREDENTIALSPEC_FIELD_NUMBER: _ClassVar[int]
    GMSACREDENTIALSPECNAME_FIELD_NUMBER: _ClassVar[int]
    HOSTPROCESS_FIELD_NUMBER: _ClassVar[int]
    RUNASUSERNAME_FIELD_NUMBER: _ClassVar[int]
    gmsaCredentialSpec: str
    gmsaCredentialSpecName: str
    hostProcess: bool
    runAsUserName: str
    def __init__(self, gmsaCredentialSpec: _Optional[str] = ..., gmsaCredentialSpecName: _Optional[str] = ..., hostProcess: _Optional[bool] = ..., runAsUserName: _Optional[str] = ...) -> None: ...
