"""Soak: churn and hostile clients for a long run against one gateway on a real kube-apiserver.

    .venv/bin/python -m tests.bench.soak [--minutes 30] [--writes-per-second 4] \
        [--subscribers 8] [--sample-seconds 5] [--out BENCHMARKS.md]

A bench, not a timed test: it prints what it measures and a table (``tests/bench/report.py``),
and ends non-zero only when something crashed (the apiserver or the gateway died, a bug in
the bench), never because a figure misses its goal.  ``--out`` puts its "Soak" section into
an existing ``BENCHMARKS.md``.  Needs the e2e binaries (``make e2e-bins``; ``E2E_BIN_DIR``
points elsewhere).

One etcd + kube-apiserver (``tests/e2e/apiserver.py``) and one ``kube-gateway serve`` process
(``--kubeconfig`` of the apiserver's admin, ``--clusters-dir`` an empty directory, every other
setting its default) run for ``--minutes``; beside them, in this process:

* **a writer**: leases in namespace ``team-a``, created, patched twice and deleted in turn
  over a pool of names, ``--writes-per-second`` at a steady pace, one write at a time; every
  write's type, name and resourceVersion (from the apiserver's answer; for a deletion, which
  the apiserver answers with a Status, from a list read right after it) is logged in order.
* **well-behaved subscribers**: a GraphQL WebSocket (graphql-transport-ws, as admin) and a
  gRPC ``LeaseService.Watch`` subscriber (as alice, whose RBAC allows ``team-a``) that stay
  the whole run, and ``--subscribers`` slots (WebSocket and gRPC, admin and alice in turn)
  whose subscribers connect, stay 5-20 s and leave, then the next one connects.  Each
  subscribes from the resourceVersion of the writer's last write, so it must receive exactly
  the writes logged after it; when it leaves it waits (up to 30 s) for the writes logged
  until then.  A logged write it did not receive is a lost event.
* **churn**: a CRD (a new API group each time) created, its group endpoint
  ``/apis/{group}/graphql`` queried until it serves the kind, then deleted and queried until it
  is gone; and a cluster (the apiserver again, under a new name) added to ``--clusters-dir``,
  queried at ``/clusters/{name}/graphql`` until it answers, then removed and queried until it is
  gone (404).
* **hostile clients**, each at a bounded pace, loopback only, each call bounded in time: an
  anonymous fleet call with a 3.9 MB ``clusters`` list (GraphQL) and a 3.5 MB one (gRPC
  ``ResourceService.List``); introspection multiplied through fragments and nested, anonymous
  and as alice; 1 MB of undeclared variables (HTTP and a WebSocket subscription); more
  anonymous gRPC health ``Watch`` streams than one peer may hold, held a while; slow-loris and
  idle HTTP connections; random bearer tokens.  Every answer is counted by its refusal code;
  an answer with data and no error is counted as served.
* **measures**: every ``--sample-seconds``, the gateway's RSS (``/proc/PID/status``, the main
  process), its CPU time with its list workers' (``/proc/PID/stat``) and its ``/metrics``
  (scraped as admin: the event-loop lag histogram, upstream requests, upstream watches,
  subscriptions); a small GraphQL query every 0.5 s, its latency.  Warm-up is the first 20 %
  of the run: RSS is judged on the highest and the last sample after it against the last
  sample of the warm-up (goal: within 10 %); stalls on the lag histogram's samples over
  100 ms after it (goal: none).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
from grpc_health.v1 import health_pb2, health_pb2_grpc
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from gateway.grpc.gen.kubegateway.v1 import (
    common_pb2,
    leases_pb2,
    leases_pb2_grpc,
    resource_pb2,
    resource_pb2_grpc,
)
from tests.bench import heaptrace
from tests.bench.bench_fleet import cpu_ms, lag_buckets, rss_mb
from tests.bench.report import Row, row, splice, text_table
from tests.e2e.apiserver import KubeAPIServer, running_apiserver
from tests.gateway.test_admission_routes import AMPLIFIED, NESTED
from tests.support.serve_process import Served, serve_process

NAMESPACE = "team-a"  # alice may read and watch its leases (tests/e2e/manifests)
#: Lease names the writer cycles through (each: created, patched twice, deleted).
POOL = 12
#: How long a leaving subscriber waits for the writes logged before it left.
CATCH_UP_S = 30.0
#: Any one call of the bench (a churn step's query, a hostile request).
CALL_S = 30.0
#: Churn subscribers stay this long (seconds), at most a quarter of the run.
STAY_S = (5.0, 20.0)
#: Between two churn cycles (seconds), at most a quarter of the run.
CRD_EVERY_S = 30.0
CLUSTER_EVERY_S = 45.0
#: How long a churn step may take to show (a CRD served, a cluster served or gone).
CHURN_STEP_S = 120.0
#: The small query timed throughout, and how often.
PROBE = '{ leases(namespace: "team-a", limit: 1) { items { metadata { name } } } }'
PROBE_EVERY_S = 0.5
SPROCKETS = {"query": '{ sprockets(namespace: "team-a") { items { metadata { name } } } }'}
WARM_UP = 0.2
STALL_S = 0.1

WATCH_WS = """subscription($ns: String, $rv: String) {
  watchLeases(namespace: $ns, resourceVersion: $rv) {
    type object { metadata { name resourceVersion } }
  }
}"""
GRPC_TYPES = {
    common_pb2.WatchEvent.ADDED: "ADDED",
    common_pb2.WatchEvent.MODIFIED: "MODIFIED",
    common_pb2.WatchEvent.DELETED: "DELETED",
    common_pb2.WatchEvent.BOOKMARK: "BOOKMARK",
    common_pb2.WatchEvent.RESYNC: "RESYNC",
}

FLEET_QUERY = (
    "query($clusters: [String!]) { fleet(clusters: $clusters) { cluster "
    'leases(namespace: "team-a") { items { metadata { name } } } } }'
)


#: The hostile clients by the short name ``--without`` takes (``hostile`` leaves out all).
HOSTILE_KINDS = (
    "fleet-graphql",
    "fleet-grpc",
    "introspection",
    "undeclared-http",
    "undeclared-ws",
    "random-token",
    "health",
    "connections",
)
PARTS = ("hostile", "crds", "clusters", *HOSTILE_KINDS)


def log(message: str) -> None:
    print(f"soak: {message}", flush=True)


# -- what the subscribers check (pure; tests/contract/test_bench_soak.py) ---------------------


@dataclass(frozen=True)
class Change:
    """One write of the writer, or one event a subscriber received.  The apiserver answers
    a lease's deletion with a Status, not the object: a logged deletion's ``rv`` is that of
    a list read right after it (no later than the deletion's, and before the next write)."""

    type: str
    name: str
    rv: int

    def key(self) -> tuple[str, str, int]:
        """What a received event must equal: a deletion by its type and name only."""
        return (self.type, self.name, 0 if self.type == "DELETED" else self.rv)


def lost_and_unexpected(expected: Sequence[Change], received: Sequence[Change]) -> tuple[int, int]:
    """How many ``expected`` changes are not among ``received`` (lost), and how many received
    changes up to the last expected resourceVersion are not expected (unexpected: duplicates,
    strangers).  Bookmarks and resyncs are not changes; received ones past the last expected
    are ignored."""
    if not expected:
        return 0, 0
    last = expected[-1].rv
    wanted = Counter(c.key() for c in expected)
    got = Counter(
        c.key() for c in received if c.rv <= last and c.type not in ("BOOKMARK", "RESYNC")
    )
    lost = sum((wanted - got).values())
    unexpected = sum((got - wanted).values())
    return lost, unexpected


def stall_samples(before: Mapping[float, int], after: Mapping[float, int], over: float) -> int:
    """Lag samples over ``over`` seconds between two readings of the cumulative histogram
    (``over`` must be one of its bounds)."""
    total = after.get(math.inf, 0) - before.get(math.inf, 0)
    below = after.get(over, 0) - before.get(over, 0)
    return total - below


def longest_bucket(before: Mapping[float, int], after: Mapping[float, int]) -> float:
    """The upper bound (s) of the highest lag bucket that gained a sample (0 if none)."""
    highest, below = 0.0, 0
    for bound in sorted(after):
        grew = after[bound] - before.get(bound, 0)
        if grew > below:
            highest = bound
        below = grew
    return highest


def metric_sum(text: str, name: str, *must: str) -> float:
    """The sum of every sample of ``name`` (labels containing each of ``must``)."""
    total = 0.0
    for line in text.splitlines():
        head = line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " ")
        if head and all(m in line for m in must):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- the run's figures -------------------------------------------------------------------------


