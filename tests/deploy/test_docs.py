"""The README is a path (quick start, a first query early, reference in docs/), it tells how
to build the image and apply each overlay that exists, docs/deploy.md names every
component and example, docs/configuration.md documents every flag the real parser has,
and no document names a deploy/ file that is gone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gateway.settings import ENV_PREFIX, parser_for

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ROOT / "deploy" / "kustomize" / "overlays"


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_readme_is_a_path_not_a_reference() -> None:
    """A reader meets the quick start first, runs a first GraphQL query within a screen or
    two, and finds the sections in the order they need them; the reference lives in docs/,
    so the README stays short enough to read top to bottom."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 400, f"README.md has {len(lines)} lines: move reference to docs/"
    queries = (n for n, line in enumerate(lines, 1) if "curl" in line and "/graphql" in line)
    first_query = next(queries)
    assert first_query <= 60, f"the first GraphQL example is on line {first_query}"
    sections = [line[3:] for line in lines if line.startswith("## ")]
    path = ["Quick start", "GraphiQL", "Examples", "Client recipes", "Deploy", "Operate"]
    assert [s for s in sections if s in path] == path, sections


def configuration_rows() -> list[tuple[str, str]]:
    """The flag table of docs/configuration.md: each row's flag and env cells."""
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = [line.split("|")[1:3] for line in text.splitlines() if line.startswith("| `--")]
    return [(flag, env) for flag, env in rows]


def test_every_flag_is_documented_in_the_configuration_reference() -> None:
    """Every option of the real ``kube-gateway serve`` parser has a row, with its env var,
    in docs/configuration.md's table, and the table names no flag the parser lacks."""
    parser = parser_for()
    real = {
        option: f"{ENV_PREFIX}{action.dest.upper()}"
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }
    rows = configuration_rows()
    documented = {flag for cell, _ in rows for flag in re.findall(r"--[a-z0-9-]+", cell)}
    assert documented == set(real), (set(real) - documented, documented - set(real))
    for option, env in real.items():
        (row_env,) = [e for cell, e in rows if option in re.findall(r"--[a-z0-9-]+", cell)]
        assert env in row_env, f"{option}: {env} not in {row_env!r}"


def test_the_readme_builds_the_image_and_applies_every_overlay() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docker build -f deploy/Dockerfile -t kube-gateway:0.1.0 ." in readme
    overlays = sorted(p.name for p in OVERLAYS.iterdir() if p.is_dir())
    assert overlays == ["passthrough", "shared-watches"]
    for overlay in overlays:
        assert f"kubectl apply -k deploy/kustomize/overlays/{overlay}" in readme


def test_the_deploy_guide_names_every_component_and_example() -> None:
    """What deploy/kustomize offers beside the two modes (TLS as a component, examples to
    copy) is where a reader of docs/deploy.md finds it."""
    guide = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    kustomize = ROOT / "deploy" / "kustomize"
    components = sorted(p.name for p in (kustomize / "components").iterdir())
    examples = sorted(p.name for p in (kustomize / "examples").iterdir())
    assert components == ["tls"] and examples == ["tls-ingress"]
    for component in components:
        assert f"deploy/kustomize/components/{component}" in guide
    for example in examples:
        assert f"kubectl apply -k deploy/kustomize/examples/{example}" in guide


def headings(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (outside fenced blocks)."""
    anchors: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_links_to_a_heading_name_one_that_exists() -> None:
    """The README and docs/ link into each other's sections (``configuration.md#identity``);
    a heading renamed or moved breaks such a link silently, so each is checked."""
    for doc in [*documents(), ROOT / "protos" / "README.md"]:
        text = doc.read_text(encoding="utf-8")
        for target, anchor in re.findall(r"\]\(([^)#:]*)#([^)]+)\)", text):
            linked = (doc.parent / target).resolve() if target else doc
            if linked.exists():
                assert anchor in headings(linked), f"{doc.name} links to {target}#{anchor}"


def test_documents_name_only_deploy_files_that_exist() -> None:
    for doc in documents():
        text = doc.read_text(encoding="utf-8")
        for word in text.replace("`", " ").replace("(", " ").replace(")", " ").split():
            if word.startswith("deploy/"):
                path = word.rstrip(".,:;")
                assert (ROOT / path).exists(), f"{doc.name} names {path}"


def test_the_readme_python_example_runs_as_written(tmp_path: Path) -> None:
    """The README's "Using the core from Python" script, copied out and run by the project's
    interpreter: an example that breaks fails here."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    (script,) = [b for b in blocks if "asyncio.run(main())" in b]
    path = tmp_path / "core_example.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()[:2]
    assert "'tier': 'front'" in first  # the dry-run patch answered with the label
    assert second.startswith("ADDED ")


def test_the_security_page_names_tests_that_exist() -> None:
    """docs/security.md proves each line with a test: every test it names is there."""
    page = (ROOT / "docs" / "security.md").read_text()
    named = set(re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", page))
    assert len(named) > 20
    for path, test in named:
        source = ROOT / path
        assert source.is_file(), path
        if test:
            assert re.search(rf"def {test}\b", source.read_text()), f"{path}::{test}"
