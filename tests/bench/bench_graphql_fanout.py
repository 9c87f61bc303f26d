"""Benchmark: one shared GraphQL subscription fanned out to N WebSocket subscribers, against
N direct upstream watch consumers of the same events (same run, ratios).

    .venv/bin/python -m tests.bench.bench_graphql_fanout [--subscribers 200] [--events 400]
                                                         [--paced 100] [--rate 20]

Not a timed test: it prints absolute numbers and the ratios.  Socket level on both sides:
this process runs the demo upstream and the gateway (uvicorn, in process); a second process
(spawned) runs the clients, so their decoding does not share the gateway's interpreter.

* **gateway**: N ``graphql-transport-ws`` connections, each subscribing to the same
  ``watchLeases`` document with the same variables and token: one shared feed, one upstream
  watch, one execution and one serialised payload per event;
* **direct**: N HTTP watch streams straight to the demo upstream (what the N clients would
  open without the gateway), each event decoded from its JSON line.

Each run writes ``--paced`` events at ``--rate`` per second (delivery latency without
queueing: p50/p99 from the store write to each client's receipt), then ``--events`` events
as one burst (throughput: messages delivered per second, first write to last receipt).  Every
phase has a deadline; a client that misses events is reported, not waited for.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import multiprocessing.connection
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.bench.report import Row, row
from tests.support.graphql import serve_app

TOKEN = "admin-token"
NAMESPACE = "bench"
LEASE = "fanout"
SELECTOR = "bench=fanout"
QUERY = """subscription($ns: String, $labels: String) {
  watchLeases(namespace: $ns, labelSelector: $labels, sendInitialEvents: false) {
    type resourceVersion object { metadata { name resourceVersion labels } }
  }
}"""
MARK = b'"seq":"'


def _seq(message: bytes) -> str | None:
    """The ``seq`` label of an event (without decoding the whole message)."""
    at = message.find(MARK)
    if at < 0:
        return None
    start = at + len(MARK)
    return message[start : message.index(b'"', start)].decode()


# -- the client process -----------------------------------------------------------------------


@dataclass
class _Clients:
    """N subscribers' receipt times, by phase and sequence number."""

    n: int
    live: set[int]
    received: dict[str, list[dict[int, float]]]
    expected: dict[str, int]
    done: asyncio.Event
    incomplete: int = 0

    def __post_init__(self) -> None:
        self.incomplete = sum(
            1 for p, count in self.expected.items() if count for _ in range(self.n)
        )
        if not self.incomplete:
            self.done.set()

    def record(self, index: int, seq: str | None) -> None:
        if seq is None:
            return
        now = time.monotonic()
        phase, _, number = seq.partition("-")
        if phase == "warm":
            self.live.add(index)
            return
        mine = self.received[phase][index]
        mine[int(number)] = now
        if len(mine) == self.expected[phase]:
            self.incomplete -= 1
            if not self.incomplete:
                self.done.set()


async def _gateway_subscriber(url: str, index: int, clients: _Clients) -> None:
    from websockets.asyncio.client import connect

    async with connect(
        url,
        subprotocols=["graphql-transport-ws"],
        max_size=None,
        compression=None,  # type: ignore[list-item]
    ) as ws:
        await ws.send(
            orjson.dumps(
                {"type": "connection_init", "payload": {"Authorization": f"Bearer {TOKEN}"}}
            ).decode()
        )
        ack = orjson.loads(await ws.recv())
        assert ack["type"] == "connection_ack", ack
        await ws.send(
            orjson.dumps(
                {
                    "id": "1",
                    "type": "subscribe",
                    "payload": {"query": QUERY, "variables": {"ns": NAMESPACE, "labels": SELECTOR}},
                }
            ).decode()
        )
        async for message in ws:
            data = message.encode() if isinstance(message, str) else message
            orjson.loads(data)  # what a subscriber does with each message
            clients.record(index, _seq(data))


async def _direct_watcher(
    http: httpx.AsyncClient, path: str, rv: str, index: int, clients: _Clients
) -> None:
    params = {
        "watch": "1",
        "labelSelector": SELECTOR,
        "resourceVersion": rv,
        "timeoutSeconds": "600",
    }
    async with http.stream(
        "GET", path, params=params, headers={"Authorization": f"Bearer {TOKEN}"}
    ) as response:
        assert response.status_code == 200
        buffer = b""
        async for chunk in response.aiter_bytes():
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line:
                    orjson.loads(line)  # what a consumer of the upstream does with each event
                    clients.record(index, _seq(line))


