"""Deletion: preconditions, graceful deletion (an object first marked with a
``deletionTimestamp``), finalizers that hold an object until they are removed, and the
delete of a whole collection."""

from __future__ import annotations

from gateway.core.model.registry import Resource
from kube_gateway_demo.cluster import Cluster
from kube_gateway_demo.jsonutil import clone
from kube_gateway_demo.options import DemoDeleteOptions, ListQuery, WriteResult
from kube_gateway_demo.reads import Reads
from kube_gateway_demo.status import DemoApiError, conflict, not_found, success
from kube_gateway_demo.storage import Obj, typed
from kube_gateway_demo.times import rfc3339
from kube_gateway_demo.writes import reorder


class Deletion:
    """DELETE of one object or of what a list selects."""

    def __init__(self, cluster: Cluster, reads: Reads) -> None:
        self.cluster = cluster
        self.reads = reads

    def delete(
        self, res: Resource, name: str, *, namespace: str | None, opts: DemoDeleteOptions
    ) -> WriteResult:
        """DELETE: graceful for scheduled pods, blocked by finalizers, else immediate."""
        opts.validate()
        cluster = self.cluster
        storage = cluster.storage
        strat = cluster.strategy(res)
        key = cluster.key(res, namespace, name)
        current = storage.get(res, key)
        if current is None:
            raise not_found(res.plural, res.group, name)
        meta = current["metadata"]
        # NewConflict keyed by the qualified kind, as the store's precondition check words it
        for label, want, have, tail in (
            ("UID", opts.uid, meta.get("uid"), "deleted and then recreated"),
            ("ResourceVersion", opts.resource_version, meta.get("resourceVersion"), "modified"),
        ):
            if want is not None and want != have:
                raise conflict(
                    res.kind,
                    res.group,
                    name,
                    f"the {label} in the precondition ({want}) does not match the {label} in "
                    f"record ({have}). The object might have been {tail}",
                )
        grace = strat.grace_period(current, opts.grace_period_seconds)
        finalizers = meta.get("finalizers") or []
        if not meta.get("deletionTimestamp"):
            # what the kind's delete adds (a CRD: its cleanup finalizer)
            probe = clone(current)
            strat.mark_deleting(probe, rfc3339(cluster.clock()))
            finalizers = probe["metadata"].get("finalizers") or []
        code = 200
        if grace is not None or finalizers:
            # BeforeDelete / markAsDeleting: the object is first updated as being deleted.
            if meta.get("deletionTimestamp"):
                if finalizers:
                    return WriteResult(typed(res, current), code, [])
                marked = current  # a second delete of a terminating pod: finish it
            else:
                marked = clone(current)
                mm = marked["metadata"]
                mm["deletionTimestamp"] = rfc3339(cluster.clock() + (grace or 0))
                mm["deletionGracePeriodSeconds"] = grace or 0
                if int(mm.get("generation") or 0) > 0:
                    mm["generation"] = int(mm["generation"]) + 1
                strat.mark_deleting(marked, mm["deletionTimestamp"])
                reorder(strat, marked, stored=True)
                if opts.dry_run:
                    return WriteResult(typed(res, marked), code, [])
                marked = storage.commit(res, key, "MODIFIED", marked).obj
            if finalizers:
                code = 202 if opts.orphan_dependents is False else 200
                return WriteResult(typed(res, marked), code, [])
            # A pod with a grace period would wait for its kubelet; the demo's "kubelet"
            # stops the containers at once, so the pod is removed right away as well.
            deleted = storage.commit(res, key, "DELETED", None)
            body = marked if grace else deleted.obj
            return WriteResult(typed(res, body), code, [])
        final: Obj = current if opts.dry_run else storage.commit(res, key, "DELETED", None).obj
        if strat.return_deleted_object:
            return WriteResult(typed(res, final), 200, [])
        return WriteResult(success(name, res.group, res.plural, meta.get("uid", "")), 200, [])

    def delete_collection(self, res: Resource, query: ListQuery, opts: DemoDeleteOptions) -> Obj:
        """DELETE on a collection: delete what the selectors match, return them as a list."""
        opts.validate()
        listed = self.reads.list(res, query)
        for item in listed["items"]:
            meta = item["metadata"]
            try:
                self.delete(res, meta["name"], namespace=meta.get("namespace"), opts=opts)
            except DemoApiError as exc:
                if exc.code != 404:
                    raise
        return listed
