"""Benchmark: the floor of a gRPC unary call on this machine, layer by layer (issue 30).

    .venv/bin/python -m tests.bench.bench_grpc_floor [--calls 4000] [--rounds 3] \
        [--variants bare admission upstream gateway ...]

One etcd + kube-apiserver with the 20 pods of ``bench_rps``, and one server process per
variant, each serving ``kubegateway.v1.PodService/Get`` on a loopback port under uvloop;
``ghz`` (``tests/go-client/.bin``) calls each in turn, ``--calls`` calls at 32 concurrent
per round, the variants interleaved round by round.  Each figure is the server process's
CPU (``utime + stime`` of ``/proc/PID/stat``, every thread) per call, the machine's load
average beside it.  Variants:

* ``bare``: a grpc.aio server (the gateway's channel options) whose handler answers the
  bytes of the pod as the gateway would (fixed, encoded once);
* ``admission``: the same behind the gateway's :class:`~gateway.grpc.admission.Admission`
  (request id, its initial metadata, the access line, written as the gateway writes it);
* ``upstream``: the same, the handler making the upstream GET through the core's adapter
  (:meth:`~gateway.core.upstream.adapter.KubeAdapter.get` on the gateway's client, the
  caller's token) and writing the answer with the gateway's codec: what the gateway does
  but its router, servicer, operation metrics and deadline;
* ``gateway``: ``kube-gateway serve`` itself;
* ``go``: a Go gRPC server answering the same bytes (``tests/go-client/cmd/kg-floor``, built
  into a temporary directory by this bench with the machine's Go and the go-client
  module's pinned grpc-go): the floor of the client and the loopback transport without
  grpc.aio (``:meta`` sends the ``x-request-id`` initial metadata first).

Every server but ``gateway`` also serves what the gateway registers beside its routed
services (health, reflection; their methods registered with grpc core as the generated
code does).  A variant takes suffixes:

* ``:generic``: those served as generic handlers instead (nothing registered with grpc
  core);
* ``:nochannelz``: grpc core's channelz off;
* ``:meta``: the ``bare`` handler sends initial metadata of its own first (a batch of its
  own, as the admission's ``x-request-id``);
* ``:icept``: an interceptor that only passes the call on, before the handler;
* ``:nolog``: logs at ``warning`` (no access lines); ``:plainlog``: each line written at
  once (a plain ``StreamHandler``);
* ``:NAME=VALUE``: a grpc channel argument of the server
  (``admission:grpc.http2.bdp_probe=0``; digits are an integer);
* ``:late``: ``GRPC_EXPERIMENTS`` set to ``FLOOR_LATE_EXPERIMENTS`` after grpc is imported
  (before its server is made);
* ``+NAME=VALUE``: an environment variable of its process
  (``admission+GRPC_EXPERIMENTS=tcp_rcv_lowat``); ``+FLOOR_SRC=DIR``: the ``gateway``
  package imported from ``DIR`` (``git -C /work/main archive HEAD gateway | tar -x -C
  DIR``: an A/B of the same variant against another tree's source).

``--single N``: after each round's run at 32, ``N`` calls one at a time, their p50 (``ghz``'s
latency, client side: what a caller waits) beside the CPU figure.

``--profile DIR``: py-spy on each server during the last round (as ``bench_rps
--profile``; ``--profile-native`` too; its CPU figures then include py-spy's cost).
Not a timed test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.bench.bench_rps import (
    CONCURRENCY,
    NAME,
    NAMESPACE,
    REPO,
    Load,
    _profiled,
    cpu_ms,
    create_pods,
    gateway,
    load_clients,
    protoset,
)
from tests.e2e.apiserver import running_apiserver
from tests.support.serve_process import free_port

SERVICE = "kubegateway.v1.PodService"
METHOD = f"/{SERVICE}/Get"
BASES = ("bare", "admission", "upstream", "gateway", "go")
FLAGS = {"generic", "nochannelz", "meta", "icept", "nolog", "plainlog", "late"}


def log(message: str) -> None:
    print(f"bench_grpc_floor: {message}", flush=True)


# -- the server side (a process of its own per variant) ----------------------------------


async def _serve(
    base: str, port: int, data: bytes, upstream: str, ca: str, *, flags: set[str]
) -> None:
    import grpc
    from grpc_health.v1 import health, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection

    from gateway import logs
    from gateway.core import Drain
    from gateway.grpc.admission import Admission, AnonymousStreams
    from gateway.grpc.gen.kubegateway.v1 import pods_pb2
    from gateway.grpc.server import GrpcOptions

    if "late" in flags:  # GRPC_EXPERIMENTS set after grpc is imported, before its server
        os.environ["GRPC_EXPERIMENTS"] = os.environ.get("FLOOR_LATE_EXPERIMENTS", "")
    logs.configure("warning" if "nolog" in flags else "info", "json")
    if "plainlog" in flags:  # the access lines through a plain StreamHandler, line by line
        import logging

        root = logging.getLogger()
        root.handlers[0].flush()
        plain = logging.StreamHandler(sys.stderr)
        plain.setFormatter(root.handlers[0].formatter)
        root.handlers[:] = [plain]
    opts = GrpcOptions()
    services = {SERVICE, "grpc.health.v1.Health", reflection.SERVICE_NAME}
    interceptors: tuple[Any, ...] = ()
    if "icept" in flags:

        class Passing(grpc.aio.ServerInterceptor):  # type: ignore[misc]
            async def intercept_service(self, continuation: Any, details: Any) -> Any:
                return await continuation(details)

        interceptors = (Passing(),)
    if base != "bare":
        streams = AnonymousStreams(opts.anonymous_streams_per_peer, opts.anonymous_streams_total)
        interceptors = (Admission(services, streams, Drain()),)
    generic = "generic" in flags
    options: list[tuple[str, Any]] = [*opts.channel_options()]
    if "nochannelz" in flags:
        options.append(("grpc.enable_channelz", 0))
    for flag in flags:  # NAME=VALUE: a channel argument of the server
        if "=" in flag:
            name, value = flag.split("=", 1)
            options.append((name, int(value) if value.lstrip("-").isdigit() else value))
    server = grpc.aio.server(
        options=options,
        maximum_concurrent_rpcs=opts.max_concurrent_rpcs,
        interceptors=interceptors,
    )

    if base == "upstream":
        from gateway.core.model.registry import POD
        from gateway.core.upstream.adapter import KubeAdapter
        from gateway.core.upstream.client import build_http_client
        from gateway.core.upstream.config import UpstreamConfig
        from gateway.grpc.calls import credential_of
        from gateway.grpc.codec import codec

        conversions = codec()
        adapter = KubeAdapter(
            build_http_client(UpstreamConfig(server=upstream, source="bench", ca_file=Path(ca)))
        )

        async def get(request: Any, context: grpc.aio.ServicerContext) -> bytes:
            caller = credential_of(context.invocation_metadata())
            obj = await adapter.get(POD, NAME, namespace=NAMESPACE, credential=caller)
            context.disable_next_message_compression()
            return conversions.object_bytes("Pod", obj)

    elif "meta" in flags:

        async def get(request: Any, context: grpc.aio.ServicerContext) -> bytes:
            await context.send_initial_metadata((("x-request-id", "0123456789abcdef"),))
            context.disable_next_message_compression()
            return data

    else:

        async def get(request: Any, context: grpc.aio.ServicerContext) -> bytes:
            context.disable_next_message_compression()  # as the gateway: a small answer
            return data

    handler = grpc.unary_unary_rpc_method_handler(
        get, request_deserializer=pods_pb2.GetPodRequest.FromString
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {"Get": handler}),)
    )

    class Generic:
        """What the gateway's ``Services`` is given by the generated code, registered or not."""

        def add_generic_rpc_handlers(self, handlers: Any) -> None:
            server.add_generic_rpc_handlers(handlers)

        def add_registered_method_handlers(self, name: str, handlers: Any) -> None:
            if generic:
                server.add_generic_rpc_handlers(
                    (grpc.method_handlers_generic_handler(name, handlers),)
                )
            else:
                server.add_registered_method_handlers(name, handlers)

    target = Generic()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), target)
    from grpc_reflection.v1alpha import reflection_pb2_grpc

    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.aio.ReflectionServicer(sorted(services)), target
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("serving", flush=True)
    await server.wait_for_termination()


