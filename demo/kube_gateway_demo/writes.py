"""Writes: create, update (replace), patch and server-side apply.

Every write, whichever way it arrives (an HTTP request, the in-process API, the demo's own
controllers), goes through the same steps as in a real apiserver: decode, default, prepare,
validate, admit, track managed fields, commit.  So an in-process ``await store.update(...)``
produces exactly the watch events an HTTP PUT would.  What a kind does at each step is its
strategy's (:mod:`.strategy`); deletion is :mod:`.deletion`'s.
"""

from __future__ import annotations

import random
import uuid
from typing import Any, Final

from gateway.core.model.registry import Resource
from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo import fieldmanager, patching
from kube_gateway_demo.cluster import Cluster
from kube_gateway_demo.decoding import PatchType, decode_apply, decode_patch, decode_typed
from kube_gateway_demo.jsonutil import clone
from kube_gateway_demo.options import DemoWriteOptions, WriteResult
from kube_gateway_demo.status import (
    OPTIMISTIC_LOCK,
    already_exists,
    bad_request,
    conflict,
    internal,
    invalid,
    not_found,
    unsupported_media_type,
)
from kube_gateway_demo.storage import Obj, typed
from kube_gateway_demo.strategy import Strategy

NS_MISMATCH: Final = (
    "the namespace of the provided object does not match the namespace sent on the request"
)
_NAME_CHARS: Final = "bcdfghjklmnpqrstvwxz2456789"


