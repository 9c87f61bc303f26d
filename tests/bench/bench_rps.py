"""Benchmark: the cost of one small request through the gateway, against the same request
made straight to a real kube-apiserver in the same run (issue 30).

    .venv/bin/python -m tests.bench.bench_rps [--requests 3000] [--single 400] [--rounds 5] \
        [--out BENCHMARKS.md] [--gateway-arg=--some-flag ...] [--gateway-src CHECKOUT] \
        [--rows gRPC ...] [--profile DIR [--profile-native]] [--gateway-env NAME=VALUE ...]

One etcd + kube-apiserver (``tests/e2e/apiserver.py``) holding 20 pods in ``team-a``, and two
``kube-gateway serve`` processes on it (admin kubeconfig, loopback ports, default settings):
one serving any document, one with ``--trusted-documents`` (a manifest of the get's
document).  The load comes from Go clients the project builds (``bash
tests/go-client/build.sh load``: ``hey`` for HTTP at 32 concurrent, ``vegeta`` for HTTP one
at a time, ``ghz`` for gRPC, pinned there, in ``tests/go-client/.bin``), in processes of
their own, so they are not this process's loop.
Rows, each with the bearer token of the apiserver's admin:

* **direct**: a GET of one pod at the apiserver (HTTPS, HTTP/1.1, keep-alive);
* **direct list of 10**: a GET of ``pods?limit=10`` at the apiserver, the baseline
  of the two list rows (a list of 10 costs the apiserver about twice a get);
* **GraphQL get**: ``POST /graphql`` ``pod(namespace, name)`` selecting 15 fields;
* **GraphQL list of 10**: ``pods(namespace, limit: 10)``, the same 15 fields of each;
* **gRPC Get** / **gRPC List of 10**: ``ghz`` calls of ``PodService/Get`` and
  ``PodService/List`` (``limit: 10``), over one HTTP/2 connection (the descriptors from
  ``protos/``, compiled by grpcio-tools' protoc; the timed runs' with each answer an empty
  message, so that ghz skips the answer's bytes as vegeta does the direct rows' JSON
  instead of decoding it into dynamic messages inside the latency it reports, each row's
  answer decoded once first: :func:`opaque_protoset`);
* **trusted-document get**: the GraphQL get named by ``documentId`` on the gateway serving
  the manifest.

Every row is measured in ``--rounds`` rounds (5), after a warm-up, the rows in turns
within each round: first each row's share of ``--requests`` (3,000 in all, 600 a round) at
32 concurrent, then ``--single`` (400) of each one at a time; so the direct and the gateway
runs alternate, and a slow minute of the shared machine falls on the rounds of both.  Each
figure is the median of its rounds':

* requests/s at 32 concurrent (hey's or ghz's figure of the run);
* CPU per request: each gateway's and the apiserver's CPU time (``utime + stime`` of
  ``/proc/PID/stat``, every thread) read around each round's 32-concurrent run and divided by
  its requests (the note gives the rounds' least and greatest), and the gateway's upstream
  requests (its ``/metrics``, ``kube_gateway_upstream_request_duration_seconds_count``)
  counted around it;
* p50 and p99 at 1 concurrent, computed from every request's own latency at the client's
  full precision (``tests/bench/latency.py``): vegeta's results for HTTP (ns; hey prints
  its times, its ``-o csv`` too, in steps of 0.1 ms), ghz's per-call ``details`` for gRPC
  (ns), the same way for the direct rows and the gateway's; each run's first request (its
  connection's setup) is dropped.  The latency a gateway row adds, the figure its goal of
  +0.5 ms is judged on to the microsecond, is the median of the rounds' differences (its
  p50 less the same round's direct p50), not the difference of the two medians: the row's
  note says so and gives the differences' spread.

Around the one-at-a-time runs, the gateway's own p50 (its access lines' ``duration_ms``),
the p50 of each call's upstream time (the lines' ``upstream_ms``) and of its own share (the
one less the other), and the upstream's mean latency (the histogram's sum over its count: a
mean, which the slow tail of a loaded machine pulls far above the p50) are in the p50 row's
note: they tell a slow p50 the gateway added from one the apiserver or the machine's load
did.  Every answer must be a success: a run with an error or a non-200 status fails the
bench.  Ratios are to the direct row of the same run (the list rows' to the direct list's):
requests/s and p50 to the direct figures, the gateway's CPU per request to the apiserver's
CPU per direct request.  Not a timed test: the machine is shared; the CPU per request is the
figure that survives the noise best.  ``--profile`` records each row's 32-concurrent runs
(every round's) with py-spy.

``--gateway-src`` runs the gateways from another checkout of the code (a worktree of main,
say), with this process's interpreter and packages: the "before" of an A/B.
``--gateway-env`` adds a variable to the gateways' environment (``GRPC_EXPERIMENTS=...``:
grpc core's experiments, measured on the gateway itself).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc_tools
import httpx
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

from tests.bench import latency
from tests.bench.latency import Rounds, Timed
from tests.bench.report import Row, row, splice, text_table
from tests.e2e.apiserver import KubeAPIServer, running_apiserver
from tests.support.serve_process import Served, serve_process

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / "tests" / "go-client" / ".bin"
NAMESPACE = "team-a"
PODS = 20
NAME = "pod-00"
CONCURRENCY = 32
FIELDS = """metadata { name namespace uid resourceVersion creationTimestamp labels }
    spec { nodeName serviceAccountName containers { name image } }
    status { phase podIP hostIP startTime qosClass }"""
GET = f"""query Get($ns: String!, $name: String!) {{
  pod(namespace: $ns, name: $name) {{
    {FIELDS}
  }}
}}"""
LIST = f"""query List($ns: String!) {{
  pods(namespace: $ns, limit: 10) {{ items {{
    {FIELDS}
  }} }}
}}"""
UPSTREAM = "kube_gateway_upstream_request_duration_seconds_count"
#: The direct row of the list rows: the same list of 10 asked of the apiserver.
DIRECT_LIST = "direct list of 10"
UPSTREAM_SUM = "kube_gateway_upstream_request_duration_seconds_sum"
#: Issue 30's goals: gateway CPU per small request, and the latency added at 1 concurrent.
CPU_GOAL_MS = 0.5
ADDED_GOAL_MS = 0.5


def log(message: str) -> None:
    print(f"bench_rps: {message}", flush=True)


# -- the processes ---------------------------------------------------------------------------


def load_clients() -> tuple[Path, Path]:
    """``hey`` and ``ghz``, built (or reused) by ``tests/go-client/build.sh load``."""
    subprocess.run(["bash", str(REPO / "tests/go-client/build.sh"), "load"], check=True)
    return BIN / "hey", BIN / "ghz"


def protoset(path: Path) -> Path:
    """``PodService``'s descriptors with their imports, for ghz (the gateway's reflection
    resolves services, and ghz asks for the method's symbol)."""
    include = Path(grpc_tools.__file__).parent / "_proto"
    argv = ["-I", str(REPO / "protos"), "-I", str(include), "--include_imports"]
    argv += [f"--descriptor_set_out={path}", "kubegateway/v1/pods.proto"]
    if protoc.main(["protoc", *argv]) != 0:
        raise RuntimeError("protoc could not write the descriptor set")
    return path