@dataclass
class Sample:
    t: float
    rss: float
    cpu_ms: float
    lag: dict[float, int]
    upstream_requests: float
    upstream_watches: float
    subscriptions: float


@dataclass
class Figures:
    started: float = 0.0
    warm_until: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    probes: list[tuple[float, float]] = field(default_factory=list)
    probe_failures: Counter[str] = field(default_factory=Counter)
    sessions: Counter[str] = field(default_factory=Counter)
    events_checked: int = 0
    lost: int = 0
    unexpected: int = 0
    resyncs: int = 0
    ended_early: Counter[str] = field(default_factory=Counter)
    hostile: Counter[tuple[str, str]] = field(default_factory=Counter)
    hostile_s: dict[str, list[float]] = field(default_factory=dict)
    closed_s: list[float] = field(default_factory=list)
    crds: list[tuple[float, float]] = field(default_factory=list)
    clusters: list[tuple[float, float]] = field(default_factory=list)
    churn_failures: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    writes: int = 0

    def hostile_outcome(self, kind: str, outcome: str, seconds: float) -> None:
        self.hostile[(kind, outcome)] += 1
        self.hostile_s.setdefault(kind, []).append(seconds)


class Writer:
    """Leases created, patched and deleted in turn, one write at a time (see the module)."""

    def __init__(self, api: httpx.AsyncClient, figures: Figures) -> None:
        self.api = api
        self.figures = figures
        self.log: list[Change] = []
        self.wrote = asyncio.Condition()
        self._state: dict[str, int] = {}

    async def write(self, n: int) -> None:
        name = f"lease-{n % POOL:02d}"
        base = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
        step = self._state.get(name)
        if step is None:
            r = await self.api.post(
                base, json={"metadata": {"name": name}, "spec": {"holderIdentity": f"h{n}"}}
            )
            kind, self._state[name] = "ADDED", 0
        elif step < 2:
            r = await self.api.patch(
                f"{base}/{name}",
                content=orjson.dumps({"spec": {"holderIdentity": f"h{n}"}}),
                headers={"content-type": "application/merge-patch+json"},
            )
            kind, self._state[name] = "MODIFIED", step + 1
        else:
            (await self.api.delete(f"{base}/{name}")).raise_for_status()
            r = await self.api.get(base, params={"limit": 1})
            kind = "DELETED"
            del self._state[name]
        r.raise_for_status()
        rv = int(r.json()["metadata"]["resourceVersion"])
        async with self.wrote:
            self.log.append(Change(kind, name, rv))
            self.wrote.notify_all()
        self.figures.writes += 1

    async def run(self, until: float, per_second: float) -> None:
        n = 0
        next_at = time.monotonic()
        while time.monotonic() < until:
            await asyncio.wait_for(self.write(n), CALL_S)
            n += 1
            next_at += 1 / per_second
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def mark(self) -> tuple[int, int]:
        """Where a new subscriber starts: the index of the next write and the resourceVersion
        to resume after (the last logged write's)."""
        async with self.wrote:
            await self.wrote.wait_for(lambda: bool(self.log))
            return len(self.log), self.log[-1].rv


