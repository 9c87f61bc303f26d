"""Registry strategies: defaulting, what create/update may touch, validation, selectable
fields and deletion behaviour, after ``pkg/registry/*/strategy.go``.

:class:`Strategy` is what every resource of the registry gets; :data:`SPECIFIC` adds the
behaviour of particular resources, keyed by registry key.  A resource the registry gains
(say networking.k8s.io/v1 Ingresses) is served with the generic strategy
(:class:`StatusStrategy` when it has a status subresource) and its schema, no edit here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

from gateway.core.model.registry import ENDPOINTS, EVENT, LEASE, POD, Resource
from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo import validation as v
from kube_gateway_demo.catalog import (
    CRD,
    DEPLOYMENT,
    NAMESPACE,
    NODE,
    REPLICASET,
    SERVED_AS_CUSTOM,
    SERVICE,
)
from kube_gateway_demo.fielderrors import FieldError
from kube_gateway_demo.selectors import meta_fields
from kube_gateway_demo.structure import DecodeResult, validate_custom
from kube_gateway_demo.structure import decode as decode_struct

Obj = dict[str, Any]

_META_FIELDS: Final = frozenset(("metadata.name", "metadata.namespace"))


class Strategy:
    """Generic behaviour; subclasses override what their kind does differently.

    Args:
        res: the served resource.
        type_name: the schema definition of its objects (:mod:`gateway.core.model.schema`).
    """

    custom_resource: ClassVar[bool] = False
    allow_create_on_update: ClassVar[bool] = True
    allow_unconditional_update: ClassVar[bool] = True
    return_deleted_object: ClassVar[bool] = False
    tracks_generation: ClassVar[bool] = False
    field_labels: ClassVar[frozenset[str]] = _META_FIELDS

    def __init__(self, res: Resource, type_name: str) -> None:
        self.res = res
        self.type_name = type_name

    def validate_name(self, name: str, prefix: bool) -> list[str]:
        """The kind's name validation (``ValidateNameFunc``)."""
        return v.dns_subdomain(name, prefix)

    def decode(self, obj: Obj, version: str) -> DecodeResult:
        """Typed decoding of a written object of ``version`` (in place): unknown fields
        dropped and reported, the first wrong JSON type."""
        return decode_struct(self.type_name, obj)

    def admit_create(self, name: str) -> None:
        """Refuse a create the kind's state forbids (raises :class:`DemoApiError`)."""

    def mark_deleting(self, obj: Obj, now: str) -> None:
        """What a delete adds to an object it marks as being deleted (finalizers, status)."""

    def fields(self, obj: Obj) -> dict[str, str]:
        """The selectable fields (``GetAttrs``)."""
        return meta_fields(obj, self.res.namespaced)

    def default(self, obj: Obj) -> None:
        """Defaulting applied when any write body is decoded."""

    def prepare_for_create(self, obj: Obj) -> None:
        """``PrepareForCreate``."""
        obj.get("metadata", {}).pop("generation", None)
        if self.tracks_generation:
            obj["metadata"]["generation"] = 1

    def prepare_for_update(self, new: Obj, old: Obj, subresource: str | None) -> None:
        """``PrepareForUpdate`` (and, for generation-tracking kinds, the generation bump)."""
        if self.tracks_generation and new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 0)) + 1

    def validate(self, obj: Obj) -> list[FieldError]:
        """``Validate`` on create."""
        return v.validate_object_meta(
            obj.get("metadata", {}),
            namespaced=self.res.namespaced,
            name_validator=self.validate_name,
        )

    def validate_update(self, new: Obj, old: Obj, subresource: str | None) -> list[FieldError]:
        """``ValidateUpdate``."""
        errs = v.validate_meta_update(new, old)
        meta = new.get("metadata", {})
        if meta.get("labels") is not None:
            errs += v.validate_labels(meta["labels"], "metadata.labels")
        if meta.get("annotations") is not None:
            errs += v.validate_annotations(meta["annotations"], "metadata.annotations")
        return errs

    def canonicalize(self, obj: Obj) -> None:
        """Shape the stored object like a Go struct would serialise (empty maps omitted...)."""
        meta = obj.get("metadata", {})
        for key in ("labels", "annotations", "finalizers", "ownerReferences", "managedFields"):
            if key in meta and not meta[key]:
                del meta[key]

    def grace_period(self, obj: Obj, requested: int | None) -> int | None:
        """``CheckGracefulDelete``: the grace period, or None when deletion is immediate."""
        return None

    def tracked(self, subresource: str | None) -> Callable[[tuple[str, ...]], bool]:
        """``GetResetFields``: which field paths a write through ``subresource`` may own."""
        return _keep_all

    def reset_fields(self, config: Obj, subresource: str | None) -> Obj:
        """An apply configuration without what this write resets, so apply neither tracks
        nor conflicts on it."""
        return config

    def empty(self) -> Obj:
        """How an empty object of the kind serialises (what a BOOKMARK carries besides
        ``metadata``): struct fields without ``omitempty`` show up as ``{}`` or ``null``."""
        return {}


