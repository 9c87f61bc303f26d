"""Benchmark: many clusters from one gateway: the fleet list's speed, each cluster's memory.

    .venv/bin/python -m tests.bench.bench_fleet [--pods 5000] [--rounds 7] \
        [--extra 1,2,4,8] [--crds 100] [--breakdown 12] [--no-memory] [--no-speed] \
        [--upstream-gzip both|on|off] [--list-workers auto] [--out BENCHMARKS.md]

``--out`` puts the "Many clusters" section into an existing ``BENCHMARKS.md`` (replacing the
one there), without running the other benches.  Needs the e2e binaries (``make e2e-bins``;
``E2E_BIN_DIR`` points elsewhere) and, for the CRD step, the CRD corpus
(``tests/support/crdcorpus.py``, cached in ``tests/bench/.crds/``).  Not a timed test: it
prints what it measures and returns the rows of the benchmark table.

**Speed.** Two demo upstreams, each in a process of its own (``bench_loop_hold``'s upstream)
holding ``--pods`` realistic pods (``tests/bench/realistic.py``), are served by one
``kube-gateway serve`` process as clusters ``a`` and ``b`` (``--cluster NAME=KUBECONFIG``).
Demo upstreams, not kube-apiservers: creating 2 x 5,000 pods through a real apiserver's API
took minutes on the shared machine this was written on (~12 pods a second each).  The
upstreams gzip an answer over 128 KiB for a client that accepts it, as the apiserver does
(APIResponseCompression, on by default); ``--upstream-gzip off`` measures upstreams that
never do (``both``, the default, measures each; the table's rows are the gzipping ones, with
one row for the fleet list without).  Once the
gateway has built the three clusters' schemas, each round, in turn: the direct list of each
upstream (``KubeAdapter.list``: HTTP + orjson decode, what the gateway itself does first),
each cluster's own list through the gateway
(``/clusters/{name}/graphql``, the 15 fields of ``bench_graphql_list``) and the fleet list of
both (``/fleet/graphql``, ``fleet(clusters: ["a", "b"])``, the same 15 fields).  A gateway
call is timed until the last byte of its answer has arrived; the answer is decoded and
checked after the clock stops, so the bench client's decode (twice as much for the fleet) is
not in the figures.  Figures: medians over ``--rounds``; the goal is the fleet list ≤ 1.2x
the slower cluster's own list (median over median; the note gives the median and worst of
the per-round ratios).  Around every gateway call: the gateway process's CPU time
(``/proc/PID/stat``), its event-loop lag histogram and its count of upstream pod lists
(``/metrics``; the lag is sampled every 50 ms, so the longest stall is known to its bucket).

**Memory.** A ``kube-gateway serve`` process with ``--clusters-dir`` serves a real
kube-apiserver as its default cluster; kubeconfig files of the same apiserver are then added
to the directory, up to each of ``--extra`` added clusters.  RSS (``/proc/PID/status``) is
read once the default cluster's schema is built and a query answered, then at each step once
every added cluster is served and its ``/graphql`` schema rebuilt for its discovered catalog,
and again after a first query on every added cluster's endpoint (each 2 s after, as in
``bench_scale``).  Done with the apiserver's built-in kinds, then again after ``--crds`` CRDs
of the corpus are installed on it.  The per-cluster figure is the growth over the default
cluster alone divided by the number of added clusters, at the largest step.  With
``--breakdown``, a gateway in this process adds one cluster under ``tracemalloc``: what the
cluster's Python memory is, by package or gateway module.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.core.model.registry import POD
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from gateway.settings import load
from tests.bench.bench_graphql_list import QUERY, SELECTION
from tests.bench.report import Row, row, splice, text_table
from tests.e2e.apiserver import KubeAPIServer, running_apiserver
from tests.support import crdcorpus
from tests.support.graphql import serve_app
from tests.support.serve_process import Served, serve_process

NAMESPACE = "bench"
DEMO_TOKEN = "admin-token"
CLUSTERS = ("a", "b")
OWN_QUERY = QUERY  # bench_graphql_list's 15 fields
FLEET_QUERY = (
    "query($ns: String!, $clusters: [String!]) { fleet(clusters: $clusters) { cluster "
    f"pods(namespace: $ns) {{{SELECTION} }} }} }}"
)
SMALL_QUERY = '{ pods(namespace: "default", limit: 1) { items { metadata { name } } } }'
#: Pods created or written at once while populating an apiserver.
CREATE_CONCURRENCY = 16
POLL_S = 0.05
#: After a step's last probe answered: the pause before its RSS is read (the collector and
#: the catalog's background work settle), as in ``bench_scale``.
SETTLE_RSS_S = 2.0
#: After a gateway call's answer: the pause before its CPU time is read again, frees included.
SETTLE_CPU_S = 1.0
REBUILT = "GraphQL schema /graphql rebuilt"
_SERVED = re.compile(r"cluster (\S+): served")


def log(message: str) -> None:
    print(f"bench_fleet: {message}", flush=True)


# -- small helpers (with a test: tests/bench/test_bench_fleet.py) ----------------------------


def lag_buckets(metrics_text: str) -> dict[float, int]:
    """The gateway's event-loop lag histogram from ``/metrics``: upper bound (s) -> count."""
    buckets: dict[float, int] = {}
    for line in metrics_text.splitlines():
        if line.startswith("kube_gateway_event_loop_lag_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[float(le)] = int(float(line.rsplit(" ", 1)[1]))
    return buckets


def longest_lag(before: Mapping[float, int], after: Mapping[float, int]) -> float:
    """The upper bound (s) of the highest lag bucket that gained a sample between the two
    readings (0 when none did; ``inf`` when a sample was beyond the last bound)."""
    bounds = sorted(after)
    previous_total = 0
    gained_at = 0.0
    # cumulative buckets: a bucket gained a sample when its count grew more than the one below
    for bound in bounds:
        grew = after[bound] - before.get(bound, 0)
        if grew > previous_total:
            gained_at = bound
        previous_total = grew
    return gained_at


def list_requests(metrics_text: str, resource: str = "pods") -> int:
    """Every upstream list of ``resource`` the gateway counted (its ``/metrics``)."""
    total = 0
    for line in metrics_text.splitlines():
        if (
            line.startswith("kube_gateway_upstream_request_duration_seconds_count{")
            and 'verb="list"' in line
            and f'resource="{resource}"' in line
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def cpu_ms(pid: int) -> float:
    """The CPU time (user + system, every thread) process ``pid`` and its live children
    (the gateway's list workers) have used, in ms."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):
            ticks += int(fields[11]) + int(fields[12])
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """``VmRSS`` of ``/proc/PID/status`` in MB (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# -- the upstreams of the speed part ---------------------------------------------------------


@contextlib.contextmanager
def demo_upstream(pods: int, *, gzip: bool = True) -> Iterator[str]:
    """A demo upstream holding ``pods`` realistic pods in a process of its own (the upstream
    of ``bench_loop_hold``), its URL; stopped (stdin closed) when the block exits.
    ``gzip``: it gzips large answers, as the apiserver does (else never)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.bench.bench_loop_hold",
            "--role=upstream",
            f"--pods={pods}",
            *([] if gzip else ["--no-gzip"]),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url:
            raise RuntimeError("the demo upstream did not start")
        yield url
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def kubeconfig(path: Path, server: str, token: str = DEMO_TOKEN) -> str:
    """A kubeconfig of ``server`` with ``token`` (the gateway's identity there)."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}'}}}}]\n"
        f"users: [{{name: u, user: {{token: '{token}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return str(path)