# -- well-behaved subscribers ------------------------------------------------------------------


class _Received(list[Change]):
    """The changes a subscriber received; ``arrived`` is set at each."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = asyncio.Event()

    def append(self, change: Change) -> None:
        super().append(change)
        self.arrived.set()


async def _ws_events(
    url: str, token: str, rv: int, received: list[Change], opened: asyncio.Event
) -> str:
    """A graphql-transport-ws subscription from ``rv``; its events into ``received`` until it
    ends or is cancelled; why it ended."""
    ws_url = url.replace("http://", "ws://") + "/graphql"
    async with connect(ws_url, subprotocols=["graphql-transport-ws"], max_size=None) as ws:  # type: ignore[list-item]
        await ws.send(
            orjson.dumps(
                {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
            ).decode()
        )
        ack = orjson.loads(await ws.recv())
        if ack.get("type") != "connection_ack":
            return f"no ack: {ack}"[:120]
        payload = {"query": WATCH_WS, "variables": {"ns": NAMESPACE, "rv": str(rv)}}
        await ws.send(orjson.dumps({"id": "1", "type": "subscribe", "payload": payload}).decode())
        opened.set()
        async for raw in ws:
            message = orjson.loads(raw)
            kind = message.get("type")
            if kind in ("ping", "pong"):
                continue
            if kind != "next" or "errors" in message.get("payload", {}):
                return f"{kind}: {message.get('payload')}"[:160]
            event = message["payload"]["data"]["watchLeases"]
            meta = (event.get("object") or {}).get("metadata") or {}
            received.append(
                Change(event["type"], meta.get("name", ""), int(meta.get("resourceVersion") or 0))
            )
    return "closed"


async def _grpc_events(
    target: str, token: str, rv: int, received: list[Change], opened: asyncio.Event
) -> str:
    async with grpc.aio.insecure_channel(target) as channel:
        call = leases_pb2_grpc.LeaseServiceStub(channel).Watch(
            leases_pb2.WatchLeasesRequest(namespace=NAMESPACE, resource_version=str(rv)),
            metadata=(("authorization", f"Bearer {token}"),),
        )
        opened.set()
        try:
            async for event in call:
                received.append(
                    Change(
                        GRPC_TYPES.get(event.type, str(event.type)),
                        event.lease.metadata.name,
                        int(event.resource_version or 0),
                    )
                )
        except grpc.aio.AioRpcError as exc:
            return f"{exc.code().name}: {exc.details()}"[:160]
    return "ended"


async def session(
    transport: str,
    *,
    served: Served,
    token: str,
    writer: Writer,
    stay: float,
    figures: Figures,
) -> None:
    """One subscriber: subscribe from the writer's last write, stay ``stay`` s, then wait for
    the writes logged until it left and count what it lost."""
    start, rv = await writer.mark()
    received = _Received()
    arrived = received.arrived
    opened = asyncio.Event()
    events: Callable[[], Awaitable[str]]
    if transport == "ws":
        events = lambda: _ws_events(served.http, token, rv, received, opened)  # noqa: E731
    else:
        events = lambda: _grpc_events(served.grpc, token, rv, received, opened)  # noqa: E731
    task = asyncio.create_task(events())
    ended: str | None = None
    try:
        done, _ = await asyncio.wait({task}, timeout=stay)
        target = len(writer.log)
        expected = writer.log[start:target]
        if not done:
            deadline = time.monotonic() + CATCH_UP_S
            while not task.done() and lost_and_unexpected(expected, received)[0]:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                arrived.clear()
                waiter = asyncio.create_task(arrived.wait())
                await asyncio.wait(
                    {task, waiter}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
        if task.done():
            ended = task.result() if task.exception() is None else repr(task.exception())[:160]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    lost, unexpected = lost_and_unexpected(expected, received)
    figures.sessions[transport] += 1
    figures.requests += 1
    figures.events_checked += len(expected)
    figures.lost += lost
    figures.unexpected += unexpected
    figures.resyncs += sum(1 for c in received if c.type == "RESYNC")
    if ended is not None:
        figures.ended_early[f"{transport}: {ended}"] += 1
    if lost:
        log(f"{transport} subscriber from rv {rv} lost {lost} of {len(expected)} ({ended})")


async def subscribers(
    transport: str,
    *,
    served: Served,
    token: str,
    writer: Writer,
    figures: Figures,
    until: float,
    stay: tuple[float, float],
) -> None:
    """Subscribers that connect, stay and leave, one after the other, until ``until``."""
    while time.monotonic() < until:
        await session(
            transport,
            served=served,
            token=token,
            writer=writer,
            stay=random.uniform(*stay),
            figures=figures,
        )
        await asyncio.sleep(random.uniform(0.1, 1.0))


# -- churn -------------------------------------------------------------------------------------


def crd(group: str) -> dict[str, Any]:
    """A namespaced ``Sprocket`` kind (``spec.teeth``) in ``group``."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"sprockets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "sprockets", "singular": "sprocket", "kind": "Sprocket"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"teeth": {"type": "integer"}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


