"""The gRPC contract as data: messages, enums and services, built from the schema and registry.

Nothing here is hand-typed per kind.  :func:`build` walks :mod:`gateway.core.model.schema` for the
object messages (every type reachable from the served kinds, their lists, ``Status`` and
``DeleteOptions``) and :data:`gateway.core.model.registry.REGISTRY` for the services and their
request messages; :mod:`gateway.grpc.protogen` renders the result as ``.proto`` files and
:mod:`gateway.grpc.servicer` serves the same :class:`Service` records, so the files and the
running server cannot disagree.

Naming rules (see ``protos/README.md``):

* object messages keep the Kubernetes short name and the Kubernetes JSON field names
  (``Pod.spec.containers[].livenessProbe``), as Kubernetes' own ``generated.proto`` does, so a
  decoded JSON dict feeds the message constructor directly;
* gateway envelopes (requests, ``WatchEvent``, ``LogChunk``) use proto-style ``snake_case``
  field names (``label_selector``, ``read_mask``, ``raw_json``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from gateway.core import (
    REGISTRY,
    Action,
    ListOf,
    ObjectType,
    Operation,
    Ref,
    Registry,
    Resource,
    Scalar,
    SchemaError,
    operations,
    schema,
)

__all__ = [
    "PACKAGE",
    "Action",
    "Contract",
    "ProtoEnum",
    "ProtoField",
    "ProtoFile",
    "ProtoMessage",
    "Rpc",
    "Service",
    "build",
    "contract",
]

PACKAGE: Final = "kubegateway.v1"
#: Where the files live under ``protos/`` and the import prefix between them.
PROTO_DIR: Final = "kubegateway/v1"
STRUCT: Final = "google.protobuf.Struct"
FIELD_MASK: Final = "google.protobuf.FieldMask"

#: Proto types of the schema scalars.  ``int-or-string`` arrives in JSON as a number or a
#: string and always travels as its decimal string; ``bytes`` stays base64 text as in JSON.
SCALAR_TYPES: Final[Mapping[str, str]] = {
    "string": "string",
    "int32": "int32",
    "int64": "int64",
    "double": "double",
    "boolean": "bool",
    "bytes": "string",
    "quantity": "string",
    "int-or-string": "string",
    "time": "string",
    "microtime": "string",
    "json": STRUCT,
}
_SCALAR_NOTES: Final[Mapping[str, str]] = {
    "bytes": "base64 text, as in JSON",
    "quantity": "a resource.Quantity such as 500m or 1Gi",
    "int-or-string": "an IntOrString; a JSON number travels as its decimal string",
    "time": "RFC 3339, seconds precision",
    "microtime": "RFC 3339, microseconds precision",
    "json": "free-form JSON",
}

Label: TypeAlias = Literal["", "optional", "repeated"]


@dataclass(frozen=True, slots=True)
class ProtoField:
    """One field of a message (numbers are assigned later, from the lock).

    Attributes:
        name: the proto field name (Kubernetes JSON name for object messages).
        type: a scalar proto type, ``map<string, T>``, or a message name (fully qualified for
            well-known types, bare for messages of this package).
        label: ``optional`` (explicit presence), ``repeated``, or ``""``.
        oneof: the oneof this field belongs to, if any.
        doc: the comment above the field.
    """

    name: str
    type: str
    label: Label = ""
    oneof: str | None = None
    doc: str = ""


@dataclass(frozen=True, slots=True)
class ProtoEnum:
    """An enum with fixed values (value numbers are part of the design, not of the lock)."""

    name: str
    values: tuple[tuple[str, int, str], ...]
    doc: str = ""


@dataclass(frozen=True, slots=True)
class ProtoMessage:
    """A message: its fields in declaration order, nested enums, and the schema type it mirrors."""

    name: str
    fields: tuple[ProtoField, ...]
    doc: str = ""
    enums: tuple[ProtoEnum, ...] = ()
    schema_type: str | None = None

    def refs(self) -> Iterable[str]:
        """The message types this message's fields use."""
        for f in self.fields:
            t = f.type
            if t.startswith("map<"):
                t = t[t.index(",") + 1 : -1].strip()
            yield t


