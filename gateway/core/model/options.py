"""Request options: the API's query parameters, validated as the apiserver validates them.

Each options record is frozen and turns into query parameters through a pure
``to_query()``; ``validate()`` refuses a bad combination before anything is sent, with the
same field paths and wording the apiserver uses (``InvalidParameter``, a 422 ``Invalid``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import Cause, InvalidParameter

Query = list[tuple[str, str]]

RESOURCE_VERSION_MATCH = ("NotOlderThan", "Exact")
FIELD_VALIDATION = ("Ignore", "Warn", "Strict")
PROPAGATION = ("Orphan", "Background", "Foreground")


class PatchType(enum.Enum):
    """The four patch flavours and their content types."""

    JSON = "application/json-patch+json"
    MERGE = "application/merge-patch+json"
    STRATEGIC_MERGE = "application/strategic-merge-patch+json"
    APPLY = "application/apply-patch+yaml"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _forbidden(field: str, message: str) -> Cause:
    return Cause("FieldValueForbidden", f"Forbidden: {message}", field)


def _not_supported(field: str, value: object, allowed: tuple[str, ...]) -> Cause:
    choices = ", ".join(f'"{a}"' for a in allowed)
    return Cause(
        "FieldValueNotSupported",
        f'Unsupported value: "{value}": supported values: {choices}',
        field,
    )


def _invalid(field: str, value: object, message: str) -> Cause:
    return Cause("FieldValueInvalid", f"Invalid value: {value}: {message}", field)


def _raise(kind: str, causes: list[Cause]) -> None:
    if causes:
        detail = ", ".join(f"{c.field}: {c.message}" for c in causes)
        raise InvalidParameter(
            f'{kind} "" is invalid: [{detail}]'
            if len(causes) > 1
            else f'{kind} "" is invalid: {detail}',
            causes=tuple(causes),
            details={"kind": kind, "group": "meta.k8s.io"},
        )


@dataclass(frozen=True, slots=True)
class ListOptions:
    """Options of a list, a watch or a deletecollection (the ``ListOptions`` of the apiserver)."""

    label_selector: str | None = None
    field_selector: str | None = None
    limit: int | None = None
    continue_: str | None = None
    resource_version: str | None = None
    resource_version_match: str | None = None
    send_initial_events: bool | None = None
    allow_watch_bookmarks: bool | None = None
    timeout_seconds: int | None = None
    pretty: bool | None = None

    def validate(self, *, watch: bool) -> None:
        """Refuse what the apiserver's ``ValidateListOptions`` refuses.

        Raises:
            InvalidParameter: with one cause per problem.
        """
        causes: list[Cause] = []
        match = self.resource_version_match
        if self.limit is not None and self.limit < 0:
            causes.append(_invalid("limit", self.limit, "must be greater than or equal to 0"))
        if self.timeout_seconds is not None and self.timeout_seconds < 0:
            causes.append(
                _invalid(
                    "timeoutSeconds", self.timeout_seconds, "must be greater than or equal to 0"
                )
            )
        if watch:
            if self.continue_:
                causes.append(_forbidden("continue", "continue is forbidden for watch"))
            if self.limit:
                causes.append(_forbidden("limit", "limit is forbidden for watch"))
            if self.send_initial_events is not None and match != "NotOlderThan":
                causes.append(
                    _forbidden(
                        "resourceVersionMatch",
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    )
                )
            if match:
                if self.send_initial_events is None:
                    causes.append(
                        _forbidden(
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden for watch unless "
                            "sendInitialEvents is provided",
                        )
                    )
                if match != "NotOlderThan":
                    causes.append(_not_supported("resourceVersionMatch", match, ("NotOlderThan",)))
        else:
            if match:
                if not self.resource_version:
                    causes.append(
                        _forbidden(
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden unless resourceVersion is provided",
                        )
                    )
                if self.continue_:
                    causes.append(
                        _forbidden(
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden when continue is provided",
                        )
                    )
                if match not in RESOURCE_VERSION_MATCH:
                    causes.append(
                        _not_supported("resourceVersionMatch", match, (*RESOURCE_VERSION_MATCH, ""))
                    )
                if match == "Exact" and self.resource_version == "0":
                    causes.append(
                        _forbidden(
                            "resourceVersionMatch",
                            'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                        )
                    )
            if self.send_initial_events is not None:
                causes.append(
                    _forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list")
                )
            if self.continue_ and self.resource_version not in (None, "", "0"):
                causes.append(
                    _forbidden(
                        "resourceVersion",
                        "specifying resource version is not allowed when using continue",
                    )
                )
        _raise("ListOptions", causes)

    def to_query(self, *, watch: bool = False) -> Query:
        q: Query = []
        if self.label_selector:
            q.append(("labelSelector", self.label_selector))
        if self.field_selector:
            q.append(("fieldSelector", self.field_selector))
        if self.limit is not None and not watch:
            q.append(("limit", str(self.limit)))
        if self.continue_ and not watch:
            q.append(("continue", self.continue_))
        if self.resource_version is not None:
            q.append(("resourceVersion", self.resource_version))
        if self.resource_version_match:
            q.append(("resourceVersionMatch", self.resource_version_match))
        if self.send_initial_events is not None:
            q.append(("sendInitialEvents", _bool(self.send_initial_events)))
        if watch:
            q.append(("watch", "true"))
            if self.allow_watch_bookmarks is not None:
                q.append(("allowWatchBookmarks", _bool(self.allow_watch_bookmarks)))
        if self.timeout_seconds is not None:
            q.append(("timeoutSeconds", str(self.timeout_seconds)))
        if self.pretty is not None:
            q.append(("pretty", _bool(self.pretty)))
        return q


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Options every write carries: ``dryRun``, ``fieldManager``, ``fieldValidation``."""

    dry_run: bool = False
    field_manager: str | None = None
    field_validation: str | None = None
    pretty: bool | None = None

    def validate(self) -> None:
        causes: list[Cause] = []
        if self.field_validation is not None and self.field_validation not in FIELD_VALIDATION:
            causes.append(
                _not_supported("fieldValidation", self.field_validation, FIELD_VALIDATION)
            )
        if self.field_manager is not None:
            if len(self.field_manager) > 128:
                causes.append(
                    Cause(
                        "FieldValueTooLong",
                        "Too long: may not be more than 128 bytes",
                        "fieldManager",
                    )
                )
            if not self.field_manager.isprintable():
                causes.append(
                    _invalid("fieldManager", self.field_manager, "must be printable characters")
                )
        _raise("PatchOptions" if self.field_manager else "CreateOptions", causes)

    def to_query(self) -> Query:
        q: Query = []
        if self.dry_run:
            q.append(("dryRun", "All"))
        if self.field_manager:
            q.append(("fieldManager", self.field_manager))
        if self.field_validation:
            q.append(("fieldValidation", self.field_validation))
        if self.pretty is not None:
            q.append(("pretty", _bool(self.pretty)))
        return q


