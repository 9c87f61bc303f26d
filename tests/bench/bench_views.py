"""Benchmark: views of realistic pods through the gateway (issue 29's speed section).

    .venv/bin/python -m tests.bench.bench_views [--pods 30000]

``--pods`` realistic pods (``tests/bench/realistic.py``, the pods of ``bench_graphql_list``,
made unique and given varied phases and start times) in one namespace of a demo upstream;
the gateway in process over loopback.  Printed: a plain list of the same pods (one field,
15 fields), the first (cold) view, the JSON the cache holds against the process's RSS
growth, a warm view (its order computed already), 50 concurrent callers with 50 distinct
filters (50 evaluations) and with the same view, counts by ``status.phase``, the next page
by cursor, and the bytes of a first page against the full list's.  Not yet a row of
``make bench`` (a later step of the issue).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import statistics
import time
from typing import Any

import httpx
import orjson

from gateway.core import POD
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.bench.bench_graphql_list import NAMESPACE, QUERY, _manifest
from tests.support.graphql import serve_app

TOKEN = "admin-token"
NODES = """nodes { metadata { name namespace uid resourceVersion creationTimestamp labels }
      spec { nodeName serviceAccountName containers { name image } }
      status { phase podIP hostIP startTime qosClass } }"""
VIEW = (
    """query($ns: String, $v: String!, $after: String) {
  podsView(namespace: $ns, first: 50, after: $after,
           filter: {field: "metadata.name", op: CONTAINS, value: $v},
           sort: [{field: "status.startTime", order: DESC}]) {
    total resourceVersion pageInfo { endCursor hasNextPage } """
    + NODES
    + " } }"
)
COUNTS = """query($ns: String) { podsView(namespace: $ns, first: 0) {
  total counts(groupBy: "status.phase") { value count } } }"""
ONE_FIELD = "query($ns: String!) { pods(namespace: $ns) { items { metadata { name } } } }"


def _pod(i: int) -> dict[str, Any]:
    body = _manifest(i)
    rnd = random.Random(i)
    body["metadata"]["name"] = f"{body['metadata']['name']}-{i}"
    body["status"]["startTime"] = (
        f"2026-11-{rnd.randint(1, 28):02d}T{rnd.randint(0, 23):02d}:"
        f"{rnd.randint(0, 59):02d}:{rnd.randint(0, 59):02d}Z"
    )
    body["status"]["phase"] = rnd.choice(["Running"] * 8 + ["Pending", "Failed", "Succeeded"])
    return body


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def bench(pods: int) -> None:
    async with DemoUpstream(seed=False) as demo:
        await demo.store.bulk_create(POD, (_pod(i) for i in range(pods)), namespace=NAMESPACE)
        settings = Settings(
            host="127.0.0.1",
            http_port=0,
            grpc_port=0,
            server=demo.url,
            log_level="warning",
            max_list_items=pods + 1,
        )
        async with (
            serve_app(settings) as (url, app),
            httpx.AsyncClient(
                base_url=url, timeout=600, limits=httpx.Limits(max_connections=100)
            ) as client,
        ):

            async def ask(query: str, variables: dict[str, Any]) -> tuple[float, Any, int]:
                started = time.perf_counter()
                response = await client.post(
                    "/graphql",
                    json={"query": query, "variables": variables},
                    headers={"Authorization": f"Bearer {TOKEN}"},
                )
                took = (time.perf_counter() - started) * 1000
                body = orjson.loads(response.content)
                assert "errors" not in body, body["errors"]
                return took, body, len(response.content)

            ns = {"ns": NAMESPACE}
            took, _, _ = await ask(ONE_FIELD, ns)
            print(f"plain list of {pods} pods, 1 field: {took:.0f} ms")
            took, _, full = await ask(QUERY, ns)
            print(f"plain list of {pods} pods, 15 fields: {took:.0f} ms, {full:,} bytes")
            gc.collect()
            before = _rss()
            took, body, size = await ask(VIEW, {**ns, "v": "1"})
            total = body["data"]["podsView"]["total"]
            print(f"first (cold) view: {took:.0f} ms (total {total}); first page {size:,} bytes")
            print(f"  first page against the full list: 1/{full / size:.0f} of the bytes")
            views = app.state.runtime.cluster.views
            gc.collect()
            print(
                f"cache: {views.stats.bytes / 1e6:.0f} MB of JSON; process RSS "
                f"+{(_rss() - before) / 1e6:.0f} MB (the hub's decoded objects and the cache)"
            )
            warm = [(await ask(VIEW, {**ns, "v": "1"}))[0] for _ in range(20)]
            print(f"warm view: p50 {statistics.median(warm):.1f} ms, p99 {_p(warm, 0.99):.1f} ms")
            values = [f"{i:02x}" for i in range(50)]
            distinct = await asyncio.gather(*(ask(VIEW, {**ns, "v": v}) for v in values))
            times = [t for t, _, _ in distinct]
            print(
                f"50 concurrent callers, 50 distinct filters: p50 {statistics.median(times):.0f}"
                f" ms, p99 {_p(times, 0.99):.0f} ms"
            )
            same = await asyncio.gather(*(ask(VIEW, {**ns, "v": "1"}) for _ in range(50)))
            times = [t for t, _, _ in same]
            print(
                f"50 concurrent callers, one view: p50 {statistics.median(times):.0f} ms, "
                f"p99 {_p(times, 0.99):.0f} ms"
            )
            counted = [(await ask(COUNTS, ns))[0] for _ in range(10)]
            print(f"counts by status.phase: p50 {statistics.median(counted):.1f} ms")
            cursor = body["data"]["podsView"]["pageInfo"]["endCursor"]
            pages = [(await ask(VIEW, {**ns, "v": "1", "after": cursor}))[0] for _ in range(10)]
            print(f"next page by cursor: p50 {statistics.median(pages):.1f} ms")
            print(f"load average: {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=30_000)
    asyncio.run(bench(parser.parse_args().pods))


if __name__ == "__main__":
    main()
