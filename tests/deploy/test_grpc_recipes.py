"""The gRPC client recipes of examples/grpc run as docs/grpc-clients.md shows them, and the
contract passes ``buf lint`` and ``buf breaking`` against its last release.

A real ``kube-gateway serve --demo`` process serves the recipes: the Go client (``buf
generate`` into the go_package the protos name), the Python one (grpcio-tools' protoc) and the
Java one (Maven, the protos' java_package), each as a person runs it, with the demo admin's
token in ``KUBE_GATEWAY_TOKEN``. Each must answer what the project's own stubs read from the
same gateway, and fail (exit 1, the gRPC code on stderr) without a token. ``buf`` itself runs
on protos/ as committed, and on copies with a lint error and a breaking change in them, so a
configuration that checks nothing fails here too.

``make grpc-recipes`` (part of ``make test``) builds everything first; the fixture below only
finds it up to date (or builds it, a few minutes once, when the test runs alone).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gateway.grpc.gen.kubegateway.v1 import pods_pb2, pods_pb2_grpc
from tests.support.serve_process import Served, serve_process

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "examples" / "grpc"
BUF = RECIPES / ".bin" / "buf"
PROTOS = ROOT / "protos"
NAMESPACE, SELECTOR = "demo", "app=web"
TIMEOUT = 120

# The first test pays for a cold build when `make grpc-recipes` did not run before.
pytestmark = pytest.mark.timeout(1800)


def recipe_commands(addr: str) -> dict[str, list[str]]:
    """Each recipe's command line, as docs/grpc-clients.md runs it (token from the env)."""
    args = ["--addr", addr, "--namespace", NAMESPACE, "--selector", SELECTOR]
    go_args = [a.replace("--", "-", 1) if a.startswith("--") else a for a in args]
    return {
        "go": [str(RECIPES / "go" / "client"), *go_args],
        "python": [sys.executable, str(RECIPES / "python" / "client.py"), *args],
        "java": [
            "java",
            "-cp",
            f"{RECIPES / 'java' / 'target' / 'classes'}{os.pathsep}"
            f"{RECIPES / 'java' / 'target' / 'dependency' / '*'}",
            "local.kubegateway.example.Client",
            *args,
        ],
    }


@pytest.fixture(scope="module")
def built() -> None:
    """What `make grpc-recipes` builds (up to date after it: a stamp check per part)."""
    env = {**os.environ, "PYTHON_BIN": sys.executable}
    subprocess.run(["bash", str(RECIPES / "build.sh")], env=env, timeout=1700, check=True)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, built: None) -> Iterator[Served]:
    with serve_process(tmp_path_factory.mktemp("home"), "--demo") as served:
        yield served


def expected_lines(served: Served) -> list[str]:
    """What a correct recipe prints, from the project's own stubs: the pods the gateway
    lists, the first one got by name, and the count the watch saw ADDED."""
    with grpc.insecure_channel(served.grpc) as channel:
        listed = pods_pb2_grpc.PodServiceStub(channel).List(
            pods_pb2.ListPodsRequest(namespace=NAMESPACE, label_selector=SELECTOR),
            metadata=[("authorization", "Bearer admin-token")],
            timeout=TIMEOUT,
        )
    pods = [(p.metadata.name, p.status.phase) for p in listed.items]
    assert len(pods) == 2  # the demo's Deployment `web`
    return [
        *(f"POD {name} {phase}" for name, phase in pods),
        f"GOT {pods[0][0]} {pods[0][1]}",
        f"WATCHED {len(pods)}",
    ]


def run(command: list[str], token: str | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBE_GATEWAY_TOKEN"}
    if token is not None:
        env["KUBE_GATEWAY_TOKEN"] = token
    return subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=cwd, timeout=TIMEOUT, check=False
    )


@pytest.mark.parametrize("language", ["go", "python", "java"])
def test_a_recipe_gets_lists_and_watches_with_the_callers_token(
    served: Served, language: str
) -> None:
    want = expected_lines(served)
    command = recipe_commands(served.grpc)[language]
    done = run(command, "admin-token", RECIPES / language)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == want, done.stdout + done.stderr