@dataclass(frozen=True, slots=True)
class PatchOptions:
    """A patch: its type, plus ``force`` which only apply patches accept."""

    type: PatchType
    force: bool | None = None

    def validate(self, write: WriteOptions) -> None:
        causes: list[Cause] = []
        if self.type is PatchType.APPLY:
            if not write.field_manager:
                causes.append(
                    Cause(
                        "FieldValueRequired",
                        "Required value: is required for apply patch",
                        "fieldManager",
                    )
                )
        elif self.force is not None:
            causes.append(_forbidden("force", "may not be specified for non-apply patch"))
        _raise("PatchOptions", causes)

    def to_query(self) -> Query:
        return [("force", _bool(self.force))] if self.force is not None else []


@dataclass(frozen=True, slots=True)
class Preconditions:
    uid: str | None = None
    resource_version: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteOptions:
    """The ``DeleteOptions`` body of a delete or deletecollection."""

    grace_period_seconds: int | None = None
    propagation_policy: str | None = None
    orphan_dependents: bool | None = None
    preconditions: Preconditions | None = None
    dry_run: bool = False

    def validate(self) -> None:
        causes: list[Cause] = []
        if self.orphan_dependents is not None and self.propagation_policy is not None:
            causes.append(
                _invalid(
                    "propagationPolicy",
                    self.propagation_policy,
                    "orphanDependents and deletionPropagation cannot be both set",
                )
            )
        if self.propagation_policy is not None and self.propagation_policy not in PROPAGATION:
            causes.append(_not_supported("propagationPolicy", self.propagation_policy, PROPAGATION))
        if self.grace_period_seconds is not None and self.grace_period_seconds < 0:
            causes.append(
                _invalid(
                    "gracePeriodSeconds",
                    self.grace_period_seconds,
                    "must be greater than or equal to 0",
                )
            )
        _raise("DeleteOptions", causes)

    def to_query(self) -> Query:
        """``dryRun``, which the apiserver also wants as a parameter (the rest is the body)."""
        return [("dryRun", "All")] if self.dry_run else []

    def body(self) -> dict[str, Any]:
        """The ``DeleteOptions`` JSON body (the apiserver reads the options from either place)."""
        b: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if self.grace_period_seconds is not None:
            b["gracePeriodSeconds"] = self.grace_period_seconds
        if self.propagation_policy is not None:
            b["propagationPolicy"] = self.propagation_policy
        if self.orphan_dependents is not None:
            b["orphanDependents"] = self.orphan_dependents
        if self.preconditions is not None:
            pre: dict[str, str] = {}
            if self.preconditions.uid is not None:
                pre["uid"] = self.preconditions.uid
            if self.preconditions.resource_version is not None:
                pre["resourceVersion"] = self.preconditions.resource_version
            b["preconditions"] = pre
        if self.dry_run:
            b["dryRun"] = ["All"]
        return b