def opaque_protoset(real: Path, path: Path) -> Path:
    """``real``'s descriptors with every ``PodService`` method's answer an empty message, for
    the runs that are timed: ghz then skips the answer's fields instead of decoding them into
    dynamic messages, which it times as the call's (a List of 10 with its ``managedFields``
    as ``Struct``s is ~1.5 ms of ghz's decode at load 8-10, against a Go server answering the
    same bytes), as vegeta reads the direct rows' JSON without parsing it.  Each gRPC row
    is called once with ``real`` first (:meth:`Load.decodes`): its answer decodes."""
    files = descriptor_pb2.FileDescriptorSet.FromString(real.read_bytes())
    for file in files.file:
        for service in file.service:
            if service.name == "PodService":
                file.message_type.add(name="BenchOpaqueAnswer")
                for method in service.method:
                    method.output_type = f".{file.package}.BenchOpaqueAnswer"
    path.write_bytes(files.SerializeToString())
    return path


def cpu_ms(pid: int) -> float:
    """User + system CPU time of process ``pid`` (every thread), in ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def apiserver_pid(kube: KubeAPIServer) -> int:
    """The pid of the kube-apiserver serving ``kube`` (found by its ``--secure-port``)."""
    port = kube.url.rsplit(":", 1)[1]
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"kube-apiserver")
            and f"--secure-port={port}".encode() in argv
        ):
            return int(cmdline.parent.name)
    raise RuntimeError(f"no kube-apiserver process with --secure-port={port}")


def create_pods(kube: KubeAPIServer) -> None:
    with httpx.Client(base_url=kube.url, verify=kube.ssl_context(), timeout=30) as api:
        for i in range(PODS):
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{i:02d}", "labels": {"app": "bench", "n": str(i)}},
                "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
            }
            r = api.post(
                f"/api/v1/namespaces/{NAMESPACE}/pods", json=body, headers=kube.headers("admin")
            )
            assert r.status_code in (201, 409), r.text


@contextlib.contextmanager
def gateway(
    kube: KubeAPIServer,
    *more: str,
    src: Path | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Served]:
    added = {**({"PYTHONPATH": str(src)} if src is not None else {}), **(env or {})}
    with (
        tempfile.TemporaryDirectory(prefix="kg-rps-") as home,
        serve_process(
            Path(home),
            "--kubeconfig",
            kube.kubeconfigs["admin"],
            *more,
            cwd=src,
            env=added or None,
        ) as served,
    ):
        served.wait_serving()
        yield served


def metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- one load run ----------------------------------------------------------------------------


@dataclass
class Run:
    """One run of a Go load client: requests made, requests/s, p50 (ms)."""

    requests: int
    rps: float
    p50_ms: float


@dataclass(frozen=True)
class Load:
    """The Go load clients and the bearer token they send."""

    hey_bin: Path
    ghz_bin: Path
    #: The descriptors the timed gRPC runs use (:func:`opaque_protoset`).
    protoset: Path
    token: str
    #: The real descriptors (:meth:`decodes`).
    decoded: Path | None = None
    #: The HTTP client one request at a time (each request's latency in ns; hey's are in
    #: steps of 0.1 ms), built by ``build.sh load`` beside hey and ghz.
    vegeta_bin: Path = BIN / "vegeta"

    def hey(self, url: str, body: bytes | None, n: int, c: int) -> Run:
        """``hey`` GET (``body`` None) or POST of ``body``; every answer must be a 200.  hey
        sends ``n // c`` requests from each of its ``c`` workers: ``n`` is rounded down."""
        n = n // c * c
        argv = [str(self.hey_bin), "-n", str(n), "-c", str(c)]
        argv += ["-H", f"Authorization: Bearer {self.token}"]
        if body is not None:
            argv += ["-m", "POST", "-T", "application/json", "-d", body.decode()]
        done = subprocess.run([*argv, url], check=False, capture_output=True, text=True)
        if done.returncode != 0:  # the message, not the command (it holds the token)
            raise RuntimeError(f"hey {url} failed ({done.returncode}): {done.stderr[-2000:]}")
        out = done.stdout
        codes = dict(re.findall(r"\[(\d+)\]\s+(\d+) responses", out))
        if "Error distribution" in out or codes != {"200": str(n)}:
            raise RuntimeError(f"hey: not every answer was a 200:\n{out}")
        rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
        p50 = re.search(r"50%+ in ([\d.]+) secs", out)
        assert rps is not None and p50 is not None, out
        return Run(n, float(rps.group(1)), float(p50.group(1)) * 1000)

    def one_http(self, url: str, body: bytes | None, n: int) -> Timed:
        """``n`` requests one at a time with vegeta (GET, or POST of ``body``), each one's
        latency to the ns (:func:`tests.bench.latency.vegeta`)."""
        headers = {"Authorization": f"Bearer {self.token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return latency.vegeta(self.vegeta_bin, url, n, body=body, headers=headers)

    def decodes(self, target: str, call: str, data: dict[str, object]) -> None:
        """One call of ``call`` with the real descriptors: it ends OK and its answer decodes."""
        assert self.decoded is not None
        self._ghz(target, call, data, 1, 1, protoset=self.decoded)

    def _ghz(
        self,
        target: str,
        call: str,
        data: dict[str, object],
        n: int,
        c: int,
        *,
        protoset: Path | None = None,
    ) -> dict:
        """``ghz``'s JSON report of ``n`` unary calls of ``call``; every call must end OK."""
        argv = [str(self.ghz_bin), "--insecure", "--protoset", str(protoset or self.protoset)]
        argv += ["--call", call, "-d", json.dumps(data)]
        argv += ["-m", json.dumps({"authorization": f"Bearer {self.token}"})]
        argv += ["-n", str(n), "-c", str(c), "-O", "json", target]
        done = subprocess.run(argv, check=False, capture_output=True, text=True)
        if done.returncode != 0:  # the message, not the command (it holds the token)
            raise RuntimeError(f"ghz {call} failed ({done.returncode}): {done.stderr[-2000:]}")
        out: dict = json.loads(done.stdout)
        if out.get("statusCodeDistribution") != {"OK": n} or out.get("errorDistribution"):
            raise RuntimeError(
                f"ghz: not every call ended OK: {out.get('statusCodeDistribution')} "
                f"{out.get('errorDistribution')}"
            )
        return out

    def ghz(self, target: str, call: str, data: dict[str, object], n: int, c: int) -> Run:
        """``ghz`` unary calls of ``call``; every call must end OK."""
        out = self._ghz(target, call, data, n, c)
        p50 = next(d["latency"] for d in out["latencyDistribution"] if d["percentage"] == 50)
        return Run(n, float(out["rps"]), p50 / 1e6)

    def one_grpc(self, target: str, call: str, data: dict[str, object], n: int) -> Timed:
        """``n`` calls one at a time with ghz, each one's latency to the ns (its report's
        ``details``), after one more that is dropped."""
        return latency.ghz_details(self._ghz(target, call, data, n + 1, 1), n)


# -- the bench -------------------------------------------------------------------------------


@dataclass
class Figures:
    """One row's figures: requests/s at 32 concurrent, p50 at 1, CPU per request (ms) of the
    process serving it (the apiserver for direct, else the gateway), the apiserver's CPU per
    request too, and upstream requests per request (gateway rows).  Measured in rounds, each
    figure is the median of the rounds' (``rounds`` holds the runs at 1 concurrent)."""

    name: str
    rps: float
    p50_ms: float
    cpu_ms: float
    apiserver_cpu_ms: float
    upstream_per_request: float | None
    #: At 1 concurrent: the p50 of the gateway's own access lines (``duration_ms``, from the
    #: call's arrival to its answer) and the upstream's mean latency (its histogram), which
    #: tell the latency the gateway adds apart from the apiserver's and the client's.
    served_p50_ms: float | None = None
    upstream_mean_ms: float | None = None
    #: At 1 concurrent: the p50 of the access lines' ``upstream_ms`` (each call's own upstream
    #: time) and of ``duration_ms`` less it (the gateway's own share of each call); ``None``
    #: from a gateway whose lines do not say it (an older checkout).
    upstream_p50_ms: float | None = None
    own_p50_ms: float | None = None
    #: The runs at 1 concurrent, one per round (each request's latency to the ns): the
    #: added latency is the median of the rounds' differences to the direct row's.
    rounds: Rounds | None = None
    #: The rounds' CPU per request at 32 concurrent (ms), of which ``cpu_ms`` is the median.
    cpu_rounds: tuple[float, ...] = ()


#: Rounds, in turns, of every row (issue 30's rows judged to the microsecond): enough for a
#: median that one slow minute of the shared machine does not move.
ROUNDS = 5


@dataclass
class Mode:
    """A row: its name, the gateway serving it (``None``: the apiserver, direct), its load
    at ``c`` concurrent (hey or ghz) and one at a time (vegeta or ghz, to the ns)."""

    name: str
    served: Served | None
    loaded: Callable[[int, int], Run]
    one: Callable[[int], Timed]


@dataclass
class _Tally:
    """What the rounds of one row measured, gathered round after round."""

    rps: list[float] = dataclasses.field(default_factory=list)
    cpu: list[float] = dataclasses.field(default_factory=list)
    apiserver_cpu: list[float] = dataclasses.field(default_factory=list)
    upstream: list[float] = dataclasses.field(default_factory=list)
    runs: list[Timed] = dataclasses.field(default_factory=list)
    access: list[tuple[float, float | None]] = dataclasses.field(default_factory=list)
    upstream_seconds: float = 0.0
    upstream_calls: float = 0.0


def bench(
    requests: int,
    single: int,
    gateway_args: Sequence[str] = (),
    src: Path | None = None,
    *,
    only: Sequence[str] = (),
    profile: Path | None = None,
    native: bool = False,
    env: dict[str, str] | None = None,
    rounds: int = ROUNDS,
) -> list[Figures]:
    hey_bin, ghz_bin = load_clients()
    with running_apiserver() as kube, tempfile.TemporaryDirectory(prefix="kg-rps-") as d:
        log(f"kube-apiserver ready in {kube.startup_seconds}s")
        create_pods(kube)
        real = protoset(Path(d) / "pods.protoset")
        opaque = opaque_protoset(real, Path(d) / "opaque.protoset")
        load = Load(hey_bin, ghz_bin, opaque, kube.tokens["admin"], decoded=real)
        manifest = Path(d) / "trusted.json"
        manifest.write_text(json.dumps({"get": GET}))
        with (
            gateway(kube, *gateway_args, src=src, env=env) as gw,
            gateway(
                kube, "--trusted-documents", str(manifest), *gateway_args, src=src, env=env
            ) as trusted,
        ):
            api_pid = apiserver_pid(kube)
            variables = {"ns": NAMESPACE, "name": NAME}
            get = json.dumps({"query": GET, "variables": variables}).encode()
            lst = json.dumps({"query": LIST, "variables": {"ns": NAMESPACE}}).encode()
            by_id = json.dumps({"documentId": "get", "variables": variables}).encode()
            direct = f"{kube.url}/api/v1/namespaces/{NAMESPACE}/pods/{NAME}"
            direct_list = f"{kube.url}/api/v1/namespaces/{NAMESPACE}/pods?limit=10"
            pod_get = {"namespace": NAMESPACE, "name": NAME}
            pod_list = {"namespace": NAMESPACE, "limit": 10}
            service = "kubegateway.v1.PodService"

            def http(name: str, served: Served | None, url: str, body: bytes | None) -> Mode:
                return Mode(
                    name,
                    served,
                    lambda n, c: load.hey(url, body, n, c),
                    lambda n: load.one_http(url, body, n),
                )

            def grpc(name: str, method: str, data: dict[str, object]) -> Mode:
                call = f"{service}.{method}"
                load.decodes(gw.grpc, call, data)
                return Mode(
                    name,
                    gw,
                    lambda n, c: load.ghz(gw.grpc, call, data, n, c),
                    lambda n: load.one_grpc(gw.grpc, call, data, n),
                )

            modes = [
                http("direct", None, direct, None),
                http(DIRECT_LIST, None, direct_list, None),
                http("GraphQL get", gw, f"{gw.http}/graphql", get),
                http("GraphQL list of 10", gw, f"{gw.http}/graphql", lst),
                grpc("gRPC Get", "Get", pod_get),
                grpc("gRPC List of 10", "List", pod_list),
                http("trusted-document get", trusted, f"{trusted.http}/graphql", by_id),
            ]
            kept = [m.name for m in modes if m.served is not None and _kept(m.name, only)]
            modes = [m for m in modes if m.name in kept or _baseline(m.name, m.served, kept)]
            out = measure(
                modes,
                api_pid=api_pid,
                token=load.token,
                requests=requests,
                single=single,
                rounds=rounds,
                profile=profile,
                native=native,
            )
            for served in (gw, trusted):
                if served.proc.poll() is not None:
                    raise RuntimeError(f"a gateway exited during the bench:\n{served.log}")
    return out


def measure(
    modes: Sequence[Mode],
    *,
    api_pid: int,
    token: str,
    requests: int,
    single: int,
    rounds: int = ROUNDS,
    profile: Path | None = None,
    native: bool = False,
) -> list[Figures]:
    """Every row in ``rounds`` rounds, after a warm-up: in each round every row's share of
    ``requests`` at 32 concurrent in turn, with the CPU times and upstream requests around
    each, then ``single`` of every row one at a time in turn."""
    per_round = max(CONCURRENCY, requests // rounds // CONCURRENCY * CONCURRENCY)
    for m in modes:  # warm: connections, caches, code paths
        m.loaded(max(2 * CONCURRENCY, requests // 10), CONCURRENCY)
        m.one(10)
    tally = {m.name: _Tally() for m in modes}
    for at in range(rounds):
        for m in modes:
            t, served = tally[m.name], m.served
            pid = served.proc.pid if served is not None else api_pid
            with _profiled(m.name, pid if served is not None else None, profile, native, at):
                before = (cpu_ms(pid), cpu_ms(api_pid), _upstream(served, token))
                loaded = m.loaded(per_round, CONCURRENCY)
                after = (cpu_ms(pid), cpu_ms(api_pid), _upstream(served, token))
            t.rps.append(loaded.rps)
            t.cpu.append((after[0] - before[0]) / loaded.requests)
            t.apiserver_cpu.append((after[1] - before[1]) / loaded.requests)
            t.upstream.append((after[2] - before[2]) / loaded.requests)
        for m in modes:
            t, served = tally[m.name], m.served
            logged = len(served.log.splitlines()) if served is not None else 0
            up_before = _upstream(served, token, UPSTREAM_SUM), _upstream(served, token)
            t.runs.append(m.one(single))
            up_after = _upstream(served, token, UPSTREAM_SUM), _upstream(served, token)
            if served is not None:
                t.access += _access(served.log.splitlines()[logged:])
            t.upstream_seconds += up_after[0] - up_before[0]
            t.upstream_calls += up_after[1] - up_before[1]
        log(
            f"round {at + 1} of {rounds}: p50 at 1 "
            + ", ".join(f"{m.name} {tally[m.name].runs[-1].p50:.3f}" for m in modes)
            + f" ms; load average {os.getloadavg()[0]:.1f}"
        )
    return [_figures(m, tally[m.name]) for m in modes]


def _figures(m: Mode, t: _Tally) -> Figures:
    """A row's figures of its rounds (medians) and its log line."""
    access = t.access
    on_one = Rounds(tuple(t.runs))
    figures = Figures(
        m.name,
        statistics.median(t.rps),
        on_one.p50,
        statistics.median(t.cpu),
        statistics.median(t.apiserver_cpu),
        None if m.served is None else statistics.median(t.upstream),
        _p50([duration for duration, _ in access]),
        t.upstream_seconds * 1000 / t.upstream_calls if t.upstream_calls else None,
        _p50([upstream for _, upstream in access if upstream is not None]),
        _p50([d - u for d, u in access if u is not None]),
        on_one,
        tuple(t.cpu),
    )
    log(
        f"{m.name}: {figures.rps:,.0f} req/s at {CONCURRENCY}, p50 {figures.p50_ms:.3f} ms "
        f"(p99 {on_one.p99:.3f}) at 1, CPU {figures.cpu_ms:.3f} ms/request (apiserver "
        f"{figures.apiserver_cpu_ms:.3f}), upstream requests per request "
        f"{figures.upstream_per_request}; medians of {len(t.runs)} rounds"
        + (
            ""
            if figures.served_p50_ms is None or figures.upstream_mean_ms is None
            else f"; at 1: gateway's own p50 {figures.served_p50_ms:.2f} ms, upstream mean "
            f"{figures.upstream_mean_ms:.2f} ms"
        )
        + (
            ""
            if figures.upstream_p50_ms is None or figures.own_p50_ms is None
            else f", upstream p50 {figures.upstream_p50_ms:.2f} ms, "
            f"own share p50 {figures.own_p50_ms:.2f} ms"
        )
        + f"; load average {os.getloadavg()[0]:.1f}"
    )
    return figures


def _kept(name: str, only: Sequence[str]) -> bool:
    """Whether ``--rows`` keeps the gateway row ``name`` (every row without a filter)."""
    return not only or any(word.lower() in name.lower() for word in only)


def _baseline(name: str, served: Served | None, kept: Sequence[str]) -> bool:
    """Whether a direct row is the baseline of a kept row: the direct get always (the
    table's first row), the direct list when a kept row is a list."""
    if served is not None:
        return False
    return name != DIRECT_LIST or any("list" in k.lower() for k in kept)


def _py_spy() -> str:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        raise RuntimeError("--profile needs py-spy (pip install py-spy)")
    return found


@contextlib.contextmanager
def _profiled(
    name: str, pid: int | None, directory: Path | None, native: bool = False, part: int = 0
) -> Iterator[None]:
    """py-spy recording ``pid`` while the block runs (round ``part`` of the row), the top
    frames of every part so far written to ``directory``/<row>.txt (nothing without a
    directory or for a direct row)."""
    if directory is None or pid is None:
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"\W+", "-", name.lower()).strip("-")
    raw = directory / f"{slug}.{part}.raw"
    argv = [_py_spy(), "record", "--pid", str(pid), "--rate", "250", "--threads"]
    # --native stops the process at each sample (py-spy cannot read native stacks of a
    # running one): it shows grpc-core's syscalls but costs the gateway CPU of its own
    argv += ["--native"] if native else ["--nonblocking"]
    argv += ["--format", "raw", "--output", str(raw)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield
    finally:
        spy.send_signal(2)  # SIGINT: py-spy writes what it has and exits
        _, err = spy.communicate(timeout=60)
    if not raw.exists():
        raise RuntimeError(f"py-spy wrote no profile: {err[-2000:]}")
    parts = sorted(directory.glob(f"{slug}.*.raw"))
    summary = directory / f"{slug}.txt"
    summary.write_text(top_frames("\n".join(p.read_text() for p in parts)))
    log(f"{name}: profile in {summary} ({len(parts)} rounds)")


def top_frames(collapsed: str, top: int = 40) -> str:
    """Self and inclusive shares of the frames of py-spy's collapsed stacks."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + n
    if not total:
        return "no samples\n"
    lines = [f"{total} samples", "", "self %  frame"]
    for frame, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{100 * n / total:5.1f}  {frame}")
    lines += ["", "inclusive %  frame"]
    for frame, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{100 * n / total:5.1f}  {frame}")
    return "\n".join(lines) + "\n"


def _upstream(served: Served | None, token: str, name: str = UPSTREAM) -> float:
    if served is None:
        return 0.0
    r = httpx.get(f"{served.http}/metrics", headers={"Authorization": f"Bearer {token}"})
    r.raise_for_status()
    return metric_sum(r.text, name)


def _access(lines: Sequence[str]) -> list[tuple[float, float | None]]:
    """``duration_ms`` and ``upstream_ms`` (``None``: not said) of the access lines among
    ``lines`` (of the calls served)."""
    out: list[tuple[float, float | None]] = []
    for line in lines:
        if '"gateway.access"' in line and '"duration_ms"' in line and "/metrics" not in line:
            fields = json.loads(line)
            upstream = fields.get("upstream_ms")
            out.append(
                (float(fields["duration_ms"]), None if upstream is None else float(upstream))
            )
    return out


def _p50(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else None


def added_row(
    scenario: str,
    figure: float,
    direct: float,
    more: str = "",
    goal_ms: float = ADDED_GOAL_MS,
    *,
    added: tuple[float, float, float] | None = None,
    rounds: int = 0,
) -> Row:
    """A p50 row judged on the latency it adds to the direct call's, at most ``goal_ms``,
    to the microsecond.  ``added``: the median of ``rounds`` interleaved rounds' differences
    and their spread (:meth:`tests.bench.latency.Rounds.added`), judged and said in the
    note; without it, the figure less the direct one."""
    if added is None:
        value = round(figure - direct, 3)
        note = f"added {value:+.2f} ms{more}"
    else:
        value = round(added[0], 3)
        note = latency.added_note(added, rounds) + more
    measured = row(scenario, figure, "ms", direct, note=note)
    return dataclasses.replace(measured, goal=f"≤ +{goal_ms:g} ms added", met=value <= goal_ms)


def _inside(f: Figures) -> str:
    """Where a row's time at 1 concurrent went: the gateway's own p50 (its access lines)
    and the upstream's mean, as the gateway timed it."""
    if f.served_p50_ms is not None and f.upstream_p50_ms is not None and f.own_p50_ms is not None:
        return (
            f"; gateway's own p50 {f.served_p50_ms:.2f} ms: upstream p50 "
            f"{f.upstream_p50_ms:.2f} ms, the gateway's share p50 {f.own_p50_ms:.2f} ms"
        )
    if f.served_p50_ms is None or f.upstream_mean_ms is None:
        return ""
    own, upstream = f.served_p50_ms, f.upstream_mean_ms
    return f"; gateway's own p50 {own:.2f} ms, upstream mean {upstream:.2f} ms"


def _one_note(f: Figures) -> str:
    """How a row's p50 at 1 concurrent was taken, and its p99 ('' for figures without
    rounds)."""
    if f.rounds is None:
        return ""
    runs = f.rounds.runs
    return (
        f"median of {len(runs)} rounds' p50s of {len(runs[0].ms)} requests one at a time, "
        f"each timed to the ns; p99 {f.rounds.p99:.3f} ms"
    )


def _cpu_note(f: Figures) -> str:
    """The spread of a row's rounds of CPU per request ('' for one run)."""
    if len(f.cpu_rounds) < 2:
        return ""
    low, high = min(f.cpu_rounds), max(f.cpu_rounds)
    return f"median of {len(f.cpu_rounds)} rounds, {low:.2f}-{high:.2f} ms; "


def _added(f: Figures, base: Figures) -> tuple[float, float, float] | None:
    """The median of the rounds' p50 differences of ``f`` to ``base`` and their spread
    (``None`` when either has no rounds)."""
    if f.rounds is None or base.rounds is None:
        return None
    return f.rounds.added(base.rounds)


def figure_rows(figures: Sequence[Figures], requests: int, load: float) -> list[Row]:
    """The table's rows; ``load`` is the machine's 1-minute load average after the run."""
    direct = figures[0]
    rounds = len(direct.cpu_rounds)
    how = (
        f"{requests} requests at {CONCURRENCY} concurrent per row"
        + (
            f" in {rounds} interleaved rounds, each figure the median of the rounds'"
            if rounds
            else ""
        )
        + f"; load average {load:.1f} on {os.cpu_count()} CPUs"
    )
    out = [
        row(f"rps: direct GET, requests/s, concurrency {CONCURRENCY}", direct.rps, "req/s"),
        row("rps: direct GET, p50, concurrency 1", direct.p50_ms, "ms", note=_one_note(direct)),
        row(
            "rps: direct GET, apiserver CPU per request",
            direct.cpu_ms,
            "ms",
            note=_cpu_note(direct) + how,
        ),
    ]
    lists = next((f for f in figures if f.name == DIRECT_LIST), None)
    if lists is not None:
        out += [
            row(f"rps: {DIRECT_LIST}, requests/s, concurrency {CONCURRENCY}", lists.rps, "req/s"),
            row(
                f"rps: {DIRECT_LIST}, p50, concurrency 1", lists.p50_ms, "ms", note=_one_note(lists)
            ),
            row(
                f"rps: {DIRECT_LIST}, apiserver CPU per request",
                lists.cpu_ms,
                "ms",
                note=_cpu_note(lists).removesuffix("; "),
            ),
        ]
    for f in figures[1:]:
        if f.name == DIRECT_LIST:
            continue
        # a list through the gateway is compared with the same list made directly
        base = lists if lists is not None and "list" in f.name.lower() else direct
        p99 = "" if f.rounds is None else f"; p99 {f.rounds.p99:.3f} ms"
        out += [
            row(f"rps: {f.name}, requests/s, concurrency {CONCURRENCY}", f.rps, "req/s", base.rps),
            added_row(
                f"rps: {f.name}, p50, concurrency 1",
                f.p50_ms,
                base.p50_ms,
                p99 + _inside(f),
                added=_added(f, base),
                rounds=0 if f.rounds is None else len(f.rounds.runs),
            ),
            row(
                f"rps: {f.name}, gateway CPU per request",
                f.cpu_ms,
                "ms",
                base.cpu_ms,
                max_value=CPU_GOAL_MS,
                note=_cpu_note(f) + f"apiserver {f.apiserver_cpu_ms:.2f} ms; upstream requests "
                f"per request {f.upstream_per_request or 0:.2f}",
            ),
        ]
    return out


def rows(
    requests: int = 3000,
    single: int = 400,
    gateway_args: Sequence[str] = (),
    src: Path | None = None,
    *,
    only: Sequence[str] = (),
    profile: Path | None = None,
    native: bool = False,
    env: dict[str, str] | None = None,
    rounds: int = ROUNDS,
) -> list[Row]:
    """Measure (printing the details) and return the rows of the benchmark table."""
    figures = bench(
        requests,
        single,
        gateway_args,
        src,
        only=only,
        profile=profile,
        native=native,
        env=env,
        rounds=rounds,
    )
    return figure_rows(figures, requests, os.getloadavg()[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--single", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--gateway-arg", action="append", default=[])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--gateway-src", type=Path, default=None)
    parser.add_argument("--rows", nargs="+", default=[], metavar="WORD")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR")
    parser.add_argument("--profile-native", action="store_true")
    parser.add_argument("--gateway-env", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    if any("=" not in e for e in args.gateway_env):
        parser.error("--gateway-env takes NAME=VALUE")
    if args.rounds < 1:
        parser.error("--rounds takes 1 or more")
    if args.out is not None and (args.rows or args.profile is not None):
        parser.error("--out takes the whole table, unprofiled: no --rows or --profile")
    table = rows(
        args.requests,
        args.single,
        args.gateway_arg,
        args.gateway_src,
        only=args.rows,
        profile=args.profile,
        native=args.profile_native,
        env=dict(e.split("=", 1) for e in args.gateway_env) or None,
        rounds=args.rounds,
    )
    print(text_table(table))
    if args.out is not None:
        args.out.write_text(splice(args.out.read_text(), table))
        print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
