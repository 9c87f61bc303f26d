"""Benchmark: views of realistic pods through the gateway (issue 29's speed section).

    .venv/bin/python -m tests.bench.bench_views [--pods 30000] [--rounds 3] [--cold-only]
        [--out BENCHMARKS.md]

``--pods`` realistic pods (``tests/bench/realistic.py``, the pods of ``bench_graphql_list``,
made unique and given varied phases and start times) in one namespace of a demo upstream in a
child process (gzipping large answers and sending a large list as it encodes it, as the
apiserver does; its serialisation of the list would otherwise run on the measured loop); the
gateway in process over loopback. Printed: a
plain list of the same pods (one field, 15 fields), the first (cold) view (each with the
gateway's CPU from ``/proc``: this process and its list workers, the bench's small client
included), the JSON the cache holds against the process's RSS growth, a warm view (its order
computed already), 50 concurrent callers with 50 distinct filters (50 evaluations; with the
process's CPU per view, the bench's client included: a lean keep-alive HTTP/1.1 client,
:class:`_Lean`, which decodes no answer) and with the same view, both again from a
Go client process of its own (``kg-burst``; the gateway's CPU per view alone: this process's
CPU over the burst, divided by 50; the objects its pages wrote and reused, and the distinct
burst again with the cache's writings of objects emptied first), counts by ``status.phase``,
the next page by cursor, and
the bytes of a first page against the full list's; the longest stall of the event loop (a 10 ms
ticker in the gateway's process, with the loop thread's CPU in each gap) while the cold view
fills the cache and while the concurrent callers are served, and the cyclic collector's full
collections during the bursts from another process.

The gateway's collector is set as ``kube-gateway serve`` sets it once started
(``tune_garbage_collector``: what exists is frozen, young collections rarer).  Before the
bench did so (and while it ran the demo upstream in its own process), one full collection
walking the upstream's 30,000 decoded pods (a million objects, 0.8 s of CPU) fell in a
burst of 50 views and was counted as 15 ms of each view's CPU: the "20-23 ms per view"
this bench once printed.  :func:`rows` makes them the "Views"
section of ``BENCHMARKS.md`` (``make bench``); ``--out`` puts that section into an existing
``BENCHMARKS.md`` (replacing the section of the same title) without running the others.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.app import tune_garbage_collector
from gateway.core import POD
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.bench.bench_graphql_list import NAMESPACE, QUERY, _manifest
from tests.bench.report import Row, row, splice, text_table
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

#: The concurrent callers from a process of their own (argv: url, token, query, namespace,
#: warm-up values, measured values): a burst of the warm-up values (connections open),
#: ``ready``, then on a line from stdin the measured burst, its latencies (ms) as JSON.
#: The bursts' load client (Go: ``tests/go-client/cmd/kg-burst``, built by ``make go-client``),
#: so that the burst measures the gateway, not a Python client sharing its two cores.
CLIENT = Path(__file__).resolve().parents[1] / "go-client" / ".bin" / "kg-burst"


async def _burst_from_another_process(
    url: str, values: list[str], warm: list[str], before: Callable[[], None] | None = None
) -> tuple[list[float], float]:
    """Concurrent callers of the views of ``values`` from a client process of their own
    (its connections opened by a burst of ``warm``; then ``before()``, if given): their
    latencies (ms), and the CPU this process (the gateway) spent per view (ms)."""
    proc = await asyncio.create_subprocess_exec(
        str(CLIENT),
        url,
        TOKEN,
        VIEW,
        NAMESPACE,
        orjson.dumps(warm).decode(),
        orjson.dumps(values).decode(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"ready"
    if before is not None:
        before()
    cpu = time.process_time()
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()
    line = await proc.stdout.readline()
    cpu = time.process_time() - cpu
    assert await proc.wait() == 0
    return orjson.loads(line), cpu * 1000 / len(values)


class _Lean:
    """The in-process bursts' callers: keep-alive HTTP/1.1 connections to the gateway, each
    request's bytes written at once and its answer read by its ``Content-Length``, checked
    as the Go client checks it (status 200, no ``"errors"``), no JSON decoded: the bench's
    client shares the gateway's process and interpreter, and an ``httpx`` request and its
    answer's decode cost it more CPU than the gateway's own work on a view (2.29 ms per
    view for both in ``BENCHMARKS.md``, 0.63 ms of it the gateway's; with this client
    0.5 to 0.7 ms for both)."""

    def __init__(self, url: str) -> None:
        address = url.split("://", 1)[1].rstrip("/")
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)
        self.connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def open(self, n: int) -> None:
        while len(self.connections) < n:
            self.connections.append(await asyncio.open_connection(self.host, self.port))

    async def close(self) -> None:
        for _, writer in self.connections:
            writer.close()
        for _, writer in self.connections:
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        self.connections = []

    def request(self, query: str, variables: dict[str, Any]) -> bytes:
        body = orjson.dumps({"query": query, "variables": variables})
        return (
            f"POST /graphql HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def _ask(self, at: int, request: bytes) -> float:
        reader, writer = self.connections[at]
        started = time.perf_counter()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = next(
            int(line.split(b":", 1)[1])
            for line in lines[1:]
            if line[:15].lower() == b"content-length:"
        )
        content = await reader.readexactly(length)
        took = (time.perf_counter() - started) * 1000
        assert status == 200 and b'"errors"' not in content, content[:300]
        return took

    async def burst(self, requests: list[bytes]) -> list[float]:
        """The requests at once, one per connection: each one's latency (ms)."""
        await self.open(len(requests))
        return list(await asyncio.gather(*(self._ask(i, r) for i, r in enumerate(requests))))


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


