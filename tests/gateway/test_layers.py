"""The gateway's modules import in one direction only, and never in a circle.

Every module under ``gateway/`` is parsed (not imported) and each ``import`` is an arrow:
at module level and inside functions alike, since a function-level import is an import
all the same, only later; imports under ``if TYPE_CHECKING:`` are left out (they never
run).  The generated ``gateway/grpc/gen`` is left out, and so, for now, is
``gateway/demo``, which is leaving the package and gets the same check where it lands.

The layers, bottom up:

* ``gateway.core``: all behaviour; imports nothing of the gateway outside itself.
* ``gateway.requestid``, ``logs``, ``settings``, ``tls``, ``shutdown``, ``httpserver``:
  the process's edges (request ids and access lines, log lines, settings, certificates,
  the drain's HTTP gate, the HTTP server's timeouts and connection cap); the core and
  each other only.
* ``gateway.graphql`` and ``gateway.grpc``: the two front ends; the core, the request
  context (``gateway.requestid``) and themselves, never each other.
* ``gateway.runtime``, then ``gateway.app``, then ``gateway.cli``: the composition root,
  which alone knows every layer.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import gateway

ROOT = Path(gateway.__file__).parent
LEFT_OUT = ("gateway.grpc.gen",)

#: The process's edges: below the front ends, above the core.
EDGES = (
    "gateway.requestid",
    "gateway.logs",
    "gateway.settings",
    "gateway.tls",
    "gateway.shutdown",
    "gateway.httpserver",
    "gateway.demomode",
)
#: What each part may import from the gateway (itself always), by module name prefix.
ALLOWED: Mapping[str, tuple[str, ...]] = {
    "gateway.core": (),
    **{edge: ("gateway.core", *EDGES) for edge in EDGES},
    "gateway.graphql": ("gateway.core", "gateway.requestid", "gateway.demomode"),
    "gateway.grpc": ("gateway.core", "gateway.requestid"),
    "gateway.runtime": ("gateway.core", *EDGES, "gateway.graphql", "gateway.grpc"),
    "gateway.app": ("gateway.core", *EDGES, "gateway.graphql", "gateway.runtime"),
    "gateway.cli": ("gateway.core", *EDGES, "gateway.app", "gateway.runtime"),
}


def _name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package the check covers (the gateway's by default), by its
    dotted name."""
    found = {_name(path, root): path for path in sorted(root.rglob("*.py"))}
    return {n: p for n, p in found.items() if not any(_within(n, x) for x in LEFT_OUT)}


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node`` except the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _statements(other)
            continue
        yield child
        yield from _statements(child)


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The gateway modules ``name`` imports (``from package import module`` names the
    module; ``from module import thing`` the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _statements(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                inner = f"{base}.{alias.name}"
                found.add(inner if inner in known else base)
    return {m for m in found if _within(m, name.partition(".")[0])}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    covered = modules(root)
    known = set(covered) | set(_all_names(root))
    return {name: imports_of(name, path, known) - {name} for name, path in covered.items()}


def _all_names(root: Path) -> Iterator[str]:
    for path in root.rglob("*.py"):
        yield _name(path, root)


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every import circle, one per strongly connected group of modules (Tarjan), each
    reported as a path that returns to its start."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(_circle(graph, set(group)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def _circle(graph: Mapping[str, set[str]], group: set[str]) -> list[str]:
    """A path through ``group`` from its first module back to it (breadth first)."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & group):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no circle through {sorted(group)}")


def _part(name: str) -> str | None:
    """The longest layer prefix ``name`` belongs to (``None``: the ``gateway`` package)."""
    matching = [prefix for prefix in ALLOWED if _within(name, prefix)]
    return max(matching, key=len) if matching else None


def test_the_gateway_imports_in_no_circle() -> None:
    found = cycles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_every_import_points_down_the_layers() -> None:
    wrong = []
    for name, imported in sorted(import_graph().items()):
        part = _part(name)
        if part is None:
            continue
        allowed = (part, *ALLOWED[part])
        wrong += [
            f"{name} -> {m}" for m in sorted(imported) if not any(_within(m, a) for a in allowed)
        ]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_every_module_has_a_layer() -> None:
    # A new top-level module must say where it sits before it can import anything.
    assert [n for n in modules() if _part(n) is None] == ["gateway"]


def test_the_check_finds_what_it_looks_for() -> None:
    # The check itself: a function-level import counts, a TYPE_CHECKING one does not, and
    # a circle is reported as the path that closes it.
    graph = import_graph()
    assert "gateway.graphql.http" in graph["gateway.graphql.websocket"]  # inside a function
    assert "gateway.graphql.server" not in graph["gateway.graphql.http"]  # TYPE_CHECKING only
    circle = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(circle) == [["a", "b", "c", "a"]]


def test_the_demo_upstream_imports_in_no_circle() -> None:
    # The demo is a package of its own (kube_gateway_demo), held to the same rule.
    import kube_gateway_demo

    graph = import_graph(Path(kube_gateway_demo.__file__).parent)
    assert len(graph) > 20  # the whole demo was read
    assert cycles(graph) == [], cycles(graph)
