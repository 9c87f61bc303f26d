"""The projection fast path against graphql-core's standard executor, on generated queries.

Every query is generated (a seeded generator: the same cases on every run) over the full
``Pod`` type of the gateway's schema: every field of every type ``Pod`` reaches, nested
objects, lists, the JSON map scalars, aliases, inline and named fragments, ``__typename``,
``@skip``/``@include`` (literal and variable), the same field selected twice with different
subselections, ``raw``, and the link fields (``Pod.events``, ``ObjectReference.pod``) mixed
in.  The data is generated for the query's selection and then damaged at a chosen rate:
nulls (also where the schema declares non-null), wrong shapes (a string where an object is
expected, a list where a scalar is, a map where a list is), out-of-range ``Int`` and ``Long``,
missing and unknown keys.

Each query runs twice on the same schema, root value and (fresh, identical) loaders: through
the gateway's executor (``Engine.executor_class``, the projection) and through graphql-core's
standard ``Executor``.  The responses must be identical: ``data``, the errors (message, path,
locations, extensions, in order) and the JSON bytes the transports write.  Some cases hold a
list long enough (``LARGE_LIST`` items and more) for the projection's sliced completion, with
the damage in a late slice.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import gc
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson
import pytest
from graphql import (
    DocumentNode,
    ExecutionResult,
    FieldsOnCorrectTypeRule,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
    GraphQLSchema,
    KnownDirectivesRule,
    KnownFragmentNamesRule,
    OverlappingFieldsCanBeMergedRule,
    PossibleFragmentSpreadsRule,
    ScalarLeafsRule,
    UniqueDirectivesPerLocationRule,
    execute,
    parse,
    validate,
)
from strawberry.dataloader import DataLoader

from gateway.core.lists import projections as projectcode
from gateway.core.lists.large import LARGE_LIST
from gateway.graphql.engine import projection
from gateway.graphql.engine.execution import Engine, format_result
from gateway.graphql.engine.limits import Limits
from gateway.graphql.engine.projection import SLICE
from gateway.graphql.schemas._library import NOT_COMPLETED, Fields, graphql_schema
from gateway.graphql.schemas.schema import gateway_schema

CASES = 300
#: The validation rules a generated document could break (the variable rules, the slowest,
#: hold by construction); the hand-written documents get every rule.
RULES = (
    FieldsOnCorrectTypeRule,
    ScalarLeafsRule,
    OverlappingFieldsCanBeMergedRule,
    KnownFragmentNamesRule,
    PossibleFragmentSpreadsRule,
    KnownDirectivesRule,
    UniqueDirectivesPerLocationRule,
)
#: Link fields: resolved by the loaders of the operation, not read from the object.
LINKS = {("Pod", "events"), ("ObjectReference", "pod")}


# -- the schema: the gateway's types under a root that serves a generated value ------------


def _from_root(key: str) -> Any:
    def resolve(root: Any, _info: Any) -> Any:
        return root[key]

    return resolve


def _from_root_async(key: str) -> Any:
    async def resolve(root: Any, _info: Any) -> Any:
        return root[key]

    return resolve


@functools.cache
def _setup() -> tuple[GraphQLSchema, Engine]:
    """A schema whose root fields return the root value's parts, typed with the gateway's
    own ``Pod`` and ``PodList`` (their fields, resolvers and scalars are the gateway's)."""
    engine = Engine(gateway_schema(), Limits())
    types = graphql_schema(gateway_schema()).type_map
    pod, pod_list = types["Pod"], types["PodList"]
    assert isinstance(pod, GraphQLObjectType) and isinstance(pod_list, GraphQLObjectType)
    query = GraphQLObjectType(
        "Query",
        {
            "pod": GraphQLField(pod, resolve=_from_root("pod")),
            "podAsync": GraphQLField(pod, resolve=_from_root_async("pod")),
            "strictPod": GraphQLField(GraphQLNonNull(pod), resolve=_from_root("pod")),
            "pods": GraphQLField(pod_list, resolve=_from_root_async("list")),
            "podsSync": GraphQLField(pod_list, resolve=_from_root("list")),
            # a value only the execution holds, as a decoded upstream body is
            "podsFresh": GraphQLField(pod_list, resolve=lambda root, _info: root["fresh"]()),
            "items": GraphQLField(GraphQLList(pod), resolve=_from_root("items")),
            "strictItems": GraphQLField(
                GraphQLNonNull(GraphQLList(GraphQLNonNull(pod))), resolve=_from_root_async("items")
            ),
        },
    )
    schema = GraphQLSchema(query, directives=graphql_schema(gateway_schema()).directives)
    return schema, engine


ROOTS: dict[str, tuple[str, str]] = {
    # field: (root value key, the shape of the value)
    "pod": ("pod", "Pod"),
    "podAsync": ("pod", "Pod"),
    "strictPod": ("pod", "Pod!"),
    "pods": ("list", "PodList"),
    "podsSync": ("list", "PodList"),
    "items": ("items", "[Pod]"),
    "strictItems": ("items", "[Pod!]!"),
}


# -- the loaders of the link fields ----------------------------------------------------------


class _Loaders:
    """What the link resolvers read through ``info.context.loaders``: generated answers."""

    def __init__(self, events: Any, pod: Any) -> None:
        async def load_events(keys: Sequence[Any]) -> list[Any]:
            return [events for _ in keys]

        async def load_pods(keys: Sequence[Any]) -> list[Any]:
            return [pod for _ in keys]

        self.pod_events: DataLoader[Any, Any] = DataLoader(load_fn=load_events)
        self.pods: DataLoader[Any, Any] = DataLoader(load_fn=load_pods)


@dataclass
class _Context:
    loaders: _Loaders


# -- the generator ---------------------------------------------------------------------------


@dataclass
class Sel:
    """A selection set: fields ``(response key, name, directives, sub)`` and fragments
    ``(None, None, directives, sub)`` (inline or named: both select on the same type)."""

    items: list[tuple[str | None, str | None, str, Sel | None]] = field(default_factory=list)

    def fields(self) -> dict[str, list[Sel | None]]:
        """Every field name selected here, through fragments, with its subselections."""
        out: dict[str, list[Sel | None]] = {}
        for _key, name, _directives, sub in self.items:
            if name is None:
                assert sub is not None
                for n, subs in sub.fields().items():
                    out.setdefault(n, []).extend(subs)
            else:
                out.setdefault(name, []).append(sub)
        return out


def _named(t: GraphQLOutputType) -> Any:
    while isinstance(t, GraphQLNonNull | GraphQLList):
        t = t.of_type
    return t


class Generator:
    """A query over a root field and a value for it, from one seeded ``random.Random``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.damage = self.rng.choice((0.0, 0.0, 0.01, 0.04, 0.12))
        self.fragments: list[str] = []
        self.variables: set[str] = set()
        self.aliases = 0

    # the document

    def _directives(self) -> str:
        r = self.rng.random()
        if r > 0.12:
            return ""
        which = self.rng.choice(("skip", "include"))
        arg = self.rng.choice(("true", "false", "$yes", "$no"))
        if arg.startswith("$"):
            self.variables.add(arg[1:])
        return f" @{which}(if: {arg})"

    def selection(self, t: GraphQLObjectType, depth: int) -> Sel:
        rng = self.rng
        sel = Sel()
        names = list(t.fields)
        count = rng.randint(1, min(len(names), 5 if depth < 2 else 2))
        for name in rng.sample(names, count):
            f = t.fields[name]
            named = _named(f.type)
            if (t.name, name) in LINKS and (depth > 2 or rng.random() < 0.6):
                continue
            sub: Sel | None = None
            if isinstance(named, GraphQLObjectType):
                if depth >= 4:
                    continue
                sub = self.selection(named, depth + 1)
            key = name
            if rng.random() < 0.15:
                self.aliases += 1
                key = f"a{self.aliases}"
            sel.items.append((key, name, self._directives(), sub))
            if sub is not None and rng.random() < 0.1:
                # the same field again, other subfields: merged by the executor
                sel.items.append((key, name, "", self.selection(named, depth + 1)))
        if rng.random() < 0.15:
            sel.items.append(("__typename", "__typename", self._directives(), None))
        if depth < 4 and rng.random() < 0.12:
            sel.items.append((None, None, self._directives(), self.selection(t, depth + 1)))
        if not sel.items:
            sel.items.append(("__typename", "__typename", "", None))
        return sel

    def render(self, t: GraphQLObjectType, sel: Sel) -> str:
        parts = []
        for key, name, directives, sub in sel.items:
            if name is None:
                assert sub is not None
                body = self.render(t, sub)
                if self.rng.random() < 0.5:
                    cond = self.rng.choice(("", f" on {t.name}"))
                    parts.append(f"...{cond}{directives} {body}")
                else:
                    fragment = f"F{len(self.fragments)}"
                    self.fragments.append(f"fragment {fragment} on {t.name} {body}")
                    parts.append(f"...{fragment}{directives}")
                continue
            head = name if key == name else f"{key}: {name}"
            if sub is not None:
                named = _named(t.fields[name].type)
                parts.append(f"{head}{directives} {self.render(named, sub)}")
            else:
                parts.append(f"{head}{directives}")
        return "{ " + " ".join(parts) + " }"

    # the data

    def _damaged(self) -> bool:
        return self.rng.random() < self.damage

    def _wrong_shape(self) -> Any:
        return self.rng.choice(("text", ["a", 1], {"x": 1}, 7, 2.5, True, [], {}))

    def value(self, t: GraphQLOutputType, subs: list[Sel | None]) -> Any:
        rng = self.rng
        if isinstance(t, GraphQLNonNull):
            if self._damaged():
                return None  # null where the schema says non-null
            return self.value(t.of_type, subs)
        if self._damaged():
            return None if rng.random() < 0.4 else self._wrong_shape()
        if rng.random() < 0.05:
            return None
        if isinstance(t, GraphQLList):
            return [self.value(t.of_type, subs) for _ in range(rng.randint(0, 3))]
        if isinstance(t, GraphQLScalarType):
            return self.scalar(t.name)
        assert isinstance(t, GraphQLObjectType)
        return self.object(t, subs)

    def object(self, t: GraphQLObjectType, subs: list[Sel | None]) -> dict[str, Any]:
        rng = self.rng
        selected: dict[str, list[Sel | None]] = {}
        for sub in subs:
            if sub is not None:
                for name, more in sub.fields().items():
                    selected.setdefault(name, []).extend(more)
        out: dict[str, Any] = {}
        for name, more in selected.items():
            if name == "__typename" or (t.name, name) in LINKS:
                continue
            if name == "raw":
                continue
            if self._damaged() and rng.random() < 0.5:
                continue  # a missing key
            out[name] = self.value(t.fields[name].type, more)
        if rng.random() < 0.1:
            out["unknownField"] = {"a": [1, None]}
        if rng.random() < 0.05 and selected:
            out[next(iter(selected)) + "_"] = "junk"
        return out

    def scalar(self, name: str) -> Any:
        rng = self.rng
        damaged = self._damaged()
        if name == "Int":
            if damaged:
                return rng.choice((2**31, -(2**31) - 1, 2**40, 1.5, 3.0, "12", True, None))
            return rng.randint(-(2**31), 2**31 - 1)
        if name == "Long":
            if damaged:
                return rng.choice((2**63, 2**64 - 1, 2.0, 2.5, "99", "x", False))
            return rng.randint(-(2**63), 2**63 - 1)
        if name == "Boolean":
            if damaged:
                return rng.choice((0, 1, 2.5, "true", [True]))
            return rng.random() < 0.5
        if name == "IntOrString":
            if damaged:
                return rng.choice((1.5, True, {"a": 1}, [1]))
            return rng.choice((8080, "http", "25%"))
        if name == "Quantity":
            if damaged:
                return rng.choice((2, 0.5, True, {"a": 1}, None))
            return rng.choice(("500m", "1Gi", "2"))
        if name == "JSON":
            return rng.choice(({"a": "b"}, {"k": {"n": [1, None, "x"]}}, [], "s", 3, {}))
        # String, Time, MicroTime
        if damaged:
            return rng.choice((5, 2.5, False, ["x"], {"y": 1}))
        return rng.choice(("a", "pod-1", "2024-01-02T03:04:05Z", "", "ü"))

    def case(self, large: bool) -> tuple[str, dict[str, Any], dict[str, Any], Any, Any]:
        """A document, its variables, the root value and the loaders' answers."""
        rng = self.rng
        schema, _ = _setup()
        roots = rng.sample(list(ROOTS), rng.randint(1, 3))
        if large:
            roots = [rng.choice(("pods", "podsSync", "items", "strictItems"))]
        pod_type = schema.type_map["Pod"]
        list_type = schema.type_map["PodList"]
        assert isinstance(pod_type, GraphQLObjectType) and isinstance(list_type, GraphQLObjectType)
        parts: list[str] = []
        pod_subs: list[Sel | None] = []
        list_subs: list[Sel | None] = []
        for i, root in enumerate(roots):
            shape = ROOTS[root][1]
            t = list_type if shape == "PodList" else pod_type
            sel = self.selection(t, 0)
            if shape == "PodList" and large and "items" not in sel.fields():
                sel.items.append(("items", "items", "", self.selection(pod_type, 1)))
            (list_subs if shape == "PodList" else pod_subs).append(sel)
            alias = f"r{i}: " if rng.random() < 0.3 else ""
            parts.append(f"{alias}{root} {self.render(t, sel)}")
        variables = {"yes": True, "no": False}
        declared = "".join(f"${v}: Boolean!, " for v in sorted(self.variables))
        head = f"query Q({declared.rstrip(', ')})" if self.variables else "query Q"
        document = "\n".join([f"{head} {{ {' '.join(parts)} }}", *self.fragments])
        # Values for every root at once (unused ones are harmless).
        item_subs: list[Sel | None] = list(pod_subs)
        for sub in list_subs:
            if sub is not None:
                item_subs.extend(sub.fields().get("items", []))
        pod_list_type = GraphQLList(pod_type)
        if large:
            count = LARGE_LIST + rng.randint(1, LARGE_LIST // 2)
            damage, self.damage = self.damage, 0.0
            items = [self.object(pod_type, item_subs) for _ in range(count)]
            self.damage = damage
            if rng.random() < 0.5:
                # one damaged item, late: past the first slice
                late = rng.randint(count // 2, count - 1)
                self.damage = 0.3
                items[late] = self.value(pod_type, item_subs)
                self.damage = damage
        else:
            items = self.value(pod_list_type, item_subs)
        pod_list = self.object(list_type, list_subs)
        if isinstance(pod_list, dict) and (large or rng.random() < 0.7):
            pod_list["items"] = items
        root_value = {"pod": self.value(pod_type, pod_subs), "list": pod_list, "items": items}
        if rng.random() < 0.05:
            root_value = {"pod": None, "list": "not a list object", "items": {"not": "a list"}}
        events_subs = [s for sub in item_subs if sub for s in sub.fields().get("events", [])]
        event_type = _named(pod_type.fields["events"].type)
        events = self.value(GraphQLList(GraphQLNonNull(event_type)), events_subs)
        linked = self.value(pod_type, pod_subs)
        return document, variables, root_value, events, linked


# -- running both ---------------------------------------------------------------------------


class _Counting:
    projected = 0
    sliced = 0
    by_worker = 0
    read_in_part = 0


@functools.cache
def _counting_executor() -> type[Any]:
    """The gateway's executor class, counting values it completed itself (not a change of
    behaviour: the same method, its result counted)."""
    _, engine = _setup()
    base = engine.executor_class

    class Counting(base):  # type: ignore[misc, valid-type]
        def complete_directly(
            self, return_type: GraphQLOutputType, fields: Fields, result: Any
        ) -> Any:
            done = super().complete_directly(return_type, fields, result)
            if done is not NOT_COMPLETED:
                _Counting.projected += 1
                if asyncio.iscoroutine(done) or asyncio.isfuture(done):
                    _Counting.sliced += 1
            return done

    return Counting


def _as_read(spec: projectcode.Spec, value: Any) -> Any:
    """``value`` as a list worker reads it: its JSON decoded only where ``spec`` reads
    (``projectcode.reader``), or whole where that reader refuses it (as a worker does)."""
    try:
        read = projectcode.reader(projectcode.shape(spec))(orjson.dumps(value))
    except (TypeError, msgspec.DecodeError, RecursionError):  # TypeError: not JSON
        return value
    _Counting.read_in_part += 1
    return read


@functools.cache
def _worker_executor() -> type[Any]:
    """The gateway's executor completing every value it has a plan for as a list worker
    would: the value read only where the plan reads, the plan rebuilt from its plain-data
    form (:func:`projectcode.build`, with no scalar serialiser), the value given back to the
    gateway's own completion only when that raises ``Fallback``."""
    _, engine = _setup()
    base = engine.executor_class

    class AsAWorker(base):  # type: ignore[misc, valid-type]
        def complete_directly(
            self, return_type: GraphQLOutputType, fields: Fields, result: Any
        ) -> Any:
            if type(return_type) is not GraphQLScalarType:
                plan = self._plan(return_type, fields)
                if plan is not None:
                    try:
                        done = projectcode.build(plan.spec)(_as_read(plan.spec, result))
                    except projectcode.Fallback:
                        pass
                    else:
                        _Counting.by_worker += 1
                        return done
            return super().complete_directly(return_type, fields, result)

    return AsAWorker


async def _run(
    document: DocumentNode,
    variables: dict[str, Any],
    root: Any,
    events: Any,
    linked: Any,
    *,
    fast: bool,
    worker: bool = False,
) -> ExecutionResult:
    schema, _ = _setup()
    executor = _worker_executor() if worker else _counting_executor() if fast else None
    result = execute(
        schema,
        document,
        root_value=root,
        context_value=_Context(_Loaders(events, linked)),
        variable_values=variables,
        executor_class=executor,
    )
    if asyncio.iscoroutine(result) or asyncio.isfuture(result):
        result = await result
    assert isinstance(result, ExecutionResult)
    return result


def _errors(result: ExecutionResult) -> list[tuple[str, Any, Any]]:
    return [(e.message, e.path, e.locations) for e in result.errors or []]


async def _compare(seed: int, large: bool = False, *, worker: bool = False) -> None:
    text, variables, root, events, linked = Generator(seed).case(large)
    schema, _ = _setup()
    document = parse(text)
    assert validate(schema, document, RULES) == [], text
    before = copy.deepcopy((root, events, linked))
    standard = await _run(document, variables, root, events, linked, fast=False)
    fast = await _run(document, variables, root, events, linked, fast=True, worker=worker)
    where = f"seed {seed}:\n{text}"
    assert fast.data == standard.data, where
    assert _errors(fast) == _errors(standard), where
    response_fast, response_standard = format_result(fast), format_result(standard)
    assert response_fast == response_standard, where
    assert orjson.dumps(response_fast) == orjson.dumps(response_standard), where
    # The projection never changes the upstream values it reads.
    assert (root, events, linked) == before, where


async def _compare_again(seed: int) -> None:
    """One document executed repeatedly, as a cached document is across requests: first with
    its variables, then again (its plans now shared), then with every Boolean variable
    flipped (what ``@skip``/``@include`` select changes: a plan compiled under the first
    values must not serve the second)."""
    text, variables, root, events, linked = Generator(seed).case(False)
    document = parse(text)
    flipped = {k: (not v) if isinstance(v, bool) else v for k, v in variables.items()}
    for values in (variables, variables, flipped, variables):
        standard = await _run(document, values, root, events, linked, fast=False)
        fast = await _run(document, values, root, events, linked, fast=True)
        where = f"seed {seed}, variables {values}:\n{text}"
        assert fast.data == standard.data, where
        assert _errors(fast) == _errors(standard), where


async def test_plans_shared_across_executions_follow_the_variables() -> None:
    base = _setup()[1].executor_class
    for seed in range(0, CASES, 3):
        await _compare_again(seed)
    # Plans are shared (the repeated executions hit them), and the cache stays bounded.
    assert 0 < len(base.shared_plans) <= projection.SHARED_PLANS


async def test_generated_queries_complete_as_the_standard_executor_does() -> None:
    _Counting.projected = 0
    for seed in range(CASES):
        await _compare(seed)
    # The cases exercise the fast path, not only its fallbacks.
    assert _Counting.projected > CASES


async def test_generated_queries_projected_as_a_list_worker_would_complete_the_same() -> None:
    """What a list worker answers (gateway.core.lists.jobs) is the standard executor's answer
    wherever it answers at all: the plans' plain-data form builds the same projection."""
    _Counting.by_worker = _Counting.read_in_part = 0
    for seed in range(CASES):
        await _compare(seed, worker=True)
    for seed in range(4):
        await _compare(10_000 + seed, large=True, worker=True)
    assert _Counting.by_worker > CASES
    assert _Counting.read_in_part > CASES  # values read in part, not only whole


async def test_sliced_large_lists_complete_as_the_standard_executor_does() -> None:
    _Counting.sliced = 0
    for seed in range(8):
        await _compare(10_000 + seed, large=True)
    assert _Counting.sliced > 0


@pytest.mark.parametrize(
    ("value", "selection"),
    [
        # out-of-range Int, in a list of objects
        (
            {"spec": {"containers": [{"ports": [{"containerPort": 2**31}]}]}},
            "spec { containers { ports { containerPort } } }",
        ),
        # Long beyond 64 bits
        ({"metadata": {"generation": 2**64}}, "metadata { generation }"),
        # a string where an object is expected
        ({"metadata": "text"}, "metadata { name }"),
        # a list where a scalar is expected
        ({"metadata": {"name": ["a"]}}, "metadata { name }"),
        # a map where a list is expected
        ({"spec": {"containers": {"name": "x"}}}, "spec { containers { name } }"),
        # null inside a list, and a missing key
        ({"spec": {"containers": [None, {}]}}, "spec { containers { name image } }"),
        # a Boolean given as a number, an Int given as a float and as a string
        (
            {"spec": {"hostNetwork": 1, "priority": 3.0}, "status": {"phase": 5}},
            "spec { hostNetwork priority } status { phase }",
        ),
        ({"spec": {"priority": "12"}}, "spec { priority }"),
        # a keyword-named JSON key: the executor reads `continue_` first
        ({"raw": 1, "kind": "Pod"}, "raw kind __typename"),
    ],
)
async def test_hand_picked_damage(value: dict[str, Any], selection: str) -> None:
    document = f"query Q {{ pod {{ {selection} }} strictItems {{ {selection} }} }}"
    assert validate(_setup()[0], parse(document)) == []
    root = {"pod": value, "list": None, "items": [value, value]}
    standard = await _run(parse(document), {}, root, [], None, fast=False)
    fast = await _run(parse(document), {}, root, [], None, fast=True)
    assert fast.data == standard.data
    assert _errors(fast) == _errors(standard)
    assert format_result(fast) == format_result(standard)


async def test_a_large_list_is_completed_in_slices_other_tasks_running_between() -> None:
    schema, engine = _setup()
    items = [
        {"metadata": {"name": f"p{i}"}, "status": {"phase": "Running"}} for i in range(SLICE * 4)
    ]
    collector: list[bool] = []
    finished = False

    async def other() -> None:
        while not finished:
            collector.append(gc.isenabled())
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    collector.clear()
    result = execute(
        schema,
        parse("{ podsSync { items { metadata { name } status { phase } } } }"),
        root_value={"list": {"items": items}},
        executor_class=engine.executor_class,
    )
    assert asyncio.iscoroutine(result)  # the list is completed over several steps
    done = await result
    finished = True
    await task
    assert done.errors is None and done.data is not None
    assert done.data["podsSync"]["items"] == [
        {"metadata": {"name": f"p{i}"}, "status": {"phase": "Running"}} for i in range(SLICE * 4)
    ]
    # The other task ran between the four slices, the collector held off all along.
    assert len(collector) >= 3
    assert collector[:3] == [False, False, False]
    await asyncio.sleep(0)
    assert gc.isenabled()


async def test_a_large_list_nothing_else_holds_is_freed_in_slices() -> None:
    schema, engine = _setup()

    def body() -> dict[str, Any]:
        return {"items": [{"metadata": {"name": f"p{i}"}} for i in range(SLICE * 4)]}

    result = execute(
        schema,
        parse("{ podsFresh { items { metadata { name } } } }"),
        root_value={"fresh": body},
        executor_class=engine.executor_class,
    )
    assert asyncio.iscoroutine(result)
    done = await result
    assert done.errors is None and done.data is not None
    assert len(done.data["podsFresh"]["items"]) == SLICE * 4
    # The body is freed a slice per step, the collector held off until it is gone.
    turns = 0
    while not gc.isenabled():
        turns += 1
        await asyncio.sleep(0)
    assert turns >= 3
