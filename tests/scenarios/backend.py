"""What a scenario needs from an upstream, whichever it is, and valid sample objects."""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.core.model import schema
from gateway.core.model.registry import REGISTRY, Resource
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.credentials import Credential

_counter = itertools.count()

RESOURCES: Mapping[str, Resource] = {r.plural: r for r in REGISTRY.values()}
"""Every served resource by plural: what the scenarios iterate."""


def namespaced(plural: str) -> bool:
    return RESOURCES[plural].namespaced


def custom_resource(plural: str) -> bool:
    """Whether the reference cluster serves the kind through a CRD: Kubernetes does not
    define it (its schema is not from the Kubernetes OpenAPI, e.g. OpenShift's Image), so
    strategic merge patch is not served for it (415)."""
    r = RESOURCES[plural]
    return not schema.kind_type(r.group, r.version, r.kind).name.startswith("io.k8s.")


@dataclass
class Backend:
    """An upstream with three identities.

    ``admin`` may do everything; ``alice`` may do everything in ``namespace`` only;
    ``nobody`` may do nothing; ``bad_token`` is not a valid token at all.
    """

    name: str
    adapter: KubeAdapter
    admin: Credential
    alice: Credential
    nobody: Credential
    bad_token: Credential = field(default_factory=lambda: Credential("not-a-valid-token"))
    namespace: str = "team-a"
    other_namespace: str = "team-b"

    def unique(self, prefix: str) -> str:
        """A DNS-1123 name no other test (or earlier run against the same cluster) uses."""
        return f"{prefix}-{os.getpid() % 10000}-{next(_counter)}"


def sample(kind: str, name: str, namespace: str | None) -> dict[str, Any]:
    """A minimal valid object of each served kind."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if kind == "pods":
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]},
        }
    if kind == "events":
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": meta,
            "involvedObject": {
                "kind": "Pod",
                "name": "web",
                "namespace": namespace,
                "apiVersion": "v1",
            },
            "reason": "Scheduled",
            "message": "sample event",
            "type": "Normal",
            "source": {"component": "kube-gateway-tests"},
            "firstTimestamp": "2026-11-22T00:00:00Z",
            "lastTimestamp": "2026-11-22T00:00:00Z",
            "count": 1,
        }
    if kind == "endpoints":
        return {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": meta,
            "subsets": [
                {
                    "addresses": [{"ip": "10.0.0.7"}],
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                }
            ],
        }
    if kind == "leases":
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 15},
        }
    if kind == "images":
        return {
            "apiVersion": "image.openshift.io/v1",
            "kind": "Image",
            "metadata": meta,
            "dockerImageReference": f"registry.example/app@sha256:{'0' * 64}",
            "dockerImageLayers": [
                {
                    "name": f"sha256:{'1' * 64}",
                    "size": 1024,
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                }
            ],
        }
    raise ValueError(kind)