async def _until(check: Callable[[], Awaitable[bool]], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await check():
                return True
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.25)
    return False


def _answers(r: httpx.Response, field_name: str) -> bool:
    if r.status_code != 200:
        return False
    body = r.json()
    return not body.get("errors") and bool((body.get("data") or {}).get(field_name) is not None)


async def crd_churn(
    api: httpx.AsyncClient, gw: httpx.AsyncClient, figures: Figures, until: float, every: float
) -> None:
    """CRDs of a new group each time: created, served, deleted, gone."""
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    n = 0
    while time.monotonic() < until:
        began = time.monotonic()
        group = f"s{n}.soak.kube-gateway.dev"
        path = f"/apis/{group}/graphql"
        n += 1
        made = await api.post(crds, json=crd(group))
        made.raise_for_status()

        async def served(path: str = path) -> bool:
            figures.requests += 1
            return _answers(await gw.post(path, json=SPROCKETS), "sprockets")

        ok = await _until(served, CHURN_STEP_S)
        to_serve = time.monotonic() - began
        (await api.delete(f"{crds}/sprockets.{group}")).raise_for_status()
        deleted = time.monotonic()

        async def gone(path: str = path) -> bool:
            figures.requests += 1
            return (await gw.post(path, json=SPROCKETS)).status_code == 404

        ok = await _until(gone, CHURN_STEP_S) and ok
        if ok:
            figures.crds.append((to_serve, time.monotonic() - deleted))
        else:
            figures.churn_failures["crd"] += 1
            log(f"CRD {group}: not served then gone within {CHURN_STEP_S:.0f}s")
        await asyncio.sleep(max(0.0, began + every - time.monotonic()))


async def cluster_churn(
    kube: KubeAPIServer,
    *,
    clusters_dir: Path,
    gw: httpx.AsyncClient,
    figures: Figures,
    until: float,
    every: float,
) -> None:
    """A cluster added to --clusters-dir (the apiserver under a new name), served, removed,
    gone."""
    n = 0
    while time.monotonic() < until:
        began = time.monotonic()
        name = f"soak-{n}"
        n += 1
        path = f"/clusters/{name}/graphql"
        file = clusters_dir / name
        shutil.copy(kube.kubeconfigs["admin"], file)

        async def served(path: str = path) -> bool:
            figures.requests += 1
            return _answers(await gw.post(path, json={"query": PROBE}), "leases")

        ok = await _until(served, CHURN_STEP_S)
        to_serve = time.monotonic() - began
        file.unlink()
        removed = time.monotonic()

        async def gone(path: str = path) -> bool:
            figures.requests += 1
            return (await gw.post(path, json={"query": PROBE})).status_code == 404

        ok = await _until(gone, CHURN_STEP_S) and ok
        if ok:
            figures.clusters.append((to_serve, time.monotonic() - removed))
        else:
            figures.churn_failures["cluster"] += 1
            log(f"cluster {name}: not served then gone within {CHURN_STEP_S:.0f}s")
        await asyncio.sleep(max(0.0, began + every - time.monotonic()))


# -- hostile clients ---------------------------------------------------------------------------


def graphql_outcome(r: httpx.Response) -> str:
    """``served`` for data without errors, else the refusal: its error code or HTTP status."""
    try:
        body = r.json()
    except ValueError:
        return f"HTTP {r.status_code}"
    if not isinstance(body, dict):
        return f"HTTP {r.status_code}"
    errors = body.get("errors") or []
    if errors:
        return str((errors[0].get("extensions") or {}).get("code") or f"HTTP {r.status_code}")
    return "served" if r.status_code == 200 and body.get("data") else f"HTTP {r.status_code}"


async def _paced(
    kind: str,
    call: Callable[[], Any],
    *,
    figures: Figures,
    until: float,
    every: float,
    limit: int,
) -> None:
    """``call()`` every ``every`` s until ``until``, at most ``limit`` times; each bounded by
    ``CALL_S``; what it returns (an outcome) counted."""
    for _ in range(limit):
        if time.monotonic() >= until:
            return
        began = time.monotonic()
        try:
            outcome = await asyncio.wait_for(call(), CALL_S)
        except TimeoutError:
            outcome = "timed out"
        except (httpx.HTTPError, OSError, ConnectionClosed, InvalidStatus) as exc:
            outcome = type(exc).__name__
        figures.requests += 1
        if outcome is not None:
            figures.hostile_outcome(kind, str(outcome), time.monotonic() - began)
        await asyncio.sleep(max(0.0, began + every - time.monotonic()))


