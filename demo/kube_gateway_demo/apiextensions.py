"""CustomResourceDefinitions created, changed and deleted at run time, served as
kube-apiserver (its apiextensions-apiserver) serves them.

:class:`Definitions` follows every commit to the CRD collection (a storage hook, so the
served API changes in the same step as the CRD, before any watcher of CRDs hears of it):

* created or changed: each version with ``served: true`` becomes a :class:`CustomResource`
  record of the cluster (discovery, OpenAPI v3 and the resource paths follow the registry),
  stored in one collection per CRD (every version serves the same objects: conversion
  ``None``), with a :class:`DefinedResourceStrategy` that prunes, defaults and validates with
  the CRD's structural schema as stored now (:mod:`.structural`); ``storedVersions`` gains
  the storage version.  A change of the spec ends the watches of its resources (the
  apiserver tears the old storage down and its watches end, cleanly, a second later:
  ``Cluster.storage_teardown``), and clients re-watch against the new definition;
* deleted: the delete marks it (``deletionTimestamp``, the ``customresourcecleanup``
  finalizer, ``Terminating``) and refuses creates from then on (403); the cleanup then
  deletes every object (watchers see each DELETED), and removing the finalizer deletes the
  CRD, which takes its resources, discovery and OpenAPI away at once and ends its watches
  a second later (the apiserver's storage teardown).

The demo's built-in custom resource (``widgets.demo.kube-gateway.dev``) is served from the
registry given to the store and is left alone here.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from gateway.core.model.registry import ALL_VERBS, Resource, Subresource, Verb
from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo import structural
from kube_gateway_demo.catalog import CRD, CustomResource
from kube_gateway_demo.fielderrors import FieldError
from kube_gateway_demo.jsonutil import clone
from kube_gateway_demo.options import DemoDeleteOptions, DemoWriteOptions, ListQuery
from kube_gateway_demo.selectors import meta_fields
from kube_gateway_demo.status import DemoApiError, forbidden
from kube_gateway_demo.storage import Change, Obj
from kube_gateway_demo.strategy import CLEANUP_FINALIZER, CustomResourceStrategy
from kube_gateway_demo.structure import DecodeResult

_SUB_VERBS: Final[frozenset[Verb]] = frozenset(("get", "patch", "update"))
_VERSION: Final = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """The sort key of Kubernetes' version priority (``v2`` > ``v1`` > ``v1beta2`` >
    ``v1beta1`` > ``v1alpha1`` > ``foo``): sort ascending, the preferred comes first."""
    m = _VERSION.match(version)
    if m is None:
        return (3, 0, 0, version)
    major, level, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[level]
    return (rank, -major, -minor, version)


def served_versions(crd: Obj) -> list[Obj]:
    """The CRD's versions with ``served: true``, preferred first."""
    versions = [v for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served")]
    return sorted(versions, key=lambda v: version_priority(str(v.get("name"))))


def storage_version(crd: Obj) -> Obj | None:
    """The version objects are stored in."""
    versions = (crd.get("spec") or {}).get("versions") or []
    return next((v for v in versions if v.get("storage")), versions[0] if versions else None)


def resources_of(crd: Obj) -> tuple[CustomResource, ...]:
    """One record per served version of a CRD, preferred version first."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    records: list[CustomResource] = []
    for version in served_versions(crd):
        subs = version.get("subresources") or {}
        subresources = {
            name: Subresource(name, _SUB_VERBS) for name in ("scale", "status") if name in subs
        }
        records.append(
            CustomResource(
                group=str(spec.get("group")),
                version=str(version.get("name")),
                kind=str(names.get("kind")),
                plural=str(names.get("plural")),
                singular=str(names.get("singular") or str(names.get("kind", "")).lower()),
                namespaced=spec.get("scope") == "Namespaced",
                verbs=ALL_VERBS,
                subresources=MappingProxyType(subresources),
                short_names=tuple(names.get("shortNames") or ()),
            )
        )
    return tuple(records)


def _schema_of(version: Obj | None) -> Obj:
    schema = ((version or {}).get("schema") or {}).get("openAPIV3Schema")
    return schema if isinstance(schema, dict) else {"type": "object"}


class DefinedResourceStrategy(CustomResourceStrategy):
    """A custom resource whose CRD was created at run time: the generic custom-resource
    behaviour (generation, status split, sorted keys) with the CRD's own structural schema
    for pruning, defaulting and validation (the version written's), its subresources and
    its ``selectableFields``."""

    def __init__(self, res: Resource, crd: Obj) -> None:
        super().__init__(res, "")
        self.crd = crd
        stored = storage_version(crd)
        self.schemas = {
            str(v.get("name")): _schema_of(v) for v in (crd.get("spec") or {}).get("versions") or []
        }
        self.schema = _schema_of(stored)
        self._written: str | None = None
        subs = (stored or {}).get("subresources") or {}
        self.status_enabled = "status" in subs
        scale = subs.get("scale")
        self.scale: Mapping[str, str] | None = scale if isinstance(scale, dict) else None
        self.selectable = tuple(
            str(f.get("jsonPath", "")).lstrip(".")
            for f in (stored or {}).get("selectableFields") or []
        )
        # per CRD, where other kinds have one set per class
        labels = frozenset(("metadata.name", "metadata.namespace", *self.selectable))
        self.field_labels = labels  # type: ignore[misc]

    @property
    def has_status(self) -> bool:
        return self.status_enabled

    def admit_create(self, name: str) -> None:
        if (self.crd.get("metadata") or {}).get("deletionTimestamp"):
            raise forbidden(
                self.res.plural,
                self.res.group,
                name,
                "create not allowed while custom resource definition is terminating",
            )

    def decode(self, obj: Obj, version: str) -> DecodeResult:
        result = DecodeResult()
        result.unknown = structural.prune(self.schemas.get(version, self.schema), obj)
        # the write that decoded it validates it next, in the same synchronous step
        self._written = version
        return result

    def _schema_now(self) -> Obj:
        """The schema of the version the write being validated came in (the storage
        version's for a write the demo makes itself)."""
        version, self._written = self._written, None
        return self.schemas.get(version or "", self.schema)

    def fields(self, obj: Obj) -> dict[str, str]:
        out = meta_fields(obj, self.res.namespaced)
        for path in self.selectable:
            value = structural.get_path(obj, path)
            if isinstance(value, bool):
                out[path] = "true" if value else "false"
            elif value is not None:
                out[path] = str(value)
            else:
                out[path] = ""
        return out

    def validate(self, obj: Obj) -> list[FieldError]:
        return self._meta(obj) + structural.validate(self._schema_now(), obj)

    def validate_update(self, new: Obj, old: Obj, subresource: str | None) -> list[FieldError]:
        errs = super(CustomResourceStrategy, self).validate_update(new, old, subresource)
        return errs + structural.validate(self._schema_now(), new)

    def _meta(self, obj: Obj) -> list[FieldError]:
        return super(CustomResourceStrategy, self).validate(obj)


class Definitions:
    """The CRD controller of a store: keeps the served custom resources in step with the
    CustomResourceDefinitions (see the module docstring).

    Args:
        cluster: the store (anything with :meth:`install`, :meth:`uninstall`, ``storage``,
            ``writes``, ``deletion`` and ``reads``).
        builtin: the registry keys served from the store's own registry (never touched).
    """

    def __init__(self, cluster: Any, builtin: frozenset[str]) -> None:
        self.cluster = cluster
        self.builtin = builtin
        self.defined: dict[str, tuple[str, Obj]] = {}
        """The CRDs served now by name: (registry key, spec as served)."""
        self._cleaning: set[str] = set()
        cluster.storage.hook(CRD, self._changed)

    def _changed(self, change: Change) -> None:
        name = str(change.obj["metadata"]["name"])
        if change.type == "DELETED":
            self._remove(name)
            return
        crd = change.obj
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        key = f"{names.get('plural')}.{spec.get('group')}"
        if key in self.builtin:
            return
        served = self.defined.get(name)
        if served is None or served[1] != spec:
            records = resources_of(crd)
            self.cluster.install(
                key,
                records,
                DefinedResourceStrategy(records[0], crd) if records else None,
                categories=list(names.get("categories") or ()),
                restart_watches=served is not None,
            )
            self.defined[name] = (key, clone(spec))
        else:
            strat = self.cluster.strategies.get(key)
            if isinstance(strat, DefinedResourceStrategy):
                strat.crd = crd
        if (crd.get("metadata") or {}).get("deletionTimestamp") and name not in self._cleaning:
            self._cleaning.add(name)
            self._later(lambda: self._clean_up(name, key))

    def _later(self, step: Callable[[], None]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            step()
            return
        loop.call_soon(step)

    def _clean_up(self, name: str, key: str) -> None:
        """The finalizer's work: delete every object, then release the CRD."""
        cluster = self.cluster
        try:
            records = [r for r in cluster.resources if r.key == key]
            if records:
                res = records[0]
                query = ListQuery.parse(None, "", "", frozenset(("metadata.name",)))
                for item in cluster.reads.list(res, query)["items"]:
                    meta = item["metadata"]
                    with contextlib.suppress(DemoApiError):
                        cluster.deletion.delete(
                            res,
                            meta["name"],
                            namespace=meta.get("namespace"),
                            opts=DemoDeleteOptions(),
                        )
            crd = cluster.storage.get(CRD, name)
            if crd is None:
                return
            released = clone(crd)
            meta = released["metadata"]
            meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != CLEANUP_FINALIZER]
            released["kind"], released["apiVersion"] = CRD.kind, CRD.api_version
            cluster.writes.update(
                CRD,
                name,
                released,
                namespace=None,
                opts=DemoWriteOptions(field_manager="kube-apiserver"),
                origin="internal",
            )
        finally:
            self._cleaning.discard(name)

    def _remove(self, name: str) -> None:
        served = self.defined.pop(name, None)
        if served is not None:
            self.cluster.uninstall(served[0])


# --- the scale subresource ------------------------------------------------------------------


def scale_of(res: Resource, strategy: Any, obj: Obj) -> Obj:
    """The ``autoscaling/v1`` Scale of a custom resource with a scale subresource."""
    paths = _scale_paths(strategy, res, obj)
    meta = obj["metadata"]
    kept = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    status: Obj = {"replicas": structural.get_path(obj, paths["statusReplicasPath"]) or 0}
    selector_path = paths.get("labelSelectorPath")
    if selector_path:
        selector = structural.get_path(obj, selector_path)
        if selector:
            status["selector"] = selector
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in kept if k in meta},
        "spec": {"replicas": structural.get_path(obj, paths["specReplicasPath"]) or 0},
        "status": status,
    }


def scaled(res: Resource, strategy: Any, obj: Obj, scale: Any) -> Obj:
    """``obj`` with the replicas a written Scale asks for (422 for a Scale without them)."""
    paths = _scale_paths(strategy, res, obj)
    spec = scale.get("spec") if isinstance(scale, dict) else None
    replicas = spec.get("replicas") if isinstance(spec, dict) else None
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        from kube_gateway_demo.status import invalid

        raise invalid(
            "Scale",
            "autoscaling",
            str(obj["metadata"].get("name", "")),
            [fe.invalid("spec.replicas", replicas, "must be greater than or equal to 0")],
        )
    out = clone(obj)
    structural.set_path(out, paths["specReplicasPath"], replicas)
    rv = (scale.get("metadata") or {}).get("resourceVersion") if isinstance(scale, dict) else None
    out["metadata"]["resourceVersion"] = rv or obj["metadata"]["resourceVersion"]
    return out


def _scale_paths(strategy: Any, res: Resource, obj: Obj) -> Mapping[str, str]:
    paths: Mapping[str, str] | None = getattr(strategy, "scale", None)
    if not paths:
        from kube_gateway_demo.status import not_found

        raise not_found(res.plural, res.group, str(obj["metadata"].get("name", "")))
    return paths


__all__: Sequence[str] = (
    "CLEANUP_FINALIZER",
    "CustomResource",
    "DefinedResourceStrategy",
    "Definitions",
    "resources_of",
    "scale_of",
    "scaled",
    "version_priority",
)
