"""The operations table: every call the front ends offer, derived from the registry.

An :class:`Operation` is one thing a caller can do with one resource: an action (``get``,
``list``, ``watch``, ``create``, ``replace``, ``patch``, ``delete``, ``deletecollection``,
``log``), the registry verb checked before any call, the subresource it applies to, whether it
streams, and the display name front ends build their names from.  :func:`operations` lists
them for a resource; both front ends are generated from that list and nothing else:

=====================  ==============================  ===========================================
operation              gRPC method (``PodService``)    GraphQL root field
=====================  ==============================  ===========================================
get                    ``Get``                         ``pod``
list                   ``List``                        ``pods``
watch                  ``Watch`` (server stream)       ``watchPods`` (subscription)
create                 ``Create``                      ``createPod``, ``createPodFromManifest``
replace                ``Replace``                     ``replacePod``, ``replacePodFromManifest``
patch                  ``Patch``                       ``patchPod``
delete                 ``Delete``                      ``deletePod``
deletecollection       ``DeleteCollection``            ``deletePodCollection``
get status             ``GetStatus``                   ``podStatus``
patch status           ``PatchStatus``                 ``patchPodStatus``
log                    ``GetLog`` (server stream)      ``podLog``, ``followPodLog`` (subscription)
=====================  ==============================  ===========================================

A front end turns its input into a :class:`Call` (plain values and the core's option records)
and hands it to :func:`perform`, which resolves the namespace by one rule for every transport
and makes the one adapter call.  The streaming ones (``watch``, a followed ``log``) start
from the same :class:`Call` through :func:`gateway.core.calls.streaming.open_stream`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from gateway.core import errors
from gateway.core.model.options import (
    DeleteOptions,
    ListOptions,
    LogOptions,
    PatchOptions,
    WriteOptions,
)
from gateway.core.model.registry import Resource, Verb

if TYPE_CHECKING:
    from gateway.core.lists.body import Undecoded
    from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.credentials import Credential

__all__ = [
    "ACTIONS",
    "Action",
    "ActionSpec",
    "Call",
    "Operation",
    "display_name",
    "list_body",
    "operations",
    "perform",
]

Action: TypeAlias = Literal[
    "get", "list", "watch", "create", "replace", "patch", "delete", "deletecollection", "log"
]
#: What the namespace of a namespaced resource means to an action: ``one`` object's namespace
#: (required), ``collection`` (empty means every namespace), ``new`` (the argument, else the
#: manifest's ``metadata.namespace``).
Scope: TypeAlias = Literal["one", "collection", "new"]


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """What an action is, independent of resource and transport.

    Attributes:
        verb: the registry (and RBAC) verb checked before any call.
        title: the action's display name (``Get``, ``Replace``, ``DeleteCollection``).
        scope: how a namespaced resource's namespace is resolved (see :data:`Scope`).
        streaming: the result is a stream (a watch, a log that may follow).
        options: the core option records the action takes, by :class:`Call` field.
        doc: a one-line description; ``{kind}`` and ``{plural}`` are filled in.
    """

    verb: Verb
    title: str
    scope: Scope
    streaming: bool
    options: tuple[str, ...]
    doc: str


ACTIONS: Final[Mapping[Action, ActionSpec]] = MappingProxyType(
    {
        "get": ActionSpec("get", "Get", "one", False, (), "Read one {kind}."),
        "list": ActionSpec(
            "list",
            "List",
            "collection",
            False,
            ("list",),
            "List {plural} (one page with limit and continue).",
        ),
        "watch": ActionSpec(
            "watch",
            "Watch",
            "collection",
            True,
            ("list",),
            "Watch {plural}: ADDED / MODIFIED / DELETED, BOOKMARK on request, RESYNC after a "
            "relist; resumes from resource_version and survives upstream closes.",
        ),
        "create": ActionSpec("create", "Create", "new", False, ("write",), "Create a {kind}."),
        "replace": ActionSpec(
            "update",
            "Replace",
            "one",
            False,
            ("write",),
            "Replace a {kind}; metadata.resourceVersion guards against lost updates.",
        ),
        "patch": ActionSpec(
            "patch",
            "Patch",
            "one",
            False,
            ("patch", "write"),
            "Patch a {kind}: JSON patch, merge patch, strategic merge patch or server-side apply.",
        ),
        "delete": ActionSpec("delete", "Delete", "one", False, ("delete",), "Delete a {kind}."),
        "deletecollection": ActionSpec(
            "deletecollection",
            "DeleteCollection",
            "collection",
            False,
            ("list", "delete"),
            "Delete every {kind} the selectors match.",
        ),
        "log": ActionSpec(
            "get",
            "Get",
            "one",
            True,
            ("log",),
            "Read a {kind}'s container log as raw bytes; streams new output while following.",
        ),
    }
)

#: Actions on the resource itself, in the order front ends present them.
_RESOURCE_ACTIONS: Final[tuple[Action, ...]] = (
    "get",
    "list",
    "watch",
    "create",
    "replace",
    "patch",
    "delete",
    "deletecollection",
)
#: Actions of a JSON subresource (``status``, ``ephemeralcontainers``).
_SUBRESOURCE_ACTIONS: Final[tuple[Action, ...]] = ("get", "replace", "patch")

#: Display names of subresources whose name is not one capitalised word.
_SUBRESOURCE_NAMES: Final[Mapping[str, str]] = MappingProxyType(
    {"ephemeralcontainers": "EphemeralContainers"}
)


def display_name(subresource: str) -> str:
    """``Status``, ``EphemeralContainers``, ``Log``: a subresource in method and field names."""
    return _SUBRESOURCE_NAMES.get(subresource) or subresource[:1].upper() + subresource[1:]


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation of one resource (see the module table)."""

    resource: Resource
    action: Action
    subresource: str | None = None

    @property
    def spec(self) -> ActionSpec:
        return ACTIONS[self.action]

    @property
    def verb(self) -> Verb:
        return self.spec.verb

    @property
    def streaming(self) -> bool:
        return self.spec.streaming

    @property
    def display(self) -> str:
        """The subresource's display name, ``""`` on the resource itself."""
        return display_name(self.subresource) if self.subresource else ""

    @property
    def name(self) -> str:
        """``Get``, ``DeleteCollection``, ``PatchStatus``, ``GetLog``."""
        return self.spec.title + self.display

    def describe(self) -> str:
        """The operation's one-line description."""
        r = self.resource
        text = self.spec.doc.format(kind=r.kind, plural=r.plural[:1].upper() + r.plural[1:])
        if self.subresource and self.action != "log":
            text += f" ({r.plural}/{self.subresource})"
        return text

    def namespace(self, given: str | None, body: Any = None) -> str | None:
        """The namespace the call addresses, by one rule for every front end.

        Cluster-scoped resources have none.  A collection without one means every namespace;
        a new object takes ``metadata.namespace`` when no namespace is given; any other call
        needs one.

        Raises:
            InvalidParameter: a namespaced call without a namespace.
        """
        r = self.resource
        if not r.namespaced:
            return None
        scope = self.spec.scope
        if given:
            return given
        if scope == "collection":
            return None
        if scope == "new" and isinstance(body, dict):
            meta = body.get("metadata")
            from_manifest = meta.get("namespace") if isinstance(meta, dict) else None
            if isinstance(from_manifest, str) and from_manifest:
                return from_manifest
        hint = "namespace or metadata.namespace" if scope == "new" else "namespace"
        raise errors.InvalidParameter(
            f"{r.kind} is namespaced: {hint} is required",
            causes=(errors.Cause("FieldValueRequired", "Required value", "namespace"),),
        )


