"""Sample data: a small, realistic cluster (pods with logs, events, endpoints, leases, images,
workloads, a custom resource) and generators for large data sets.

The cluster is written as manifests, ``manifests/*.yaml`` (each a ``List``), created in order
by :func:`seed` through the store's ordinary writes.  Three things in them mean more than a
``kubectl create`` would make of them:

* ``metadata.managedFields`` names who writes the object, as a real object's does: the
  entry without a subresource is the field manager that creates it; an entry with
  ``subresource: status`` is the one that then writes its ``status`` (a controller's, the
  kubelet's), through the status subresource.  Without one, ``kubectl`` creates it.
* ``${NOW}`` and ``${NOW_MICRO}`` are the time of seeding (``metav1.Time``, ``MicroTime``).
* A reference to an object by name (``ownerReferences``, an Event's ``involvedObject``) gets
  that object's uid; one to an object that is not there (a kind not served) is dropped.

A pod's ``status`` is short: the ``phase`` and ``podIP`` the demo's kubelet reports
(:func:`~kube_gateway_demo.kubelet.pod_status` writes the rest), and a pod that ran gets the
scheduler's and the kubelet's events.  Objects of kinds the store does not serve are skipped.
Last, the endpoints controller's part: the Endpoints of every Service with a selector.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import yaml

from gateway.core.errors import UnknownResource
from gateway.core.model.registry import ENDPOINTS, EVENT, POD, Resource
from kube_gateway_demo.catalog import SERVICE
from kube_gateway_demo.inprocess import DemoStore
from kube_gateway_demo.jsonutil import clone
from kube_gateway_demo.kubelet import NODES, event_for, pod_ip, pod_status, started_events
from kube_gateway_demo.status import DemoApiError
from kube_gateway_demo.times import micro_time

Obj = dict[str, Any]

DEMO_NAMESPACE: Final = "demo"
MANIFEST_DIR: Final = Path(__file__).resolve().parent / "manifests"
MANIFESTS: Final = ("cluster.yaml", "web.yaml", "workloads.yaml", "images.yaml")
"""The files of :data:`MANIFEST_DIR`, in the order they are created."""


@functools.cache
def _read(name: str) -> tuple[Obj, ...]:
    document = yaml.safe_load((MANIFEST_DIR / name).read_text(encoding="utf-8"))
    return tuple(document["items"])


def manifests() -> list[Obj]:
    """The sample cluster's objects as written, in the order they are created (copies)."""
    return [clone(item) for name in MANIFESTS for item in _read(name)]


async def seed(store: DemoStore) -> None:
    """Populate ``store`` with the sample cluster (namespaces default, kube-system, demo).

    The objects of kinds beyond the gateway's five are created when the store serves them
    (it does by default: :data:`~kube_gateway_demo.catalog.DEMO_REGISTRY`).
    """
    now, micro = store.now(), micro_time(store.clock())
    for manifest in manifests():
        await _create(store, _stamped(manifest, {"${NOW}": now, "${NOW_MICRO}": micro}))
    if store.serves(SERVICE):
        for svc in await store.list(SERVICE):
            await _write_endpoints(store, svc)


def _stamped(value: Any, times: dict[str, str]) -> Any:
    """``value`` with every placeholder string replaced by its time."""
    if isinstance(value, dict):
        return {k: _stamped(v, times) for k, v in value.items()}
    if isinstance(value, list):
        return [_stamped(v, times) for v in value]
    return times.get(value, value) if isinstance(value, str) else value


def _served(store: DemoStore, api_version: str, kind: str) -> Resource | None:
    try:
        res = store.registry.lookup(kind)
    except UnknownResource:
        return None
    return res if res.api_version == api_version and store.serves(res) else None


async def _create(store: DemoStore, manifest: Obj) -> None:
    meta = manifest["metadata"]
    if manifest["kind"] == "Namespace":
        await store.ensure_namespace(meta["name"])  # an object, when Namespaces are served
        return
    res = _served(store, manifest["apiVersion"], manifest["kind"])
    if res is None:
        return
    managers = meta.pop("managedFields", None) or [{"manager": "kubectl"}]
    creator = next(m["manager"] for m in managers if "subresource" not in m)
    status_writer = next((m["manager"] for m in managers if m.get("subresource") == "status"), None)
    status = manifest.pop("status", None) if status_writer else None
    await _resolve_references(store, manifest)
    created = await store.create(res, manifest, field_manager=creator)
    if status is None or status_writer is None:
        return
    if res.key == POD.key:
        await _run_pod(store, created, status, status_writer)
        return
    await store.update(
        res, {**created, "status": status}, subresource="status", field_manager=status_writer
    )


