"""Benchmark: HTTP/2 or HTTP/1.1 from the gateway to a real kube-apiserver?

    .venv/bin/python -m tests.bench.bench_upstream_http2 [--requests 500] [--concurrent 3200]

Not a test: it starts the real etcd + kube-apiserver of ``tests/e2e`` (``make e2e-bins``),
measures the gateway's own upstream client (``build_http_client`` + ``KubeAdapter``) once
with ``http2=False`` and once with ``http2=True`` (httpx then multiplexes every request of
an origin over one connection), and prints one table, the ratio HTTP/2 / HTTP/1.1 of every
figure, and a conclusion computed from the figures.  Per protocol, each scenario on a fresh
client:

1. **unary latency**: ``KubeAdapter.get`` of one Lease in ``team-a`` as admin, p50 / p99 at
   concurrency 1 and 32, with 0, 50 and 100 watches open on the same client
   (``watch_stream`` on leases in ``team-a``, idle after their initial event, each drained
   by a task).  Each figure is preceded by a warm-up at the same concurrency, so connection
   set-up is not timed;
2. **TCP connections** the process holds to the apiserver after each of those (ESTABLISHED
   sockets to the apiserver's port in ``/proc/net/tcp{,6}`` whose inode is one of this
   process's descriptors in ``/proc/self/fd``), and the TLS connections httpx opened while
   measuring at c=32 (its pool closes a connection idle for 5 s, so under a varying
   concurrency HTTP/1.1 keeps handshaking: part of its cost, counted from httpcore's log);
3. **time to open 100 watches** at once on a cold client (TLS handshakes included: what a
   gateway pays when it starts or reconnects), median of 5 tries, and whether a 101st
   watch opens beside 100;
4. **blast radius of one rejected token**: 20 admin watches open and 4 tasks looping admin
   GETs on one client, then ONE GET with an invalid bearer token through the same client;
   counted within 2 s of it: admin watches that raised or ended, admin GETs that failed to
   the caller, and GETs the adapter had to send again after their connection broke (the
   adapter's one retry of a GET hides those from the caller; watches get no such retry).

**Stalls.**  Requests can wait forever inside httpcore's HTTP/2 connection, where none of
httpx's timeouts applies, so every GET and every set of watch opens has its own deadline
here: a GET unanswered after 5 s counts as failed and as an infinite latency (a percentile
that lands on one prints ``stalled``; a scenario whose first GET stalls is not measured
further), a set of watches not all open after 10 s is ``stalled`` with the number that
opened.  Two causes were seen: the apiserver advertises ``SETTINGS_MAX_CONCURRENT_STREAMS``
= 100 (read here with a bare h2 handshake) and httpx queues a request for a free stream on
its one connection instead of opening another; and below that limit, httpcore's streams
take turns at the connection's read lock and the one holding it blocks on the socket, so a
response already read for one stream waits behind every idle watch queued before it, each
of which blocks in turn until more bytes arrive on the connection.

Every step has a deadline, every task and client is closed in ``finally``, and the only
traffic is to the apiserver on 127.0.0.1.  This process, etcd and the apiserver share the
machine's cores: figures are for comparing the two columns of one run, not absolute.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import secrets
import socket
import statistics
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import h2.settings

from gateway.core import errors
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from tests.e2e.apiserver import BinariesMissing, KubeAPIServer, running_apiserver

NAMESPACE = "team-a"
LEASE = "bench-http2"
MAX_CONNECTIONS = 512
#: Watches open during the latency scenarios (the brief's 0 and 100, and 50: below the
#: apiserver's 100 streams per HTTP/2 connection even with 32 GETs in flight).
WATCH_COUNTS = (0, 50, 100)
OPEN_WATCHES = 100
OPEN_TRIES = 5
BLAST_WATCHES = 20
BLAST_GETTERS = 4
BLAST_WINDOW_S = 2.0
#: Deadlines: httpx's own timeout of a GET; a GET counted as stalled; a set of watches
#: counted as stalled; the time after which a latency phase starts no more GETs; closing;
#: the whole run.
GET_TIMEOUT_S = 10.0
STALL_S = 5.0
OPEN_STALL_S = 10.0
PHASE_BUDGET_S = 30.0
CLOSE_TIMEOUT_S = 10.0
RUN_TIMEOUT_S = 1200.0
STALLED = "stalled"
#: Width of a column of the table.
COL = 18

Result = dict[str, float | str]


# -- /proc ------------------------------------------------------------------------------------


def _socket_inodes() -> set[int]:
    """Inodes of the sockets this process has open."""
    inodes: set[int] = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def tcp_connections(port: int) -> int:
    """ESTABLISHED TCP connections of this process to ``port`` (the apiserver's).

    The apiserver's own loopback connections to its port are in the same tables but not
    among this process's descriptors, so they are not counted.
    """
    inodes = _socket_inodes()
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            remote_port = int(cols[2].rsplit(":", 1)[1], 16)
            if cols[3] == "01" and remote_port == port and int(cols[9]) in inodes:
                count += 1
    return count


# -- the apiserver's HTTP/2 settings ----------------------------------------------------------


def server_max_streams(srv: KubeAPIServer) -> str:
    """``SETTINGS_MAX_CONCURRENT_STREAMS`` of the apiserver: a bare h2 handshake (client
    preface and SETTINGS, no request), read from the server's first SETTINGS frame."""
    parts = urlsplit(srv.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 443
    ctx = srv.ssl_context()
    ctx.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host, port), timeout=5.0) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        if tls.selected_alpn_protocol() != "h2":
            return "no h2"
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        tls.sendall(conn.data_to_send())
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            data = tls.recv(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RemoteSettingsChanged):
                    code = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS
                    changed = event.changed_settings.get(code)
                    return str(changed.new_value) if changed else "unlimited"
    return "?"


