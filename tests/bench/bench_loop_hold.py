"""Benchmark: how long one large list holds the gateway's event loop from other callers.

    .venv/bin/python -m tests.bench.bench_loop_hold [--pods 5000] [--rounds 3] \\
        [--out BENCHMARKS.md]

Not a timed test: it prints absolute numbers and ratios.  Four processes, so that only the
gateway's own work lands on the measured loop:

* the demo upstream, seeded with ``--pods`` realistic pods (``tests/bench/realistic.py``), in
  a child process (its own serialisation of the 27 MB list would otherwise stall the loop),
  gzipping large answers as the apiserver does;
* the large-list client, in a child process: ``--rounds`` GraphQL lists of every pod
  (15 fields), then ``--rounds`` gRPC ``List`` calls, one after the other;
* the small-get client, in a child process: it gets one pod (GraphQL and gRPC in turns),
  one get at a time, while nothing else runs (idle) and while the large lists run (loaded);
  in the gateway's process, its own HTTP and gRPC work would wait behind the lists' work
  on the gateway's loop as well (it did until 2026-11-29);
* this process: the gateway (uvicorn + grpc.aio, its default list workers), and a ticker
  task that sleeps 1 ms at a time and records the longest gap.

Figures: p50 / p99 / max latency of the small gets idle and loaded, their ratios (the goal:
loaded p99 ≤ 2x idle p99), the longest loop stall seen by the ticker in each phase, and the
event loop's thread's time on a CPU and waiting for one in each phase (Linux's schedstat: a
stall is the loop's own work only where the thread was on a CPU).  ``--out`` puts the rows
into that ``BENCHMARKS.md`` (its rows of the first table and their lines of the goals not met,
the rest as it was).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import statistics
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import orjson

from gateway.app import tune_garbage_collector
from gateway.core.model.registry import POD
from gateway.grpc.gen.kubegateway.v1 import pods_pb2, pods_pb2_grpc
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.bench.bench_graphql_list import NAMESPACE, QUERY, TOKEN, _manifest
from tests.bench.report import Row, row, write_rows
from tests.support.graphql import serve_app

MODULE = "tests.bench.bench_loop_hold"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIST_QUERY = QUERY  # bench_graphql_list's 15 fields
GET_QUERY = """query($ns: String!, $name: String!) {
  pod(namespace: $ns, name: $name) { metadata { name uid } status { phase podIP } }
}"""
LIMIT = 256 * 1024 * 1024
#: The small client's gets: through the gateway, and straight to the upstream (its share).
KINDS = {"graphql": "GraphQL get", "grpc": "gRPC Get", "direct": "direct get"}
#: The first table's rows this bench writes (what ``--out`` replaces), by their start.
OWNS = ("small ", "longest event-loop stall during ")


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


async def run_small_client(url: str, grpc_target: str, upstream: str) -> None:
    """Small gets, one at a time (a GraphQL get, a gRPC ``Get``, then the same get straight
    to the upstream), for each command read from stdin: ``count N`` makes N rounds, ``go``
    makes rounds until the next line; after each, one line of JSON: every get's wall time
    (s), by ``graphql``, ``grpc`` and ``direct``."""
    name = _manifest(0)["metadata"]["name"]
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    loop = asyncio.get_running_loop()
    async with (
        httpx.AsyncClient(base_url=url, timeout=60) as client,
        httpx.AsyncClient(base_url=upstream, timeout=60, headers=AUTH) as direct,
        grpc.aio.insecure_channel(grpc_target) as channel,
    ):
        stub = pods_pb2_grpc.PodServiceStub(channel)  # type: ignore[no-untyped-call]

        async def small_get() -> None:
            start = time.perf_counter()
            response = await client.post(
                "/graphql",
                json={"query": GET_QUERY, "variables": {"ns": NAMESPACE, "name": name}},
                headers=AUTH,
            )
            assert orjson.loads(response.content)["data"]["pod"]["metadata"]["name"] == name
            times["graphql"].append(time.perf_counter() - start)
            start = time.perf_counter()
            reply = await stub.Get(
                pods_pb2.GetPodRequest(namespace=NAMESPACE, name=name),
                metadata=(("authorization", f"Bearer {TOKEN}"),),
            )
            assert reply.metadata.name == name
            times["grpc"].append(time.perf_counter() - start)
            start = time.perf_counter()
            got = await direct.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
            assert orjson.loads(got.content)["metadata"]["name"] == name
            times["direct"].append(time.perf_counter() - start)

        while command := await loop.run_in_executor(None, sys.stdin.readline):
            if command.startswith("count "):
                for _ in range(int(command.split()[1])):
                    await small_get()
            else:
                until = loop.run_in_executor(None, sys.stdin.readline)
                while not until.done():
                    await small_get()
                await until
            print(orjson.dumps(times).decode(), flush=True)
            times = {kind: [] for kind in KINDS}


class SmallClient:
    """The small-get client's process (:func:`run_small_client`)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc, self.stdin, self.stdout = proc, proc.stdin, proc.stdout

    @classmethod
    async def start(cls, url: str, grpc_target: str, upstream: str) -> SmallClient:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", MODULE, "--role", "small-client"),
            *("--url", url, "--grpc", grpc_target, "--upstream", upstream),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=LIMIT,  # a phase's times are one line
        )
        return cls(proc)

    async def count(self, n: int) -> dict[str, list[float]]:
        """``n`` gets of each kind, one at a time: their wall times."""
        self.stdin.write(f"count {n}\n".encode())
        return await self._times()

    def go(self) -> None:
        """Gets, one at a time, until :meth:`stop`."""
        self.stdin.write(b"go\n")

    async def stop(self) -> dict[str, list[float]]:
        """The gets made since :meth:`go`: their wall times."""
        self.stdin.write(b"stop\n")
        return await self._times()

    async def _times(self) -> dict[str, list[float]]:
        line = await self.stdout.readline()
        if not line:
            raise RuntimeError("the small-get client ended")
        times: dict[str, list[float]] = orjson.loads(line)
        return times

    async def close(self) -> None:
        self.stdin.close()
        assert await self.proc.wait() == 0, "the small-get client failed"


