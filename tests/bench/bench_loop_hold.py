"""Benchmark: how long one large list holds the gateway's event loop from other callers.

    .venv/bin/python -m tests.bench.bench_loop_hold [--pods 5000] [--rounds 3]

Not a timed test: it prints absolute numbers and ratios.  Three processes, so that only the
gateway's own work lands on the measured loop:

* the demo upstream, seeded with ``--pods`` realistic pods (``tests/bench/realistic.py``), in
  a child process (its own serialisation of the 27 MB list would otherwise stall the loop);
* the large-list client, in a child process: ``--rounds`` GraphQL lists of every pod
  (15 fields), then ``--rounds`` gRPC ``List`` calls, one after the other;
* this process: the gateway (uvicorn + grpc.aio, in process), a ticker task that sleeps 1 ms
  at a time and records the longest gap, and a small client that gets one pod (GraphQL and
  gRPC in turns) sequentially.

Figures: p50 / p99 / max latency of the small gets while nothing else runs (idle) and while
the large lists convert (loaded), their ratios (the goal: loaded p99 ≤ 2x idle p99), and the
longest loop stall seen by the ticker in each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from typing import Any

import grpc
import httpx
import orjson

from gateway.app import tune_garbage_collector
from gateway.core.model.registry import POD
from gateway.grpc.gen.kubegateway.v1 import pods_pb2, pods_pb2_grpc
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.bench.bench_graphql_list import QUERY
from tests.bench.realistic import pod
from tests.bench.report import Row, row
from tests.support.graphql import serve_app

TOKEN = "admin-token"
NAMESPACE = "bench"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIST_QUERY = QUERY  # bench_graphql_list's 15 fields
GET_QUERY = """query($ns: String!, $name: String!) {
  pod(namespace: $ns, name: $name) { metadata { name uid } status { phase podIP } }
}"""
LIMIT = 256 * 1024 * 1024


def _manifest(i: int) -> dict[str, Any]:
    body = pod(i, NAMESPACE)
    meta = body["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    return body


# -- child processes -----------------------------------------------------------------------


async def run_upstream(pods: int, gzip: bool = True) -> None:
    """Serve the demo upstream until stdin closes; print its URL first.  ``gzip``: large
    answers gzipped for clients that accept it, as the apiserver does."""
    async with DemoUpstream(seed=False) as demo:
        demo.app.compress = gzip
        await demo.store.bulk_create(POD, (_manifest(i) for i in range(pods)), namespace=NAMESPACE)
        print(demo.url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def run_big_client(url: str, grpc_target: str, rounds: int, pods: int) -> None:
    """Large lists (GraphQL when ``url``, else gRPC), one after the other; a line per call."""
    async with httpx.AsyncClient(base_url=url or "http://unused", timeout=300) as client:
        for _ in range(rounds if url else 0):
            start = time.perf_counter()
            response = await client.post(
                "/graphql", json={"query": LIST_QUERY, "variables": {"ns": NAMESPACE}}, headers=AUTH
            )
            items = orjson.loads(response.content)["data"]["pods"]["items"]
            assert len(items) == pods
            print(f"graphql {time.perf_counter() - start:.3f}", flush=True)
    async with grpc.aio.insecure_channel(
        grpc_target, options=[("grpc.max_receive_message_length", LIMIT)]
    ) as channel:
        stub = pods_pb2_grpc.PodServiceStub(channel)
        for _ in range(0 if url else rounds):
            start = time.perf_counter()
            reply = await stub.List(
                pods_pb2.ListPodsRequest(namespace=NAMESPACE),
                metadata=(("authorization", f"Bearer {TOKEN}"),),
            )
            assert len(reply.items) == pods
            print(f"grpc {time.perf_counter() - start:.3f}", flush=True)


# -- the measured process -------------------------------------------------------------------


class Ticker:
    """Sleeps 1 ms at a time; records the longest gap between wake-ups (a loop stall)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    def reset(self) -> None:
        self.longest = 0.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _row(label: str, samples: list[float]) -> tuple[float, float]:
    p50, p99 = statistics.median(samples), _pct(samples, 0.99)
    print(
        f"  {label:<28} n={len(samples):5d}  p50 {p50 * 1000:7.2f} ms  p99 {p99 * 1000:7.2f} ms"
        f"  max {max(samples) * 1000:7.2f} ms"
    )
    return p50, p99


