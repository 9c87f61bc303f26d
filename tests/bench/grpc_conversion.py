"""Benchmark: upstream JSON -> gRPC messages, against decoding the same JSON (same run, ratios).

    .venv/bin/python -m tests.bench.grpc_conversion [--pods 5000] [--rounds 5] \\
        [--list-workers 2] [--end-to-end-rounds 3] [--out BENCHMARKS.md]

Not a timed test (machines differ; the 2-core CI box is noisy): it prints absolute numbers and
the ratios the gRPC issue cares about:

* conversion of a decoded list of realistic pods (with managedFields, probes, volumes) into the
  PodList wire bytes the server sends, vs ``orjson`` decoding the same JSON;
* the same with ``json_format.ParseDict`` (+ serialisation), the naive way;
* the same with ``google.protobuf.Struct`` built through the Python API for the free-form JSON
  (what the codec avoids by writing Struct wire bytes itself);
* end to end over loopback: a gRPC ``List`` through the gateway vs a direct upstream call
  (``KubeAdapter.list``: HTTP + decode) against a demo upstream holding the same pods, the
  list written in the gateway's process, by one list worker, and by two at once (each its
  half of the items: the gateway's default with two CPUs), in turns.

Each conversion figure is the least CPU time of ``--rounds`` runs (measured in turns with the
decode it is compared to); end-to-end figures are wall times, with the CPU of this process
(upstream, gateway and client) and of the list workers (``/proc``) beside them.  Decoding
pauses the cyclic GC as the adapter does for large bodies; the codec pauses it itself for
large lists.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import orjson
from google.protobuf import json_format

from gateway.core.fleet.cluster import Cluster
from gateway.core.lists.large import LargeLists, decode_now
from gateway.core.lists.pool import ListWorkers
from gateway.core.model.registry import POD
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from gateway.core.watch.hub import WatchHub
from gateway.core.watch.watcher import WatchEvent
from gateway.grpc.codec import codec
from gateway.grpc.gen.kubegateway.v1 import pods_pb2, pods_pb2_grpc
from gateway.grpc.messages import message_class
from kube_gateway_demo import DemoUpstream
from tests.bench.realistic import pod, pod_list
from tests.bench.report import Row, row, write_rows
from tests.support.grpc import start_one

ADMIN = "admin-token"
#: The first table's rows this bench writes (what ``--out`` replaces), by their start.
OWNS = ("gRPC List ", "codec dicts ", "one watch event to a gRPC message")


def best(fn: Callable[[], Any], rounds: int) -> tuple[float, Any]:
    """Least CPU time of ``rounds`` calls (ms) and the last result.

    CPU time of this process, not wall time: on a shared 2-core machine other processes
    make wall times swing by 2x, which would drown the ratios.
    """
    return interleaved({"only": fn}, rounds)["only"]


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, tuple[float, Any]]:
    """:func:`best` of several functions, run in turns so they see the same machine."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    results: dict[str, Any] = {}
    for _ in range(rounds):
        for name, fn in fns.items():
            gc.collect()
            start = time.process_time()
            results[name] = fn()
            times[name].append(time.process_time() - start)
    return {name: (min(times[name]) * 1000, results[name]) for name in fns}


async def abest(fn: Callable[[], Any], rounds: int) -> tuple[float, float]:
    """Best and median wall time (ms) of ``rounds`` awaited calls."""
    times = []
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1000, statistics.median(times) * 1000


def _parse_dict(decoded: dict[str, Any]) -> bytes:
    # json_format refuses JSON numbers in string fields: fix int-or-string ports first
    for item in decoded["items"]:
        for c in item["spec"].get("containers", ()):
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                for action in ("httpGet", "tcpSocket"):
                    port = (c.get(probe) or {}).get(action, {}).get("port")
                    if isinstance(port, int):
                        c[probe][action]["port"] = str(port)
    message = json_format.ParseDict(decoded, message_class("PodList")(), ignore_unknown_fields=True)
    return bytes(message.SerializeToString())


def _struct_api(decoded: dict[str, Any]) -> bytes:
    conversions = codec()
    pod_cls, entry_cls = message_class("Pod"), message_class("ManagedFieldsEntry")
    out = []
    for item in decoded["items"]:
        meta = dict(item["metadata"])
        entries = [entry_cls(**e) for e in meta.pop("managedFields", ())]  # Struct via Python
        fixed = conversions.object_bytes("Pod", {**item, "metadata": meta})
        message = pod_cls.FromString(fixed)
        message.metadata.managedFields.extend(entries)
        out.append(message.SerializeToString())
    return b"".join(out)