@dataclass(frozen=True, slots=True)
class Rpc:
    """One method of a resource service: an operation of the core's table, on the wire.

    Attributes:
        operation: what the method does (action, verb, subresource, streaming, name).
        request: the request message name.
        response: the response message name (the element type when streaming).
    """

    operation: Operation
    request: str
    response: str

    @property
    def name(self) -> str:
        """The method name (``Get``, ``PatchStatus``, ``GetLog``)."""
        return self.operation.name

    @property
    def action(self) -> Action:
        return self.operation.action

    @property
    def subresource(self) -> str | None:
        return self.operation.subresource

    @property
    def streaming(self) -> bool:
        """Server streaming."""
        return self.operation.streaming

    @property
    def doc(self) -> str:
        """The comment above the method."""
        return self.operation.describe()


@dataclass(frozen=True, slots=True)
class Service:
    """The service of one registry resource, e.g. ``kubegateway.v1.Pods``."""

    name: str
    resource: Resource
    rpcs: tuple[Rpc, ...]
    file: str

    @property
    def full_name(self) -> str:
        return f"{PACKAGE}.{self.name}"


@dataclass(frozen=True, slots=True)
class ProtoFile:
    """One ``.proto`` file: a path under ``protos/`` and what it declares."""

    path: str
    doc: str
    messages: tuple[ProtoMessage, ...] = ()
    enums: tuple[ProtoEnum, ...] = ()
    services: tuple[Service, ...] = ()
    imports: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class Contract:
    """Every file of the contract, plus lookups the servicer and codec use."""

    files: tuple[ProtoFile, ...]
    services: tuple[Service, ...]
    messages: Mapping[str, ProtoMessage] = field(default_factory=dict)
    #: Kind name -> its object message name and list message name.
    kinds: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: Kind name -> the ``WatchEvent.object`` oneof member carrying it.
    watch_members: Mapping[str, str] = field(default_factory=dict)


# -- object messages from the schema ------------------------------------------------------------


def _doc(text: str, *notes: str) -> str:
    parts = [text.strip()] if text.strip() else []
    parts.extend(n for n in notes if n)
    return "\n\n".join(parts)


def _field_of(f: schema.Field, owner: str) -> ProtoField:
    t = f.type
    notes: list[str] = []
    if f.required:
        notes.append("Required.")
    label: Label
    if isinstance(t, Scalar):
        proto = SCALAR_TYPES[t.kind]
        label = "" if proto == STRUCT else "optional"
        notes.append(_SCALAR_NOTES.get(t.kind, ""))
    elif isinstance(t, Ref):
        proto, label = schema.object_type(t.type_name).short_name, ""
    elif isinstance(t, ListOf):
        item = t.item
        if isinstance(item, Scalar):
            proto = SCALAR_TYPES[item.kind]
            notes.append(_SCALAR_NOTES.get(item.kind, ""))
        elif isinstance(item, Ref):
            proto = schema.object_type(item.type_name).short_name
        else:
            raise SchemaError(f"{owner}.{f.json_name}: lists of lists or maps have no proto form")
        label = "repeated"
    else:
        value = t.value
        if isinstance(value, Scalar) and SCALAR_TYPES[value.kind] != STRUCT:
            inner = SCALAR_TYPES[value.kind]
            notes.append(_SCALAR_NOTES.get(value.kind, ""))
        elif isinstance(value, Ref):
            inner = schema.object_type(value.type_name).short_name
        else:
            raise SchemaError(f"{owner}.{f.json_name}: this map value has no proto form")
        proto, label = f"map<string, {inner}>", ""
    return ProtoField(f.json_name, proto, label, doc=_doc(f.description, *notes))


def _object_message(t: ObjectType) -> ProtoMessage:
    return ProtoMessage(
        name=t.short_name,
        fields=tuple(_field_of(f, t.short_name) for f in t.fields),
        doc=_doc(t.description),
        schema_type=t.name,
    )