# -- the gateway -----------------------------------------------------------------------------


@contextlib.contextmanager
def gateway(*args: str) -> Iterator[Served]:
    """``kube-gateway serve *args`` on loopback ports, JSON logs (kept for the waits)."""
    with (
        tempfile.TemporaryDirectory(prefix="kg-bench-fleet-") as home,
        serve_process(Path(home), "--log-format", "json", "--drain-seconds", "1", *args) as served,
    ):
        yield served


def wait_lines(served: Served, found: Callable[[list[str]], bool], timeout: float) -> None:
    """Until ``found(log lines)`` (bounded: a bench must end)."""
    deadline = time.monotonic() + timeout
    while not found(list(served.lines)):
        if served.proc.poll() is not None:
            raise RuntimeError(f"the gateway exited:\n{''.join(served.lines[-20:])}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the gateway's log did not show it in {timeout:.0f}s")
        time.sleep(POLL_S)


def rebuilds(lines: Sequence[str]) -> int:
    """How many ``/graphql`` schema rebuilds (one per cluster's catalog) were logged."""
    return sum(1 for line in lines if REBUILT in line)


def served_names(lines: Sequence[str]) -> set[str]:
    """The named clusters the gateway logged as served."""
    return {m.group(1) for line in lines if (m := _SERVED.search(line))}