# -- counting log records: the adapter's GET retries, httpcore's TLS handshakes ---------------


class LogCounter(logging.Handler):
    """Counts the records of one logger whose message starts with ``prefix``; those logged
    by a task in ``apart`` are counted apart, in ``apart_count``."""

    def __init__(self, prefix: str) -> None:
        super().__init__(logging.DEBUG)
        self.prefix = prefix
        self.count = 0
        self.apart: set[asyncio.Task[None]] = set()
        self.apart_count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if not record.getMessage().startswith(self.prefix):
            return
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no event loop in this thread
            task = None
        if task in self.apart:
            self.apart_count += 1
        else:
            self.count += 1


@contextlib.contextmanager
def counting(logger_name: str, prefix: str) -> Iterator[LogCounter]:
    """Count ``prefix`` records of ``logger_name`` (set to DEBUG meanwhile; both loggers
    used here log at DEBUG only on the rare events counted, and nothing is printed: the
    root logger has no handler)."""
    logger = logging.getLogger(logger_name)
    counter = LogCounter(prefix)
    level = logger.level
    logger.addHandler(counter)
    logger.setLevel(logging.DEBUG)
    try:
        yield counter
    finally:
        logger.removeHandler(counter)
        logger.setLevel(level)


def counting_retries() -> contextlib.AbstractContextManager[LogCounter]:
    """The adapter's "retrying a GET": a GET whose pooled connection broke (GOAWAY, close)
    under it, sent once more on another connection."""
    return counting("gateway.core.upstream.adapter", "retrying a GET")


def counting_handshakes() -> contextlib.AbstractContextManager[LogCounter]:
    """httpcore's "start_tls.complete": one new TLS connection to the apiserver."""
    return counting("httpcore.connection", "start_tls.complete")