async def hostile(
    served: Served,
    kube: KubeAPIServer,
    figures: Figures,
    until: float,
    scale: float,
    *,
    without: frozenset[str] = frozenset(),
) -> None:
    """Every hostile client at once (but those named in ``without``), each at its bounded
    pace (``scale`` stretches the pauses of a short run down)."""
    anon = httpx.AsyncClient(
        base_url=served.http,
        timeout=CALL_S,
        trust_env=False,
        limits=httpx.Limits(keepalive_expiry=2.0),
    )
    names = b"[" + b",".join(b'"n%06d"' % i for i in range(390_000)) + b"]"
    fleet_body = (
        b'{"query":' + orjson.dumps(FLEET_QUERY) + b',"variables":{"clusters":' + names + b"}}"
    )
    junk = {"junk": "x" * 1_000_000, **{f"v{i}": i for i in range(1000)}}
    alice = {"Authorization": f"Bearer {kube.tokens['alice']}"}
    admin = {"Authorization": f"Bearer {kube.tokens['admin']}"}
    channel = grpc.aio.insecure_channel(served.grpc)
    resources = resource_pb2_grpc.ResourceServiceStub(channel)
    grpc_names = [f"n{i:06d}" for i in range(390_000)]
    grpc_fleet = resource_pb2.ListResourcesRequest(
        group="coordination.k8s.io",
        version="v1",
        resource="leases",
        namespace=NAMESPACE,
        clusters=grpc_names,
    )
    introspection = [(AMPLIFIED, {}), (NESTED, {}), (AMPLIFIED, alice), (NESTED, alice)]
    turn = Counter[str]()

    async def fleet_graphql() -> str:
        r = await anon.post(
            "/fleet/graphql", content=fleet_body, headers={"content-type": "application/json"}
        )
        return graphql_outcome(r)

    async def fleet_grpc() -> str:
        try:
            await resources.List(grpc_fleet, timeout=CALL_S)
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
        return "served"

    async def amplified() -> str:
        query, headers = introspection[turn["introspection"] % len(introspection)]
        turn["introspection"] += 1
        return graphql_outcome(await anon.post("/graphql", json={"query": query}, headers=headers))

    async def undeclared() -> str:
        body = {"query": "query { __typename }", "variables": junk}
        return graphql_outcome(await anon.post("/graphql", json=body, headers=admin))

    async def undeclared_ws() -> str:
        ws_url = served.http.replace("http://", "ws://") + "/graphql"
        async with connect(ws_url, subprotocols=["graphql-transport-ws"], max_size=None) as ws:  # type: ignore[list-item]
            await ws.send(orjson.dumps({"type": "connection_init", "payload": admin}).decode())
            await ws.recv()
            payload = {"query": WATCH_WS, "variables": {"ns": NAMESPACE, **junk}}
            await ws.send(
                orjson.dumps({"id": "1", "type": "subscribe", "payload": payload}).decode()
            )
            message = orjson.loads(await ws.recv())
        if message.get("type") == "error":
            errors = message.get("payload") or [{}]
            return str((errors[0].get("extensions") or {}).get("code") or "error")
        return "served" if message.get("type") == "next" else str(message.get("type"))

    async def random_token() -> str:
        headers = {"Authorization": f"Bearer {secrets.token_urlsafe(24)}"}
        return graphql_outcome(await anon.post("/graphql", json={"query": PROBE}, headers=headers))

    async def health_watches() -> None:
        """More anonymous health Watch streams than one peer may hold (16), held a while."""
        began = time.monotonic()
        async with grpc.aio.insecure_channel(served.grpc) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            calls = [stub.Watch(health_pb2.HealthCheckRequest(), timeout=120) for _ in range(24)]

            async def first(call: Any) -> str:
                try:
                    await asyncio.wait_for(call.read(), 10)
                except grpc.aio.AioRpcError as exc:
                    return exc.code().name
                except TimeoutError:
                    return "timed out"
                return "held (within the bound)"

            outcomes = await asyncio.gather(*(first(c) for c in calls))
            await asyncio.sleep(min(10.0, 10.0 * scale))
            for call in calls:
                call.cancel()
        for outcome in outcomes:
            figures.hostile_outcome("anonymous health Watch", outcome, time.monotonic() - began)

    async def connections() -> None:
        """Slow-loris and idle HTTP connections: how long until the gateway closes each."""
        host, port = served.http.removeprefix("http://").split(":")

        async def one(slow: bool) -> None:
            reader, writer = await asyncio.open_connection(host, int(port))
            began = time.monotonic()
            try:
                if slow:
                    writer.write(b"GET /graphql HTTP/1.1\r\nHost: gateway\r\nX-Slow: ")

                async def drip() -> None:
                    with contextlib.suppress(ConnectionError):
                        while slow and not writer.is_closing():
                            await writer.drain()
                            writer.write(b"a")
                            await asyncio.sleep(0.5)

                dripping = asyncio.create_task(drip())
                try:
                    async with asyncio.timeout(CALL_S):
                        with contextlib.suppress(ConnectionError):
                            while await reader.read(4096):
                                pass
                    outcome = "closed by the gateway"
                    figures.closed_s.append(time.monotonic() - began)
                except TimeoutError:
                    outcome = "still open"
                finally:
                    dripping.cancel()
            finally:
                writer.close()
            figures.hostile_outcome(
                "slow-loris connection" if slow else "idle connection",
                outcome,
                time.monotonic() - began,
            )

        await asyncio.gather(*(one(slow) for slow in [True] * 20 + [False] * 20))

    def every(seconds: float) -> float:
        return max(0.5, seconds * scale)

    try:
        clients: dict[str, tuple[str, Callable[[], Any], float]] = {
            "fleet-graphql": ("fleet clusters list, GraphQL 3.9 MB", fleet_graphql, 10),
            "fleet-grpc": ("fleet clusters list, gRPC 3.5 MB", fleet_grpc, 10),
            "introspection": ("amplified introspection", amplified, 3),
            "undeclared-http": ("undeclared variables, HTTP 1 MB", undeclared, 5),
            "undeclared-ws": ("undeclared variables, WS 1 MB", undeclared_ws, 10),
            "random-token": ("random token", random_token, 0.5),
            "health": ("anonymous health Watch", health_watches, 20),
            "connections": ("connections", connections, 30),
        }
        await asyncio.gather(
            *(
                _paced(kind, call, figures=figures, until=until, every=every(s), limit=100_000)
                for name, (kind, call, s) in clients.items()
                if name not in without
            )
        )
    finally:
        await anon.aclose()
        await channel.close()


