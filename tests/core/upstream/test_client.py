"""The upstream client (``gateway.core.upstream.client``): TLS verification, HTTP versions and the
identity rules (the caller's credential by default, the gateway's only when asked).

Everything runs for real: kubeconfig files on disk, exec plugins as subprocesses, and a TLS
server on a loopback port (HTTP/1.1 and HTTP/2 by ALPN) that reports what the client
presented: its Authorization header, its client certificate, SNI and protocol.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.core.upstream.client import USER_AGENT, build_http_client
from gateway.core.upstream.config import ConfigError
from tests.core.upstream.upstream_fixtures import (
    FIXTURES,
    FUTURE,
    PAST,
    EchoServer,
    Pki,
    StartServer,
    b64,
    exec_user,
    get,
    make_service_account,
    pki,
    resolve,
    start_server,
    write_kubeconfig,
)

__all__ = ["pki", "start_server"]  # fixtures


# --------------------------------------------------------------------------- TLS


async def test_tls_verified_with_kubeconfig_ca_over_http2(
    tmp_path: Path, pki: Pki, start_server: StartServer
) -> None:
    server = await start_server()
    path = write_kubeconfig(
        tmp_path / "c",
        server=server.url,
        cluster={"certificate-authority-data": b64(pki.ca_pem)},
        user={"token": "gateway-token"},
    )
    cfg = resolve(kubeconfig=path)
    async with build_http_client(cfg) as client:  # HTTP/1.1 unless asked
        assert (await client.get("/api")).http_version == "HTTP/1.1"
    server.seen.clear()
    async with build_http_client(cfg, http2=True) as client:
        assert client.timeout == httpx.Timeout(connect=10.0, read=None, write=30.0, pool=10.0)
        response = await client.get("/api/v1/pods")
        caller = await client.get("/api", headers={"Authorization": "Bearer caller-token"})
    assert response.status_code == 200
    assert response.http_version == "HTTP/2"
    assert caller.http_version == "HTTP/2"
    first, second = server.seen
    assert (first.path, first.authorization, first.client_cn) == ("/api/v1/pods", None, None)
    assert first.user_agent == USER_AGENT
    assert USER_AGENT.startswith("kube-gateway/")
    assert second.authorization == "Bearer caller-token"


async def test_tls_fails_against_a_wrongmake_ca(
    tmp_path: Path, pki: Pki, start_server: StartServer
) -> None:
    server = await start_server()
    path = write_kubeconfig(
        tmp_path / "c",
        server=server.url,
        cluster={"certificate-authority-data": b64(pki.other_ca_pem)},
    )
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        await get(resolve(kubeconfig=path))
    # Verification is on by default: no CA configured means the public bundle, which fails too.
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        await get(resolve(server=server.url))
    assert server.seen == []


async def test_insecure_skip_tls_verify(tmp_path: Path, start_server: StartServer) -> None:
    server = await start_server()
    path = write_kubeconfig(
        tmp_path / "c", server=server.url, cluster={"insecure-skip-tls-verify": True}
    )
    with pytest.raises(ConfigError, match="--allow-insecure-upstream"):
        resolve(kubeconfig=path)  # a file alone never turns transport security off
    assert (await get(resolve(kubeconfig=path, allow_insecure=True))).status_code == 200


async def test_tls_server_name(tmp_path: Path, pki: Pki, start_server: StartServer) -> None:
    server = await start_server()
    cluster = {"certificate-authority": str(pki.path("ca.crt")), "tls-server-name": "localhost"}
    path = write_kubeconfig(tmp_path / "c", server=server.url, cluster=cluster)
    assert (await get(resolve(kubeconfig=path))).status_code == 200
    assert server.sni == ["localhost"]

    cluster["tls-server-name"] = "not-in-the-cert.test"
    write_kubeconfig(path, server=server.url, cluster=cluster)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        await get(resolve(kubeconfig=path))


async def test_plain_http_stays_http11(start_server: StartServer) -> None:
    server = await start_server(tls=False)
    response = await get(resolve(server=server.url))
    assert response.http_version == "HTTP/1.1"
    assert server.seen[0].authorization is None


# --------------------------------------------------------------------------- identity


def cert_data_kubeconfig(tmp_path: Path, pki: Pki, server: EchoServer) -> Path:
    return write_kubeconfig(
        tmp_path / "c",
        server=server.url,
        cluster={"certificate-authority-data": b64(pki.ca_pem)},
        user={
            "token": "gateway-token",
            "client-certificate-data": b64(pki.client_cert_pem),
            "client-key-data": b64(pki.client_key_pem),
        },
    )


async def test_default_mode_presents_no_gateway_credential(
    tmp_path: Path, pki: Pki, start_server: StartServer
) -> None:
    server = await start_server()
    cfg = resolve(kubeconfig=cert_data_kubeconfig(tmp_path, pki, server))
    await get(cfg)
    await get(cfg, headers={"Authorization": "Bearer caller-token"})
    assert [(s.client_cn, s.authorization) for s in server.seen] == [
        (None, None),
        (None, "Bearer caller-token"),
    ]


async def test_gateway_identity_presents_certificate_and_token(
    tmp_path: Path, pki: Pki, start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = await start_server()
    cfg = resolve(kubeconfig=cert_data_kubeconfig(tmp_path, pki, server))
    await get(cfg, gateway_identity=True)
    await get(cfg, gateway_identity=True, headers={"Authorization": "Bearer caller-token"})
    assert [(s.client_cn, s.authorization) for s in server.seen] == [
        ("gateway-client", "Bearer gateway-token"),
        ("gateway-client", "Bearer caller-token"),  # never overridden
    ]
    assert "GATEWAY IDENTITY MODE" in caplog.text
    assert "gateway-token" not in caplog.text


async def test_gateway_identity_with_certificate_files(
    tmp_path: Path, pki: Pki, start_server: StartServer
) -> None:
    server = await start_server()
    shutil.copytree(pki.dir, tmp_path / "pki")
    doc = yaml.safe_load((FIXTURES / "client-cert-files.yaml").read_text())
    doc["clusters"][0]["cluster"]["server"] = server.url
    (tmp_path / "config").write_text(yaml.safe_dump(doc))
    cfg = resolve(kubeconfig=tmp_path / "config")
    response = await get(cfg, gateway_identity=True)
    assert response.status_code == 200
    assert server.seen[0].client_cn == "gateway-client"
    assert server.seen[0].authorization is None  # certificate-only identity


async def test_gateway_identity_needs_a_credential(start_server: StartServer) -> None:
    server = await start_server(tls=False)
    with pytest.raises(ConfigError, match="gives the gateway no credential"):
        build_http_client(resolve(server=server.url), gateway_identity=True)


async def test_exec_client_certificate(tmp_path: Path, pki: Pki, start_server: StartServer) -> None:
    server = await start_server()
    user = exec_user(
        tmp_path, "cert", extra_args=(str(pki.path("exec.crt")), str(pki.path("exec.key")))
    )
    path = write_kubeconfig(
        tmp_path / "c",
        server=server.url,
        cluster={"certificate-authority-data": b64(pki.ca_pem)},
        user=user,
    )
    cfg = resolve(kubeconfig=path)
    await get(cfg)
    await get(cfg, gateway_identity=True)
    assert [s.client_cn for s in server.seen] == [None, "exec-client"]
    assert (tmp_path / "runs").read_text() == "1"  # the default mode never ran the plugin


async def test_failing_exec_plugin_only_matters_in_gateway_identity_mode(
    tmp_path: Path, start_server: StartServer
) -> None:
    server = await start_server(tls=False)
    path = write_kubeconfig(tmp_path / "c", server=server.url, user=exec_user(tmp_path, "fail"))
    cfg = resolve(kubeconfig=path)
    assert (await get(cfg)).status_code == 200
    with pytest.raises(ConfigError, match="plugin exploded"):
        build_http_client(cfg, gateway_identity=True)


async def test_exec_token_rerun_on_expiry_and_on_401(
    tmp_path: Path, start_server: StartServer
) -> None:
    server = await start_server(tls=False)
    expired = write_kubeconfig(
        tmp_path / "c", server=server.url, user=exec_user(tmp_path, "token", expiry=PAST)
    )
    cfg = resolve(kubeconfig=expired)
    async with build_http_client(cfg, gateway_identity=True) as client:
        await client.get("/a")
        await client.get("/b")
    # Run 1 at startup (already expired), runs 2 and 3 for the two requests.
    assert [s.authorization for s in server.seen] == ["Bearer exec-p-2", "Bearer exec-p-3"]

    server = await start_server(tls=False, accept={"exec-p-2"})
    (tmp_path / "runs").unlink()
    valid = write_kubeconfig(
        tmp_path / "c", server=server.url, user=exec_user(tmp_path, "token", expiry=FUTURE)
    )
    async with build_http_client(resolve(kubeconfig=valid), gateway_identity=True) as client:
        response = await client.get("/c")
        again = await client.get("/d")
    assert response.status_code == 200 and again.status_code == 200
    assert [s.authorization for s in server.seen] == [
        "Bearer exec-p-1",  # refused
        "Bearer exec-p-2",  # plugin re-run, retried once
        "Bearer exec-p-2",  # cached from then on
    ]


async def test_token_file_reread_on_401_and_retried_once(
    tmp_path: Path, start_server: StartServer
) -> None:
    server = await start_server(tls=False, accept={"new-token"})
    token = tmp_path / "token"
    token.write_text("old-token\n")
    cfg = resolve(server=server.url, token_file=token)
    async with build_http_client(cfg, gateway_identity=True) as client:
        refused = await client.get("/1")  # file unchanged: no second attempt
        token.write_text("new-token\n")
        accepted = await client.get("/2")  # cached token refused, file re-read, retried
        caller = await client.get("/3", headers={"Authorization": "Bearer caller"})
    assert (refused.status_code, accepted.status_code, caller.status_code) == (401, 200, 401)
    assert [s.authorization for s in server.seen] == [
        "Bearer old-token",
        "Bearer old-token",
        "Bearer new-token",
        "Bearer caller",  # the caller's 401 is the caller's: no retry, no substitution
    ]


async def test_in_cluster_end_to_end(tmp_path: Path, pki: Pki, start_server: StartServer) -> None:
    server = await start_server()
    sa = make_service_account(tmp_path / "sa", pki.ca_pem)
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(server.port)}
    cfg = resolve(environ=environ, service_account_dir=sa)
    await get(cfg)
    await get(cfg, gateway_identity=True)
    assert [(s.authorization, s.client_cn) for s in server.seen] == [
        (None, None),
        ("Bearer sa-token-1", None),
    ]


async def test_exec_provide_cluster_info(
    tmp_path: Path, pki: Pki, start_server: StartServer
) -> None:
    server = await start_server()
    user = exec_user(tmp_path, "cluster")
    user["exec"]["provideClusterInfo"] = True
    extension = {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "aud"}}
    cluster = {"certificate-authority-data": b64(pki.ca_pem), "extensions": [extension]}
    path = write_kubeconfig(tmp_path / "c", server=server.url, cluster=cluster, user=user)
    await get(resolve(kubeconfig=path), gateway_identity=True)
    assert server.seen[0].authorization == "Bearer cluster-aud-True"
