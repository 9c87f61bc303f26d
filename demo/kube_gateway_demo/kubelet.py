"""The demo's kubelet, as far as the API shows it: the status it reports for a pod in a phase,
the events it records, and containers' logs.  A container's log starts with a few lines the
first time it is read, and ends when the pod's status says the container terminated; a
deleted pod's logs are gone."""

from __future__ import annotations

import hashlib
from typing import Final

from gateway.core.model.registry import POD
from kube_gateway_demo.cluster import Cluster
from kube_gateway_demo.logs import ContainerLog
from kube_gateway_demo.storage import Change, Obj
from kube_gateway_demo.times import parse_rfc3339, rfc3339

NODES: Final = ("node-a", "node-b")
"""The sample cluster's nodes (``manifests/cluster.yaml``): node ``i`` has the address
``10.0.0.(11+i)`` and gives its pods addresses in ``10.244.i.0/24``."""


def _hex(seed: str, length: int = 64) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


def pod_ip(node: str, n: int) -> str:
    """The address of the ``n``-th pod on ``node``."""
    return f"10.244.{_node_index(node)}.{n}"


def _node_index(node: object) -> int:
    return NODES.index(node) if node in NODES else 0


def pod_status(
    pod: Obj, phase: str, *, now: str, pod_ip: str | None = None, ready: bool = True
) -> Obj:
    """The status the kubelet reports for ``pod`` in ``phase`` (``pod_ip``: its address once
    it runs)."""
    spec = pod["spec"]
    running = phase == "Running"
    done = phase in ("Succeeded", "Failed")
    node_index = _node_index(spec.get("nodeName"))
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
                "containerID": f"containerd://{_hex(pod['metadata']['name'] + c['name'])}",
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
    if (running or done) and pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
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
    pod: Obj,
    reason: str,
    message: str,
    *,
    kind: str = "Normal",
    component: str = "kubelet",
    now: str,
    count: int = 1,
) -> Obj:
    """A core/v1 Event about a pod (recorded by the kubelet, or by ``component``)."""
    meta = pod["metadata"]
    suffix = _hex(meta["name"] + reason + now + str(count), 16)
    node = pod.get("spec", {}).get("nodeName", "")
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
        "reportingInstance": node if component == "kubelet" else "",
    }
    if component == "kubelet":
        event["source"]["host"] = node
    if reason in ("Pulled", "Created", "Started", "BackOff", "Killing"):
        event["involvedObject"]["fieldPath"] = (
            f"spec.containers{{{pod['spec']['containers'][0]['name']}}}"
        )
    return event


def started_events(pod: Obj) -> list[tuple[str, str, str]]:
    """``(reason, message, component)`` of the events of a pod that started running: the
    scheduler's assignment, then the kubelet's pull, create and start of its first
    container."""
    meta, spec = pod["metadata"], pod["spec"]
    first = spec["containers"][0]
    return [
        (
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {spec.get('nodeName')}",
            "default-scheduler",
        ),
        ("Pulled", f'Container image "{first["image"]}" already present on machine', "kubelet"),
        ("Created", f"Created container: {first['name']}", "kubelet"),
        ("Started", f"Started container {first['name']}", "kubelet"),
    ]


def initial_log_lines(pod: str, container: Obj) -> list[str]:
    """The deterministic first lines a container "prints" when its pod is created."""
    name = str(container.get("name", ""))
    image = str(container.get("image", ""))
    if "nginx" in image:
        return [
            "/docker-entrypoint.sh: Configuration complete; ready for start up",
            f'{pod} nginx: using the "epoll" event method',
            f"{pod} nginx: start worker processes",
            f"{pod} nginx: start worker process 29",
            '10.244.0.1 - - "GET /healthz HTTP/1.1" 200 2 "-" "kube-probe/1.34"',
        ]
    request_id = _hex(pod + name, 8)
    return [
        f"[{name}] starting {image or 'container'}",
        f"[{name}] loading configuration for pod {pod}",
        f"[{name}] listening on :8080",
        f"[{name}] ready",
        f"[{name}] handled request id={request_id} status=200",
    ]


def terminated(pod: Obj) -> list[str]:
    """The names of the pod's containers whose status says they terminated."""
    status = pod.get("status") or {}
    return [
        str(cs.get("name"))
        for group in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")
        for cs in status.get(group) or []
        if isinstance(cs, dict) and "terminated" in (cs.get("state") or {})
    ]


class Kubelet:
    """Keeps the cluster's container logs in step with its pods."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        if cluster.serves(POD):
            cluster.storage.hook(POD, self._pod_changed)

    def _pod_changed(self, change: Change) -> None:
        uid = change.obj["metadata"].get("uid", "")
        if change.type == "DELETED":
            self.cluster.logs.forget(uid)
            return
        for name in terminated(change.obj):
            self.cluster.logs.end(uid, name)

    def container_log(self, pod: Obj, container: str) -> ContainerLog:
        """The log of ``container`` in ``pod``, started (lazily) with its first lines."""
        logs = self.cluster.logs
        meta = pod["metadata"]
        uid = str(meta["uid"])
        log = logs.get(uid, container)
        if log is not None:
            return log
        log = logs.container(uid, container)
        spec = pod.get("spec") or {}
        created = meta.get("creationTimestamp") or rfc3339(self.cluster.clock())
        base = parse_rfc3339(created)
        for group in ("initContainers", "containers"):
            for c in spec.get(group) or []:
                if isinstance(c, dict) and c.get("name") == container:
                    lines = initial_log_lines(str(meta.get("name", "")), c)
                    for i, line in enumerate(lines):
                        logs.append(uid, container, [line], base + i * 0.001)
        if container in terminated(pod):
            log.ended = True
        return log
