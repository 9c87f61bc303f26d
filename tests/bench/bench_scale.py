"""Benchmark: how the gateway's start-up, memory, schema and latency grow with the number of
CRDs, on a real kube-apiserver carrying real published CRDs.

    .venv/bin/python -m tests.bench.bench_scale --crds 0,235       # the default, ~13 min
    .venv/bin/python -m tests.bench.bench_scale --crds 1000 --churn-rounds 0 \
        --startup-timeout 1200                                       # the large step alone
    E2E_BIN_DIR=/path/to/.bin .venv/bin/python -m tests.bench.bench_scale ...

How long it takes here (2 shared cores, gateway at the commit measured): N=0 about 30 s; N=235
about 12 min: ~100 s to install the CRDs (the apiserver establishes ~2-3 a second), ~140 s until
the gateway's discovered schema is built, ~25 s per introspection, and the churn, which lasts
until the gateway's schema has caught up with the newest catalog (two rebuilds of ~2-3 min
each).  N=1000 is not in the default: installing takes ~5.5 min, and at the commit measured the
gateway had not built the discovered schema after 20 min (RSS 3.9 GB, requests timing out
meanwhile), so that step reports the seed schema only.
``make bench`` runs N=0 and 235 (``--quick``: N=0).  Each step's gateway log is kept in
``$TMPDIR/kg-bench-scale/gateway-N<n>.log``.

Needs the e2e binaries (``make e2e-bins``; ``E2E_BIN_DIR`` points elsewhere) and, once, the Go
command to fetch the CRD corpus (``tests/support/crdcorpus.py``, cached in
``tests/bench/.crds/``).  Not a timed test: it prints one line per measurement and the
table's rows; every figure is absolute (seconds, milliseconds, MB), measured against the
``kube-gateway serve`` process itself, and only the churn rows have a baseline of the same
run (the idle gets before the churn).

One etcd + kube-apiserver (``tests/e2e/apiserver.py``) serves every step.  For each N of
``--crds``, in increasing order, the CRDs are installed up to N (the 50 CRDs of the corpus,
then renamed copies in groups ``c2.<group>``, ``c3.<group>``, ...: ``crdcorpus.multiply``),
each ``Established`` and listed in ``/openapi/v3``; then a fresh ``kube-gateway serve``
(admin kubeconfig, discovery on, loopback ports) is started and measured from its process
start:

* **seed kind**: until ``{ pods(namespace: "default", limit: 1) {...} }`` at ``/graphql``
  returns data (polled every 50 ms);
* **readyz**: until ``/readyz`` answers 200;
* **discovered kind** (N > 0): until ``serviceMonitors(namespace: "default")`` answers data,
  at ``/graphql`` or at ``/apis/monitoring.coreos.com/graphql`` (a per-group schema, where
  the gateway has one), whichever first; the row's note names the endpoint;
* **schema rebuilt**: until the gateway logs its first GraphQL schema rebuild for the
  discovered catalog, and the build time it logs;
* **RSS** (``/proc/PID/status`` VmRSS) once ready, after the first discovered answer, and
  the peak (VmHWM);
* **introspection**: graphql-core's full introspection query at ``/graphql``, wall time and
  response bytes;
* **group endpoint, renamed copy** (N > 50): the first ``POST /apis/c2.monitoring.coreos.com
  /graphql`` (HTTP status and wall time);
* **CRD churn** (N ≥ 235): a client thread does the seed query every 20 ms for an idle
  window, then while 10 CRDs are deleted and re-created ``--churn-rounds`` times (and until
  the gateway's schema rebuilds settle); p50 / p99 / max of each phase, failed gets
  (connection errors, non-200, no data), RSS before and after, the gateway's event-loop
  lag samples over 50 ms, and how long its loop thread ran and waited for a CPU meanwhile
  (``schedstat``: the machine's share of the lag) with the load average at each round.

Every wait is bounded (``--startup-timeout``), and etcd, the apiserver and the gateway are
stopped whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from graphql import get_introspection_query

from tests.bench import heaptrace, stalltrace
from tests.bench.report import Row, not_measured, row, splice, text_table
from tests.e2e.apiserver import KubeAPIServer, running_apiserver
from tests.support import crdcorpus
from tests.support.serve_process import Served, serve_process

SEED_QUERY = '{ pods(namespace: "default", limit: 1) { items { metadata { name } } } }'
DISCOVERED_GROUP = "monitoring.coreos.com"
#: The discovered kind's list field: ``serviceMonitors`` as asked for, and ``servicemonitors``
#: (the CRD's plural as it is), the name the gateway gives it today; polls alternate the two.
DISCOVERED_FIELDS = ("serviceMonitors", "servicemonitors")
DISCOVERED_QUERIES = tuple(
    f'{{ {name}(namespace: "default") {{ items {{ metadata {{ name }} }} }} }}'
    for name in DISCOVERED_FIELDS
)
#: The first renamed copy of the discovered group (present once N > 50).
RENAMED_GROUP = f"c2.{DISCOVERED_GROUP}"
POLL_S = 0.05
CHURN_PERIOD_S = 0.02
CHURN_CRDS = 10
CHURN_MIN_N = 235
IDLE_S = 10.0
SETTLE_QUIET_S = 3.0
#: After every start-up probe answered: the pause before the "settled" RSS is read.
SETTLE_RSS_S = 2.0
REBUILT = "GraphQL schema /graphql rebuilt"
NOTE = "absolute, from the gateway process"
#: An introspection slower than this is not made a second time.
INTROSPECT_AGAIN_S = 30.0
#: Where each step's gateway log is written.
LOG_DIR = Path(tempfile.gettempdir()) / "kg-bench-scale"


def log(message: str) -> None:
    print(f"bench_scale: {message}", flush=True)


# -- the gateway process ----------------------------------------------------------------


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    """``key`` of ``/proc/PID/status`` in MB (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def has_data(response: httpx.Response, field_name: str) -> bool:
    """A GraphQL answer whose ``data.<field_name>`` is there (not null)."""
    if response.status_code != 200:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and (body.get("data") or {}).get(field_name) is not None


def discovered_data(response: httpx.Response) -> bool:
    return any(has_data(response, name) for name in DISCOVERED_FIELDS)


def discovered_field(response: httpx.Response | None) -> str:
    """Which spelling of the discovered field answered."""
    return next((name for name in DISCOVERED_FIELDS if response and has_data(response, name)), "?")


def describe(response: httpx.Response | BaseException | None) -> str:
    """A short account of a probe's last answer, for a note when it never succeeded."""
    if response is None:
        return "no answer"
    if isinstance(response, BaseException):
        return type(response).__name__
    try:
        errors = response.json().get("errors") or []
    except (ValueError, AttributeError):
        errors = []
    first = errors[0].get("message", "") if errors and isinstance(errors[0], dict) else ""
    return f"HTTP {response.status_code}{': ' + first[:80] if first else ''}"


@dataclass
class Probe:
    """When a polled request first succeeded (seconds from the gateway's start) and, if it
    never did, what it last got."""

    name: str
    seconds: float | None = None
    last: str = "no answer"
    answer: httpx.Response | None = None


@dataclass
class Startup:
    seed: Probe
    readyz: Probe
    discovered: Probe | None
    discovered_via: str = ""
    rebuilt_s: float | None = None
    build_s: float | None = None
    rss_ready: float = 0.0
    rss_settled: float = 0.0
    rss_discovered: float | None = None
    lines: list[str] = field(default_factory=list)


async def poll(
    client: httpx.AsyncClient,
    probe: Probe,
    method: str,
    path: str,
    *,
    ok: Any,
    t0: float,
    deadline: float,
    alive: Callable[[], bool],
    bodies: Sequence[dict[str, Any] | None] = (None,),
) -> Probe:
    """Repeat a request every ``POLL_S`` (the ``bodies`` in turn) until ``ok(response)`` or
    the deadline."""
    turn = 0
    while time.monotonic() < deadline and alive():
        body = bodies[turn % len(bodies)]
        turn += 1
        try:
            r = await client.request(method, path, json=body)
            if ok(r):
                probe.seconds = time.monotonic() - t0
                probe.answer = r
                return probe
            probe.last = describe(r)
        except httpx.HTTPError as exc:
            probe.last = describe(exc)
        await asyncio.sleep(POLL_S)
    return probe


def rebuild_seen(served: Served) -> str | None:
    return next((line for line in served.lines if REBUILT in line), None)


def build_seconds(line: str) -> float | None:
    """The build time a ``GraphQL schema rebuilt ... built in 1.23s`` log line names."""
    try:
        message = json.loads(line).get("message", line)
    except ValueError:
        message = line
    marker = "built in "
    if marker not in message:
        return None
    try:
        return float(message.split(marker, 1)[1].split("s", 1)[0])
    except ValueError:
        return None


async def measure_startup(served: Served, t0: float, token: str, n: int, timeout: float) -> Startup:
    pid = served.proc.pid
    deadline = t0 + timeout
    auth = {"Authorization": f"Bearer {token}"}
    out = Startup(Probe("seed kind"), Probe("readyz"), Probe("discovered kind") if n else None)

    def alive() -> bool:
        return served.proc.poll() is None

    async with httpx.AsyncClient(
        base_url=served.http, headers=auth, timeout=10.0, trust_env=False
    ) as client:

        async def rebuilt() -> None:
            while time.monotonic() < deadline and served.proc.poll() is None:
                line = rebuild_seen(served)
                if line is not None:
                    out.rebuilt_s = time.monotonic() - t0
                    out.build_s = build_seconds(line)
                    return
                await asyncio.sleep(POLL_S)

        async def discovered() -> None:
            assert out.discovered is not None
            via_root = Probe("/graphql")
            via_group = Probe(f"/apis/{DISCOVERED_GROUP}/graphql")
            tasks = {
                asyncio.create_task(
                    poll(
                        client,
                        probe,
                        "POST",
                        probe.name,
                        ok=discovered_data,
                        t0=t0,
                        deadline=deadline,
                        alive=alive,
                        bodies=[{"query": q} for q in DISCOVERED_QUERIES],
                    )
                )
                for probe in (via_root, via_group)
            }
            try:
                for done in asyncio.as_completed(tasks):
                    probe = await done
                    if probe.seconds is not None:
                        out.discovered.seconds = probe.seconds
                        out.discovered_via = f"{probe.name} {discovered_field(probe.answer)}"
                        out.rss_discovered = rss_mb(pid)
                        return
            finally:
                for task in tasks:
                    task.cancel()
            out.discovered.last = f"/graphql {via_root.last}; {via_group.name} {via_group.last}"

        seed = poll(
            client,
            out.seed,
            "POST",
            "/graphql",
            ok=lambda r: has_data(r, "pods"),
            t0=t0,
            deadline=deadline,
            alive=alive,
            bodies=[{"query": SEED_QUERY}],
        )
        ready = poll(
            client,
            out.readyz,
            "GET",
            "/readyz",
            ok=lambda r: r.status_code == 200,
            t0=t0,
            deadline=deadline,
            alive=alive,
        )

        async def ready_rss() -> None:
            await asyncio.gather(seed, ready)
            out.rss_ready = rss_mb(pid)

        await asyncio.gather(ready_rss(), rebuilt(), *([discovered()] if n else []))
        await asyncio.sleep(SETTLE_RSS_S)
        out.rss_settled = rss_mb(pid)
    out.lines = list(served.lines)
    return out


def introspect(served: Served, token: str, path: str = "/graphql") -> tuple[float, float, int, str]:
    """Full introspection at ``path``, twice: (seconds the first time, seconds the second
    time, response bytes, problem or '')."""
    with httpx.Client(
        base_url=served.http,
        headers={"Authorization": f"Bearer {token}"},
        timeout=600.0,
        trust_env=False,
    ) as client:
        start = time.perf_counter()
        try:
            r = client.post(path, json={"query": get_introspection_query()})
        except httpx.HTTPError as exc:
            return time.perf_counter() - start, 0.0, 0, describe(exc)
        seconds = time.perf_counter() - start
        problem = "" if has_data(r, "__schema") else describe(r)
        again = 0.0
        if seconds < INTROSPECT_AGAIN_S:  # a slow one is not repeated
            start = time.perf_counter()
            client.post(path, json={"query": get_introspection_query()})
            again = time.perf_counter() - start
        return seconds, again, len(r.content), problem


def first_group_call(served: Served, token: str, group: str, query: str) -> tuple[float, int, bool]:
    """One ``POST /apis/{group}/graphql`` of ``query``: (seconds, status, data?)."""
    with httpx.Client(
        base_url=served.http,
        headers={"Authorization": f"Bearer {token}"},
        timeout=120.0,
        trust_env=False,
    ) as client:
        start = time.perf_counter()
        r = client.post(f"/apis/{group}/graphql", json={"query": query})
        return time.perf_counter() - start, r.status_code, discovered_data(r)


def use_groups(served: Served, token: str, groups: Sequence[str]) -> tuple[float, int]:
    """``{ __typename }`` at every group's endpoint once, one after the other (each builds
    its group's schema unless the gateway keeps it): (seconds, answers that were not 200)."""
    failed = 0
    with httpx.Client(
        base_url=served.http,
        headers={"Authorization": f"Bearer {token}"},
        timeout=120.0,
        trust_env=False,
    ) as client:
        start = time.perf_counter()
        for group in groups:
            r = client.post(f"/apis/{group}/graphql", json={"query": "{ __typename }"})
            failed += r.status_code != 200
        return time.perf_counter() - start, failed


# -- churn -------------------------------------------------------------------------------


def _tick(  # noqa: PLR0917
    url: str, token: str, limit: float, stop: Any, out: Any, ca_file: str | None = None
) -> None:
    """The ticker's process: the seed query every ``CHURN_PERIOD_S`` (with ``ca_file``: the
    same list straight from the apiserver); sends its samples."""
    samples: list[tuple[float, float, bool]] = []
    errors = 0
    end = time.monotonic() + limit
    body = {"query": SEED_QUERY}
    with httpx.Client(
        base_url=url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=10.0,
        trust_env=False,
        verify=ca_file or True,
    ) as client:
        next_at = time.monotonic()
        while not stop.is_set() and time.monotonic() < end:
            start = time.monotonic()
            ok = False
            try:
                if ca_file is None:
                    ok = has_data(client.post("/graphql", json=body), "pods")
                else:
                    ok = client.get("/api/v1/namespaces/default/pods?limit=1").status_code == 200
            except httpx.TransportError:
                errors += 1
            samples.append((start, (time.monotonic() - start) * 1000, ok))
            next_at += CHURN_PERIOD_S
            stop.wait(max(0.0, next_at - time.monotonic()))
    out.send((samples, errors))


class Ticker:
    """The seed query every ``CHURN_PERIOD_S`` from a process of its own (plain httpx: the
    harness's own work, installing CRDs, must not delay the client), each get's (start,
    latency ms, ok) recorded, until stopped or ``limit`` seconds pass.  ``time.monotonic``
    is one clock across processes on Linux."""

    def __init__(self, url: str, token: str, limit: float, ca_file: str | None = None) -> None:
        context = multiprocessing.get_context("spawn")
        self.stop = context.Event()
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_tick, args=(url, token, limit, self.stop, send, ca_file), daemon=True
        )
        self.samples: list[tuple[float, float, bool]] = []
        self.connection_errors = 0

    def start(self) -> None:
        self._process.start()

    def join(self, timeout: float) -> None:
        if self._receive.poll(timeout):
            self.samples, self.connection_errors = self._receive.recv()
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.kill()

    def window(self, start: float, end: float) -> tuple[list[float], int]:
        """Latencies (ms) of the gets started in [start, end), and how many failed."""
        inside = [(ms, ok) for t, ms, ok in list(self.samples) if start <= t < end]
        return [ms for ms, _ in inside], sum(1 for _, ok in inside if not ok)