# -- clients, GETs, watches -------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@contextlib.asynccontextmanager
async def upstream(srv: KubeAPIServer, *, http2: bool) -> AsyncIterator[KubeAdapter]:
    """A fresh gateway upstream client; requests and watches share it (and its pool)."""
    cfg = UpstreamConfig(server=srv.url, source="bench", ca_file=Path(srv.ca_file))
    http = build_http_client(cfg, http2=http2, max_connections=MAX_CONNECTIONS)
    try:
        yield KubeAdapter(http, stream_http=http)
    finally:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await http.aclose()


async def get_lease(kube: KubeAdapter, credential: Credential, deadline: float = STALL_S) -> None:
    """One GET, with a deadline of its own (see "Stalls" above).

    Raises:
        TimeoutError: no answer within ``deadline``.
        GatewayError: the adapter's error for a failed GET.
    """
    async with asyncio.timeout(deadline):
        await kube.get(
            "leases", LEASE, namespace=NAMESPACE, credential=credential, timeout=GET_TIMEOUT_S
        )


@dataclass
class Unary:
    """One latency phase; a figure is ``STALLED`` when it lands on a stalled GET."""

    p50_ms: float | str
    p99_ms: float | str
    rps: float | str
    cpu_us: float | str  # this process's CPU per GET
    failed: int  # errors and stalls
    connections: int
    handshakes: int  # new TLS connections while measuring


def _ms(seconds: float) -> float | str:
    return STALLED if math.isinf(seconds) else seconds * 1e3


async def unary(
    kube: KubeAdapter, admin: Credential, port: int, *, concurrency: int, total: int
) -> Unary:
    """``total`` GETs by ``concurrency`` workers (after a warm-up at the same concurrency);
    no GET is started after ``PHASE_BUDGET_S``."""
    try:
        await get_lease(kube, admin)
    except (TimeoutError, errors.GatewayError):
        return Unary(STALLED, STALLED, STALLED, STALLED, 1, tcp_connections(port), 0)

    async def run(n: int, latencies: list[float]) -> int:
        remaining = n
        failed = 0
        stop_at = time.perf_counter() + PHASE_BUDGET_S

        async def worker() -> None:
            nonlocal remaining, failed
            while remaining > 0 and time.perf_counter() < stop_at:
                remaining -= 1
                t0 = time.perf_counter()
                try:
                    await get_lease(kube, admin)
                except TimeoutError:
                    failed += 1
                    latencies.append(math.inf)
                except errors.GatewayError:
                    failed += 1
                else:
                    latencies.append(time.perf_counter() - t0)

        async with asyncio.timeout(PHASE_BUDGET_S + 2 * STALL_S), asyncio.TaskGroup() as tg:
            for _ in range(concurrency):
                tg.create_task(worker())
        return failed

    failed = await run(max(2 * concurrency, 20), [])  # warm-up: connections, TLS, caches
    latencies: list[float] = []
    with counting_handshakes() as handshakes:
        cpu0, t0 = time.process_time(), time.perf_counter()
        failed += await run(total, latencies)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    answered = sum(1 for x in latencies if not math.isinf(x))
    return Unary(
        p50_ms=_ms(percentile(latencies, 0.50)) if latencies else STALLED,
        p99_ms=_ms(percentile(latencies, 0.99)) if latencies else STALLED,
        rps=answered / wall,
        cpu_us=cpu / max(1, len(latencies)) * 1e6,
        failed=failed,
        connections=tcp_connections(port),
        handshakes=handshakes.count,
    )