def _object_types(registry: Registry) -> list[ObjectType]:
    roots = [schema.kinds(registry)[r.kind].name for r in registry.values()]
    roots += [schema.list_type(r.kind, registry).name for r in registry.values()]
    roots += ["Status", "DeleteOptions"]
    seen: dict[str, ObjectType] = {}
    for root in roots:
        for t in schema.reachable(root):
            seen.setdefault(t.name, t)
    return sorted(seen.values(), key=lambda t: t.short_name)


def _file_stem(def_id: str) -> str:
    # io.k8s.api.core.v1.Pod -> core; io.k8s.apimachinery.pkg.apis.meta.v1.Status -> meta;
    # com.github.openshift.api.image.v1.Image -> image
    return def_id.split(".")[-3]


# -- envelopes ---------------------------------------------------------------------------------

PATCH_TYPE = ProtoEnum(
    "PatchType",
    (
        ("PATCH_TYPE_UNSPECIFIED", 0, "Not set: the call is refused with INVALID_ARGUMENT."),
        ("PATCH_TYPE_JSON", 1, "RFC 6902 JSON patch: a list of operations."),
        ("PATCH_TYPE_MERGE", 2, "RFC 7386 JSON merge patch."),
        (
            "PATCH_TYPE_STRATEGIC_MERGE",
            3,
            "Kubernetes strategic merge patch (built-in kinds only).",
        ),
        ("PATCH_TYPE_APPLY", 4, "Server-side apply (YAML or JSON); needs field_manager."),
    ),
    "How a patch body is interpreted (the Content-Type of the upstream PATCH).",
)
WATCH_EVENT_TYPE = ProtoEnum(
    "Type",
    (
        ("TYPE_UNSPECIFIED", 0, "Never sent."),
        ("ADDED", 1, "The object was added (or is part of the initial state)."),
        ("MODIFIED", 2, "The object changed."),
        ("DELETED", 3, "The object was deleted; the object is its last state."),
        (
            "BOOKMARK",
            4,
            "Progress only (sent when allow_watch_bookmarks is set): the object holds only "
            "metadata.resourceVersion and annotations.",
        ),
        (
            "RESYNC",
            5,
            "The gateway relisted after the upstream expired the watch (410): a RESYNC with "
            "annotation kube-gateway.io/resync=begin, the difference (DELETED for objects "
            "removed during the gap), then RESYNC end.",
        ),
    ),
    "The kind of change.",
)

_SELECTORS = (
    ProtoField("label_selector", "string", doc="Kubernetes labelSelector, e.g. app=web,tier!=db."),
    ProtoField(
        "field_selector", "string", doc="Kubernetes fieldSelector, e.g. status.phase=Running."
    ),
)
_READ_MASK = ProtoField(
    "read_mask",
    FIELD_MASK,
    doc="Return only these fields of each object (paths in Kubernetes JSON names, e.g. "
    "metadata.name, spec.containers.image); unset returns every field.",
)
_WRITE = (
    ProtoField("dry_run", "bool", doc="Validate and admit, but persist nothing (dryRun=All)."),
    ProtoField("field_manager", "string", doc="The fieldManager recorded in managedFields."),
    ProtoField("field_validation", "string", doc="fieldValidation: Ignore, Warn or Strict."),
)
_NAMESPACE = ProtoField("namespace", "string", doc="The namespace of the object.")
_LIST_NAMESPACE = ProtoField(
    "namespace", "string", doc="One namespace, or empty for all namespaces."
)
_NAME = ProtoField("name", "string", doc="The object's name.")


def _ns(r: Resource, *, listing: bool = False) -> tuple[ProtoField, ...]:
    if not r.namespaced:
        return ()
    return (_LIST_NAMESPACE if listing else _NAMESPACE,)


def _body(kind: str) -> tuple[ProtoField, ...]:
    return (
        ProtoField("object", kind, oneof="body", doc=f"The {kind}."),
        ProtoField(
            "raw_json",
            "bytes",
            oneof="body",
            doc=f"The {kind} as JSON, sent upstream as is (fields newer than this contract).",
        ),
    )


