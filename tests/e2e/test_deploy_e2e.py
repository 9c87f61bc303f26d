"""deploy/kustomize, rendered and shown to a real kube-apiserver.

Each overlay, and the example that adds TLS and Ingresses (examples/tls-ingress), is
rendered with the pinned kustomize that ``make e2e-bins`` builds, and every
object it renders is applied the way ``kubectl apply --server-side --dry-run=server
--force-conflicts --field-manager=kube-gateway-test`` applies it: a PATCH with
``application/apply-patch+yaml``, ``dryRun=All``, ``force=true`` and strict field
validation, to the URL discovery gives for its group, version and kind.  The namespace
is created for real first (a dry-run in a namespace that does not exist is refused), with
its Pod Security labels, so the apiserver also checks the pod template against the
"restricted" profile: every object must be accepted without a single warning.

The policy each mode promises is asserted on the rendered objects: the security context,
probes, resources, both Service ports with their appProtocol; in both modes a projected
service account token used only as the gateway's discovery identity, with exactly list and
watch on CRDs and APIServices; in shared-watches, besides, exactly list and watch on what
the gateway serves; in the TLS example, passthrough's objects changed only to serve TLS
from the mounted Secret, and Ingresses that speak TLS to the pods on both ports.  Then each
one's ServiceAccount and RBAC are applied for real, and `kube-gateway serve` runs with the
container's environment and that ServiceAccount's token (and, for the TLS example, a
certificate where the Secret is mounted): discovered kinds are served, and a caller gets
only what its own RBAC allows.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.core.catalog.discovery import ResourcePatterns
from gateway.core.catalog.reload import APISERVICES, CRDS
from gateway.core.model.registry import REGISTRY
from gateway.settings import Settings, load
from tests.deploy.test_image import DOCKERFILE, parse_dockerfile
from tests.e2e.apiserver import BIN_DIR, KubeAPIServer
from tests.support.pki import make_ca, make_leaf, pem_cert
from tests.support.serve_process import serve_process

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE_DIR = ROOT / "deploy" / "kustomize"
OVERLAYS = ("passthrough", "shared-watches")
#: Examples to copy, rendered and applied like the overlays.
EXAMPLES = ("tls-ingress",)
KUSTOMIZE = BIN_DIR / "kustomize"
FIELD_MANAGER = "kube-gateway-test"

Obj = dict[str, Any]


def render(name: str) -> list[Obj]:
    """An overlay, or an example, rendered by kustomize."""
    if not KUSTOMIZE.is_file():
        pytest.fail(f"{KUSTOMIZE} is missing: run `make e2e-bins`")
    folder = "examples" if name in EXAMPLES else "overlays"
    done = subprocess.run(
        [str(KUSTOMIZE), "build", str(KUSTOMIZE_DIR / folder / name)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    return {name: render(name) for name in (*OVERLAYS, *EXAMPLES)}


def one(objects: list[Obj], kind: str) -> Obj:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def kinds(objects: list[Obj]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def named(objects: list[Obj], kind: str, name: str) -> Obj:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


#: What discovery does with the gateway's identity beyond reading the discovery documents
#: (which every authenticated identity may read): list and watch CRDs and APIServices.
DISCOVERY_RULES = [
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
    {
        "apiGroups": ["apiregistration.k8s.io"],
        "resources": ["apiservices"],
        "verbs": ["list", "watch"],
    },
]


# --- the apiserver accepts every object -------------------------------------------------


class Discovery:
    """kind -> (plural, namespaced) per group/version, from the apiserver's discovery."""

    def __init__(self, client: httpx.Client) -> None:
        self._client = client
        self._cache: dict[str, dict[str, tuple[str, bool]]] = {}

    def url(self, obj: Obj) -> str:
        api_version: str = obj["apiVersion"]
        if api_version not in self._cache:
            prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            r = self._client.get(prefix)
            assert r.status_code == 200, r.text
            self._cache[api_version] = {
                res["kind"]: (res["name"], res["namespaced"])
                for res in r.json()["resources"]
                if "/" not in res["name"]  # subresources
            }
        plural, namespaced = self._cache[api_version][obj["kind"]]
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        name = obj["metadata"]["name"]
        if namespaced:
            return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{plural}/{name}"
        assert "namespace" not in obj["metadata"], obj["metadata"]
        return f"{prefix}/{plural}/{name}"


