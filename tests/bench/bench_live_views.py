"""Benchmark: live views under churn (issue 29's speed section, live views).

    .venv/bin/python -m tests.bench.bench_live_views [--pods 3000] [--subscribers 1000]
        [--views 10] [--rate 100] [--seconds 10] [--notify] [--grpc] [--compression]
        [--in-process-upstream]

``--pods`` realistic pods (those of ``bench_views``) in one namespace of a demo upstream in
a child process, which also writes the churn (``--in-process-upstream``: both in the
gateway's process, as before 2026-11-28, where the demo's patches took about half of the
event loop's time); the gateway in process over loopback.  The subscribers come from the
Go load client ``tests/go-client/.bin/kg-fanout --view`` (built by ``make go-client``; one
WebSocket connection per GraphQL subscriber, 100 gRPC streams per HTTP/2 connection), so that the
gateway, not the client, is what is measured: ``--subscribers`` subscribers of ``--views``
distinct live views (a substring filter on the name, sorted by ``status.startTime``
descending, pages of 50 with 15 fields; over gRPC with ``--grpc``, ``WatchView`` with a read
mask of the same 15 fields).  Every view's page shows the stamp pod (its name holds every
view's substring, its start time is the newest), whose label ``bench/sent`` the bench sets
to its wall clock (Unix ns) on every tenth of ``--rate`` changes per second for
``--seconds``; the other changes set a label of a random pod.  The client takes the newest
stamp of each page it receives: latency from the change written to the demo store to the
subscriber's update showing it (p50, p99 over every subscriber; the goal: 300 ms p99 with
the 250 ms interval).  A subscriber of the live views' own upstream watch in the gateway
times each stamp's arrival at the hub: the part of that latency spent before the gateway
has the change (the upstream's, and the gateway's loop not yet reading its socket).
``--compression``: the WebSocket clients offer permessage-deflate,
as browsers do (the gateway accepts it: one compression per frame and connection).

The gateway's collector is set as ``kube-gateway serve`` sets it once started
(``tune_garbage_collector``: what start-up made frozen, young collections rarer).  Before
2026-11-28 the bench did not, and a full collection walking all start-up made (schemas,
contract, modules) stopped the loop for 0.2 to 1 s in most runs: the p99 of the runs
before (342 ms on a quiet machine) was most likely that, which a serving gateway does not
do (the quiet re-run will say).

Printed: the evaluations per live view and per interval (each view's evaluations over the
intervals of its grid from its first to its last; the goal: 1,000 subscribers of 10 views
cost at most 10 evaluations per batch), the time from each stamp at the hub to the
evaluation of each view that took it (newest: the one a subscriber times; the rest of the
gateway's part is the evaluation and the wait for its send), the encodings (one per
published page and front-end shape), the updates the subscribers received, the gateway
process's CPU (utime + stime of ``/proc/self/stat`` across the writing window and its
drain; with ``--in-process-upstream`` the demo's writes and watch serving are in it) per
second and per delivered update, the client's CPU, the event loop's thread's time on a
core and runnable but waiting for one (``/proc/thread-self/schedstat``: on a loaded
machine, where latency goes), the objects the evaluations decoded and their CPU, and the
event loop's longest stall seen by a 10 ms ticker.  ``--out BENCHMARKS.md`` runs GraphQL,
GraphQL with permessage-deflate and gRPC one after the other and puts the "Live views"
section (its rows start ``live views:``) into that file; not a row of ``make bench`` yet.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import contextlib
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson

from gateway.app import tune_garbage_collector
from gateway.core import POD, LiveViews
from gateway.core.views.live import LiveView
from gateway.core.watch.hub import WatchStart
from gateway.grpc.gen.kubegateway.v1 import resource_pb2
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.bench.bench_fanout import Client, _die_with_parent
from tests.bench.bench_graphql_list import NAMESPACE
from tests.bench.bench_views import NODES, _p, _pod
from tests.bench.report import Row, row, splice, text_table
from tests.support.graphql import serve_app

TOKEN = "admin-token"
LIVE = (
    """subscription($ns: String, $v: String!) {
  podsView(namespace: $ns, first: 50,
           filter: {field: "metadata.name", op: CONTAINS, value: $v},
           sort: [{field: "status.startTime", order: DESC}]) {
    total resourceVersion pageInfo { endCursor hasNextPage } """
    + NODES
    + " } }"
)
#: Notify mode: only that the page changed (the client refetches).
NOTIFY = """subscription($ns: String, $v: String!) {
  podsView(namespace: $ns, first: 50, notify: true,
           filter: {field: "metadata.name", op: CONTAINS, value: $v},
           sort: [{field: "status.startTime", order: DESC}]) { total resourceVersion } }"""
CLIENT = Path(__file__).resolve().parents[2] / "tests" / "go-client" / ".bin" / "kg-fanout"
#: The label the bench stamps and the client finds (``kg-fanout --view``).
STAMP = "bench/sent"
#: In every view's page: its name holds each view's substring, its start time the newest.
STAMPED = "stamp-0123456789abcdef"
PER_CONNECTION = 100
#: The 15 fields of ``NODES``, as a gRPC read mask.
MASK = [
    *(
        f"metadata.{f}"
        for f in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"]
    ),
    "metadata.labels",
    "spec.nodeName",
    "spec.serviceAccountName",
    "spec.containers.name",
    "spec.containers.image",
    *(f"status.{f}" for f in ["phase", "podIP", "hostIP", "startTime", "qosClass"]),
]


def _watch_view(value: str, notify: bool) -> resource_pb2.WatchViewRequest:
    """``LIVE`` (or ``NOTIFY``) as a gRPC ``WatchView`` request."""
    req = resource_pb2.WatchViewRequest(notify=notify)
    view = req.view
    view.version, view.resource, view.namespace, view.first = "v1", "pods", NAMESPACE, 50
    view.filter.field, view.filter.op, view.filter.value = (
        "metadata.name",
        resource_pb2.VIEW_OP_CONTAINS,
        value,
    )
    view.sort.add(field="status.startTime", order=resource_pb2.VIEW_ORDER_DESC)
    view.read_mask.paths.extend(MASK)
    return req


def _cpu() -> float:
    """This process's CPU seconds (utime + stime) from ``/proc``."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _loop_sched() -> tuple[float, float]:
    """The event loop's thread (this one): seconds on a core, and seconds runnable but
    waiting for one (``/proc/thread-self/schedstat``: the kernel's run-queue delay)."""
    try:
        run, wait, _ = Path("/proc/thread-self/schedstat").read_text().split()
    except (OSError, ValueError):
        return float("nan"), float("nan")
    return int(run) / 1e9, int(wait) / 1e9


@contextlib.asynccontextmanager
async def _client(
    url: str,
    grpc_port: int,
    subscribers: int,
    values: list[str],
    args: argparse.Namespace,
    *,
    latencies: Path,
) -> AsyncIterator[Client]:
    """``kg-fanout --view`` with ``subscribers`` subscribers of the views of ``values``."""
    if not CLIENT.exists():
        raise SystemExit(f"{CLIENT} is missing: run `make go-client` first")
    if args.grpc:
        requests = [
            base64.b64encode(_watch_view(v, args.notify).SerializeToString()).decode()
            for v in values
        ]
        target = ["--transport", "grpc", "--target", f"127.0.0.1:{grpc_port}",
                  "--view-requests", orjson.dumps(requests).decode()]  # fmt: skip
    else:
        variables = [{"ns": NAMESPACE, "v": v} for v in values]
        target = ["--transport", "ws", "--target", url.replace("http://", "ws://") + "/graphql",
                  "--query", NOTIFY if args.notify else LIVE,
                  "--variables", orjson.dumps(variables).decode(),
                  *(["--compression"] if args.compression else [])]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        str(CLIENT), "--view", *target,
        "--token", TOKEN, "--subscribers", str(subscribers),
        "--streams-per-conn", str(PER_CONNECTION), "--duration", "3600s",
        "--connect-timeout", "600s", "--ready-on", "event",
        "--latencies-out", str(latencies),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, preexec_fn=_die_with_parent,
    )  # fmt: skip
    c = Client(proc)
    c.start_reading()
    try:
        yield c
    finally:
        await c.aclose()


class _Upstream:
    """The demo upstream with the bench's pods and the writer of its churn: in a child
    process (the default: the upstream's own work, a patch's validation and managed fields
    above all, is not the gateway's, and in one process it took half of the event loop's
    time under churn), or in this one (``--in-process-upstream``, as before)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.url = ""
        self._demo: DemoUpstream | None = None
        self._names: list[str] = []
        self._child: asyncio.subprocess.Process | None = None
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> _Upstream:
        args = self.args
        if args.in_process_upstream:
            self._demo = await self._stack.enter_async_context(DemoUpstream(seed=False))
            self._names = await _seed(self._demo, args.pods)
            self.url = self._demo.url
            return self
        child = self._child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.bench.bench_live_views", "--child",
            "--pods", str(args.pods),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            preexec_fn=_die_with_parent,
        )  # fmt: skip
        assert child.stdout is not None
        self.url = (await asyncio.wait_for(child.stdout.readline(), 300)).decode().strip()
        if not self.url.startswith("http"):
            raise SystemExit(f"the upstream's child did not start: {self.url!r}")
        return self

    async def churn(self, rate: float, seconds: float) -> tuple[int, float]:
        """``rate`` changes a second for ``seconds``: the changes made and the time taken."""
        if self._demo is not None:
            return await _churn(self._demo, self._names, rate, seconds)
        child = self._child
        assert child is not None and child.stdin is not None and child.stdout is not None
        child.stdin.write(f"{rate} {seconds}\n".encode())
        await child.stdin.drain()
        changes, took = (await child.stdout.readline()).split()
        return int(changes), float(took)

    async def __aexit__(self, *exc: object) -> None:
        child = self._child
        if child is not None:
            assert child.stdin is not None
            child.stdin.close()
            try:
                await asyncio.wait_for(child.wait(), 30)
            except TimeoutError:
                child.kill()
                await child.wait()
        await self._stack.aclose()


async def _seed(demo: DemoUpstream, pods: int) -> list[str]:
    """``pods`` realistic pods and the stamped one: the names of the others."""
    stamped = _pod(pods)
    stamped["metadata"]["name"] = STAMPED
    stamped["metadata"]["labels"] = {STAMP: "warm-0"}
    stamped["status"]["startTime"] = "2026-12-31T00:00:00Z"  # kept by a bulk create
    objects = [*(_pod(i) for i in range(pods)), stamped]
    await demo.store.bulk_create(POD, objects, namespace=NAMESPACE)
    names = [p["metadata"]["name"] for p in await demo.store.list(POD, namespace=NAMESPACE)]
    names.remove(STAMPED)
    return names


async def _churn(
    demo: DemoUpstream, names: list[str], rate: float, seconds: float
) -> tuple[int, float]:
    """Every tenth change stamps the time on the stamped pod, the others label a random
    pod: the changes made and the time taken."""
    rnd = random.Random(29)
    changes = int(rate * seconds)
    began = time.perf_counter()
    for i in range(changes):
        delay = began + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if i % 10 == 0:
            labels = {STAMP: str(time.time_ns())}
            name = STAMPED
        else:
            labels, name = {"churn": str(i)}, rnd.choice(names)
        await demo.store.patch(POD, name, {"metadata": {"labels": labels}}, namespace=NAMESPACE)
    return changes, time.perf_counter() - began


async def _arrivals(live: LiveViews, into: list[float], at: dict[int, int]) -> None:
    """Each stamp's delay (ms) from the write to the gateway's hub handing it out, and the
    wall clock (Unix ns) it was handed out at, by stamp: a subscriber of the live views' own
    upstream watch (the same one: same target, same caller), reading only the stamped pod's
    label."""
    view = live.live[0]
    sub = await live.views.hub.subscribe(view.cache.target, WatchStart("now"), view.credential)
    try:
        while (event := await sub.next()) is not None:
            obj = event.object
            labels = (obj.get("metadata") or {}).get("labels") or {}
            sent = labels.get(STAMP, "")
            if obj["metadata"].get("name") == STAMPED and sent.isdigit():
                now = time.time_ns()
                into.append((now - int(sent)) / 1e6)
                at[int(sent)] = now
    finally:
        sub.close()


async def _child(pods: int) -> None:
    """The upstream's child: serve, print the URL, churn at each ``RATE SECONDS`` line read
    and answer ``CHANGES TOOK``; stop when stdin closes."""
    loop = asyncio.get_running_loop()
    async with DemoUpstream(seed=False) as demo:
        names = await _seed(demo, pods)
        print(demo.url, flush=True)
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            rate, seconds = line.split()
            changes, took = await _churn(demo, names, float(rate), float(seconds))
            print(changes, took, flush=True)


async def bench(args: argparse.Namespace) -> dict[str, float]:
    pods, subscribers, views, rate = args.pods, args.subscribers, args.views, args.rate
    async with _Upstream(args) as upstream:
        settings = Settings(
            host="127.0.0.1",
            http_port=0,
            grpc_port=0,
            server=upstream.url,
            log_level="warning",
            max_list_items=pods + 2,
            max_subscriptions_per_identity=subscribers + 100,
            max_subscriptions=subscribers + 1000,
            http_max_connections=str(subscribers + 200),
        )
        async with serve_app(settings) as (url, app):
            # the collector as `kube-gateway serve` sets it once started (what start-up
            # made frozen, young collections rarer): without it a full collection walked
            # all of it, 0.2-1 s of a stopped loop, in most runs (the p99 before 2026-11-28)
            tune_garbage_collector()
            live = LiveViews.of(app.state.runtime.cluster.views)
            values = [f"{i:x}" for i in range(views)]
            started = time.perf_counter()
            port = app.state.runtime.grpc_port
            samples = Path(tempfile.mkdtemp(prefix="kg-live-")) / "latencies"
            async with _client(url, port, subscribers, values, args, latencies=samples) as client:
                async with asyncio.timeout(600):
                    while not client.ready.is_set():
                        if client.proc.returncode is not None:
                            raise SystemExit(f"kg-fanout: {client.stderr.decode()[-2000:]}")
                        await asyncio.sleep(0.1)
                where = "in process" if args.in_process_upstream else "in a child process"
                print(
                    f"{subscribers} {'gRPC' if args.grpc else 'GraphQL'} subscribers "
                    f"(Go kg-fanout{', permessage-deflate' if args.compression else ''}) of "
                    f"{views} live views of {pods} pods (the demo upstream {where}): first "
                    f"pages in {time.perf_counter() - started:.1f} s; live views "
                    f"{len(live.live)}"
                )
                stalls: list[float] = []

                async def ticker() -> None:
                    last = time.perf_counter()
                    while True:
                        await asyncio.sleep(0.01)
                        now = time.perf_counter()
                        stalls.append((now - last) * 1000 - 10)
                        last = now

                tick = asyncio.create_task(ticker())
                views_live = live.live
                arrivals: list[float] = []
                handed: dict[int, int] = {}
                arrived = asyncio.create_task(_arrivals(live, arrivals, handed))
                stats = live.stats
                evaluations, published, encodings, decodes, evaluating = (
                    stats.evaluations,
                    stats.published,
                    stats.encodings,
                    stats.decodes,
                    stats.evaluation_seconds,
                )
                load = os.getloadavg()
                loop = asyncio.get_running_loop()
                began_at = loop.time()
                cpu0, began, sched0 = _cpu(), time.perf_counter(), _loop_sched()
                changes, took = await upstream.churn(rate, args.seconds)
                await asyncio.sleep(1.5)  # the last interval's updates
                cpu = _cpu() - cpu0
                sched = _loop_sched()
                ran, waited = sched[0] - sched0[0], sched[1] - sched0[1]
                window = time.perf_counter() - began
                tick.cancel()
                arrived.cancel()
                summary = await client.finish()
            after = os.getloadavg()
            load = (max(load[0], after[0]), max(load[1], after[1]), max(load[2], after[2]))
            evaluated = stats.evaluations - evaluations
            per_interval = _per_interval(views_live, began_at)
            print(
                f"{changes} changes in {took:.1f} s ({changes / took:.0f}/s): "
                f"{evaluated} evaluations for {len(views_live)} live views "
                f"({evaluated / max(1, len(views_live)):.1f} each, at most one per "
                f"{live.interval * 1000:.0f} ms: {took / live.interval:.0f} intervals); "
                f"{per_interval:.1f} evaluations per interval (each view's over the "
                f"intervals of its grid from its first evaluation to its last) for {subscribers} "
                f"subscribers"
            )
            print(
                f"evaluations: {stats.decodes - decodes} objects decoded "
                f"({(stats.decodes - decodes) / max(1, evaluated):.1f} per evaluation), "
                f"{(stats.evaluation_seconds - evaluating) * 1000 / max(1, evaluated):.2f} ms "
                f"of the loop's CPU each to cut and publish the page"
            )
            updates = int(summary.get("updates", 0))
            print(
                f"updates published {stats.published - published}, encoded "
                f"{stats.encodings - encodings} times, received by the subscribers {updates} "
                f"({summary['errors']} errors {summary['first_error'][:200]!r})"
            )
            print(
                f"change to update (every subscriber, newest stamp of each page): "
                f"p50 {summary['p50_ms']:.0f} ms, p99 {summary['p99_ms']:.0f} ms, "
                f"max {summary['max_ms']:.0f} ms ({summary['received']} samples)"
            )
            if arrivals:
                print(
                    f"the stamp reaching the gateway's hub (the upstream's part, not the "
                    f"gateway's): p50 {_p(arrivals, 0.5):.0f} ms, p99 {_p(arrivals, 0.99):.0f} "
                    f"ms ({len(arrivals)} stamps)"
                )
            gateway = _from_the_hub(samples, handed)
            waits = _evaluation_waits(views_live, handed, time.time() - loop.time())
            if waits:
                print(
                    f"from the stamp at the hub to the evaluation that took it (each view's "
                    f"newest): "
                    f"p50 {_p(waits, 0.5):.0f} ms, p99 {_p(waits, 0.99):.0f} ms (the rest of "
                    f"the gateway's part is the evaluation and the wait for its send)"
                )
            shutil.rmtree(samples.parent, ignore_errors=True)
            if gateway:
                print(
                    f"the gateway's part, from the stamp at the hub to the update (issue 29's "
                    f"measure): p50 {_p(gateway, 0.5):.0f} ms, p99 {_p(gateway, 0.99):.0f} ms "
                    f"({len(gateway)} samples)"
                )
            per_update = cpu / updates * 1e6 if updates else float("nan")
            print(
                f"gateway CPU {cpu:.2f} s in {window:.1f} s "
                f"({cpu / window * 100:.0f} % of a core), "
                f"{per_update:.0f} us per delivered update; client CPU "
                f"{summary['client_cpu_seconds']:.2f} s; load average (max of before/after) "
                f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
            )
            print(
                f"the event loop's thread: {ran:.2f} s on a core, {waited:.2f} s runnable but "
                f"waiting for one (the kernel's run-queue delay) in {window:.1f} s"
            )
            if stalls:
                print(
                    f"event loop: longest stall {max(stalls):.0f} ms, "
                    f"p99 {_p(stalls, 0.99):.0f} ms, median {statistics.median(stalls):.0f} ms"
                )
            return {
                "p50": float(summary["p50_ms"]),
                "p99": float(summary["p99_ms"]),
                "arrival_p50": _p(arrivals, 0.5) if arrivals else float("nan"),
                "arrival_p99": _p(arrivals, 0.99) if arrivals else float("nan"),
                "gateway_p50": _p(gateway, 0.5) if gateway else float("nan"),
                "gateway_p99": _p(gateway, 0.99) if gateway else float("nan"),
                "per_interval": per_interval,
                "wait_p99": _p(waits, 0.99) if waits else float("nan"),
                "per_update_us": per_update,
                "ran": ran,
                "waited": waited,
                "window": window,
                "load": load[0],
                "decodes": (stats.decodes - decodes) / max(1, evaluated),
            }


def _per_interval(views: list[LiveView], since: float) -> float:
    """Evaluations per interval, every view's summed: each view's evaluations from
    ``since`` (the loop's clock) over the intervals of its grid (``phase + k * interval``)
    from its first of them to its last (at most one per interval: at most the number of
    views)."""
    total = 0.0
    for view in views:
        times = [t - view.phase for t in view.evaluated if t >= since]
        if times:
            cells = math.floor(times[-1] / view.interval) - math.floor(times[0] / view.interval)
            total += len(times) / (cells + 1)
    return total


def _evaluation_waits(views: list[LiveView], handed: dict[int, int], offset: float) -> list[float]:
    """For each view and stamp the view's page showed as its newest (the one a subscriber
    times), the time (ms) from the hub handing it out to the evaluation that first took
    it (``offset``: the wall clock less the loop's)."""
    out = []
    stamps = sorted(at / 1e9 for at in handed.values())
    for view in views:
        taken = set()
        for t in view.evaluated:
            i = bisect.bisect_right(stamps, t + offset) - 1
            if i >= 0 and i not in taken:
                taken.add(i)
                out.append((t + offset - stamps[i]) * 1000)
    return out


def _from_the_hub(samples: Path, handed: dict[int, int]) -> list[float]:
    """Each subscriber's update latency from the stamp's arrival at the gateway's hub
    (ms): its receive time (``sent + latency`` of ``kg-fanout --latencies-out``) less the
    moment the hub handed that stamp out."""
    out = []
    with contextlib.suppress(FileNotFoundError), samples.open() as lines:
        for line in lines:
            _, sent, latency = (int(v) for v in line.split())
            if (at := handed.get(sent)) is not None:
                out.append((sent + latency - at) / 1e6)
    return out


def rows(args: argparse.Namespace) -> list[Row]:
    """One run per transport (GraphQL, GraphQL with permessage-deflate, gRPC) with ``args``:
    the rows of the "Live views" section."""
    runs = {}
    for name, grpc, compression in (
        ("GraphQL WebSocket", False, False),
        ("GraphQL WebSocket, permessage-deflate", False, True),
        ("gRPC WatchView", True, False),
    ):
        runs[name] = asyncio.run(
            bench(argparse.Namespace(**{**vars(args), "grpc": grpc, "compression": compression}))
        )
    n = args.subscribers
    out = []
    for name, r in runs.items():
        note = (
            f"load {r['load']:.1f}; the stamp reached the gateway's hub at p50 "
            f"{r['arrival_p50']:.0f} / p99 {r['arrival_p99']:.0f} ms, and its view's "
            f"evaluation took it at p99 {r['wait_p99']:.0f} ms after; the event loop's thread "
            f"{r['ran']:.1f} s on a core and {r['waited']:.1f} s waiting for one in "
            f"{r['window']:.1f} s"
        )
        out += [
            row(f"live views: change at the gateway to update, {n:,} {name} subscribers, p99",
                r["gateway_p99"], "ms", max_value=300,
                note=f"from the stamp at the gateway's hub; p50 {r['gateway_p50']:.0f} ms"),
            row(f"live views: change to update, {n:,} {name} subscribers, p99", r["p99"], "ms",
                note=note + "; from the write to the upstream"),
            row(f"live views: change to update, {n:,} {name} subscribers, p50", r["p50"], "ms"),
            row(f"live views: the gateway's CPU per delivered update, {name}",
                r["per_update_us"], "us"),
        ]  # fmt: skip
    first = next(iter(runs.values()))
    out += [
        row(
            f"live views: evaluations per interval, {n:,} subscribers of {args.views} views",
            first["per_interval"],
            "evaluations",
            max_value=args.views,
        ),
        row("live views: objects decoded per evaluation (pages of 50)", first["decodes"], "obj"),
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--views", type=int, default=10)
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--notify", action="store_true", help="the subscribers in notify mode")
    parser.add_argument("--grpc", action="store_true", help="the subscribers over gRPC WatchView")
    parser.add_argument(
        "--compression", action="store_true", help="WebSocket clients offer permessage-deflate"
    )
    parser.add_argument(
        "--in-process-upstream",
        action="store_true",
        help="the demo upstream and its writer in the gateway's process (its loop's CPU)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="run every transport, put the section here"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(_child(args.pods))
    elif args.out is not None:
        table = rows(args)
        print()
        print(text_table(table))
        args.out.write_text(splice(args.out.read_text(), table))
    else:
        asyncio.run(bench(args))


if __name__ == "__main__":
    main()