# -- measures ----------------------------------------------------------------------------------


async def sampler(
    served: Served, gw: httpx.AsyncClient, figures: Figures, until: float, every: float
) -> None:
    pid = served.proc.pid
    report_every = max(every, (until - time.monotonic()) / 20)
    reported = -math.inf
    while True:
        if served.proc.poll() is not None:
            raise RuntimeError(f"the gateway exited:\n{''.join(served.lines[-20:])}")
        text = (await gw.get("/metrics")).text
        figures.samples.append(
            sample := Sample(
                t=time.monotonic(),
                rss=rss_mb(pid),
                cpu_ms=cpu_ms(pid),
                lag=lag_buckets(text),
                upstream_requests=metric_sum(
                    text, "kube_gateway_upstream_request_duration_seconds_count"
                ),
                upstream_watches=metric_sum(text, "kube_gateway_upstream_watches"),
                subscriptions=metric_sum(text, "kube_gateway_subscriptions"),
            )
        )
        if sample.t - reported >= report_every or sample.t >= until:
            reported = sample.t
            first = figures.samples[0]
            cpu = (sample.cpu_ms - first.cpu_ms) / 1000 / max(sample.t - first.t, 1e-9)
            log(
                f"{sample.t - figures.started:5.0f}s: RSS {sample.rss:.0f} MB, CPU {cpu:.0%} of "
                f"a core, {sample.subscriptions:.0f} subscriptions, {figures.writes} writes, "
                f"{figures.events_checked} events checked, {figures.lost} lost, "
                f"{len(figures.crds)} CRDs, {len(figures.clusters)} clusters, "
                f"{sum(figures.hostile.values())} hostile"
            )
        if time.monotonic() >= until:
            return
        await asyncio.sleep(min(every, max(0.0, until - time.monotonic())))


async def prober(gw: httpx.AsyncClient, figures: Figures, until: float) -> None:
    while time.monotonic() < until:
        began = time.perf_counter()
        try:
            r = await gw.post("/graphql", json={"query": PROBE})
            took = time.perf_counter() - began
            if _answers(r, "leases"):
                figures.probes.append((time.monotonic(), took))
            else:
                figures.probe_failures[graphql_outcome(r)] += 1
        except httpx.HTTPError as exc:
            figures.probe_failures[type(exc).__name__] += 1
        figures.requests += 1
        await asyncio.sleep(max(0.0, PROBE_EVERY_S - (time.perf_counter() - began)))


# -- the run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    minutes: float = 30.0
    writes_per_second: float = 4.0
    subscribers: int = 8
    sample_seconds: float = 5.0
    #: Parts left out (to find which one costs what): ``hostile``, ``crds``, ``clusters``
    #: or one hostile client by its name in :data:`HOSTILE_KINDS`.
    without: frozenset[str] = frozenset()


async def run(kube: KubeAPIServer, served: Served, clusters_dir: Path, plan: Plan) -> Figures:
    figures = Figures()
    seconds = plan.minutes * 60
    admin = {"Authorization": f"Bearer {kube.tokens['admin']}"}
    limits = httpx.Limits(keepalive_expiry=2.0)  # under the gateway's 5 s idle timeout
    async with (
        httpx.AsyncClient(
            base_url=kube.url, verify=kube.ssl_context(), headers=admin, timeout=CALL_S
        ) as api,
        httpx.AsyncClient(
            base_url=served.http, headers=admin, timeout=CALL_S, trust_env=False, limits=limits
        ) as gw,
        httpx.AsyncClient(
            base_url=served.http, headers=admin, timeout=CALL_S, trust_env=False, limits=limits
        ) as probe,
    ):

        async def ready() -> bool:
            return _answers(await gw.post("/graphql", json={"query": PROBE}), "leases")

        if not await _until(ready, 120):
            raise RuntimeError("the gateway did not answer a first query in 120 s")
        writer = Writer(api, figures)
        figures.started = time.monotonic()
        until = figures.started + seconds
        figures.warm_until = figures.started + WARM_UP * seconds
        admin_token, alice_token = kube.tokens["admin"], kube.tokens["alice"]
        stay = (min(STAY_S[0], seconds / 8), min(STAY_S[1], seconds / 4))
        scale = min(1.0, seconds / 600)
        tasks = [
            writer.run(until, plan.writes_per_second),
            sampler(served, gw, figures, until, min(plan.sample_seconds, seconds / 10)),
            prober(probe, figures, until),
            *(
                session(t, served=served, token=token, writer=writer, stay=seconds, figures=figures)
                for t, token in (("ws", admin_token), ("grpc", alice_token))
            ),
            *(
                subscribers(
                    "ws" if i % 2 == 0 else "grpc",
                    served=served,
                    token=admin_token if i // 2 % 2 == 0 else alice_token,
                    writer=writer,
                    figures=figures,
                    until=until,
                    stay=stay,
                )
                for i in range(plan.subscribers)
            ),
        ]  # fmt: skip
        if "crds" not in plan.without:
            tasks.append(crd_churn(api, gw, figures, until, min(CRD_EVERY_S, seconds / 4)))
        if "clusters" not in plan.without:
            tasks.append(
                cluster_churn(
                    kube,
                    clusters_dir=clusters_dir,
                    gw=gw,
                    figures=figures,
                    until=until,
                    every=min(CLUSTER_EVERY_S, seconds / 4),
                )
            )
        if "hostile" not in plan.without:
            tasks.append(hostile(served, kube, figures, until, scale, without=plan.without))
        log(
            f"running {plan.minutes:g} min: {plan.writes_per_second:g} writes/s, 2 + "
            f"{plan.subscribers} subscribers, CRD and cluster churn, hostile clients"
            + (f"; without {', '.join(sorted(plan.without))}" if plan.without else "")
        )
        await asyncio.gather(*tasks)
    return figures


