"""The container image (deploy/Dockerfile), checked as far as a machine without a
container engine can: the wheel its builder stage builds, from exactly the files it copies
in, carries every module and the package data the gateway reads at run time, and nothing of
the demo upstream (a distribution of its own: no module, no token); installed alone, its
``serve`` refuses the demo with a one-line message; every runtime dependency is pinned by
requirements.lock; the runtime stage runs ``kube-gateway serve`` as a numeric non-root user
with both ports exposed.
"""

from __future__ import annotations

import email.parser
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gateway.settings import Settings
from tests.support.serve_process import clean_env, command, free_port

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str | None
    #: (instruction, arguments) in order, continuation lines joined.
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, instruction: str) -> list[str]:
        return [a for i, a in self.instructions if i == instruction]


def parse_dockerfile(text: str) -> list[Stage]:
    stages: list[Stage] = []
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    for line in logical:
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        else:
            assert stages, f"{instruction} before the first FROM"
            stages[-1].instructions.append((instruction, rest.strip()))
    return stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def wheel(stages: list[Stage], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel --no-deps .` builds from what the builder stage copies in."""
    builder = stages[0]
    context = tmp_path_factory.mktemp("context")
    for copy in builder.args("COPY"):
        *sources, dest = shlex.split(copy)
        assert not any(s.startswith("--") for s in sources), "builder copies from the context"
        target = context / dest.removeprefix("./")
        for source in sources:
            src = ROOT / source
            if src.is_dir():
                shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target / src.name)
    out = tmp_path_factory.mktemp("wheels")
    # The builder runs `pip wheel` with build isolation (it fetches the build backend);
    # here the pinned dev environment's setuptools builds it, without a network.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            ".",
        ],
        cwd=context,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("kube_gateway-*.whl")
    return built


def test_the_image_is_built_in_two_stages_from_slim_python(stages: list[Stage]) -> None:
    assert [s.base for s in stages] == ["python:3.11-slim", "python:3.11-slim"]
    builder, runtime = stages
    assert builder.name == "builder"
    # the builder builds the project's wheel and its dependencies' under the lock
    (run,) = builder.args("RUN")
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ." in run
    assert "-c requirements.lock" in run
    assert "--no-index" in run  # the install takes nothing but the wheels just built
    # the runtime stage takes only the installed virtualenv, nothing from the context
    assert runtime.args("COPY") == ["--from=builder /opt/venv /opt/venv"]
    assert runtime.args("RUN") == []


def test_the_runtime_stage_runs_serve_as_a_numeric_non_root_user(stages: list[Stage]) -> None:
    runtime = stages[-1]
    (user,) = runtime.args("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit(), "numeric, so runAsNonRoot can verify it"
    assert int(uid) != 0 and int(gid) != 0
    # exec form: no shell is needed (or used) to start the gateway
    (entrypoint,) = runtime.args("ENTRYPOINT")
    assert json.loads(entrypoint) == ["kube-gateway", "serve"]
    assert runtime.args("CMD") == []
    (expose,) = runtime.args("EXPOSE")
    defaults = Settings()
    assert expose.split() == [str(defaults.http_port), str(defaults.grpc_port)]


def test_the_wheel_holds_every_module_and_the_package_data(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        modules = sorted(
            p.relative_to(ROOT).as_posix()
            for p in (ROOT / "gateway").rglob("*.py")
            if "__pycache__" not in p.parts
        )
        assert modules and not [m for m in modules if m not in names]
        data = sorted(
            [*(ROOT / "gateway/core/model/schemas").glob("*.json")]
            + [p for p in (ROOT / "gateway/graphql/transport/static").iterdir() if p.is_file()]
        )
        assert len(data) >= 4
        for path in data:
            name = path.relative_to(ROOT).as_posix()
            assert name in names, f"{name} is missing from the wheel"
            assert zf.read(name) == path.read_bytes(), name
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = zf.read(entry_points).decode()
    assert "[console_scripts]\nkube-gateway = gateway.cli:main" in scripts


def test_the_wheel_carries_nothing_of_the_demo_upstream(wheel: Path) -> None:
    """No fake API server and none of its tokens in what the image installs."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert not [n for n in names if n.startswith(("kube_gateway_demo/", "gateway/demo/"))]
        holding = [n for n in names if b"admin-token" in zf.read(n)]
    assert not holding, f"the demo's admin token is in {holding}"
    # ... while the demo, which is built from its own directory, does hold it
    assert b'"admin-token"' in (ROOT / "demo/kube_gateway_demo/auth.py").read_bytes()


@pytest.fixture(scope="module")
def wheel_alone(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment where the gateway is the wheel's and the demo upstream is not
    installed: the wheel unpacked into a directory of its own, then the installed
    dependencies; ``python -S`` skips site-packages' ``.pth`` files, which is where the
    development checkout's editable installs (the gateway's, the demo's) live."""
    target = tmp_path_factory.mktemp("installed")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"),
            *("--target", str(target), str(wheel)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    paths = sysconfig.get_paths()
    return {
        "PYTHONPATH": os.pathsep.join(
            dict.fromkeys([str(target), paths["purelib"], paths["platlib"]])
        )
    }


def _alone(wheel_alone: dict[str, str], home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    python, *rest = command(free_port(), free_port(), *args)
    return subprocess.run(
        [python, "-S", *rest],
        capture_output=True,
        text=True,
        check=False,
        env=clean_env(home, wheel_alone),
        cwd=home,
        timeout=60,
    )


def test_without_the_demo_upstream_serve_refuses_it_in_one_line(
    wheel_alone: dict[str, str], tmp_path: Path
) -> None:
    """The image's gateway without the demo upstream: ``serve --demo``, and a start that
    finds no cluster at all, each end with one line saying why the demo was wanted and how
    to get it (not a traceback, and nothing served)."""
    probe = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import importlib.util, gateway; "
            "print(gateway.__file__, importlib.util.find_spec('kube_gateway_demo'))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=clean_env(tmp_path, wheel_alone),
        cwd=tmp_path,
    ).stdout.split()
    assert probe[0].startswith(wheel_alone["PYTHONPATH"].split(os.pathsep)[0]), probe
    assert probe[1] == "None", "the demo upstream is importable here"

    hint = "run `make run` from a checkout, or `pip install ./demo`"
    for args, why in (
        (["--demo"], "--demo was given but the demo upstream is not installed"),
        (
            [],
            "no cluster was found (no kubeconfig or in-cluster config) and the demo upstream "
            "is not installed",
        ),
    ):
        done = _alone(wheel_alone, tmp_path, *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [f"kube-gateway: cannot start: {why}: {hint}"]


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        name, sep, version = line.partition("==")
        if sep:
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_every_runtime_dependency_is_pinned_by_the_lock(wheel: Path) -> None:
    """`-c requirements.lock` pins what the image installs only if every package the wheel
    needs (its requirements and theirs, extras included) has a pin; the installed
    development environment gives the dependency graph."""
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        message = email.parser.Parser().parsestr(zf.read(meta).decode())
    pins = _pins()
    todo = [
        Requirement(r)
        for r in message.get_all("Requires-Dist") or []
        if Requirement(r).marker is None or Requirement(r).marker.evaluate({"extra": ""})
    ]
    seen: set[tuple[str, str]] = set()
    unpinned: list[str] = []
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        for extra in ("", *sorted(req.extras)):
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            if name not in pins:
                unpinned.append(name)
                continue
            dist = metadata.distribution(req.name)
            assert dist.version == pins[name], f"{name}: installed {dist.version}, pinned"
            for raw in dist.requires or []:
                sub = Requirement(raw)
                if sub.marker is None or sub.marker.evaluate({"extra": extra}):
                    todo.append(sub)
    assert not unpinned
    # the project's own direct dependencies are all among them
    assert {canonicalize_name(n) for n, _ in seen} >= {
        "httpx",
        "grpcio",
        "strawberry-graphql",
        "uvicorn",
        "prometheus-client",
    }