@dataclass
class WatchSet:
    """``n`` watches on leases in ``team-a``, each drained by its own task, recording when
    and how each ended (an error's type name, or ``ended`` for a clean end)."""

    kube: KubeAdapter
    credential: Credential
    n: int
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    opened: int = 0
    ends: list[tuple[float, str]] = field(default_factory=list)
    _settled: asyncio.Event = field(default_factory=asyncio.Event)

    async def _watch(self) -> None:
        started = False
        try:
            async with self.kube.watch_stream(
                "leases", namespace=NAMESPACE, credential=self.credential
            ) as events:
                started = True
                self.opened += 1
                self._check_settled()
                async for _event in events:
                    pass
            how = "ended"
        except Exception as exc:  # recorded: how the watch broke is the measurement
            how = type(exc).__name__
        self.ends.append((time.perf_counter(), how))
        if not started:
            self._check_settled()

    def _check_settled(self) -> None:
        if self.opened + len(self.ends) >= self.n:
            self._settled.set()

    async def open(self, deadline: float = OPEN_STALL_S) -> float | None:
        """Open all ``n`` at once: seconds until every one had its response headers, or
        None when some had not within ``deadline`` or failed (``opened`` says how many
        did; the others go on trying until ``close``)."""
        t0 = time.perf_counter()
        self.tasks = [asyncio.create_task(self._watch()) for _ in range(self.n)]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(deadline):
                await self._settled.wait()
        return time.perf_counter() - t0 if self.opened == self.n else None

    def ended_between(self, start: float, end: float) -> int:
        return sum(1 for t, _how in self.ends if start <= t <= end)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await asyncio.gather(*self.tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def watches(kube: KubeAdapter, credential: Credential, n: int) -> AsyncIterator[WatchSet]:
    ws = WatchSet(kube, credential, n)
    try:
        yield ws
    finally:
        await ws.close()


# -- the measurements of one protocol ---------------------------------------------------------


async def latency_scenario(
    srv: KubeAPIServer, out: Result, *, http2: bool, n_watches: int, args: argparse.Namespace
) -> None:
    port = urlsplit(srv.url).port or 443
    admin = Credential(srv.tokens["admin"])
    w = f"w{n_watches}"
    async with upstream(srv, http2=http2) as kube, watches(kube, admin, n_watches) as ws:
        if n_watches:
            await ws.open()
            out[f"{w}.opened"] = ws.opened
            await asyncio.sleep(0.2)
            out[f"{w}.connections"] = tcp_connections(port)
        for c, total in ((1, args.requests), (32, args.concurrent)):
            u = await unary(kube, admin, port, concurrency=c, total=total)
            for name in (
                "p50_ms",
                "p99_ms",
                "rps",
                "cpu_us",
                "failed",
                "connections",
                "handshakes",
            ):
                out[f"{w}c{c}.{name}"] = getattr(u, name)
        out[f"{w}.failed"] = float(out[f"{w}c1.failed"]) + float(out[f"{w}c32.failed"])
        if n_watches == max(WATCH_COUNTS):
            async with watches(kube, admin, 1) as extra:
                took = await extra.open(STALL_S)
                out["extra.open_ms"] = STALLED if took is None else took * 1e3
        out["lost"] = float(out.get("lost", 0)) + len(ws.ends)


async def open_tries(srv: KubeAPIServer, out: Result, *, http2: bool) -> None:
    """Open ``OPEN_WATCHES`` watches at once on a cold client, ``OPEN_TRIES`` times."""
    admin = Credential(srv.tokens["admin"])
    times: list[float] = []
    stalled = 0
    for _ in range(OPEN_TRIES):
        async with upstream(srv, http2=http2) as kube, watches(kube, admin, OPEN_WATCHES) as ws:
            took = await ws.open()
            if took is None:
                stalled += 1
            else:
                times.append(took)
    out["open.median_ms"] = statistics.median(times) * 1e3 if times else STALLED
    out["open.stalled"] = stalled


async def blast_radius(srv: KubeAPIServer, out: Result, *, http2: bool) -> None:
    port = urlsplit(srv.url).port or 443
    admin = Credential(srv.tokens["admin"])
    invalid = Credential("bench-invalid-" + secrets.token_urlsafe(24))
    async with upstream(srv, http2=http2) as kube, watches(kube, admin, BLAST_WATCHES) as ws:
        await ws.open()
        for _ in range(BLAST_GETTERS):  # a connection per getter is ready (HTTP/1.1)
            with contextlib.suppress(TimeoutError, errors.GatewayError):
                await get_lease(kube, admin)
        await asyncio.sleep(0.3)
        out["blast.opened"] = ws.opened - len(ws.ends)
        out["blast.conns_before"] = tcp_connections(port)
        done = asyncio.Event()
        results: list[str] = []

        async def getter() -> None:
            while not done.is_set():
                try:
                    await get_lease(kube, admin)
                    results.append("ok")
                except (errors.GatewayError, TimeoutError) as exc:
                    results.append(type(exc).__name__)

        with counting_retries() as retries:
            getters = [asyncio.create_task(getter()) for _ in range(BLAST_GETTERS)]
            try:
                await asyncio.sleep(0.2)  # admin GETs are in flight
                results.clear()
                retries.count = 0
                t_bad = time.perf_counter()
                bad_get = asyncio.create_task(get_lease(kube, invalid))
                retries.apart.add(bad_get)  # its own re-send is not an admin GET's
                try:
                    await bad_get
                    bad = "accepted (!)"
                except errors.GatewayError as exc:
                    bad = f"{exc.code} {type(exc).__name__}"
                except TimeoutError:
                    bad = STALLED
                await asyncio.sleep(max(0.0, t_bad + BLAST_WINDOW_S - time.perf_counter()))
                done.set()
                async with asyncio.timeout(2 * STALL_S):
                    await asyncio.gather(*getters)
            finally:
                for task in getters:
                    task.cancel()
                await asyncio.gather(*getters, return_exceptions=True)
        window_end = t_bad + BLAST_WINDOW_S
        hows = sorted({how for t, how in ws.ends if t_bad <= t <= window_end})
        out.update(
            {
                "blast.bad": bad,
                "blast.broken": ws.ended_between(t_bad, window_end),
                "blast.how": ",".join(hows) or "-",
                "blast.gets": len(results),
                "blast.gets_failed": sum(1 for r in results if r != "ok"),
                "blast.gets_retried": retries.count,
                "blast.bad_retried": retries.apart_count,
                "blast.conns_after": tcp_connections(port),
            }
        )


async def negotiated(srv: KubeAPIServer, *, http2: bool) -> str:
    """The protocol a fresh client actually speaks (ALPN's answer)."""
    async with upstream(srv, http2=http2) as kube:
        r = await kube.http.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}",
            headers=srv.headers("admin"),
            timeout=GET_TIMEOUT_S,
        )
        r.raise_for_status()
        return r.http_version


