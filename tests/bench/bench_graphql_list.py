"""Benchmark: a GraphQL list of realistic pods selecting 15 fields, against a direct upstream
list call of the same pods (same run, ratio).

    .venv/bin/python -m tests.bench.bench_graphql_list [--pods 5000] [--rounds 7] \\
        [--out BENCHMARKS.md]

Not a timed test: it prints absolute numbers and the ratio.  The demo upstream holds
``--pods`` realistic pods (managedFields, probes, volumes, status: ``tests/bench/realistic.py``);
the gateway is served by uvicorn in this process, both over loopback sockets.

* **direct**: ``KubeAdapter.list`` of the namespace (HTTP + orjson decode of the ~12 MB list);
* **GraphQL**: ``POST /graphql`` with a ``pods`` query selecting 15 fields, through the gateway
  (which makes the same upstream call), the response decoded by the client.

Figures are wall times, best and median of ``--rounds`` calls made in turns.  ``--out``
puts the row into that ``BENCHMARKS.md`` (its row of the first table and its line of the goals
not met, the rest as it was).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.core.model.registry import POD
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.bench.realistic import pod
from tests.bench.report import Row, row, write_rows
from tests.support.graphql import serve_app

TOKEN = "admin-token"
NAMESPACE = "bench"
#: The first table's rows this bench writes (what ``--out`` replaces), by their start.
OWNS = ("GraphQL list ",)
#: The 15 leaf fields every large-list bench selects (``bench_loop_hold``, ``bench_fleet``).
SELECTION = """
    metadata { resourceVersion }
    items {
      metadata { name namespace uid resourceVersion creationTimestamp labels }
      spec { nodeName serviceAccountName containers { name image } }
      status { phase podIP hostIP startTime qosClass }
    }"""
QUERY = f"query($ns: String!) {{ pods(namespace: $ns) {{{SELECTION} }} }}"


def _manifest(i: int) -> dict[str, Any]:
    """A realistic pod as a client would create it (the server sets uid, versions, fields)."""
    body = pod(i, NAMESPACE)
    meta = body["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    return body


async def _timed(fns: dict[str, Callable[[], Awaitable[Any]]], rounds: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            gc.collect()
            start = time.perf_counter()
            await fn()
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: (min(t), statistics.median(t)) for name, t in times.items()}


async def bench(pods: int, rounds: int) -> dict[str, float]:
    """Prints the figures and returns them (wall ms)."""
    async with DemoUpstream(seed=False) as demo:
        await demo.store.bulk_create(POD, (_manifest(i) for i in range(pods)), namespace=NAMESPACE)
        settings = Settings(
            host="127.0.0.1", http_port=0, grpc_port=0, server=demo.url, log_level="warning"
        )
        upstream = build_http_client(UpstreamConfig(server=demo.url, source="bench"))
        async with (
            serve_app(settings) as (url, _app),
            upstream,
            httpx.AsyncClient(base_url=url, timeout=120) as client,
        ):
            adapter = KubeAdapter(upstream)
            me = Credential(TOKEN)
            sizes: dict[str, int] = {}

            async def direct() -> None:
                listed = await adapter.list(POD, namespace=NAMESPACE, credential=me)
                assert len(listed["items"]) == pods

            async def graphql() -> None:
                response = await client.post(
                    "/graphql",
                    json={"query": QUERY, "variables": {"ns": NAMESPACE}},
                    headers={"Authorization": f"Bearer {TOKEN}"},
                )
                body = orjson.loads(response.content)
                assert "errors" not in body, body["errors"]
                items = body["data"]["pods"]["items"]
                assert len(items) == pods and items[0]["status"]["phase"]
                sizes["graphql"] = len(response.content)

            raw = await upstream.get(f"/api/v1/namespaces/{NAMESPACE}/pods", headers=me.headers())
            sizes["direct"] = len(raw.content)
            await graphql()  # warm: schema, parse and validation caches
            results = await _timed({"direct": direct, "graphql": graphql}, rounds)
    (d_best, d_med), (g_best, g_med) = results["direct"], results["graphql"]
    print(f"list of {pods} realistic pods over loopback (best / median of {rounds}):")
    print(
        f"  direct upstream call (HTTP + decode)   {d_best:8.1f} / {d_med:8.1f} ms   1.00"
        f"   ({sizes['direct'] / 1e6:.1f} MB JSON)"
    )
    print(
        f"  GraphQL list, 15 fields (HTTP + decode) {g_best:7.1f} / {g_med:8.1f} ms   "
        f"{g_best / d_best:4.2f}   ({sizes['graphql'] / 1e6:.1f} MB JSON)"
    )
    print(f"  ratio GraphQL/direct: best {g_best / d_best:.2f}, median {g_med / d_med:.2f}")
    return {"direct": d_best, "direct_median": d_med, "graphql": g_best, "graphql_median": g_med}


def rows(pods: int = 5000, rounds: int = 7) -> list[Row]:
    """Measure (printing the details) and return the rows of the benchmark table."""
    r = asyncio.run(bench(pods, rounds))
    return [
        row(
            f"GraphQL list {pods:,} pods, 15 fields, median",
            r["graphql_median"],
            "ms",
            r["direct_median"],
            max_ratio=1.2,
            note=f"best {r['graphql'] / r['direct']:.2f}x",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None, help="put the row into this file")
    args = parser.parse_args()
    if args.out is not None:
        write_rows(args.out, rows(args.pods, args.rounds), OWNS)
    else:
        asyncio.run(bench(args.pods, args.rounds))


if __name__ == "__main__":
    main()
