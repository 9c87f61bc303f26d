"""Adding a resource is one registry entry plus regeneration, for the product and the demo.

The test copies the repository, adds a resource to ``gateway/core/model/registry.py`` (the only
hand edit), runs the three generators a maintainer runs (``scripts/extract_schemas.py``,
``make protos``, ``make graphql-schema``), and serves the copy with ``kube-gateway serve
--demo``.  Objects of the new kind are then created, read, listed, patched (strategic merge,
by the containers' merge key), watched and deleted over GraphQL and over gRPC; the gRPC
client knows nothing in advance: it reads the new service from the server's reflection, as
grpcurl would.

It is done for two resources, each in a copy of its own:

* apps/v1 Deployment, which the demo upstream also serves on its own account (as a wider
  cluster would), with behaviour it was written for;
* batch/v1 CronJob, which no code of the demo upstream mentions: the demo serves it from the
  registry entry and the Kubernetes schema alone, its status as a subresource included, so
  a demo that is not generic fails here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from kube_gateway_demo import ADMIN_TOKEN
from tests.support.serve_process import Served, serve_process

REPO = Path(__file__).resolve().parents[2]
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
REGISTRY_LINE = "REGISTRY = Registry((POD, EVENT, ENDPOINTS, LEASE, IMAGE))"

#: What the generators may write: the schema sources, the protos and their lock, the Python
#: stubs and the SDL.  Nothing else changes for a new resource.
GENERATED = (
    "gateway/core/model/schemas/",
    "demo/kube_gateway_demo/schemas/",
    "protos/",
    "gateway/grpc/gen/",
    "graphql_schema/schema.graphql",
)


@dataclass(frozen=True)
class Added:
    """A resource added to the registry, and what the test does with it."""

    name: str  # the registry constant
    group: str
    kind: str
    short_name: str
    manifest: dict[str, Any]
    #: Where the pod spec (its containers) is in an object of the kind.
    pod_spec: tuple[str, ...]
    #: A merge patch of the status subresource, written and checked (None: not done).
    status: dict[str, Any] | None = None

    @property
    def plural(self) -> str:
        return self.kind.lower() + "s"

    @property
    def field(self) -> str:
        """The kind as GraphQL names it in fields (``cronJob``)."""
        return self.kind[0].lower() + self.kind[1:]

    @property
    def entry(self) -> str:
        """The whole hand-written change: the resource's record."""
        return ENTRY.format(
            name=self.name,
            group=self.group,
            kind=self.kind,
            plural=self.plural,
            singular=self.kind.lower(),
            short_name=self.short_name,
        )


ENTRY = """
{name} = Resource(
    group="{group}",
    version="v1",
    kind="{kind}",
    plural="{plural}",
    singular="{singular}",
    namespaced=True,
    short_names=("{short_name}",),
    subresources=MappingProxyType({{"status": Subresource("status", _READ_WRITE)}}),
)
"""

