"""Sample data: a small, realistic cluster (pods with logs, events, endpoints, leases, images)
and generators for large data sets.

The objects are related the way a real cluster relates them: the Deployment ``web`` owns the
ReplicaSet ``web-6d4b9c7f5``, which owns the two ``web-6d4b9c7f5-*`` pods (ownerReferences
with the owners' uids); the Service ``web`` selects those pods and the Endpoints ``web``
point at them (``targetRef``); the pods mount the ConfigMap ``web-config``; every scheduled
pod's ``spec.nodeName`` is a Node; two Widgets (the demo's custom resource) exist.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, Final

from gateway.core.registry import ENDPOINTS, EVENT, IMAGE, LEASE, POD
from kube_gateway_demo.catalog import CONFIGMAP, DEPLOYMENT, NODE, REPLICASET, SERVICE, WIDGET
from kube_gateway_demo.inprocess import DemoStore
from kube_gateway_demo.times import micro_time

Obj = dict[str, Any]

NODES: Final = ("node-a", "node-b")
DEMO_NAMESPACE: Final = "demo"


def _hex(seed: str, length: int = 64) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


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
    init_containers: list[Obj] | None = None,
    restart_policy: str = "Always",
) -> Obj:
    """A pod manifest."""
    spec: Obj = {"containers": containers, "restartPolicy": restart_policy}
    if init_containers:
        spec["initContainers"] = init_containers
    if node:
        spec["nodeName"] = node
    meta: Obj = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def pod_status(manifest: Obj, phase: str, *, now: str, ip_index: int, ready: bool = True) -> Obj:
    """A kubelet-style status for ``manifest`` in ``phase``."""
    spec = manifest["spec"]
    running = phase == "Running"
    done = phase in ("Succeeded", "Failed")
    node_index = NODES.index(spec["nodeName"]) if spec.get("nodeName") in NODES else 0
    conditions: list[Obj] = [
        {"type": "PodReadyToStartContainers", "status": "True" if running or done else "False"},
        {"type": "Initialized", "status": "True"},
        {"type": "Ready", "status": "True" if running and ready else "False"},
        {"type": "ContainersReady", "status": "True" if running and ready else "False"},
        {"type": "PodScheduled", "status": "True"},
    ]
    for cond in conditions:
        cond["lastProbeTime"] = None
        cond["lastTransitionTime"] = now
    if done:
        for cond in conditions[2:4]:
            cond["reason"] = "PodCompleted"
    statuses = []
    for c in spec["containers"]:
        if running:
            state: Obj = {"running": {"startedAt": now}}
        elif done:
            state = {
                "terminated": {
                    "exitCode": 0 if phase == "Succeeded" else 1,
                    "reason": "Completed" if phase == "Succeeded" else "Error",
                    "startedAt": now,
                    "finishedAt": now,
                    "containerID": f"containerd://{_hex(c['name'] + now)}",
                }
            }
        else:
            state = {"waiting": {"reason": "ContainerCreating"}}
        statuses.append(
            {
                "name": c["name"],
                "state": state,
                "lastState": {},
                "ready": running and ready,
                "restartCount": 0,
                "image": c["image"] if ":" in c["image"] else c["image"] + ":latest",
                "imageID": f"{c['image'].split(':')[0]}@sha256:{_hex(c['image'])}",
                "containerID": f"containerd://{_hex(manifest['metadata']['name'] + c['name'])}",
                "started": running,
            }
        )
    status: Obj = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": f"10.0.0.{11 + node_index}",
        "hostIPs": [{"ip": f"10.0.0.{11 + node_index}"}],
        "startTime": now,
        "containerStatuses": statuses,
    }
    if running or done:
        status["podIP"] = f"10.244.{node_index}.{ip_index}"
        status["podIPs"] = [{"ip": status["podIP"]}]
    if spec.get("initContainers"):
        status["initContainerStatuses"] = [
            {
                "name": c["name"],
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                },
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": c["image"],
                "imageID": "",
                "started": False,
            }
            for c in spec["initContainers"]
        ]
    return status


def event_for(
    pod_obj: Obj,
    reason: str,
    message: str,
    *,
    kind: str = "Normal",
    component: str = "kubelet",
    now: str,
    count: int = 1,
) -> Obj:
    """A core/v1 Event about a pod."""
    meta = pod_obj["metadata"]
    suffix = _hex(meta["name"] + reason + now + str(count), 16)
    event: Obj = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{suffix}", "namespace": meta["namespace"]},
        "involvedObject": {
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "apiVersion": "v1",
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": count,
        "type": kind,
        "reportingComponent": component,
        "reportingInstance": pod_obj.get("spec", {}).get("nodeName", "")
        if component == "kubelet"
        else "",
    }
    if component == "kubelet":
        event["source"]["host"] = pod_obj.get("spec", {}).get("nodeName", "")
    if reason in ("Pulled", "Created", "Started", "BackOff", "Killing"):
        event["involvedObject"]["fieldPath"] = (
            f"spec.containers{{{pod_obj['spec']['containers'][0]['name']}}}"
        )
    return event


def lease(name: str, namespace: str, holder: str, *, now_micro: str, duration: int = 15) -> Obj:
    """A coordination.k8s.io/v1 Lease."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": now_micro,
            "renewTime": now_micro,
            "leaseTransitions": 0,
        },
    }


