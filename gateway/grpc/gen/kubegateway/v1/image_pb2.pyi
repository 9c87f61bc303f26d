from google.protobuf import struct_pb2 as _struct_pb2
from gateway.grpc.gen.kubegateway.v1 import meta_pb2 as _meta_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Image(_message.Message):
    __slots__ = ("apiVersion", "dockerImageConfig", "dockerImageLayers", "dockerImageManifest", "dockerImageManifestMediaType", "dockerImageManifests", "dockerImageMetadata", "dockerImageMetadataVersion", "dockerImageReference", "dockerImageSignatures", "kind", "metadata", "signatures")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    DOCKERIMAGECONFIG_FIELD_NUMBER: _ClassVar[int]
    DOCKERIMAGELAYERS_FIELD_NUMBER: _ClassVar[int]
    DOCKERIMAGEMANIFEST_FIELD_NUMBER: _ClassVar[int]
    DOCKERIMAGEMANIFESTMEDIATYPE_FIELD_NUMBER: _ClassVar[int]
    DOCKERIMAGEMANIFESTS_FIELD_NUMBER: _ClassVar[int]
    DOCKERIMAGEMETADATA_FIELD_NUMBER: _ClassVar[int]
    DOCKERIMAGEMETADATAVERSION_FIELD_NUMBER: _ClassVar[int]
    DOCKERIMAGEREFERENCE_FIELD_NUMBER: _ClassVar[int]
    DOCKERIMAGESIGNATURES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SIGNATURES_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    dockerImageConfig: str
    dockerImageLayers: _containers.RepeatedCompositeFieldContainer[ImageLayer]
    dockerImageManifest: str
    dockerImageManifestMediaType: str
    dockerImageManifests: _containers.RepeatedCompositeFieldContainer[ImageManifest]
    dockerImageMetadata: _struct_pb2.Struct
    dockerImageMetadataVersion: str
    dockerImageReference: str
    dockerImageSignatures: _containers.RepeatedScalarFieldContainer[str]
    kind: str
    metadata: _meta_pb2.ObjectMeta
    signatures: _containers.RepeatedCompositeFieldContainer[ImageSignature]
    def __init__(self, apiVersion: _Optional[str] = ..., dockerImageConfig: _Optional[str] = ..., dockerImageLayers: _Optional[_Iterable[_Union[ImageLayer, _Mapping]]] = ..., dockerImageManifest: _Optional[str] = ..., dockerImageManifestMediaType: _Optional[str] = ..., dockerImageManifests: _Optional[_Iterable[_Union[ImageManifest, _Mapping]]] = ..., dockerImageMetadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., dockerImageMetadataVersion: _Optional[str] = ..., dockerImageReference: _Optional[str] = ..., dockerImageSignatures: _Optional[_Iterable[str]] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ObjectMeta, _Mapping]] = ..., signatures: _Optional[_Iterable[_Union[ImageSignature, _Mapping]]] = ...) -> None: ...

class ImageLayer(_message.Message):
    __slots__ = ("mediaType", "name", "size")
    MEDIATYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    mediaType: str
    name: str
    size: int
    def __init__(self, mediaType: _Optional[str] = ..., name: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class ImageList(_message.Message):
    __slots__ = ("apiVersion", "items", "kind", "metadata")
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    items: _containers.RepeatedCompositeFieldContainer[Image]
    kind: str
    metadata: _meta_pb2.ListMeta
    def __init__(self, apiVersion: _Optional[str] = ..., items: _Optional[_Iterable[_Union[Image, _Mapping]]] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ListMeta, _Mapping]] = ...) -> None: ...

class ImageManifest(_message.Message):
    __slots__ = ("architecture", "digest", "manifestSize", "mediaType", "os", "variant")
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    MANIFESTSIZE_FIELD_NUMBER: _ClassVar[int]
    MEDIATYPE_FIELD_NUMBER: _ClassVar[int]
    OS_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    architecture: str
    digest: str
    manifestSize: int
    mediaType: str
    os: str
    variant: str
    def __init__(self, architecture: _Optional[str] = ..., digest: _Optional[str] = ..., manifestSize: _Optional[int] = ..., mediaType: _Optional[str] = ..., os: _Optional[str] = ..., variant: _Optional[str] = ...) -> None: ...

class ImageSignature(_message.Message):
    __slots__ = ("apiVersion", "conditions", "content", "created", "imageIdentity", "issuedBy", "issuedTo", "kind", "metadata", "signedClaims", "type")
    class SignedClaimsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APIVERSION_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    IMAGEIDENTITY_FIELD_NUMBER: _ClassVar[int]
    ISSUEDBY_FIELD_NUMBER: _ClassVar[int]
    ISSUEDTO_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SIGNEDCLAIMS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    apiVersion: str
    conditions: _containers.RepeatedCompositeFieldContainer[SignatureCondition]
    content: str
    created: str
    imageIdentity: str
    issuedBy: SignatureIssuer
    issuedTo: SignatureSubject
    kind: str
    metadata: _meta_pb2.ObjectMeta
    signedClaims: _containers.ScalarMap[str, str]
    type: str
    def __init__(self, apiVersion: _Optional[str] = ..., conditions: _Optional[_Iterable[_Union[SignatureCondition, _Mapping]]] = ..., content: _Optional[str] = ..., created: _Optional[str] = ..., imageIdentity: _Optional[str] = ..., issuedBy: _Optional[_Union[SignatureIssuer, _Mapping]] = ..., issuedTo: _Optional[_Union[SignatureSubject, _Mapping]] = ..., kind: _Optional[str] = ..., metadata: _Optional[_Union[_meta_pb2.ObjectMeta, _Mapping]] = ..., signedClaims: _Optional[_Mapping[str, str]] = ..., type: _Optional[str] = ...) -> None: ...

class SignatureCondition(_message.Message):
    __slots__ = ("lastProbeTime", "lastTransitionTime", "message", "reason", "status", "type")
    LASTPROBETIME_FIELD_NUMBER: _ClassVar[int]
    LASTTRANSITIONTIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    lastProbeTime: str
    lastTransitionTime: str
    message: str
    reason: str
    status: str
    type: str
    def __init__(self, lastProbeTime: _Optional[str] = ..., lastTransitionTime: _Optional[str] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ..., status: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class SignatureIssuer(_message.Message):
    __slots__ = ("commonName", "organization")
    COMMONNAME_FIELD_NUMBER: _ClassVar[int]
    ORGANIZATION_FIELD_NUMBER: _ClassVar[int]
    commonName: str
    organization: str
    def __init__(self, commonName: _Optional[str] = ..., organization: _Optional[str] = ...) -> None: ...

class SignatureSubject(_message.Message):
    __slots__ = ("commonName", "organization", "publicKeyID")
    COMMONNAME_FIELD_NUMBER: _ClassVar[int]
    ORGANIZATION_FIELD_NUMBER: _ClassVar[int]
    PUBLICKEYID_FIELD_NUMBER: _ClassVar[int]
    commonName: str
    organization: str
    publicKeyID: str
    def __init__(self, commonName: _Optional[str] = ..., organization: _Optional[str] = ..., publicKeyID: _Optional[str] = ...) -> None: ...