def _p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else math.nan


def _window(f: Figures, start: float, end: float) -> list[Sample]:
    """The samples between two fractions of the run (the nearest one when none is)."""
    span = f.samples[-1].t - f.started
    inside = [s for s in f.samples if start * span <= s.t - f.started <= end * span]
    middle = f.started + (start + end) / 2 * span
    return inside or [min(f.samples, key=lambda s: abs(s.t - middle))]


def figure_rows(f: Figures, plan: Plan) -> list[Row]:
    """The table's rows (see the module docstring for what each is)."""
    if not f.samples:
        raise RuntimeError("no sample was taken")
    warm = [s for s in f.samples if s.t <= f.warm_until] or f.samples[:1]
    after = [s for s in f.samples if s.t > f.warm_until] or f.samples[-1:]
    base, first, last = warm[-1], f.samples[0], f.samples[-1]
    peak = max(after, key=lambda s: s.rss)
    stalls = stall_samples(base.lag, last.lag, STALL_S)
    stalls_all = stall_samples(first.lag, last.lag, STALL_S)
    longest = longest_bucket(base.lag, last.lag)
    longest_all = longest_bucket(first.lag, last.lag)
    lag_total = last.lag.get(math.inf, 0) - base.lag.get(math.inf, 0)
    elapsed = max(last.t - first.t, 1e-9)
    cpu_s = (last.cpu_ms - first.cpu_ms) / 1000
    latencies = [s for _, s in f.probes]
    after_probes = [s for t, s in f.probes if t > f.warm_until]
    hostile_total = sum(n for (_, outcome), n in f.hostile.items())
    served = sum(n for (_, outcome), n in f.hostile.items() if outcome == "served")
    by_kind: dict[str, Counter[str]] = {}
    for (kind, outcome), n in f.hostile.items():
        by_kind.setdefault(kind, Counter())[outcome] += n
    kinds = "; ".join(
        f"{kind}: " + ", ".join(f"{o} {n}" for o, n in sorted(c.items()))
        + f" (slowest {max(f.hostile_s[kind]) * 1000:.0f} ms, call "
        f"{f.hostile_s[kind].index(max(f.hostile_s[kind])) + 1} of {len(f.hostile_s[kind])}; "
        f"median {statistics.median(f.hostile_s[kind]) * 1000:.0f} ms)"
        for kind, c in sorted(by_kind.items())
    )  # fmt: skip
    run = f"{plan.minutes:g} min"

    def times(pairs: list[tuple[float, float]]) -> str:
        if not pairs:
            return "none completed"
        return (
            f"served in median {statistics.median(p[0] for p in pairs):.1f} s (worst "
            f"{max(p[0] for p in pairs):.1f}), gone in median "
            f"{statistics.median(p[1] for p in pairs):.1f} s"
        )

    return [
        row(
            f"soak: gateway RSS, highest after warm-up, {run} (direct column: at the end of "
            "warm-up)",
            peak.rss,
            "MB",
            base.rss,
            max_ratio=1.1,
            note=f"first sample {first.rss:.0f} MB, warm-up = first {WARM_UP:.0%}; "
            f"{len(f.samples)} samples",
        ),
        row(
            f"soak: gateway RSS, last sample, {run} (direct column: at the end of warm-up)",
            last.rss,
            "MB",
            base.rss,
            max_ratio=1.1,
            note=f"lowest after warm-up {min(s.rss for s in after):.0f} MB",
        ),
        row(
            f"soak: gateway RSS, median of the last 20 % of the run, {run} (direct column: "
            "median of the 20-40 % window)",
            statistics.median(s.rss for s in _window(f, 0.8, 1.0)),
            "MB",
            statistics.median(s.rss for s in _window(f, WARM_UP, 0.4)),
            max_ratio=1.1,
            note="the trend under the swings of cluster and CRD churn",
        ),
        row(
            f"soak: events lost by well-behaved subscribers, {run}",
            f.lost,
            "events",
            max_value=0,
            note=f"{f.events_checked:,} events checked over {sum(f.sessions.values())} "
            f"subscriptions ({f.sessions['ws']} WebSocket, {f.sessions['grpc']} gRPC); "
            f"{f.unexpected} unexpected, {f.resyncs} resyncs, "
            f"{sum(f.ended_early.values())} ended by the gateway",
        ),
        row(
            f"soak: event-loop lag samples over {STALL_S * 1000:.0f} ms after warm-up, {run}",
            stalls,
            "samples",
            max_value=0,
            note=f"of {lag_total:,} samples (every 50 ms); whole run {stalls_all}",
        ),
        row(
            f"soak: longest event-loop stall after warm-up, {run} (upper bound of its bucket)",
            longest * 1000,
            "ms",
            max_value=STALL_S * 1000,
            note=f"whole run {longest_all * 1000:g} ms",
        ),
        row(
            f"soak: small GraphQL query during the soak, p50, {run}",
            _p(latencies, 0.5) * 1000,
            "ms",
            note=f"{len(latencies):,} queries, {sum(f.probe_failures.values())} failed",
        ),
        row(
            f"soak: small GraphQL query during the soak, p99, {run}",
            _p(latencies, 0.99) * 1000,
            "ms",
            note=f"after warm-up {_p(after_probes, 0.99) * 1000:.1f} ms; worst "
            f"{max(latencies, default=math.nan) * 1000:.0f} ms",
        ),
        row(
            f"soak: gateway CPU per request, {run}",
            cpu_s * 1000 / max(f.requests, 1),
            "ms",
            note=f"{cpu_s:.0f} CPU s (list workers included) over {f.requests:,} requests and "
            f"subscriptions of the bench; {cpu_s / elapsed:.0%} of a core",
        ),
        row(
            f"soak: upstream requests per minute, {run}",
            (last.upstream_requests - first.upstream_requests) / (elapsed / 60),
            "",
            note=f"the gateway's count; {f.writes:,} writes by the bench; upstream watches "
            f"at the end {last.upstream_watches:.0f} (highest "
            f"{max(s.upstream_watches for s in f.samples):.0f}), subscriptions "
            f"{last.subscriptions:.0f}",
        ),
        row(
            f"soak: CRDs created, served and deleted, {run}",
            len(f.crds),
            "",
            note=f"{times(f.crds)}; {f.churn_failures['crd']} not in time",
        ),
        row(
            f"soak: clusters added to --clusters-dir, served and removed, {run}",
            len(f.clusters),
            "",
            note=f"{times(f.clusters)}; {f.churn_failures['cluster']} not in time",
        ),
        row(
            f"soak: hostile requests and connections refused, {run}",
            hostile_total - served,
            "",
            note=kinds,
        ),
        row(
            f"soak: hostile requests served, {run}",
            served,
            "requests",
            max_value=0,
            note="answers with data and no error",
        ),
        row(
            f"soak: slow-loris and idle connections, time until the gateway closed them, "
            f"worst, {run}",
            max(f.closed_s, default=math.nan),
            "s",
            note=f"{len(f.closed_s)} closed; median {_p(f.closed_s, 0.5):.1f} s",
        ),
    ]


