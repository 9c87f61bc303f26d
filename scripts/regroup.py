"""Move modules into the subpackages that show the layers, and rewrite every reference.

Run from a checkout, with the project's venv::

    .venv/bin/python scripts/regroup.py

For each entry of :data:`MOVES` (old path: new path) still at its old place, ``git mv``
moves it (making the new package, with its docstring from :data:`PACKAGES`, when it does
not exist yet); then every tracked text file under :data:`TREES` (and :data:`FILES`) has
the old dotted module names and paths replaced by the new ones, ``from package import
module`` lines split where a module moved, and the Python files it changed are sorted and
formatted by ruff.  It is idempotent: run again (after merging a branch written before the
move) it moves nothing twice and rewrites only what still names an old place.  Last, it
names every module left at the top of a regrouped package that the table does not place:
add it to :data:`MOVES` (or to :data:`STAY`) and run it again.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
HERE: Final = "scripts/regroup.py"

#: New packages and what their ``__init__.py`` says they hold.
PACKAGES: Final[Mapping[str, str]] = {
    "gateway/graphql/resolvers": (
        "The GraphQL types and resolvers generated from the core's model and operations\n"
        "table (scalars, objects, arguments, relation links, streams, the ``clusters`` field),\n"
        "and what a resolver runs with: the operation's context and its loaders.  Imports the\n"
        "core's front door and :mod:`gateway.graphql.errors` only.\n"
    ),
    "gateway/graphql/schemas": (
        "Whole schemas from the resolvers: the seed schema, the kinds a catalog discovers\n"
        "(OpenAPI v3), a group's schema, and the library of types they share.\n"
    ),
    "gateway/graphql/engine": (
        "Running one operation on a schema: limits, parsing and validation (``Engine``), the\n"
        "selection's projection, persisted and trusted documents, shared subscriptions, and\n"
        "the admission every endpoint applies.  No transport.\n"
    ),
    "gateway/graphql/transport": (
        "The wire: GraphQL over HTTP (POST, GET, SSE, multipart), both WebSocket protocols,\n"
        "GraphiQL and its assets, browser origins, and the ``Endpoint`` protocol they serve.\n"
    ),
    "gateway/graphql/endpoints": (
        "The endpoints the application mounts: ``/graphql`` (``GraphQLApp``), the live schemas\n"
        "and ``/apis/{group}/graphql``, ``/fleet/graphql``, ``/clusters/{name}/graphql``.\n"
    ),
    "tests/core/calls": "Tests of ``gateway/core/calls``, a module's by its name.",
    "tests/core/catalog": "Tests of ``gateway/core/catalog``, a module's by its name.",
    "tests/core/fleet": "Tests of ``gateway/core/fleet``, a module's by its name.",
    "tests/core/lists": "Tests of ``gateway/core/lists``, a module's by its name.",
    "tests/core/model": "Tests of ``gateway/core/model``, a module's by its name.",
    "tests/core/process": "Tests of ``gateway/core/process``, a module's by its name.",
    "tests/core/support": "Tests of ``gateway/core/support``, a module's by its name.",
    "tests/core/upstream": "Tests of ``gateway/core/upstream``, a module's by its name.",
    "tests/core/watch": "Tests of ``gateway/core/watch``, a module's by its name.",
}

#: Old path: new path (a module keeps its name; a folder moves whole).
MOVES: Final[Mapping[str, str]] = {
    # gateway/graphql, bottom up (each imports only from those above it here)
    "gateway/graphql/context.py": "gateway/graphql/resolvers/context.py",
    "gateway/graphql/loaders.py": "gateway/graphql/resolvers/loaders.py",
    "gateway/graphql/scalars.py": "gateway/graphql/resolvers/scalars.py",
    "gateway/graphql/objects.py": "gateway/graphql/resolvers/objects.py",
    "gateway/graphql/arguments.py": "gateway/graphql/resolvers/arguments.py",
    "gateway/graphql/links.py": "gateway/graphql/resolvers/links.py",
    "gateway/graphql/streams.py": "gateway/graphql/resolvers/streams.py",
    "gateway/graphql/clusterinfo.py": "gateway/graphql/resolvers/clusterinfo.py",
    "gateway/graphql/operations.py": "gateway/graphql/resolvers/operations.py",
    "gateway/graphql/_library.py": "gateway/graphql/schemas/_library.py",
    "gateway/graphql/seed.py": "gateway/graphql/schemas/seed.py",
    "gateway/graphql/native.py": "gateway/graphql/schemas/native.py",
    "gateway/graphql/collector.py": "gateway/graphql/engine/collector.py",
    "gateway/graphql/schema.py": "gateway/graphql/schemas/schema.py",
    "gateway/graphql/limits.py": "gateway/graphql/engine/limits.py",
    "gateway/graphql/projection.py": "gateway/graphql/engine/projection.py",
    "gateway/graphql/execution.py": "gateway/graphql/engine/execution.py",
    "gateway/graphql/persisted.py": "gateway/graphql/engine/persisted.py",
    "gateway/graphql/subscriptions.py": "gateway/graphql/engine/subscriptions.py",
    "gateway/graphql/admission.py": "gateway/graphql/engine/admission.py",
    "gateway/graphql/endpoint.py": "gateway/graphql/transport/endpoint.py",
    "gateway/graphql/http.py": "gateway/graphql/transport/http.py",
    "gateway/graphql/websocket.py": "gateway/graphql/transport/websocket.py",
    "gateway/graphql/graphiql.py": "gateway/graphql/transport/graphiql.py",
    "gateway/graphql/static": "gateway/graphql/transport/static",
    "gateway/graphql/origins.py": "gateway/graphql/transport/origins.py",
    "gateway/graphql/server.py": "gateway/graphql/endpoints/server.py",
    "gateway/graphql/live.py": "gateway/graphql/endpoints/live.py",
    "gateway/graphql/fleet.py": "gateway/graphql/endpoints/fleet.py",
    "gateway/graphql/clusters.py": "gateway/graphql/endpoints/clusters.py",
    # tests/core: a core module's tests under the same subpackage, by the module's name
    "tests/core/test_streaming.py": "tests/core/calls/test_streaming.py",
    "tests/core/test_catalog.py": "tests/core/catalog/test_catalog.py",
    "tests/core/test_discovery.py": "tests/core/catalog/test_discovery.py",
    "tests/core/test_openapi_documents.py": "tests/core/catalog/test_openapi_documents.py",
    "tests/core/test_visibility.py": "tests/core/fleet/test_visibility.py",
    "tests/core/test_gzipped.py": "tests/core/lists/test_gzipped.py",
    "tests/core/test_jobs.py": "tests/core/lists/test_jobs.py",
    "tests/core/test_large.py": "tests/core/lists/test_large.py",
    "tests/core/test_pool.py": "tests/core/lists/test_pool.py",
    "tests/core/test_slicedjson.py": "tests/core/lists/test_slicedjson.py",
    "tests/core/test_worker.py": "tests/core/lists/test_worker.py",
    "tests/core/test_openapi.py": "tests/core/model/test_openapi.py",
    "tests/core/test_options.py": "tests/core/model/test_options.py",
    "tests/core/test_registry.py": "tests/core/model/test_registry.py",
    "tests/core/test_cpus.py": "tests/core/process/test_cpus.py",
    "tests/core/test_heap.py": "tests/core/process/test_heap.py",
    "tests/core/test_deepjson.py": "tests/core/support/test_deepjson.py",
    "tests/core/test_wakeup.py": "tests/core/support/test_wakeup.py",
    "tests/core/test_adapter.py": "tests/core/upstream/test_adapter.py",
    "tests/core/test_framing.py": "tests/core/upstream/test_adapter_framing.py",
    "tests/core/test_auth.py": "tests/core/upstream/test_auth.py",
    "tests/core/test_client.py": "tests/core/upstream/test_client.py",
    "tests/core/test_config.py": "tests/core/upstream/test_config.py",
    "tests/core/test_identity.py": "tests/core/upstream/test_identity.py",
    "tests/core/test_kubeconfig.py": "tests/core/upstream/test_kubeconfig.py",
    "tests/core/upstream_fixtures.py": "tests/core/upstream/upstream_fixtures.py",
    "tests/core/fixtures": "tests/core/upstream/fixtures",
    "tests/core/test_hub.py": "tests/core/watch/test_hub.py",
    "tests/core/test_watcher.py": "tests/core/watch/test_watcher.py",
}

#: Modules that stay at the top of a regrouped package (its front, the whole package's).
STAY: Final[Mapping[str, frozenset[str]]] = {
    "gateway/graphql": frozenset({"__init__.py", "__main__.py", "errors.py"}),
    "tests/core": frozenset(
        {"__init__.py", "test_errors.py", "test_front_door.py", "test_layout.py"}
    ),
}

#: Where references are rewritten: tracked files under these folders, and these files.
TREES: Final = ("gateway", "tests", "demo", "docs", "scripts", "examples", "deploy", "protos")
FILES: Final = ("README.md", "BENCHMARKS.md", "pyproject.toml", "Makefile")
TEXT: Final = frozenset({".py", ".md", ".toml", ".txt", ".yaml", ".yml", ".sh", ".cfg", ""})
SKIP: Final = ("gateway/grpc/gen/", "/node_modules/", "/static/", "tests/e2e/go/")

#: Other texts to replace, as they are written (each is gone once replaced).
LITERALS: Final[Mapping[str, str]] = {
    # the package data moves with GraphiQL's assets
    '"gateway.graphql" = ["static/*"]': '"gateway.graphql.transport" = ["static/*"]',
}


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def _dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def move() -> list[str]:
    """``git mv`` every entry still at its old place; the moves made."""
    made = []
    for old, new in MOVES.items():
        source, target = ROOT / old, ROOT / new
        if not source.exists():
            if not target.exists():
                print(f"neither {old} nor {new} exists: drop the entry", file=sys.stderr)
            continue
        if target.exists():
            raise SystemExit(f"both {old} and {new} exist: merge them by hand, then run again")
        _package(target.parent)
        git("mv", old, new)
        made.append(f"{old} -> {new}")
    return made


def _package(folder: Path) -> None:
    """Make ``folder`` a package (its docstring from :data:`PACKAGES`) unless it is one."""
    init = folder / "__init__.py"
    if init.exists():
        return
    name = folder.relative_to(ROOT).as_posix()
    if name not in PACKAGES:
        raise SystemExit(f"{name} is no package yet: say what it holds in PACKAGES")
    folder.mkdir(parents=True, exist_ok=True)
    init.write_text(f'"""{PACKAGES[name]}"""\n', encoding="utf-8")
    git("add", init.relative_to(ROOT).as_posix())


def rules() -> list[tuple[re.Pattern[str], str]]:
    """Old names to new ones: dotted module names (what follows them, ``.attr``, kept),
    paths from the checkout's root, and paths from ``gateway/`` (as the docs write them)."""
    found: list[tuple[re.Pattern[str], str]] = []
    for old, new in MOVES.items():
        if old.endswith(".py"):
            found.append((re.compile(rf"(?<![\w.]){re.escape(_dotted(old))}(?!\w)"), _dotted(new)))
        found.append((re.compile(rf"(?<![\w/.-]){re.escape(old)}(?![\w])"), new))
        if old.startswith("gateway/"):
            short, short_new = old.removeprefix("gateway/"), new.removeprefix("gateway/")
            found.append((re.compile(rf"(?<![\w/.-]){re.escape(short)}(?![\w])"), short_new))
    return found