_NOT_READY_TOLERATIONS: Final = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)


def _default_container(c: Any) -> None:
    if not isinstance(c, dict):
        return
    c.setdefault("resources", {})
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = c.get("image")
    if "imagePullPolicy" not in c and isinstance(image, str):
        c["imagePullPolicy"] = "Always" if _image_tag(image) == "latest" else "IfNotPresent"
    for port in c.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def _default_pod_status(status: Any) -> None:
    # Zero-valued metav1.Time fields and struct fields without omitempty serialise anyway.
    if not isinstance(status, dict):
        return
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict):
            cond.setdefault("lastProbeTime", None)
            cond.setdefault("lastTransitionTime", None)
    for group in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(group) or []:
            if not isinstance(cs, dict):
                continue
            for key in ("state", "lastState"):
                state = cs.setdefault(key, {})
                if not isinstance(state, dict):
                    continue
                if isinstance(state.get("running"), dict):
                    state["running"].setdefault("startedAt", None)
                if isinstance(state.get("terminated"), dict):
                    state["terminated"].setdefault("startedAt", None)
                    state["terminated"].setdefault("finishedAt", None)


def _image_tag(image: str) -> str:
    # parsers.ParseImageName: no tag and no digest means "latest".
    if "@" in image:
        return ""
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else "latest"


def qos_class(spec: Obj) -> str:
    """``qos.GetPodQOS``: BestEffort, Guaranteed or Burstable."""
    containers = [
        c
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
        if isinstance(c, dict)
    ]
    requests_any = limits_any = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req:
            requests_any = True
        if lim:
            limits_any = True
        for name in ("cpu", "memory"):
            if name not in lim or req.get(name, lim.get(name)) != lim[name]:
                guaranteed = False
    if not requests_any and not limits_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


