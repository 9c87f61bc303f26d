"""Object validation with the apiserver's field paths and messages (the common subset).

This is not the whole of ``pkg/apis/core/validation``: it covers what clients commonly trip
over (names, labels, required fields, enumerations, ranges, immutable identity), each worded
as the apiserver words it; every other rule is the real apiserver's, which the end-to-end
suite runs against.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Final

from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo.fielderrors import FieldError
from kube_gateway_demo.selectors import (
    DNS1123_SUBDOMAIN_MSG,
    DNS1123_SUBDOMAIN_RE,
    label_value_errors,
    qualified_name_errors,
)

Obj = dict[str, Any]
NameValidator = Callable[[str, bool], list[str]]

_DNS1123_LABEL_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_TOTAL_ANNOTATION_SIZE: Final = 256 * 1024


def _dns_name(
    name: str, prefix: bool, limit: int, pattern: re.Pattern[str], message: str
) -> list[str]:
    # A generateName (``prefix``) is checked as if a suffix followed it.
    if prefix:
        name = name + "a"
    errs = []
    if len(name) > limit:
        errs.append(f"must be no more than {limit} bytes")
    if not pattern.match(name):
        errs.append(message)
    return errs


def dns_subdomain(name: str, prefix: bool = False) -> list[str]:
    """``NameIsDNSSubdomain`` (``prefix`` validates a generateName)."""
    return _dns_name(name, prefix, 253, DNS1123_SUBDOMAIN_RE, DNS1123_SUBDOMAIN_MSG)


def dns_label(name: str, prefix: bool = False) -> list[str]:
    """``NameIsDNSLabel``."""
    return _dns_name(name, prefix, 63, _DNS1123_LABEL_RE, DNS1123_LABEL_MSG)


def _required_label(value: str, path: str) -> list[FieldError]:
    """A required field that holds a DNS label (a namespace, a container name)."""
    if not value:
        return [fe.required(path, "")]
    return [fe.invalid(path, value, msg) for msg in dns_label(value)]


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def validate_object_meta(
    meta: Obj, *, namespaced: bool, name_validator: NameValidator, path: str = "metadata"
) -> list[FieldError]:
    """``ValidateObjectMeta``: names, namespace, labels, annotations, owner references."""
    errs: list[FieldError] = []
    name = meta.get("name") or ""
    generate = meta.get("generateName") or ""
    if generate:
        for msg in name_validator(generate, True):
            errs.append(fe.invalid(f"{path}.generateName", generate, msg))
    if not name:
        errs.append(fe.required(f"{path}.name", "name or generateName is required"))
    else:
        for msg in name_validator(name, False):
            errs.append(fe.invalid(f"{path}.name", name, msg))
    if namespaced:
        errs += _required_label(meta.get("namespace") or "", f"{path}.namespace")
    elif meta.get("namespace"):
        errs.append(fe.forbidden(f"{path}.namespace", "not allowed on this type"))
    labels = meta.get("labels")
    if labels is not None:
        errs.extend(validate_labels(labels, f"{path}.labels"))
    annotations = meta.get("annotations")
    if annotations is not None:
        errs.extend(validate_annotations(annotations, f"{path}.annotations"))
    for i, raw_ref in enumerate(meta.get("ownerReferences") or []):
        p = f"{path}.ownerReferences[{i}]"
        ref = raw_ref if isinstance(raw_ref, dict) else {}
        for key, what in (
            ("apiVersion", "version"),
            ("kind", "kind"),
            ("name", "name"),
            ("uid", "uid"),
        ):
            if not ref.get(key):
                errs.append(fe.invalid(f"{p}.{key}", "", f"{what} must not be empty"))
    return errs


def validate_labels(labels: Any, path: str) -> list[FieldError]:
    """``ValidateLabels``: qualified-name keys and label values."""
    if not _is_str_map(labels):
        return [fe.invalid(path, labels, "labels must be a map of strings")]
    errs: list[FieldError] = []
    for key, value in labels.items():
        for msg in qualified_name_errors(key, what="a valid label key"):
            errs.append(fe.invalid(path, key, msg))
        for msg in label_value_errors(value):
            errs.append(fe.invalid(path, value, msg))
    return errs


def validate_annotations(annotations: Any, path: str) -> list[FieldError]:
    """``ValidateAnnotations``: qualified-name keys, total size at most 256 KiB."""
    if not _is_str_map(annotations):
        return [fe.invalid(path, annotations, "annotations must be a map of strings")]
    errs: list[FieldError] = []
    total = 0
    for key, value in annotations.items():
        for msg in qualified_name_errors(key.lower()):
            errs.append(fe.invalid(path, key, msg))
        total += len(key) + len(value)
    if total > _TOTAL_ANNOTATION_SIZE:
        errs.append(fe.too_long(path, _TOTAL_ANNOTATION_SIZE))
    return errs


def validate_meta_update(new: Obj, old: Obj) -> list[FieldError]:
    """``ValidateObjectMetaUpdate``: the identity fields are immutable."""
    errs: list[FieldError] = []
    nm, om = new.get("metadata", {}), old.get("metadata", {})
    for key in ("name", "namespace", "uid"):
        if nm.get(key, "") != om.get(key, ""):
            errs.append(fe.invalid(f"metadata.{key}", nm.get(key, ""), "field is immutable"))
    return errs


def _supported(value: Any, path: str, allowed: Iterable[str]) -> list[FieldError]:
    allowed = list(allowed)
    if value is not None and value not in allowed:
        return [fe.not_supported(path, value, allowed)]
    return []


def _port(value: Any, path: str) -> list[FieldError]:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        return [fe.invalid(path, value, "must be between 1 and 65535, inclusive")]
    return []


# --- pods ------------------------------------------------------------------------------------

_PULL_POLICIES: Final = ("Always", "IfNotPresent", "Never")
_PROTOCOLS: Final = ("SCTP", "TCP", "UDP")
_RESTART_POLICIES: Final = ("Always", "OnFailure", "Never")
_DNS_POLICIES: Final = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
_MESSAGE_POLICIES: Final = ("File", "FallbackToLogsOnError")


def _container(c: Any, path: str, names: set[str]) -> list[FieldError]:
    if not isinstance(c, dict):
        return [fe.invalid(path, c, "must be an object")]
    errs: list[FieldError] = []
    name = c.get("name") or ""
    errs += _required_label(name, f"{path}.name")
    if not c.get("image"):
        errs.append(fe.required(f"{path}.image", ""))
    errs += _supported(c.get("imagePullPolicy"), f"{path}.imagePullPolicy", _PULL_POLICIES)
    errs += _supported(
        c.get("terminationMessagePolicy"), f"{path}.terminationMessagePolicy", _MESSAGE_POLICIES
    )
    for j, port in enumerate(c.get("ports") or []):
        pp = f"{path}.ports[{j}]"
        if not isinstance(port, dict):
            errs.append(fe.invalid(pp, port, "must be an object"))
            continue
        number = port.get("containerPort")
        if not number:
            errs.append(fe.required(f"{pp}.containerPort", ""))
        else:
            errs += _port(number, f"{pp}.containerPort")
        errs += _supported(port.get("protocol"), f"{pp}.protocol", _PROTOCOLS)
    if name:
        # duplicates are reported after the container's own fields, as the apiserver does
        if name in names:
            errs.append(fe.duplicate(f"{path}.name", name))
        names.add(name)
    for j, env in enumerate(c.get("env") or []):
        if not isinstance(env, dict) or not env.get("name"):
            errs.append(fe.required(f"{path}.env[{j}].name", ""))
    return errs


def validate_pod_spec(spec: Any, path: str = "spec", *, create: bool = True) -> list[FieldError]:
    """The common subset of ``ValidatePodSpec`` (ephemeral containers are the subresource's
    to change; the real apiserver's finer rules, such as which spec fields an update may
    change, are left to the end-to-end suite)."""
    if not isinstance(spec, dict):
        return [fe.required(path, "")]
    errs: list[FieldError] = []
    names: set[str] = set()
    for i, c in enumerate(spec.get("initContainers") or []):
        errs += _container(c, f"{path}.initContainers[{i}]", names)
    containers = spec.get("containers") or []
    if not containers:
        errs.append(fe.required(f"{path}.containers", ""))
    for i, c in enumerate(containers):
        errs += _container(c, f"{path}.containers[{i}]", names)
    if spec.get("ephemeralContainers") and create:
        errs.append(fe.forbidden(f"{path}.ephemeralContainers", "cannot be set on create"))
    errs += _supported(spec.get("restartPolicy"), f"{path}.restartPolicy", _RESTART_POLICIES)
    errs += _supported(spec.get("dnsPolicy"), f"{path}.dnsPolicy", _DNS_POLICIES)
    node = spec.get("nodeName")
    if node:
        for msg in dns_subdomain(node):
            errs.append(fe.invalid(f"{path}.nodeName", node, msg))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and isinstance(grace, int) and grace < 0 and create:
        errs.append(
            fe.invalid(
                f"{path}.terminationGracePeriodSeconds", grace, "must be greater than or equal to 0"
            )
        )
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or deadline <= 0):
        errs.append(
            fe.invalid(
                f"{path}.activeDeadlineSeconds",
                deadline,
                "must be between 1 and 2147483647, inclusive",
            )
        )
    vol_names: set[str] = set()
    for i, vol in enumerate(spec.get("volumes") or []):
        name = vol.get("name") if isinstance(vol, dict) else None
        if not name:
            errs.append(fe.required(f"{path}.volumes[{i}].name", ""))
        elif name in vol_names:
            errs.append(fe.duplicate(f"{path}.volumes[{i}].name", name))
        else:
            vol_names.add(name)
    if spec.get("nodeSelector") is not None:
        errs += validate_labels(spec["nodeSelector"], f"{path}.nodeSelector")
    return errs


def validate_ephemeral_update(new: Obj, old: Obj) -> list[FieldError]:
    """``ValidatePodEphemeralContainersUpdate``: existing ones may not be removed or changed;
    new ones need a name unique in the pod and an image."""
    errs: list[FieldError] = []
    new_list = (new.get("spec") or {}).get("ephemeralContainers") or []
    old_list = (old.get("spec") or {}).get("ephemeralContainers") or []
    by_name = {c.get("name"): c for c in new_list if isinstance(c, dict)}
    for prev in old_list:
        name = fe.go_quote(str(prev.get("name")))
        if by_name.get(prev.get("name"), prev) != prev or prev.get("name") not in by_name:
            what = "removed" if prev.get("name") not in by_name else "changed"
            detail = f"existing ephemeral containers {name} may not be {what}\n"
            errs.append(fe.forbidden("spec.ephemeralContainers", detail))
    spec = new.get("spec") or {}
    old_names = {c.get("name") for c in old_list}
    names = {
        c["name"]
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []) + old_list
        if isinstance(c, dict) and c.get("name")
    }
    for i, c in enumerate(new_list):
        if not (isinstance(c, dict) and c.get("name") in old_names):
            errs += _container(c, f"spec.ephemeralContainers[{i}]", names)
    return errs


# --- events, leases ----------------------------------------------------------------------------


def validate_event(event: Obj) -> list[FieldError]:
    """``ValidateEventCreate`` for core/v1 (legacy) events."""
    errs: list[FieldError] = []
    ns = event.get("metadata", {}).get("namespace", "")
    involved = event.get("involvedObject") or {}
    inv_ns = involved.get("namespace", "")
    if not inv_ns:
        if ns not in ("", "default"):
            errs.append(
                fe.invalid("involvedObject.namespace", inv_ns, "does not match event.namespace")
            )
    elif ns != inv_ns:
        errs.append(
            fe.invalid("involvedObject.namespace", inv_ns, "does not match event.namespace")
        )
    if event.get("eventTime"):
        # events.k8s.io-style events written through core/v1
        component = event.get("reportingComponent") or ""
        if not component:
            errs.append(fe.required("reportingComponent", ""))
        for msg in qualified_name_errors(component, what="a valid label key"):
            errs.append(fe.invalid("reportingComponent", component, msg))
        if not event.get("reportingInstance"):
            errs.append(fe.required("reportingInstance", ""))
        if not event.get("action"):
            errs.append(fe.required("action", ""))
        if not event.get("reason"):
            errs.append(fe.required("reason", ""))
        if len(event.get("message") or "") > 1024:
            errs.append(fe.invalid("message", "", "can have at most 1024 characters"))
    return errs


def validate_lease(lease: Obj) -> list[FieldError]:
    """``ValidateLeaseSpec``."""
    spec = lease.get("spec") or {}
    errs: list[FieldError] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        errs.append(fe.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
        errs.append(
            fe.invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
        )
    strategy = spec.get("strategy")
    if strategy is not None:
        errs += _supported(strategy, "spec.strategy", ("OldestEmulationVersion",))
    return errs
