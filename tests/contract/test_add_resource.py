"""Adding a resource is one registry entry plus regeneration, for the product and the demo.

The test copies the repository, adds apps/v1 Deployment to ``gateway/core/registry.py`` (the
only hand edit), runs the three generators a maintainer runs (``scripts/extract_schemas.py``,
``make protos``, ``make graphql-schema``), and serves the copy with ``kube-gateway serve
--demo``.  Deployments are then created, read, listed, patched (strategic merge, by the
containers' merge key), watched and deleted over GraphQL and over gRPC; the gRPC client knows
nothing in advance: it reads the new service from the server's reflection, as grpcurl would.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from tests.support.serve_process import Served, serve_process

REPO = Path(__file__).resolve().parents[2]
ADMIN = {"Authorization": "Bearer admin-token"}

#: The whole hand-written change.
ENTRY = """
DEPLOYMENT = Resource(
    group="apps",
    version="v1",
    kind="Deployment",
    plural="deployments",
    singular="deployment",
    namespaced=True,
    short_names=("deploy",),
    subresources=MappingProxyType({"status": Subresource("status", _READ_WRITE)}),
)
"""
REGISTRY_LINE = "REGISTRY = Registry((POD, EVENT, ENDPOINTS, LEASE, IMAGE))"

#: What the generators may write: the schema source, the protos and their lock, the Python
#: stubs and the SDL.  Nothing else changes for a new resource.
GENERATED = (
    "gateway/core/schemas/",
    "demo/kube_gateway_demo/schemas/",
    "protos/",
    "gateway/grpc/gen/",
    "graphql_schema/schema.graphql",
)


def _run(cwd: Path, *args: str) -> None:
    env = {"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(scope="module")
def copy_with_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("add-resource") / "repo"
    for rel in _git(REPO, "ls-files", "-z").split("\0"):
        if rel and (REPO / rel).is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, root / rel)
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-qm", "base")):
        _git(root, "-c", "user.name=t", "-c", "user.email=t@t", *args)
    registry = root / "gateway/core/registry.py"
    text = registry.read_text()
    assert REGISTRY_LINE in text
    registry.write_text(
        text.replace(REGISTRY_LINE, ENTRY + "\n" + REGISTRY_LINE.replace("))", ", DEPLOYMENT))"))
    )
    python = sys.executable
    _run(root, python, "scripts/extract_schemas.py")
    _run(root, python, "-m", "gateway.grpc.protogen")
    _run(root, python, "-m", "gateway.graphql", "graphql_schema/schema.graphql")
    yield root


@pytest.fixture(scope="module")
def served(
    copy_with_deployment: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    root = copy_with_deployment
    home = tmp_path_factory.mktemp("home")
    path = f"{root}:{root / 'demo'}"  # the copy's gateway and demo, not the installed ones
    with serve_process(home, "--demo", cwd=root, env={"PYTHONPATH": path}) as s:
        yield s


def test_only_the_registry_is_edited_by_hand(copy_with_deployment: Path) -> None:
    changed = {
        line[3:].strip()
        for line in _git(copy_with_deployment, "status", "--porcelain", "-uall").splitlines()
    }
    hand_written = {p for p in changed if not p.startswith(GENERATED)}
    assert hand_written == {"gateway/core/registry.py"}
    assert "protos/kubegateway/v1/deployments.proto" in changed
    assert "gateway/grpc/gen/kubegateway/v1/deployments_pb2.py" in changed


def _gql(http: httpx.Client, query: str, variables: dict[str, Any] | None = None) -> Any:
    body = http.post("/graphql", json={"query": query, "variables": variables}).json()
    assert "errors" not in body, body
    return body["data"]


DEPLOYMENT = {
    "metadata": {"name": "added", "labels": {"app": "added"}},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "added"}},
        "template": {
            "metadata": {"labels": {"app": "added"}},
            "spec": {
                "containers": [
                    {"name": "web", "image": "nginx:1.27"},
                    {"name": "sidecar", "image": "busybox:1.36"},
                ]
            },
        },
    },
}


class Reflected:
    """A gRPC client that learns the service from the server's reflection."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel
        self.pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
        self.service = self.pool.FindServiceByName("kubegateway.v1.DeploymentService")

    def message(self, name: str) -> Any:
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(name))

    def call(self, method: str, request: dict[str, Any]) -> Any:
        m = self.service.FindMethodByName(method)
        req_cls, resp_cls = (
            message_factory.GetMessageClass(m.input_type),
            message_factory.GetMessageClass(m.output_type),
        )
        path = f"/{self.service.full_name}/{method}"
        request_message = json_format.ParseDict(request, req_cls())
        if m.server_streaming:
            return self.channel.unary_stream(
                path,
                request_serializer=req_cls.SerializeToString,
                response_deserializer=resp_cls.FromString,
            )(request_message, metadata=(("authorization", "Bearer admin-token"),), timeout=30)
        return self.channel.unary_unary(
            path,
            request_serializer=req_cls.SerializeToString,
            response_deserializer=resp_cls.FromString,
        )(request_message, metadata=(("authorization", "Bearer admin-token"),), timeout=30)


