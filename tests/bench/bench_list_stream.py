"""Benchmark: a large GraphQL list through the gateway against a real kube-apiserver, which
writes (and gzips) a large list as it encodes it: what feeding the body to a list worker as
it arrives (``gateway.core.lists.pool.Feed``) gives where the upstream streams.

    .venv/bin/python -m tests.bench.bench_list_stream [--pods 5000] [--rounds 7] \
        [--gateway-src CHECKOUT]

One etcd + kube-apiserver (``tests/e2e/apiserver.py``) holding ``--pods`` realistic pods
(``tests/bench/realistic.py``: the spec and metadata a client sends; the apiserver sets the
status) in one namespace, and a ``kube-gateway serve`` process on it (admin kubeconfig,
default settings: list workers ``auto``); with ``--gateway-src``, a second one run from that
checkout (the "before" of an A/B), the calls made to each in turns.  Rows:

* **direct**: the same list straight from the apiserver (HTTPS, ``Accept-Encoding: gzip``,
  inflated and decoded by the client: httpx + orjson);
* **GraphQL**: ``POST /graphql`` ``pods(namespace)`` selecting the 15 fields of
  ``bench_graphql_list``, the response decoded by the client.

Per row, wall times (best and median), the CPU time (``/proc/PID/stat``) of the apiserver,
of the gateway and of its list workers (its child processes) per call, and the load
average.  Not a timed test: the machine is shared; the CPU figures survive the noise best.

``--paced SECONDS`` measures the feed itself, in this process, without an apiserver: the
list of ``--pods`` realistic pods gzipped (level 1, as the apiserver) is handed to a list
worker in 64 KiB pieces spread over SECONDS (an upstream that writes as it encodes), fed as
it arrives or, as before, handed over whole at its end; the figure is the wait from the
last byte to the job's answer (taken in, for a compact job), in turns, with the load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.core.lists.body import Undecoded
from gateway.core.lists.compacting import Sliced, compact, taken
from gateway.core.lists.jobs import wire
from gateway.core.lists.pool import ListWorkers
from tests.bench.bench_graphql_list import QUERY
from tests.bench.bench_rps import apiserver_pid, cpu_ms, gateway
from tests.bench.realistic import pod
from tests.e2e.apiserver import KubeAPIServer, running_apiserver

NAMESPACE = "team-a"

__all__ = ["bench", "main", "paced"]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _manifest(i: int) -> dict[str, Any]:
    body = pod(i, NAMESPACE)
    meta = body["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    body.pop("status", None)
    return body


async def _create(kube: KubeAPIServer, count: int) -> None:
    async with httpx.AsyncClient(
        base_url=kube.url, verify=kube.ssl_context(), timeout=60, headers=kube.headers("admin")
    ) as api:
        queue = iter(range(count))

        async def one() -> None:
            for i in queue:
                r = await api.post(f"/api/v1/namespaces/{NAMESPACE}/pods", json=_manifest(i))
                assert r.status_code in (201, 409), r.text

        await asyncio.gather(*(one() for _ in range(8)))


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (its list workers)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_ms(pid)
    return total


def bench(pods: int, rounds: int, src: Path | None) -> None:
    with running_apiserver() as kube, contextlib.ExitStack() as stack:
        log(f"kube-apiserver ready in {kube.startup_seconds}s; creating {pods} pods")
        started = time.perf_counter()
        asyncio.run(_create(kube, pods))
        log(f"created in {time.perf_counter() - started:.0f} s")
        served = {"after": stack.enter_context(gateway(kube))}
        if src is not None:
            served["before"] = stack.enter_context(gateway(kube, src=src))
        api = apiserver_pid(kube)
        token = kube.tokens["admin"]
        direct = httpx.Client(
            base_url=kube.url, verify=kube.ssl_context(), timeout=120, headers=kube.headers("admin")
        )
        stack.enter_context(direct)
        clients = {
            name: stack.enter_context(
                httpx.Client(
                    base_url=gw.http,
                    timeout=120,
                    headers={"Authorization": f"Bearer {token}"},
                )
            )
            for name, gw in served.items()
        }

        def listed() -> None:
            r = direct.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
            assert len(orjson.loads(r.content)["items"]) == pods

        def graphql(client: httpx.Client) -> Callable[[], None]:
            def call() -> None:
                r = client.post("/graphql", json={"query": QUERY, "variables": {"ns": NAMESPACE}})
                items = orjson.loads(r.content)["data"]["pods"]["items"]
                assert len(items) == pods

            return call

        calls: dict[str, tuple[Callable[[], None], int | None]] = {"direct": (listed, None)}
        for name, gw in served.items():
            calls[f"GraphQL ({name})"] = (graphql(clients[name]), gw.proc.pid)
        for fn, _ in calls.values():  # warm: schema, workers started, caches
            fn()
            fn()
        seen: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in calls}
        loads = []
        for _ in range(rounds):
            for name, (fn, pid) in calls.items():
                workers = _children(pid) if pid is not None else []
                before = (cpu_ms(api), _cpu([pid] if pid else []), _cpu(workers))
                start = time.perf_counter()
                fn()
                took = (time.perf_counter() - start) * 1000
                time.sleep(0.5)  # the frees after the answer, counted with it
                after = (cpu_ms(api), _cpu([pid] if pid else []), _cpu(workers))
                seen[name].append((took, *(a - b for a, b in zip(after, before, strict=True))))
                loads.append(os.getloadavg()[0])
    print(f"list of {pods} realistic pods from a real kube-apiserver (best / median of {rounds}):")
    base = statistics.median(r[0] for r in seen["direct"])
    for name, rows in seen.items():
        med = statistics.median(r[0] for r in rows)
        print(
            f"  {name:20} {min(r[0] for r in rows):7.0f} / {med:7.0f} ms  {med / base:4.2f}x"
            f"  CPU per call: apiserver {statistics.median(r[1] for r in rows):5.0f} ms, "
            f"gateway {statistics.median(r[2] for r in rows):5.0f} ms, "
            f"its workers {statistics.median(r[3] for r in rows):5.0f} ms"
        )
    print(f"  load average during the calls: {min(loads):.2f}-{max(loads):.2f}")


async def paced(pods: int, seconds: float, rounds: int) -> None:
    body = orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "1"},
            "items": [pod(i, NAMESPACE) for i in range(pods)],
        }
    )
    data = gzip.compress(body, 1)
    pieces = [data[at : at + 65_536] for at in range(0, len(data), 65_536)]
    gap = seconds / len(pieces)
    jobs = {
        "gRPC ResourceService list": wire(b"\x0a", b"\x12", as_struct=False),
        "compact (cold view)": compact(
            "v1", "Pod", [(("metadata", "creationTimestamp"), "string")]
        ),
    }
    workers = ListWorkers(2)  # (one may still be giving a compact answer's parts)
    await workers.ready()
    waits: dict[tuple[str, str], list[float]] = {}
    loads = []
    try:
        for _ in range(rounds):
            for name, job in jobs.items():
                # (``fed+job``: the job named with the body, a compact job then done as it
                # comes: ``compacting.Streaming``)
                modes = ("fed", "fed+job", "whole") if job[0] == "compact" else ("fed", "whole")
                for mode in modes:
                    named = job if mode == "fed+job" else None
                    feed = await workers.feed(True, named) if mode != "whole" else None
                    for piece in pieces:  # the upstream's pace
                        if feed is not None:
                            await feed.send(piece)
                        await asyncio.sleep(gap)
                    start = time.perf_counter()
                    if feed is not None:
                        feed.end()
                    done = await workers.run(Undecoded(data, gzipped=True, feed=feed), job)
                    assert done is not None
                    if isinstance(done, Sliced):
                        await taken(done, job[3], {})
                    waits.setdefault((name, mode), []).append((time.perf_counter() - start) * 1000)
                    del done
                    loads.append(os.getloadavg()[0])
    finally:
        await workers.aclose()
    print(
        f"{pods} realistic pods, {len(body) / 1e6:.0f} MB of JSON, {len(data) / 1e6:.1f} MB "
        f"gzipped, arriving over {seconds} s: from the last byte to the answer "
        f"(median / best of {rounds})"
    )
    for (name, mode), took in waits.items():
        print(f"  {name:30} {mode:6} {statistics.median(took):6.0f} / {min(took):6.0f} ms")
    print(f"  load average: {min(loads):.2f}-{max(loads):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--gateway-src", type=Path, default=None)
    parser.add_argument("--paced", type=float, default=None, metavar="SECONDS")
    args = parser.parse_args()
    if args.paced is not None:
        asyncio.run(paced(args.pods, args.paced, args.rounds))
    else:
        bench(args.pods, args.rounds, args.gateway_src)


if __name__ == "__main__":
    main()
