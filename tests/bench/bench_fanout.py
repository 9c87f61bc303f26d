"""Benchmark: subscription fan-out of the gateway, measured with a Go load client.

    .venv/bin/python -m tests.bench.bench_fanout [--subscribers 1000] [--rate 20] [--seconds 10]
        [--transports ws,grpc,direct] [--compression]
    .venv/bin/python -m tests.bench.bench_fanout --python-heap [--subscribers 300]
        [--transports grpc]

Not a test: it prints one table of absolute figures, the direct baseline of the same run and
the goals.  Three processes, so that neither the client nor the writer shares the gateway's
interpreter:

* **this process** runs the demo upstream (one Lease labelled ``bench=fanout`` in namespace
  ``bench``) and the writer, which patches the Lease's annotation ``bench/sent`` with its wall
  clock (``time.time_ns()``) at ``--rate`` writes per second;
* **the gateway**, ``kube-gateway serve --server <demo> ...`` as a subprocess (a fresh one per
  transport, so RSS and CPU of one transport do not carry over into the next);
* **the load client**, ``tests/go-client/.bin/kg-fanout`` (built by ``make go-client``; Go, one
  goroutine per subscription, events never decoded): N subscriptions over ``ws``
  (``graphql-transport-ws``, ``watchLeases``), ``grpc`` (``LeaseService/Watch``, 100 streams per
  HTTP/2 connection) or ``direct`` (N HTTP watches straight to the demo upstream, the baseline).
  Latency = the client's receive time - ``bench/sent``.

Per transport: the gateway is warmed by a few subscribers (so one-time costs such as imports
and the shared upstream watch are not charged to the N subscribers), its RSS is read, the N
subscriptions are opened (each ready once it has delivered a warm-up event), the RSS is read
again (KB per idle subscriber), then ``--seconds`` of paced writes; the gateway's CPU
(utime + stime of ``/proc/PID/stat``) is read across the writing window and its drain, and
divided by the messages delivered.  Every step has a deadline; every subprocess is ended in
``finally``; all traffic is on 127.0.0.1.

``--python-heap`` measures instead what Python allocates per idle subscriber (``tracemalloc``)
of the first of ``--transports`` (``ws`` or ``grpc``), the gateway served in this process (as
the tests serve it), N ``kg-fanout`` subscribers of the Lease once warmed: the total per
subscriber and the allocation sites that hold most of it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import orjson

from kube_gateway_demo import DemoUpstream
from tests.bench.report import Row, row

TOKEN = "admin-token"
NAMESPACE = "bench"
LEASE = "fanout"
SELECTOR = "bench=fanout"
ANNOTATION = "bench/sent"
REPO = Path(__file__).resolve().parents[2]
#: ``kube-gateway`` run through this interpreter (an installed script's shebang may be stale)
GATEWAY = (sys.executable, "-m", "gateway.cli")
CLIENT = REPO / "tests" / "go-client" / ".bin" / "kg-fanout"
CLK_TCK = os.sysconf("SC_CLK_TCK")
WARM_SUBSCRIBERS = 8

#: The goals of the issue (1,000 subscribers x 20 updates/s).
GOAL_P99_MS = 100.0
GOAL_CPU_US = 20.0
GOAL_KB = 20.0


# -- /proc ------------------------------------------------------------------------------------


def _rss_kb(pid: int) -> int:
    """Resident set size of a process (``VmRSS``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (every thread), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when this process dies, however it dies."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _end(proc: asyncio.subprocess.Process, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(grace):
            await proc.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


# -- the gateway subprocess -------------------------------------------------------------------


@dataclass
class Gateway:
    proc: asyncio.subprocess.Process
    http_port: int
    grpc_port: int
    log: IO[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, chars: int = 2000) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-chars:]