class PodStrategy(Strategy):
    """Pods: status is the kubelet's, spec is mostly immutable, deletion is graceful."""

    allow_create_on_update = False
    return_deleted_object = True
    tracks_generation = True
    field_labels = _META_FIELDS | {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }

    def fields(self, obj: Obj) -> dict[str, str]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        ips = status.get("podIPs") or []
        pod_ip = ips[0].get("ip", "") if ips and isinstance(ips[0], dict) else ""
        out = meta_fields(obj, True)
        out.update(
            {
                "spec.nodeName": str(spec.get("nodeName", "")),
                "spec.restartPolicy": str(spec.get("restartPolicy", "")),
                "spec.schedulerName": str(spec.get("schedulerName", "")),
                "spec.serviceAccountName": str(spec.get("serviceAccountName", "")),
                "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
                "status.phase": str(status.get("phase", "")),
                "status.podIP": str(pod_ip),
                "status.nominatedNodeName": str(status.get("nominatedNodeName", "")),
            }
        )
        return out

    def default(self, obj: Obj) -> None:
        _default_pod_status(obj.get("status"))
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("securityContext", {})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("enableServiceLinks", True)
        for group in ("initContainers", "containers", "ephemeralContainers"):
            for c in spec.get(group) or []:
                _default_container(c)

    def prepare_for_create(self, obj: Obj) -> None:
        super().prepare_for_create(obj)
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            # What the Priority and DefaultTolerationSeconds admission plugins add to every
            # pod (ServiceAccount admission is off, as in the reference cluster: it would need
            # a "default" ServiceAccount and add a token volume).
            spec.setdefault("priority", 0)
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
            tolerations = spec.setdefault("tolerations", [])
            if isinstance(tolerations, list):
                keys = {t.get("key") for t in tolerations if isinstance(t, dict)}
                tolerations.extend(dict(t) for t in _NOT_READY_TOLERATIONS if t["key"] not in keys)
        obj["status"] = {
            "phase": "Pending",
            "qosClass": qos_class(spec if isinstance(spec, dict) else {}),
        }

    def prepare_for_update(self, new: Obj, old: Obj, subresource: str | None) -> None:
        if subresource == "status":
            new["spec"] = old.get("spec", {})
            new["metadata"].pop("deletionTimestamp", None)
            if "deletionTimestamp" in old["metadata"]:
                new["metadata"]["deletionTimestamp"] = old["metadata"]["deletionTimestamp"]
            _keep(new["metadata"], old["metadata"], "ownerReferences")
            status = new.setdefault("status", {})
            if isinstance(status, dict) and not status.get("qosClass"):
                old_qos = (old.get("status") or {}).get("qosClass")
                if old_qos:
                    status["qosClass"] = old_qos
            return
        if subresource == "ephemeralcontainers":
            ephemeral = (new.get("spec") or {}).get("ephemeralContainers")
            spec = dict(old.get("spec") or {})
            if ephemeral:
                spec["ephemeralContainers"] = ephemeral
            else:
                spec.pop("ephemeralContainers", None)
            new["spec"] = spec
            new["status"] = old.get("status", {})
            for key in ("labels", "annotations", "finalizers", "ownerReferences"):
                _keep(new["metadata"], old["metadata"], key)
        else:
            new["status"] = old.get("status", {})
        super().prepare_for_update(new, old, subresource)

    def validate(self, obj: Obj) -> list[FieldError]:
        return super().validate(obj) + v.validate_pod_spec(obj.get("spec"))

    def validate_update(self, new: Obj, old: Obj, subresource: str | None) -> list[FieldError]:
        errs = super().validate_update(new, old, subresource)
        if subresource == "ephemeralcontainers":
            return errs + v.validate_ephemeral_update(new, old)
        if subresource is not None:
            return errs
        errs += v.validate_pod_spec(new.get("spec"), create=False)
        ephemeral = [(o.get("spec") or {}).get("ephemeralContainers") for o in (new, old)]
        if ephemeral[0] != ephemeral[1]:
            errs.append(
                fe.forbidden("spec", "ephemeral containers are the subresource's to change")
            )
        return errs

    def canonicalize(self, obj: Obj) -> None:
        super().canonicalize(obj)
        obj.setdefault("spec", {})
        obj.setdefault("status", {})

    def tracked(self, subresource: str | None) -> Callable[[tuple[str, ...]], bool]:
        if subresource == "status":
            return _not_under(
                ("f:spec",),
                ("f:metadata", "f:deletionTimestamp"),
                ("f:metadata", "f:ownerReferences"),
            )
        if subresource == "ephemeralcontainers":
            return lambda path: path[:2] == ("f:spec", "f:ephemeralContainers")
        return _not_under(("f:status",))

    def reset_fields(self, config: Obj, subresource: str | None) -> Obj:
        config = dict(config)
        if subresource == "status":
            config.pop("spec", None)
        elif subresource == "ephemeralcontainers":
            spec = config.get("spec") or {}
            config = {k: v for k, v in config.items() if k not in ("spec", "status")}
            if isinstance(spec, dict) and "ephemeralContainers" in spec:
                config["spec"] = {"ephemeralContainers": spec["ephemeralContainers"]}
        else:
            config.pop("status", None)
        return config

    def empty(self) -> Obj:
        return {"spec": {"containers": None}, "status": {}}

    def grace_period(self, obj: Obj, requested: int | None) -> int | None:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        period = requested
        if period is None:
            period = spec.get("terminationGracePeriodSeconds") or 0
        if not spec.get("nodeName") or status.get("phase") in ("Failed", "Succeeded"):
            period = 0
        return 1 if period < 0 else period


