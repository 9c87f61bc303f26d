"""Benchmark: get one pod through the gateway (GraphQL and gRPC) against a direct upstream get
of the same pod (same run, latency added and requests per second), at concurrency 1 and 32.

    .venv/bin/python -m tests.bench.bench_get [--requests 400] [--concurrency 1,32]

Not a timed test: it prints absolute numbers and the ratios.  Two processes: this one runs the
demo upstream (a few realistic pods) and the clients; the gateway is ``kube-gateway serve`` as a
subprocess (as in ``bench_fanout``), so its loop is its own.  The clients and the demo upstream
share this process's loop in every mode, the direct one included, which is why only the
difference and the ratio to direct mean something.

* **direct**: ``KubeAdapter.get`` of the pod (HTTP + orjson decode);
* **GraphQL**: ``POST /graphql`` ``pod(namespace, name)`` selecting 15 fields, decoded;
* **gRPC**: ``PodService/Get``, parsed by the client.

Per mode and concurrency: ``--requests`` gets by N workers in turns with the other modes
(after a warm-up), each get's wall time recorded; p50 and requests per second (gets / elapsed).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable

import grpc
import httpx
import orjson

from gateway.core.model.registry import POD
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from gateway.grpc.gen.kubegateway.v1 import pods_pb2, pods_pb2_grpc
from kube_gateway_demo import DemoUpstream
from tests.bench.bench_fanout import gateway
from tests.bench.realistic import pod
from tests.bench.report import Row, row

TOKEN = "admin-token"
NAMESPACE = "bench"
NAME = "pod-00000"
QUERY = """query($ns: String!, $name: String!) {
  pod(namespace: $ns, name: $name) {
    metadata { name namespace uid resourceVersion creationTimestamp labels }
    spec { nodeName serviceAccountName containers { name image } }
    status { phase podIP hostIP startTime qosClass }
  }
}"""
MODES = ("direct", "graphql", "grpc")
ADDED_GOAL_MS = 1.0


async def _load(
    fn: Callable[[], Awaitable[None]], requests: int, concurrency: int
) -> tuple[list[float], float]:
    """``requests`` calls of ``fn`` by ``concurrency`` workers: each call's wall time (ms) and
    the elapsed time of all of them (s)."""
    latencies: list[float] = []
    remaining = requests

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            start = time.perf_counter()
            await fn()
            latencies.append((time.perf_counter() - start) * 1000)

    gc.collect()
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - start


async def bench(requests: int, concurrencies: list[int]) -> dict[tuple[str, int], dict[str, float]]:
    """Prints the figures and returns them by (mode, concurrency): ``p50`` ms, ``rps``."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    async with DemoUpstream(seed=False) as demo:
        body = pod(0, NAMESPACE)
        for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
            body["metadata"].pop(key, None)
        body["metadata"]["name"] = NAME
        await demo.store.bulk_create(POD, [body], namespace=NAMESPACE)
        upstream = build_http_client(UpstreamConfig(server=demo.url, source="bench"))
        async with gateway(demo.url, 64) as gw, upstream:
            adapter = KubeAdapter(upstream)
            me = Credential(TOKEN)
            limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
            client = httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{gw.http_port}", timeout=60, limits=limits
            )
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{gw.grpc_port}")
            stub = pods_pb2_grpc.PodServiceStub(channel)  # type: ignore[no-untyped-call]
            auth = (("authorization", f"Bearer {TOKEN}"),)
            try:

                async def direct() -> None:
                    got = await adapter.get(POD, NAME, namespace=NAMESPACE, credential=me)
                    assert got["metadata"]["name"] == NAME

                async def graphql() -> None:
                    response = await client.post(
                        "/graphql",
                        json={"query": QUERY, "variables": {"ns": NAMESPACE, "name": NAME}},
                        headers={"Authorization": f"Bearer {TOKEN}"},
                    )
                    got = orjson.loads(response.content)
                    assert got["data"]["pod"]["metadata"]["name"] == NAME, got

                async def grpc_get() -> None:
                    request = pods_pb2.GetPodRequest(namespace=NAMESPACE, name=NAME)
                    reply = await stub.Get(request, metadata=auth)
                    assert reply.metadata.name == NAME

                fns = {"direct": direct, "graphql": graphql, "grpc": grpc_get}
                for concurrency in concurrencies:
                    times: dict[str, list[float]] = {m: [] for m in MODES}
                    elapsed: dict[str, float] = dict.fromkeys(MODES, 0.0)
                    for mode in MODES:  # warm: connections, caches, code paths
                        await _load(fns[mode], 2 * concurrency, concurrency)
                    for _ in range(4):  # in turns, a quarter of the requests each time
                        for mode in MODES:
                            lat, seconds = await _load(fns[mode], requests // 4, concurrency)
                            times[mode] += lat
                            elapsed[mode] += seconds
                    for mode in MODES:
                        out[mode, concurrency] = {
                            "p50": statistics.median(times[mode]),
                            "rps": len(times[mode]) / elapsed[mode],
                        }
            finally:
                await client.aclose()
                await channel.close()
    print(f"get one pod over loopback, {requests} gets per mode and concurrency:")
    print(f"  {'':24}{'concurrency':>12}{'p50 ms':>10}{'added ms':>10}{'req/s':>10}")
    for concurrency in concurrencies:
        base = out["direct", concurrency]["p50"]
        for mode in MODES:
            r = out[mode, concurrency]
            print(
                f"  {mode:24}{concurrency:>12}{r['p50']:10.2f}{r['p50'] - base:10.2f}"
                f"{r['rps']:10.0f}"
            )
    return out


def rows(requests: int = 400, concurrencies: tuple[int, ...] = (1, 32)) -> list[Row]:
    """Measure (printing the details) and return the rows of the benchmark table."""
    r = asyncio.run(bench(requests, list(concurrencies)))
    out: list[Row] = []
    names = {"graphql": "GraphQL", "grpc": "gRPC"}
    for concurrency in concurrencies:
        direct = r["direct", concurrency]
        for mode, name in names.items():
            figure = r[mode, concurrency]
            added = figure["p50"] - direct["p50"]
            measured = row(
                f"get one pod, {name}, p50, concurrency {concurrency}",
                figure["p50"],
                "ms",
                direct["p50"],
                note=f"added {added:+.2f} ms",
            )
            out.append(
                Row(
                    measured.scenario,
                    measured.figure,
                    measured.unit,
                    measured.direct,
                    measured.ratio,
                    f"≤ +{ADDED_GOAL_MS:g} ms added",
                    added <= ADDED_GOAL_MS,
                    measured.note,
                )
            )
        for mode, name in names.items():
            out.append(
                row(
                    f"get one pod, {name}, requests/s, concurrency {concurrency}",
                    r[mode, concurrency]["rps"],
                    "req/s",
                    direct["rps"],
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", default="1,32")
    args = parser.parse_args()
    asyncio.run(bench(args.requests, [int(c) for c in args.concurrency.split(",")]))


if __name__ == "__main__":
    main()
