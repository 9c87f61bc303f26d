"""Every example a reader copies from README.md, protos/README.md and the reference pages
of docs/ that hold examples runs as written.

A real ``kube-gateway serve --demo`` process serves them; each ``curl`` and ``grpcurl``
command of a ```` ```sh ```` block runs with the real tool (grpcurl from ``make go-client``)
through bash, as a reader's shell runs it, with only ``localhost:8080`` and
``localhost:50051`` pointed at the test's ports; each operation of the ```` ```graphql ````
blocks (of every document but protos/README.md, which has none) is sent as it is written.
Document order is kept, documents in the order listed, because the examples build on each
other (a lease created, then read, patched, watched and deleted).

Two trailing comments change what is expected of a command, and the test reads them:
``# streams until Ctrl-C`` (it runs until its first event arrives, then gets the SIGINT a
reader's Ctrl-C sends) and ``# fails: <text>`` (a deliberate error example: it must fail and
say ``<text>``). Every other command must exit 0 with no GraphQL or gRPC error in its output.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from graphql import OperationDefinitionNode, OperationType, parse

from tests.support.serve_process import Served, serve_process

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (
    ROOT / "README.md",
    ROOT / "protos" / "README.md",
    ROOT / "docs" / "configuration.md",
    ROOT / "docs" / "graphql.md",
    ROOT / "docs" / "views.md",
)
#: Documents whose graphql blocks are sent; protos/README.md shows gRPC only.
GRAPHQL_DOCUMENTS = {"README.md", "docs/configuration.md", "docs/graphql.md", "docs/views.md"}
GO_CLIENT = ROOT / "tests" / "go-client"
TOOLS = GO_CLIENT / ".bin"
ERROR_MARKS = ('"errors"', "ERROR:", "Code:")
STREAMS = re.compile(r"\s#\s*streams until Ctrl-C\s*$")
FAILS = re.compile(r"\s#\s*fails:\s*(.+?)\s*$")
#: The demo's admin, as the README's examples send it.
AUTH = {"Authorization": "Bearer admin-token"}
TIMEOUT = 60


def _patched_holder(answer: dict[str, Any]) -> object:
    return json.loads(base64.b64decode(answer["json"]))["spec"]["holderIdentity"]


#: What some commands answer, beyond "no error", keyed by a piece of the command: the
#: ResourceService walk-through does what its text says (grpcurl's JSON output, parsed).
ANSWERS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "ResourceService/Create": lambda a: a["struct"]["spec"] == {"holderIdentity": "me"},
    "ResourceService/Get": lambda a: set(a["struct"]["metadata"]) == {"name", "resourceVersion"},
    "ResourceService/Patch": lambda a: _patched_holder(a) == "you",
    '"limit": 2': lambda a: (
        len(a["items"]) == 2 and all(set(i["struct"]) <= {"metadata", "status"} for i in a["items"])
    ),
    "ResourceService/Delete": lambda a: "object" in a or "status" in a,
    # a fleet mutation: written in both demo clusters, each its own object
    "mutation { fleet(": lambda a: (
        [m["cluster"] for m in a["data"]["fleet"]] == ["default", "demo-2"]
        and all(
            m["createConfigMap"]["metadata"]["name"].startswith("everywhere-")
            for m in a["data"]["fleet"]
        )
    ),
    # docs/views.md: a view over gRPC, its page masked and counted
    "ResourceService/View": lambda a: (
        len(a["edges"]) == 5
        and all(set(e["object"]["struct"]) <= {"metadata", "status"} for e in a["edges"])
        and "status.phase" in a["counts"][0].values()  # group_by (grpcurl: proto names)
    ),
    # docs/views.md: one view merged across both demo clusters, each item tagged
    '"query":"{ namespacesView': lambda a: (
        [c["cluster"] for c in a["data"]["namespacesView"]["clusters"]] == ["default", "demo-2"]
        and a["data"]["namespacesView"]["total"]
        == sum(c["total"] for c in a["data"]["namespacesView"]["clusters"])
        and len(a["data"]["namespacesView"]["edges"]) == 3
    ),
    # "Many clusters": one entry per demo cluster, each its own list (its own namespace in it)
    '"clusters": ["*"]': lambda a: (
        [m["cluster"] for m in a["clusters"]] == ["default", "demo-2"]
        and {i["struct"]["metadata"]["name"] for i in a["clusters"][1]["list"]["items"]}
        >= {"demo-2"}
    ),
}


@dataclass(frozen=True)
class Example:
    doc: str
    line: int
    kind: str  # "sh" or "graphql"
    text: str  # the command (with the block's earlier assignments before it) or operation

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(path: Path) -> Iterator[tuple[str, int, list[str]]]:
    """The fenced blocks of a Markdown file: language, first line's number, lines."""
    lang: str | None = None
    start = 0
    body: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = line.strip()
        if lang is None and fence.startswith("```"):
            lang, start, body = fence[3:].strip(), number + 1, []
        elif lang is not None and fence == "```":
            yield lang, start, body
            lang = None
        elif lang is not None:
            body.append(line)