def _keep_all(path: tuple[str, ...]) -> bool:
    return True


def _not_under(*prefixes: tuple[str, ...]) -> Callable[[tuple[str, ...]], bool]:
    def keep(path: tuple[str, ...]) -> bool:
        return not any(path[: len(p)] == p for p in prefixes)

    return keep


def _keep(new_meta: Obj, old_meta: Obj, key: str) -> None:
    if key in old_meta:
        new_meta[key] = old_meta[key]
    else:
        new_meta.pop(key, None)


class EventStrategy(Strategy):
    """core/v1 Events."""

    field_labels = _META_FIELDS | {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }

    def fields(self, obj: Obj) -> dict[str, str]:
        inv = obj.get("involvedObject") or {}
        source = (obj.get("source") or {}).get("component") or obj.get("reportingComponent", "")
        out = meta_fields(obj, True)
        for key in (
            "kind",
            "namespace",
            "name",
            "uid",
            "apiVersion",
            "resourceVersion",
            "fieldPath",
        ):
            out[f"involvedObject.{key}"] = str(inv.get(key, ""))
        out.update(
            {
                "reason": str(obj.get("reason", "")),
                "reportingComponent": str(obj.get("reportingComponent", "")),
                "source": str(source),
                "type": str(obj.get("type", "")),
            }
        )
        return out

    def validate(self, obj: Obj) -> list[FieldError]:
        return super().validate(obj) + v.validate_event(obj)

    def validate_update(self, new: Obj, old: Obj, subresource: str | None) -> list[FieldError]:
        return super().validate_update(new, old, subresource) + v.validate_event(new)

    def empty(self) -> Obj:
        return {
            "involvedObject": {},
            "source": {},
            "firstTimestamp": None,
            "lastTimestamp": None,
            "eventTime": None,
            "reportingComponent": "",
            "reportingInstance": "",
        }

    def canonicalize(self, obj: Obj) -> None:
        super().canonicalize(obj)
        # Struct and time fields without omitempty semantics always serialise.
        obj.setdefault("involvedObject", {})
        obj.setdefault("source", {})
        for key in ("firstTimestamp", "lastTimestamp", "eventTime"):
            obj.setdefault(key, None)
        obj.setdefault("reportingComponent", "")
        obj.setdefault("reportingInstance", "")


class EndpointsStrategy(Strategy):
    """core/v1 Endpoints (deprecated in favour of EndpointSlices, still served)."""

    def default(self, obj: Obj) -> None:
        for subset in obj.get("subsets") or []:
            if isinstance(subset, dict):
                for port in subset.get("ports") or []:
                    if isinstance(port, dict):
                        port.setdefault("protocol", "TCP")


class LeaseStrategy(Strategy):
    """coordination.k8s.io/v1 Leases: PUT needs a resourceVersion."""

    allow_unconditional_update = False

    def validate(self, obj: Obj) -> list[FieldError]:
        return super().validate(obj) + v.validate_lease(obj)

    def validate_update(self, new: Obj, old: Obj, subresource: str | None) -> list[FieldError]:
        return super().validate_update(new, old, subresource) + v.validate_lease(new)

    def canonicalize(self, obj: Obj) -> None:
        super().canonicalize(obj)
        obj.setdefault("spec", {})

    def empty(self) -> Obj:
        return {"spec": {}}