@contextlib.asynccontextmanager
async def gateway(upstream: str, subscribers: int, source: str = "") -> AsyncIterator[Gateway]:
    """``kube-gateway serve`` against ``upstream``; ends it on exit.  ``source``: a folder
    whose ``gateway`` package it runs instead of this checkout's (an A/B run)."""
    http_port, grpc_port = _free_port(), _free_port()
    budget = max(1000, subscribers + 4 * WARM_SUBSCRIBERS)  # the warm-up's may not be gone yet
    args = [
        "serve",
        "--server", upstream,
        "--host", "127.0.0.1",
        "--http-port", str(http_port),
        "--grpc-port", str(grpc_port),
        "--log-level", "warning",
        "--max-subscriptions-per-identity", str(budget),
        "--max-subscriptions", str(max(10000, budget)),
    ]  # fmt: skip
    # this checkout's code first: the venv's editable install may point at another checkout
    path = os.pathsep.join(p for p in (source, str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryFile() as log:
        proc = await asyncio.create_subprocess_exec(
            *GATEWAY,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, "PYTHONPATH": path},
            # ``python -m`` puts its working directory first on the path
            cwd=source or REPO,
            preexec_fn=_die_with_parent,
        )
        gw = Gateway(proc, http_port, grpc_port, log)
        try:
            async with httpx.AsyncClient(timeout=2.0) as http, asyncio.timeout(60):
                while True:
                    if proc.returncode is not None:
                        raise RuntimeError(f"the gateway exited:\n{gw.log_tail()}")
                    with contextlib.suppress(httpx.HTTPError):
                        if (await http.get(f"http://127.0.0.1:{http_port}/healthz")).is_success:
                            break
                    await asyncio.sleep(0.1)
            yield gw
        finally:
            await _end(proc)


# -- the load client subprocess ---------------------------------------------------------------


@dataclass
class Client:
    """One ``kg-fanout`` process and what it has said."""

    proc: asyncio.subprocess.Process
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    received: int = 0
    progress_at: float = 0.0
    summary: dict[str, Any] | None = None
    stderr: bytearray = field(default_factory=bytearray)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start_reading(self) -> None:
        self._tasks = [asyncio.create_task(self._stdout()), asyncio.create_task(self._stderr())]

    async def _stdout(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode().strip()
            if line == "READY":
                self.ready.set()
            elif line.startswith("RECEIVED "):
                received = int(line.split()[1])
                if received != self.received:
                    self.received, self.progress_at = received, time.monotonic()
            elif line.startswith("{"):
                self.summary = orjson.loads(line)

    async def _stderr(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            self.stderr += raw[:4096]

    async def finish(self, deadline: float = 30.0) -> dict[str, Any]:
        """Close stdin (the client stops and prints its summary) and return the summary."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        async with asyncio.timeout(deadline):
            await asyncio.gather(*self._tasks)
            await self.proc.wait()
        if self.summary is None:
            raise RuntimeError(f"kg-fanout printed no summary: {self.stderr.decode()[-2000:]}")
        return self.summary

    async def aclose(self) -> None:
        await _end(self.proc, grace=5.0)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def client(
    transport: str,
    target: str,
    subscribers: int,
    *,
    duration: float,
    latencies: str = "",
    compression: bool = False,
) -> AsyncIterator[Client]:
    args = [
        "--transport", transport,
        "--target", target,
        "--token", TOKEN,
        "--namespace", NAMESPACE,
        "--selector", SELECTOR,
        "--subscribers", str(subscribers),
        "--duration", f"{duration}s",
        "--progress", "200ms",
        "--streams-per-conn", "100",
        *(["--latencies-out", latencies] if latencies else []),
        *(["--compression"] if compression and transport == "ws" else []),
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        str(CLIENT),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=_die_with_parent,
    )
    c = Client(proc)
    c.start_reading()
    try:
        yield c
    finally:
        await c.aclose()


# -- the writer -------------------------------------------------------------------------------


class Writer:
    def __init__(self, demo: DemoUpstream) -> None:
        self.demo = demo
        self.warm = 0

    async def write(self, value: str) -> None:
        await self.demo.store.patch(
            "leases", LEASE, {"metadata": {"annotations": {ANNOTATION: value}}}, namespace=NAMESPACE
        )

    async def warm_until_ready(self, c: Client, deadline: float) -> None:
        """Warm-up writes (not integers: never recorded) until every subscription delivered."""
        end = time.monotonic() + deadline
        while not c.ready.is_set():
            if c.proc.returncode is not None:
                raise RuntimeError(f"kg-fanout exited: {c.stderr.decode()[-2000:]}")
            if time.monotonic() > end:
                raise RuntimeError(f"kg-fanout was not READY within {deadline:g} s")
            self.warm += 1
            await self.write(f"warm-{self.warm}")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.25):
                    await c.ready.wait()

    async def paced(self, rate: float, seconds: float) -> tuple[int, int, float]:
        """Write at ``rate`` per second for ``seconds``; returns (writes, first ns, elapsed s)."""
        interval = 1.0 / rate
        count = round(rate * seconds)
        first = time.time_ns()
        start = time.monotonic()
        for i in range(count):
            delay = start + i * interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.write(str(time.time_ns()))
        return count, first, time.monotonic() - start


# -- one transport ----------------------------------------------------------------------------


@dataclass
class Result:
    transport: str
    subscribers: int
    writes: int
    write_seconds: float
    expected: int
    summary: dict[str, Any]
    delivered_per_s: float
    gateway_cpu_s: float | None = None
    gateway_cpu_pct: float | None = None
    rss_before_kb: int | None = None
    rss_ready_kb: int | None = None
    upstream_watches: int = 0
    driver_cpu_pct: float = 0.0
    drain_s: float = 0.0

    @property
    def received(self) -> int:
        return int(self.summary["received"])

    @property
    def cpu_us_per_msg(self) -> float | None:
        if self.gateway_cpu_s is None or not self.received:
            return None
        return self.gateway_cpu_s / self.received * 1e6

    @property
    def kb_per_sub(self) -> float | None:
        if self.rss_before_kb is None or self.rss_ready_kb is None:
            return None
        return (self.rss_ready_kb - self.rss_before_kb) / self.subscribers

    @property
    def client_cpu_pct(self) -> float:
        s = self.summary
        return 100.0 * s["client_cpu_seconds"] / max(s["window_seconds"], 1e-9)


async def _drain(c: Client, expected: int, *, quiet: float = 1.5, limit: float = 15.0) -> float:
    """Wait until the client has every message, or none came for ``quiet`` s; returns s."""
    start = time.monotonic()
    c.progress_at = max(c.progress_at, start)
    while c.received < expected and time.monotonic() - start < limit:
        if time.monotonic() - c.progress_at > quiet or c.proc.returncode is not None:
            break
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def run_transport(
    transport: str, demo: DemoUpstream, writer: Writer, subscribers: int, args: argparse.Namespace
) -> Result:
    duration = args.seconds + 120  # the client's own bound; stdin closing ends it first
    watches0 = demo.faults.watch_requests
    async with contextlib.AsyncExitStack() as stack:
        gw: Gateway | None = None
        if transport == "direct":
            target = demo.url
        else:
            gw = await stack.enter_async_context(
                gateway(demo.url, subscribers, args.gateway_source)
            )
            target = (
                f"ws://127.0.0.1:{gw.http_port}/graphql"
                if transport == "ws"
                else f"127.0.0.1:{gw.grpc_port}"
            )
            # warm the gateway: code paths, the shared upstream watch (lingers 10 s)
            async with client(
                transport, target, WARM_SUBSCRIBERS, duration=30, compression=args.compression
            ) as warm:
                await writer.warm_until_ready(warm, 60)
                await warm.finish()
            await asyncio.sleep(1.0)
        rss_before = _rss_kb(gw.pid) if gw else None
        latencies = str(Path(args.latencies_dir) / f"{transport}.txt") if args.latencies_dir else ""
        c = await stack.enter_async_context(
            client(
                transport,
                target,
                subscribers,
                duration=duration,
                latencies=latencies,
                compression=args.compression,
            )
        )
        await writer.warm_until_ready(c, args.connect_timeout)
        await asyncio.sleep(1.0)  # let the last warm-up events drain: idle subscribers
        rss_ready = _rss_kb(gw.pid) if gw else None
        base = c.received
        cpu0 = _cpu_seconds(gw.pid) if gw else None
        driver0, wall0 = time.process_time(), time.monotonic()
        writes, first_ns, write_seconds = await writer.paced(args.rate, args.seconds)
        expected = writes * subscribers
        drain = await _drain(c, base + expected)
        cpu1 = _cpu_seconds(gw.pid) if gw else None
        driver1, wall1 = time.process_time(), time.monotonic()
        summary = await c.finish()
        if gw is not None and gw.proc.returncode is not None:
            raise RuntimeError(f"the gateway died:\n{gw.log_tail()}")
    # delivered per second over the writes' nominal window, or longer if deliveries lagged
    last = summary["last_recv_unix_ns"]
    span = max(writes / args.rate, (last - first_ns) / 1e9 if last else 0.0)
    result = Result(
        transport=transport,
        subscribers=subscribers,
        writes=writes,
        write_seconds=write_seconds,
        expected=expected,
        summary=summary,
        delivered_per_s=summary["received"] / span if span > 0 else 0.0,
        rss_before_kb=rss_before,
        rss_ready_kb=rss_ready,
        upstream_watches=demo.faults.watch_requests - watches0,
        driver_cpu_pct=100.0 * (driver1 - driver0) / (wall1 - wall0),
        drain_s=drain,
    )
    if cpu0 is not None and cpu1 is not None:
        result.gateway_cpu_s = cpu1 - cpu0
        result.gateway_cpu_pct = 100.0 * (cpu1 - cpu0) / (wall1 - wall0)
    return result


# -- report -----------------------------------------------------------------------------------


def _fmt(value: float | None, spec: str, goal: float | None = None) -> str:
    if value is None:
        return "-"
    text = format(value, spec)
    if goal is not None:
        text += " ok" if value <= goal else " !!"
    return text


def report(results: list[Result], args: argparse.Namespace) -> None:
    cols = [
        ("transport", 10),
        ("subs", 6),
        ("msgs/s delivered", 22),
        ("delivered", 10),
        ("p50 ms", 8),
        ("p99 ms", 11),
        ("max ms", 9),
        ("gw CPU us/msg", 14),
        ("gw CPU %", 9),
        ("KB/idle sub", 12),
        ("upstream watches", 17),
        ("client CPU %", 13),
    ]
    print()
    print(
        f"fan-out: {args.rate:g} writes/s for {args.seconds:g} s to one Lease; "
        f"{'ws clients offer permessage-deflate; ' if args.compression else ''}"
        f"{os.cpu_count()} CPUs; gateway pid CPU from /proc, client = Go kg-fanout"
    )
    print("".join(f"{name:>{width}}" for name, width in cols))
    for r in results:
        s = r.summary
        full = r.received >= r.expected
        rate = f"{r.delivered_per_s:,.0f} / {args.rate * r.subscribers:,.0f}"
        row = [
            r.transport,
            str(r.subscribers),
            rate,
            f"{100.0 * r.received / max(r.expected, 1):.1f}%",
            _fmt(s["p50_ms"], ".1f"),
            _fmt(s["p99_ms"], ".1f", GOAL_P99_MS),
            _fmt(s["max_ms"], ".0f"),
            _fmt(r.cpu_us_per_msg, ".1f", None if r.transport == "direct" else GOAL_CPU_US),
            _fmt(r.gateway_cpu_pct, ".0f"),
            _fmt(r.kb_per_sub, ".1f", GOAL_KB),
            str(r.upstream_watches),
            f"{r.client_cpu_pct:.0f}",
        ]
        if not full:
            row[3] += " !!"
        print("".join(f"{cell:>{width}}" for cell, (_, width) in zip(row, cols, strict=True)))
    print(
        f"goals (issue): p99 <= {GOAL_P99_MS:g} ms; <= {GOAL_CPU_US:g} us gateway CPU per "
        f"delivered message; <= {GOAL_KB:g} KB RSS per idle subscriber; all 20,000 msg/s "
        "delivered for 1,000 subscribers x 20 updates/s  (ok: meets it, !!: misses it)"
    )
    print("details:")
    for r in results:
        s = r.summary
        rss = (
            f"gateway RSS {r.rss_before_kb / 1024:.0f} -> {r.rss_ready_kb / 1024:.0f} MiB; "
            if r.rss_before_kb is not None and r.rss_ready_kb is not None
            else "gateway not involved (the demo upstream serves every watch); "
        )
        print(
            f"  {r.transport}: {r.writes} writes in {r.write_seconds:.2f} s, "
            f"{r.received:,}/{r.expected:,} received "
            f"(per subscriber {s['per_subscriber_min']}..{s['per_subscriber_max']}), "
            f"drain {r.drain_s:.1f} s; {rss}"
            f"{s['connections']} client connections; client CPU "
            f"{s['client_cpu_seconds']:.2f} s in {s['window_seconds']:.1f} s; "
            f"driver (demo upstream + writer) CPU {r.driver_cpu_pct:.0f}%; "
            f"errors {s['errors']}{(' (' + s['first_error'] + ')') if s['errors'] else ''}"
        )


async def _the_lease(demo: DemoUpstream) -> None:
    """The Lease every subscriber watches, in its namespace of ``demo``."""
    await demo.store.ensure_namespace(NAMESPACE)
    await demo.store.create(
        "leases",
        {
            "metadata": {
                "name": LEASE,
                "labels": {"bench": "fanout"},
                "annotations": {ANNOTATION: "none"},
            },
            "spec": {"holderIdentity": "bench", "leaseDurationSeconds": 15},
        },
        namespace=NAMESPACE,
    )


async def bench(args: argparse.Namespace) -> list[Result]:
    """Runs every transport of ``args``, prints the report and returns the results."""
    if not CLIENT.exists():
        raise SystemExit(f"{CLIENT} is missing: run `make go-client` first")
    main = asyncio.current_task()
    assert main is not None
    # SIGTERM (and SIGINT, which asyncio.run handles) cancel the run: every `finally` runs
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    results: list[Result] = []
    async with DemoUpstream(seed=False) as demo:
        await _the_lease(demo)
        writer = Writer(demo)
        for transport in args.transports:
            n = args.direct_subscribers if transport == "direct" else args.subscribers
            print(f"running {transport} with {n} subscribers ...", file=sys.stderr, flush=True)
            async with asyncio.timeout(args.connect_timeout + args.seconds + 300):
                results.append(await run_transport(transport, demo, writer, n, args))
            await asyncio.sleep(1.0)
    report(results, args)
    return results


async def python_heap(args: argparse.Namespace, top: int = 25) -> float:
    """Python allocations per idle subscriber (KB; prints the sites) of the first of
    ``--transports`` that is ``ws`` or ``grpc``."""
    import gc
    import linecache
    import tracemalloc

    from tests.support.graphql import serve_gateway

    async with DemoUpstream(seed=False) as demo:
        await _the_lease(demo)
        writer = Writer(demo)
        budget = max(1000, args.subscribers + 4 * WARM_SUBSCRIBERS)
        transport = next((t for t in args.transports if t != "direct"), "ws")
        async with serve_gateway(demo, max_subscriptions_per_identity=budget) as gw:
            compression = args.compression
            target = (
                gw.ws_url if transport == "ws" else f"127.0.0.1:{gw.app.state.runtime.grpc_port}"
            )
            async with client(
                transport, target, WARM_SUBSCRIBERS, duration=120, compression=compression
            ) as warm:
                await writer.warm_until_ready(warm, 60)
                await warm.finish()
            await asyncio.sleep(1.0)
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.take_snapshot()
                async with client(
                    transport, target, args.subscribers, duration=120, compression=compression
                ) as c:
                    await writer.warm_until_ready(c, args.connect_timeout)
                    await asyncio.sleep(1.5)  # the last warm-up events drained: idle
                    gc.collect()
                    after = tracemalloc.take_snapshot()
                    await c.finish()
            finally:
                tracemalloc.stop()
    skip = [tracemalloc.Filter(False, tracemalloc.__file__)]
    stats = after.filter_traces(skip).compare_to(before.filter_traces(skip), "lineno")
    n = args.subscribers
    per = sum(st.size_diff for st in stats) / n / 1000
    name = "WebSocket" if transport == "ws" else "gRPC Watch"
    print(f"Python allocations per idle {name} subscriber: {per:.2f} KB ({n} subscribers)")
    for st in stats[:top]:
        where = st.traceback[0]
        name = where.filename.split("site-packages/")[-1].replace(str(REPO) + "/", "")
        line = linecache.getline(where.filename, where.lineno).strip()[:60]
        size, blocks = st.size_diff / n, st.count_diff / n
        print(f"{size:8.0f} B {blocks:6.2f} blocks  {name}:{where.lineno}  {line}")
    return per


def rows(argv: Sequence[str] = ()) -> list[Row]:
    """Measure (printing the details) and return the rows of the benchmark table."""
    args = parse_args(list(argv))
    results = {r.transport: r for r in asyncio.run(bench(args))}
    direct = results.get("direct")
    names = {"ws": "GraphQL WS", "grpc": "gRPC Watch"}
    out: list[Row] = []
    for transport, name in names.items():
        r = results.get(transport)
        if r is None:
            continue
        head = f"fan-out {name}, {r.subscribers:,} subscribers x {args.rate:g}/s"
        goal_rate = args.rate * r.subscribers
        out.append(
            row(
                f"{head}: delivered",
                r.delivered_per_s,
                "msg/s",
                direct.delivered_per_s if direct else None,
                min_value=goal_rate * 0.99,
            )
        )
        p99, direct_p99 = r.summary.get("p99_ms"), direct.summary.get("p99_ms") if direct else None
        if p99 is not None:
            out.append(row(f"{head}: p99 latency", p99, "ms", direct_p99, max_value=GOAL_P99_MS))
        if r.cpu_us_per_msg is not None:
            out.append(
                row(
                    f"{head}: gateway CPU per message",
                    r.cpu_us_per_msg,
                    "µs",
                    max_value=GOAL_CPU_US,
                )
            )
        if r.kb_per_sub is not None:
            out.append(
                row(f"{head}: RSS per idle subscriber", r.kb_per_sub, "KB", max_value=GOAL_KB)
            )
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20.0, help="writes per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="writing window")
    parser.add_argument(
        "--direct-subscribers",
        type=int,
        default=None,
        help="subscribers of the direct baseline (default: --subscribers)",
    )
    parser.add_argument(
        "--transports",
        default="ws,grpc,direct",
        help="comma-separated, in order (ws, grpc, direct)",
    )
    parser.add_argument(
        "--connect-timeout", type=float, default=180.0, help="for N subscriptions to be ready"
    )
    parser.add_argument(
        "--compression",
        action="store_true",
        help="ws: the clients offer permessage-deflate, as browsers do",
    )
    parser.add_argument(
        "--python-heap",
        action="store_true",
        help="instead: Python allocations per idle subscriber (tracemalloc) of the first "
        "of --transports (ws or grpc), the gateway in this process",
    )
    parser.add_argument(
        "--gateway-source",
        default="",
        help="run the gateway package found in DIR (DIR/gateway) instead of this checkout's: "
        "an A/B run against another version's code",
    )
    parser.add_argument(
        "--latencies-dir",
        default="",
        help='write every delivery as "subscriber sent_ns latency_ns" to DIR/<transport>.txt',
    )
    args = parser.parse_args(argv)
    args.transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    unknown = set(args.transports) - {"ws", "grpc", "direct"}
    if unknown:
        parser.error(f"unknown transports: {sorted(unknown)}")
    if args.direct_subscribers is None:
        args.direct_subscribers = args.subscribers
    return args


def main() -> None:
    args = parse_args()
    try:
        asyncio.run(python_heap(args) if args.python_heap else bench(args))
    except (RuntimeError, TimeoutError) as exc:
        raise SystemExit(f"bench_fanout: {exc!r}") from exc
    except asyncio.CancelledError:
        raise SystemExit("bench_fanout: stopped by SIGTERM") from None


if __name__ == "__main__":
    main()
