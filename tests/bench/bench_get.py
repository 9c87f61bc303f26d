"""Benchmark: get one pod through the gateway (GraphQL and gRPC) against a direct upstream get
of the same pod (same run, latency added and requests per second), at concurrency 1 and 32.

    .venv/bin/python -m tests.bench.bench_get [--requests 400] [--concurrency 1,32] \\
        [--rounds 5] [--out BENCHMARKS.md]

Not a timed test: it prints absolute numbers and the ratios.  Every party is a process of its
own: the demo upstream holding one realistic pod (``bench_loop_hold``'s, a child process), the
gateway (``kube-gateway serve``, as in ``bench_fanout``) and the Go load clients the project
builds (``tests/go-client/build.sh load``: ``hey`` for HTTP, ``ghz`` for gRPC, as
``bench_rps`` uses them), so neither the clients' work nor the upstream's shares the gateway's
interpreter, and at concurrency 32 the clients are not what is measured.

* **direct**: ``hey`` GET of the pod at the demo upstream (HTTP/1.1, keep-alive);
* **GraphQL**: ``hey`` ``POST /graphql`` ``pod(namespace, name)`` selecting 15 fields;
* **gRPC**: ``ghz`` calls of ``PodService/Get`` (one HTTP/2 connection).

Per concurrency, ``--rounds`` rounds in turns (direct, GraphQL, gRPC) of ``--requests``
requests each after a warm-up; the figures are the medians of the rounds' p50 and requests/s.
At concurrency 1 the clients are those of ``bench_rps``'s p50 rows (``tests/bench/latency.py``:
``vegeta`` for HTTP, ``ghz``'s per-call details for gRPC), each request timed to the ns, and
the added p50 a row is judged on is the median of the rounds' differences to the direct
get's (their spread in the note); at 32, hey's and ghz's summaries.
Around each round the CPU time (``/proc``) of the gateway and of the upstream is read: the
notes give the gateway's CPU per request and the machine's load.  The upstream answers the
direct get and the gateway's alike; on the 2 shared CPUs the gateway's own CPU per request,
and at concurrency 32 the CPUs the upstream leaves it, bound the gateway's rows.  ``bench_rps``
measures the same gets on a real kube-apiserver.  ``--out`` puts the rows into that
``BENCHMARKS.md`` (its rows of the first table and their lines of the goals not met).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.bench.bench_fanout import Gateway, gateway
from tests.bench.bench_graphql_list import NAMESPACE, TOKEN, _manifest
from tests.bench.bench_loop_hold import upstream_process
from tests.bench.bench_rps import Load, Run, added_row, cpu_ms, load_clients, protoset
from tests.bench.latency import Rounds, Timed
from tests.bench.report import Row, row, write_rows

NAME = _manifest(0)["metadata"]["name"]
QUERY = """query($ns: String!, $name: String!) {
  pod(namespace: $ns, name: $name) {
    metadata { name namespace uid resourceVersion creationTimestamp labels }
    spec { nodeName serviceAccountName containers { name image } }
    status { phase podIP hostIP startTime qosClass }
  }
}"""
MODES = ("direct", "graphql", "grpc")
ADDED_GOAL_MS = 1.0
JSON = "application/json"
#: The first table's rows this bench writes (what ``--out`` replaces), by their start.
OWNS = ("get one pod, ",)


async def bench(
    requests: int, concurrencies: list[int], rounds: int = 3
) -> dict[tuple[str, int], dict[str, float]]:
    """Prints the figures and returns them by (mode, concurrency): ``p50`` ms, ``rps``, and
    ``cpu`` (the gateway's CPU per request, ms; the upstream's for direct)."""
    hey, ghz = load_clients()
    out: dict[tuple[str, int], dict[str, float]] = {}
    async with upstream_process(1) as (upstream_url, upstream_pid), gateway(upstream_url, 64) as gw:
        with tempfile.TemporaryDirectory(prefix="kg-get-") as d:
            load = Load(hey, ghz, protoset(Path(d) / "pods.protoset"), TOKEN)
            body = json.dumps({"query": QUERY, "variables": {"ns": NAMESPACE, "name": NAME}})
            graphql = f"http://127.0.0.1:{gw.http_port}/graphql"
            async with httpx.AsyncClient() as check:  # hey counts statuses, not GraphQL errors
                answer = await check.post(
                    graphql,
                    content=body,
                    headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": JSON},
                )
                assert answer.json()["data"]["pod"]["metadata"]["name"] == NAME, answer.text
            direct = f"{upstream_url}/api/v1/namespaces/{NAMESPACE}/pods/{NAME}"
            target = f"127.0.0.1:{gw.grpc_port}"
            get = {"namespace": NAMESPACE, "name": NAME}
            call = "kubegateway.v1.PodService.Get"
            fns: dict[str, Callable[[int, int], Run]] = {
                "direct": lambda n, c: load.hey(direct, None, n, c),
                "graphql": lambda n, c: load.hey(graphql, body.encode(), n, c),
                "grpc": lambda n, c: load.ghz(target, call, get, n, c),
            }
            # one at a time: each request's latency to the ns (bench_rps's clients)
            ones: dict[str, Callable[[int], Timed]] = {
                "direct": lambda n: load.one_http(direct, None, n),
                "graphql": lambda n: load.one_http(graphql, body.encode(), n),
                "grpc": lambda n: load.one_grpc(target, call, get, n),
            }
            for c in concurrencies:
                if c == 1:
                    out.update(await _one_at_a_time(ones, requests, rounds, upstream_pid, gw))
                    continue
                runs: dict[str, list[tuple[Run, float]]] = {m: [] for m in MODES}
                for mode in MODES:  # warm: connections, caches, code paths
                    fns[mode](max(2 * c, requests // 10), c)
                for _ in range(rounds):
                    for mode in MODES:
                        pid = upstream_pid if mode == "direct" else gw.proc.pid
                        before = cpu_ms(pid)
                        run = await asyncio.to_thread(fns[mode], requests, c)
                        runs[mode].append((run, (cpu_ms(pid) - before) / run.requests))
                for mode in MODES:
                    out[mode, c] = {
                        "p50": statistics.median(r.p50_ms for r, _ in runs[mode]),
                        "rps": statistics.median(r.rps for r, _ in runs[mode]),
                        "cpu": statistics.median(cpu for _, cpu in runs[mode]),
                        "load": os.getloadavg()[0],
                    }
    print(f"get one pod over loopback, {rounds} rounds of {requests} gets per mode:")
    print(
        f"  {'':10}{'concurrency':>12}{'p50 ms':>10}{'added ms':>10}{'req/s':>10}"
        f"{'CPU ms/req':>12}{'load':>6}"
    )
    for c in concurrencies:
        base = out["direct", c]["p50"]
        for mode in MODES:
            r = out[mode, c]
            print(
                f"  {mode:10}{c:>12}{r['p50']:10.3f}{r.get('added', r['p50'] - base):10.3f}"
                f"{r['rps']:10.0f}"
                f"{r['cpu']:12.3f}{r['load']:6.1f}"
            )
    return out


async def _one_at_a_time(
    ones: dict[str, Callable[[int], Timed]],
    requests: int,
    rounds: int,
    upstream_pid: int,
    gw: Gateway,
) -> dict[tuple[str, int], dict[str, float]]:
    """The figures at concurrency 1 (:mod:`tests.bench.latency`): per round every mode in
    turn, ``requests`` one at a time, each request timed to the ns; the p50 the median of the
    rounds' p50s, the added latency the median of the rounds' differences to the direct
    get's (with their least and greatest), the CPU per request read around each run."""
    for mode in MODES:  # warm: connections, caches, code paths
        await asyncio.to_thread(ones[mode], 20)
    runs: dict[str, list[Timed]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(rounds):
        for mode in MODES:
            pid = upstream_pid if mode == "direct" else gw.proc.pid
            before = cpu_ms(pid)
            run = await asyncio.to_thread(ones[mode], requests)
            runs[mode].append(run)
            cpu[mode].append((cpu_ms(pid) - before) / len(run.ms))
    direct = Rounds(tuple(runs["direct"]))
    out: dict[tuple[str, int], dict[str, float]] = {}
    for mode in MODES:
        measured = Rounds(tuple(runs[mode]))
        added, low, high = measured.added(direct)
        out[mode, 1] = {
            "p50": measured.p50,
            "p99": measured.p99,
            "rps": measured.rps,
            "cpu": statistics.median(cpu[mode]),
            "load": os.getloadavg()[0],
            "added": added,
            "added_low": low,
            "added_high": high,
            "rounds": rounds,
        }
    return out


def rows(
    requests: int = 400, concurrencies: tuple[int, ...] = (1, 32), rounds: int = 5
) -> list[Row]:
    """Measure (printing the details) and return the rows of the benchmark table."""
    return figure_rows(asyncio.run(bench(requests, list(concurrencies), rounds)), concurrencies)


def figure_rows(
    r: dict[tuple[str, int], dict[str, float]], concurrencies: tuple[int, ...]
) -> list[Row]:
    """The table's rows of :func:`bench`'s figures: each p50 judged on the latency it adds
    to the direct get's."""
    out: list[Row] = []
    names = {"graphql": "GraphQL", "grpc": "gRPC"}
    for concurrency in concurrencies:
        direct = r["direct", concurrency]
        for mode, name in names.items():
            figure = r[mode, concurrency]
            judged = None
            if "added" in figure:  # at 1: the median of the rounds' differences
                judged = (figure["added"], figure["added_low"], figure["added_high"])
            out.append(
                added_row(
                    f"get one pod, {name}, p50, concurrency {concurrency}",
                    figure["p50"],
                    direct["p50"],
                    f"; p99 {figure['p99']:.3f} ms" if "p99" in figure else "",
                    goal_ms=ADDED_GOAL_MS,
                    added=judged,
                    rounds=int(figure.get("rounds", 0)),
                )
            )
        for mode, name in names.items():
            figure = r[mode, concurrency]
            out.append(
                row(
                    f"get one pod, {name}, requests/s, concurrency {concurrency}",
                    figure["rps"],
                    "req/s",
                    direct["rps"],
                    note=f"gateway CPU {figure['cpu']:.2f} ms per request, "
                    f"upstream {direct['cpu']:.2f} ms per direct get",
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="put the rows into this file")
    args = parser.parse_args()
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    if args.out is not None:
        write_rows(args.out, rows(args.requests, tuple(concurrencies), args.rounds), OWNS)
    else:
        asyncio.run(bench(args.requests, concurrencies, args.rounds))


if __name__ == "__main__":
    main()