def _all_built(names: set[str], lines: Sequence[str]) -> bool:
    """Every cluster of ``names`` served and a ``/graphql`` rebuilt for each (and the
    default's)."""
    return names <= served_names(lines) and rebuilds(lines) >= len(names) + 1


async def answers(client: httpx.AsyncClient, path: str, query: str, timeout: float = 120) -> None:
    """Until ``query`` at ``path`` answers data without errors (the schema may still be
    the seed one, or the cluster not yet served)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            r = await client.post(path, json={"query": query})
            body = r.json()
            if r.status_code == 200 and not body.get("errors") and body.get("data"):
                return
            last = r.text[:200]
        except httpx.HTTPError as exc:
            last = repr(exc)
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"{path} did not answer in {timeout:.0f}s: {last}")


# -- speed -----------------------------------------------------------------------------------


@dataclass
class Speed:
    times: dict[str, list[float]] = field(default_factory=dict)
    #: The longest event-loop lag bucket (s) seen during each kind of gateway call.
    lag: dict[str, float] = field(default_factory=dict)
    #: Upstream pod lists the gateway made for the last call of each kind.
    upstream: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    #: The gateway process's CPU time (ms) during each call of each kind.
    cpu: dict[str, list[float]] = field(default_factory=dict)
    #: The same, up to ``SETTLE_CPU_S`` after the answer: with the decoded bodies' frees,
    #: which an own list runs after its answer and a fleet partly before.
    cpu_settled: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.times[name])


async def measure_speed(urls: Mapping[str, str], served: Served, pods: int, rounds: int) -> Speed:
    """Every kind of call ``rounds`` times, in turns (see the module's docstring)."""
    out = Speed()
    me = Credential(DEMO_TOKEN)
    async with contextlib.AsyncExitStack() as stack:
        adapters = {
            name: KubeAdapter(
                await stack.enter_async_context(
                    build_http_client(UpstreamConfig(server=url, source="bench"))
                )
            )
            for name, url in urls.items()
        }
        client = await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=served.http, headers=me.headers(), timeout=300, trust_env=False
            )
        )

        async def direct(name: str) -> None:
            listed = await adapters[name].list(POD, namespace=NAMESPACE, credential=me)
            assert len(listed["items"]) == pods

        def check_own(content: bytes) -> None:
            body = orjson.loads(content)
            assert "errors" not in body, body["errors"]
            items = body["data"]["pods"]["items"]
            assert len(items) == pods and items[0]["status"]["phase"]

        def check_fleet(content: bytes) -> None:
            body = orjson.loads(content)
            assert "errors" not in body, body["errors"]
            members = body["data"]["fleet"]
            assert [m["cluster"] for m in members] == list(CLUSTERS)
            for m in members:
                assert len(m["pods"]["items"]) == pods

        async def metrics() -> str:
            return (await client.get("/metrics")).text

        def gateway_call(
            kind: str, path: str, query: str, variables: dict[str, Any], check: Any
        ) -> Callable[[], Awaitable[float]]:
            async def call() -> float:
                before = await metrics()
                cpu = cpu_ms(served.proc.pid)
                start = time.perf_counter()
                response = await client.post(path, json={"query": query, "variables": variables})
                took = (time.perf_counter() - start) * 1000
                out.cpu.setdefault(kind, []).append(cpu_ms(served.proc.pid) - cpu)
                after = await metrics()
                await asyncio.sleep(SETTLE_CPU_S)  # the frees of the bodies end meanwhile
                out.cpu_settled.setdefault(kind, []).append(cpu_ms(served.proc.pid) - cpu)
                lag = longest_lag(lag_buckets(before), lag_buckets(after))
                out.lag[kind] = max(out.lag.get(kind, 0.0), lag)
                out.upstream[kind] = list_requests(after) - list_requests(before)
                check(response.content)
                out.sizes[kind] = len(response.content)
                return took

            return call

        async def timed(fn: Callable[[], Awaitable[None]]) -> float:
            start = time.perf_counter()
            await fn()
            return (time.perf_counter() - start) * 1000

        fleet_vars = {"ns": NAMESPACE, "clusters": list(CLUSTERS)}
        own_vars = {"ns": NAMESPACE}
        calls: dict[str, Callable[[], Awaitable[float]]] = {
            "direct a": lambda: timed(lambda: direct("a")),
            "direct b": lambda: timed(lambda: direct("b")),
            "own a": gateway_call("own", "/clusters/a/graphql", OWN_QUERY, own_vars, check_own),
            "own b": gateway_call("own", "/clusters/b/graphql", OWN_QUERY, own_vars, check_own),
            "fleet": gateway_call("fleet", "/fleet/graphql", FLEET_QUERY, fleet_vars, check_fleet),
        }
        for warm in ("own a", "own b", "fleet"):  # schemas, parse caches, connections
            await calls[warm]()
        out.lag.clear()
        out.cpu.clear()
        out.cpu_settled.clear()
        out.times = {name: [] for name in calls}
        for _ in range(rounds):
            for name, call in calls.items():
                gc.collect()
                out.times[name].append(await call())
    return out