def _list_query() -> tuple[ProtoField, ...]:
    return (
        *_SELECTORS,
        ProtoField("limit", "int64", doc="Page size; 0 for no limit."),
        ProtoField("continue", "string", doc="The continue token of the previous page."),
        ProtoField("resource_version", "string", doc="resourceVersion semantics of a list."),
        ProtoField("resource_version_match", "string", doc="NotOlderThan or Exact."),
        ProtoField("timeout_seconds", "int64", doc="Upstream timeoutSeconds; 0 for none."),
    )


def _object_or_status(name: str, answer: ProtoField, doc: str) -> ProtoMessage:
    """A response that is ``answer`` or, in the same ``result`` oneof, a Status."""
    status = ProtoField("status", "Status", oneof="result", doc="A Success Status otherwise.")
    return ProtoMessage(name, (answer, status), doc)


def _requests(r: Resource, kind: str, plural: str) -> list[ProtoMessage]:
    k_list = f"{kind}List"
    msgs = [
        ProtoMessage(
            f"Get{kind}Request",
            (*_ns(r), _NAME, _READ_MASK),
            f"Get one {kind} (or one of its subresources).",
        ),
        ProtoMessage(
            f"List{plural}Request",
            (*_ns(r, listing=True), *_list_query(), _READ_MASK),
            f"List {plural}: one page when limit is set, else the whole list.",
        ),
        ProtoMessage(
            f"Watch{plural}Request",
            (
                *_ns(r, listing=True),
                *_SELECTORS,
                ProtoField(
                    "resource_version",
                    "string",
                    doc="Resume after this resourceVersion; empty (or 0) starts with ADDED "
                    "events for the current state.",
                ),
                ProtoField(
                    "resource_version_match",
                    "string",
                    doc="NotOlderThan, only together with send_initial_events.",
                ),
                ProtoField(
                    "send_initial_events",
                    "bool",
                    "optional",
                    doc="Start with the current state, ended by a BOOKMARK annotated "
                    "k8s.io/initial-events-end (streaming-list semantics).",
                ),
                ProtoField(
                    "allow_watch_bookmarks", "bool", doc="Forward BOOKMARK progress events."
                ),
                ProtoField(
                    "timeout_seconds",
                    "int64",
                    doc="End the stream (OK) after this many seconds; 0 for never.",
                ),
                _READ_MASK,
                ProtoField(
                    "changed_fields_only",
                    "bool",
                    doc="Send a MODIFIED event only when the object's message (within "
                    "read_mask when set) changed since what this stream last sent of it; "
                    "ADDED, DELETED, BOOKMARK and RESYNC always go.",
                ),
            ),
            f"Watch {plural}.  The stream survives upstream closes and 410 Gone (RESYNC).",
        ),
        ProtoMessage(
            f"Create{kind}Request",
            (*_ns(r), *_body(kind), *_WRITE),
            f"Create a {kind}.",
        ),
        ProtoMessage(
            f"Replace{kind}Request",
            (*_ns(r), _NAME, *_body(kind), *_WRITE),
            f"Replace a {kind} (or a subresource); metadata.resourceVersion guards it.",
        ),
        ProtoMessage(
            f"Patch{kind}Request",
            (
                *_ns(r),
                _NAME,
                ProtoField("patch_type", "PatchType", doc="How patch is interpreted."),
                ProtoField("patch", "bytes", doc="The patch document (JSON, or YAML for apply)."),
                *_WRITE,
                ProtoField("force", "bool", "optional", doc="Apply patches only: take ownership."),
            ),
            f"Patch a {kind} (or a subresource).",
        ),
        ProtoMessage(
            f"Delete{kind}Request",
            (
                *_ns(r),
                _NAME,
                ProtoField(
                    "options",
                    "DeleteOptions",
                    doc="gracePeriodSeconds, propagationPolicy, orphanDependents, "
                    'preconditions, dryRun (["All"]).',
                ),
            ),
            f"Delete a {kind}.",
        ),
        _object_or_status(
            f"Delete{kind}Response",
            ProtoField("object", kind, oneof="result", doc="The object, when returned."),
            "What the upstream answered: the deleted (or terminating) object, or a Status.",
        ),
        ProtoMessage(
            f"DeleteCollection{plural}Request",
            (
                *_ns(r, listing=True),
                *_list_query(),
                ProtoField("options", "DeleteOptions", doc="As in a single delete."),
            ),
            f"Delete every {kind} the selectors match.",
        ),
        _object_or_status(
            f"DeleteCollection{plural}Response",
            ProtoField("list", k_list, oneof="result", doc="The deleted objects."),
            "What the upstream answered: the deleted objects, or a Status.",
        ),
    ]
    if any(s.content == "text" for s in r.subresources.values()):
        msgs.append(
            ProtoMessage(
                f"Get{kind}LogRequest",
                (
                    *_ns(r),
                    _NAME,
                    ProtoField("container", "string", doc="Required for multi-container pods."),
                    ProtoField("follow", "bool", doc="Keep streaming as the container writes."),
                    ProtoField("previous", "bool", doc="The previous terminated container."),
                    ProtoField("timestamps", "bool", doc="Prefix lines with RFC 3339 times."),
                    ProtoField("tail_lines", "int64", "optional", doc="Only the last N lines."),
                    ProtoField("since_seconds", "int64", "optional", doc="Relative start."),
                    ProtoField(
                        "since_time", "string", doc="RFC 3339 start (not with since_seconds)."
                    ),
                    ProtoField(
                        "limit_bytes", "int64", "optional", doc="Stop after this many bytes."
                    ),
                    ProtoField(
                        "insecure_skip_tls_verify_backend",
                        "bool",
                        doc="Skip verifying the kubelet's serving certificate.",
                    ),
                ),
                f"Read (or follow) a {kind}'s log.",
            )
        )
    return msgs