LABELS = {"app": "added"}
POD_SPEC = ("spec", "template", "spec")
CONTAINERS = [{"name": "web", "image": "nginx:1.27"}, {"name": "sidecar", "image": "busybox:1.36"}]
TEMPLATE = {"metadata": {"labels": LABELS}, "spec": {"containers": CONTAINERS}}
JOB_TEMPLATE = {
    "spec": {"template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "OnFailure"}}}
}

META = {"name": "added", "labels": LABELS}
DEPLOYMENT = {
    "metadata": META,
    "spec": {"replicas": 2, "selector": {"matchLabels": LABELS}, "template": TEMPLATE},
}
CRONJOB = {"metadata": META, "spec": {"schedule": "*/5 * * * *", "jobTemplate": JOB_TEMPLATE}}

ADDED = {
    "deployment": Added("DEPLOYMENT", "apps", "Deployment", "deploy", DEPLOYMENT, POD_SPEC),
    "cronjob": Added(
        "CRONJOB",
        "batch",
        "CronJob",
        "cj",
        CRONJOB,
        ("spec", "jobTemplate", *POD_SPEC),
        status={"status": {"lastScheduleTime": "2026-01-02T03:04:05Z"}},
    ),
}


def _run(cwd: Path, *args: str) -> None:
    env = {"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(scope="module", params=sorted(ADDED))
def added(request: pytest.FixtureRequest) -> Added:
    return ADDED[request.param]


@pytest.fixture(scope="module")
def copy_with_resource(added: Added, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp(f"add-{added.plural}") / "repo"
    for rel in _git(REPO, "ls-files", "-z").split("\0"):
        if rel and (REPO / rel).is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, root / rel)
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-qm", "base")):
        _git(root, "-c", "user.name=t", "-c", "user.email=t@t", *args)
    registry = root / "gateway/core/model/registry.py"
    text = registry.read_text()
    assert REGISTRY_LINE in text
    new_line = REGISTRY_LINE.replace("))", f", {added.name}))")
    registry.write_text(text.replace(REGISTRY_LINE, added.entry + "\n" + new_line))
    python = sys.executable
    _run(root, python, "scripts/extract_schemas.py")
    _run(root, python, "-m", "gateway.grpc.protogen")
    _run(root, python, "-m", "gateway.graphql", "graphql_schema/schema.graphql")
    yield root


@pytest.fixture(scope="module")
def served(copy_with_resource: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = copy_with_resource
    home = tmp_path_factory.mktemp("home")
    path = f"{root}:{root / 'demo'}"  # the copy's gateway and demo, not the installed ones
    with serve_process(home, "--demo", cwd=root, env={"PYTHONPATH": path}) as s:
        yield s


def test_only_the_registry_is_edited_by_hand(copy_with_resource: Path, added: Added) -> None:
    changed = {
        line[3:].strip()
        for line in _git(copy_with_resource, "status", "--porcelain", "-uall").splitlines()
    }
    hand_written = {p for p in changed if not p.startswith(GENERATED)}
    assert hand_written == {"gateway/core/model/registry.py"}
    assert f"protos/kubegateway/v1/{added.plural}.proto" in changed
    assert f"gateway/grpc/gen/kubegateway/v1/{added.plural}_pb2.py" in changed


def test_the_demo_was_never_told_about_cronjobs() -> None:
    """What makes the CronJob case a proof: the demo's code, manifests and CRDs (everything
    of it but the generated definitions) mention neither the kind nor its group."""
    demo = REPO / "demo" / "kube_gateway_demo"
    written = [p for p in demo.rglob("*") if p.is_file() and p.suffix in (".py", ".yaml")]
    assert len(written) > 20
    for path in written:
        text = path.read_text(encoding="utf-8").lower()
        assert "cronjob" not in text and "batch/v1" not in text, path


def _gql(http: httpx.Client, query: str, variables: dict[str, Any] | None = None) -> Any:
    body = http.post("/graphql", json={"query": query, "variables": variables}).json()
    assert "errors" not in body, body
    return body["data"]


def _at(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def _nested(path: tuple[str, ...], leaf: Any) -> Any:
    for key in reversed(path):
        leaf = {key: leaf}
    return leaf


def _selection(path: tuple[str, ...], leaf: str) -> str:
    """``spec { template { spec { <leaf> } } }`` for a path and a leaf selection."""
    for key in reversed(path):
        leaf = f"{key} {{ {leaf} }}"
    return leaf


class Reflected:
    """A gRPC client that learns the service from the server's reflection."""

    def __init__(self, channel: grpc.Channel, kind: str) -> None:
        self.channel = channel
        self.pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
        self.service = self.pool.FindServiceByName(f"kubegateway.v1.{kind}Service")

    def call(self, method: str, request: dict[str, Any]) -> Any:
        m = self.service.FindMethodByName(method)
        req_cls, resp_cls = (
            message_factory.GetMessageClass(m.input_type),
            message_factory.GetMessageClass(m.output_type),
        )
        path = f"/{self.service.full_name}/{method}"
        request_message = json_format.ParseDict(request, req_cls())
        metadata = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
        if m.server_streaming:
            return self.channel.unary_stream(
                path,
                request_serializer=req_cls.SerializeToString,
                response_deserializer=resp_cls.FromString,
            )(request_message, metadata=metadata, timeout=30)
        return self.channel.unary_unary(
            path,
            request_serializer=req_cls.SerializeToString,
            response_deserializer=resp_cls.FromString,
        )(request_message, metadata=metadata, timeout=30)


def _as_dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message)


def test_a_new_resource_is_served_over_graphql_grpc_and_the_demo(
    served: Served, added: Added
) -> None:
    kind, field = added.kind, added.field
    containers = _selection(added.pod_spec, "containers { name image }")
    where = 'namespace: "demo", name: "added"'
    with httpx.Client(base_url=served.http, headers=ADMIN, timeout=30) as http:
        created = _gql(
            http,
            f'mutation($d: JSON!) {{ create{kind}FromManifest(namespace: "demo", manifest: $d)'
            " { metadata { name namespace uid } } }",
            {"d": added.manifest},
        )[f"create{kind}FromManifest"]
        assert created["metadata"]["name"] == "added"

        sidecar = {"name": "sidecar", "image": "busybox:1.37"}
        patched = _gql(
            http,
            f"mutation($p: JSON!) {{ patch{kind}({where}, type: STRATEGIC_MERGE, patch: $p)"
            f" {{ {containers} }} }}",
            {"p": _nested(added.pod_spec, {"containers": [sidecar]})},
        )[f"patch{kind}"]
        # Merged by the containers' merge key (name): both stay, only the sidecar changed.
        assert _at(patched, added.pod_spec)["containers"] == [
            {"name": "web", "image": "nginx:1.27"},
            sidecar,
        ]

        if added.status is not None:
            status = _selection(("status",), " ".join(added.status["status"]))
            written = _gql(
                http,
                f"mutation($p: JSON!) {{ patch{kind}Status({where}, patch: $p) {{ {status} }} }}",
                {"p": added.status},
            )[f"patch{kind}Status"]
            assert written["status"] == added.status["status"]
            # The main resource's writes leave the status alone, as the apiserver's do.
            unset = {key: None for key in added.status["status"]}
            main = _gql(
                http,
                f"mutation($p: JSON!) {{ patch{kind}({where}, patch: $p) "
                f"{{ metadata {{ labels }} {status} }} }}",
                {"p": {"status": unset, "metadata": {"labels": {"app": "added", "x": "y"}}}},
            )[f"patch{kind}"]
            assert main["metadata"]["labels"] == {"app": "added", "x": "y"}
            assert main["status"] == added.status["status"]

        listed = _gql(
            http,
            f'{{ {added.field}s(namespace: "demo", labelSelector: "app=added") '
            "{ items { metadata { name } } } }",
        )[f"{field}s"]
        assert listed == {"items": [{"metadata": {"name": "added"}}]}

        with grpc.insecure_channel(served.grpc) as channel:
            client = Reflected(channel, kind)
            got = _as_dict(client.call("Get", {"namespace": "demo", "name": "added"}))
            assert got["metadata"]["uid"] == created["metadata"]["uid"]
            assert [c["image"] for c in _at(got, added.pod_spec)["containers"]] == [
                "nginx:1.27",
                "busybox:1.37",
            ]
            listed_grpc = client.call("List", {"namespace": "demo", "label_selector": "app=added"})
            assert [o.metadata.name for o in listed_grpc.items] == ["added"]

            stream = client.call("Watch", {"namespace": "demo", "label_selector": "app=added"})
            first = next(stream)
            assert first.type == 1  # ADDED
            assert getattr(first, first.WhichOneof("object")).metadata.name == "added"

            deleted = _gql(
                http,
                f"mutation {{ delete{kind}({where}) "
                "{ object { metadata { name } } status { status } } }",
            )[f"delete{kind}"]
            # As kube-apiserver answers for kinds without graceful deletion: a Status.
            assert deleted == {"object": None, "status": {"status": "Success"}}
            gone = next(stream)
            assert gone.type == 3  # DELETED
            assert getattr(gone, gone.WhichOneof("object")).metadata.name == "added"
            stream.cancel()
