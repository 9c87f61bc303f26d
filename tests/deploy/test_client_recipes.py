"""The GraphQL client recipes of ``examples/graphql`` (docs/clients.md) run as written, and
``kube-gateway schema`` prints what ``/graphql`` serves.

A real ``kube-gateway serve --demo`` process serves them all.  Each recipe is a node script
of its own (Apollo Client over HTTP and graphql-ws, Apollo Client with multipart HTTP
subscriptions, urql, graphql-ws, graphql-sse) that creates a ConfigMap, receives its ADDED
event through a subscription, reads it back, deletes it and receives its DELETED event; it
exits 0 only when every answer is right.  The typed client is built the way
docs/clients.md says: ``kube-gateway schema --demo > schema.graphql``, graphql-codegen's
client preset, ``tsc``; then run.  ConfigMaps are a kind discovery finds on the demo (the
seed registry lacks it), so the typed build also fails when the schema lacks discovered
kinds.

The npm packages are the pinned ones of ``examples/graphql/package.json``
(``make client-recipes``).  Each build runs in a copy of the recipes (the checkout is left
as it is), with the installed ``node_modules`` linked in.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest
from graphql import (
    GraphQLSchema,
    build_client_schema,
    build_schema,
    get_introspection_query,
    lexicographic_sort_schema,
    print_schema,
)

from gateway.graphql.engine.execution import Engine
from gateway.graphql.engine.limits import Limits
from gateway.graphql.schemas.seed import gateway_schema
from tests.deploy.test_readme_commands import blocks
from tests.support.serve_process import Served, clean_env, serve_process

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "examples" / "graphql"
DOC = ROOT / "docs" / "clients.md"
CODE = (".mjs", ".ts")
ADMIN = "admin-token"
TIMEOUT = 300
#: The access line's mark of a multipart HTTP stream.
MULTIPART_WATCH = '"transport":"multipart"'
#: What a build writes, never copied from the checkout into a build's directory.
WRITTEN = ("node_modules", "gql", "dist", "schema.graphql")


def node() -> str:
    executable = shutil.which("node")
    assert executable is not None, "Node.js is needed for the client recipes"
    assert (RECIPES / "node_modules" / "@apollo" / "client").is_dir(), "run `make client-recipes`"
    return executable


def run(
    args: list[str], cwd: Path, env: Mapping[str, str], *, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    report = f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert (done.returncode == 0) is ok, report
    return done


def schema_command(*args: str) -> list[str]:
    """``kube-gateway schema ...`` as this checkout runs it."""
    return [sys.executable, "-m", "gateway.cli", "schema", *args]


def seed_schema() -> GraphQLSchema:
    """The schema /graphql serves before discovery (and with --no-discovery)."""
    return Engine(gateway_schema(), Limits()).graphql_schema


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_process(tmp_path_factory.mktemp("serve"), "--demo") as served:
        served.wait_serving()
        yield served


@pytest.fixture(scope="module")
def sdl(tmp_path_factory: pytest.TempPathFactory) -> str:
    """What ``kube-gateway schema --demo`` prints (no kubeconfig around, as in CI)."""
    home = tmp_path_factory.mktemp("schema")
    return run(schema_command("--demo"), home, clean_env(home)).stdout


def node_env(home: Path, served: Served, **extra: str) -> dict[str, str]:
    return clean_env(
        home, {"GATEWAY_URL": f"{served.http}/graphql", "GATEWAY_TOKEN": ADMIN, **extra}
    )


@pytest.mark.parametrize(
    ("script", "client", "extra"),
    [
        ("apollo.mjs", "apollo", {}),
        ("apollo.mjs", "apollo-multipart", {"MULTIPART": "1"}),
        ("urql.mjs", "urql", {}),
        ("graphql-ws.mjs", "graphql-ws", {}),
        ("graphql-sse.mjs", "graphql-sse", {}),
    ],
)
def test_a_recipe_queries_mutates_and_subscribes(
    served: Served, tmp_path: Path, script: str, client: str, extra: dict[str, str]
) -> None:
    before = len(served.lines)
    done = run([node(), script], RECIPES, node_env(tmp_path, served, **extra))
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["client"] == client and result["ok"] is True, done.stdout
    if client == "apollo-multipart":
        # Apollo's HttpLink sent the subscription itself, over no WebSocket: the gateway's
        # access line says it went out as a multipart stream.
        served.wait_until(lambda lines: any(MULTIPART_WATCH in x for x in lines[before:]))


def test_the_schema_command_prints_what_graphql_serves(served: Served, sdl: str) -> None:
    """The SDL is the schema a running gateway answers introspection with, discovered kinds
    included (the demo's Deployments and ConfigMaps, which the seed schema lacks)."""
    printed = build_schema(sdl)
    query = printed.query_type
    assert query is not None
    assert {"configMaps", "deployments", "pods"} <= set(query.fields)
    seed = seed_schema().query_type
    assert seed is not None
    assert "configMaps" not in seed.fields and "deployments" not in seed.fields
    answer = httpx.post(
        f"{served.http}/graphql",
        json={
            "query": get_introspection_query(
                descriptions=True,
                specified_by_url=True,
                directive_is_repeatable=True,
                schema_description=True,
                input_value_deprecation=True,
            )
        },
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    served_schema = build_client_schema(answer.json()["data"])
    assert print_schema(lexicographic_sort_schema(printed)) == print_schema(
        lexicographic_sort_schema(served_schema)
    )


def test_the_schema_command_writes_a_file_and_fails_clearly(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    out = tmp_path / "seed.graphql"
    # Discovery off: the seed schema, what `serve --no-discovery` serves.
    run(schema_command("--demo", "--no-discovery", "-o", str(out)), tmp_path, env)
    assert out.read_text(encoding="utf-8") == (print_schema(seed_schema()) + "\n")
    # An API server that never answers: a message and exit 1 once --timeout is over.
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        ),
        encoding="utf-8",
    )
    failed = run(
        schema_command("--kubeconfig", str(kubeconfig), "--timeout", "2"),
        tmp_path,
        env,
        ok=False,
    )
    assert failed.returncode == 1 and failed.stdout == ""
    assert "did not finish in 2 s" in failed.stderr


def test_the_documented_excerpts_are_the_recipes_code() -> None:
    """docs/clients.md quotes the recipes: each js/ts block is a run of lines of one of
    their files, as it stands there."""
    sources = [p.read_text(encoding="utf-8") for p in RECIPES.iterdir() if p.suffix in CODE]
    excerpts = [body for lang, _, body in blocks(DOC) if lang in ("js", "ts")]
    assert len(excerpts) >= 6
    for body in excerpts:
        text = "\n".join(body) + "\n"
        assert any(text in source for source in sources), text


def build_dir(tmp_path: Path) -> Path:
    """A copy of the recipes to build in, the installed packages linked in."""
    work = tmp_path / "recipes"
    shutil.copytree(RECIPES, work, ignore=shutil.ignore_patterns(*WRITTEN))
    (work / "node_modules").symlink_to(RECIPES / "node_modules", target_is_directory=True)
    return work


def npx(work: Path, tool: str) -> list[str]:
    return [node(), str(work / "node_modules" / ".bin" / tool)]


def test_the_typed_client_builds_from_the_schema_and_runs(
    served: Served, sdl: str, tmp_path: Path
) -> None:
    work = build_dir(tmp_path)
    env = node_env(tmp_path, served)
    # docs/clients.md: `kube-gateway schema --demo > schema.graphql`, codegen, then tsc
    # (which type-checks what it compiles: any type error fails it).
    (work / "schema.graphql").write_text(sdl, encoding="utf-8")
    run(npx(work, "graphql-codegen"), work, env)
    run([*npx(work, "tsc"), "-p", "."], work, env)
    done = run([node(), "dist/typed.js"], work, env)
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "client": "typed",
        "ok": True,
        "problems": [],
    }
    # From the running gateway's URL instead of the file: the same generated code.
    generated = {p.name: p.read_text(encoding="utf-8") for p in (work / "gql").iterdir()}
    shutil.rmtree(work / "gql")
    run(npx(work, "graphql-codegen"), work, {**env, "SCHEMA_URL": f"{served.http}/graphql"})
    assert {p.name: p.read_text(encoding="utf-8") for p in (work / "gql").iterdir()} == generated


def test_the_typed_client_does_not_build_without_the_discovered_kinds(tmp_path: Path) -> None:
    """A schema that lacks what typed.ts selects fails the build: here the seed schema
    (discovery off), which has no ConfigMaps."""
    work = build_dir(tmp_path)
    env = clean_env(tmp_path)
    run(schema_command("--demo", "--no-discovery", "-o", "schema.graphql"), work, env)
    failed = run(npx(work, "graphql-codegen"), work, env, ok=False)
    assert "configMap" in failed.stdout + failed.stderr