async def measure(srv: KubeAPIServer, *, http2: bool, args: argparse.Namespace) -> Result:
    out: Result = {"protocol": await negotiated(srv, http2=http2), "lost": 0}
    for n in WATCH_COUNTS:
        print(f"  {n} watches ...", flush=True)
        await latency_scenario(srv, out, http2=http2, n_watches=n, args=args)
    print(f"  opening {OPEN_WATCHES} watches x {OPEN_TRIES} ...", flush=True)
    await open_tries(srv, out, http2=http2)
    print("  blast radius ...", flush=True)
    await blast_radius(srv, out, http2=http2)
    return out


# -- report -----------------------------------------------------------------------------------


def _rows() -> list[tuple[str, str, str | None]]:
    """(key, label, format); a format of None prints the value as it is, with no ratio."""
    rows: list[tuple[str, str, str | None]] = [("protocol", "protocol negotiated (ALPN)", None)]
    for n in WATCH_COUNTS:
        for c in (1, 32):
            for q in ("p50", "p99"):
                rows.append((f"w{n}c{c}.{q}_ms", f"GET {q} ms, c={c:<2}, {n:>3} watches", ".2f"))
    for n in WATCH_COUNTS:
        rows.append((f"w{n}c32.rps", f"GETs/s, c=32, {n:>3} watches", ".0f"))
    for n in WATCH_COUNTS:
        rows.append((f"w{n}c32.cpu_us", f"client CPU us/GET, c=32, {n:>3} watches", ".0f"))
    for n in WATCH_COUNTS:
        rows.append((f"w{n}c32.handshakes", f"new TLS conns in c=32 figure, {n:>3} watches", "d"))
    for n in WATCH_COUNTS:
        rows.append((f"w{n}.failed", f"GETs failed or stalled, {n:>3} watches", "d"))
    for n in WATCH_COUNTS:
        if n:
            rows.append((f"w{n}.opened", f"watches that opened (of {n})", "d"))
            rows.append((f"w{n}.connections", f"TCP conns, {n:>3} watches idle", "d"))
        for c in (1, 32):
            rows.append((f"w{n}c{c}.connections", f"TCP conns, c={c:<2}, {n:>3} watches", "d"))
    top = max(WATCH_COUNTS)
    rows += [
        ("open.median_ms", f"open {OPEN_WATCHES} watches at once, ms (cold, median)", ".0f"),
        ("open.stalled", f"  of {OPEN_TRIES} tries, stalled (>{OPEN_STALL_S:.0f} s)", "d"),
        ("extra.open_ms", f"open watch #{top + 1} beside {top}, ms", ".0f"),
        ("lost", "watches lost during latency phases", "d"),
        ("blast.opened", f"blast: admin watches open (of {BLAST_WATCHES})", "d"),
        ("blast.bad", "blast: the invalid-token GET got", None),
        ("blast.bad_retried", "blast:   re-sent by the adapter", "d"),
        ("blast.broken", "blast: admin watches broken", "d"),
        ("blast.how", "blast: how they broke", None),
        ("blast.gets", f"blast: admin GETs in the {BLAST_WINDOW_S:.0f} s window", "d"),
        ("blast.gets_failed", "blast: admin GETs failed to caller", "d"),
        ("blast.gets_retried", "blast: admin GETs re-sent (conn broke)", "d"),
        ("blast.conns_before", "blast: TCP conns before", "d"),
        ("blast.conns_after", f"blast: TCP conns {BLAST_WINDOW_S:.0f} s after", "d"),
    ]
    return rows


