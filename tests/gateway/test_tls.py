"""TLS on both listeners of ``kube-gateway serve`` (a real process): HTTPS and gRPC serve the
configured certificate, pick up a renewed one without a restart, and gRPC can require
client certificates."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.pki import make_ca, make_leaf, pem_cert
from tests.support.serve_process import Served, health_serving, serve_process


@dataclass
class Tls:
    dir: Path
    ca: bytes
    ca_key: object
    ca_cert: x509.Certificate

    def issue(self, cn: str, *, server: bool = True) -> tuple[bytes, bytes]:
        return make_leaf(self.ca_key, self.ca_cert, cn, server=server)  # type: ignore[arg-type]


@pytest.fixture
def tls(tmp_path: Path) -> Tls:
    key, cert = make_ca("gateway test CA")
    ca = pem_cert(cert)
    (tmp_path / "ca.crt").write_bytes(ca)
    t = Tls(tmp_path, ca, key, cert)
    crt, k = t.issue("first")
    (tmp_path / "tls.crt").write_bytes(crt)
    (tmp_path / "tls.key").write_bytes(k)
    return t


def _serve(home: Path, *args: str) -> contextlib.AbstractContextManager[Served]:
    return serve_process(
        home,
        "--demo",
        "--tls-cert-file",
        str(home / "tls.crt"),
        "--tls-key-file",
        str(home / "tls.key"),
        "--tls-reload-seconds",
        "0.1",
        *args,
    )


def _served_cn(port: int, ca: bytes) -> str:
    """The common name of the certificate the listener on ``port`` presents now."""
    context = ssl.create_default_context(cadata=ca.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls_sock,
    ):
        der = tls_sock.getpeercert(binary_form=True)
    assert der is not None
    cert = x509.load_der_x509_certificate(der)
    return str(cert.subject.rfc4514_string())


def test_both_listeners_serve_tls_and_reload_a_renewed_certificate(tls: Tls) -> None:
    with _serve(tls.dir) as served:
        http_port = int(served.http.rsplit(":", 1)[1])
        grpc_port = int(served.grpc.rsplit(":", 1)[1])
        ssl_ctx = ssl.create_default_context(cadata=tls.ca.decode())
        https = served.http.replace("http://", "https://")
        assert httpx.get(f"{https}/healthz", verify=ssl_ctx).text == "ok"
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{served.http}/healthz", timeout=5)  # no plaintext any more
        channel = grpc.secure_channel(served.grpc, grpc.ssl_channel_credentials(tls.ca))
        assert health_serving(channel)
        channel.close()
        assert _served_cn(http_port, tls.ca) == "CN=first"
        assert _served_cn(grpc_port, tls.ca) == "CN=first"

        crt, key = tls.issue("second")  # renewed: key first, then the certificate
        (tls.dir / "tls.key.new").write_bytes(key)
        (tls.dir / "tls.crt.new").write_bytes(crt)
        os.replace(tls.dir / "tls.key.new", tls.dir / "tls.key")
        os.replace(tls.dir / "tls.crt.new", tls.dir / "tls.crt")
        # The gateway logs the reload once the new pair is in place (a half-renewed pair is
        # never loaded): from then on every new handshake, on either listener, gets it.
        served.wait_for_line("TLS certificate reloaded from")
        assert _served_cn(http_port, tls.ca) == "CN=second"
        assert _served_cn(grpc_port, tls.ca) == "CN=second"
        assert "Traceback" not in served.log


def test_grpc_can_require_client_certificates(tls: Tls) -> None:
    with _serve(tls.dir, "--grpc-client-ca-file", str(tls.dir / "ca.crt")) as served:
        anonymous = grpc.secure_channel(served.grpc, grpc.ssl_channel_credentials(tls.ca))
        with pytest.raises(grpc.RpcError) as refused:
            health_pb2_grpc.HealthStub(anonymous).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # the handshake failed
        anonymous.close()
        client_crt, client_key = tls.issue("caller", server=False)
        mutual = grpc.secure_channel(
            served.grpc,
            grpc.ssl_channel_credentials(
                tls.ca, private_key=client_key, certificate_chain=client_crt
            ),
        )
        assert health_serving(mutual)
        mutual.close()