async def _clients(conn: multiprocessing.connection.Connection, cfg: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    n = cfg["subscribers"]
    clients = _Clients(
        n=n,
        live=set(),
        received={p: [{} for _ in range(n)] for p in cfg["expected"]},
        expected=cfg["expected"],
        done=asyncio.Event(),
    )
    tasks: list[asyncio.Task[None]] = []
    limits = httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8)
    async with httpx.AsyncClient(base_url=cfg["upstream"], limits=limits, timeout=None) as http:
        for i in range(n):
            if cfg["mode"] == "gateway":
                coro = _gateway_subscriber(cfg["ws_url"], i, clients)
            else:
                coro = _direct_watcher(http, cfg["path"], cfg["rv"], i, clients)
            tasks.append(asyncio.create_task(coro))
            if i % 20 == 19:
                await asyncio.sleep(0)  # let connections complete in batches
        # tell the writer how many are live until it may start
        deadline = loop.time() + 60
        while len(clients.live) < n and loop.time() < deadline:
            conn.send(("live", len(clients.live)))
            await asyncio.sleep(0.1)
        conn.send(("ready", len(clients.live)))
        await loop.run_in_executor(None, conn.recv)  # the writer is done writing
        try:
            async with asyncio.timeout(cfg["deadline"]):
                await clients.done.wait()
        except TimeoutError:
            pass
        failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    conn.send(
        (
            "result",
            {p: [sorted(r.items()) for r in clients.received[p]] for p in clients.received},
            [repr(t.exception()) for t in failed[:3]],
        )
    )


def _client_process(conn: multiprocessing.connection.Connection, cfg: dict[str, Any]) -> None:
    asyncio.run(_clients(conn, cfg))


# -- the writer (this process) ----------------------------------------------------------------


async def _recv(conn: multiprocessing.connection.Connection) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, conn.recv)