class CustomResourceStrategy(Strategy):
    """A resource served as a custom resource, as the reference cluster serves OpenShift's
    Image (a CRD): structural-schema validation, DNS-subdomain names, no strategic merge
    patch, resourceVersion required on PUT, generation on every change outside metadata,
    objects as maps (sorted keys)."""

    custom_resource = True
    allow_create_on_update = False
    allow_unconditional_update = False
    tracks_generation = True

    @property
    def has_status(self) -> bool:
        """Whether the CRD enables the status subresource (status is then its own)."""
        return "status" in self.res.subresources

    def prepare_for_create(self, obj: Obj) -> None:
        super().prepare_for_create(obj)
        if self.has_status:
            obj.pop("status", None)

    def prepare_for_update(self, new: Obj, old: Obj, subresource: str | None) -> None:
        if self.has_status:
            _split_status(new, old, subresource)
            if subresource == "status":
                return
        ignored = ("metadata", "kind", "apiVersion", *(("status",) if self.has_status else ()))

        def body(obj: Obj) -> Obj:
            return {k: v for k, v in obj.items() if k not in ignored}

        if body(new) != body(old):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 0)) + 1

    def tracked(self, subresource: str | None) -> Callable[[tuple[str, ...]], bool]:
        if not self.has_status:
            return _keep_all
        return _status_tracked(subresource)

    def reset_fields(self, config: Obj, subresource: str | None) -> Obj:
        return _status_reset(config, subresource) if self.has_status else config

    def validate(self, obj: Obj) -> list[FieldError]:
        return super().validate(obj) + validate_custom(self.type_name, obj)

    def validate_update(self, new: Obj, old: Obj, subresource: str | None) -> list[FieldError]:
        return super().validate_update(new, old, subresource) + validate_custom(self.type_name, new)

    def canonicalize(self, obj: Obj) -> None:
        super().canonicalize(obj)
        # unstructured objects serialise with sorted keys at every level
        sorted_obj = _sorted(obj)
        obj.clear()
        obj.update(sorted_obj)


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _split_status(new: Obj, old: Obj, subresource: str | None) -> None:
    """A write of the main resource keeps the old status; one of ``status`` keeps the rest
    (and the metadata that ``ResetObjectMetaForStatus`` protects)."""
    if subresource == "status":
        for key in list(new):
            if key not in ("metadata", "status", "kind", "apiVersion"):
                del new[key]
        for key, value in old.items():
            if key not in ("metadata", "status", "kind", "apiVersion"):
                new[key] = value
        for key in ("labels", "annotations", "finalizers", "ownerReferences"):
            _keep(new["metadata"], old["metadata"], key)
    elif subresource is None:
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)


def _status_tracked(subresource: str | None) -> Callable[[tuple[str, ...]], bool]:
    if subresource == "status":
        return lambda path: path[:1] == ("f:status",)
    return _not_under(("f:status",))


def _status_reset(config: Obj, subresource: str | None) -> Obj:
    if subresource == "status":
        kept = ("apiVersion", "kind", "metadata", "status")
        return {k: v for k, v in config.items() if k in kept}
    return {k: v for k, v in config.items() if k != "status"}


class StatusStrategy(Strategy):
    """A built-in kind with a ``status`` subresource (``pkg/registry/*/strategy.go``'s
    pair of strategies): the main resource's writes keep the status, the subresource's keep
    everything else; ``generation`` counts spec changes."""

    tracks_generation = True
    #: ``PrepareForCreate`` clears the status (most kinds; Nodes keep theirs).
    resets_status_on_create: ClassVar[bool] = True

    def prepare_for_create(self, obj: Obj) -> None:
        super().prepare_for_create(obj)
        if self.resets_status_on_create:
            obj["status"] = self.initial_status(obj)

    def initial_status(self, obj: Obj) -> Obj:
        """The status a new object starts with."""
        return {}

    def prepare_for_update(self, new: Obj, old: Obj, subresource: str | None) -> None:
        _split_status(new, old, subresource)
        if subresource is None:
            super().prepare_for_update(new, old, subresource)

    def tracked(self, subresource: str | None) -> Callable[[tuple[str, ...]], bool]:
        return _status_tracked(subresource)

    def reset_fields(self, config: Obj, subresource: str | None) -> Obj:
        return _status_reset(config, subresource)

    def canonicalize(self, obj: Obj) -> None:
        super().canonicalize(obj)
        obj.setdefault("spec", {})
        obj.setdefault("status", {})

    def empty(self) -> Obj:
        return {"spec": {}, "status": {}}