#: ``from package import a, b as c`` on one line (after its indentation).
FROM_IMPORT: Final = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<package>[\w.]+) import (?P<names>[^()\n#]+?)[ \t]*$", re.M
)


def split_imports(text: str, moved: Mapping[str, str]) -> str:
    """``from gateway.x import a, b`` where ``gateway.x.a`` moved to ``gateway.x.y.a``:
    ``from gateway.x.y import a`` (and ``from gateway.x import b`` for the rest)."""

    def one(match: re.Match[str]) -> str:
        package, indent = match["package"], match["indent"]
        by_package: dict[str, list[str]] = {}
        for alias in (a.strip() for a in match["names"].split(",")):
            name = alias.split(" as ")[0].strip()
            target = moved.get(f"{package}.{name}")
            home = target.rpartition(".")[0] if target else package
            by_package.setdefault(home, []).append(alias)
        if list(by_package) == [package]:
            return match.group(0)
        return "\n".join(f"{indent}from {p} import {', '.join(n)}" for p, n in by_package.items())

    return FROM_IMPORT.sub(one, text)


#: Tokens whose text names modules as text: strings (docstrings too) and comments.
_WORDS: Final = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", -1)}


def code_spans(text: str) -> list[tuple[int, int]]:
    """Where in Python source a module's dotted name may be rewritten: import statements,
    strings and comments; never other code, where ``gateway.graphql.persisted`` may be an
    attribute of a variable called ``gateway``."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def at(row: int, col: int) -> int:
        return starts[row - 1] + col

    spans: list[tuple[int, int]] = []
    statement_start = True
    importing: int | None = None
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        kind = token.type
        if kind in _WORDS:
            spans.append((at(*token.start), at(*token.end)))
        elif kind == tokenize.NAME and statement_start and token.string in ("import", "from"):
            importing = at(*token.start)
        if kind in (tokenize.NEWLINE, tokenize.ENDMARKER) and importing is not None:
            spans.append((importing, at(*token.end)))
            importing = None
        statement_start = kind in (
            tokenize.NEWLINE,
            tokenize.NL,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.COMMENT,
        ) or (kind == tokenize.OP and token.string == ";")
    return spans


def combined(found: list[tuple[re.Pattern[str], str]]) -> tuple[re.Pattern[str], list[str]]:
    """The rules as one pattern (a group each, ``r<i>``) and their replacements: one pass
    a file (a replacement never matches another rule, so one pass is all of them)."""
    pattern = "|".join(f"(?P<r{i}>{rule.pattern})" for i, (rule, _) in enumerate(found))
    return re.compile(pattern), [replacement for _, replacement in found]


def substitute(pattern: re.Pattern[str], replacements: list[str], text: str, python: bool) -> str:
    """Every rule applied to ``text``; in Python, only where :func:`code_spans` allows."""
    if pattern.search(text) is None:
        return text
    spans = code_spans(text) if python else [(0, len(text))]

    def one(match: re.Match[str]) -> str:
        if not any(a <= match.start() < b for a, b in spans):
            return match.group(0)
        return replacements[int((match.lastgroup or "r0")[1:])]

    return pattern.sub(one, text)


#: The line length of the code (``[tool.ruff] line-length``).
LIMIT: Final = 100


def wrap_long(text: str, names: Iterable[str]) -> str:
    """Comment and docstring lines that a longer name made too long, wrapped at a space
    (the rest on a line of its own, with the same indentation and comment marker)."""
    names = tuple(names)
    lines = text.splitlines(keepends=True)
    prose: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.STRING and token.start[0] != token.end[0]:
            prose.update(range(token.start[0] - 1, token.end[0]))
        elif token.type == tokenize.COMMENT and token.line.lstrip().startswith("#"):
            prose.add(token.start[0] - 1)
    out = []
    for number, line in enumerate(lines):
        body = line.rstrip("\n")
        if number not in prose or len(body) <= LIMIT or not any(n in body for n in names):
            out.append(line)
            continue
        stripped = body.lstrip()
        prefix = body[: len(body) - len(stripped)]
        if stripped.startswith("#"):
            prefix += "#: " if stripped.startswith("#: ") else "# "
        while len(body) > LIMIT:
            cut = body.rfind(" ", len(prefix) + 1, LIMIT + 1)
            if cut <= len(prefix):
                break
            out.append(body[:cut] + "\n")
            body = prefix + body[cut + 1 :]
        out.append(body + line[len(line.rstrip("\n")) :])
    return "".join(out)


def texts() -> Iterable[Path]:
    listed = git("ls-files", "-z", "--", *TREES, *FILES).split("\0")
    for name in filter(None, listed):
        path = ROOT / name
        if name == HERE or any(s in f"/{name}" for s in SKIP) or not path.is_file():
            continue
        if path.suffix in TEXT or path.name in FILES:
            yield path


def rewrite() -> list[Path]:
    """Every reference to an old place, rewritten; the files changed."""
    pattern, replacements = combined(rules())
    moved = {_dotted(o): _dotted(n) for o, n in MOVES.items() if o.endswith(".py")}
    changed = []
    for path in texts():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        python = path.suffix == ".py"
        new = split_imports(text, moved) if python else text
        new = substitute(pattern, replacements, new, python)
        if python and new != text:
            new = wrap_long(new, replacements)
        for old, replacement in LITERALS.items():
            new = new.replace(old, replacement)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def tidy(changed: list[Path]) -> None:
    """Imports sorted and code formatted where the rewrite touched Python."""
    python = [str(p) for p in changed if p.suffix == ".py"]
    if not python:
        return
    ruff = str(ROOT / ".venv" / "bin" / "ruff")
    # Sorting only: an error left (none expected) is the later lint's to report.
    sorting = [ruff, "check", "--select", "I", "--fix", "--quiet", *python]
    subprocess.run(sorting, cwd=ROOT, check=False)
    subprocess.run([ruff, "format", "--quiet", *python], cwd=ROOT, check=True)


def unplaced() -> list[str]:
    """Modules at the top of a regrouped package that the table neither moves nor keeps."""
    left = []
    for package, staying in STAY.items():
        for path in sorted((ROOT / package).glob("*.py")):
            if path.name not in staying:
                left.append(path.relative_to(ROOT).as_posix())
    return left


def main() -> int:
    made = move()
    changed = rewrite()
    tidy(changed)
    print(f"moved {len(made)}, rewrote {len(changed)} files")
    for line in made:
        print(f"  {line}")
    left = unplaced()
    for name in left:
        print(f"not placed: {name} (add it to MOVES or STAY)", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