def conversion(pods: int, rounds: int) -> dict[str, float]:
    """Prints the conversion figures and returns them (ms; ``event_us`` in µs)."""
    conversions = codec()
    raw = orjson.dumps(pod_list(pods))
    print(f"{pods} realistic pods: {len(raw) / 1e6:.1f} MB of JSON")
    decoded = decode_now(raw)
    pair = interleaved(
        {
            "decode": lambda: decode_now(raw),
            "convert": lambda: conversions.list_bytes("Pod", decoded),
        },
        rounds,
    )
    (t_decode, _), (t_convert, wire) = pair["decode"], pair["convert"]
    t_parse_dict, _ = best(lambda: _parse_dict(decode_now(raw)), max(1, rounds // 2))
    t_parse_dict -= t_decode
    t_struct, _ = best(lambda: _struct_api(decoded), 1)
    lean = orjson.dumps(
        {
            **decoded,
            "items": [
                {**i, "metadata": {**i["metadata"], "managedFields": []}} for i in decoded["items"]
            ],
        }
    )
    lean_decoded = decode_now(lean)
    lean_pair = interleaved(
        {
            "decode": lambda: decode_now(lean),
            "convert": lambda: conversions.list_bytes("Pod", lean_decoded),
        },
        rounds,
    )
    t_lean_decode, t_lean_convert = lean_pair["decode"][0], lean_pair["convert"][0]
    event = {"apiVersion": "v1", "kind": "Pod", **pod(1)}
    one = WatchEvent("MODIFIED", event, "1")
    t_event, _ = best(
        lambda: [conversions.watch_event_bytes("Pod", one) for _ in range(1000)], rounds
    )
    t_event_decode, _ = best(
        lambda: [orjson.loads(orjson.dumps(event)) for _ in range(1000)], rounds
    )

    print(f"  orjson decode                        {t_decode:8.1f} ms   1.00")
    print(
        f"  codec: dicts -> PodList wire bytes   {t_convert:8.1f} ms   {t_convert / t_decode:4.2f}"
        f"   ({len(wire) / 1e6:.1f} MB protobuf)"
    )
    print(
        f"  json_format.ParseDict + serialize    {t_parse_dict:8.1f} ms   "
        f"{t_parse_dict / t_decode:4.2f}"
    )
    print(
        f"  Struct through the Python API        {t_struct:8.1f} ms   {t_struct / t_decode:4.2f}"
        "   (what the wire-level Struct avoids)"
    )
    print(
        f"  without managedFields: decode {t_lean_decode:.1f} ms, convert {t_lean_convert:.1f} ms"
        f"   {t_lean_convert / t_lean_decode:4.2f}"
    )
    print(
        f"  one watch event: {t_event:.1f} us to convert "
        f"(dumps+loads of its JSON: {t_event_decode:.1f} us)"
    )
    print(f"  Struct cache: {conversions.structs.hits} hits, {conversions.structs.misses} misses")
    return {
        "decode": t_decode,
        "convert": t_convert,
        "event_us": t_event,
        "event_decode_us": t_event_decode,
    }


def _manifest(i: int) -> dict[str, Any]:
    """A realistic pod as a client would create it (the server sets uid, versions, fields)."""
    body = pod(i, "bench")
    meta = body["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    return body


def _cpu_of(pids: list[int]) -> float:
    """CPU seconds the processes ``pids`` have used (``/proc/PID/stat``: utime + stime)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


#: The ways a gRPC List is written, measured in turns: list workers (0: in the gateway's
#: process) and the runs of the items it is split into (one per worker, at most).
VARIANTS = {"in-process": (0, 1), "one worker": (1, 1), "two workers": (2, 2)}


async def end_to_end(pods: int, rounds: int, workers: int = 2) -> dict[str, dict[str, float]]:
    """Prints the end-to-end figures and returns them per variant (wall ms, best and
    median; CPU ms of this process and of the list workers, least of the rounds).

    This process is the demo upstream, the gateway and the client at once: its CPU counts
    all three (the direct call's row is the upstream's and a client's decode); the list
    workers' CPU is read from ``/proc``.  ``workers``: the list workers started (the
    variants that need more are left out)."""
    async with DemoUpstream(seed=False) as demo:
        await demo.store.bulk_create(POD, (_manifest(i) for i in range(pods)), namespace="bench")
        http = build_http_client(UpstreamConfig(server=demo.url, source="bench"))
        pool = ListWorkers(workers) if workers else None
        lists = LargeLists(pool)
        adapter = KubeAdapter(http, large_lists=lists)
        pids = await pool.ready() if pool is not None else []
        conversions = codec()
        server, port = await start_one(Cluster(adapter, WatchHub(adapter)))
        limit = 256 * 1024 * 1024
        channel = grpc.aio.insecure_channel(
            f"127.0.0.1:{port}",
            options=[("grpc.max_receive_message_length", limit)],
            compression=grpc.Compression.NoCompression,
        )
        plain = grpc.aio.insecure_channel(
            f"127.0.0.1:{port}",
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.compression_enabled_algorithms_bitset", 1),
            ],
        )
        try:
            me = Credential(ADMIN)

            async def direct() -> None:
                await adapter.list(POD, namespace="bench", credential=me)

            async def via(ch: grpc.aio.Channel) -> None:
                reply = await pods_pb2_grpc.PodServiceStub(ch).List(
                    pods_pb2.ListPodsRequest(namespace="bench"),
                    metadata=(("authorization", f"Bearer {ADMIN}"),),
                )
                assert len(reply.items) == pods

            variants = {
                name: (count, parts)
                for name, (count, parts) in VARIANTS.items()
                if count <= workers
            }
            calls: dict[str, Callable[[], Any]] = {"direct": direct}
            calls.update({name: lambda: via(plain) for name in variants})
            walls: dict[str, list[float]] = {name: [] for name in calls}
            cpus: dict[str, list[float]] = {name: [] for name in calls}
            spent: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(rounds):  # in turns: each round sees the same machine
                for name, call in calls.items():
                    count, parts = variants.get(name, (0, 1))
                    lists.workers = pool if count else None
                    conversions.list_parts = parts
                    gc.collect()
                    cpu, theirs = time.process_time(), _cpu_of(pids)
                    start = time.perf_counter()
                    await call()
                    walls[name].append(time.perf_counter() - start)
                    cpus[name].append(time.process_time() - cpu)
                    spent[name].append(_cpu_of(pids) - theirs)
            default = "two workers" if "two workers" in variants else next(iter(variants))
            count, parts = variants[default]
            lists.workers = pool if count else None
            conversions.list_parts = parts
            g_best, g_med = await abest(lambda: via(channel), rounds)
            loads = " ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"end to end, {pods} pods over loopback, load average {loads}:")
            print(
                "  (wall best / median ms, ratio of bests; CPU ms, least: this process / workers)"
            )
            found: dict[str, dict[str, float]] = {}
            d_best = min(walls["direct"]) * 1000
            for name in calls:
                best_ms = min(walls[name]) * 1000
                found[name] = {
                    "best": best_ms,
                    "median": statistics.median(walls[name]) * 1000,
                    "cpu": min(cpus[name]) * 1000,
                    "workers_cpu": min(spent[name]) * 1000,
                }
                f = found[name]
                label = "direct upstream call (HTTP + decode)" if name == "direct" else name
                print(
                    f"  {label:38s} {f['best']:7.1f} / {f['median']:7.1f}   "
                    f"{best_ms / d_best:4.2f}   CPU {f['cpu']:6.1f} / {f['workers_cpu']:6.1f}"
                )
            print(f"  gRPC List, gzip negotiated ({default}) {g_best:7.1f} / {g_med:7.1f}")
            found["default"] = {**found[default], "gzip": g_best}
            return found
        finally:
            await channel.close()
            await plain.close()
            await server.stop(None)
            await http.aclose()
            if pool is not None:
                await pool.aclose()


def rows(
    pods: int = 5000, rounds: int = 7, workers: int = 2, e2e_rounds: int | None = None
) -> list[Row]:
    """Measure (printing the details) and return the rows of the benchmark table."""
    c = conversion(pods, rounds)
    e = asyncio.run(end_to_end(pods, e2e_rounds or max(3, rounds // 2), workers))
    others = ", ".join(
        f"{name} {e[name]['best'] / e['direct']['best']:.2f}x"
        for name in VARIANTS
        if name in e and e[name]["best"] != e["default"]["best"]
    )
    return [
        row(
            f"gRPC List {pods:,} pods, client parse included, best",
            e["default"]["best"],
            "ms",
            e["direct"]["best"],
            max_ratio=1.5,
            note=(
                f"median {e['default']['median'] / e['direct']['median']:.2f}x; "
                f"gzip {e['default']['gzip'] / e['direct']['best']:.2f}x; {others}; "
                f"load {os.getloadavg()[0]:.1f}"
            ),
        ),
        row(
            f"codec dicts → PodList bytes vs orjson decode, {pods:,} pods, CPU",
            c["convert"],
            "ms",
            c["decode"],
            max_ratio=1.3,
        ),
        row(
            "one watch event to a gRPC message, CPU",
            c["event_us"],
            "µs",
            max_value=40,
            note=f"orjson dumps+loads of its JSON {c['event_decode_us']:.0f} µs",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-end-to-end", action="store_true")
    parser.add_argument(
        "--list-workers", type=int, default=2, help="list workers the gateway has (0: none)"
    )
    parser.add_argument(
        "--end-to-end-rounds", type=int, default=None, help="default: half --rounds, at least 3"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="put the rows into this BENCHMARKS.md"
    )
    args = parser.parse_args()
    e2e_rounds = args.end_to_end_rounds or max(3, args.rounds // 2)
    if args.out is not None:
        write_rows(args.out, rows(args.pods, args.rounds, args.list_workers, e2e_rounds), OWNS)
        return
    conversion(args.pods, args.rounds)
    if not args.no_end_to_end:
        asyncio.run(end_to_end(args.pods, e2e_rounds, args.list_workers))


if __name__ == "__main__":
    main()
