"""The demo's kubelet, as far as the API shows it: containers' logs.  A container's log starts
with a few lines the first time it is read, and ends when the pod's status says the container
terminated; a deleted pod's logs are gone."""

from __future__ import annotations

import hashlib

from gateway.core.registry import POD
from kube_gateway_demo.cluster import Cluster
from kube_gateway_demo.logs import ContainerLog
from kube_gateway_demo.storage import Change, Obj
from kube_gateway_demo.times import parse_rfc3339, rfc3339


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
    request_id = hashlib.sha256((pod + name).encode()).hexdigest()[:8]
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