# -- the measured process -------------------------------------------------------------------


class Ticker:
    """Sleeps 1 ms at a time; records the longest gap between wake-ups (a loop stall, in wall
    time: on a loaded machine also the loop's waits for a CPU), and the most CPU time the
    loop's thread used in one gap (the loop's own work, whatever the load), with how many
    gaps used over 5 ms of it."""

    def __init__(self) -> None:
        self.longest = self.longest_cpu = 0.0
        self.over_5ms = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last, last_cpu = time.perf_counter(), time.thread_time()
        while True:
            await asyncio.sleep(0.001)
            now, cpu = time.perf_counter(), time.thread_time()
            self.longest = max(self.longest, now - last)
            self.longest_cpu = max(self.longest_cpu, cpu - last_cpu)
            self.over_5ms += cpu - last_cpu > 0.005
            last, last_cpu = now, cpu

    def reset(self) -> float:
        """Start again; the most CPU of one gap so far (printed with the rest)."""
        print(
            f"  the loop's most CPU between two ticks {self.longest_cpu * 1000:.1f} ms "
            f"({self.over_5ms} gaps over 5 ms); its longest gap {self.longest * 1000:.1f} ms"
        )
        most = self.longest_cpu
        self.longest = self.longest_cpu = 0.0
        self.over_5ms = 0
        return most

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


class LoopCpu:
    """The event loop's thread's time on a CPU and runnable but waiting for one (Linux's
    ``/proc/thread-self/schedstat``), from its making to :meth:`since`; made on the loop."""

    def __init__(self) -> None:
        self.path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
        self.start = (time.perf_counter(), *self._read())

    def _read(self) -> tuple[float, float, int]:
        on_cpu, waiting, slices = Path(self.path).read_text().split()
        return int(on_cpu) / 1e9, int(waiting) / 1e9, int(slices)

    def since(self) -> tuple[float, float]:
        """Seconds on a CPU and waiting for one since made (printed with the wall time)."""
        wall, on_cpu, waiting, slices = time.perf_counter(), *self._read()
        on_cpu, waiting = on_cpu - self.start[1], waiting - self.start[2]
        slices -= self.start[3]
        print(
            f"  the event loop's thread: {on_cpu * 1000:.0f} ms on a CPU, {waiting * 1000:.0f} ms "
            f"waiting for one ({waiting * 1e6 / max(1, slices):.0f} us a wake-up), in "
            f"{(wall - self.start[0]) * 1000:.0f} ms (load {os.getloadavg()[0]:.1f})"
        )
        return on_cpu, waiting


