"""Upstream configuration: resolution order, kubeconfig features, TLS and identity rules.

Everything runs for real: kubeconfig files on disk, exec plugins as subprocesses, and a TLS
server on a loopback port (HTTP/1.1 and HTTP/2 by ALPN) that reports what the client
presented: its Authorization header, its client certificate, SNI and protocol.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import os
import shutil
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
import yaml

from gateway.core.auth import ExecCredentialPlugin, GatewayAuth, TokenFile
from gateway.core.client import USER_AGENT, build_http_client
from gateway.core.config import ConfigError, UpstreamConfig, describe
from gateway.core.kubeconfig import resolve_upstream
from tests.pki import make_ca, make_leaf, pem_cert

FIXTURES = Path(__file__).parent / "fixtures" / "kubeconfig"
NO_SA = Path("/nonexistent/serviceaccount")
PAST = "2000-01-01T00:00:00Z"
FUTURE = "2999-01-01T00:00:00Z"


# --------------------------------------------------------------------------- PKI


@dataclass(frozen=True)
class Pki:
    """A throwaway CA, a server and two client certificates, plus an unrelated CA."""

    dir: Path
    ca_pem: bytes
    other_ca_pem: bytes
    client_cert_pem: bytes
    client_key_pem: bytes
    exec_cert_pem: bytes
    exec_key_pem: bytes

    def path(self, name: str) -> Path:
        return self.dir / name


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    ca_key, ca_cert = make_ca("kube-gateway test CA")
    _, other_ca = make_ca("some other CA")
    server_cert, server_key = make_leaf(ca_key, ca_cert, "apiserver", server=True)
    client_cert, client_key = make_leaf(ca_key, ca_cert, "gateway-client", server=False)
    exec_cert, exec_key = make_leaf(ca_key, ca_cert, "exec-client", server=False)
    directory = tmp_path_factory.mktemp("pki")
    files = {
        "ca.crt": pem_cert(ca_cert),
        "server.crt": server_cert,
        "server.key": server_key,
        "client.crt": client_cert,
        "client.key": client_key,
        "exec.crt": exec_cert,
        "exec.key": exec_key,
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return Pki(
        dir=directory,
        ca_pem=pem_cert(ca_cert),
        other_ca_pem=pem_cert(other_ca),
        client_cert_pem=client_cert,
        client_key_pem=client_key,
        exec_cert_pem=exec_cert,
        exec_key_pem=exec_key,
    )


# --------------------------------------------------------------------------- echo server


@dataclass
class Seen:
    path: str
    authorization: str | None
    user_agent: str | None
    client_cn: str | None
    http_version: str


@dataclass
class EchoServer:
    """Answers every request with what it saw; 401 for bearer tokens not in ``accept``."""

    tls: ssl.SSLContext | None
    accept: set[str] | None = None
    seen: list[Seen] = field(default_factory=list)
    sni: list[str | None] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def _answer(self, path: str, headers: dict[str, str], version: str, cn: str | None) -> Any:
        auth = headers.get("authorization")
        self.seen.append(Seen(path, auth, headers.get("user-agent"), cn, version))
        if self.accept is not None and auth and auth.removeprefix("Bearer ") not in self.accept:
            return 401, b'{"kind":"Status","code":401}'
        return 200, json.dumps({"path": path}).encode()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            sslobj = writer.get_extra_info("ssl_object")
            cn = None
            if sslobj is not None:
                peer = sslobj.getpeercert()
                if peer:
                    cn = dict(item[0] for item in peer["subject"])["commonName"]
            if sslobj is not None and sslobj.selected_alpn_protocol() == "h2":
                await self._serve_h2(reader, writer, cn)
            else:
                await self._serve_h1(reader, writer, cn)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
            self._tasks.discard(task)

    async def _serve_h1(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cn: str | None
    ) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            lines = head.decode("latin-1").split("\r\n")
            _, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            if length := int(headers.get("content-length", "0")):
                await reader.readexactly(length)
            status, body = self._answer(path, headers, "HTTP/1.1", cn)
            writer.write(
                f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()

    async def _serve_h2(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cn: str | None
    ) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        streams: dict[int, dict[str, str]] = {}
        while True:
            data = await reader.read(65536)
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    streams[event.stream_id] = {
                        bytes(k).decode(): bytes(v).decode() for k, v in event.headers or []
                    }
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    headers = streams.pop(event.stream_id)
                    status, body = self._answer(headers[":path"], headers, "HTTP/2", cn)
                    conn.send_headers(
                        event.stream_id,
                        [
                            (":status", str(status)),
                            ("content-type", "application/json"),
                            ("content-length", str(len(body))),
                        ],
                    )
                    conn.send_data(event.stream_id, body, end_stream=True)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    writer.write(conn.data_to_send())
                    return
            writer.write(conn.data_to_send())
            await writer.drain()


StartServer = Callable[..., Awaitable[EchoServer]]


@pytest.fixture
async def start_server(pki: Pki) -> AsyncIterator[StartServer]:
    """Start echo servers (TLS with the test CA unless ``tls=False``); all closed at teardown."""
    servers: list[EchoServer] = []

    async def start(*, tls: bool = True, accept: set[str] | None = None) -> EchoServer:
        ctx = None
        server: EchoServer
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(pki.path("server.crt"), pki.path("server.key"))
            ctx.load_verify_locations(cadata=pki.ca_pem.decode())
            ctx.verify_mode = ssl.CERT_OPTIONAL  # a client certificate is reported, not required
            ctx.set_alpn_protocols(["h2", "http/1.1"])
            ctx.sni_callback = lambda _obj, name, _ctx: server.sni.append(name)
        server = EchoServer(ctx, accept)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


# --------------------------------------------------------------------------- helpers


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    user: dict[str, Any] | None = None,
    cluster: dict[str, Any] | None = None,
    namespace: str | None = None,
) -> Path:
    context: dict[str, Any] = {"cluster": "c"}
    if user is not None:
        context["user"] = "u"
    if namespace:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "contexts": [{"name": "ctx", "context": context}],
        "users": [{"name": "u", "user": user}] if user is not None else [],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def resolve(**kwargs: Any) -> UpstreamConfig:
    kwargs.setdefault("environ", {})
    kwargs.setdefault("service_account_dir", NO_SA)
    cfg = resolve_upstream(**kwargs)
    assert cfg is not None
    return cfg


async def get(cfg: UpstreamConfig, path: str = "/api", **kwargs: Any) -> httpx.Response:
    identity = kwargs.pop("gateway_identity", False)
    async with build_http_client(cfg, gateway_identity=identity) as client:
        return await client.get(path, **kwargs)


PLUGIN = """\
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
mode, counter = sys.argv[1], sys.argv[2]
runs = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
with open(counter, "w") as f:
    f.write(str(runs))