def image(seed: str, repository: str, layers: int = 3) -> Obj:
    """An image.openshift.io/v1 Image.

    OpenShift names images ``sha256:<hex>``; the reference cluster serves Image as a CRD,
    which only takes DNS-subdomain names, so the sample uses ``sha256-<hex>``.
    """
    digest = f"sha256:{_hex(seed)}"
    return {
        "apiVersion": "image.openshift.io/v1",
        "kind": "Image",
        "metadata": {
            "name": digest.replace(":", "-"),
            "annotations": {"image.openshift.io/dockerLayersOrder": "ascending"},
        },
        "dockerImageReference": f"{repository}@{digest}",
        "dockerImageMetadata": {
            "kind": "DockerImage",
            "apiVersion": "image.openshift.io/1.0",
            "Id": digest,
            "Created": "2024-05-01T12:00:00Z",
            "Architecture": "amd64",
            "Size": sum(1000_000 * (i + 1) for i in range(layers)),
        },
        "dockerImageMetadataVersion": "1.0",
        "dockerImageLayers": [
            {
                "name": f"sha256:{_hex(seed + str(i))}",
                "size": 1000_000 * (i + 1),
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            }
            for i in range(layers)
        ],
        "dockerImageManifestMediaType": "application/vnd.oci.image.manifest.v1+json",
    }


def endpoints_for(
    name: str, namespace: str, pods: list[Obj], port: int, port_name: str = "http"
) -> Obj:
    """core/v1 Endpoints whose addresses point at ``pods`` (ready ones as addresses)."""
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


async def _run_pod(store: DemoStore, manifest: Obj, phase: str, ip_index: int) -> Obj:
    created = await store.create(POD, manifest, field_manager="kubectl-create")
    now = store.now()
    status = pod_status(created, phase, now=now, ip_index=ip_index)
    updated = await store.update(
        POD, {**created, "status": status}, subresource="status", field_manager="kubelet"
    )
    if phase in ("Running", "Succeeded", "Failed"):
        events = [
            (
                "Scheduled",
                f"Successfully assigned {created['metadata']['namespace']}/"
                f"{created['metadata']['name']} to {created['spec'].get('nodeName')}",
                "default-scheduler",
            )
        ]
        first = created["spec"]["containers"][0]
        events += [
            ("Pulled", f'Container image "{first["image"]}" already present on machine', "kubelet"),
            ("Created", f"Created container: {first['name']}", "kubelet"),
            ("Started", f"Started container {first['name']}", "kubelet"),
        ]
        for reason, message, component in events:
            await store.create(
                EVENT,
                event_for(updated, reason, message, component=component, now=now),
                field_manager=component,
            )
    return updated


