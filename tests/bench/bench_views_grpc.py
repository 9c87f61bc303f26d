"""Benchmark: the gateway's CPU per distinct view through gRPC and through fleet views, beside
GraphQL's single-cluster view in the same run (issue 29, "Goals not met": gRPC and fleet views).

    .venv/bin/python -m tests.bench.bench_views_grpc [--pods 30000] [--fleet-pods 10000]
        [--views 60] [--rounds 3] [--only graphql,grpc,...]

The demo upstreams of :mod:`tests.bench.bench_views` (realistic pods, each upstream in a child
process): the default cluster with ``--pods`` pods, clusters ``b`` and ``c`` with
``--fleet-pods`` each; one gateway in this process serves the three (``--cluster``).  Each
case is ``--views`` distinct views (:data:`FILTER`, the newest first by ``status.startTime``,
a page of 50, the 15 fields of ``bench_graphql_list``) asked one after the other by a client
in a process of its own; the figure is this process's CPU over the client's requests
(``/proc``: the gateway, its list workers; the client is not in it) divided by the views.
Rounds take the cases in turn; printed: each case's median over the rounds and the load
average beside it.

Cases: ``graphql`` (``podsView`` of the default cluster), ``grpc`` (``ResourceService.View`` of
the same view, a read mask of the same 15 fields, objects as JSON), ``grpc-struct`` (the same
as ``Struct``s), ``grpc-whole`` (no read mask), ``fleet-graphql`` (the merged view of the three
clusters on ``/fleet/graphql``, ``nodes`` and ``edges { cluster }``), ``fleet-nodes`` (the same
without ``edges``), ``fleet-grpc`` (the
merged view through ``View`` with ``clusters``), ``fleet-each`` (``fleet { podsView }``: each
cluster's own view in one query; three views a request).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gateway.app import tune_garbage_collector
from gateway.settings import Settings
from tests.bench.bench_fleet import kubeconfig
from tests.bench.bench_graphql_list import NAMESPACE
from tests.bench.bench_views import NODES, TOKEN, _children, _cpu_of, _upstream
from tests.support.graphql import serve_app

SORT = '[{field: "status.startTime", order: DESC}]'
#: A name holding two digits (about a tenth of the pods) and a phase that none has: distinct
#: views (``$w`` never asked before in the run) that select as many pods each.
FILTER = (
    'filter: {and: [{field: "metadata.name", op: CONTAINS, value: $v}, '
    '{field: "status.phase", op: NE, value: $w}]}'
)
_PAGE = f'namespace: "{NAMESPACE}", first: 50, {FILTER}, sort: {SORT}'
_CLUSTERS = '["default", "b", "c"]'
VIEW = (
    f"query($v: String!, $w: String!) {{ podsView({_PAGE}) "
    f"{{ total resourceVersion pageInfo {{ endCursor hasNextPage }} {NODES} }} }}"
)
FLEET_VIEW = (
    f"query($v: String!, $w: String!) {{ podsView(clusters: {_CLUSTERS}, {_PAGE}) "
    f"{{ total pageInfo {{ endCursor hasNextPage }} edges {{ cluster }} {NODES} }} }}"
)
FLEET_NODES = FLEET_VIEW.replace(" edges { cluster }", "")
FLEET_EACH = (
    f"query($v: String!, $w: String!) {{ fleet(clusters: {_CLUSTERS}) {{ cluster "
    f"podsView({_PAGE}) {{ total resourceVersion pageInfo {{ endCursor hasNextPage }} "
    f"{NODES} }} }} }}"
)
#: The read mask of the same 15 fields.
MASK = [
    *(
        f"metadata.{f}"
        for f in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "labels")
    ),
    "spec.nodeName",
    "spec.serviceAccountName",
    "spec.containers.name",
    "spec.containers.image",
    *(f"status.{f}" for f in ("phase", "podIP", "hostIP", "startTime", "qosClass")),
]
CASES = (
    "graphql",
    "grpc",
    "grpc-struct",
    "grpc-whole",
    "fleet-graphql",
    "fleet-nodes",
    "fleet-grpc",
    "fleet-each",
)


def client_main() -> None:
    """The client process (argv: case, http url, grpc port, filter values...): prints
    ``ready``, waits for a line on stdin, asks each view in turn, prints ``done``."""
    case, url, port, *values = sys.argv[1:]
    import grpc
    import httpx
    import orjson

    from gateway.grpc.gen.kubegateway.v1 import resource_pb2, resource_pb2_grpc

    auth = {"Authorization": f"Bearer {TOKEN}"}
    with (
        httpx.Client(base_url=url, timeout=600) as http,
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        stub = resource_pb2_grpc.ResourceServiceStub(channel)

        def ask(value: str) -> None:
            v, w = value.split(":")
            if case.startswith("grpc") or case == "fleet-grpc":
                req = resource_pb2.ViewResourcesRequest(
                    version="v1", resource="pods", namespace=NAMESPACE, first=50
                )
                name, phase = req.filter.all_of.add(), req.filter.all_of.add()
                name.field, name.op, name.value = "metadata.name", resource_pb2.VIEW_OP_CONTAINS, v
                phase.field, phase.op, phase.value = "status.phase", resource_pb2.VIEW_OP_NE, w
                req.sort.add(field="status.startTime", order=resource_pb2.VIEW_ORDER_DESC)
                if case != "grpc-whole":
                    req.read_mask.paths.extend(MASK)
                if case == "grpc-struct":
                    req.representation = resource_pb2.REPRESENTATION_STRUCT
                if case == "fleet-grpc":
                    req.clusters.extend(["default", "b", "c"])
                answer = stub.View(req, metadata=(("authorization", f"Bearer {TOKEN}"),))
                assert answer.edges or answer.total == 0
                return
            query, path = {
                "graphql": (VIEW, "/graphql"),
                "fleet-graphql": (FLEET_VIEW, "/fleet/graphql"),
                "fleet-nodes": (FLEET_NODES, "/fleet/graphql"),
                "fleet-each": (FLEET_EACH, "/fleet/graphql"),
            }[case]
            body = orjson.loads(
                http.post(
                    path, json={"query": query, "variables": {"v": v, "w": w}}, headers=auth
                ).content
            )
            assert "errors" not in body, body["errors"]

        ask("zzz:none")  # connections open, the channel ready
        print("ready", flush=True)
        sys.stdin.readline()
        for v in values:
            ask(v)
        print("done", flush=True)


async def _client(case: str, url: str, port: int, values: list[str]) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from tests.bench.bench_views_grpc import client_main; client_main()",
        case,
        url,
        str(port),
        *values,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = (await proc.stdout.readline()).decode().strip()
    assert line == "ready", f"the client did not start: {line!r}"
    return proc


@contextlib.asynccontextmanager
async def _fleet(
    pods: int, fleet_pods: int, tmp: Path
) -> AsyncIterator[tuple[str, Any, list[int]]]:
    async with (
        _upstream(pods) as (a_url, a_pid),
        _upstream(fleet_pods) as (b_url, b_pid),
        _upstream(fleet_pods) as (c_url, c_pid),
    ):
        settings = Settings(
            host="127.0.0.1",
            http_port=0,
            grpc_port=0,
            server=a_url,
            cluster=(
                f"b={kubeconfig(tmp / 'b.yaml', b_url, TOKEN)}",
                f"c={kubeconfig(tmp / 'c.yaml', c_url, TOKEN)}",
            ),
            shared_identity_clusters="*",
            log_level="warning",
            max_list_items=pods + 1,
        )
        async with serve_app(settings) as (url, app):
            yield url, app, [a_pid, b_pid, c_pid]


async def bench(
    pods: int, fleet_pods: int, views: int, rounds: int, cases: list[str]
) -> dict[str, list[float]]:
    """Each case's CPU per view (ms), one figure per round."""
    seen: dict[str, list[float]] = {c: [] for c in cases}
    numbers = itertools.count()
    with tempfile.TemporaryDirectory() as tmp:
        async with _fleet(pods, fleet_pods, Path(tmp)) as (url, app, upstreams):
            tune_garbage_collector()
            port = app.state.runtime.grpc_port
            # every cache filled (the first views are cold: a list of each cluster)
            warm = await _client("fleet-each", url, port, ["1:warm"])
            warm2 = await _client("fleet-grpc", url, port, ["1:warm"])
            for proc in (warm, warm2):
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(b"go\n")
                await proc.stdin.drain()
                assert (await proc.stdout.readline()).strip() == b"done"
                await proc.wait()
            for n in range(rounds):
                for case in cases:
                    values = [f"{10 + n % 90}:x{n}" for n in itertools.islice(numbers, views)]
                    proc = await _client(case, url, port, values)
                    assert proc.stdin is not None and proc.stdout is not None
                    spent = _gateway_cpu_of([*upstreams, proc.pid])
                    started = time.perf_counter()
                    proc.stdin.write(b"go\n")
                    await proc.stdin.drain()
                    line = (await proc.stdout.readline()).strip()
                    took = (time.perf_counter() - started) * 1000
                    own, workers = spent()
                    await proc.wait()
                    assert line == b"done", f"{case}: the client failed"
                    per = (own + workers) / views
                    seen[case].append(per)
                    print(
                        f"round {n + 1} {case:14s} CPU {per:6.2f} ms/view "
                        f"(wall {took / views:6.1f} ms; load {os.getloadavg()[0]:.2f})",
                        flush=True,
                    )
    return seen


def _gateway_cpu_of(others_: list[int]) -> Any:
    """:func:`tests.bench.bench_views._gateway_cpu` with every process of ``others`` left
    out (the upstreams, the client): this process and its list workers, in ms."""
    others = set(others_)

    def workers_now() -> dict[int, float]:
        return {p: _cpu_of(p) for p in _children(0) if p not in others}

    own, workers = _cpu_of("self"), workers_now()

    def done() -> tuple[float, float]:
        later = workers_now()
        used = sum(cpu - workers.get(p, 0.0) for p, cpu in later.items())
        return (_cpu_of("self") - own) * 1000, used * 1000

    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument("--fleet-pods", type=int, default=10_000)
    parser.add_argument("--views", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(CASES))
    args = parser.parse_args()
    cases = [c for c in args.only.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases: {sorted(unknown)}")
    seen = asyncio.run(bench(args.pods, args.fleet_pods, args.views, args.rounds, cases))
    load = os.getloadavg()
    print(f"medians over {args.rounds} rounds (load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}):")
    for case, values in seen.items():
        print(
            f"  {case:14s} {statistics.median(values):6.2f} ms/view "
            f"(rounds: {', '.join(f'{v:.2f}' for v in values)})"
        )


if __name__ == "__main__":
    main()