@pytest.fixture(scope="module")
def admin(kube_apiserver: KubeAPIServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=kube_apiserver.url,
        verify=kube_apiserver.ssl_context(),
        headers=kube_apiserver.headers("admin"),
        timeout=30.0,
        trust_env=False,
    ) as client:
        yield client


def apply(client: httpx.Client, url: str, obj: Obj, *, dry_run: bool) -> httpx.Response:
    params = {"fieldManager": FIELD_MANAGER, "force": "true", "fieldValidation": "Strict"}
    if dry_run:
        params["dryRun"] = "All"
    return client.patch(
        url,
        params=params,
        content=yaml.safe_dump(obj).encode(),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )


@pytest.mark.parametrize("overlay", [*OVERLAYS, *EXAMPLES])
def test_every_rendered_object_is_accepted_by_a_server_side_dry_run_apply(
    overlay: str, rendered: dict[str, list[Obj]], admin: httpx.Client
) -> None:
    objects = rendered[overlay]
    discovery = Discovery(admin)
    # the namespace for real first: a dry-run into a namespace that does not exist is
    # refused, and its Pod Security labels make the apiserver check the pod template
    for ns in [o for o in objects if o["kind"] == "Namespace"]:
        r = apply(admin, discovery.url(ns), ns, dry_run=False)
        assert r.status_code in (200, 201), r.text
    for obj in objects:
        r = apply(admin, discovery.url(obj), obj, dry_run=True)
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        assert r.status_code in (200, 201), f"{what}: {r.text}"
        assert r.headers.get_list("warning") == [], f"{what}: {r.headers.get_list('warning')}"
        answered = r.json()
        assert (answered["apiVersion"], answered["kind"]) == (obj["apiVersion"], obj["kind"])
        assert answered["metadata"]["name"] == obj["metadata"]["name"]
        managers = {m["manager"] for m in answered["metadata"].get("managedFields", [])}
        assert FIELD_MANAGER in managers, what
        if obj["kind"] == "Deployment":
            # nothing was dropped on the way: the security context comes back as sent
            sent = obj["spec"]["template"]["spec"]
            got = answered["spec"]["template"]["spec"]
            assert got["securityContext"] == sent["securityContext"]
            assert (
                got["containers"][0]["securityContext"] == sent["containers"][0]["securityContext"]
            )