def complete(text: str) -> bool:
    """Whether bash reads ``text`` as whole commands (no open quote, ``\\`` or ``$(``)."""
    return (
        subprocess.run(["bash", "-n", "-c", text], capture_output=True, check=False).returncode == 0
    )


def shell_commands(lines: list[str]) -> Iterator[tuple[int, str]]:
    """A sh block's commands as bash reads them (continuations and multi-line quotes joined),
    with the offset of each one's first line."""
    pending: list[str] = []
    first = 0
    for offset, line in enumerate(lines):
        if not pending:
            first = offset
        pending.append(line)
        text = "\n".join(pending)
        if not line.endswith("\\") and complete(text):
            if text.strip():
                yield first, text
            pending = []
    assert not pending, f"an unfinished command: {pending}"


def operations(source: str) -> Iterator[tuple[int, str]]:
    """A graphql block's operations, each as its own document, with its line offset."""
    for definition in parse(source).definitions:
        assert definition.loc is not None
        yield definition.loc.start_token.line - 1, source[definition.loc.start : definition.loc.end]


def examples() -> list[Example]:
    """Every curl and grpcurl command of the documents' sh blocks, and every operation of
    their graphql blocks, in document order."""
    found: list[Example] = []
    for path in DOCUMENTS:
        doc = str(path.relative_to(ROOT))
        for lang, start, body in blocks(path):
            if lang == "sh":
                assignments: list[str] = []
                for offset, command in shell_commands(body):
                    word = command.split(None, 1)[0]
                    if re.match(r"[A-Za-z_][A-Za-z0-9_]*=", word):
                        assignments.append(command)  # AUTH='…': later commands use it
                    elif word in ("curl", "grpcurl"):
                        text = "\n".join([*assignments, command])
                        found.append(Example(doc, start + offset, "sh", text))
            elif lang == "graphql" and doc in GRAPHQL_DOCUMENTS:
                for offset, operation in operations("\n".join(body)):
                    found.append(Example(doc, start + offset, "graphql", operation))
    return found


def pointed_at(text: str, served: Served) -> str:
    http_port = served.http.rsplit(":", 1)[1]
    grpc_port = served.grpc.rsplit(":", 1)[1]
    text = text.replace("localhost:8080", f"127.0.0.1:{http_port}")
    return text.replace("localhost:50051", f"127.0.0.1:{grpc_port}")


def has_error(output: str) -> bool:
    return any(mark in output for mark in ERROR_MARKS)


def build_grpcurl() -> None:
    """grpcurl, as ``make test`` builds it first (``make go-client``): reused when present."""
    built = subprocess.run(
        ["bash", str(GO_CLIENT / "build.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON_BIN": sys.executable},
        timeout=1200,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert (TOOLS / "grpcurl").is_file()


def tool_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "KUBERNETES_"))}
    env["PATH"] = f"{TOOLS}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp_path)
    return env


def run_command(example: Example, served: Served, env: dict[str, str]) -> None:
    script = "set -o pipefail\n" + pointed_at(example.text, served)
    last = example.text.splitlines()[-1]
    if STREAMS.search(last):
        run_stream(example, script, env)
        return
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )
    output = done.stdout + done.stderr
    report = f"{example.where} exited {done.returncode}:\n{example.text}\n--- output:\n{output}"
    fails = FAILS.search(last)
    if fails:
        assert done.returncode != 0 or has_error(output), report
        assert fails.group(1) in output, report
    else:
        assert done.returncode == 0, report
        assert not has_error(output), report
        assert output.strip(), report
        for piece, holds in ANSWERS.items():
            if piece in example.text:
                assert holds(json.loads(done.stdout)), report


def first_event(line: str) -> bool:
    """The end of a first event: an SSE ``data:`` line, or the closing brace of grpcurl's
    first message."""
    return line.startswith("data:") or line.rstrip("\n") == "}"


