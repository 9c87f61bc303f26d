"""Realistic upstream objects for benchmarks: what a kube-apiserver returns for Deployment pods."""

from __future__ import annotations

import hashlib
from typing import Any


def _h(seed: str, n: int = 64) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:n]


def _controller_fields(container: str) -> dict[str, Any]:
    c = f'k:{{"name":"{container}"}}'
    return {
        "f:metadata": {
            "f:generateName": {},
            "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
            "f:ownerReferences": {".": {}, f'k:{{"uid":"{_h("rs", 8)}"}}': {}},
        },
        "f:spec": {
            "f:containers": {
                c: {
                    ".": {},
                    "f:env": {
                        ".": {},
                        'k:{"name":"LOG_LEVEL"}': {".": {}, "f:name": {}, "f:value": {}},
                    },
                    "f:image": {},
                    "f:imagePullPolicy": {},
                    "f:livenessProbe": {
                        ".": {},
                        "f:failureThreshold": {},
                        "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}},
                        "f:periodSeconds": {},
                        "f:successThreshold": {},
                        "f:timeoutSeconds": {},
                    },
                    "f:name": {},
                    "f:ports": {
                        ".": {},
                        'k:{"containerPort":8080,"protocol":"TCP"}': {
                            ".": {},
                            "f:containerPort": {},
                            "f:name": {},
                            "f:protocol": {},
                        },
                    },
                    "f:readinessProbe": {
                        ".": {},
                        "f:failureThreshold": {},
                        "f:periodSeconds": {},
                        "f:successThreshold": {},
                        "f:tcpSocket": {".": {}, "f:port": {}},
                        "f:timeoutSeconds": {},
                    },
                    "f:resources": {
                        ".": {},
                        "f:limits": {".": {}, "f:memory": {}},
                        "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}},
                    },
                    "f:terminationMessagePath": {},
                    "f:terminationMessagePolicy": {},
                }
            },
            "f:dnsPolicy": {},
            "f:enableServiceLinks": {},
            "f:restartPolicy": {},
            "f:schedulerName": {},
            "f:securityContext": {},
            "f:terminationGracePeriodSeconds": {},
        },
    }


def _kubelet_fields() -> dict[str, Any]:
    def cond(t: str) -> dict[str, Any]:
        return {
            ".": {},
            "f:lastProbeTime": {},
            "f:lastTransitionTime": {},
            "f:status": {},
            "f:type": {},
        }

    return {
        "f:status": {
            "f:conditions": {
                f'k:{{"type":"{t}"}}': cond(t)
                for t in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "Ready")
            },
            "f:containerStatuses": {},
            "f:hostIP": {},
            "f:hostIPs": {},
            "f:phase": {},
            "f:podIP": {},
            "f:podIPs": {".": {}, 'k:{"ip":"10.244.1.7"}': {".": {}, "f:ip": {}}},
            "f:startTime": {},
        }
    }


def pod(i: int, namespace: str = "bench") -> dict[str, Any]:
    """One running Deployment pod (about 5 KB of JSON), as a list item (no kind/apiVersion)."""
    app = f"app-{i % 7}"
    rs = _h(app, 10)
    name = f"{app}-{rs}-{_h(str(i), 5)}"
    t = "2026-11-01T10:00:00Z"
    node = f"node-{i % 3}"
    ip = f"10.244.{i % 250}.{i % 200 + 2}"
    return {
        "metadata": {
            "name": name,
            "generateName": f"{app}-{rs}-",
            "namespace": namespace,
            "uid": "-".join(
                _h(name + s, n) for s, n in (("", 8), ("a", 4), ("b", 4), ("c", 4), ("d", 12))
            ),
            "resourceVersion": str(100000 + i),
            "creationTimestamp": t,
            "labels": {"app": app, "pod-template-hash": rs},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-{rs}",
                    "uid": _h("rs", 36),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": t,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": _controller_fields("app"),
                },
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": t,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": _kubelet_fields(),
                    "subresource": "status",
                },
            ],
        },
        "spec": {
            "volumes": [
                {
                    "name": "kube-api-access-x7k2p",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {
                                                "apiVersion": "v1",
                                                "fieldPath": "metadata.namespace",
                                            },
                                        }
                                    ]
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                }
            ],
            "containers": [
                {
                    "name": "app",
                    "image": f"quay.io/demo/{app}:1.4.2",
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "LOG_LEVEL", "value": "info"}],
                    "resources": {
                        "limits": {"memory": "256Mi"},
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                    },
                    "volumeMounts": [
                        {
                            "name": "kube-api-access-x7k2p",
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        }
                    ],
                    "livenessProbe": {
                        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                        "timeoutSeconds": 1,
                        "periodSeconds": 10,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                    },
                    "readinessProbe": {
                        "tcpSocket": {"port": "http"},
                        "timeoutSeconds": 1,
                        "periodSeconds": 5,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": node,
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": t_, "status": "True", "lastProbeTime": None, "lastTransitionTime": t}
                for t_ in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "hostIP": f"10.0.0.{i % 3 + 10}",
            "hostIPs": [{"ip": f"10.0.0.{i % 3 + 10}"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": t,
            "containerStatuses": [
                {
                    "name": "app",
                    "state": {"running": {"startedAt": t}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": f"quay.io/demo/{app}:1.4.2",
                    "imageID": f"quay.io/demo/{app}@sha256:{_h(app)}",
                    "containerID": f"containerd://{_h(name)}",
                    "started": True,
                    "volumeMounts": [
                        {
                            "name": "kube-api-access-x7k2p",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                            "recursiveReadOnly": "Disabled",
                        }
                    ],
                }
            ],
            "qosClass": "Burstable",
        },
    }


def pod_list(count: int, namespace: str = "bench") -> dict[str, Any]:
    """A PodList as the apiserver answers a list of ``count`` pods."""
    return {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(200000 + count)},
        "items": [pod(i, namespace) for i in range(count)],
    }