def test_a_pod_template_below_restricted_would_be_reported(
    rendered: dict[str, list[Obj]], admin: httpx.Client
) -> None:
    """The warning check above is not vacuous: the same Deployment without its container
    security context draws Pod Security warnings from the apiserver."""
    objects = rendered["passthrough"]
    discovery = Discovery(admin)
    ns = one(objects, "Namespace")
    r = apply(admin, discovery.url(ns), ns, dry_run=False)
    assert r.status_code in (200, 201), r.text
    deployment = one(objects, "Deployment")
    weakened = yaml.safe_load(yaml.safe_dump(deployment))
    del weakened["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    r = apply(admin, discovery.url(weakened), weakened, dry_run=True)
    assert r.status_code in (200, 201), r.text
    (warning,) = r.headers.get_list("warning")
    assert "would violate PodSecurity" in warning and "restricted:latest" in warning
    assert "allowPrivilegeEscalation != false" in warning
    assert "unrestricted capabilities" in warning


# --- what the rendered objects promise ------------------------------------------------


def test_each_mode_renders_the_objects_it_needs_and_no_more(
    rendered: dict[str, list[Obj]],
) -> None:
    common = [
        "Deployment",
        "HorizontalPodAutoscaler",
        "Namespace",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    ]
    assert kinds(rendered["passthrough"]) == sorted([*common, "ClusterRole", "ClusterRoleBinding"])
    assert kinds(rendered["shared-watches"]) == sorted(
        [*common, "ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding"]
    )
    for objects in rendered.values():
        ns = one(objects, "Namespace")["metadata"]["name"]
        for obj in objects:
            if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
                assert obj["metadata"]["namespace"] == ns, obj["kind"]


def container(objects: list[Obj]) -> Obj:
    (c,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return c


def gateway_settings(objects: list[Obj]) -> Settings:
    """The settings `kube-gateway serve` reads from the container's env."""
    env = {e["name"]: e["value"] for e in container(objects)["env"]}
    return load([], env)


@pytest.mark.parametrize("overlay", [*OVERLAYS, *EXAMPLES])
def test_the_pod_runs_restricted(overlay: str, rendered: dict[str, list[Obj]]) -> None:
    objects = rendered[overlay]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    (user,) = parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))[-1].args("USER")
    uid, gid = (int(x) for x in user.split(":"))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    c = container(objects)
    assert c["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert "hostNetwork" not in pod and "hostPID" not in pod
    for kind in ("requests", "limits"):
        assert set(c["resources"][kind]) == {"cpu", "memory"}, kind
    # the only writable path is a small in-memory /tmp
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    writable = [p for p, m in mounts.items() if not m.get("readOnly")]
    assert writable == ["/tmp"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/tmp"]["name"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Mi"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_and_ports_are_the_gateways(overlay: str, rendered: dict[str, list[Obj]]) -> None:
    objects = rendered[overlay]
    c = container(objects)
    settings = gateway_settings(objects)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": settings.http_port, "grpc": settings.grpc_port}
    (expose,) = parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))[-1].args("EXPOSE")
    assert sorted(ports.values()) == sorted(int(p) for p in expose.split())
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert "command" not in c and "args" not in c  # the image's ENTRYPOINT: kube-gateway serve

    service = one(objects, "Service")
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert sorted(
        (p["name"], p["port"], p["targetPort"], p["protocol"], p["appProtocol"])
        for p in service["spec"]["ports"]
    ) == [
        ("grpc", settings.grpc_port, "grpc", "TCP", "kubernetes.io/h2c"),
        ("http", settings.http_port, "http", "TCP", "http"),
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_availability_scaling_and_network_policy(
    overlay: str, rendered: dict[str, list[Obj]]
) -> None:
    objects = rendered[overlay]
    deployment = one(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()

    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1

    hpa = one(objects, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    # a disruption budget of one leaves someone serving
    assert hpa["spec"]["minReplicas"] >= 2 and deployment["spec"]["replicas"] >= 2
    assert hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]

    policy = one(objects, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [
        {"port": "http", "protocol": "TCP"},
        {"port": "grpc", "protocol": "TCP"},
    ]
    dns, apiserver = policy["egress"]
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert dns["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    assert apiserver == {
        "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]
    }


def granted(role: Obj) -> set[tuple[str, str, str]]:
    """(group, resource, verb) for every right the role's rules give, none by name."""
    assert all(set(rule) == {"apiGroups", "resources", "verbs"} for rule in role["rules"])
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def cluster_roles(objects: list[Obj]) -> dict[str, Obj]:
    """The rendered ClusterRoles by name, each bound to the gateway's ServiceAccount and to
    nothing else; no namespaced Role or RoleBinding."""
    assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding")]
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    bindings = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    sa = one(objects, "ServiceAccount")
    assert sorted(b["roleRef"]["name"] for b in bindings) == sorted(roles)
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": binding["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": sa["metadata"]["name"],
                "namespace": sa["metadata"]["namespace"],
            }
        ]
    return roles


def projected_token_path(objects: list[Obj]) -> str:
    """Where the pod's one service account token is: projected explicitly, short-lived and
    for the apiserver's own audience, the automatic mount off, used by the gateway as its
    discovery identity and never to serve a caller."""
    sa = one(objects, "ServiceAccount")
    assert sa["automountServiceAccountToken"] is False
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    (token_volume,) = [v for v in pod["volumes"] if "projected" in v]
    # no audience: the apiserver's own; an hour at most, renewed by the kubelet
    assert token_volume["projected"]["sources"] == [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
    ]
    (mount,) = [m for m in container(objects)["volumeMounts"] if m["name"] == token_volume["name"]]
    assert mount["readOnly"] is True
    path = f"{mount['mountPath']}/token"
    settings = gateway_settings(objects)
    assert settings.discovery is True and settings.discovery_token_file == path
    assert settings.gateway_identity is False  # a caller without a token is refused
    return path


def test_passthrough_uses_its_own_token_for_discovery_only(
    rendered: dict[str, list[Obj]],
) -> None:
    objects = rendered["passthrough"]
    roles = cluster_roles(objects)
    assert list(roles) == ["kube-gateway-discovery"]
    assert roles["kube-gateway-discovery"]["rules"] == DISCOVERY_RULES
    # exactly what the reloader lists and watches
    assert granted(roles["kube-gateway-discovery"]) == {
        (r.group, r.plural, verb) for r in (CRDS, APISERVICES) for verb in ("list", "watch")
    }
    projected_token_path(objects)
    settings = gateway_settings(objects)
    assert settings.shared_watches is False and settings.token_file is None
    assert settings.resources is None  # everything discovered: each call is the caller's
    # the upstream is named explicitly and verified with the cluster's root CA
    assert settings.server == "https://kubernetes.default.svc"
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    ca = {v["name"]: v for v in pod["volumes"]}
    (mount,) = [m for m in container(objects)["volumeMounts"] if m["name"] == "upstream-ca"]
    assert settings.ca_file == f"{mount['mountPath']}/ca.crt"
    assert ca["upstream-ca"]["configMap"] == {
        "name": "kube-root-ca.crt",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }


#: The discovered resources the shared-watches overlay serves (KUBE_GATEWAY_RESOURCES).
SHARED_DISCOVERED = {
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("apps", "replicasets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("", "services"),
}


def test_shared_watches_may_list_and_watch_what_the_gateway_serves_and_nothing_else(
    rendered: dict[str, list[Obj]],
) -> None:
    objects = rendered["shared-watches"]
    roles = cluster_roles(objects)
    assert sorted(roles) == ["kube-gateway-discovery", "kube-gateway-shared-watches"]
    assert roles["kube-gateway-discovery"]["rules"] == DISCOVERY_RULES
    settings = gateway_settings(objects)
    # what it serves beside the seeds: exact names, no glob, no deny, any version
    patterns = ResourcePatterns.parse(settings.resources).entries
    assert all(not p.deny and p.version == "*" for p in patterns)
    assert all(not set("*?[") & set(p.group + p.resource) for p in patterns)
    discovered = {(p.group, p.resource) for p in patterns}
    assert discovered == SHARED_DISCOVERED
    seeds = {(r.group, r.plural) for r in REGISTRY.values() if "watch" in r.verbs}
    assert seeds == {
        ("", "pods"),
        ("", "events"),
        ("", "endpoints"),
        ("coordination.k8s.io", "leases"),
        ("image.openshift.io", "images"),
    }
    shared = roles["kube-gateway-shared-watches"]
    assert granted(shared) == {(g, r, v) for g, r in seeds | discovered for v in ("list", "watch")}
    assert "secrets" not in json.dumps(shared) and "*" not in json.dumps(shared)

    # the gateway's own token: the one the base projects for discovery
    path = projected_token_path(objects)
    assert settings.shared_watches is True and settings.token_file == path
    # otherwise the same deployment as passthrough's
    assert settings.server == gateway_settings(rendered["passthrough"]).server
    assert settings.ca_file == gateway_settings(rendered["passthrough"]).ca_file


#: What the TLS component adds to the gateway's container, by env var: where the Secret's
#: files are mounted.
TLS_ENV = ("KUBE_GATEWAY_TLS_CERT_FILE", "KUBE_GATEWAY_TLS_KEY_FILE")


def without_tls(deployment: Obj) -> Obj:
    """The Deployment as it was before the TLS component: its env vars, its mount and
    volume, and the probes' HTTPS scheme taken out again."""
    copy: Obj = json.loads(json.dumps(deployment))
    pod = copy["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    c["env"] = [e for e in c["env"] if e["name"] not in TLS_ENV]
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "tls"]
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "tls"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"].pop("scheme") == "HTTPS", probe
    return copy


def test_the_tls_example_is_passthrough_with_tls_on_every_hop(
    rendered: dict[str, list[Obj]],
) -> None:
    """examples/tls-ingress is the passthrough overlay, changed only to serve TLS on both
    listeners from the Secret kube-gateway-tls, plus two Ingresses that terminate the
    callers' TLS and speak TLS again to the pods: HTTPS for GraphQL, gRPC over TLS (HTTP/2)
    for gRPC, with the long timeouts subscriptions need."""
    objects = rendered["tls-ingress"]
    base = rendered["passthrough"]
    changed = ("Deployment", "Service", "Ingress")
    assert [o for o in objects if o["kind"] not in changed] == [
        o for o in base if o["kind"] not in changed
    ]
    assert without_tls(one(objects, "Deployment")) == one(base, "Deployment")

    # the certificate: the Secret's two files, mounted read-only, named to the gateway
    settings = gateway_settings(objects)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    (mount,) = [m for m in container(objects)["volumeMounts"] if m["name"] == "tls"]
    assert mount["readOnly"] is True
    assert settings.tls_cert_file == f"{mount['mountPath']}/tls.crt"
    assert settings.tls_key_file == f"{mount['mountPath']}/tls.key"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"] == {
        "secretName": "kube-gateway-tls",
        "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}],
    }

    # both Service ports say TLS; nothing else about the Service changed
    service = one(objects, "Service")
    assert {p["name"]: p["appProtocol"] for p in service["spec"]["ports"]} == {
        "http": "https",
        "grpc": "https",
    }
    plain = json.loads(json.dumps(service))
    for port, was in zip(
        plain["spec"]["ports"], one(base, "Service")["spec"]["ports"], strict=True
    ):
        port["appProtocol"] = was["appProtocol"]
    assert plain == one(base, "Service")

    # an Ingress per port, each terminating TLS and speaking TLS to the pods
    ingresses = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Ingress"}
    backend_protocol = {"http": "HTTPS", "grpc": "GRPCS"}
    ports: set[str] = set()
    for ingress in ingresses.values():
        spec = ingress["spec"]
        (rule,) = spec["rules"]
        (path,) = rule["http"]["paths"]
        target = path["backend"]["service"]
        assert target["name"] == service["metadata"]["name"]
        port = target["port"]["name"]
        ports.add(port)
        notes = ingress["metadata"]["annotations"]
        prefix = "nginx.ingress.kubernetes.io/"
        assert notes[prefix + "backend-protocol"] == backend_protocol[port]
        assert int(notes[prefix + "proxy-read-timeout"]) >= 3600
        assert int(notes[prefix + "proxy-send-timeout"]) >= 3600
        if port == "http":  # SSE and multipart events pass as they are written
            assert notes[prefix + "proxy-buffering"] == "off"
        (tls,) = spec["tls"]
        assert rule["host"] in tls["hosts"] and tls["secretName"]
    assert ports == {"http", "grpc"}


# --- the pod's configuration starts the gateway ------------------------------------------


def until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``check`` until it holds: the apiserver evaluates RBAC from an informer cache,
    so a binding just written (or deleted) counts a moment later."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def collection(group: str, resource: str) -> str:
    """The list URL of a resource in all namespaces (every group here serves v1)."""
    return f"/api/v1/{resource}" if group == "" else f"/apis/{group}/v1/{resource}"


#: Rights the gateway's own identity must not have unless a rendered role grants them.
PROBES = {
    ("", "secrets"),
    ("", "configmaps"),
    ("", "pods"),
    ("apps", "deployments"),
    ("image.openshift.io", "images"),
}


@contextlib.contextmanager
def service_account_token(admin: httpx.Client, objects: list[Obj]) -> Iterator[str]:
    """The overlay's ServiceAccount, ClusterRoles and bindings applied for real, once they
    count, and a token of that ServiceAccount from the TokenRequest API (what the kubelet
    projects into the pod).  The bindings are deleted afterwards, so each overlay's test
    runs with its own rights only."""
    discovery = Discovery(admin)
    rbac = [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    for obj in [one(objects, "Namespace"), one(objects, "ServiceAccount"), *rbac]:
        r = apply(admin, discovery.url(obj), obj, dry_run=False)
        assert r.status_code in (200, 201), r.text
    sa = one(objects, "ServiceAccount")["metadata"]
    r = admin.post(
        f"/api/v1/namespaces/{sa['namespace']}/serviceaccounts/{sa['name']}/token",
        json={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    assert r.status_code == 201, r.text
    token: str = r.json()["status"]["token"]
    rights = set().union(*(granted(o) for o in rbac if o["kind"] == "ClusterRole"))
    listable = {(g, res) for g, res, verb in rights if verb == "list"}
    own = {"Authorization": f"Bearer {token}"}

    def counts() -> bool:
        """Exactly the rendered rights: every granted list answers, every probe not granted
        is refused, a single CRD read too (no get), and discovery is readable."""
        allowed = ["/api", "/apis", "/openapi/v3"]
        allowed += [collection(g, res) for g, res in listable]
        denied = [collection(g, res) for g, res in PROBES - listable]
        denied.append(collection(CRDS.group, CRDS.plural) + "/images.image.openshift.io")
        return all(admin.get(path, headers=own).status_code == 200 for path in allowed) and all(
            admin.get(path, headers=own).status_code == 403 for path in denied
        )

    try:
        until("the gateway's RBAC to count", counts)
        yield token
    finally:
        for binding in [o for o in rbac if o["kind"] == "ClusterRoleBinding"]:
            deleted(admin, discovery.url(binding))


def graphql(client: httpx.Client, query: str, headers: dict[str, str], status: int = 200) -> Obj:
    r = client.post("/graphql", json={"query": query}, headers=headers)
    assert r.status_code == status, r.text
    answer: Obj = r.json()
    return answer


def error_code(answer: Obj) -> str:
    (error,) = answer["errors"]
    code: str = error["extensions"]["code"]
    return code


def first_event(client: httpx.Client, subscription: str, headers: dict[str, str]) -> Obj:
    """The first event of a subscription over SSE."""
    with client.stream(
        "POST",
        "/graphql",
        json={"query": subscription},
        headers={"Accept": "text/event-stream", **headers},
    ) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        event = next(line for line in lines if line.startswith("event:"))
        data = next(line for line in lines if line.startswith("data:"))
    assert event == "event: next", data
    payload: Obj = json.loads(data.removeprefix("data:"))
    return payload


def deleted(admin: httpx.Client, url: str) -> None:
    r = admin.delete(url)
    assert r.status_code == 200, r.text


DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "deploy-e2e-web", "namespace": "team-a"},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "deploy-e2e-web"}},
        "template": {
            "metadata": {"labels": {"app": "deploy-e2e-web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1"}]},
        },
    },
}