def loop_sched(pid: int) -> tuple[float, float]:
    """The gateway's event-loop thread (its main thread) so far: (seconds on a CPU, seconds
    waiting for one) from ``/proc/PID/task/PID/schedstat`` ((0, 0) where there is none).
    The wait is the machine's load, not the gateway's doing: a lag sample it explains is
    not a stall of the gateway's own."""
    try:
        ran, waited = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[:2]
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(ran) / 1e9, int(waited) / 1e9


def load_average() -> float:
    """The machine's one-minute load average (0 where unknown)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def loop_lag(url: str, token: str) -> tuple[int, int]:
    """The gateway's own event-loop lag samples so far: (all, those over 50 ms)."""
    text = httpx.get(
        f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}, trust_env=False
    ).text
    buckets = {}
    for line in text.splitlines():
        if line.startswith("kube_gateway_event_loop_lag_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[le] = int(float(line.rsplit(" ", 1)[1]))
    total = buckets.get("+Inf", 0)
    return total, total - buckets.get("0.05", 0)


_CATALOG = re.compile(r"catalog: generation (\d+) serves")
_REBUILT = re.compile(r"GraphQL schema \S+ rebuilt for catalog (\d+)")


def generations(lines: Sequence[str]) -> tuple[int, int, int]:
    """The newest catalog generation the gateway logged, the newest one its GraphQL schema was
    rebuilt for, and how many rebuilds it logged."""
    catalog = schema = count = 0
    for line in list(lines):
        if m := _CATALOG.search(line):
            catalog = max(catalog, int(m.group(1)))
        elif m := _REBUILT.search(line):
            schema = max(schema, int(m.group(1)))
            count += 1
    return catalog, schema, count


async def new_crd(
    kube: KubeAPIServer, served: Served, model: dict[str, Any], timeout: float
) -> tuple[float, float] | None:
    """Create one CRD in a group nobody has, wait until the apiserver's OpenAPI publishes
    it, then until its group's endpoint answers its list: (seconds to publish, seconds from
    publish to served), or ``None`` on a timeout."""
    crd = crdcorpus.renamed(model, "fresh")
    group = crd["spec"]["group"]
    plural = crd["spec"]["names"]["plural"]
    token = kube.tokens["admin"]
    t0 = time.monotonic()
    await crdcorpus.install(kube.url, token, kube.ca_file, [crd])
    await crdcorpus.wait_openapi(kube.url, token, kube.ca_file, [crd])
    published = time.monotonic()
    field_name = plural  # probe both spellings: the camelCase one and the plural as is
    kind = crd["spec"]["names"]["kind"]
    camel = kind[:1].lower() + kind[1:] + plural[len(kind) :]
    deadline = published + timeout
    try:
        async with httpx.AsyncClient(
            base_url=served.http,
            headers={"Authorization": f"Bearer {token}"},
            timeout=10.0,
            trust_env=False,
        ) as client:
            while time.monotonic() < deadline:
                for name in (camel, field_name):
                    r = await client.post(
                        f"/apis/{group}/graphql",
                        json={"query": f"{{ {name} {{ items {{ raw }} }} }}"},
                    )
                    if has_data(r, name):
                        return published - t0, time.monotonic() - published
                await asyncio.sleep(POLL_S)
        return None
    finally:
        await crdcorpus.delete(kube.url, token, kube.ca_file, [crd])


def percentiles(values: Sequence[float]) -> tuple[float, float, float]:
    """p50, p99 and max (0s when empty)."""
    if not values:
        return 0.0, 0.0, 0.0
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99, ordered[-1]


@dataclass
class Churn:
    #: The same list straight from the apiserver during the churn: p50, p99, max (ms).
    direct: tuple[float, float, float]
    idle: tuple[float, float, float]
    churn: tuple[float, float, float]
    idle_gets: int
    churn_gets: int
    failed: int
    connection_errors: int
    seconds: float
    rebuilds: int
    rss_before: float
    rss_after: float
    settled: bool
    #: The gateway's event-loop lag samples during the churn (every 50 ms), and how many
    #: were over 50 ms.
    loop_samples: int = 0
    loop_stalls: int = 0
    #: The event loop's thread during the churn: seconds on a CPU and waiting for one.
    loop_cpu: float = 0.0
    loop_cpu_wait: float = 0.0
    #: The machine's one-minute load average at the churn's start, each round's end and
    #: the churn's end.
    loads: list[float] = field(default_factory=list)
    #: RSS (MB) after each round (and, with ``every_group``, its use of every group).
    rss_rounds: list[float] = field(default_factory=list)
    #: Group endpoints that did not answer 200 when used after a round.
    group_failures: int = 0


async def churn(
    kube: KubeAPIServer,
    served: Served,
    crds: Sequence[dict[str, Any]],
    rounds: int,
    timeout: float,
    *,
    every_group: Sequence[str] = (),
) -> Churn:
    """``rounds`` of: ``crds`` deleted and re-created, then (``every_group``) each of those
    groups' endpoints used once; the gets of two tickers (the gateway's ``/graphql`` and the
    apiserver straight) meanwhile."""
    token = kube.tokens["admin"]
    pid = served.proc.pid
    ticker = Ticker(served.http, token, limit=IDLE_S + timeout + 60)
    # the same list straight from the apiserver, in the same run: what churn costs upstream
    direct = Ticker(kube.url, token, limit=IDLE_S + timeout + 60, ca_file=kube.ca_file)
    rss_before = rss_mb(pid)
    lag_before = loop_lag(served.http, token)
    loads = [load_average()]
    ticker.start()
    direct.start()
    rss_rounds: list[float] = []
    group_failures = 0
    try:
        idle_start = time.monotonic()
        await asyncio.sleep(IDLE_S)
        churn_start = time.monotonic()
        sched_before = loop_sched(pid)
        rebuilds_before = generations(served.lines)[2]
        for i in range(rounds):
            gone = await crdcorpus.delete(kube.url, token, kube.ca_file, crds)
            back = await crdcorpus.install(kube.url, token, kube.ca_file, crds)
            used = ""
            if every_group:
                took, failed_groups = await asyncio.to_thread(
                    use_groups, served, token, every_group
                )
                group_failures += failed_groups
                used = f", every group used in {took:.1f}s ({failed_groups} not 200)"
            rss_rounds.append(rss_mb(pid))
            loads.append(load_average())
            log(
                f"churn round {i + 1}: deleted {len(crds)} CRDs in {gone:.1f}s, "
                f"re-created in {back:.1f}s{used}; RSS {rss_rounds[-1]:.0f} MB"
            )
        # Until the schema has caught up with the newest catalog and nothing new was logged
        # for SETTLE_QUIET_S (bounded by the timeout).
        deadline = time.monotonic() + timeout
        seen, quiet_since = -1, time.monotonic()
        count = generations(served.lines)[2]
        while time.monotonic() < deadline and served.proc.poll() is None:
            catalog, _, count = generations(served.lines)
            if catalog + count != seen:  # a new catalog or schema build (not access lines)
                seen, quiet_since = catalog + count, time.monotonic()
            elif time.monotonic() - quiet_since >= SETTLE_QUIET_S:
                break  # the catalog took in every change (a group schema is built on use)
            await asyncio.sleep(0.2)
        settled = time.monotonic() < deadline
        churn_end = time.monotonic()
        sched_after = loop_sched(pid)
        loads.append(load_average())
    finally:
        ticker.stop.set()
        direct.stop.set()
        await asyncio.to_thread(ticker.join, 15)
        await asyncio.to_thread(direct.join, 15)
    lag_after = loop_lag(served.http, token)
    idle, idle_failed = ticker.window(idle_start, churn_start)
    during, failed = ticker.window(churn_start, churn_end)
    upstream, _ = direct.window(churn_start, churn_end)
    return Churn(
        direct=percentiles(upstream),
        idle=percentiles(idle),
        churn=percentiles(during),
        idle_gets=len(idle),
        churn_gets=len(during),
        failed=failed + idle_failed,
        connection_errors=ticker.connection_errors,
        seconds=churn_end - churn_start,
        rebuilds=max(0, count - rebuilds_before),
        settled=settled,
        rss_before=rss_before,
        rss_after=rss_mb(pid),
        loop_samples=lag_after[0] - lag_before[0],
        loop_stalls=lag_after[1] - lag_before[1],
        rss_rounds=rss_rounds,
        group_failures=group_failures,
        loop_cpu=sched_after[0] - sched_before[0],
        loop_cpu_wait=sched_after[1] - sched_before[1],
        loads=loads,
    )


# -- one step ----------------------------------------------------------------------------


@contextlib.contextmanager
def gateway(
    kube: KubeAPIServer, env: dict[str, str] | None = None, *args: str
) -> Iterator[tuple[Served, float]]:
    """``kube-gateway serve`` on loopback ports with the admin kubeconfig; its start time."""
    with tempfile.TemporaryDirectory(prefix="kg-bench-scale-") as home:
        t0 = time.monotonic()
        with serve_process(
            Path(home),
            "--kubeconfig",
            kube.kubeconfigs["admin"],
            "--log-format",
            "json",
            "--drain-seconds",
            "2",
            *args,
            ready=False,
            env=env,
            # `python -m` puts the working directory first on the path: another source's
            cwd=Path(env["KG_GATEWAY_SRC"]) if env and "KG_GATEWAY_SRC" in env else None,
        ) as served:
            yield served, t0


def step(
    kube: KubeAPIServer,
    crds: Sequence[dict[str, Any]],
    *,
    churn_rounds: int,
    timeout: float,
    all_groups: bool = False,
    churn_crds: int = CHURN_CRDS,
    env: dict[str, str] | None = None,
    gateway_args: Sequence[str] = (),
) -> list[Row]:
    n = len(crds)
    token = kube.tokens["admin"]
    tag = f"scale N={n:,} CRDs"
    rows: list[Row] = []
    every_group = crdcorpus.groups(crds) if all_groups else []
    trace = Path(env["KG_STALL_TRACE"]) if env and env.get("KG_STALL_TRACE_WALKS") else None
    trace_from = trace.stat().st_size if trace is not None and trace.exists() else 0
    with gateway(kube, env, *gateway_args) as (served, t0):
        start = asyncio.run(measure_startup(served, t0, token, n, timeout))
        if served.proc.poll() is not None:
            raise RuntimeError(f"the gateway exited:\n{''.join(served.lines[-20:])}")
        for probe in (start.seed, start.readyz, start.discovered):
            if probe is None:
                continue
            if probe.seconds is None:
                log(f"N={n}: {probe.name} did not answer in {timeout:.0f}s ({probe.last})")
                rows.append(
                    not_measured(f"{tag}: start to {probe.name} answering", "-", probe.last)
                )
                continue
            via = f" via {start.discovered_via}" if probe is start.discovered else ""
            log(f"N={n}: {probe.name} answered {probe.seconds:.2f}s after start{via}")
            goal = {"seed kind": 3.0, "discovered kind": 10.0}.get(probe.name)
            rows.append(
                row(
                    f"{tag}: start to {probe.name} answering",
                    probe.seconds,
                    "s",
                    max_value=goal,
                    note=f"{NOTE}{via}",
                )
            )
        # Without a rebuild, the schema measured below is the seed one (built-in kinds only).
        seed_only = "" if start.rebuilt_s is not None else "; NOT rebuilt yet: seed schema only"
        if start.rebuilt_s is None:
            log(f"N={n}: no GraphQL schema rebuild logged within {timeout:.0f}s")
            rows.append(
                not_measured(
                    f"{tag}: start to the discovered schema's rebuild",
                    "-",
                    f"no rebuild logged within {timeout:.0f} s",
                )
            )
        else:
            log(
                f"N={n}: first GraphQL schema rebuild logged {start.rebuilt_s:.2f}s after "
                f"start (built in {start.build_s}s by its own log)"
            )
            rows.append(
                row(
                    f"{tag}: start to the discovered schema's rebuild",
                    start.rebuilt_s,
                    "s",
                    note=f"{NOTE}; the build itself {start.build_s}s by the gateway's log",
                )
            )
        log(f"N={n}: RSS {start.rss_ready:.0f} MB when ready")
        rows.append(row(f"{tag}: RSS when ready", start.rss_ready, "MB", note=NOTE))
        log(f"N={n}: RSS {start.rss_settled:.0f} MB once start-up settled")
        rows.append(
            row(
                f"{tag}: RSS once start-up settled",
                start.rss_settled,
                "MB",
                max_value=300,
                note=f"{NOTE}; every probe answered or timed out, {SETTLE_RSS_S:g} s later"
                + seed_only,
            )
        )
        if start.rss_discovered is not None:
            log(f"N={n}: RSS {start.rss_discovered:.0f} MB after the first discovered answer")
            rows.append(
                row(
                    f"{tag}: RSS after the first discovered-kind answer",
                    start.rss_discovered,
                    "MB",
                    note=NOTE,
                )
            )

        seconds, again, size, problem = introspect(served, token)
        log(
            f"N={n}: full introspection {seconds * 1000:.0f} ms (again: {again * 1000:.0f} ms), "
            f"{size / 1e6:.2f} MB" + (f" ({problem})" if problem else "")
        )
        rows.append(
            row(
                f"{tag}: full introspection at /graphql",
                seconds * 1000,
                "ms",
                max_value=1000,
                note=f"{NOTE}, the first one{seed_only}"
                + (f"; the second {again * 1000:.0f} ms" if again else "")
                + (f"; {problem}" if problem else ""),
            )
        )
        if size:
            rows.append(row(f"{tag}: introspection response size", size / 1e6, "MB", note=NOTE))
        if n:
            path = f"/apis/{DISCOVERED_GROUP}/graphql"
            seconds, again, size, problem = introspect(served, token, path)
            log(
                f"N={n}: full introspection of {path} {seconds * 1000:.0f} ms (again: "
                f"{again * 1000:.0f} ms), {size / 1e6:.2f} MB"
                + (f" ({problem})" if problem else "")
            )
            rows.append(
                row(
                    f"{tag}: full introspection at {path}",
                    seconds * 1000,
                    "ms",
                    note=f"{NOTE}, {size / 1e6:.2f} MB"
                    + (f"; the second {again * 1000:.0f} ms" if again else "")
                    + (f"; {problem}" if problem else ""),
                )
            )
            rows.append(
                row(
                    f"{tag}: RSS after the group's introspection",
                    rss_mb(served.proc.pid),
                    "MB",
                    note=NOTE,
                )
            )
            fresh = asyncio.run(new_crd(kube, served, crds[0], timeout))
            if fresh is None:
                rows.append(
                    not_measured(f"{tag}: a new CRD served after its OpenAPI", "-", "timed out")
                )
            else:
                published, served_s = fresh
                log(
                    f"N={n}: a new CRD: OpenAPI published {published:.2f}s after its creation, "
                    f"served at its group's endpoint {served_s:.2f}s after that"
                )
                rows.append(
                    row(
                        f"{tag}: a new CRD served after the apiserver publishes its OpenAPI",
                        served_s,
                        "s",
                        max_value=2,
                        note=f"{NOTE}; published {published:.2f} s after creation",
                    )
                )

        if RENAMED_GROUP in crdcorpus.groups(crds):
            spelling = next(
                (f for f in DISCOVERED_FIELDS if start.discovered_via.endswith(f" {f}")),
                DISCOVERED_FIELDS[0],
            )
            query = DISCOVERED_QUERIES[DISCOVERED_FIELDS.index(spelling)]
            seconds, status, data = first_group_call(served, token, RENAMED_GROUP, query)
            log(
                f"N={n}: first POST /apis/{RENAMED_GROUP}/graphql: HTTP {status} "
                f"{'with data' if data else 'without data'} in {seconds * 1000:.0f} ms"
            )
            if data:
                rows.append(
                    row(
                        f"{tag}: first use of a renamed group's endpoint",
                        seconds * 1000,
                        "ms",
                        max_value=1000,
                        note=f"{NOTE}, /apis/{RENAMED_GROUP}/graphql",
                    )
                )
            else:
                rows.append(
                    not_measured(
                        f"{tag}: first use of a renamed group's endpoint",
                        "-",
                        f"/apis/{RENAMED_GROUP}/graphql answered HTTP {status} "
                        f"without data in {seconds * 1000:.0f} ms",
                    )
                )

        if every_group:
            took, failed_groups = use_groups(served, token, every_group)
            time.sleep(SETTLE_RSS_S)
            used_rss = rss_mb(served.proc.pid)
            log(
                f"N={n}: every one of {len(every_group)} group endpoints used once in "
                f"{took:.1f}s ({failed_groups} not 200); RSS {used_rss:.0f} MB"
            )
            rows.append(
                row(
                    f"{tag}: RSS after every group's endpoint was used once",
                    used_rss,
                    "MB",
                    max_value=300,
                    note=f"{NOTE}; {len(every_group)} groups, {{ __typename }} at each in "
                    f"turn ({took:.0f} s, {failed_groups} not 200), {SETTLE_RSS_S:g} s later",
                )
            )

        if n >= CHURN_MIN_N and churn_rounds > 0:
            victims = list(crds[-churn_crds:])
            c = asyncio.run(
                churn(kube, served, victims, churn_rounds, timeout, every_group=every_group)
            )
            log(
                f"N={n}: churn of {len(victims)} CRDs x {churn_rounds} over {c.seconds:.1f}s "
                f"({c.rebuilds} schema rebuilds): seed gets p50/p99/max "
                f"{c.churn[0]:.1f}/{c.churn[1]:.1f}/{c.churn[2]:.1f} ms ({c.churn_gets} gets) vs "
                f"idle {c.idle[0]:.1f}/{c.idle[1]:.1f}/{c.idle[2]:.1f} ms ({c.idle_gets} gets); "
                f"{c.failed} failed, {c.connection_errors} connection errors; RSS "
                f"{c.rss_before:.0f} -> {c.rss_after:.0f} MB; direct apiserver gets "
                f"{c.direct[0]:.1f}/{c.direct[1]:.1f}/{c.direct[2]:.1f} ms; "
                "event loop late over 50 ms "
                f"{c.loop_stalls} times of {c.loop_samples} samples; the loop's thread ran "
                f"{c.loop_cpu:.1f}s and waited {c.loop_cpu_wait:.1f}s for a CPU; load average "
                + " / ".join(f"{x:.1f}" for x in c.loads)
            )
            if not c.settled:
                log(f"N={n}: the schema had not caught up with the catalog when churn ended")
            if c.rss_rounds:
                rows.append(
                    row(
                        f"{tag}: RSS over {len(c.rss_rounds)} churn rounds, highest (direct "
                        "column: before the churn)",
                        max(c.rss_rounds),
                        "MB",
                        c.rss_before,
                        max_ratio=1.1,
                        note=f"{NOTE}; after each round "
                        + " / ".join(f"{r:.0f}" for r in c.rss_rounds)
                        + (
                            f" MB, every group used after each ({c.group_failures} not 200)"
                            if every_group
                            else " MB"
                        ),
                    )
                )
            what = f"{tag}: seed get every 20 ms during CRD churn"
            churn_note = (
                f"{NOTE}; {CHURN_CRDS} CRDs deleted and re-created x{churn_rounds}, "
                f"{c.rebuilds} rebuilds{'' if c.settled else ', schema not caught up'}; "
                "direct = idle gets of the same run"
            )
            rows += [
                row(f"{what}, p50", c.churn[0], "ms", c.idle[0], note=churn_note),
                row(f"{what}, p99", c.churn[1], "ms", c.idle[1], max_ratio=2, note=churn_note),
                row(
                    f"{what}, p99 (direct column: the apiserver's own list, same churn)",
                    c.churn[1],
                    "ms",
                    c.direct[1],
                    max_ratio=1.2,
                    note=f"{NOTE}; the same list straight from the apiserver every 20 ms "
                    "during the same churn",
                ),
                row(f"{what}, max", c.churn[2], "ms", c.idle[2], note=churn_note),
                row(
                    f"{what}, failed gets",
                    c.failed,
                    "",
                    max_value=0,
                    note=f"{c.connection_errors} connection errors, "
                    f"{c.churn_gets + c.idle_gets} gets",
                ),
                row(
                    f"{tag}: event-loop lag samples over 50 ms during CRD churn",
                    c.loop_stalls,
                    "",
                    max_value=0,
                    note=f"the gateway's own lag histogram, {c.loop_samples} samples every 50 ms; "
                    f"its loop thread ran {c.loop_cpu:.1f} s and waited {c.loop_cpu_wait:.1f} s "
                    f"for a CPU over {c.seconds:.0f} s; load average "
                    + " / ".join(f"{x:.1f}" for x in c.loads),
                ),
                row(
                    f"{tag}: RSS after CRD churn",
                    c.rss_after,
                    "MB",
                    c.rss_before,
                    note=f"{NOTE}; direct = RSS before the churn",
                ),
            ]
        problems = [line for line in served.lines if '"WARNING"' in line or '"ERROR"' in line]
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        saved = LOG_DIR / f"gateway-N{n}.log"
        saved.write_text("".join(served.lines))
        log(f"N={n}: the gateway's log is in {saved} ({len(problems)} warnings or errors)")
        for line in problems[:5]:
            log(f"  {line.strip()[:300]}")
        peak = rss_mb(served.proc.pid, "VmHWM")
        log(f"N={n}: peak RSS (VmHWM) {peak:.0f} MB")
        rows.append(row(f"{tag}: peak RSS", peak, "MB", note=f"{NOTE}, VmHWM"))
    if trace is not None and trace.exists():
        with trace.open() as f:
            f.seek(trace_from)
            rows += walk_rows(tag, walks_of(f.read()))
    return rows


@dataclass
class Walk:
    """One collection in the stall trace's walks (``--stall-trace-walks``)."""

    generation: int
    young: int
    cpu_ms: float
    thread: str
    caller: str


_WALK = re.compile(
    r"walk gen(\d) (young|counts) \[([\d, ]*)\] cpu ([\d.]+)ms freed \d+ thread ([^:]+): (.*)"
)


def walks_of(text: str) -> list[Walk]:
    """The collections the stall trace listed (``walk ...`` lines)."""
    out = []
    for m in _WALK.finditer(text):
        numbers = [int(x) for x in m.group(3).split(",") if x.strip()]
        # counted objects (before a build), else the youngest generation's count (its
        # objects, about; the others' counts are collections, not objects)
        young = sum(numbers) if m.group(2) == "young" else numbers[0]
        out.append(Walk(int(m.group(1)), young, float(m.group(4)), m.group(5), m.group(6)))
    return out


def walk_rows(tag: str, walks: Sequence[Walk]) -> list[Row]:
    """The longest collection on the event loop's thread (its CPU time: what the loop waited
    however loaded the machine), the longest of ``before_build`` there, and the longest in
    any other thread (it holds the GIL: the loop waits as long), over the whole step."""
    out: list[Row] = []
    loop = [w for w in walks if w.thread == "MainThread"]
    groups = [
        ("on the event loop's thread", loop),
        (
            "on the event loop's thread before a group build",
            [w for w in loop if "before_build" in w.caller],
        ),
        ("in another thread", [w for w in walks if w.thread != "MainThread"]),
    ]
    for what, mine in groups:
        if not mine:
            continue
        longest = max(mine, key=lambda w: w.cpu_ms)
        cpu = sorted(w.cpu_ms for w in mine)
        over = sum(ms >= 10 for ms in cpu)
        log(
            f"{tag}: longest collection {what}: {longest.cpu_ms:.1f} ms CPU over "
            f"{longest.young:,} young (gen{longest.generation}, {longest.caller})"
        )
        out.append(
            row(
                f"{tag}: longest collection {what}, its thread's CPU (stall trace)",
                longest.cpu_ms,
                "ms",
                note=f"gen{longest.generation}, {longest.young:,} young (objects before a "
                "build, else the youngest generation's count); "
                f"{len(mine)} listed (middle generation or older, or 5 ms or more), "
                f"{over} of 10 ms or more, median {statistics.median(cpu):.1f} ms; whole run",
            )
        )
    return out


def rows(
    counts: Sequence[int] = (0, 235),
    *,
    churn_rounds: int = 3,
    timeout: float | None = None,
    all_groups: bool = False,
    churn_crds: int = CHURN_CRDS,
    env: dict[str, str] | None = None,
    gateway_args: Sequence[str] = (),
) -> list[Row]:
    """Every step, on one apiserver; the CRDs of a step stay for the next (larger) one."""
    corpus = crdcorpus.load()
    log(f"corpus: {len(corpus)} CRDs in {len(crdcorpus.groups(corpus))} groups")
    out: list[Row] = []
    with running_apiserver() as kube:
        log(f"kube-apiserver ready in {kube.startup_seconds}s at {kube.url}")
        token = kube.tokens["admin"]
        installed = 0
        for n in sorted(set(counts)):
            crds = crdcorpus.multiply(corpus, n)
            if n > installed:
                took = asyncio.run(
                    crdcorpus.install(kube.url, token, kube.ca_file, crds[installed:])
                )
                installed = n
                waited = asyncio.run(crdcorpus.wait_openapi(kube.url, token, kube.ca_file, crds))
                log(
                    f"N={n}: installed {len(crds)} CRDs in {len(crdcorpus.groups(crds))} "
                    f"groups ({took:.1f}s to Established, then {waited:.1f}s until "
                    f"/openapi/v3 lists them)"
                )
            step_timeout = timeout if timeout is not None else max(180.0, 1.5 * n)
            out += step(
                kube,
                crds,
                churn_rounds=churn_rounds,
                timeout=step_timeout,
                all_groups=all_groups,
                churn_crds=churn_crds,
                env=env,
                gateway_args=gateway_args,
            )
    return out


def gateway_env(
    stall_trace: Path | None,
    source: Path | None,
    heap_trace: Path | None = None,
    heap_trace_base: float = 60.0,
    *,
    walks: bool = False,
) -> dict[str, str] | None:
    """The gateway's environment for ``--stall-trace``, ``--heap-trace`` (one of them: each
    is a ``sitecustomize``) and ``--gateway-src``."""
    if stall_trace is not None and heap_trace is not None:
        raise SystemExit("bench_scale: --stall-trace and --heap-trace are one run each")
    env: dict[str, str] = {}
    if stall_trace is not None:
        env = stalltrace.env(stall_trace, walks=walks)
    elif heap_trace is not None:
        env = heaptrace.env(heap_trace, every=20.0, base=heap_trace_base)
    if source is not None:
        paths = [str(source.resolve()), *filter(None, [env.get("PYTHONPATH")])]
        env["PYTHONPATH"] = ":".join(paths)
        env["KG_GATEWAY_SRC"] = str(source.resolve())
    return env or None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--crds", default="0,235", help="comma-separated CRD counts (default 0,235)"
    )
    parser.add_argument("--churn-rounds", type=int, default=3)
    parser.add_argument(
        "--churn-crds", type=int, default=CHURN_CRDS, help="CRDs deleted and re-created a round"
    )
    parser.add_argument(
        "--all-groups",
        action="store_true",
        help="use every group's endpoint once before the churn and after each churn round "
        "(RSS after each)",
    )
    parser.add_argument(
        "--stall-trace",
        type=Path,
        default=None,
        help="the gateway appends what held its GIL or event loop for 30 ms or more to this "
        "file (tests/bench/stalltrace)",
    )
    parser.add_argument(
        "--stall-trace-walks",
        action="store_true",
        help="the stall trace also lists each collection of the middle generation or older, "
        "and each of 5 ms of CPU or more, with the young generations' counts (the young "
        "objects walked, counted, before a group build), its thread and "
        "its caller (a debug run: counting them is a walk of its own)",
    )
    parser.add_argument(
        "--heap-trace",
        type=Path,
        default=None,
        help="the gateway appends its RSS, glibc's and tracemalloc's figures and the "
        "allocation sites that grew most to this file every 20 s (tests/bench/heaptrace; "
        "not with --stall-trace)",
    )
    parser.add_argument(
        "--heap-trace-base",
        type=float,
        default=60.0,
        help="seconds after start of the heap trace's base figures (growth is since then)",
    )
    parser.add_argument(
        "--gateway-src",
        type=Path,
        default=None,
        help="import the gateway from this directory instead (one holding another commit's "
        "gateway/, e.g. from git archive: a before/after under the same conditions)",
    )
    parser.add_argument(
        "gateway_args", nargs="*", help="more `kube-gateway serve` flags (after --)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="put the rows in this BENCHMARKS.md's section 'Group schemas under CRD churn' "
        "(the rest of the file is left as it is)",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=None,
        help="seconds each wait may take (default: max(180, 1.5 N))",
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.crds.split(",") if c.strip()]
    table = rows(
        counts,
        churn_rounds=args.churn_rounds,
        timeout=args.startup_timeout,
        all_groups=args.all_groups,
        churn_crds=args.churn_crds,
        env=gateway_env(
            args.stall_trace,
            args.gateway_src,
            args.heap_trace,
            args.heap_trace_base,
            walks=args.stall_trace_walks,
        ),
        gateway_args=args.gateway_args,
    )
    print()
    print(text_table(table))
    if args.out is not None:
        args.out.write_text(splice(args.out.read_text(), table))
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