def _default_pod_template(template: Any) -> None:
    if not isinstance(template, dict):
        return
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            _default_container(c)
    template.setdefault("metadata", {})


def _validate_workload(obj: Obj) -> list[FieldError]:
    """A selector that selects the pod template's labels, and a valid pod template."""
    spec = obj.get("spec") or {}
    errs: list[FieldError] = []
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        errs.append(fe.required("spec.selector", ""))
    else:
        wanted = selector.get("matchLabels") or {}
        if any(labels.get(k) != val for k, val in wanted.items()):
            errs.append(
                fe.invalid(
                    "spec.template.metadata.labels",
                    labels,
                    "`selector` does not match template `labels`",
                )
            )
    replicas = spec.get("replicas")
    if isinstance(replicas, int) and replicas < 0:
        errs.append(fe.invalid("spec.replicas", replicas, "must be greater than or equal to 0"))
    errs += v.validate_pod_spec((spec.get("template") or {}).get("spec"), "spec.template.spec")
    return errs


class DeploymentStrategy(StatusStrategy):
    """apps/v1 Deployments (defaults of ``pkg/apis/apps/v1/defaults.go``)."""

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("replicas", 1)
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", "25%")
                    rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        _default_pod_template(spec.get("template"))

    def validate(self, obj: Obj) -> list[FieldError]:
        return super().validate(obj) + _validate_workload(obj)

    def validate_update(self, new: Obj, old: Obj, subresource: str | None) -> list[FieldError]:
        errs = super().validate_update(new, old, subresource)
        return errs if subresource else errs + _validate_workload(new)


class ReplicaSetStrategy(DeploymentStrategy):
    """apps/v1 ReplicaSets."""

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("replicas", 1)
            _default_pod_template(spec.get("template"))

    def initial_status(self, obj: Obj) -> Obj:
        return {"replicas": 0}


class ServiceStrategy(StatusStrategy):
    """core/v1 Services: defaults, a cluster IP allocated from 10.96.0.0/16 on create."""

    tracks_generation = False

    def default(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec["type"] in ("ClusterIP", "NodePort", "LoadBalancer"):
            spec.setdefault("internalTrafficPolicy", "Cluster")
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                if "port" in port:
                    port.setdefault("targetPort", port["port"])

    def prepare_for_create(self, obj: Obj) -> None:
        super().prepare_for_create(obj)
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict) and spec.get("type", "ClusterIP") != "ExternalName":
            if not spec.get("clusterIP"):
                digest = hashlib.sha256(str(obj["metadata"].get("uid", "")).encode()).digest()
                spec["clusterIP"] = f"10.96.{digest[0]}.{max(digest[1], 1)}"
            if spec["clusterIP"] != "None":
                spec.setdefault("clusterIPs", [spec["clusterIP"]])
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
        obj["status"] = {"loadBalancer": {}}

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = super().validate(obj)
        spec = obj.get("spec") or {}
        if spec.get("type", "ClusterIP") != "ExternalName" and not spec.get("ports"):
            errs.append(fe.required("spec.ports", ""))
        return errs

    def validate_update(self, new: Obj, old: Obj, subresource: str | None) -> list[FieldError]:
        errs = super().validate_update(new, old, subresource)
        old_ip = (old.get("spec") or {}).get("clusterIP")
        new_ip = (new.get("spec") or {}).get("clusterIP")
        if old_ip and new_ip is not None and new_ip != old_ip:
            errs.append(fe.invalid("spec.clusterIPs[0]", new_ip, "may not change once set"))
        return errs


class NodeStrategy(StatusStrategy):
    """core/v1 Nodes: the kubelet registers them with their status."""

    tracks_generation = False
    resets_status_on_create = False

    def validate_name(self, name: str, prefix: bool) -> list[str]:
        return v.dns_subdomain(name, prefix)