@pytest.mark.parametrize("language", ["go", "python", "java"])
def test_a_recipe_without_a_token_fails_with_the_gateways_answer(
    served: Served, language: str
) -> None:
    command = recipe_commands(served.grpc)[language]
    done = run(command, None, RECIPES / language)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "POD " not in done.stdout
    error = done.stderr.strip().splitlines()[-1]
    # grpc-go writes codes in CamelCase, Python and Java in upper snake case
    assert error.split()[:2] in (["ERROR", "Unauthenticated"], ["ERROR", "UNAUTHENTICATED"]), error
    assert "send the header 'Authorization: Bearer <token>'" in error


def buf(*args: str, cwd: Path = PROTOS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BUF), *args], capture_output=True, text=True, cwd=cwd, timeout=TIMEOUT, check=False
    )


def test_buf_lint_passes_on_the_contract(built: None) -> None:
    done = buf("lint")
    assert done.returncode == 0, done.stdout + done.stderr


def test_buf_breaking_finds_no_break_since_the_release(built: None) -> None:
    done = buf("breaking", "--against", "released.binpb")
    assert done.returncode == 0, done.stdout + done.stderr


def test_make_buf_check_runs_both_as_documented(built: None) -> None:
    done = subprocess.run(
        ["make", "-s", "buf-check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def copy_of_protos(tmp_path: Path) -> Path:
    copy = tmp_path / "protos"
    shutil.copytree(PROTOS, copy)
    return copy


def test_buf_lint_fails_on_a_lint_error(built: None, tmp_path: Path) -> None:
    protos = copy_of_protos(tmp_path)
    cluster = protos / "kubegateway" / "v1" / "cluster.proto"
    # an enum whose zero value is not <NAME>_UNSPECIFIED: STANDARD's ENUM_ZERO_VALUE_SUFFIX
    cluster.write_text(cluster.read_text("utf-8") + "\nenum Health {\n  HEALTHY = 0;\n}\n")
    done = buf("lint", cwd=protos)
    assert done.returncode != 0
    assert 'Enum zero value name "HEALTHY" should be suffixed with "_UNSPECIFIED"' in done.stdout


def test_buf_breaking_fails_on_a_renumbered_field(built: None, tmp_path: Path) -> None:
    protos = copy_of_protos(tmp_path)
    cluster = protos / "kubegateway" / "v1" / "cluster.proto"
    text = cluster.read_text("utf-8")
    assert "  bool ready = 4;\n" in text
    cluster.write_text(text.replace("  bool ready = 4;\n", "  bool ready = 6;\n"), "utf-8")
    done = buf("breaking", "--against", str(PROTOS / "released.binpb"), cwd=protos)
    assert done.returncode != 0
    assert 'Previously present field "4" with name "ready"' in done.stdout, done.stdout


def test_the_documented_excerpts_are_in_the_real_files() -> None:
    """Every line of a code excerpt in docs/grpc-clients.md stands in a recipe file or in the
    buf module, so the page cannot drift from the code it shows."""
    sources = [
        *(p for p in RECIPES.rglob("*") if p.is_file() and p.name in ("go.mod", "pom.xml")),
        *(
            p
            for p in RECIPES.rglob("*")
            if p.suffix in (".go", ".py", ".java", ".yaml")
            and not {"gen", "target", ".bin"} & set(p.relative_to(RECIPES).parts)
        ),
        *PROTOS.rglob("*.proto"),
        PROTOS / "buf.yaml",
    ]
    known = {line.rstrip() for p in sources for line in p.read_text("utf-8").splitlines()}
    doc = (ROOT / "docs" / "grpc-clients.md").read_text("utf-8")
    excerpts = re.findall(r"```(?:go|python|java|xml|yaml|proto)\n(.*?)```", doc, re.DOTALL)
    assert len(excerpts) >= 10
    for excerpt in excerpts:
        for line in excerpt.splitlines():
            assert not line.strip() or line.rstrip() in known, line