def service_name(r: Resource) -> str:
    """``PodService``, ``EndpointsService``: the kind's service (a plural can equal a kind)."""
    return f"{r.kind}Service"


def _plural(r: Resource) -> str:
    return r.plural[:1].upper() + r.plural[1:]


def _rpcs(r: Resource, kind: str, plural: str) -> tuple[Rpc, ...]:
    req: Mapping[Action, str] = {
        "get": f"Get{kind}Request",
        "list": f"List{plural}Request",
        "watch": f"Watch{plural}Request",
        "create": f"Create{kind}Request",
        "replace": f"Replace{kind}Request",
        "patch": f"Patch{kind}Request",
        "delete": f"Delete{kind}Request",
        "deletecollection": f"DeleteCollection{plural}Request",
        "log": f"Get{kind}LogRequest",
    }
    resp: Mapping[Action, str] = {
        "get": kind,
        "list": f"{kind}List",
        "watch": "WatchEvent",
        "create": kind,
        "replace": kind,
        "patch": kind,
        "delete": f"Delete{kind}Response",
        "deletecollection": f"DeleteCollection{plural}Response",
        "log": "LogChunk",
    }
    return tuple(Rpc(op, req[op.action], resp[op.action]) for op in operations(r))


def _watch_member(kind: str) -> str:
    return kind[:1].lower() + kind[1:]


# -- assembly ----------------------------------------------------------------------------------


