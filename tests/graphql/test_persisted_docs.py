"""docs/trusted-documents.md's examples run as written, with the real curl, against real
``kube-gateway serve --demo`` processes: the trusted-documents section against one started
with the document's own manifest (its ```` ```json ```` block), the APQ section against one
without.  The same conventions as README.md's (``# fails: <text>``, ``# streams until
Ctrl-C``), run by the same code (tests/deploy/test_readme_commands.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.deploy.test_readme_commands import (
    FAILS,
    ROOT,
    STREAMS,
    Example,
    blocks,
    run_command,
    shell_commands,
    tool_env,
)
from tests.support.serve_process import serve_process

DOC = ROOT / "docs" / "trusted-documents.md"
APQ_HEADING = "## Automatic Persisted Queries"


def doc_examples() -> tuple[str, list[Example], list[Example]]:
    """The manifest, and the curl commands before and after the APQ heading."""
    heading = DOC.read_text(encoding="utf-8").splitlines().index(APQ_HEADING) + 1
    manifest = None
    trusted: list[Example] = []
    apq: list[Example] = []
    for lang, start, body in blocks(DOC):
        if lang == "json":
            assert manifest is None, "one manifest"
            manifest = "\n".join(body)
        if lang != "sh":
            continue
        for offset, command in shell_commands(body):
            if command.startswith("curl"):
                line = start + offset
                example = Example("docs/trusted-documents.md", line, "sh", command)
                (trusted if line < heading else apq).append(example)
    assert manifest is not None
    return manifest, trusted, apq


def test_the_examples_are_found() -> None:
    _, trusted, apq = doc_examples()
    fails = [FAILS.search(e.text.splitlines()[-1]) for e in [*trusted, *apq]]
    assert [m.group(1) for m in fails if m] == [
        "PERSISTED_QUERY_NOT_ALLOWED",
        "PERSISTED_QUERY_NOT_FOUND",
        "PersistedQueryNotFound",
    ]
    assert sum(bool(STREAMS.search(e.text)) for e in trusted) == 1
    assert (len(trusted), len(apq)) == (6, 3)


def test_the_examples_run_as_written(tmp_path: Path) -> None:
    assert shutil.which("curl"), "curl is not installed"
    text, trusted, apq = doc_examples()
    manifest = tmp_path / "persisted-documents.json"
    manifest.write_text(text)
    env = tool_env(tmp_path)
    with serve_process(tmp_path, "--demo", "--trusted-documents", str(manifest)) as served:
        served.wait_serving()
        for example in trusted:
            run_command(example, served, env)
    with serve_process(tmp_path, "--demo") as served:
        served.wait_serving()
        for example in apq:
            run_command(example, served, env)