async def bench(pods: int, rounds: int, idle_gets: int) -> dict[str, tuple[float, float]]:
    """Prints the figures and returns them: (loaded, idle) p99 in seconds by ``"<get> during
    <phase> lists"``, and (loaded, idle) longest loop stall by ``"stall during <phase> lists"``."""
    module = "tests.bench.bench_loop_hold"
    upstream = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        "--role",
        "upstream",
        "--pods",
        str(pods),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert upstream.stdout is not None and upstream.stdin is not None
    server = (await upstream.stdout.readline()).decode().strip()
    settings = Settings(
        host="127.0.0.1", http_port=0, grpc_port=0, server=server, log_level="warning"
    )
    thresholds = gc.get_threshold()
    try:
        async with (
            serve_app(settings) as (url, app),
            httpx.AsyncClient(base_url=url, timeout=60) as client,
        ):
            grpc_target = f"127.0.0.1:{app.state.runtime.grpc_port}"
            # as `kube-gateway serve` does once started: otherwise every full collection walks
            # what start-up built (~130,000 objects, 70-80 ms of one loop step)
            tune_garbage_collector()
            channel = grpc.aio.insecure_channel(grpc_target)
            stub = pods_pb2_grpc.PodServiceStub(channel)
            name = _manifest(0)["metadata"]["name"]
            graphql_gets: list[float] = []
            grpc_gets: list[float] = []

            async def small_get() -> None:
                start = time.perf_counter()
                response = await client.post(
                    "/graphql",
                    json={"query": GET_QUERY, "variables": {"ns": NAMESPACE, "name": name}},
                    headers=AUTH,
                )
                assert orjson.loads(response.content)["data"]["pod"]["metadata"]["name"] == name
                graphql_gets.append(time.perf_counter() - start)
                start = time.perf_counter()
                reply = await stub.Get(
                    pods_pb2.GetPodRequest(namespace=NAMESPACE, name=name),
                    metadata=(("authorization", f"Bearer {TOKEN}"),),
                )
                assert reply.metadata.name == name
                grpc_gets.append(time.perf_counter() - start)

            ticker = Ticker()
            ticker.start()
            for _ in range(50):  # warm: caches, connections
                await small_get()
            graphql_gets.clear()
            grpc_gets.clear()
            ticker.reset()
            for _ in range(idle_gets):
                await small_get()
            idle = (list(graphql_gets), list(grpc_gets), ticker.longest)
            graphql_gets.clear()
            grpc_gets.clear()
            ticker.reset()

            loaded: dict[str, tuple[list[float], list[float], float]] = {}
            lines: list[str] = []
            for phase in ("GraphQL", "gRPC"):
                big = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    module,
                    "--role",
                    "big-client",
                    "--url",
                    url if phase == "GraphQL" else "",
                    "--grpc",
                    grpc_target,
                    "--rounds",
                    str(rounds),
                    "--pods",
                    str(pods),
                    stdout=asyncio.subprocess.PIPE,
                )
                assert big.stdout is not None
                stdout = big.stdout

                async def read_big(out: asyncio.StreamReader = stdout) -> None:
                    async for line in out:
                        lines.append(line.decode().strip())

                reader = asyncio.create_task(read_big())
                while not reader.done():
                    await small_get()
                await reader
                assert await big.wait() == 0, "the large-list client failed"
                loaded[phase] = (list(graphql_gets), list(grpc_gets), ticker.longest)
                graphql_gets.clear()
                grpc_gets.clear()
                ticker.reset()
            await ticker.stop()
            await channel.close()
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        upstream.stdin.close()
        await upstream.wait()

    print(f"small gets while {pods}-pod lists convert ({rounds} GraphQL + {rounds} gRPC lists):")
    for label, times in (
        ("GraphQL list", [float(x.split()[1]) for x in lines if x.startswith("graphql")]),
        ("gRPC List", [float(x.split()[1]) for x in lines if x.startswith("grpc")]),
    ):
        print(f"  large {label:<22} median {statistics.median(times) * 1000:8.1f} ms (wall)")
    ratios = []
    figures: dict[str, tuple[float, float]] = {}
    for which, label in ((0, "GraphQL get"), (1, "gRPC Get")):
        _, idle_p99 = _row(f"{label}, idle", idle[which])
        for phase, samples in loaded.items():
            _, loaded_p99 = _row(f"{label}, {phase} lists", samples[which])
            ratios.append((f"{label} during {phase} lists", loaded_p99 / idle_p99))
            figures[f"{label} during {phase} lists"] = (loaded_p99, idle_p99)
    for phase, samples in loaded.items():
        figures[f"stall during {phase} lists"] = (samples[2], idle[2])
    stalls = ", ".join(f"during {p} lists {s[2] * 1000:.1f} ms" for p, s in loaded.items())
    print(f"  longest loop stall: idle {idle[2] * 1000:.1f} ms, {stalls}")
    for label, ratio in ratios:
        print(f"  p99 ratio {label}: {ratio:.2f}  (goal ≤ 2.00)")
    return figures


def rows(pods: int = 5000, rounds: int = 3, idle_gets: int = 300) -> list[Row]:
    """Measure (printing the details) and return the rows of the benchmark table; the direct
    column of these rows holds the idle figure of the same run."""
    figures = asyncio.run(bench(pods, rounds, idle_gets))
    out: list[Row] = []
    for key, (loaded, idle) in figures.items():
        if key.startswith("stall"):
            out.append(
                row(
                    f"longest event-loop stall {key[6:]} ({pods:,} pods)",
                    loaded * 1000,
                    "ms",
                    idle * 1000,
                    note="direct column: idle",
                )
            )
        else:
            out.append(
                row(
                    f"small {key} ({pods:,} pods), p99",
                    loaded * 1000,
                    "ms",
                    idle * 1000,
                    max_ratio=2,
                    note="direct column: idle p99",
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-gets", type=int, default=300)
    parser.add_argument("--role", choices=("bench", "upstream", "big-client"), default="bench")
    parser.add_argument("--url", default="")
    parser.add_argument("--grpc", default="")
    parser.add_argument("--no-gzip", action="store_true", help="upstream: answers never gzipped")
    args = parser.parse_args()
    if args.role == "upstream":
        asyncio.run(run_upstream(args.pods, gzip=not args.no_gzip))
    elif args.role == "big-client":
        asyncio.run(run_big_client(args.url, args.grpc, args.rounds, args.pods))
    else:
        asyncio.run(bench(args.pods, args.rounds, args.idle_gets))


if __name__ == "__main__":
    main()
