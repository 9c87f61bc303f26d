"""`kube-gateway serve` as a newcomer runs it: a real process, real ports, SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    def __init__(self, proc: subprocess.Popen[str], http_port: int, grpc_port: int) -> None:
        self.proc = proc
        self.http = f"http://127.0.0.1:{http_port}"
        self.grpc = f"127.0.0.1:{grpc_port}"
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            # "Uvicorn running on" comes after the lifespan started and signal handlers are set
            if "Uvicorn running on" in line or "Application startup failed" in line:
                self._ready.set()
        self._ready.set()

    def wait_ready(self, timeout: float = 60) -> None:
        assert self._ready.wait(timeout), "the gateway did not start in time"
        assert any("Application startup complete" in line for line in self.lines), "".join(
            self.lines
        )

    @property
    def log(self) -> str:
        return "".join(self.lines)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Served]:
    http_port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "KUBERNETES_"))}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config: the demo upstream must be chosen
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    served = Served(proc, http_port, grpc_port)
    try:
        yield served
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        assert proc.stderr is not None
        proc.stderr.close()


def test_serve_without_kubeconfig_picks_the_demo_upstream_and_stops_on_sigterm(
    serve: Served,
) -> None:
    serve.wait_ready()
    assert "DEMO upstream" in serve.log and "no kubeconfig or in-cluster config found" in serve.log
    with httpx.Client() as client:
        assert client.get(f"{serve.http}/healthz").text == "ok"
        ready = client.get(f"{serve.http}/readyz").json()
    assert ready["demo"] is True and ready["upstream"].startswith("http://127.0.0.1:")
    with grpc.insecure_channel(serve.grpc) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    started = time.monotonic()
    serve.proc.send_signal(signal.SIGTERM)
    # uvicorn shuts down gracefully, then re-raises the signal so supervisors see it
    assert serve.proc.wait(30) in (0, -signal.SIGTERM)
    assert time.monotonic() - started < 30
    serve._reader.join(10)
    assert "Application shutdown complete" in serve.log and "Finished server process" in serve.log
    assert "Traceback" not in serve.log and "ERROR" not in serve.log


def test_help_explains_every_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for flag in (
        "--http-port",
        "--grpc-port",
        "--demo",
        "--kubeconfig",
        "--context",
        "--server",
        "--gateway-identity",
        "KUBE_GATEWAY_HTTP_PORT",
    ):
        assert flag in out


def _half_configured(tmp_path: Path) -> dict[str, tuple[dict[str, str], list[str], str]]:
    empty = tmp_path / "empty-config"
    empty.write_text("")
    cert_kubeconfig = tmp_path / "cert-config"
    cert_kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {client-certificate-data: "
        "'LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==', client-key-data: "
        "'LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCg=='}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    insecure = tmp_path / "insecure-config"
    insecure.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://10.9.9.9:6443', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return {
        "pod-without-service-account": (
            {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
            [],
            "running in a pod",
        ),
        "kubeconfig-env-names-missing-files": (
            {"KUBECONFIG": str(tmp_path / "missing")},
            [],
            "none of the files it lists exists",
        ),
        "empty-kubeconfig": ({"KUBECONFIG": str(empty)}, [], "is empty"),
        "insecure-kubeconfig": ({"KUBECONFIG": str(insecure)}, [], "--allow-insecure-upstream"),
        "gateway-identity-with-client-certificate": (
            {"KUBECONFIG": str(cert_kubeconfig)},
            ["--gateway-identity"],
            "client certificate",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "pod-without-service-account",
        "kubeconfig-env-names-missing-files",
        "empty-kubeconfig",
        "insecure-kubeconfig",
        "gateway-identity-with-client-certificate",
    ],
)
def test_a_half_configured_start_fails_with_what_was_found_and_never_serves_the_demo(
    tmp_path: Path, case: str
) -> None:
    extra_env, args, message = _half_configured(tmp_path)[case]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "KUBERNETES_"))}
    env["HOME"] = str(tmp_path)
    env.update(extra_env)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--http-port",
            str(free_port()),
            "--grpc-port",
            str(free_port()),
            *args,
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert "DEMO" not in done.stderr
    assert "Traceback" not in done.stderr
