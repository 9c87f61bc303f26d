"""``DemoStore``: the in-process API of the demo cluster, for tests and the animation.

Its methods bypass HTTP and authorisation but run every write through the same pipeline as
the HTTP layer, so watchers see exactly the events an HTTP write would produce.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from gateway.core.model.registry import POD, Resource
from kube_gateway_demo import fieldmanager
from kube_gateway_demo.decoding import PatchType
from kube_gateway_demo.jsonutil import clone
from kube_gateway_demo.logs import LogLine
from kube_gateway_demo.options import DemoDeleteOptions, DemoWriteOptions
from kube_gateway_demo.status import not_found
from kube_gateway_demo.storage import Obj, object_key
from kube_gateway_demo.store import Store


class DemoStore(Store):
    """The demo cluster's state, with an async API for in-process reads and writes.

    Takes the arguments of :class:`~kube_gateway_demo.store.Store` (registry, schema types,
    history, clock).
    """

    # --- the in-process API ------------------------------------------------------------------

    async def create(
        self,
        resource: str | Resource,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        field_manager: str = "demo-store",
        dry_run: bool = False,
    ) -> Obj:
        """Create an object (namespace taken from ``obj`` when not given).

        Returns:
            The stored object, with ``kind`` and ``apiVersion``.
        """
        res = self.resource(resource)
        ns = self._ns_of(res, obj, namespace)
        return self.writes.create(
            res,
            dict(obj),
            namespace=ns,
            opts=DemoWriteOptions(dry_run=dry_run, field_manager=field_manager),
        ).body

    async def get(
        self, resource: str | Resource, name: str, *, namespace: str | None = None
    ) -> Obj:
        """Read one object (raises :class:`DemoApiError` 404)."""
        return self.reads.get(self.resource(resource), name, namespace=namespace)

    async def list(
        self,
        resource: str | Resource,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[Obj]:
        """The current objects (bare, as list items are served), in storage order."""
        res = self.resource(resource)
        query = self.list_query(res, namespace, label_selector, field_selector)
        items: list[Obj] = self.reads.list(res, query)["items"]
        return items

    async def update(
        self,
        resource: str | Resource,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str = "demo-store",
        dry_run: bool = False,
    ) -> Obj:
        """Replace an object (``subresource="status"`` replaces only the status).

        A ``metadata.resourceVersion`` in ``obj`` is a precondition (409 on mismatch).
        """
        res = self.resource(resource)
        ns = self._ns_of(res, obj, namespace)
        name = str((obj.get("metadata") or {}).get("name", ""))
        return self.writes.update(
            res,
            name,
            dict(obj),
            namespace=ns,
            subresource=subresource,
            opts=DemoWriteOptions(dry_run=dry_run, field_manager=field_manager),
        ).body

    async def patch(
        self,
        resource: str | Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str = "demo-store",
        force: bool = False,
        dry_run: bool = False,
    ) -> Obj:
        """Patch an object; ``patch`` is a decoded document or raw bytes/str."""
        res = self.resource(resource)
        body = (
            patch
            if isinstance(patch, bytes)
            else (patch.encode() if isinstance(patch, str) else orjson.dumps(patch))
        )
        return self.writes.patch(
            res,
            name,
            patch_type,
            body,
            namespace=namespace,
            subresource=subresource,
            opts=DemoWriteOptions(dry_run=dry_run, field_manager=field_manager, force=force),
        ).body

    async def apply(
        self,
        resource: str | Resource,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        namespace: str | None = None,
        subresource: str | None = None,
        force: bool = False,
    ) -> Obj:
        """Server-side apply ``obj`` as ``field_manager``."""
        res = self.resource(resource)
        ns = self._ns_of(res, obj, namespace)
        name = str((obj.get("metadata") or {}).get("name", ""))
        return self.writes.patch(
            res,
            name,
            "apply",
            orjson.dumps(dict(obj)),
            namespace=ns,
            subresource=subresource,
            opts=DemoWriteOptions(field_manager=field_manager, force=force),
        ).body

    async def delete(
        self,
        resource: str | Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj:
        """Delete an object; returns what the apiserver would (object or Status)."""
        res = self.resource(resource)
        return self.deletion.delete(
            res,
            name,
            namespace=namespace,
            opts=DemoDeleteOptions(grace_period_seconds=grace_period_seconds),
        ).body

    async def ensure_namespace(self, name: str) -> None:
        """Create a namespace unless it exists."""
        self.add_namespace(name)

    async def bulk_create(
        self,
        resource: str | Resource,
        objects: Iterable[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        field_manager: str = "demo-store",
        keep_status: bool = True,
    ) -> int:
        """Create many objects quickly (each still a normal create with its own event).

        Managed fields are computed once per distinct field shape, which is what makes
        seeding thousands of similar objects fast.

        Returns:
            How many were created.
        """
        res = self.resource(resource)
        strat = self.strategy(res)
        opts = DemoWriteOptions(field_manager=field_manager)
        count = 0
        cache: dict[tuple[Any, ...], list[Obj]] = {}
        now = self.now()
        for raw in objects:
            obj = clone(dict(raw))
            ns = self._ns_of(res, obj, namespace)
            if res.namespaced and ns and not self.namespace_exists(ns):
                await self.ensure_namespace(ns)
            strat.default(obj)
            shape = _shape(obj)
            managed = cache.get(shape)
            if managed is None:
                paths = {
                    p
                    for p in fieldmanager.field_set(obj, strat.type_name)
                    if strat.tracked(None)(p)
                }
                managed = [
                    fieldmanager.Entry(
                        field_manager, "Update", res.api_version, now, "", paths
                    ).render()
                ]
                cache[shape] = managed
            obj.setdefault("metadata", {})["managedFields"] = managed
            self.writes.create(
                res,
                obj,
                namespace=ns,
                opts=opts,
                origin="owned",
                managed=True,
                keep_status=keep_status,
            )
            count += 1
        return count

    async def append_log(
        self, namespace: str, pod: str, container: str, *lines: str | bytes
    ) -> None:
        """Write lines to a container's log (wakes followers)."""
        obj = self._pod(namespace, pod)
        self.kubelet.container_log(obj, container)
        self.logs.append(str(obj["metadata"]["uid"]), container, lines, self.clock())

    async def set_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        lines: Sequence[str | bytes],
        *,
        previous: bool = False,
    ) -> None:
        """Replace a container's log (or, with ``previous=True``, its previous instance's)."""
        obj = self._pod(namespace, pod)
        uid = str(obj["metadata"]["uid"])
        log = self.kubelet.container_log(obj, container)
        if previous:
            now = self.clock()
            log.previous = [LogLine(now, x.encode() if isinstance(x, str) else x) for x in lines]
        else:
            log.lines = []
            self.logs.append(uid, container, lines, self.clock())

    async def terminate_container(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        exit_code: int = 0,
        reason: str = "Completed",
    ) -> Obj:
        """Mark a container terminated in the pod's status (ends log follows for it)."""
        current = await self.get(POD, pod, namespace=namespace)
        status = clone(current.get("status") or {})
        statuses = [cs for cs in status.get("containerStatuses") or [] if isinstance(cs, dict)]
        spec_containers = (current.get("spec") or {}).get("containers") or []
        found = next((cs for cs in statuses if cs.get("name") == container), None)
        if found is None:
            image = next(
                (c.get("image", "") for c in spec_containers if c.get("name") == container), ""
            )
            found = {
                "name": container,
                "image": image,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
            }
            statuses.append(found)
        found["state"] = {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": current["metadata"]["creationTimestamp"],
                "finishedAt": self.now(),
            }
        }
        found["ready"] = False
        found["started"] = False
        status["containerStatuses"] = statuses
        updated = {**current, "status": status}
        return await self.update(
            POD, updated, namespace=namespace, subresource="status", field_manager="kubelet"
        )

    def _pod(self, namespace: str, pod: str) -> Obj:
        obj = self.storage.get(POD, object_key(namespace, pod))
        if obj is None:
            raise not_found("pods", "", pod)
        return obj

    def _ns_of(self, res: Resource, obj: Mapping[str, Any], namespace: str | None) -> str | None:
        if not res.namespaced:
            return None
        if namespace is not None:
            return namespace
        return str((obj.get("metadata") or {}).get("namespace") or "default")


def _shape(obj: Obj) -> tuple[Any, ...]:
    """A cheap signature of an object's field layout (for sharing managed fields)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    containers = tuple(
        (
            c.get("name"),
            tuple(sorted(c)),
            tuple(e.get("name") for e in c.get("env") or []),
            tuple((p.get("containerPort"), p.get("protocol")) for p in c.get("ports") or []),
        )
        for c in (spec or {}).get("containers") or []
        if isinstance(c, dict)
    )
    return (
        tuple(sorted(obj)),
        tuple(sorted(meta)),
        tuple(sorted(meta.get("labels") or {})),
        tuple(sorted(meta.get("annotations") or {})),
        tuple(sorted(spec or {})),
        containers,
    )