# -- the driver ------------------------------------------------------------------------------


@dataclass
class Variant:
    """One server: its base, its flags, its environment."""

    spec: str
    base: str
    flags: set[str] = field(default_factory=set)
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str) -> Variant:
        head, *assignments = spec.split("+")
        base, *flags = head.split(":")
        if base not in BASES or not {f for f in flags if "=" not in f} <= FLAGS:
            raise SystemExit(f"unknown variant {spec!r}: a base of {BASES}, :{FLAGS}, +NAME=VALUE")
        env = dict(a.split("=", 1) for a in assignments)
        return cls(spec, base, set(flags), env)


@contextlib.contextmanager
def _server(variant: Variant, answer: Path, kube: Any, home: Path) -> Iterator[tuple[int, str]]:
    """The variant's server process: its pid and ``host:port``."""
    if variant.base == "gateway":
        src = variant.env.get("FLOOR_SRC")
        with gateway(kube, src=Path(src) if src else None, env=variant.env) as gw:
            yield gw.proc.pid, gw.grpc
        return
    port = free_port()
    if variant.base == "go":
        argv = [str(_go_floor(home)), "-listen", f"127.0.0.1:{port}", "-answer", str(answer)]
        argv += ["-meta"] if "meta" in variant.flags else []
    else:
        argv = [sys.executable, "-m", "tests.bench.bench_grpc_floor", "serve", variant.base]
        src = variant.env.get("FLOOR_SRC")
        if src:  # the gateway's package from another tree (an A/B against main's source)
            run = "import runpy, sys; sys.path.insert(0, {!r}); "
            run += "runpy.run_module('tests.bench.bench_grpc_floor', run_name='__main__')"
            argv = [sys.executable, "-c", run.format(src), "serve", variant.base]
        argv += [str(port), str(answer), kube.url, kube.ca_file, ",".join(sorted(variant.flags))]
    env = {**os.environ, "HOME": str(home), **variant.env}
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "serving":
            raise RuntimeError(f"the {variant.spec} server did not start")
        yield proc.pid, f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(20)