def speed_rows(
    s: Speed, pods: int, rounds: int, workers: str = "auto", *, gzip: bool = True
) -> list[Row]:
    own = {n: s.median(f"own {n}") for n in CLUSTERS}
    slower = max(own, key=lambda n: own[n])
    per_round = [
        f / max(a, b)
        for f, a, b in zip(s.times["fleet"], s.times["own a"], s.times["own b"], strict=True)
    ]
    fleet = s.median("fleet")
    log(f"2 x {pods} pods, medians of {rounds} rounds (ms):")
    for name, t in s.times.items():
        log(f"  {name:22} {statistics.median(t):8.1f}   (all: {', '.join(f'{x:.0f}' for x in t)})")
    log(
        f"  fleet / slower own (cluster {slower}): {fleet / own[slower]:.2f}x; per round: "
        f"median {statistics.median(per_round):.2f}x, worst {max(per_round):.2f}x"
    )
    log(
        f"  answer sizes: own {s.sizes.get('own', 0) / 1e6:.1f} MB, fleet "
        f"{s.sizes.get('fleet', 0) / 1e6:.1f} MB; longest loop lag bucket: own "
        f"{s.lag.get('own', 0) * 1000:.0f} ms, fleet {s.lag.get('fleet', 0) * 1000:.0f} ms"
    )
    log(f"  upstream pod LISTs per call: {s.upstream}")
    for kind, cpu in s.cpu.items():
        log(f"  gateway CPU per {kind} list: median {statistics.median(cpu):.0f} ms ({cpu})")
    for kind, cpu in s.cpu_settled.items():
        log(
            f"  gateway CPU per {kind} list, frees included: median "
            f"{statistics.median(cpu):.0f} ms ({cpu})"
        )
    tag = f"fleet: list of 2 x {pods:,} pods, 15 fields"
    upstream = "" if gzip else ", upstreams not gzipping"
    return [
        row(
            f"{tag}{upstream}, median (direct column: the slower cluster's own list via the "
            "gateway)",
            fleet,
            "ms",
            own[slower],
            max_ratio=1.2,
            note=f"--list-workers {workers}; per round median "
            f"{statistics.median(per_round):.2f}x, worst {max(per_round):.2f}x of {rounds}",
        ),
        row(
            f"fleet: own list of {pods:,} pods at /clusters/{{name}}/graphql, median (slower "
            "cluster)",
            own[slower],
            "ms",
            s.median(f"direct {slower}"),
            note="direct: KubeAdapter list of the same upstream, HTTP + decode",
        ),
        row(
            f"{tag}: the gateway's CPU time (its list workers' included), median (direct "
            "column: an own list's)",
            statistics.median(s.cpu["fleet"]),
            "ms",
            statistics.median(s.cpu["own"]),
            note="from /proc/PID/stat around each call",
        ),
        row(
            f"{tag}: the gateway's CPU time, frees included, median (direct column: an own list's)",
            statistics.median(s.cpu_settled["fleet"]),
            "ms",
            statistics.median(s.cpu_settled["own"]),
            note=f"read {SETTLE_CPU_S:g} s after the answer: the decoded bodies freed",
        ),
        row(
            "fleet: longest event-loop stall during the fleet lists (direct column: during "
            "own lists)",
            s.lag.get("fleet", 0.0) * 1000,
            "ms",
            s.lag.get("own", 0.0) * 1000 or None,
            note="upper bound of the gateway's lag histogram bucket, sampled every 50 ms",
        ),
        row(
            "fleet: upstream lists per fleet list",
            s.upstream.get("fleet", 0),
            "",
            max_value=2,
            note=f"the gateway's own count; an own list: {s.upstream.get('own', 0)}",
        ),
    ]