@contextlib.contextmanager
def gateway(
    kube: KubeAPIServer, clusters_dir: Path, *more: str, env: Mapping[str, str] | None = None
) -> Iterator[Served]:
    with (
        tempfile.TemporaryDirectory(prefix="kg-soak-") as home,
        serve_process(
            Path(home),
            "--kubeconfig",
            kube.kubeconfigs["admin"],
            "--clusters-dir",
            str(clusters_dir),
            "--log-format",
            "json",
            "--drain-seconds",
            "1",
            *more,
            ready=False,
            env=env,
        ) as served,
    ):
        # A traced heap (--heap-trace) slows the start several times over.
        served.wait_ready(timeout=600 if env and "KG_HEAP_TRACE" in env else 60)
        served.wait_serving()
        yield served


def rows(
    plan: Plan = Plan(), *gateway_args: str, env: Mapping[str, str] | None = None
) -> list[Row]:
    """Run the soak (printing as it goes) and return the rows of the benchmark table;
    ``env``: more environment for the gateway process."""
    with running_apiserver() as kube, tempfile.TemporaryDirectory(prefix="kg-soak-dir-") as d:
        log(f"kube-apiserver ready in {kube.startup_seconds}s")
        with gateway(kube, Path(d), *gateway_args, env=env) as served:
            figures = asyncio.run(run(kube, served, Path(d), plan))
            if served.proc.poll() is not None:
                raise RuntimeError("the gateway exited during the soak")
    if figures.ended_early:
        log(f"subscriptions the gateway ended: {dict(figures.ended_early)}")
    if figures.probe_failures:
        log(f"small queries that failed: {dict(figures.probe_failures)}")
    return figure_rows(figures, plan)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--writes-per-second", type=float, default=4.0)
    parser.add_argument("--subscribers", type=int, default=8, help="connect-and-leave slots")
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument(
        "--without",
        default="",
        help="comma-separated parts left out: hostile (all hostile clients), crds, clusters, "
        f"or one hostile client: {', '.join(HOSTILE_KINDS)} (default: none)",
    )
    parser.add_argument(
        "--only-hostile",
        default="",
        help="comma-separated hostile clients to run, the others left out (names as --without)",
    )
    parser.add_argument(
        "--heap-trace",
        type=Path,
        default=None,
        help="the gateway writes RSS, glibc heap and tracemalloc figures into this file as it "
        "runs (tests/bench/heaptrace; slows it down)",
    )
    parser.add_argument(
        "--heap-trace-frames",
        type=int,
        default=8,
        help="tracemalloc's frames for --heap-trace (0: no tracemalloc, glibc's figures only)",
    )
    parser.add_argument(
        "--gateway-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the gateway process (repeatable)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="put the section into this BENCHMARKS.md"
    )
    parser.add_argument(
        "gateway_args", nargs="*", help="more `kube-gateway serve` flags (after --)"
    )
    args = parser.parse_args(argv)
    without = frozenset(p.strip() for p in args.without.split(",") if p.strip())
    only = frozenset(p.strip() for p in args.only_hostile.split(",") if p.strip())
    unknown = (without - set(PARTS)) | (only - set(HOSTILE_KINDS))
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}")
    if only:
        without |= set(HOSTILE_KINDS) - only
    env = dict(e.split("=", 1) for e in args.gateway_env)
    if args.heap_trace is not None:
        env |= heaptrace.env(
            args.heap_trace,
            frames=args.heap_trace_frames,
            every=10 if args.heap_trace_frames == 0 else 20,
            base=30,
        )
    plan = Plan(
        args.minutes, args.writes_per_second, args.subscribers, args.sample_seconds, without
    )
    try:
        table = rows(plan, *args.gateway_args, env=env)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
    print()
    print(text_table(table))
    if args.out is not None:
        args.out.write_text(splice(args.out.read_text(), table))
        print(f"\nits section written into {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
