"""The official Kubernetes Python client talks to the demo upstream unchanged."""

from __future__ import annotations

import asyncio

from kube_gateway_demo import DemoUpstream


def _exercise(url: str) -> dict[str, object]:
    from kubernetes import client, watch

    cfg = client.Configuration()
    cfg.host = url
    cfg.api_key = {"authorization": "admin-token"}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    api = client.ApiClient(cfg)
    try:
        core = client.CoreV1Api(api)
        pods = core.list_namespaced_pod("demo", label_selector="app=web")
        pod = core.read_namespaced_pod("web-6d4b9c7f5-x7k2p", "demo")
        log = core.read_namespaced_pod_log("nginx-7c5ddbdf54-x2x9p", "default", tail_lines=2)
        created = core.create_namespaced_event(
            "demo",
            {
                "metadata": {"name": "compat"},
                "involvedObject": {"kind": "Pod", "namespace": "demo", "name": pod.metadata.name},
                "reason": "Compat",
                "message": "from the official client",
            },
        )
        events = core.list_namespaced_event("demo", field_selector="reason=Compat")
        leases = client.CoordinationV1Api(api).list_namespaced_lease("kube-system")
        seen = [
            (e["type"], e["object"].metadata.name)
            for e in watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=1)
        ]
        deleted = core.delete_namespaced_event("compat", "demo")
        return {
            "pods": sorted(p.metadata.name for p in pods.items),
            "containers": [c.name for c in pod.spec.containers],
            "ready": [c.status for c in pod.status.conditions if c.type == "Ready"],
            "log_lines": len(log.splitlines()),
            "event": (created.reason, events.items[0].metadata.name),
            "leases": len(leases.items),
            "watch": seen,
            "deleted": deleted["status"] if isinstance(deleted, dict) else deleted.status,
        }
    finally:
        api.close()


async def test_official_python_client(demo: DemoUpstream) -> None:
    result = await asyncio.to_thread(_exercise, demo.url)
    assert result == {
        "pods": ["web-6d4b9c7f5-m9q4z", "web-6d4b9c7f5-x7k2p"],
        "containers": ["app", "sidecar"],
        "ready": ["True"],
        "log_lines": 2,
        "event": ("Compat", "compat"),
        "leases": 2,
        "watch": [("ADDED", "nginx-7c5ddbdf54-x2x9p")],
        "deleted": "Success",
    }