def _fmt(value: float | str, spec: str | None) -> str:
    if spec is None or isinstance(value, str):
        return str(value)
    if spec == "d":
        return str(int(value))
    return format(value, spec)


def _ratio(h1: float | str, h2: float | str) -> str:
    if isinstance(h1, str) or isinstance(h2, str):
        return "-"
    if h1 == 0:
        return "=" if h2 == 0 else "inf (x/0)"
    return f"{h2 / h1:.2f}"


def table(h1: Result, h2: Result) -> str:
    rows = _rows()
    width = max(len(label) for _key, label, _spec in rows) + 2
    lines = [f"{'':{width}}{'HTTP/1.1':>{COL}}{'HTTP/2':>{COL}}{'h2/h1':>{COL}}"]
    for key, label, spec in rows:
        a, b = h1.get(key, "-"), h2.get(key, "-")
        ratio = _ratio(a, b) if spec is not None else ""
        lines.append(f"{label:{width}}{_fmt(a, spec):>{COL}}{_fmt(b, spec):>{COL}}{ratio:>{COL}}")
    return "\n".join(lines)


def _stalls(r: Result) -> dict[str, int]:
    """How often a client got no answer, by kind."""
    top = max(WATCH_COUNTS)
    lat = [k for k, _l, _s in _rows() if k.endswith(("p50_ms", "p99_ms"))]
    return {
        "figures": sum(1 for k in lat if r.get(k) == STALLED),
        "gets": int(sum(float(r[f"w{n}.failed"]) for n in WATCH_COUNTS)),
        "opens": int(float(r["open.stalled"])),
        "unopened": int(sum(n - float(r[f"w{n}.opened"]) for n in WATCH_COUNTS if n)),
        "extra": int(r.get("extra.open_ms") == STALLED),
        # stalls while fewer streams were open than the apiserver allows (100): the
        # scenarios below the top count, and opening OPEN_WATCHES (= 100) alone
        "below_limit": int(
            sum(1 for k in lat if r.get(k) == STALLED and not k.startswith(f"w{top}c"))
            + float(r["open.stalled"])
            + sum(n - float(r[f"w{n}.opened"]) for n in WATCH_COUNTS if 0 < n < top)
        ),
    }


