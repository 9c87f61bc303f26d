"""The gateway's modules import in one direction only, and never in a circle.

Every module under ``gateway/`` is parsed (not imported) and each ``import`` is an arrow:
at module level, inside functions (an import all the same, only later) and under
``if TYPE_CHECKING:`` (an annotation is a dependency too: it is counted for the layers and
for circles; an upward one needs an entry in :data:`EXEMPT` saying why).  The generated
``gateway/grpc/gen`` is left out.

The layers, bottom up:

* ``gateway.core``: all behaviour, in subpackages that each import only from below
  (:data:`CORE_LAYERS`): ``errors``, ``support``, ``process``, ``model``, ``lists``,
  ``upstream``, ``watch``, ``catalog``, ``views``, ``fleet``, ``calls``;
  ``gateway/core/__init__.py`` is the front door that re-exports the public surface.  The
  core imports nothing of the gateway outside itself.
* ``gateway.requestid``, ``logs``, ``settings``, ``tls``, ``shutdown``, ``httpserver``:
  the process's edges (request ids and access lines, log lines, settings, certificates,
  the drain's HTTP gate, the HTTP server's timeouts and connection cap); the core's front
  door and each other only.
* ``gateway.graphql`` and ``gateway.grpc``: the two front ends; the core's front door
  (``from gateway.core import ...``, never a module inside it), the request context
  (``gateway.requestid``) and themselves, never each other.  ``gateway.graphql`` is in
  subpackages that each import only from below (:data:`GRAPHQL_LAYERS`): ``errors``
  (the core's errors as GraphQL errors), ``resolvers`` (types and resolvers, the
  operation's context), ``schemas`` (whole schemas), ``engine`` (running an operation:
  limits, execution, documents, subscriptions, admission), ``transport`` (HTTP, SSE,
  WebSocket, GraphiQL), ``endpoints`` (what the application mounts); its
  ``__init__.py`` and ``__main__.py`` use them all.
* ``gateway.runtime``, then ``gateway.app``, then ``gateway.cli``: the composition root,
  which alone knows every layer and may reach inside the core to build it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import gateway

ROOT = Path(gateway.__file__).parent
LEFT_OUT = ("gateway.grpc.gen",)

#: The core's front door (``gateway/core/__init__.py``): the module itself, not what is in it
#: (``=``); and the one error tree, which it exports as a module (``from gateway.core import
#: errors``: every front end maps it with one table).
FRONT_DOOR = "gateway.core="
PUBLIC = (FRONT_DOOR, "gateway.core.errors")

#: Upward or circular imports kept on purpose, each with why: (importer, imported).
EXEMPT: Mapping[tuple[str, str], str] = {}

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
#: The core's subpackages, bottom up: each may import itself and those before it.
CORE_LAYERS = (
    "gateway.core.errors",
    "gateway.core.support",
    "gateway.core.process",
    "gateway.core.model",
    "gateway.core.lists",
    "gateway.core.upstream",
    "gateway.core.watch",
    "gateway.core.catalog",
    "gateway.core.views",
    "gateway.core.fleet",
    "gateway.core.calls",
)
#: The GraphQL front end's subpackages, bottom up: each may import itself and those before
#: it (and what the front end may: :data:`FRONT_END`).
GRAPHQL_LAYERS = (
    "gateway.graphql.errors",
    "gateway.graphql.resolvers",
    "gateway.graphql.schemas",
    "gateway.graphql.engine",
    "gateway.graphql.transport",
    "gateway.graphql.endpoints",
)
#: What a front end may import from outside itself.
FRONT_END = (*PUBLIC, "gateway.requestid")
#: What each part may import from the gateway (itself always), by module name prefix.
ALLOWED: Mapping[str, tuple[str, ...]] = {
    FRONT_DOOR: CORE_LAYERS,
    **{layer: CORE_LAYERS[:i] for i, layer in enumerate(CORE_LAYERS)},
    **{edge: (*PUBLIC, *EDGES) for edge in EDGES},
    "gateway.graphql": (*FRONT_END, "gateway.demomode"),
    **{
        layer: (*FRONT_END, "gateway.demomode", *GRAPHQL_LAYERS[:i])
        for i, layer in enumerate(GRAPHQL_LAYERS)
    },
    "gateway.grpc": FRONT_END,
    "gateway.runtime": ("gateway.core", *EDGES, "gateway.graphql", "gateway.grpc"),
    "gateway.app": ("gateway.core", *EDGES, "gateway.graphql", "gateway.runtime"),
    "gateway.cli": ("gateway.core", *EDGES, "gateway.app", "gateway.runtime"),
}


def _name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(name: str, prefix: str) -> bool:
    if prefix.endswith("="):  # the module itself, not what is inside it
        return name == prefix[:-1]
    return name == prefix or name.startswith(prefix + ".")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package the check covers (the gateway's by default), by its
    dotted name."""
    found = {_name(path, root): path for path in sorted(root.rglob("*.py"))}
    return {n: p for n, p in found.items() if not any(_within(n, x) for x in LEFT_OUT)}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The gateway modules ``name`` imports (``from package import module`` names the
    module; ``from module import thing`` the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
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
    """Who imports whom, the exempt arrows (:data:`EXEMPT`) left out."""
    covered = modules(root)
    known = set(covered) | set(_all_names(root))
    return {
        name: {m for m in imports_of(name, path, known) - {name} if (name, m) not in EXEMPT}
        for name, path in covered.items()
    }


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


def test_every_graphql_module_sits_in_a_subpackage() -> None:
    # Only the package's front (and the command) use every layer; a new module says which
    # layer it is in by where it is (scripts/regroup.py places one merged at the top).
    top = [n for n in modules() if _part(n) == "gateway.graphql"]
    assert top == ["gateway.graphql", "gateway.graphql.__main__"]


def test_the_check_finds_what_it_looks_for() -> None:
    # The check itself: a function-level import counts, a TYPE_CHECKING one too, and a
    # circle is reported as the path that closes it.
    graph = import_graph()
    assert (
        "gateway.graphql.transport.http" in graph["gateway.graphql.transport.websocket"]
    )  # inside a function
    assert "gateway.core.upstream.adapter" in graph["gateway.core.watch.access"]
    circle = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(circle) == [["a", "b", "c", "a"]]
    assert _part("gateway.core") == FRONT_DOOR and _part("gateway.core.fleet.cluster") == (
        "gateway.core.fleet"
    )
    # a GraphQL layer may use those below it, never those above
    engine = ALLOWED[_part("gateway.graphql.engine.execution") or ""]
    assert "gateway.graphql.schemas" in engine and "gateway.graphql.transport" not in engine
    # a front end may use the front door, never a module behind it
    assert _within("gateway.core", FRONT_DOOR) and not _within("gateway.core.errors", FRONT_DOOR)


def test_every_exemption_is_still_needed() -> None:
    covered = modules()
    known = set(covered) | set(_all_names(ROOT))
    for importer, imported in EXEMPT:
        assert imported in imports_of(importer, covered[importer], known), (importer, imported)


def test_the_demo_upstream_imports_in_no_circle() -> None:
    # The demo is a package of its own (kube_gateway_demo), held to the same rule.
    import kube_gateway_demo

    graph = import_graph(Path(kube_gateway_demo.__file__).parent)
    assert len(graph) > 20  # the whole demo was read
    assert cycles(graph) == [], cycles(graph)