class Writes:
    """Create, update, patch and apply objects of the cluster."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    # --- create ------------------------------------------------------------------------------

    def create(
        self,
        res: Resource,
        obj: Obj,
        *,
        namespace: str | None,
        opts: DemoWriteOptions,
        origin: str = "body",
        managed: bool = False,
        keep_status: bool = False,
    ) -> WriteResult:
        """POST: create ``obj`` in ``namespace``.

        ``origin`` is ``body`` for a request's body (decoded here), ``owned`` for an object
        the caller hands over (not copied), anything else for one that is copied first.
        ``managed=True`` means the managed fields were already computed (server-side apply);
        ``keep_status=True`` (in-process seeding only) keeps the given status.
        """
        cluster = self.cluster
        strat = cluster.strategy(res)
        warnings: list[str] = []
        if origin == "body":
            obj, warnings = decode_typed(res, strat, obj, opts, origin)
        elif origin != "owned":
            obj = clone(obj)
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        meta = obj.setdefault("metadata", {})
        _set_namespace(res, meta, namespace)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = _generate_name(str(meta["generateName"]))
        client_rv = meta.pop("resourceVersion", None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = cluster.now()
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(key, None)
        if not managed:
            meta.pop("managedFields", None)
        status = obj.get("status")
        strat.default(obj)
        if not managed:
            # The field manager sees the decoded (defaulted) object, before the strategy and
            # admission add their own fields.
            meta["managedFields"] = []
            fieldmanager.track_update(
                None,
                obj,
                opts.field_manager,
                subresource="",
                api_version=res.api_version,
                now=meta["creationTimestamp"],
                keep=strat.tracked(None),
                type_name=strat.type_name,
            )
        strat.prepare_for_create(obj)
        if keep_status and isinstance(status, dict):
            obj["status"] = status
        name = str(meta.get("name") or "")
        strat.admit_create(name)
        errs = strat.validate(obj)
        if errs:
            raise invalid(res.kind, res.group, name, errs)
        if res.namespaced and not cluster.namespace_exists(namespace or ""):
            raise not_found("namespaces", "", namespace or "")
        if client_rv:
            raise internal("resourceVersion should not be set on objects to be created", reason="")
        key = cluster.key(res, namespace, name)
        if cluster.storage.get(res, key) is not None:
            raise already_exists(res.plural, res.group, name)
        strat.canonicalize(obj)
        reorder(strat, obj, stored=not opts.dry_run)
        if opts.dry_run:
            return WriteResult(typed(res, obj), 201, warnings)
        change = cluster.storage.commit(res, key, "ADDED", obj)
        return WriteResult(typed(res, change.obj), 201, warnings)

    # --- update ------------------------------------------------------------------------------

    def update(
        self,
        res: Resource,
        name: str,
        obj: Obj,
        *,
        namespace: str | None,
        opts: DemoWriteOptions,
        subresource: str | None = None,
        origin: str = "body",
        managed: bool = False,
        patch: Any = None,
    ) -> WriteResult:
        """PUT (or the final step of a PATCH): replace the object, with optimistic locking."""
        cluster = self.cluster
        strat = cluster.strategy(res)
        warnings: list[str] = []
        if origin in ("body", "json", "merge", "strategic"):
            obj, warnings = decode_typed(res, strat, obj, opts, origin, patch=patch)
        else:
            obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        if str(meta.get("name") or "") != name:
            raise bad_request(
                f"the name of the object ({meta.get('name') or ''}) does not match the name on "
                f"the URL ({name})"
            )
        _set_namespace(res, meta, namespace)
        key = cluster.key(res, namespace, name)
        current = cluster.storage.get(res, key)
        if current is None:
            if subresource or not strat.allow_create_on_update:
                raise not_found(res.plural, res.group, name)
            meta.pop("resourceVersion", None)
            created = self.create(
                res, obj, namespace=namespace, opts=opts, origin="internal", managed=managed
            )
            created.warnings[:0] = warnings
            return created
        rv = str(meta.get("resourceVersion") or "")
        if not rv:
            if not strat.allow_unconditional_update:
                # keyed by the qualified resource, not the kind, in the generic store
                raise invalid(
                    res.plural,
                    res.group,
                    name,
                    [fe.invalid("metadata.resourceVersion", 0, "must be specified for an update")],
                )
        elif rv != current["metadata"]["resourceVersion"]:
            raise conflict(res.plural, res.group, name, OPTIMISTIC_LOCK)
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        new, old = obj, current
        nm, om = new["metadata"], old["metadata"]
        if "generation" in om:
            nm["generation"] = om["generation"]
        else:
            nm.pop("generation", None)
        if not managed and "managedFields" not in nm and "managedFields" in om:
            nm["managedFields"] = clone(om["managedFields"])
        strat.default(new)
        if not managed:
            fieldmanager.track_update(
                old,
                new,
                opts.field_manager,
                subresource=subresource or "",
                api_version=res.api_version,
                now=cluster.now(),
                keep=strat.tracked(subresource),
                type_name=strat.type_name,
            )
        strat.prepare_for_update(new, old, subresource)
        if not nm.get("uid"):
            nm["uid"] = om["uid"]
        nm["creationTimestamp"] = om["creationTimestamp"]
        for keep in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if keep in om:
                nm[keep] = om[keep]
            elif keep == "deletionTimestamp":
                nm.pop(keep, None)
        nm["resourceVersion"] = om["resourceVersion"]
        errs = strat.validate_update(new, old, subresource)
        if errs:
            raise invalid(res.kind, res.group, name, errs)
        strat.canonicalize(new)
        reorder(strat, new, stored=True)
        if new == old:
            return WriteResult(typed(res, old), 200, warnings)
        if opts.dry_run:
            return WriteResult(typed(res, new), 200, warnings)
        change = cluster.storage.commit(res, key, "MODIFIED", new)
        if nm.get("deletionTimestamp") and not nm.get("finalizers"):
            # The last finalizer is gone: the store deletes the object right away.
            deleted = cluster.storage.commit(res, key, "DELETED", None)
            return WriteResult(typed(res, deleted.obj), 200, warnings)
        return WriteResult(typed(res, change.obj), 200, warnings)

    # --- patch and apply ---------------------------------------------------------------------

    def patch(
        self,
        res: Resource,
        name: str,
        patch_type: PatchType,
        body: bytes,
        *,
        namespace: str | None,
        opts: DemoWriteOptions,
        subresource: str | None = None,
    ) -> WriteResult:
        """PATCH with any of the four patch types (apply creates a missing object)."""
        cluster = self.cluster
        strat = cluster.strategy(res)
        if patch_type == "strategic" and strat.custom_resource:
            raise unsupported_media_type(
                "application/strategic-merge-patch+json",
                (
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/apply-patch+yaml",
                ),
            )
        current = cluster.storage.get(res, cluster.key(res, namespace, name))
        if patch_type == "apply":
            return self._apply(
                res, name, body, current, namespace=namespace, opts=opts, subresource=subresource
            )
        if current is None:
            raise not_found(res.plural, res.group, name)
        patch = decode_patch(body, patch_type)
        doc = typed(res, clone(current))
        if patch_type == "json":
            result = patching.json_patch(doc, patch)
        elif patch_type == "merge":
            result = patching.merge_patch(doc, patch)
        else:
            result = patching.strategic_merge_patch(doc, patch, strat.type_name)
        if not isinstance(result.get("metadata"), dict):
            result["metadata"] = {}
        return self.update(
            res,
            name,
            result,
            namespace=namespace,
            opts=opts,
            subresource=subresource,
            origin=patch_type,
            patch=patch,
        )

    def _apply(
        self,
        res: Resource,
        name: str,
        body: bytes,
        current: Obj | None,
        *,
        namespace: str | None,
        opts: DemoWriteOptions,
        subresource: str | None,
    ) -> WriteResult:
        strat = self.cluster.strategy(res)
        config = decode_apply(res, strat, name, body)
        config = strat.reset_fields(config, subresource)
        merged = fieldmanager.apply(
            current,
            config,
            opts.field_manager,
            force=opts.force,
            subresource=subresource or "",
            api_version=res.api_version,
            now=self.cluster.now(),
            type_name=strat.type_name,
        )
        merged_meta = merged.setdefault("metadata", {})
        merged_meta["name"] = name
        if res.namespaced:
            merged_meta["namespace"] = namespace or ""
        if current is None:
            if subresource:
                raise not_found(res.plural, res.group, name)
            return self.create(
                res, merged, namespace=namespace, opts=opts, origin="apply", managed=True
            )
        merged["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self.update(
            res,
            name,
            merged,
            namespace=namespace,
            opts=opts,
            subresource=subresource,
            origin="apply",
            managed=True,
        )


_META_ORDER: Final = (
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
)


def reorder(strat: Strategy, obj: Obj, *, stored: bool) -> None:
    """Order a written object's keys as the apiserver serialises it."""
    # Go serialises struct fields in declaration order: metadata first, then spec/status,
    # and ObjectMeta's own fields in their order (resourceVersion right after uid);
    # custom resources are maps, serialised with sorted keys.
    meta = obj.get("metadata", {})
    if stored:
        meta.setdefault("resourceVersion", "")
    if strat.custom_resource:
        obj["metadata"] = {k: meta[k] for k in sorted(meta)}
        return
    ordered = {k: meta[k] for k in _META_ORDER if k in meta}
    ordered.update((k, v) for k, v in meta.items() if k not in ordered)
    items = [("metadata", ordered), *((k, v) for k, v in obj.items() if k != "metadata")]
    obj.clear()
    obj.update(items)


def _generate_name(prefix: str) -> str:
    return prefix + "".join(random.choice(_NAME_CHARS) for _ in range(5))


def _set_namespace(res: Resource, meta: Obj, namespace: str | None) -> None:
    """Put the request's namespace in a written object's metadata (400 when the object names
    another one); a cluster-scoped object carries none."""
    if res.namespaced:
        ns = meta.get("namespace") or ""
        if ns and ns != namespace:
            raise bad_request(NS_MISMATCH)
        meta["namespace"] = namespace or ""
    else:
        meta.pop("namespace", None)