async def run_upstream(pods: int) -> None:
    """The child process: serve the demo upstream with ``pods`` pods until stdin closes;
    its URL printed first."""
    async with DemoUpstream(seed=False) as demo:
        await demo.store.bulk_create(POD, (_pod(i) for i in range(pods)), namespace=NAMESPACE)
        print(demo.url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


@contextlib.asynccontextmanager
async def _upstream(pods: int) -> AsyncIterator[tuple[str, int]]:
    """The demo upstream in a child process: its URL and process id."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        f"import asyncio; from tests.bench.bench_views import run_upstream; "
        f"asyncio.run(run_upstream({pods}))",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        url = (await proc.stdout.readline()).decode().strip()
        assert url.startswith("http"), f"the upstream did not start: {url!r}"
        yield url, proc.pid
    finally:
        proc.stdin.close()
        try:
            async with asyncio.timeout(10):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()


def _cpu_of(pid: int | str) -> float:
    """A process's CPU seconds so far (user + system, ``/proc``; 0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(but: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                found.extend(int(p) for p in f.read().split())
        except OSError:
            pass
    return [p for p in found if p != but]


def _gateway_cpu(upstream: int) -> Callable[[], tuple[float, float]]:
    """The gateway's CPU from now (this process, and its list workers: its children but
    the upstream), in ms, when the returned function is called: (this process, workers)."""
    own = _cpu_of("self")
    workers = {p: _cpu_of(p) for p in _children(upstream)}

    def spent() -> tuple[float, float]:
        later = {p: _cpu_of(p) for p in _children(upstream)}
        used = sum(cpu - workers.get(p, 0.0) for p, cpu in later.items())
        return (_cpu_of("self") - own) * 1000, used * 1000

    return spent


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


#: Where ``--profile`` writes the profile of the Go client's burst of distinct views.
PROFILE: list[Path] = []


@contextlib.contextmanager
def _profiled(suffix: str = "") -> Iterator[None]:
    """cProfile over the block, written to ``--profile``'s file (if given; its overhead
    is in the CPU per view then), ``suffix`` added to its name.  A file named ``*.spy``:
    ``py-spy``'s samples instead (collapsed stacks with native frames, the process paused
    at each; ``py-spy`` installed beside the interpreter, not a dependency).  On a loaded
    machine a sampler also counts a thread preempted in a system call (a socket's write,
    ``time.thread_time``) as running there: compare with the thread CPU of the parts."""
    if not PROFILE:
        yield
        return
    import cProfile

    path = PROFILE[0].with_name(PROFILE[0].name + suffix)
    if PROFILE[0].suffix == ".spy":
        spy = Path(sys.executable).with_name("py-spy")
        if not spy.exists():
            raise SystemExit(f"{spy} is not installed (pip install py-spy)")
        args = [str(spy), "record", "--pid", str(os.getpid()), "--rate", "1000", "--native"]
        args += ["--format", "raw", "--output", str(path)]
        recorder = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # attached
        try:
            yield
        finally:
            recorder.send_signal(signal.SIGINT)
            recorder.wait()
        print(f"  py-spy samples of the burst: {path}")
        return
    with cProfile.Profile() as profile:
        yield
    profile.dump_stats(path)
    print(f"  profile of the burst: {path}")


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


@contextlib.contextmanager
def _collections() -> Iterator[list[float]]:
    """The CPU (ms) of each full collection of the cyclic collector while inside."""
    full: list[float] = []
    started = [0.0]

    def note(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started[0] = time.process_time()
        else:
            full.append((time.process_time() - started[0]) * 1000)

    gc.callbacks.append(note)
    try:
        yield full
    finally:
        gc.callbacks.remove(note)


class _Stalls(list[float]):
    """How late each 10 ms tick came, in ms (wall time: on a loaded machine, also the
    waits for a CPU); :attr:`cpu`: the event loop thread's CPU between two ticks, in ms
    (the loop's own work in one gap, whatever the machine's load)."""

    cpu: list[float]


@contextlib.asynccontextmanager
async def _ticker() -> AsyncIterator[_Stalls]:
    """The event loop's stalls while inside (:class:`_Stalls`)."""
    stalls = _Stalls()
    stalls.cpu = []

    async def tick() -> None:
        last, last_cpu = time.perf_counter(), time.thread_time()
        while True:
            await asyncio.sleep(0.01)
            now, now_cpu = time.perf_counter(), time.thread_time()
            stalls.append((now - last) * 1000 - 10)
            stalls.cpu.append((now_cpu - last_cpu) * 1000)
            last, last_cpu = now, now_cpu

    task = asyncio.create_task(tick())
    try:
        yield stalls
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _sched(pid: int) -> tuple[float, float]:
    """A process's threads' time on a CPU and time waiting for one so far, in seconds
    (``/proc/<pid>/task/*/schedstat``): the upstream's, which shares the machine's cores
    with the gateway and its list workers."""
    ran = waited = 0.0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                on_cpu, on_queue, _ = f.read().split()
        except (OSError, ValueError):
            continue  # (a thread gone meanwhile)
        ran += int(on_cpu) / 1e9
        waited += int(on_queue) / 1e9
    return ran, waited


async def _list_then_cold(
    ask: Callable[[str, dict[str, Any]], Any], upstream_pid: int, pods: int
) -> dict[str, Any]:
    """One round: a plain list of the pods with 15 fields, then the first (cold) view, each
    with the gateway's CPU (its process and its list workers') and the event loop's stalls."""
    r: dict[str, Any] = {}
    ns = {"ns": NAMESPACE}
    spent = _gateway_cpu(upstream_pid)
    s0 = _sched(upstream_pid)
    async with _ticker() as stalls:
        took, _, full = await ask(QUERY, ns)
    s1 = _sched(upstream_pid)
    r["list_upstream_wait"] = (s1[1] - s0[1]) * 1000
    own, workers = spent()
    r["list"], r["list_bytes"] = took, full
    r["list_cpu"], r["list_worker_cpu"] = own, workers
    r["list_stall"] = max(stalls, default=0)
    print(
        f"plain list of {pods} pods, 15 fields: {took:.0f} ms, {full:,} bytes; the "
        f"gateway's CPU {own:.0f} ms + its workers' {workers:.0f} ms; longest stall "
        f"{r['list_stall']:.0f} ms (CPU {max(stalls.cpu, default=0):.0f} ms); the upstream's "
        f"threads waited {r['list_upstream_wait']:.0f} ms for a CPU; load {os.getloadavg()[0]:.2f}"
    )
    gc.collect()
    r["before"] = _rss()
    spent = _gateway_cpu(upstream_pid)
    s0 = _sched(upstream_pid)
    async with _ticker() as stalls:
        took, body, size = await ask(VIEW, {**ns, "v": "1"})
    s1 = _sched(upstream_pid)
    r["cold_upstream_wait"] = (s1[1] - s0[1]) * 1000
    own, workers = spent()
    r["cold"], r["page_bytes"], r["cold_stall"] = took, size, max(stalls, default=0)
    r["cold_stall_cpu"] = max(stalls.cpu, default=0)
    r["cold_cpu"], r["cold_worker_cpu"] = own, workers
    r["body"] = body
    total = body["data"]["podsView"]["total"]
    print(f"first (cold) view: {took:.0f} ms (total {total}); first page {size:,} bytes")
    print(
        f"  the gateway's CPU {own:.0f} ms + its workers' {workers:.0f} ms; the upstream's "
        f"threads waited {r['cold_upstream_wait']:.0f} ms for a CPU; load "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(
        f"  longest event-loop stall meanwhile: {r['cold_stall']:.0f} ms (the loop's "
        f"CPU in the longest gap: {r['cold_stall_cpu']:.0f} ms)"
    )
    return r


async def _bigrams(
    ask: Callable[[str, dict[str, Any]], Any], r: dict[str, Any], views: Any, ns: dict[str, Any]
) -> None:
    """The name's bigrams (``gateway/core/views/grams.py``) built: a second view of a
    substring of the name asks for them, built in the background; timed to their end with
    the event loop's stalls meanwhile (once per cache and field, before the warm views,
    which would otherwise be served between its steps)."""
    async with _ticker() as stalls:
        cpu, started = time.process_time(), time.perf_counter()
        await ask(VIEW, {**ns, "v": "2"})
        for cache in views.caches:
            await cache.store.settled()
        r["grams_ms"] = (time.perf_counter() - started) * 1000
        r["grams_cpu"] = (time.process_time() - cpu) * 1000
    r["grams_stall"] = max(stalls, default=0)
    r["grams_mb"] = sum(g.bytes for c in views.caches for g in c.store.grams.values()) / 1e6
    print(
        f"the names' bigrams built: {r['grams_ms']:.0f} ms, CPU {r['grams_cpu']:.0f} ms, "
        f"{r['grams_mb']:.0f} MB (in the cache's bytes); longest event-loop stall meanwhile "
        f"{r['grams_stall']:.0f} ms"
    )


def _written(cache: Any) -> tuple[int, int]:
    """The objects a view cache answered from its writings, and wrote, so far (0, 0 in
    code before it kept them: A/B runs)."""
    rendered = getattr(cache, "rendered", None)
    return (0, 0) if rendered is None else (rendered.hits, rendered.writes)


async def _warm(
    ask: Callable[[str, dict[str, Any]], Any],
    r: dict[str, Any],
    url: str,
    ns: dict[str, Any],
    views: Any,
) -> None:
    """The warm view, then 50 concurrent callers of 50 distinct views and of one view, from
    this process and from the Go client (``r``: the figures, by name)."""
    warm = [(await ask(VIEW, {**ns, "v": "1"}))[0] for _ in range(20)]
    r["warm_p50"], r["warm_p99"] = statistics.median(warm), _p(warm, 0.99)
    print(f"warm view: p50 {r['warm_p50']:.1f} ms, p99 {r['warm_p99']:.1f} ms")
    values = [f"{i:02x}" for i in range(50)]
    lean = _Lean(url)
    await lean.burst([lean.request(VIEW, {**ns, "v": "1"})] * 50)  # connections opened
    distinct = [lean.request(VIEW, {**ns, "v": v}) for v in values]
    same = [lean.request(VIEW, {**ns, "v": "1"})] * 50
    async with _ticker() as stalls:
        cpu = time.process_time()
        times = await lean.burst(distinct)
        r["distinct_cpu"] = (time.process_time() - cpu) * 1000 / len(values)
        r["distinct_p50"], r["distinct_p99"] = statistics.median(times), _p(times, 0.99)
        print(
            f"50 concurrent callers, 50 distinct filters: p50 {r['distinct_p50']:.0f}"
            f" ms, p99 {r['distinct_p99']:.0f} ms; CPU per view (gateway and client) "
            f"{r['distinct_cpu']:.1f} ms"
        )
        times = await lean.burst(same)
    await lean.close()
    r["same_p50"], r["same_p99"] = statistics.median(times), _p(times, 0.99)
    r["warm_stall"] = max(stalls, default=0)
    print(
        f"50 concurrent callers, one view: p50 {r['same_p50']:.0f} ms, p99 {r['same_p99']:.0f} ms"
    )
    print(f"  longest event-loop stall meanwhile: {r['warm_stall']:.0f} ms")
    # from another process: other values than above (their orders are computed
    # anew), its connections opened by other values again
    remote = [f"{i:02x}" for i in range(50, 100)]
    warm_values = [f"{i:02x}" for i in range(100, 150)]
    (cache,) = views.caches
    async with _ticker() as stalls:
        with _collections() as collections:
            with _profiled():
                marks: list[tuple[int, int]] = []

                def marked() -> None:  # once the client's connections are open
                    marks.append(_written(cache))

                times, r["remote_cpu"] = await _burst_from_another_process(
                    url, remote, warm_values, marked
                )
                hits, writes = _written(cache)
                r["remote_hits"], r["remote_writes"] = hits - marks[0][0], writes - marks[0][1]
            r["remote_p50"], r["remote_p99"] = statistics.median(times), _p(times, 0.99)
            print(
                f"50 concurrent callers from a Go client, 50 distinct filters: "
                f"p50 {r['remote_p50']:.0f} ms, p99 {r['remote_p99']:.0f} ms; the "
                f"gateway's CPU per view {r['remote_cpu']:.2f} ms (objects written "
                f"{r['remote_writes']}, reused {r['remote_hits']}: written for earlier views"
                " or by another view of the burst)"
            )

            # again with the cache's writings emptied once the client's connections are
            # open: only the objects the burst's own views share are written once
            def emptied() -> None:
                if hasattr(cache, "rendered"):  # (absent in code before it: A/B runs)
                    cache.rendered = type(cache.rendered)()
                marks[:] = [_written(cache)]

            with _profiled(".emptied"):
                times, r["cold_remote_cpu"] = await _burst_from_another_process(
                    url,
                    [f"{i:02x}" for i in range(150, 200)],
                    [f"{i:02x}" for i in range(200, 250)],
                    emptied,
                )
            hits, writes = _written(cache)
            r["cold_remote_hits"], r["cold_remote_writes"] = (
                hits - marks[0][0],
                writes - marks[0][1],
            )
            r["cold_remote_p50"] = statistics.median(times)
            r["cold_remote_p99"] = _p(times, 0.99)
            print(
                f"  the same with the writings emptied first: p50 {r['cold_remote_p50']:.0f}"
                f" ms, p99 {r['cold_remote_p99']:.0f} ms; the gateway's CPU per view "
                f"{r['cold_remote_cpu']:.2f} ms (objects written {r['cold_remote_writes']}, "
                f"reused {r['cold_remote_hits']}: shown by another view of the burst)"
            )
            times, r["remote_same_cpu"] = await _burst_from_another_process(
                url, ["1"] * 50, ["1"] * 50
            )
            r["remote_same_p50"] = statistics.median(times)
            r["remote_same_p99"] = _p(times, 0.99)
            print(
                f"50 concurrent callers from a Go client, one view: p50 "
                f"{r['remote_same_p50']:.0f} ms, p99 {r['remote_same_p99']:.0f} ms; the "
                f"gateway's CPU per view {r['remote_same_cpu']:.1f} ms"
            )
    r["remote_stall"], r["remote_full"] = max(stalls, default=0), len(collections)
    r["remote_stall_cpu"] = max(stalls.cpu, default=0)
    print(
        f"  longest event-loop stall meanwhile: {r['remote_stall']:.0f} ms (the loop's "
        f"CPU in the longest gap: {r['remote_stall_cpu']:.0f} ms); {len(collections)} "
        f"full collections ({sum(collections):.0f} ms of CPU)"
    )
    print(f"load average: {os.getloadavg()}")


async def bench(
    pods: int, cold_only: bool = False, rounds: int = 3, warm_only: bool = False
) -> dict[str, float]:
    """Measure (printing the details); the figures by name (``cold_only``: the plain list
    and the cold view only; ``warm_only``: one cold view to fill the cache, then the warm
    and concurrent views only, for quick tries)."""
    r: dict[str, float] = {}
    async with _upstream(pods) as (upstream_url, upstream_pid):
        settings = Settings(
            host="127.0.0.1",
            http_port=0,
            grpc_port=0,
            server=upstream_url,
            log_level="warning",
            max_list_items=pods + 1,
            watch_linger_seconds=0,  # a view's cache closed: the hub's watch too (rounds)
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

            # the collector as `kube-gateway serve` sets it (start-up frozen, thresholds)
            tune_garbage_collector()
            ns = {"ns": NAMESPACE}
            took, _, _ = await ask(ONE_FIELD, ns)
            print(f"plain list of {pods} pods, 1 field: {took:.0f} ms")
            views = app.state.runtime.cluster.views
            if warm_only:
                took, _, _ = await ask(VIEW, {**ns, "v": "1"})
                print(f"first (cold) view: {took:.0f} ms")
                await _bigrams(ask, r, views, ns)
                await _warm(ask, r, url, ns, views)
                return r
            # rounds of (plain list, cold view), the view's cache and the hub's watch closed
            # after each but the last: the upstream's time to serialise the list (most of
            # either) varies from one request to the next on a shared machine
            seen: dict[str, list[float]] = {}
            for n in range(rounds):
                one = await _list_then_cold(ask, upstream_pid, pods)
                body, before = one.pop("body"), one.pop("before")
                if n == 0:  # the memory the first cold view took (later rounds reuse it)
                    gc.collect()
                    r["json_mb"], r["rss_mb"] = views.stats.bytes / 1e6, (_rss() - before) / 1e6
                for key, value in one.items():
                    seen.setdefault(key, []).append(value)
                if n < rounds - 1:
                    await views.aclose()  # (linger 0: the hub's watch closes with it)
                    assert not views.hub.upstreams, "the next view would not be cold"
            for key, values in seen.items():
                r[key] = statistics.median(values)
            for key in ("list_stall", "cold_stall", "cold_stall_cpu"):
                r[key] = max(seen[key])  # the worst round's
            r["rounds"] = rounds
            ratios = [c / d for c, d in zip(seen["cold"], seen["list"], strict=True)]
            r["ratio_low"], r["ratio_high"] = min(ratios), max(ratios)
            print(
                f"median of {rounds} rounds: plain list {r['list']:.0f} ms, cold view "
                f"{r['cold']:.0f} ms ({r['cold'] / r['list']:.2f}x; each round "
                f"{', '.join(f'{x:.2f}x' for x in ratios)}); CPU list "
                f"{r['list_cpu']:.0f} + {r['list_worker_cpu']:.0f} ms, cold "
                f"{r['cold_cpu']:.0f} + {r['cold_worker_cpu']:.0f} ms; the upstream's wait "
                f"for a CPU: list {r['list_upstream_wait']:.0f} ms, cold "
                f"{r['cold_upstream_wait']:.0f} ms"
            )
            if cold_only:
                return r
            print(
                f"  first page against the full list: 1/{r['list_bytes'] / r['page_bytes']:.0f}"
                " of the bytes"
            )
            print(
                f"cache: {r['json_mb']:.0f} MB of JSON; process RSS "
                f"+{r['rss_mb']:.0f} MB (the hub's JSON, shared with the cache, entries, columns)"
            )
            await _bigrams(ask, r, views, ns)
            await _warm(ask, r, url, ns, views)
            counted = [(await ask(COUNTS, ns))[0] for _ in range(10)]
            r["counts_p50"] = statistics.median(counted)
            print(f"counts by status.phase: p50 {r['counts_p50']:.1f} ms")
            cursor = body["data"]["podsView"]["pageInfo"]["endCursor"]
            pages = [(await ask(VIEW, {**ns, "v": "1", "after": cursor}))[0] for _ in range(10)]
            r["next_p50"] = statistics.median(pages)
            print(f"next page by cursor: p50 {r['next_p50']:.1f} ms")
            r["load"] = os.getloadavg()[0]
            print(f"load average: {os.getloadavg()}")
    return r


#: The in-process concurrency rows' note: their client shares the gateway's interpreter.
LEAN = (
    "the bench's callers in the gateway's process: keep-alive HTTP/1.1, each answer checked "
    "for its status and no errors, not decoded (with httpx and a decode of each answer, the "
    "client's CPU was about 2.6 times the gateway's own)"
)

#: Rancher steve's published figures (its SQL cache; Rancher's own scale tests), beside ours
#: where they compare.
STEVE_MEMORY = "steve: ~2 GiB instead of ~10 GiB"
STEVE_PAGING = "steve: paging 60-630 % faster than without its cache"


def rows(pods: int = 30_000, rounds: int = 3) -> list[Row]:
    """Measure (printing the details) and return the rows of the "Views" section."""
    if not CLIENT.exists():
        subprocess.run(["bash", str(CLIENT.parents[1] / "build.sh")], check=True)
    r = asyncio.run(bench(pods, rounds=rounds))
    n = f"{pods:,} pods"
    load = f"load {r['load']:.1f}"
    return [
        row(
            f"views: first (cold) view, {n}",
            r["cold"],
            "ms",
            r["list"],
            max_ratio=1,
            note=(
                f"direct: a plain list of the same pods, 15 fields; medians of {rounds} rounds "
                f"of both, each round's ratio {r['ratio_low']:.2f}-{r['ratio_high']:.2f}x; {load}"
            ),
        ),
        row(
            f"views: the gateway's CPU for the first (cold) view, {n}, its list workers' included",
            r["cold_cpu"] + r["cold_worker_cpu"],
            "ms",
            r["list_cpu"] + r["list_worker_cpu"],
            note=(
                f"direct: the same for the plain list; the gateway's process "
                f"{r['cold_cpu']:,.0f} ms + its workers' {r['cold_worker_cpu']:,.0f} ms "
                f"(list: {r['list_cpu']:,.0f} + {r['list_worker_cpu']:,.0f} ms)"
            ),
        ),
        row(f"views: warm view, {n}, p50", r["warm_p50"], "ms", max_value=20, note=STEVE_PAGING),
        row(f"views: warm view, {n}, p99", r["warm_p99"], "ms", max_value=50),
        row(
            "views: 50 concurrent callers, 50 distinct views, p50",
            r["distinct_p50"],
            "ms",
            max_value=20,
            note=f"{LEAN}; {load}",
        ),
        row(
            "views: 50 concurrent callers, 50 distinct views, p99",
            r["distinct_p99"],
            "ms",
            max_value=50,
            note=f"{LEAN}; {load}",
        ),
        row(
            "views: 50 concurrent callers, one view, p50",
            r["same_p50"],
            "ms",
            max_value=20,
            note=f"{LEAN}; {load}",
        ),
        row(
            "views: 50 concurrent callers, one view, p99",
            r["same_p99"],
            "ms",
            max_value=50,
            note=LEAN,
        ),
        row(
            "views: CPU per view, 50 distinct views (the gateway and the bench's client)",
            r["distinct_cpu"],
            "ms",
            note=LEAN,
        ),
        row(
            "views: the gateway's CPU per view, 50 distinct views (Go client kg-burst)",
            r["remote_cpu"],
            "ms",
        ),
        row(
            "views: the gateway's CPU per view, 50 callers of one view (Go client kg-burst)",
            r["remote_same_cpu"],
            "ms",
            note=load,
        ),
        row(
            "views: 50 concurrent callers from a Go client (kg-burst), 50 distinct views, p50",
            r["remote_p50"],
            "ms",
            max_value=20,
            note=f"{load}; objects written {r['remote_writes']}, reused {r['remote_hits']} "
            "(written for earlier views of the run or another view of the burst)",
        ),
        row(
            "views: 50 concurrent callers from a Go client (kg-burst), 50 distinct views, p99",
            r["remote_p99"],
            "ms",
            max_value=50,
        ),
        row(
            "views: the gateway's CPU per view, 50 distinct views (Go client kg-burst), "
            "the cache's writings of objects emptied first",
            r["cold_remote_cpu"],
            "ms",
            note=f"objects written {r['cold_remote_writes']}, reused {r['cold_remote_hits']} "
            f"(shown by another view of the burst); {load}",
        ),
        row(
            "views: 50 concurrent callers from a Go client (kg-burst), 50 distinct views, "
            "the cache's writings of objects emptied first, p50",
            r["cold_remote_p50"],
            "ms",
            max_value=20,
            note=load,
        ),
        row(
            "views: 50 concurrent callers from a Go client (kg-burst), 50 distinct views, "
            "the cache's writings of objects emptied first, p99",
            r["cold_remote_p99"],
            "ms",
            max_value=50,
        ),
        row(
            "views: 50 concurrent callers from a Go client (kg-burst), one view, p50",
            r["remote_same_p50"],
            "ms",
            max_value=20,
            note=load,
        ),
        row(
            "views: 50 concurrent callers from a Go client (kg-burst), one view, p99",
            r["remote_same_p99"],
            "ms",
            max_value=50,
        ),
        row(
            "views: full collections of the cyclic collector, 100 callers from the Go client",
            r["remote_full"],
            "collections",
        ),
        row("views: counts by status.phase, p50", r["counts_p50"], "ms", max_value=20),
        row("views: next page by cursor, p50", r["next_p50"], "ms", max_value=20),
        row(
            f"views: process memory after the cold view, {n}",
            r["rss_mb"],
            "MB",
            r["json_mb"],
            max_ratio=2,
            note=f"direct: the JSON of the cached objects; {STEVE_MEMORY}",
        ),
        row(
            f"views: process memory after the cold view and the names' bigrams, {n}",
            r["rss_mb"] + r["grams_mb"],
            "MB",
            r["json_mb"],
            max_ratio=2,
            note="direct: the JSON of the cached objects; the bigrams as the cache counts "
            f"them, {r['grams_mb']:.0f} MB, built in {r['grams_ms']:.0f} ms (CPU "
            f"{r['grams_cpu']:.0f} ms, longest event-loop stall {r['grams_stall']:.0f} ms)",
        ),
        row(
            "views: bytes of a first page (50 items, 15 fields)",
            r["page_bytes"],
            "B",
            r["list_bytes"],
            note="direct: the full list, 15 fields",
        ),
        row(
            "views: longest event-loop stall, cold view",
            r["cold_stall"],
            "ms",
            max_value=50,
            note=f"the loop's CPU in that gap: {r['cold_stall_cpu']:.0f} ms; {load}",
        ),
        row(
            "views: the event loop's most CPU between two ticks, cold view",
            r["cold_stall_cpu"],
            "ms",
            max_value=50,
        ),
        row(
            "views: longest event-loop stall, concurrent callers",
            r["warm_stall"],
            "ms",
            max_value=50,
        ),
        row(
            "views: longest event-loop stall, concurrent callers from the Go client",
            r["remote_stall"],
            "ms",
            max_value=50,
            note=load,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument(
        "--cold-only", action="store_true", help="the plain list and the cold view only"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of (plain list, cold view), their medians reported",
    )
    parser.add_argument(
        "--warm-only",
        action="store_true",
        help="one cold view, then the warm and concurrent views only (quick tries)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="put the section into this BENCHMARKS.md"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="cProfile the Go client's distinct bursts into this file (and FILE.emptied)",
    )
    args = parser.parse_args()
    if args.profile is not None:
        PROFILE.append(args.profile)
    if args.cold_only or args.warm_only:
        asyncio.run(
            bench(args.pods, cold_only=args.cold_only, rounds=args.rounds, warm_only=args.warm_only)
        )
        return
    table = rows(args.pods, args.rounds)
    print()
    print(text_table(table))
    if args.out is not None:
        args.out.write_text(splice(args.out.read_text(), table))


if __name__ == "__main__":
    main()
