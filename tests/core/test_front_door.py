"""The core's front door (``gateway/core/__init__.py``): what it exports is exactly what
its users import, each name is the core's own, and nothing else of the core is reached
from outside (``tests/gateway/test_layers.py`` holds the front ends to it).

Its users: the front ends (``gateway/graphql``, ``gateway/grpc``), the process's edges, and
the Python examples of the README and ``docs/``.  A name exported that nobody imports is a
surface nobody needs; a name a user imports that is not exported fails at import already.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

import gateway.core

ROOT = Path(gateway.__file__).parent
EDGES = ("requestid", "logs", "settings", "tls", "shutdown", "httpserver", "demomode")


def _parsed(source: str) -> ast.AST:
    """A source, or a documented snippet (dedented; one that is no whole program is
    skipped: it holds no import)."""
    try:
        return ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def _users() -> list[tuple[str, str]]:
    """Each user's source, by name."""
    found = [
        (str(p), p.read_text())
        for folder in ("graphql", "grpc")
        for p in sorted((ROOT / folder).rglob("*.py"))
        if "gen" not in p.parts
    ]
    found += [(e, (ROOT / f"{e}.py").read_text()) for e in EDGES]
    for doc in [ROOT.parent / "README.md", *sorted((ROOT.parent / "docs").glob("*.md"))]:
        for block in re.findall(r"```python\n(.*?)```", doc.read_text(), re.S):
            found.append((str(doc), block))
    return found


def imported_from_the_front_door() -> set[str]:
    names: set[str] = set()
    for _, source in _users():
        for node in ast.walk(_parsed(source)):
            if isinstance(node, ast.ImportFrom) and node.module == "gateway.core":
                names.update(alias.name for alias in node.names)
    return names


def test_the_front_door_exports_exactly_what_its_users_import() -> None:
    exported = set(gateway.core.__all__)
    assert len(gateway.core.__all__) == len(exported), "a name is exported twice"
    assert imported_from_the_front_door() == exported


def test_every_exported_name_is_the_cores_own() -> None:
    for name in gateway.core.__all__:
        value = getattr(gateway.core, name)
        if inspect.ismodule(value):
            assert value.__name__.startswith("gateway.core."), name
        elif (
            inspect.isclass(value) or inspect.isfunction(value)
        ) and value.__module__ != "builtins":
            assert value.__module__.startswith("gateway.core."), (name, value.__module__)
        # constants and type aliases (JSON, Action) are the core's by where they are defined


def test_no_user_reaches_behind_the_front_door() -> None:
    behind = []
    for where, source in _users():
        for node in ast.walk(_parsed(source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gateway.core."):
                behind.append(f"{where}: from {node.module} import ...")
    assert not behind, "\n".join(behind)