@dataclass(frozen=True, slots=True)
class LogOptions:
    """Options of ``pods/log``: the parameters the Kubernetes API reference lists for "read
    log of the specified Pod", plus ``sinceTime`` (a field of ``PodLogOptions``)."""

    container: str | None = None
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since_seconds: int | None = None
    since_time: str | None = None
    limit_bytes: int | None = None
    insecure_skip_tls_verify_backend: bool = False
    pretty: bool | None = None

    def validate(self) -> None:
        causes: list[Cause] = []
        if self.since_seconds is not None and self.since_time is not None:
            causes.append(
                _forbidden(
                    "sinceTime", "at most one of `sinceTime` or `sinceSeconds` may be specified"
                )
            )
        if self.since_seconds is not None and self.since_seconds < 1:
            causes.append(_invalid("sinceSeconds", self.since_seconds, "must be greater than 0"))
        if self.tail_lines is not None and self.tail_lines < 0:
            causes.append(
                _invalid("tailLines", self.tail_lines, "must be greater than or equal to 0")
            )
        if self.limit_bytes is not None and self.limit_bytes < 1:
            causes.append(_invalid("limitBytes", self.limit_bytes, "must be greater than 0"))
        _raise("PodLogOptions", causes)

    def to_query(self) -> Query:
        q: Query = []
        if self.container:
            q.append(("container", self.container))
        if self.follow:
            q.append(("follow", "true"))
        if self.previous:
            q.append(("previous", "true"))
        if self.timestamps:
            q.append(("timestamps", "true"))
        if self.tail_lines is not None:
            q.append(("tailLines", str(self.tail_lines)))
        if self.since_seconds is not None:
            q.append(("sinceSeconds", str(self.since_seconds)))
        if self.since_time is not None:
            q.append(("sinceTime", self.since_time))
        if self.limit_bytes is not None:
            q.append(("limitBytes", str(self.limit_bytes)))
        if self.insecure_skip_tls_verify_backend:
            q.append(("insecureSkipTLSVerifyBackend", "true"))
        if self.pretty is not None:
            q.append(("pretty", _bool(self.pretty)))
        return q