def build(registry: Registry = REGISTRY) -> Contract:
    """The whole contract for ``registry`` (pure; :func:`contract` caches the default one).

    Raises:
        SchemaError: a schema shape has no proto form, or two messages would share a name.
    """
    objects = _object_types(registry)
    by_stem: dict[str, list[ProtoMessage]] = {}
    stem_of: dict[str, str] = {}
    for t in objects:
        stem = _file_stem(t.name)
        by_stem.setdefault(stem, []).append(_object_message(t))
        stem_of[t.short_name] = stem

    kinds = schema.kinds(registry)
    kind_names = {r.kind: (kinds[r.kind].short_name, f"{r.kind}List") for r in registry.values()}
    watch_members = {r.kind: _watch_member(r.kind) for r in registry.values()}
    watch_event = ProtoMessage(
        "WatchEvent",
        (
            ProtoField("type", "Type", doc="What happened."),
            ProtoField(
                "resource_version",
                "string",
                doc="The point to resume from after this event (Watch resource_version).",
            ),
            *(
                ProtoField(watch_members[r.kind], kind_names[r.kind][0], oneof="object")
                for r in registry.values()
            ),
        ),
        "One event of a Watch: its type, the object (of the service's kind) and where to resume.",
        enums=(WATCH_EVENT_TYPE,),
    )
    log_chunk = ProtoMessage(
        "LogChunk",
        (ProtoField("data", "bytes", doc="Bytes as the kubelet flushed them (not always UTF-8)."),),
        "A piece of a container log; chunks may split lines and characters.",
    )

    files: list[ProtoFile] = []
    messages: dict[str, ProtoMessage] = {}

    def imports_for(
        msgs: Iterable[ProtoMessage], own: str, local: Mapping[str, str]
    ) -> tuple[str, ...]:
        found: set[str] = set()
        for m in msgs:
            for ref in m.refs():
                if ref == STRUCT:
                    found.add("google/protobuf/struct.proto")
                elif ref == FIELD_MASK:
                    found.add("google/protobuf/field_mask.proto")
                elif ref in local and local[ref] != own:
                    found.add(local[ref])
        return tuple(sorted(found))

    where: dict[str, str] = {}
    for stem, msgs in sorted(by_stem.items()):
        for m in msgs:
            where[m.name] = f"{PROTO_DIR}/{stem}.proto"
    common_path = f"{PROTO_DIR}/common.proto"
    for name in ("WatchEvent", "LogChunk", "PatchType"):
        where[name] = common_path

    for stem, msgs in sorted(by_stem.items()):
        path = f"{PROTO_DIR}/{stem}.proto"
        files.append(
            ProtoFile(
                path,
                f"Object messages of the {stem} API types, generated from "
                "gateway/core/model/schema.py.",
                messages=tuple(msgs),
                imports=imports_for(msgs, path, where),
            )
        )
    common = (watch_event, log_chunk)
    files.append(
        ProtoFile(
            common_path,
            "Envelopes shared by every resource service.",
            messages=common,
            enums=(PATCH_TYPE,),
            imports=imports_for(common, common_path, where),
        )
    )

    services: list[Service] = []
    for r in registry.values():
        kind = kind_names[r.kind][0]
        plural = _plural(r)
        path = f"{PROTO_DIR}/{r.plural}.proto"
        reqs = _requests(r, kind, plural)
        for m in reqs:
            where[m.name] = path
        svc = Service(service_name(r), r, _rpcs(r, kind, plural), path)
        services.append(svc)
        used = {rpc.request for rpc in svc.rpcs} | {rpc.response for rpc in svc.rpcs}
        reqs = [m for m in reqs if m.name in used]
        deps = {rpc.response for rpc in svc.rpcs}
        extra = tuple(sorted({where[d] for d in deps if d in where and where[d] != path}))
        files.append(
            ProtoFile(
                path,
                f"The {svc.name}: {r.api_version} {r.kind} ({r.key}).",
                messages=tuple(reqs),
                services=(svc,),
                imports=tuple(sorted(set(imports_for(reqs, path, where)) | set(extra))),
            )
        )

    for f in files:
        for m in f.messages:
            if m.name in messages:
                raise SchemaError(f"two messages are called {m.name}")
            messages[m.name] = m
        for e in f.enums:
            if e.name in messages:
                raise SchemaError(f"an enum and a message are called {e.name}")
        for svc in f.services:
            if svc.name in messages:
                raise SchemaError(f"a service and a message are called {svc.name}")
    return Contract(
        files=tuple(files),
        services=tuple(services),
        messages=messages,
        kinds=kind_names,
        watch_members=watch_members,
    )


@functools.cache
def contract() -> Contract:
    """The contract of the gateway's own registry (built once)."""
    return build(REGISTRY)