def test_a_new_resource_is_served_over_graphql_grpc_and_the_demo(served: Served) -> None:
    with httpx.Client(base_url=served.http, headers=ADMIN, timeout=30) as http:
        created = _gql(
            http,
            'mutation($d: JSON!) { createDeploymentFromManifest(namespace: "demo", manifest: $d)'
            " { metadata { name namespace uid } spec { replicas } } }",
            {"d": DEPLOYMENT},
        )["createDeploymentFromManifest"]
        assert created["metadata"]["name"] == "added"
        assert created["spec"]["replicas"] == 2

        patched = _gql(
            http,
            'mutation($p: JSON!) { patchDeployment(namespace: "demo", name: "added", '
            "type: STRATEGIC_MERGE, patch: $p) { spec { template { spec { containers "
            "{ name image } } } } } }",
            {
                "p": {
                    "spec": {
                        "template": {
                            "spec": {"containers": [{"name": "sidecar", "image": "busybox:1.37"}]}
                        }
                    }
                }
            },
        )["patchDeployment"]
        # Merged by the containers' merge key (name): both stay, only the sidecar changed.
        assert patched["spec"]["template"]["spec"]["containers"] == [
            {"name": "web", "image": "nginx:1.27"},
            {"name": "sidecar", "image": "busybox:1.37"},
        ]

        listed = _gql(
            http,
            '{ deployments(namespace: "demo", labelSelector: "app=added") '
            "{ items { metadata { name } } } }",
        )["deployments"]
        assert listed == {"items": [{"metadata": {"name": "added"}}]}

        with grpc.insecure_channel(served.grpc) as channel:
            client = Reflected(channel)
            got = client.call("Get", {"namespace": "demo", "name": "added"})
            assert got.metadata.uid == created["metadata"]["uid"]
            assert [c.image for c in got.spec.template.spec.containers] == [
                "nginx:1.27",
                "busybox:1.37",
            ]
            listed_grpc = client.call("List", {"namespace": "demo", "label_selector": "app=added"})
            assert [d.metadata.name for d in listed_grpc.items] == ["added"]

            stream = client.call("Watch", {"namespace": "demo", "label_selector": "app=added"})
            first = next(stream)
            assert first.type == 1  # ADDED
            assert first.deployment.metadata.name == "added"

            deleted = _gql(
                http,
                'mutation { deleteDeployment(namespace: "demo", name: "added") '
                "{ object { metadata { name } } status { status } } }",
            )["deleteDeployment"]
            # As kube-apiserver answers for kinds without graceful deletion: a Status.
            assert deleted == {"object": None, "status": {"status": "Success"}}
            gone = next(stream)
            assert gone.type == 3  # DELETED
            assert gone.deployment.metadata.name == "added"
            stream.cancel()