def run_stream(example: Example, script: str, env: dict[str, str]) -> None:
    """A command that streams until Ctrl-C: read to its first event, then send the SIGINT a
    terminal sends it, and check what it wrote."""
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []
    with subprocess.Popen(
        ["bash", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    ) as proc:
        stdout = proc.stdout
        assert stdout is not None

        def read() -> None:
            for line in stdout:
                lines.put(line)
            lines.put(None)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        ended = False
        try:
            while not ended:
                line = lines.get(timeout=TIMEOUT)
                ended = line is None
                output.append(line or "")
                if line is not None and first_event(line):
                    break
            running = proc.poll() is None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
            proc.wait(TIMEOUT)
            reader.join(TIMEOUT)
        if not ended:
            output.extend(line for line in iter(lines.get_nowait, None) if line)
    text = "".join(output)
    report = (
        f"{example.where} (streams, exit {proc.returncode}):\n{example.text}\n--- output:\n{text}"
    )
    assert running, report  # it was still streaming when its first event arrived
    assert any(first_event(line) for line in output), report
    assert not has_error(text), report


def run_operation(example: Example, served: Served) -> None:
    """A graphql block's operation, sent as GraphiQL sends it: queries and mutations as a
    POST, a subscription over SSE until its first event."""
    (definition,) = parse(example.text).definitions
    assert isinstance(definition, OperationDefinitionNode)
    body = {"query": example.text}
    with httpx.Client(base_url=served.http, headers=AUTH, timeout=TIMEOUT) as http:
        if definition.operation is not OperationType.SUBSCRIPTION:
            answer = http.post("/graphql", json=body)
            report = (
                f"{example.where}:\n{example.text}\n--- answer {answer.status_code}:\n{answer.text}"
            )
            assert answer.status_code == 200, report
            assert "errors" not in answer.json(), report
            assert all(v is not None for v in answer.json()["data"].values()), report
            return
        headers = {"Accept": "text/event-stream"}
        with http.stream("POST", "/graphql", json=body, headers=headers) as stream:
            seen: list[str] = []
            for line in stream.iter_lines():
                seen.append(line)
                if line.startswith("data:"):
                    break
            report = f"{example.where}:\n{example.text}\n--- events:\n" + "\n".join(seen)
            assert stream.status_code == 200, report
            assert seen and seen[-1].startswith("data:"), report
            payload = json.loads(seen[-1].removeprefix("data:"))
            assert "errors" not in payload and payload["data"], report


def test_the_examples_are_found() -> None:
    """The extraction finds what the documents hold: the commands of both (continuations,
    multi-line quotes, assignments carried), the streaming ones, and the GraphQL operations."""
    found = examples()
    sh = [e for e in found if e.kind == "sh"]
    assert {e.doc for e in sh} == {
        "README.md",
        "protos/README.md",
        "docs/configuration.md",
        "docs/graphql.md",
        "docs/views.md",
    }
    assert {e.doc for e in found if e.kind == "graphql"} == {
        "README.md",
        "docs/graphql.md",
        "docs/views.md",
    }
    assert sum(e.text.lstrip().startswith("grpcurl") for e in sh) >= 2
    assert any(e.text.startswith("AUTH=") and "grpcurl" in e.text for e in sh)
    assert any("base64 -w0" in e.text for e in sh)
    assert sum(bool(STREAMS.search(e.text.splitlines()[-1])) for e in sh) == 3
    fails = [FAILS.search(e.text.splitlines()[-1]) for e in sh if "# fails:" in e.text]
    assert [m.group(1) if m else None for m in fails] == [
        "Authorization: Bearer <token>",
        "Code: NotFound",
    ]
    kinds = {
        parse(e.text).definitions[0].operation  # type: ignore[attr-defined]
        for e in found
        if e.kind == "graphql"
    }
    assert kinds == {OperationType.QUERY, OperationType.MUTATION, OperationType.SUBSCRIPTION}
    succeeding = [e for e in sh if "# fails:" not in e.text]
    for piece in ANSWERS:  # each check is of one command
        assert sum(piece in e.text for e in succeeding) == 1, piece


def test_every_readme_command_runs_as_written(tmp_path: Path) -> None:
    assert shutil.which("curl"), "curl is not installed"
    build_grpcurl()
    env = tool_env(tmp_path)
    # Two demo clusters, so the "Many clusters" examples of docs/configuration.md run as
    # written (demo-2 joins in the background: its "served" line says when).
    with serve_process(tmp_path, "--demo", "--demo-clusters", "2") as served:
        served.wait_serving()
        served.wait_for_line("cluster demo-2: served")
        for example in examples():
            if example.kind == "sh":
                run_command(example, served, env)
            else:
                run_operation(example, served)