class AccessTimes(logging.Handler):
    """The gateway's own access lines of the small gets (``gateway.access``, kept here, not
    written): each one's time in the gateway (``duration_ms``) and in its upstream call
    (``upstream_ms``), which tell the gateway's share of a get's latency from the
    upstream's."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.times: list[tuple[float, float]] = []
        access = logging.getLogger("gateway.access")
        access.setLevel(logging.INFO)
        access.propagate = False
        access.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        line = record.__dict__
        small = line.get("path") == "/graphql" and line.get("bytes", 0) < 4096
        if (small or str(line.get("path")).endswith("/Get")) and "upstream_ms" in line:
            self.times.append((line["duration_ms"], line["upstream_ms"]))

    def take(self, label: str) -> None:
        """Print and forget the gets' times since the last time."""
        times, self.times = self.times, []
        if not times:
            return
        served = [d for d, _ in times]
        upstream = [u for _, u in times]
        own = [d - u for d, u in times]
        print(
            f"  {label}: in the gateway (its access lines, n={len(times)}): p50 / p99 "
            f"{statistics.median(served):.2f} / {_pct(served, 0.99):.2f} ms, of which upstream "
            f"{statistics.median(upstream):.2f} / {_pct(upstream, 0.99):.2f} ms, its own share "
            f"{statistics.median(own):.2f} / {_pct(own, 0.99):.2f} ms"
        )


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


async def bench(pods: int, rounds: int, idle_gets: int) -> dict[str, tuple[float, ...]]:
    """Prints the figures and returns them: (loaded, idle) p99 in seconds by ``"<get> during
    <phase> lists"`` (``direct get``: straight to the upstream), (loaded, idle) longest loop
    stall by ``"stall during <phase> lists"``, and the loop's thread's seconds on a CPU,
    waiting for one and its most CPU in one gap by ``"loop thread during <phase> lists"``."""
    async with upstream_process(pods) as (server, _):
        return await _bench(server, pods, rounds, idle_gets)


@contextlib.asynccontextmanager
async def upstream_process(pods: int) -> AsyncIterator[tuple[str, int]]:
    """The demo upstream holding ``pods`` realistic pods (gzipping as the apiserver does), in
    a child process until the block ends: its URL and pid."""
    upstream = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        MODULE,
        "--role",
        "upstream",
        "--pods",
        str(pods),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert upstream.stdout is not None and upstream.stdin is not None
    try:
        yield (await upstream.stdout.readline()).decode().strip(), upstream.pid
    finally:
        upstream.stdin.close()
        await upstream.wait()


async def _bench(
    server: str, pods: int, rounds: int, idle_gets: int
) -> dict[str, tuple[float, ...]]:
    module = MODULE
    settings = Settings(
        host="127.0.0.1", http_port=0, grpc_port=0, server=server, log_level="warning"
    )
    thresholds = gc.get_threshold()
    lines: list[str] = []
    try:
        async with serve_app(settings) as (url, app):
            grpc_target = f"127.0.0.1:{app.state.runtime.grpc_port}"
            # as `kube-gateway serve` does once started: otherwise every full collection walks
            # what start-up built (~130,000 objects, 70-80 ms of one loop step)
            tune_garbage_collector()
            small = await SmallClient.start(url, grpc_target, server)
            ticker = Ticker()
            ticker.start()
            await small.count(50)  # warm: caches, connections
            ticker.reset()
            access = AccessTimes()
            loop_cpu = LoopCpu()
            times = await small.count(idle_gets)
            idle = (times, ticker.longest)
            sched = {"idle": loop_cpu.since()}
            access.take("idle")
            ticker.reset()

            loaded: dict[str, tuple[dict[str, list[float]], float]] = {}
            for phase in ("GraphQL", "gRPC"):
                loop_cpu = LoopCpu()
                small.go()
                big = await asyncio.create_subprocess_exec(
                    *(sys.executable, "-m", module, "--role", "big-client"),
                    *("--url", url if phase == "GraphQL" else "", "--grpc", grpc_target),
                    *("--rounds", str(rounds), "--pods", str(pods)),
                    stdout=asyncio.subprocess.PIPE,
                )
                out, _ = await big.communicate()
                assert big.returncode == 0, "the large-list client failed"
                lines += out.decode().splitlines()
                times = await small.stop()
                loaded[phase] = (times, ticker.longest)
                sched[phase] = (*loop_cpu.since(), ticker.longest_cpu)
                access.take(f"during {phase} lists")
                ticker.reset()
            await ticker.stop()
            await small.close()
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)

    print(f"small gets while {pods}-pod lists convert ({rounds} GraphQL + {rounds} gRPC lists):")
    for label, times in (
        ("GraphQL list", [float(x.split()[1]) for x in lines if x.startswith("graphql")]),
        ("gRPC List", [float(x.split()[1]) for x in lines if x.startswith("grpc")]),
    ):
        print(f"  large {label:<22} median {statistics.median(times) * 1000:8.1f} ms (wall)")
    ratios = []
    figures: dict[str, tuple[float, ...]] = {}
    for kind, label in KINDS.items():
        _, idle_p99 = _row(f"{label}, idle", idle[0][kind])
        for phase, (samples, _) in loaded.items():
            _, loaded_p99 = _row(f"{label}, {phase} lists", samples[kind])
            ratios.append((f"{label} during {phase} lists", loaded_p99 / idle_p99))
            figures[f"{label} during {phase} lists"] = (loaded_p99, idle_p99)
    for phase, (_, stall) in loaded.items():
        figures[f"stall during {phase} lists"] = (stall, idle[1])
        figures[f"loop thread during {phase} lists"] = sched[phase]
    stalls = ", ".join(f"during {p} lists {s * 1000:.1f} ms" for p, (_, s) in loaded.items())
    print(f"  longest loop stall: idle {idle[1] * 1000:.1f} ms, {stalls}")
    for label, ratio in ratios:
        print(f"  p99 ratio {label}: {ratio:.2f}  (goal ≤ 2.00)")
    return figures


