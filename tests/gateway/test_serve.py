"""`kube-gateway serve` as a newcomer runs it: a real process, real ports, SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from tests.support.serve_process import (
    Served,
    clean_env,
    command,
    free_port,
    health_serving,
    serve_process,
)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Served]:
    # no ~/.kube/config: the demo upstream must be chosen
    with serve_process(tmp_path, ready=False) as served:
        yield served


def test_serve_without_kubeconfig_picks_the_demo_upstream_and_stops_on_sigterm(
    serve: Served,
) -> None:
    serve.wait_serving()
    assert "DEMO upstream" in serve.log and "no kubeconfig or in-cluster config found" in serve.log
    # One line says where to go, at an address a browser opens.
    grpc_at = serve.grpc.removeprefix("127.0.0.1:")
    line = serve.wait_for_line("serving GraphQL at")
    assert f"{serve.http}/graphql (open it in a browser for GraphiQL)" in line
    assert f"gRPC at 127.0.0.1:{grpc_at}" in line
    with httpx.Client() as client:
        assert client.get(f"{serve.http}/healthz").text == "ok"
        ready = client.get(f"{serve.http}/readyz").json()
        home = client.get(f"{serve.http}/")  # a browser at the root lands on GraphiQL
        assert (home.status_code, home.headers["location"]) == (307, "/graphql")
        page = client.get(f"{serve.http}/", headers={"Accept": "text/html"}, follow_redirects=True)
        assert page.status_code == 200 and "graphiql" in page.text.lower()
    assert ready == {"status": "ok"}  # nothing about the upstream is shown
    # The demo has no aggregation layer: that is said once, quietly, not warned about.
    assert "apiservices.apiregistration.k8s.io is not served here" in serve.log
    # Said once: the demo upstream's own server does not repeat the gateway's start lines.
    assert serve.log.count("Application startup complete") == 1
    assert "not watching apiservices" not in serve.log
    with grpc.insecure_channel(serve.grpc) as channel:
        assert health_serving(channel)
    serve.proc.send_signal(signal.SIGTERM)
    # the gateway drains (nothing open here), uvicorn shuts down, the process exits 0; a
    # process that never stops is failed by the test's timeout
    assert serve.proc.wait() == 0
    assert "drained: no call in flight" in serve.log
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
    done = subprocess.run(
        command(free_port(), free_port(), *args),
        check=False,
        capture_output=True,
        text=True,
        env=clean_env(tmp_path, extra_env),
        timeout=60,
    )
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert "DEMO" not in done.stderr
    assert "Traceback" not in done.stderr