def _go_floor(home: Path) -> Path:
    """``kg-floor`` built into ``home`` (once) from ``tests/go-client``'s module, offline from
    the module cache ``tests/go-client/build.sh`` filled (the same pinned grpc-go)."""
    out = home / "kg-floor"
    if not out.exists():
        go = shutil.which("go") or "/usr/local/go/bin/go"
        env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
        env["GOFLAGS"] = "-mod=readonly -trimpath -buildvcs=false"
        subprocess.run(
            [go, "build", "-o", str(out), "./cmd/kg-floor"],
            cwd=REPO / "tests/go-client",
            env=env,
            check=True,
        )
    return out


def _answer(kube: Any, path: Path) -> None:
    """The pod's bytes as the gateway answers a ``Get`` (the codec of this checkout)."""
    from gateway.grpc.codec import codec

    with httpx.Client(base_url=kube.url, verify=kube.ssl_context(), timeout=30) as api:
        r = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{NAME}", headers=kube.headers("admin"))
        r.raise_for_status()
    path.write_bytes(codec().object_bytes("Pod", r.json()))


def bench(
    variants: list[Variant],
    calls: int,
    rounds: int,
    *,
    profile: Path | None = None,
    native: bool = False,
    single: int = 0,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """CPU per call (µs) of each variant per round, and its p50 at 1 (ms) per round."""
    hey_bin, ghz_bin = load_clients()
    out: dict[str, list[float]] = {v.spec: [] for v in variants}
    p50s: dict[str, list[float]] = {v.spec: [] for v in variants}
    with (
        running_apiserver() as kube,
        tempfile.TemporaryDirectory(prefix="kg-floor-") as d,
        contextlib.ExitStack() as stack,
    ):
        create_pods(kube)
        load = Load(hey_bin, ghz_bin, protoset(Path(d) / "pods.protoset"), kube.tokens["admin"])
        answer = Path(d) / "pod.bin"
        _answer(kube, answer)
        servers: dict[str, tuple[int, str]] = {}
        request = {"namespace": NAMESPACE, "name": NAME}
        for v in variants:
            try:
                servers[v.spec] = stack.enter_context(_server(v, answer, kube, Path(d)))
                # warm: connections, caches
                load.ghz(servers[v.spec][1], f"{SERVICE}.Get", request, max(200, calls // 10), 32)
            except (RuntimeError, OSError) as exc:  # an experiment grpc core refuses, say
                log(f"{v.spec}: left out: {exc}")
                servers.pop(v.spec, None)
                out.pop(v.spec)
        for r in range(rounds):
            for v in variants if r % 2 == 0 else reversed(variants):
                if v.spec not in servers:
                    continue
                pid, target = servers[v.spec]
                before = cpu_ms(pid)
                try:
                    # py-spy in the last round only (it costs the server CPU of its own)
                    with _profiled(v.spec, pid, profile if r == rounds - 1 else None, native):
                        run = load.ghz(target, f"{SERVICE}.Get", request, calls, CONCURRENCY)
                except RuntimeError as exc:
                    log(f"round {r + 1} {v.spec}: failed: {exc}")
                    continue
                us = (cpu_ms(pid) - before) * 1000 / calls
                out[v.spec].append(us)
                at_one = ""
                if single:
                    one = load.ghz(target, f"{SERVICE}.Get", request, single, 1)
                    p50s[v.spec].append(one.p50_ms)
                    at_one = f", p50 at 1 {one.p50_ms:.3f} ms"
                log(
                    f"round {r + 1} {v.spec}: {us:.0f} us of CPU per call, {run.rps:,.0f} calls/s "
                    f"at {CONCURRENCY}{at_one}; load average {os.getloadavg()[0]:.1f}"
                )
    return out, p50s


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["serve"]:
        base, port, answer, upstream, ca, flags = args[1:7]
        import uvloop

        data = Path(answer).read_bytes()
        uvloop.run(_serve(base, int(port), data, upstream, ca, flags=set(flags.split(","))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=["bare", "admission", "upstream"])
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR")
    parser.add_argument("--profile-native", action="store_true")
    parser.add_argument("--single", type=int, default=0, metavar="N")
    parsed = parser.parse_args(args)
    variants = [Variant.parse(s) for s in parsed.variants]
    figures, p50s = bench(
        variants,
        parsed.calls,
        parsed.rounds,
        profile=parsed.profile,
        native=parsed.profile_native,
        single=parsed.single,
    )
    print(f"\nus of server CPU per call ({parsed.calls} calls at {CONCURRENCY}, per round)")
    for spec, values in figures.items():
        each = " / ".join(f"{v:.0f}" for v in values)
        median = f"median {statistics.median(values):.0f}" if values else "no figure"
        print(f"{spec:50s} {each}   {median}")
    if parsed.single:
        print(f"\nms p50 at 1 ({parsed.single} calls one at a time, per round)")
        for spec, values in p50s.items():
            each = " / ".join(f"{v:.3f}" for v in values)
            median = f"median {statistics.median(values):.3f}" if values else "no figure"
            print(f"{spec:50s} {each}   {median}")


if __name__ == "__main__":
    main()