def conclusion(h1: Result, h2: Result, max_streams: str) -> str:
    def num(r: Result, key: str) -> float | None:
        v = r.get(key)
        return None if isinstance(v, str) or v is None else float(v)

    top = max(WATCH_COUNTS)
    lat_keys = [k for k, _l, _s in _rows() if k.endswith(("p50_ms", "p99_ms"))]
    both = [(a, b) for a, b in ((num(h1, k), num(h2, k)) for k in lat_keys) if a and b]
    lat_ratio = statistics.geometric_mean(b / a for a, b in both) if both else math.nan
    s1, s2 = _stalls(h1), _stalls(h2)
    harm1 = (num(h1, "blast.broken") or 0) + (num(h1, "blast.gets_failed") or 0)
    harm2 = (num(h2, "blast.broken") or 0) + (num(h2, "blast.gets_failed") or 0)
    c1, c2 = num(h1, f"w{top}c32.connections"), num(h2, f"w{top}c32.connections")
    if c1 is None or c2 is None:
        c1, c2 = num(h1, f"w{top}.connections"), num(h2, f"w{top}.connections")
    o1, o2 = h1.get("open.median_ms", "-"), h2.get("open.median_ms", "-")

    facts = [
        f"where both answered, HTTP/2 GET latency is {lat_ratio:.2f}x HTTP/1.1's (geometric "
        f"mean of {len(both)} p50/p99 ratios)"
    ]
    if c1 is not None and c2 is not None:
        facts.append(f"it holds {c2:.0f} TCP connection(s) against {c1:.0f} with {top} watches")
    facts.append(
        f"opening {OPEN_WATCHES} watches takes {_fmt(o2, '.0f')} ms against "
        f"{_fmt(o1, '.0f')} ms (median)"
    )
    text = "Measured: " + "; ".join(facts) + ". "

    def stall_text(s: dict[str, int]) -> str:
        return (
            f"{s['figures']} latency figures stalled, {s['gets']} GETs failed or got no "
            f"answer within {STALL_S:.0f} s, {s['opens']}/{OPEN_TRIES} cold opens of "
            f"{OPEN_WATCHES} watches and {s['unopened']} scenario watches never opened, and "
            f"watch #{top + 1} " + ("stalled" if s["extra"] else "opened")
        )

    text += f"HTTP/2: {stall_text(s2)}; HTTP/1.1: {stall_text(s1)}. "
    text += (
        f"One rejected token broke {num(h2, 'blast.broken') or 0:.0f} of "
        f"{num(h2, 'blast.opened') or 0:.0f} open admin watches and failed "
        f"{num(h2, 'blast.gets_failed') or 0:.0f} admin GETs over HTTP/2 "
        f"({num(h2, 'blast.gets_retried') or 0:.0f} more survived only through the adapter's "
        f"retry), against {num(h1, 'blast.broken') or 0:.0f} of "
        f"{num(h1, 'blast.opened') or 0:.0f} and {num(h1, 'blast.gets_failed') or 0:.0f} over "
        "HTTP/1.1"
    )
    if h2.get("blast.bad") != h1.get("blast.bad"):
        text += (
            f"; the rejected caller itself got {h2.get('blast.bad')} over HTTP/2 and "
            f"{h1.get('blast.bad')} over HTTP/1.1"
        )
    text += ". "
    hub = (
        "the watch hub keeps upstream watches few (one per identity and selectors, at most "
        "--upstream-max-streams), so HTTP/1.1's one connection per watch costs a bounded "
        "number of cheap sockets and one handshake each"
    )
    reasons = []
    hung2 = s2["figures"] + s2["gets"] + s2["opens"] + s2["unopened"] + s2["extra"]
    hung1 = s1["figures"] + s1["gets"] + s1["opens"] + s1["unopened"] + s1["extra"]
    if hung2 > hung1:
        reason = (
            "over HTTP/2 requests and watches hang with no error and no timeout: past the "
            f"apiserver's {max_streams} streams per connection httpx queues them on its one "
            "connection instead of opening another (the gateway's stream budget, 256 by "
            "default, is above that)"
        )
        if s2["below_limit"]:
            reason += (
                f", and even below it {s2['below_limit']} times here, behind idle watches "
                "on the same connection"
            )
        reasons.append(reason)
    if harm2 > harm1:
        reasons.append(
            "HTTP/2 puts every caller's watches and requests on one connection that the "
            "apiserver closes (GOAWAY) after any unauthenticated request, so one caller's "
            "expired or wrong token breaks other identities' watches, each of which must "
            "then resume or relist: a cross-tenant failure a gateway must not have"
        )
    if reasons:
        gain = (
            f"a latency gain of {(1 - lat_ratio) * 100:.0f}%"
            if lat_ratio < 1
            else "no latency gain at all"
        )
        return (
            text
            + "Verdict: HTTP/1.1. "
            + hub[0].upper()
            + hub[1:]
            + f"; HTTP/2 would save those connections and offers {gain}, but "
            + "; and ".join(reasons)
            + "."
        )
    if lat_ratio < 0.9:
        return text + f"Verdict: HTTP/2: lower latency and no wider blast radius; {hub}."
    return (
        text
        + "Verdict: HTTP/1.1: HTTP/2 showed no latency gain worth its shared fate; "
        + hub
        + "."
    )