async def _uid(store: DemoStore, ref: Obj, namespace: str | None) -> str | None:
    """The uid of the object ``ref`` names (``None``: it is not there)."""
    res = _served(store, ref.get("apiVersion", ""), ref.get("kind", ""))
    if res is None:
        return None
    try:
        obj = await store.get(
            res, ref["name"], namespace=ref.get("namespace", namespace) if res.namespaced else None
        )
    except DemoApiError:
        return None
    return str(obj["metadata"]["uid"])


async def _resolve_references(store: DemoStore, manifest: Obj) -> None:
    meta = manifest["metadata"]
    owners = []
    for ref in meta.pop("ownerReferences", None) or []:
        uid = await _uid(store, ref, meta.get("namespace"))
        if uid is not None:
            owners.append({**ref, "uid": uid})
    if owners:
        meta["ownerReferences"] = owners
    involved = manifest.get("involvedObject")
    if isinstance(involved, dict):
        uid = await _uid(store, involved, meta.get("namespace"))
        if uid is not None:
            involved["uid"] = uid


async def _run_pod(store: DemoStore, created: Obj, short: Obj, kubelet: str) -> None:
    """The kubelet reports the pod in ``short["phase"]``; a pod that ran has its events."""
    phase = str(short["phase"])
    now = store.now()
    status = pod_status(created, phase, now=now, pod_ip=short.get("podIP"))
    updated = await store.update(
        POD, {**created, "status": status}, subresource="status", field_manager=kubelet
    )
    if phase in ("Running", "Succeeded", "Failed") and store.serves(EVENT):
        for reason, message, component in started_events(created):
            await store.create(
                EVENT,
                event_for(updated, reason, message, component=component, now=now),
                field_manager=component,
            )


def endpoints_for(
    name: str, namespace: str, pods: list[Obj], port: int, port_name: str = "http"
) -> Obj:
    """core/v1 Endpoints whose addresses point at ``pods`` (ready ones as addresses), in the
    endpoints controller's order (by IP)."""
    ready: list[Obj] = []
    not_ready: list[Obj] = []
    for p in pods:
        status = p.get("status") or {}
        ip = status.get("podIP")
        if not ip:
            continue
        address = {
            "ip": ip,
            "nodeName": p["spec"].get("nodeName", ""),
            "targetRef": {
                "kind": "Pod",
                "namespace": namespace,
                "name": p["metadata"]["name"],
                "uid": p["metadata"]["uid"],
            },
        }
        is_ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        (ready if is_ready else not_ready).append(address)
    for addresses in (ready, not_ready):
        addresses.sort(key=lambda a: ipaddress.ip_address(a["ip"]))
    subset: Obj = {"ports": [{"name": port_name, "port": port, "protocol": "TCP"}]}
    if ready:
        subset["addresses"] = ready
    if not_ready:
        subset["notReadyAddresses"] = not_ready
    ep: Obj = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
    }
    if ready or not_ready:
        ep["subsets"] = [subset]
    return ep


async def _write_endpoints(store: DemoStore, svc: Obj) -> None:
    """The endpoints controller: a Service with a selector gets Endpoints at the pods it
    selects, on its first port's target port."""
    meta, spec = svc["metadata"], svc.get("spec") or {}
    selector = spec.get("selector")
    if not selector or not spec.get("ports"):
        return
    labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    pods = await store.list(POD, namespace=meta["namespace"], label_selector=labels)
    port = spec["ports"][0]
    endpoints = endpoints_for(
        meta["name"], meta["namespace"], pods, int(port["targetPort"]), port.get("name", "")
    )
    await store.create(ENDPOINTS, endpoints, field_manager="endpoint-controller")


def container(name: str, image: str, *, port: int | None = None, env: int = 0) -> Obj:
    """A container spec."""
    c: Obj = {"name": name, "image": image}
    if port is not None:
        c["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    if env:
        c["env"] = [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(env)]
    c["resources"] = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}
    return c


def pod(
    name: str,
    namespace: str,
    containers: list[Obj],
    *,
    labels: dict[str, str] | None = None,
    node: str | None = None,
    restart_policy: str = "Always",
) -> Obj:
    """A pod manifest."""
    spec: Obj = {"containers": containers, "restartPolicy": restart_policy}
    if node:
        spec["nodeName"] = node
    meta: Obj = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def make_pods(
    count: int, namespace: str, *, prefix: str = "bulk", node_count: int = 3
) -> Iterator[Obj]:
    """``count`` realistic running pods (about 2.5 KB of JSON each) for large-list tests."""
    for i in range(count):
        name = f"{prefix}-{i:05d}"
        manifest = pod(
            name,
            namespace,
            [container("app", "quay.io/demo/web:1.4.2", port=8080, env=4)],
            labels={"app": prefix, "shard": str(i % 10)},
            node=f"node-{i % node_count}",
        )
        manifest["status"] = pod_status(
            {**manifest, "spec": {**manifest["spec"], "nodeName": NODES[0]}},
            "Running",
            now="2024-01-01T00:00:00Z",
            pod_ip=pod_ip(NODES[0], i % 250),
        )
        yield manifest