@pytest.mark.parametrize("overlay", [*OVERLAYS, *EXAMPLES])
def test_the_pods_environment_serves_on_the_real_apiserver(
    overlay: str,
    rendered: dict[str, list[Obj]],
    kube_apiserver: KubeAPIServer,
    admin: httpx.Client,
    tmp_path: Path,
) -> None:
    """`kube-gateway serve` with the container's environment, as in the pod (the service
    variables set, no service account mounted), only the in-cluster paths pointed at the
    e2e apiserver: its URL and CA, and, as the projected token, a real token of the
    overlay's ServiceAccount with the overlay's RBAC applied.  Discovery works with it
    (deployments are served), and each caller gets what its own RBAC allows and no more:
    alice is refused what the gateway's own identity could read, a caller without a token
    is refused, and, in shared-watches, subscriptions go through shared watches made with
    the ServiceAccount's token.  With TLS (the example), a certificate of a test CA where
    the Secret is mounted: the gateway serves HTTPS with it, and nothing in clear."""
    objects = rendered[overlay]
    env = {e["name"]: e["value"] for e in container(objects)["env"]}
    projected = projected_token_path(objects)
    r = admin.post("/apis/apps/v1/namespaces/team-a/deployments", json=DEPLOYMENT)
    assert r.status_code == 201, r.text
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(deleted, admin, Discovery(admin).url(DEPLOYMENT))
        token = cleanup.enter_context(service_account_token(admin, objects))
        token_file = tmp_path / "token"
        token_file.write_text(token)
        env.update({name: str(token_file) for name, value in env.items() if value == projected})
        env.update(
            KUBE_GATEWAY_CA_FILE=kube_apiserver.ca_file, KUBE_GATEWAY_SERVER=kube_apiserver.url
        )
        env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT="443")
        tls = TLS_ENV[0] in env
        verify: ssl.SSLContext | bool = True
        if tls:
            ca_key, ca_cert = make_ca("deploy e2e CA")
            crt, key = make_leaf(ca_key, ca_cert, "kube-gateway", server=True)
            (tmp_path / "tls.crt").write_bytes(crt)
            (tmp_path / "tls.key").write_bytes(key)
            files = (str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
            env.update(zip(TLS_ENV, files, strict=True))
            verify = ssl.create_default_context(cadata=pem_cert(ca_cert).decode())
        with (
            serve_process(tmp_path, env=env) as served,
            httpx.Client(
                base_url=served.http.replace("http://", "https://") if tls else served.http,
                verify=verify,
                timeout=30.0,
                trust_env=False,
            ) as client,
        ):
            if tls:
                with pytest.raises(httpx.HTTPError):  # nothing served in clear
                    httpx.get(f"{served.http}/healthz", timeout=5.0, trust_env=False)
            assert served.wait_for_line("upstream: ")
            assert served.wait_for_line(f"discovery with token file {token_file}")
            served.wait_for_line("GraphQL schema /graphql rebuilt")
            r = client.get("/readyz")
            assert r.status_code == 200, r.text
            alice = kube_apiserver.headers("alice")
            pods = '{ pods(namespace: "team-a") { items { metadata { name } } } }'
            assert "errors" not in graphql(client, pods, alice)
            # no token: refused, never served as the gateway
            assert error_code(graphql(client, pods, {})) == "UNAUTHENTICATED"

            # a discovered kind, read with the caller's own token
            deployments = '{ deployments(namespace: "team-a") { items { metadata { name } } } }'
            answer = graphql(client, deployments, kube_apiserver.headers("admin"))
            assert "errors" not in answer, answer
            names = [d["metadata"]["name"] for d in answer["data"]["deployments"]["items"]]
            assert "deploy-e2e-web" in names
            assert error_code(graphql(client, deployments, alice)) == "FORBIDDEN"

            # what the gateway's own identity may list, alice may not
            crds = "{ customResourceDefinitions { items { metadata { name } } } }"
            if overlay != "shared-watches":
                assert error_code(graphql(client, crds, alice)) == "FORBIDDEN"
            else:  # not among the resources it serves
                answer = graphql(client, crds, alice, status=400)
                assert error_code(answer) == "GRAPHQL_VALIDATION_FAILED"
                assert "Cannot query field 'customResourceDefinitions'" in json.dumps(answer)

            payload = first_event(
                client,
                'subscription { watchPods(namespace: "team-a", sendInitialEvents: true) { type } }',
                alice,
            )
            assert "errors" not in payload, payload
            assert payload["data"]["watchPods"]["type"] in ("ADDED", "BOOKMARK")
            watch_deployments = (
                'subscription { watchDeployments(namespace: "team-a", sendInitialEvents: true) '
                "{ type } }"
            )
            payload = first_event(client, watch_deployments, alice)
            assert error_code(payload) == "FORBIDDEN", payload
    shared = "shared watches: upstream watches are made with the gateway's own credential"
    assert (shared in served.log) is (overlay == "shared-watches")