# -- memory ----------------------------------------------------------------------------------


@dataclass
class Step:
    extra: int
    built: float
    queried: float


@dataclass
class Memory:
    label: str
    base_built: float = 0.0
    base_queried: float = 0.0
    steps: list[Step] = field(default_factory=list)


async def _first_queries(served: Served, token: str, paths: Sequence[str]) -> None:
    async with httpx.AsyncClient(
        base_url=served.http,
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
        trust_env=False,
    ) as client:
        await asyncio.gather(*(answers(client, p, SMALL_QUERY) for p in paths))


def measure_memory(
    kube: KubeAPIServer, label: str, extras: Sequence[int], timeout: float
) -> Memory:
    out = Memory(label)
    token = kube.tokens["admin"]
    config = Path(kube.kubeconfigs["admin"])
    with tempfile.TemporaryDirectory(prefix="kg-bench-fleet-dir-") as directory:
        clusters_dir = Path(directory)
        with gateway("--kubeconfig", str(config), "--clusters-dir", directory) as served:
            pid = served.proc.pid
            wait_lines(served, lambda lines: rebuilds(lines) >= 1, timeout)
            time.sleep(SETTLE_RSS_S)
            out.base_built = rss_mb(pid)
            asyncio.run(_first_queries(served, token, ["/graphql"]))
            time.sleep(SETTLE_RSS_S)
            out.base_queried = rss_mb(pid)
            log(
                f"{label}: default cluster alone: RSS {out.base_built:.0f} MB built, "
                f"{out.base_queried:.0f} MB after a first query"
            )
            have = 0
            for extra in sorted(set(extras)):
                names = [f"x{i}" for i in range(have + 1, extra + 1)]
                for name in names:
                    shutil.copy(config, clusters_dir / name)
                have = extra
                started = time.monotonic()
                wanted = {f"x{i}" for i in range(1, extra + 1)}
                wait_lines(
                    served,
                    functools.partial(_all_built, wanted),
                    timeout,
                )
                took = time.monotonic() - started
                time.sleep(SETTLE_RSS_S)
                built = rss_mb(pid)
                asyncio.run(
                    _first_queries(
                        served, token, [f"/clusters/x{i}/graphql" for i in range(1, extra + 1)]
                    )
                )
                time.sleep(SETTLE_RSS_S)
                queried = rss_mb(pid)
                out.steps.append(Step(extra, built, queried))
                log(
                    f"{label}: +{extra} clusters (the new ones built in {took:.1f}s): RSS "
                    f"{built:.0f} MB built ({(built - out.base_built) / extra:.1f} MB each), "
                    f"{queried:.0f} MB after a query on each "
                    f"({(queried - out.base_queried) / extra:.1f} MB each)"
                )
    return out