def rows(pods: int = 5000, rounds: int = 3, idle_gets: int = 300) -> list[Row]:
    """Measure (printing the details) and return the rows of the benchmark table; the direct
    column of these rows holds the idle figure of the same run."""
    return figure_rows(asyncio.run(bench(pods, rounds, idle_gets)), pods)


def figure_rows(figures: dict[str, tuple[float, ...]], pods: int) -> list[Row]:
    """The table's rows of :func:`bench`'s figures (the direct gets' and the loop thread's
    go into the notes)."""
    out: list[Row] = []
    for key, values in figures.items():
        if key.startswith(("loop thread", "direct get")):
            continue
        loaded, idle = values
        if key.startswith("stall"):
            on_cpu, waiting, step = figures[f"loop thread {key[6:]}"]
            out.append(
                row(
                    f"longest event-loop stall {key[6:]} ({pods:,} pods)",
                    loaded * 1000,
                    "ms",
                    idle * 1000,
                    note=f"direct column: idle; the loop's thread {on_cpu:.1f} s on a CPU, "
                    f"{waiting:.1f} s waiting for one; its most CPU in one gap "
                    f"{step * 1000:.1f} ms",
                )
            )
        else:
            phase = key.split(" get ", 1)[1] if " get " in key else key.split(" Get ", 1)[1]
            out.append(
                row(
                    f"small {key} ({pods:,} pods), p99",
                    loaded * 1000,
                    "ms",
                    idle * 1000,
                    max_ratio=2,
                    note="direct column: idle p99; straight to the upstream meanwhile "
                    f"{figures['direct get ' + phase][0] * 1000:.1f} ms, idle "
                    f"{figures['direct get ' + phase][1] * 1000:.1f} ms",
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-gets", type=int, default=300)
    parser.add_argument(
        "--role", choices=("bench", "upstream", "big-client", "small-client"), default="bench"
    )
    parser.add_argument("--url", default="")
    parser.add_argument("--grpc", default="")
    parser.add_argument("--upstream", default="")
    parser.add_argument("--no-gzip", action="store_true", help="upstream: answers never gzipped")
    parser.add_argument("--out", type=Path, default=None, help="put the rows into this file")
    args = parser.parse_args()
    if args.role == "upstream":
        asyncio.run(run_upstream(args.pods, gzip=not args.no_gzip))
    elif args.role == "small-client":
        asyncio.run(run_small_client(args.url, args.grpc, args.upstream))
    elif args.role == "big-client":
        asyncio.run(run_big_client(args.url, args.grpc, args.rounds, args.pods))
    elif args.out is not None:
        write_rows(args.out, rows(args.pods, args.rounds, args.idle_gets), OWNS)
    else:
        asyncio.run(bench(args.pods, args.rounds, args.idle_gets))


if __name__ == "__main__":
    main()