class NamespaceStrategy(StatusStrategy):
    """core/v1 Namespaces: DNS-label names, the ``kubernetes`` finalizer, phase Active.

    Deletion is immediate here (the real one goes through Terminating while the namespace
    controller empties it); objects left in it stay until deleted.
    """

    tracks_generation = False

    def validate_name(self, name: str, prefix: bool) -> list[str]:
        return v.dns_label(name, prefix)

    def default(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.setdefault("finalizers", ["kubernetes"])
        meta = obj.setdefault("metadata", {})
        if isinstance(meta, dict) and meta.get("name"):
            labels = meta.setdefault("labels", {})
            if isinstance(labels, dict):
                labels["kubernetes.io/metadata.name"] = meta["name"]

    def initial_status(self, obj: Obj) -> Obj:
        return {"phase": "Active"}


class CustomResourceDefinitionStrategy(StatusStrategy):
    """apiextensions.k8s.io/v1 CustomResourceDefinitions: ``<plural>.<group>`` names; the
    status the apiextensions controllers would set (names accepted, established)."""

    def validate(self, obj: Obj) -> list[FieldError]:
        errs = super().validate(obj)
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        expected = f"{names.get('plural', '')}.{spec.get('group', '')}"
        name = obj.get("metadata", {}).get("name")
        if name != expected:
            errs.append(
                fe.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group')
            )
        return errs + _validate_crd_spec(spec)

    def validate_update(self, new: Obj, old: Obj, subresource: str | None) -> list[FieldError]:
        errs = super().validate_update(new, old, subresource)
        if subresource is not None:
            return errs
        spec, before = new.get("spec") or {}, old.get("spec") or {}
        if spec.get("scope") != before.get("scope"):
            errs.append(fe.invalid("spec.scope", spec.get("scope"), "field is immutable"))
        return errs + _validate_crd_spec(spec)

    def default(self, obj: Obj) -> None:
        # SetDefaults_CustomResourceDefinition: listKind, singular, conversion None
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        names = spec.get("names")
        if isinstance(names, dict) and names.get("kind"):
            names.setdefault("listKind", f"{names['kind']}List")
        if isinstance(names, dict) and names.get("plural"):
            names.setdefault("singular", str(names.get("kind", "")).lower())
        spec.setdefault("conversion", {"strategy": "None"})

    def initial_status(self, obj: Obj) -> Obj:
        spec = obj.get("spec") or {}
        now = obj["metadata"].get("creationTimestamp")
        conditions = [
            {
                "type": "NamesAccepted",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ]
        stored = [ver["name"] for ver in spec.get("versions") or [] if ver.get("storage")]
        names = dict(spec.get("names") or {})
        if names.get("kind"):
            names.setdefault("listKind", f"{names['kind']}List")
        return {
            "conditions": conditions,
            "acceptedNames": names,
            "storedVersions": stored,
        }

    def prepare_for_update(self, new: Obj, old: Obj, subresource: str | None) -> None:
        super().prepare_for_update(new, old, subresource)
        status = new.get("status")
        if subresource is None and isinstance(status, dict):
            # a new storage version joins storedVersions
            versions = (new.get("spec") or {}).get("versions") or []
            stored = list(status.get("storedVersions") or [])
            for ver in versions:
                if isinstance(ver, dict) and ver.get("storage") and ver.get("name") not in stored:
                    stored.append(ver["name"])
            new["status"] = {**status, "storedVersions": stored}

    def mark_deleting(self, obj: Obj, now: str) -> None:
        # the apiextensions registry's Delete: the cleanup finalizer and Terminating
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if CLEANUP_FINALIZER not in finalizers:
            meta["finalizers"] = [*finalizers, CLEANUP_FINALIZER]
        status = dict(obj.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Terminating"]
        conditions.append(
            {
                "type": "Terminating",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "InstanceDeletionPending",
                "message": "CustomResourceDefinition marked for deletion; CustomResource "
                "deletion will begin soon",
            }
        )
        status["conditions"] = conditions
        obj["status"] = status


def _validate_crd_spec(spec: Obj) -> list[FieldError]:
    """The checks of ``ValidateCustomResourceDefinitionSpec`` a demo user meets first: the
    group, names, scope, one storage version, a structural schema for each version."""
    errs: list[FieldError] = []
    if not spec.get("group"):
        errs.append(fe.required("spec.group", ""))
    names = spec.get("names")
    if not isinstance(names, dict):
        names = {}
    for key in ("plural", "kind", "listKind"):
        if not names.get(key):
            errs.append(fe.required(f"spec.names.{key}", ""))
    scope = spec.get("scope")
    if scope not in ("Cluster", "Namespaced"):
        errs.append(fe.not_supported("spec.scope", scope, ("Cluster", "Namespaced")))
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    if sum(1 for v in versions if v.get("storage")) != 1:
        errs.append(
            fe.invalid(
                "spec.versions",
                versions,
                "must have exactly one version marked as storage version",
            )
        )
    schemas = [(v.get("schema") or {}).get("openAPIV3Schema") for v in versions]
    same = len({repr(s) for s in schemas}) == 1
    for i, schema in enumerate(schemas):
        where = f"spec.versions[{i}].schema.openAPIV3Schema"
        if not isinstance(schema, dict):
            errs.append(fe.required(where, ""))
        elif not same or i == 0:
            path = "spec.validation.openAPIV3Schema" if same else where
            errs += _structural(schema, path)
    return errs


def _structural(schema: Obj, path: str) -> list[FieldError]:
    """A schema's nodes each need a type (``must not be empty for specified object
    fields``), but where int-or-string or preserve-unknown-fields stands in for one."""
    errs: list[FieldError] = []
    stack: list[tuple[Any, str]] = [(schema, path)]
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict):
            continue
        for name, sub in sorted((node.get("properties") or {}).items(), reverse=True):
            here = f"{where}.properties[{name}]"
            if isinstance(sub, dict) and not (
                sub.get("type")
                or sub.get("x-kubernetes-int-or-string")
                or sub.get("x-kubernetes-preserve-unknown-fields")
            ):
                errs.append(
                    fe.required(f"{here}.type", "must not be empty for specified object fields")
                )
            stack.append((sub, here))
        items = node.get("items")
        if isinstance(items, dict):
            stack.append((items, f"{where}.items"))
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            stack.append((extra, f"{where}.additionalProperties"))
    return errs


CLEANUP_FINALIZER: Final = "customresourcecleanup.apiextensions.k8s.io"
"""The finalizer a deleted CRD carries until its objects are gone."""

SPECIFIC: Final[Mapping[str, type[Strategy]]] = {
    POD.key: PodStrategy,
    EVENT.key: EventStrategy,
    ENDPOINTS.key: EndpointsStrategy,
    LEASE.key: LeaseStrategy,
    DEPLOYMENT.key: DeploymentStrategy,
    REPLICASET.key: ReplicaSetStrategy,
    SERVICE.key: ServiceStrategy,
    NODE.key: NodeStrategy,
    NAMESPACE.key: NamespaceStrategy,
    CRD.key: CustomResourceDefinitionStrategy,
}
"""Kind-specific behaviour by registry key (any other resource: :func:`strategy_for`)."""


def strategy_for(res: Resource, type_name: str) -> Strategy:
    """The strategy of ``res``, whose objects are of schema type ``type_name``.

    A resource without behaviour of its own in :data:`SPECIFIC` is served from its registry
    entry alone: as a custom resource when the catalog serves it as one
    (:data:`~kube_gateway_demo.catalog.SERVED_AS_CUSTOM`), else as a built-in kind, with the
    status split of the apiserver's status strategies when it has a ``status`` subresource.
    """
    specific = SPECIFIC.get(res.key)
    if specific is not None:
        return specific(res, type_name)
    if res.key in SERVED_AS_CUSTOM:
        return CustomResourceStrategy(res, type_name)
    if "status" in res.subresources:
        return StatusStrategy(res, type_name)
    return Strategy(res, type_name)