async def _run(
    mode: str,
    demo: DemoUpstream,
    *,
    cfg: dict[str, Any],
    paced: int,
    rate: float,
    burst: int,
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    cfg = {**cfg, "mode": mode, "expected": {"paced": paced, "burst": burst}}
    process = ctx.Process(target=_client_process, args=(child, cfg), daemon=True)
    gc.collect()
    rss_before = _rss()
    process.start()
    store = demo.store
    warm = 0

    async def write(seq: str) -> float:
        at = time.monotonic()
        await store.patch(
            "leases", LEASE, {"metadata": {"labels": {"seq": seq}}}, namespace=NAMESPACE
        )
        return at

    try:
        # warm up until every client has seen an event (so every subscription is live)
        while True:
            kind, live = await _recv(parent)
            if kind == "ready":
                break
            warm += 1
            await write(f"warm-{warm}")
        if live < cfg["subscribers"]:
            raise RuntimeError(f"only {live} of {cfg['subscribers']} clients became live")
        await asyncio.sleep(0.5)  # let the last warm-up events drain
        gc.collect()
        rss_live = _rss()
        written: dict[str, list[float]] = {"paced": [], "burst": []}
        interval = 1.0 / rate
        start = time.monotonic()
        for i in range(paced):
            await asyncio.sleep(max(0.0, start + i * interval - time.monotonic()))
            written["paced"].append(await write(f"paced-{i}"))
        await asyncio.sleep(1.0)
        cpu = time.process_time()
        for i in range(burst):
            written["burst"].append(await write(f"burst-{i}"))
        parent.send("written")
        kind, received, failures = await _recv(parent)
        cpu = time.process_time() - cpu
        assert kind == "result"
    finally:
        process.join(30)
        if process.is_alive():
            process.kill()
    return {
        "written": written,
        "received": received,
        "failures": failures,
        # This process (the demo upstream and, through the gateway, the gateway too): its
        # CPU over the burst, and what the live subscriptions hold in memory.
        "cpu_seconds": cpu,
        "rss_per_subscriber": (rss_live - rss_before) / cfg["subscribers"],
    }


def _rss() -> int:
    """This process's resident set size in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _summary(result: dict[str, Any], subscribers: int) -> dict[str, float]:
    written, received = result["written"], result["received"]
    out: dict[str, float] = {}
    latencies = [
        (at - written["paced"][seq]) * 1000 for per_sub in received["paced"] for seq, at in per_sub
    ]
    expected = subscribers * len(written["paced"])
    out["paced_delivered"] = len(latencies) / expected if expected else 1.0
    if latencies:
        q = statistics.quantiles(latencies, n=100)
        out["p50"], out["p99"] = statistics.median(latencies), q[98]
    burst_times = [at for per_sub in received["burst"] for _, at in per_sub]
    if burst_times:
        out["cpu_us_per_msg"] = result["cpu_seconds"] / len(burst_times) * 1e6
    out["rss_kb_per_subscriber"] = result["rss_per_subscriber"] / 1024
    expected = subscribers * len(written["burst"])
    out["burst_delivered"] = len(burst_times) / expected if expected else 1.0
    if burst_times:
        elapsed = max(burst_times) - written["burst"][0]
        out["msgs_per_s"] = len(burst_times) / elapsed
        out["burst_seconds"] = elapsed
    return out


async def bench(
    subscribers: int, burst: int, paced: int, rate: float, deadline: float
) -> dict[str, dict[str, float]]:
    """Prints the figures and returns them by mode (``direct``, ``gateway``)."""
    async with DemoUpstream(seed=False) as demo:
        await demo.store.ensure_namespace(NAMESPACE)
        await demo.store.create(
            "leases",
            {
                "metadata": {"name": LEASE, "labels": {"bench": "fanout", "seq": "none"}},
                "spec": {"holderIdentity": "bench", "leaseDurationSeconds": 15},
            },
            namespace=NAMESPACE,
        )
        settings = Settings(
            host="127.0.0.1", http_port=0, grpc_port=0, server=demo.url, log_level="warning"
        )
        async with serve_app(settings) as (url, _app):
            path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
            async with httpx.AsyncClient(base_url=demo.url) as http:
                listed = await http.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
                rv = listed.json()["metadata"]["resourceVersion"]
            cfg = {
                "subscribers": subscribers,
                "ws_url": url.replace("http://", "ws://") + "/graphql",
                "upstream": demo.url,
                "path": path,
                "rv": rv,
                "deadline": deadline,
            }
            summaries = {}
            for mode in ("direct", "gateway"):
                if mode == "direct":
                    # direct watches start at a fresh resume point
                    async with httpx.AsyncClient(base_url=demo.url) as http:
                        listed = await http.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
                        cfg["rv"] = listed.json()["metadata"]["resourceVersion"]
                result = await _run(mode, demo, cfg=cfg, paced=paced, rate=rate, burst=burst)
                summaries[mode] = _summary(result, subscribers)
                if result["failures"]:
                    print(f"  {mode}: client failures: {result['failures']}")
    d, g = summaries["direct"], summaries["gateway"]
    print(
        f"fan-out: {subscribers} subscribers; {paced} events at {rate:g}/s (latency), "
        f"then a burst of {burst} (throughput)"
    )
    print(f"{'':34}{'msgs/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'delivered':>11}")
    for label, s in (
        ("direct upstream watches (N)", d),
        ("GraphQL shared subscription (WS)", g),
    ):
        print(
            f"  {label:32}{s.get('msgs_per_s', 0):10.0f}{s.get('p50', float('nan')):10.1f}"
            f"{s.get('p99', float('nan')):10.1f}"
            f"{min(s['paced_delivered'], s['burst_delivered']) * 100:10.1f}%"
        )
    print(
        f"  this process's CPU per delivered message (burst): direct "
        f"{d.get('cpu_us_per_msg', float('nan')):.1f} us, gateway "
        f"{g.get('cpu_us_per_msg', float('nan')):.1f} us; memory per live idle subscriber "
        f"(gateway, its WebSocket included): {g['rss_kb_per_subscriber']:.1f} KiB"
    )
    if d.get("msgs_per_s") and g.get("msgs_per_s"):
        print(
            f"  ratio gateway/direct: throughput {g['msgs_per_s'] / d['msgs_per_s']:.2f}, "
            f"p50 latency {g['p50'] / d['p50']:.2f}, p99 latency {g['p99'] / d['p99']:.2f}"
        )
    return summaries


def rows(
    subscribers: int = 200, burst: int = 400, paced: int = 100, rate: float = 20.0
) -> list[Row]:
    """Measure (printing the details) and return the rows of the benchmark table."""
    s = asyncio.run(bench(subscribers, burst, paced, rate, 120.0))
    d, g = s["direct"], s["gateway"]
    out = []
    if "msgs_per_s" in g:
        out.append(
            row(
                f"GraphQL shared subscription, {subscribers} WS subscribers, burst",
                g["msgs_per_s"],
                "msg/s",
                d.get("msgs_per_s"),
                note=f"delivered {min(g['paced_delivered'], g['burst_delivered']) * 100:.1f}%",
            )
        )
    if "cpu_us_per_msg" in g:
        out.append(
            row(
                f"GraphQL shared subscription, {subscribers} WS subscribers, CPU per message",
                g["cpu_us_per_msg"],
                "us",
                d.get("cpu_us_per_msg"),
                note="this process: demo upstream + gateway (direct: demo upstream only)",
            )
        )
    out.append(
        row(
            "GraphQL subscription, memory per live idle subscriber (WebSocket included)",
            g["rss_kb_per_subscriber"],
            "KiB",
            None,
        )
    )
    if "p99" in g:
        out.append(
            row(
                f"GraphQL shared subscription, {subscribers} WS subscribers, {rate:g}/s, p99",
                g["p99"],
                "ms",
                d.get("p99"),
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--events", type=int, default=400, help="burst events (throughput)")
    parser.add_argument("--paced", type=int, default=100, help="paced events (latency)")
    parser.add_argument("--rate", type=float, default=20.0, help="paced events per second")
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds per phase")
    args = parser.parse_args()
    asyncio.run(bench(args.subscribers, args.events, args.paced, args.rate, args.deadline))


if __name__ == "__main__":
    main()