def operations(resource: Resource) -> tuple[Operation, ...]:
    """Every operation ``resource`` serves: its verbs, then each subresource's."""
    out = [Operation(resource, a) for a in _RESOURCE_ACTIONS if ACTIONS[a].verb in resource.verbs]
    for sub in resource.subresources.values():
        if sub.content == "text":
            if "get" in sub.verbs:
                out.append(Operation(resource, "log", sub.name))
            continue
        out.extend(
            Operation(resource, a, sub.name)
            for a in _SUBRESOURCE_ACTIONS
            if ACTIONS[a].verb in sub.verbs
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Call:
    """What a front end extracted from its input for one unary operation.

    Attributes:
        namespace: as the caller gave it (``None`` or ``""`` when not given).
        name: the object's name, for single-object operations.
        body: the object (create, replace) or the patch document (patch).
        list: selectors and paging (list, deletecollection).
        write: dryRun, fieldManager, fieldValidation (writes).
        patch: the patch type and force (patch).
        delete: delete options (delete, deletecollection).
        log: log options (log; a ``follow`` is streamed by
            :func:`~gateway.core.calls.streaming.open_stream`).
        changed_only: a watch delivers a MODIFIED event only when what the subscriber
            receives of the object changed (watch rule 31).
    """

    namespace: str | None = None
    name: str = ""
    body: Any = None
    list: ListOptions = ListOptions()
    write: WriteOptions = WriteOptions()
    patch: PatchOptions | None = None
    delete: DeleteOptions = DeleteOptions()
    log: LogOptions = LogOptions()
    changed_only: bool = False


async def perform(
    adapter: KubeAdapter,
    op: Operation,
    call: Call,
    *,
    credential: Credential,
    timeout: float | None = None,
) -> Any:
    """Run a unary operation: the decoded answer (``bytes`` for a log).

    Raises:
        GatewayError: refused before any request, or the upstream's error.
    """
    r, sub, name = op.resource, op.subresource, call.name
    ns = op.namespace(call.namespace, call.body)
    if op.action == "get":
        return await adapter.get(
            r, name, namespace=ns, subresource=sub, credential=credential, timeout=timeout
        )
    if op.action == "list":
        return await adapter.list(
            r, namespace=ns, options=call.list, credential=credential, timeout=timeout
        )
    if op.action == "create":
        return await adapter.create(
            r, call.body, namespace=ns, write=call.write, credential=credential, timeout=timeout
        )
    if op.action == "replace":
        return await adapter.replace(
            r,
            name,
            call.body,
            namespace=ns,
            subresource=sub,
            write=call.write,
            credential=credential,
            timeout=timeout,
        )
    if op.action == "patch":
        if call.patch is None:
            raise errors.InvalidParameter(
                "the patch type is required",
                causes=(errors.Cause("FieldValueRequired", "Required value", "type"),),
            )
        return await adapter.patch(
            r,
            name,
            call.body,
            patch_options=call.patch,
            namespace=ns,
            subresource=sub,
            write=call.write,
            credential=credential,
            timeout=timeout,
        )
    if op.action == "delete":
        return await adapter.delete(
            r, name, namespace=ns, options=call.delete, credential=credential, timeout=timeout
        )
    if op.action == "deletecollection":
        return await adapter.delete_collection(
            r,
            namespace=ns,
            list_options=call.list,
            options=call.delete,
            credential=credential,
            timeout=timeout,
        )
    if op.action == "log":
        assert ns is not None  # logs are of pods, which are namespaced
        return await adapter.read_log(
            name, namespace=ns, options=call.log, credential=credential, timeout=timeout
        )
    raise ValueError(f"{op.action} streams: it is served by streams.open_stream(), not perform()")


async def get_body(
    adapter: KubeAdapter,
    op: Operation,
    call: Call,
    *,
    credential: Credential,
    timeout: float | None = None,
) -> bytes:
    """A ``get`` operation's answer as the upstream sent it, not decoded (what
    :func:`perform` decodes): the gRPC front end writes a small one from its bytes.

    Raises:
        GatewayError: refused before any request, or the upstream's error.
    """
    if op.action != "get":
        raise ValueError(f"{op.describe()} is not a get")
    return await adapter.get_body(
        op.resource,
        call.name,
        namespace=op.namespace(call.namespace, call.body),
        subresource=op.subresource,
        credential=credential,
        timeout=timeout,
    )


async def list_body(
    adapter: KubeAdapter,
    op: Operation,
    call: Call,
    *,
    credential: Credential,
    timeout: float | None = None,
    gzipped: bool = False,
) -> Undecoded:
    """A ``list`` operation's page as the upstream sent it, not decoded (what :func:`perform`
    decodes): for the large-list scope (``LargeLists.answer``, ``LargeLists.handed_on``),
    which decodes it or hands it to a list worker.  ``gzipped``: see
    :meth:`KubeAdapter.list_body <gateway.core.upstream.adapter.KubeAdapter.list_body>`.

    Raises:
        GatewayError: refused before any request, or the upstream's error.
    """
    if op.action != "list":
        raise ValueError(f"{op.describe()} is not a list")
    return await adapter.list_body(
        op.resource,
        namespace=op.namespace(call.namespace, call.body),
        options=call.list,
        credential=credential,
        timeout=timeout,
        gzipped=gzipped,
    )