if mode == "fail":
    sys.stderr.write("plugin exploded\\n")
    sys.exit(3)
if mode == "garbage":
    print("this is not json")
    sys.exit(0)
status = {}
if mode == "token":
    status["token"] = "exec-%s-%d" % (os.environ["EXEC_PREFIX"], runs)
if mode == "cluster":
    cluster = info["spec"]["cluster"]
    has_ca = "certificateAuthorityData" in cluster
    status["token"] = "cluster-%s-%s" % (cluster["config"]["audience"], has_ca)
if mode == "cert":
    status["clientCertificateData"] = open(sys.argv[3]).read()
    status["clientKeyData"] = open(sys.argv[4]).read()
if os.environ.get("EXEC_EXPIRY"):
    status["expirationTimestamp"] = os.environ["EXEC_EXPIRY"]
api_version = info["apiVersion"] if mode != "wrong-version" else "v0"
print(json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "status": status}))
"""


def exec_user(
    tmp_path: Path,
    mode: str,
    *,
    api_version: str = "client.authentication.k8s.io/v1",
    expiry: str | None = None,
    extra_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN)
    env = [{"name": "EXEC_PREFIX", "value": "p"}]
    if expiry:
        env.append({"name": "EXEC_EXPIRY", "value": expiry})
    return {
        "exec": {
            "apiVersion": api_version,
            "command": sys.executable,
            "args": [str(script), mode, str(tmp_path / "runs"), *extra_args],
            "env": env,
            "interactiveMode": "Never",
        }
    }


# --------------------------------------------------------------------------- resolution order


def test_nothing_configured_gives_none(tmp_path: Path) -> None:
    assert resolve_upstream(environ={"HOME": str(tmp_path)}, service_account_dir=NO_SA) is None
    assert resolve_upstream(environ={}, service_account_dir=tmp_path) is None


def test_home_kube_config_is_the_default(tmp_path: Path) -> None:
    (tmp_path / ".kube").mkdir()
    shutil.copy(FIXTURES / "token.yaml", tmp_path / ".kube" / "config")
    cfg = resolve(environ={"HOME": str(tmp_path)})
    assert cfg.server == "https://dev.example.test:6443"
    assert cfg.source == f"kubeconfig {tmp_path / '.kube' / 'config'} (context dev)"


def make_service_account(directory: Path, ca: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text("sa-token-1\n")
    (directory / "ca.crt").write_bytes(ca)
    (directory / "namespace").write_text("gateway-ns")
    return directory


def test_in_cluster_wins_over_kubeconfig(tmp_path: Path, pki: Pki) -> None:
    sa = make_service_account(tmp_path / "sa", pki.ca_pem)
    environ = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "KUBECONFIG": str(FIXTURES / "token.yaml"),
    }
    cfg = resolve(environ=environ, service_account_dir=sa)
    assert cfg.source == "in-cluster"
    assert cfg.server == "https://10.96.0.1:443"
    assert cfg.namespace == "gateway-ns"
    assert cfg.token_file == sa / "token"
    assert cfg.token is None
    assert cfg.ca_file == sa / "ca.crt"

    # IPv6 service hosts are bracketed.
    environ["KUBERNETES_SERVICE_HOST"] = "fd00::1"
    assert resolve(environ=environ, service_account_dir=sa).server == "https://[fd00::1]:443"

    # An explicit kubeconfig or context is a choice that skips in-cluster detection.
    chosen = resolve(environ=environ, service_account_dir=sa, kubeconfig=FIXTURES / "token.yaml")
    assert chosen.server == "https://dev.example.test:6443"


def test_in_cluster_without_a_service_account_or_ca_fails_never_falls_back(
    tmp_path: Path, pki: Pki
) -> None:
    sa = make_service_account(tmp_path / "sa", pki.ca_pem)
    environ = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "KUBECONFIG": str(FIXTURES / "token.yaml"),
    }
    (sa / "ca.crt").unlink()
    with pytest.raises(ConfigError, match="in-cluster"):
        resolve(environ=environ, service_account_dir=sa)
    (sa / "token").unlink()  # automountServiceAccountToken: false
    with pytest.raises(ConfigError, match="running in a pod") as caught:
        resolve(environ=environ, service_account_dir=sa)
    assert "--server" in str(caught.value)  # says what to do
    # an explicit kubeconfig is a choice: it is used
    chosen = resolve(environ=environ, service_account_dir=sa, kubeconfig=FIXTURES / "token.yaml")
    assert chosen.source.startswith("kubeconfig ")


def test_flags_win_over_in_cluster_and_kubeconfig(tmp_path: Path, pki: Pki) -> None:
    sa = make_service_account(tmp_path / "sa", pki.ca_pem)
    environ = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "KUBECONFIG": str(FIXTURES / "token.yaml"),
    }
    cfg = resolve(
        server="https://flags.example.test:6443/",
        token="flag-token",
        ca_file=pki.path("ca.crt"),
        client_cert=pki.path("client.crt"),
        client_key=pki.path("client.key"),
        environ=environ,
        service_account_dir=sa,
    )
    assert cfg.source == "flags"
    assert cfg.server == "https://flags.example.test:6443"
    assert cfg.token == "flag-token"
    assert cfg.ca_file == pki.path("ca.crt")
    assert cfg.client_cert_file == pki.path("client.crt")
    assert cfg.namespace == "default"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"token": "t"}, "needs an explicit server"),
        ({"insecure": True}, "needs an explicit server"),
        ({"server": "ftp://x"}, "not an http"),
        ({"server": "https://user:pw@x"}, "must not contain credentials"),
        ({"server": "https://x", "token": "t", "token_file": "/t"}, "not both"),
        ({"server": "https://x", "client_cert": "/c"}, "needs its key"),
        ({"server": "https://x", "token_file": "/nonexistent/token"}, "cannot be read"),
        ({"server": "https://x", "ca_file": "/c", "insecure": True}, "exclude each other"),
    ],
)
def test_flag_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        resolve(**kwargs)
    assert "pw" not in str(caught.value)


# --------------------------------------------------------------------------- kubeconfig


def test_token_user() -> None:
    cfg = resolve(kubeconfig=FIXTURES / "token.yaml")
    assert cfg.server == "https://dev.example.test:6443"  # trailing slash dropped
    assert cfg.token == "fixture-static-token-1234"
    assert cfg.namespace == "team-a"
    assert cfg.ca_data == b"-----BEGIN CERTIFICATE-----\nfixture\n-----END CERTIFICATE-----\n"
    assert cfg.source == f"kubeconfig {FIXTURES / 'token.yaml'} (context dev)"


def test_token_file_user_is_relative_to_its_kubeconfig() -> None:
    with pytest.raises(ConfigError, match="insecure-skip-tls-verify"):
        resolve(kubeconfig=FIXTURES / "token-file.yaml")  # the fixture turns TLS off
    cfg = resolve(kubeconfig=FIXTURES / "token-file.yaml", allow_insecure=True)
    assert cfg.token is None
    assert cfg.token_file == FIXTURES / "tokens" / "gateway.token"
    assert cfg.insecure_skip_tls_verify is True
    assert cfg.tls_server_name == "kubernetes.default.svc"
    assert TokenFile(cfg.token_file).read() == "fixture-file-token-5678"


def test_client_certificate_files_relative_to_kubeconfig(tmp_path: Path, pki: Pki) -> None:
    shutil.copytree(pki.dir, tmp_path / "pki")
    shutil.copy(FIXTURES / "client-cert-files.yaml", tmp_path / "config")
    cfg = resolve(kubeconfig=tmp_path / "config")
    assert cfg.ca_file == tmp_path / "pki" / "ca.crt"
    assert cfg.client_cert_file == tmp_path / "pki" / "client.crt"
    assert cfg.client_key_file == tmp_path / "pki" / "client.key"
    assert cfg.client_cert_data is None

    (tmp_path / "pki" / "client.key").unlink()
    with pytest.raises(ConfigError, match=r"client\.key"):
        resolve(kubeconfig=tmp_path / "config")


def test_client_certificate_data_stays_in_memory(tmp_path: Path, pki: Pki) -> None:
    from kubernetes.config import kube_config

    before = dict(kube_config._temp_files)
    path = write_kubeconfig(
        tmp_path / "config",
        server="https://127.0.0.1:1",
        cluster={"certificate-authority-data": b64(pki.ca_pem)},
        user={
            "client-certificate-data": b64(pki.client_cert_pem),
            "client-key-data": b64(pki.client_key_pem),
        },
    )
    cfg = resolve(kubeconfig=path)
    assert cfg.ca_data == pki.ca_pem
    assert cfg.client_cert_data == pki.client_cert_pem
    assert cfg.client_key_data == pki.client_key_pem
    assert cfg.client_cert_file is None
    # The library's loader would have written these to temp files; we did not.
    assert kube_config._temp_files == before


def test_current_and_named_context() -> None:
    current = resolve(kubeconfig=FIXTURES / "multi-context.yaml")
    assert (current.server, current.token, current.namespace) == (
        "https://prod.example.test:6443",
        "fixture-prod-token",
        "prod-ns",
    )
    named = resolve(kubeconfig=FIXTURES / "multi-context.yaml", context="staging")
    assert (named.server, named.token, named.namespace) == (
        "https://staging.example.test:6443",
        "fixture-staging-token",
        "default",
    )
    assert named.source.endswith("(context staging)")


def test_missing_context_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"context 'nope' not found \(available: prod, staging\)"):
        resolve(kubeconfig=FIXTURES / "multi-context.yaml", context="nope")
    with pytest.raises(ConfigError, match="no kubeconfig was found"):
        resolve(context="prod")
    no_current = tmp_path / "config"
    doc = yaml.safe_load((FIXTURES / "multi-context.yaml").read_text())
    del doc["current-context"]
    no_current.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="no current-context"):
        resolve(kubeconfig=no_current)


def test_kubeconfig_env_merges_files_first_wins(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("")  # kubectl treats an empty file as no config
    files = [
        tmp_path / "empty.yaml",
        FIXTURES / "merge-a.yaml",
        tmp_path / "missing.yaml",  # listed files that do not exist are skipped
        FIXTURES / "merge-b.yaml",
    ]
    listed = os.pathsep.join(str(f) for f in files)
    cfg = resolve(environ={"KUBECONFIG": listed})
    # current-context and the "shared" cluster come from the first file, the user from the second.
    assert cfg.server == "https://a.example.test"
    assert cfg.token == "fixture-merged-token"
    assert "(context from-a)" in cfg.source
    other = resolve(environ={"KUBECONFIG": listed}, context="from-b")
    assert other.server == "https://only-b.example.test"

    with pytest.raises(ConfigError, match="none of the files it lists exists"):
        resolve_upstream(environ={"KUBECONFIG": str(tmp_path / "none")})
    with pytest.raises(ConfigError, match="is empty"):
        resolve_upstream(environ={"KUBECONFIG": str(tmp_path / "empty.yaml")})


def test_kubeconfig_file_errors_never_leak_secrets(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        resolve(kubeconfig=tmp_path / "absent")
    broken = tmp_path / "broken"
    broken.write_text('users:\n- name: u\n  user:\n    token: "leaky-secret\n  [oops: {\n')
    with pytest.raises(ConfigError, match="not valid YAML") as caught:
        resolve(kubeconfig=broken)
    assert "leaky-secret" not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is not None
    missing_file = write_kubeconfig(
        tmp_path / "config", server="https://x", user={"tokenFile": "nope.token"}
    )
    with pytest.raises(ConfigError, match=r"nope\.token"):
        resolve(kubeconfig=missing_file)
    # The library names entries after their whole content; our messages must not show it.
    no_server = write_kubeconfig(
        tmp_path / "config",
        server="https://x",
        cluster={"certificate-authority-data": "U0VDUkVUQ0E="},
        user={"token": "leaky-secret"},
    )
    doc = yaml.safe_load(no_server.read_text())
    del doc["clusters"][0]["cluster"]["server"]
    no_server.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="server") as caught:
        resolve(kubeconfig=no_server)
    assert "U0VDUkVUQ0E=" not in str(caught.value)
    assert "leaky-secret" not in str(caught.value)


def test_exec_spec_is_validated_not_run(tmp_path: Path) -> None:
    user = exec_user(tmp_path, "token")
    path = write_kubeconfig(tmp_path / "config", server="https://x", user=user)
    cfg = resolve(kubeconfig=path)
    assert cfg.exec is not None
    assert cfg.exec.api_version == "client.authentication.k8s.io/v1"
    assert cfg.exec.args[1:] == ("token", str(tmp_path / "runs"))
    assert cfg.exec.env == (("EXEC_PREFIX", "p"),)
    assert cfg.exec.cwd == tmp_path
    assert not (tmp_path / "runs").exists()

    user["exec"]["apiVersion"] = "client.authentication.k8s.io/v1alpha1"
    write_kubeconfig(path, server="https://x", user=user)
    with pytest.raises(ConfigError, match="v1alpha1"):
        resolve(kubeconfig=path)


def test_repr_and_describe_never_show_secrets(tmp_path: Path, pki: Pki) -> None:
    user = exec_user(tmp_path, "token")
    user["exec"]["env"].append({"name": "SECRET_ENV", "value": "env-secret-value"})
    user.update(
        token="very-secret-token",
        **{
            "client-certificate-data": b64(pki.client_cert_pem),
            "client-key-data": b64(pki.client_key_pem),
        },
    )
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    key_marker = pki.client_key_pem.decode().splitlines()[1]
    for text in (
        repr(cfg),
        str(cfg),
        describe(cfg),
        describe(cfg, gateway_identity=True),
        repr(GatewayAuth(token="very-secret-token")),
    ):
        assert "very-secret-token" not in text
        assert "env-secret-value" not in text
        assert key_marker not in text
    assert "token=<redacted>" in repr(cfg)
    assert "SECRET_ENV" in repr(cfg)
    assert "identity: caller's own credential" in describe(cfg)
    assert "GATEWAY'S OWN identity" in describe(cfg, gateway_identity=True)
    assert "TLS verified with the public CA bundle" in describe(cfg)


# --------------------------------------------------------------------------- exec plugins


@pytest.mark.parametrize(
    "api_version", ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"]
)
def test_exec_plugin_token_with_args_and_env(tmp_path: Path, api_version: str) -> None:
    user = exec_user(tmp_path, "token", api_version=api_version)
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    assert cfg.exec is not None
    plugin = ExecCredentialPlugin(cfg.exec)
    cred = plugin.credential()
    assert cred.token == "exec-p-1"  # mode from args, prefix from env
    assert cred.expires_at is None
    assert plugin.credential().token == "exec-p-1"  # no expiry: cached
    assert plugin.runs == 1
    assert "exec-p-1" not in repr(cred)


def test_exec_plugin_relative_command_runs_from_kubeconfig_dir(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "plugin"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\n{PLUGIN}")
    script.chmod(0o755)
    user = exec_user(tmp_path, "token")
    user["exec"].update(command="./bin/plugin", args=["token", "runs"])
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    assert cfg.exec is not None
    assert ExecCredentialPlugin(cfg.exec).credential().token == "exec-p-1"
    assert (tmp_path / "runs").read_text() == "1"


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("fail", "returned 3. plugin exploded"),
        ("garbage", "failed to decode"),
        ("wrong-version", "does not match"),
        ("empty", "neither a token nor"),
    ],
)
def test_exec_plugin_failures(tmp_path: Path, mode: str, message: str) -> None:
    user = exec_user(tmp_path, mode)
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    assert cfg.exec is not None
    with pytest.raises(ConfigError, match=message):
        ExecCredentialPlugin(cfg.exec).credential()


def test_exec_plugin_missing_command(tmp_path: Path) -> None:
    user = exec_user(tmp_path, "token")
    user["exec"].update(command=str(tmp_path / "absent"), installHint="install absent first")
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    assert cfg.exec is not None
    with pytest.raises(ConfigError, match=r"cannot be started.*install absent first"):
        ExecCredentialPlugin(cfg.exec).credential()


def test_exec_plugin_reruns_when_expired(tmp_path: Path) -> None:
    past = resolve(
        kubeconfig=write_kubeconfig(
            tmp_path / "past", server="https://x", user=exec_user(tmp_path, "token", expiry=PAST)
        )
    )
    assert past.exec is not None
    plugin = ExecCredentialPlugin(past.exec)
    assert [plugin.credential().token for _ in range(3)] == ["exec-p-1", "exec-p-2", "exec-p-3"]

    (tmp_path / "runs").unlink()
    future = resolve(
        kubeconfig=write_kubeconfig(
            tmp_path / "future",
            server="https://x",
            user=exec_user(tmp_path, "token", expiry=FUTURE),
        )
    )
    assert future.exec is not None
    now = [datetime.datetime(2998, 12, 31, tzinfo=datetime.UTC)]
    plugin = ExecCredentialPlugin(future.exec, clock=lambda: now[0])
    assert plugin.credential().token == "exec-p-1"
    assert plugin.credential().token == "exec-p-1"
    assert plugin.credential().expires_at == datetime.datetime(2999, 1, 1, tzinfo=datetime.UTC)
    now[0] = datetime.datetime(2999, 1, 1, 0, 0, 1, tzinfo=datetime.UTC)
    assert plugin.credential().token == "exec-p-2"
    assert plugin.runs == 2


async def test_exec_plugin_concurrent_refresh_runs_once(tmp_path: Path) -> None:
    user = exec_user(tmp_path, "token", expiry=FUTURE)
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    assert cfg.exec is not None
    plugin = ExecCredentialPlugin(cfg.exec)
    creds = await asyncio.gather(*(plugin.acredential() for _ in range(5)))
    assert {c.token for c in creds} == {"exec-p-1"}
    assert plugin.runs == 1


# --------------------------------------------------------------------------- TLS and identity


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


def test_plain_http_needs_a_flag_beyond_loopback(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "c", server="http://cluster.example.test:8080")
    with pytest.raises(ConfigError, match="plain http"):
        resolve(kubeconfig=path)
    with pytest.raises(ConfigError, match="plain http"):
        resolve(server="http://10.1.2.3:8080")
    assert resolve(kubeconfig=path, allow_insecure=True).server.startswith("http://")
    assert resolve(server="http://127.0.0.1:8080").server == "http://127.0.0.1:8080"


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


def test_token_file_rotation(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("one\n")
    now = [0.0]
    source = TokenFile(path, max_age=60.0, clock=lambda: now[0])
    assert source.read() == "one"
    path.write_text("two\n")
    assert source.read() == "one"  # within max_age
    now[0] = 61.0
    assert source.read() == "two"
    path.unlink()
    assert source.read(refresh=True) == "two"  # a failed re-read keeps the last token
    with pytest.raises(ConfigError, match="cannot be read"):
        TokenFile(path).read()


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