def owner_reference(owner: Obj) -> Obj:
    """A controller ``ownerReference`` to ``owner`` (as a controller sets it)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def node_manifest(name: str, index: int, *, now: str) -> Obj:
    """A core/v1 Node as its kubelet registers it."""
    ready = {
        "type": "Ready",
        "status": "True",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
    }
    capacity = {"cpu": "4", "memory": "16375836Ki", "pods": "110", "ephemeral-storage": "101Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "demo.large",
            },
        },
        "spec": {"podCIDR": f"10.244.{index}.0/24", "podCIDRs": [f"10.244.{index}.0/24"]},
        "status": {
            "capacity": capacity,
            "allocatable": {**capacity, "cpu": "3800m"},
            "conditions": [ready],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.0.{11 + index}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": _hex(name, 32),
                "systemUUID": _hex(name + "uuid", 32),
                "bootID": _hex(name + "boot", 32),
                "kernelVersion": "6.8.0-45-generic",
                "osImage": "Ubuntu 24.04.1 LTS",
                "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": "v1.36.3",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


WEB_LABELS: Final = {"app": "web", "tier": "frontend"}
WEB_HASH: Final = "6d4b9c7f5"


def web_template() -> Obj:
    """The pod template of the Deployment ``web`` (and its ReplicaSet)."""
    app = container("app", "quay.io/demo/web:1.4.2", port=8080, env=2)
    app["volumeMounts"] = [{"name": "config", "mountPath": "/etc/web", "readOnly": True}]
    return {
        "metadata": {"labels": dict(WEB_LABELS)},
        "spec": {
            "containers": [app, container("sidecar", "envoyproxy/envoy:v1.31.0", port=9901)],
            "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
        },
    }


def widget(name: str, color: str, size: int, *, config: str | None = None) -> Obj:
    """A ``demo.kube-gateway.dev/v1`` Widget."""
    spec: Obj = {"color": color, "size": size, "labels": {"team": "web"}}
    if config:
        spec["configMapName"] = config
    return {
        "apiVersion": WIDGET.api_version,
        "kind": WIDGET.kind,
        "metadata": {"name": name, "namespace": DEMO_NAMESPACE, "labels": {"app": "web"}},
        "spec": spec,
    }


async def _web_workload(store: DemoStore) -> tuple[Obj, Obj]:
    """The Deployment ``web``, its ConfigMap and its ReplicaSet (whose pods come next)."""
    await store.create(
        CONFIGMAP,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "web-config", "namespace": DEMO_NAMESPACE, "labels": WEB_LABELS},
            "data": {"LOG_LEVEL": "info", "web.conf": "listen 8080;\nupstream api:9090;\n"},
        },
        field_manager="kubectl-client-side-apply",
    )
    selector = {"matchLabels": dict(WEB_LABELS)}
    deployment = await store.create(
        DEPLOYMENT,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": DEMO_NAMESPACE,
                "labels": WEB_LABELS,
                "annotations": {"deployment.kubernetes.io/revision": "1"},
            },
            "spec": {"replicas": 2, "selector": selector, "template": web_template()},
        },
        field_manager="kubectl-client-side-apply",
    )
    template = web_template()
    template["metadata"]["labels"]["pod-template-hash"] = WEB_HASH
    replicaset = await store.create(
        REPLICASET,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"web-{WEB_HASH}",
                "namespace": DEMO_NAMESPACE,
                "labels": {**WEB_LABELS, "pod-template-hash": WEB_HASH},
                "annotations": {
                    "deployment.kubernetes.io/desired-replicas": "2",
                    "deployment.kubernetes.io/max-replicas": "3",
                    "deployment.kubernetes.io/revision": "1",
                },
                "ownerReferences": [owner_reference(deployment)],
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {**WEB_LABELS, "pod-template-hash": WEB_HASH}},
                "template": template,
            },
        },
        field_manager="kube-controller-manager",
    )
    return deployment, replicaset


async def _workload_status(store: DemoStore, deployment: Obj, replicaset: Obj) -> None:
    now = store.now()
    replicas = {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2}
    await store.update(
        REPLICASET,
        {**replicaset, "status": {**replicas, "fullyLabeledReplicas": 2, "observedGeneration": 1}},
        subresource="status",
        field_manager="kube-controller-manager",
    )
    condition = {"status": "True", "lastUpdateTime": now, "lastTransitionTime": now}
    await store.update(
        DEPLOYMENT,
        {
            **deployment,
            "status": {
                "observedGeneration": 1,
                **replicas,
                "updatedReplicas": 2,
                "conditions": [
                    {
                        "type": "Available",
                        **condition,
                        "reason": "MinimumReplicasAvailable",
                        "message": "Deployment has minimum availability.",
                    },
                    {
                        "type": "Progressing",
                        **condition,
                        "reason": "NewReplicaSetAvailable",
                        "message": f'ReplicaSet "web-{WEB_HASH}" has successfully progressed.',
                    },
                ],
            },
        },
        subresource="status",
        field_manager="kube-controller-manager",
    )


def service(name: str, namespace: str, selector: dict[str, str] | None, ports: list[Obj]) -> Obj:
    """A ClusterIP core/v1 Service."""
    spec: Obj = {"ports": ports}
    if selector is not None:
        spec["selector"] = selector
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": spec,
    }


async def _services(store: DemoStore) -> None:
    http = {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}
    await store.create(
        SERVICE, service("web", DEMO_NAMESPACE, dict(WEB_LABELS), [http]), field_manager="kubectl"
    )
    await store.create(
        SERVICE,
        service("nginx", "default", {"app": "nginx"}, [{"name": "http", "port": 80}]),
        field_manager="kubectl",
    )
    kubernetes = service("kubernetes", "default", None, [{"name": "https", "port": 443}])
    kubernetes["spec"]["clusterIP"] = "10.96.0.1"
    kubernetes["spec"]["ports"][0]["targetPort"] = 6443
    kubernetes["metadata"]["labels"] = {"component": "apiserver", "provider": "kubernetes"}
    await store.create(SERVICE, kubernetes, field_manager="kube-apiserver")
    dns = service("kube-dns", "kube-system", {"k8s-app": "kube-dns"}, [{"name": "dns", "port": 53}])
    dns["spec"]["clusterIP"] = "10.96.0.10"
    await store.create(SERVICE, dns, field_manager="kubeadm")


async def _widgets(store: DemoStore) -> None:
    for name, color, size, config, phase in (
        ("blue-widget", "blue", 3, "web-config", "Ready"),
        ("red-widget", "red", 7, None, "Pending"),
    ):
        created = await store.create(
            WIDGET, widget(name, color, size, config=config), field_manager="kubectl"
        )
        ready = "True" if phase == "Ready" else "False"
        status = {
            "phase": phase,
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "lastTransitionTime": store.now(),
                    "reason": "Assembled" if phase == "Ready" else "WaitingForParts",
                    "message": f"{size} parts",
                }
            ],
        }
        await store.update(
            WIDGET, {**created, "status": status}, subresource="status", field_manager="widgetd"
        )


def _serves(store: DemoStore, *resources: Any) -> bool:
    return all(store.registry.get(r.key) == r for r in resources)


async def seed(store: DemoStore) -> None:
    """Populate ``store`` with the sample cluster (namespaces default, kube-system, demo).

    The objects of kinds beyond the gateway's five are created when the store serves them
    (it does by default: :data:`~kube_gateway_demo.catalog.DEMO_REGISTRY`).
    """
    await store.ensure_namespace(DEMO_NAMESPACE)
    now_ts = store.clock()
    if _serves(store, NODE):
        for i, name in enumerate(NODES):
            await store.create(
                NODE, node_manifest(name, i, now=store.now()), field_manager="kubelet"
            )
    owner: list[Obj] = []
    workload: tuple[Obj, Obj] | None = None
    if _serves(store, CONFIGMAP, DEPLOYMENT, REPLICASET):
        workload = await _web_workload(store)
        owner = [owner_reference(workload[1])]
    web: list[Obj] = []
    for i, suffix in enumerate(("x7k2p", "m9q4z")):
        manifest = pod(
            f"web-{WEB_HASH}-{suffix}",
            DEMO_NAMESPACE,
            [
                container("app", "quay.io/demo/web:1.4.2", port=8080, env=2),
                container("sidecar", "envoyproxy/envoy:v1.31.0", port=9901),
            ],
            labels={**WEB_LABELS, "pod-template-hash": WEB_HASH},
            node=NODES[i % 2],
        )
        if workload is not None:
            manifest["spec"] = {**web_template()["spec"], **manifest["spec"]}
            manifest["spec"]["containers"] = web_template()["spec"]["containers"]
            manifest["metadata"]["ownerReferences"] = owner
        web.append(await _run_pod(store, manifest, "Running", 10 + i))
    if workload is not None:
        await _workload_status(store, *workload)
    await _run_pod(
        store,
        pod(
            "worker-28474810-bz4xq",
            DEMO_NAMESPACE,
            [container("worker", "quay.io/demo/worker:2.0")],
            labels={"app": "worker", "job-name": "worker-28474810"},
            node="node-b",
            restart_policy="Never",
        ),
        "Succeeded",
        20,
    )
    await _run_pod(
        store,
        pod(
            "db-migrate-5c8f7",
            DEMO_NAMESPACE,
            [container("app", "quay.io/demo/web:1.4.2")],
            labels={"app": "db-migrate"},
            node="node-a",
            init_containers=[container("init-schema", "quay.io/demo/migrate:0.9")],
        ),
        "Running",
        21,
    )
    await store.create(
        POD,
        pod(
            "pending-7f9d8",
            DEMO_NAMESPACE,
            [container("app", "quay.io/demo/web:1.4.2")],
            labels={"app": "pending"},
        ),
        field_manager="kubectl-create",
    )
    nginx = await _run_pod(
        store,
        pod(
            "nginx-7c5ddbdf54-x2x9p",
            "default",
            [container("nginx", "nginx:1.27", port=80)],
            labels={"app": "nginx", "pod-template-hash": "7c5ddbdf54"},
            node="node-a",
        ),
        "Running",
        30,
    )
    coredns = await _run_pod(
        store,
        pod(
            "coredns-668d6bf9bc-4xq7n",
            "kube-system",
            [container("coredns", "registry.k8s.io/coredns/coredns:v1.11.3", port=53)],
            labels={"k8s-app": "kube-dns", "pod-template-hash": "668d6bf9bc"},
            node="node-b",
        ),
        "Running",
        2,
    )
    await store.create(
        EVENT,
        event_for(
            web[1],
            "BackOff",
            'Back-off pulling image "envoyproxy/envoy:v1.31.0"',
            kind="Warning",
            now=store.now(),
        ),
        field_manager="kubelet",
    )
    await store.create(
        ENDPOINTS,
        endpoints_for("web", DEMO_NAMESPACE, web, 8080),
        field_manager="endpoint-controller",
    )
    await store.create(
        ENDPOINTS,
        endpoints_for("nginx", "default", [nginx], 80),
        field_manager="endpoint-controller",
    )
    await store.create(
        ENDPOINTS,
        endpoints_for("kube-dns", "kube-system", [coredns], 53, "dns"),
        field_manager="endpoint-controller",
    )
    await store.create(
        ENDPOINTS,
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {
                "name": "kubernetes",
                "namespace": "default",
                "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
            },
            "subsets": [
                {
                    "addresses": [{"ip": "10.0.0.1"}],
                    "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
                }
            ],
        },
        field_manager="kube-apiserver",
    )
    micro = micro_time(now_ts)
    for name in ("kube-scheduler", "kube-controller-manager"):
        await store.create(
            LEASE,
            lease(name, "kube-system", f"node-a_{_hex(name, 8)}", now_micro=micro),
            field_manager=name,
        )
    for node in NODES:
        await store.create(
            LEASE,
            lease(node, "kube-node-lease", node, now_micro=micro, duration=40),
            field_manager="kubelet",
        )
    await store.create(
        LEASE,
        lease("demo-leader", DEMO_NAMESPACE, web[0]["metadata"]["name"], now_micro=micro),
        field_manager="demo-app",
    )
    for seed_name, repo in (
        ("web-1.4.2", "quay.io/demo/web"),
        ("worker-2.0", "quay.io/demo/worker"),
    ):
        await store.create(IMAGE, image(seed_name, repo), field_manager="openshift-apiserver")
    if _serves(store, SERVICE):
        await _services(store)
    if _serves(store, WIDGET):
        await _widgets(store)


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
            ip_index=i % 250,
        )
        manifest["spec"]["nodeName"] = f"node-{i % node_count}"
        yield manifest