def memory_rows(m: Memory) -> list[Row]:
    if not m.steps:
        return []
    last = m.steps[-1]
    steps = "; ".join(f"+{s.extra}: {s.built:.0f}/{s.queried:.0f} MB" for s in m.steps)
    note = f"default alone {m.base_built:.0f}/{m.base_queried:.0f} MB (built/queried); {steps}"
    return [
        row(
            f"fleet: RSS per added cluster, {m.label}, schemas built (+{last.extra} clusters)",
            (last.built - m.base_built) / last.extra,
            "MB",
            note=note,
        ),
        row(
            f"fleet: RSS per added cluster, {m.label}, after a first query on each",
            (last.queried - m.base_queried) / last.extra,
            "MB",
        ),
    ]


def _package(filename: str) -> str:
    """Where an allocation was made, coarsely: a third-party package, or the gateway's module."""
    path = filename.replace("\\", "/")
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    if "/gateway/" in path:
        return "gateway/" + path.rsplit("/gateway/", 1)[1]
    return path.rsplit("/", 1)[-1]


class _Rebuilds(logging.Handler):
    """Counts the ``/graphql`` schema rebuilds the gateway logs (one per cluster)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if REBUILT in record.getMessage():
            self.count += 1


async def _until(holds: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not holds():
        if time.monotonic() > deadline:
            raise TimeoutError("the gateway did not get there in time")
        await asyncio.sleep(POLL_S)


async def breakdown(kube: KubeAPIServer, timeout: float, top: int = 12) -> list[tuple[str, float]]:
    """What one added cluster's Python memory is, by package or gateway module (MB), with
    tracemalloc: a gateway in this process serves ``kube`` as its default cluster, then the
    same apiserver as a second cluster; the traced growth from before the second is added to
    after its schema is built and a first query answered."""
    config = kube.kubeconfigs["admin"]
    rebuilt = _Rebuilds()
    gateway_log = logging.getLogger("gateway")
    level = gateway_log.level
    gateway_log.addHandler(rebuilt)
    gateway_log.setLevel(logging.INFO)  # in this process nobody configured the gateway's log
    with tempfile.TemporaryDirectory(prefix="kg-bench-fleet-dir-") as directory:
        flags = ["--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0"]
        settings = load([*flags, "--kubeconfig", config, "--clusters-dir", directory], {})
        try:
            async with (
                serve_app(settings) as (url, app),
                httpx.AsyncClient(
                    base_url=url, headers=kube.headers("admin"), timeout=120, trust_env=False
                ) as client,
            ):
                fleet = app.state.runtime.fleet
                await _until(lambda: rebuilt.count >= 1, timeout)
                await answers(client, "/graphql", SMALL_QUERY)
                gc.collect()
                tracemalloc.start()
                before = tracemalloc.take_snapshot()
                shutil.copy(config, Path(directory) / "x1")
                await _until(lambda: "x1" in fleet.names() and rebuilt.count >= 2, timeout)
                await answers(client, "/clusters/x1/graphql", SMALL_QUERY)
                gc.collect()
                after = tracemalloc.take_snapshot()
                tracemalloc.stop()
        finally:
            gateway_log.removeHandler(rebuilt)
            gateway_log.setLevel(level)
    sizes: dict[str, float] = {}
    for stat in after.compare_to(before, "filename"):
        key = _package(stat.traceback[0].filename)
        sizes[key] = sizes.get(key, 0.0) + stat.size_diff / 1e6
    ordered = sorted(sizes.items(), key=lambda kv: -kv[1])
    total = sum(sizes.values())
    log(f"tracemalloc: one added cluster holds {total:.1f} MB of Python memory; by where made:")
    for key, mb in ordered[:top]:
        log(f"  {mb:7.2f} MB  {key}")
    return [("total", total), *ordered[:top]]


# -- the whole ---------------------------------------------------------------------------------


def fleet_speed(
    pods: int, rounds: int, timeout: float, workers: str, gzip: bool = True
) -> list[Row]:
    """Two demo upstreams in processes of their own, served as clusters a and b."""
    log(f"speed, upstream answers {'gzipped (as the apiserver)' if gzip else 'not gzipped'}:")
    with (
        demo_upstream(pods, gzip=gzip) as url_a,
        demo_upstream(pods, gzip=gzip) as url_b,
        tempfile.TemporaryDirectory(prefix="kg-bench-fleet-kc-") as configs,
    ):
        urls = {"a": url_a, "b": url_b}
        files = {n: kubeconfig(Path(configs) / n, u) for n, u in urls.items()}
        flags = [f"--cluster={n}={f}" for n, f in files.items()]
        with gateway("--kubeconfig", files["a"], "--list-workers", workers, *flags) as served:
            # the discovered schemas of the three clusters (default, a, b) built first: their
            # builds are not what is measured
            wait_lines(served, lambda lines: rebuilds(lines) >= 1 + len(urls), timeout)
            load_before = os.getloadavg()[0]
            s = asyncio.run(measure_speed(urls, served, pods, rounds))
            load_after = os.getloadavg()[0]
    log(f"  machine load (1-min average): {load_before:.1f} before, {load_after:.1f} after")
    if not gzip:
        return speed_rows(s, pods, rounds, workers, gzip=False)[:1]
    return [
        *speed_rows(s, pods, rounds, workers),
        row(
            f"fleet: machine load during the speed rounds, 1-min average ({os.cpu_count()} CPUs)",
            max(load_before, load_after),
            "",
            note=f"{load_before:.1f} before, {load_after:.1f} after",
        ),
    ]


def rows(
    pods: int = 5000,
    rounds: int = 7,
    *,
    extras: Sequence[int] = (1, 2, 4, 8),
    crds: int = 100,
    speed: bool = True,
    memory: bool = True,
    breakdown_top: int = 12,
    timeout: float = 600,
    workers: str = "auto",
    gzip: Sequence[bool] = (True, False),
) -> list[Row]:
    """Measure (printing the details) and return the rows of the benchmark table."""
    out: list[Row] = []
    if speed:
        for each in gzip:
            out += fleet_speed(pods, rounds, timeout, workers, each)
    if not memory:
        return out
    with running_apiserver() as kube:
        log(f"kube-apiserver ready in {kube.startup_seconds}s")
        out += memory_rows(measure_memory(kube, "built-in kinds", extras, timeout))
        if breakdown_top:
            parts = asyncio.run(breakdown(kube, timeout, breakdown_top))
            out.append(
                row(
                    "fleet: Python memory one added cluster holds, built-in kinds (tracemalloc)",
                    parts[0][1],
                    "MB",
                    note="; ".join(f"{k} {mb:.1f} MB" for k, mb in parts[1:6]),
                )
            )
        if crds:
            corpus = crdcorpus.multiply(crdcorpus.load(), crds)
            token = kube.tokens["admin"]
            installed = asyncio.run(crdcorpus.install(kube.url, token, kube.ca_file, corpus))
            waited = asyncio.run(crdcorpus.wait_openapi(kube.url, token, kube.ca_file, corpus))
            log(f"{crds} CRDs installed in {installed:.0f}s, published {waited:.0f}s later")
            out += memory_rows(measure_memory(kube, f"{crds} CRDs", extras, timeout))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--extra", default="1,2,4,8", help="added clusters per memory step")
    parser.add_argument("--crds", type=int, default=100)
    parser.add_argument(
        "--out", type=Path, default=None, help="put the section into this BENCHMARKS.md"
    )
    parser.add_argument(
        "--list-workers", default="auto", help="the gateway's --list-workers (speed part)"
    )
    parser.add_argument(
        "--upstream-gzip",
        choices=("both", "on", "off"),
        default="both",
        help="the demo upstreams gzip large answers as the apiserver does (on), or not",
    )
    parser.add_argument("--no-speed", action="store_true")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument(
        "--breakdown", type=int, default=12, help="tracemalloc's top N (0: no breakdown)"
    )
    args = parser.parse_args()
    table = rows(
        args.pods,
        args.rounds,
        extras=[int(x) for x in args.extra.split(",") if x.strip()],
        crds=args.crds,
        speed=not args.no_speed,
        memory=not args.no_memory,
        breakdown_top=args.breakdown,
        workers=args.list_workers,
        gzip={"both": (True, False), "on": (True,), "off": (False,)}[args.upstream_gzip],
    )
    print()
    print(text_table(table))
    if args.out is not None:
        args.out.write_text(splice(args.out.read_text(), table))
        print(f"\nits section written into {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