# -- main -------------------------------------------------------------------------------------


async def bench(srv: KubeAPIServer, args: argparse.Namespace, max_streams: str) -> None:
    admin = Credential(srv.tokens["admin"])
    async with upstream(srv, http2=False) as kube:
        with contextlib.suppress(errors.AlreadyExists):
            await kube.create(
                "leases",
                {"metadata": {"name": LEASE}, "spec": {"holderIdentity": "bench"}},
                namespace=NAMESPACE,
                credential=admin,
                timeout=GET_TIMEOUT_S,
            )
    results: dict[str, Result] = {}
    for name, http2 in (("HTTP/1.1", False), ("HTTP/2", True)):
        print(f"measuring {name} ...", flush=True)
        results[name] = await measure(srv, http2=http2, args=args)
    h1, h2 = results["HTTP/1.1"], results["HTTP/2"]
    print()
    print(
        f"upstream HTTP/1.1 vs HTTP/2, kube-apiserver at {srv.url} (HTTP/2 "
        f"MAX_CONCURRENT_STREAMS {max_streams}); {args.requests} GETs per c=1 figure, "
        f"{args.concurrent} per c=32 figure; {os.cpu_count()} CPUs shared with etcd and the "
        "apiserver"
    )
    print(table(h1, h2))
    print()
    print(conclusion(h1, h2, max_streams))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="GETs per c=1 figure")
    parser.add_argument("--concurrent", type=int, default=3200, help="GETs per c=32 figure")
    args = parser.parse_args(argv)
    try:
        with running_apiserver() as srv:
            print(f"kube-apiserver ready in {srv.startup_seconds}s at {srv.url}", flush=True)
            max_streams = server_max_streams(srv)

            async def run() -> None:
                async with asyncio.timeout(RUN_TIMEOUT_S):
                    await bench(srv, args, max_streams)

            asyncio.run(run())
    except BinariesMissing as exc:
        sys.exit(str(exc))


if __name__ == "__main__":
    main()
