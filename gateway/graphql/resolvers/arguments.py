"""Argument lists of the root fields and their conversion into the core's option records.

The argument *sets* are data (tuples of :class:`Arg`), shared by every resource; the core
(:mod:`gateway.core.model.options`) validates the values exactly as the apiserver would.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

import strawberry

from gateway.core import (
    DeleteOptions,
    ListOptions,
    LogOptions,
    PatchOptions,
    PatchType,
    Preconditions,
    WriteOptions,
)
from gateway.graphql.resolvers.scalars import JSON, Long, Time


@strawberry.enum(description="How `resourceVersion` applies to a list.")
class ResourceVersionMatch(enum.Enum):
    NOT_OLDER_THAN = "NotOlderThan"
    EXACT = "Exact"


@strawberry.enum(description="What the apiserver does with unknown or duplicate fields.")
class FieldValidation(enum.Enum):
    IGNORE = "Ignore"
    WARN = "Warn"
    STRICT = "Strict"


@strawberry.enum(name="PatchType", description="The patch flavour (its content type upstream).")
class PatchKind(enum.Enum):
    JSON = "JSON"
    MERGE = "MERGE"
    STRATEGIC_MERGE = "STRATEGIC_MERGE"
    APPLY = "APPLY"


@strawberry.enum(description="Whether and how garbage collection deletes dependents.")
class PropagationPolicy(enum.Enum):
    ORPHAN = "Orphan"
    BACKGROUND = "Background"
    FOREGROUND = "Foreground"


@strawberry.enum(description="The type of a watch event.")
class WatchEventType(enum.StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"
    RESYNC = "RESYNC"


@strawberry.input(description="Preconditions a delete must meet (else 409 Conflict).")
class PreconditionsInput:
    uid: Optional[str] = None  # noqa: UP045
    resource_version: Optional[str] = strawberry.field(name="resourceVersion", default=None)  # noqa: UP045


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a generated root field (``name`` is the GraphQL name)."""

    name: str
    annotation: Any
    description: str
    required: bool = False
    default: Any = None


def _opt(name: str, annotation: Any, description: str) -> Arg:
    return Arg(name, Optional[annotation], description)  # noqa: UP045


NAMESPACE = Arg("namespace", str, "The namespace.", required=True)
ANY_NAMESPACE = _opt("namespace", str, "The namespace; omit it for all namespaces.")
NAME = Arg("name", str, "The object's name.", required=True)

SELECTORS = (
    _opt("labelSelector", str, "Only objects whose labels match (`app=web,tier!=db`)."),
    _opt("fieldSelector", str, "Only objects whose fields match (`status.phase=Running`)."),
)
LIST = (
    *SELECTORS,
    _opt("limit", int, "At most this many items; `metadata.continue` fetches the rest."),
    _opt("continue", str, "The `metadata.continue` token of the previous page."),
    _opt("resourceVersion", str, "Serve the list at (or not older than) this version."),
    _opt("resourceVersionMatch", ResourceVersionMatch, "How `resourceVersion` applies."),
)
WRITE = (
    _opt("dryRun", bool, "Validate and default, but persist nothing."),
    _opt("fieldManager", str, "The name of the actor making the change."),
    _opt("fieldValidation", FieldValidation, "How unknown or duplicate fields are treated."),
)
PATCH = (
    Arg("patch", JSON, "The patch: a JSON value, or YAML/JSON text.", required=True),
    Arg(
        "type",
        PatchKind,
        "The patch type (`APPLY` needs `fieldManager`).",
        default=PatchKind.MERGE,
    ),
    _opt("force", bool, "APPLY only: take ownership of conflicting fields."),
)
DELETE = (
    _opt("gracePeriodSeconds", Long, "Seconds before the object is deleted (0: now)."),
    _opt("propagationPolicy", PropagationPolicy, "How dependents are garbage collected."),
    _opt("orphanDependents", bool, "Deprecated: use propagationPolicy."),
    _opt("preconditions", PreconditionsInput, "Delete only if these still hold."),
    _opt("dryRun", bool, "Validate, but delete nothing."),
)
LOG = (
    _opt("container", str, "The container (required when the pod has several)."),
    _opt("tailLines", Long, "Only the last N lines."),
    _opt("sinceSeconds", Long, "Only lines newer than this many seconds."),
    _opt("sinceTime", Time, "Only lines newer than this time."),
    _opt("limitBytes", Long, "At most this many bytes (may cut a line)."),
    _opt("previous", bool, "The log of the previous, terminated instance."),
    _opt("timestamps", bool, "Prefix every line with its RFC 3339 timestamp."),
)
WATCH = (
    _opt("name", str, "Only the object with this name."),
    *SELECTORS,
    _opt("resourceVersion", str, "Resume after this version (from an earlier event)."),
    _opt(
        "sendInitialEvents",
        bool,
        "Start with ADDED for every current object (default: true unless resuming).",
    ),
    _opt("allowBookmarks", bool, "Also deliver BOOKMARK events (progress markers)."),
    Arg(
        "changedFieldsOnly",
        Optional[bool],  # noqa: UP045
        "Deliver a MODIFIED event only when a field this subscription selects under `object` "
        "changed (ADDED, DELETED, BOOKMARK and RESYNC always go).",
        default=False,
    ),
)


def list_options(a: Mapping[str, Any]) -> ListOptions:
    match = a.get("resourceVersionMatch")
    return ListOptions(
        label_selector=a.get("labelSelector"),
        field_selector=a.get("fieldSelector"),
        limit=a.get("limit"),
        continue_=a.get("continue"),
        resource_version=a.get("resourceVersion"),
        resource_version_match=match.value if match is not None else None,
    )


def write_options(a: Mapping[str, Any]) -> WriteOptions:
    validation = a.get("fieldValidation")
    return WriteOptions(
        dry_run=bool(a.get("dryRun")),
        field_manager=a.get("fieldManager"),
        field_validation=validation.value if validation is not None else None,
    )


def patch_options(a: Mapping[str, Any]) -> PatchOptions:
    kind: PatchKind = a.get("type") or PatchKind.MERGE
    return PatchOptions(PatchType[kind.name], force=a.get("force"))


def delete_options(a: Mapping[str, Any]) -> DeleteOptions:
    policy = a.get("propagationPolicy")
    pre = a.get("preconditions")
    return DeleteOptions(
        grace_period_seconds=a.get("gracePeriodSeconds"),
        propagation_policy=policy.value if policy is not None else None,
        orphan_dependents=a.get("orphanDependents"),
        preconditions=Preconditions(uid=pre.uid, resource_version=pre.resource_version)
        if pre is not None
        else None,
        dry_run=bool(a.get("dryRun")),
    )


def log_options(a: Mapping[str, Any], *, follow: bool = False) -> LogOptions:
    return LogOptions(
        container=a.get("container"),
        follow=follow,
        previous=bool(a.get("previous")),
        timestamps=bool(a.get("timestamps")),
        tail_lines=a.get("tailLines"),
        since_seconds=a.get("sinceSeconds"),
        since_time=a.get("sinceTime"),
        limit_bytes=a.get("limitBytes"),
    )
