"""The request options of writes, deletes and lists, and a write's result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
    parse_label_selector,
)
from kube_gateway_demo.status import options_invalid

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class DemoWriteOptions:
    """The options every write carries (``CreateOptions``/``UpdateOptions``/``PatchOptions``)."""

    dry_run: bool = False
    field_manager: str = "demo-store"
    field_validation: str = "Warn"
    force: bool = False


@dataclass(frozen=True, slots=True)
class DemoDeleteOptions:
    """``DeleteOptions`` (query parameters and body merged)."""

    grace_period_seconds: int | None = None
    propagation_policy: str | None = None
    orphan_dependents: bool | None = None
    uid: str | None = None
    resource_version: str | None = None
    dry_run: bool = False

    def validate(self) -> None:
        """``ValidateDeleteOptions`` (422 ``DeleteOptions.meta.k8s.io "" is invalid``)."""
        errs: list[fe.FieldError] = []
        if self.orphan_dependents is not None and self.propagation_policy is not None:
            errs.append(
                fe.invalid(
                    "propagationPolicy",
                    self.propagation_policy,
                    "orphanDependents and deletionPropagation cannot be both set",
                )
            )
        if self.propagation_policy is not None and self.propagation_policy not in (
            "Foreground",
            "Background",
            "Orphan",
        ):
            errs.append(
                fe.not_supported(
                    "propagationPolicy",
                    self.propagation_policy,
                    ("Foreground", "Background", "Orphan", "nil"),
                )
            )
        if errs:
            raise options_invalid("DeleteOptions", errs)


@dataclass(frozen=True, slots=True)
class ListQuery:
    """What selects a list or a watch."""

    namespace: str | None = None
    labels: LabelSelector = field(default_factory=LabelSelector)
    fields: FieldSelector = field(default_factory=FieldSelector)

    @classmethod
    def parse(
        cls,
        namespace: str | None,
        label_selector: str,
        field_selector: str,
        field_labels: frozenset[str],
    ) -> ListQuery:
        """Parse selector strings (``field_labels``: the fields a field selector may name).

        Raises:
            DemoApiError: 400 for a bad selector.
        """
        return cls(
            namespace=namespace,
            labels=parse_label_selector(label_selector) if label_selector else LabelSelector(),
            fields=parse_field_selector(field_selector, field_labels),
        )


@dataclass(slots=True)
class WriteResult:
    """A write's response body, HTTP status and warnings."""

    body: Obj
    code: int
    warnings: list[str]
