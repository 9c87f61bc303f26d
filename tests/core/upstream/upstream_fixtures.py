"""Shared pieces of the upstream configuration tests (``test_config``, ``test_kubeconfig``,
``test_auth``, ``test_client``): a throwaway PKI, kubeconfig files written for real, an exec
plugin run as a subprocess, and a TLS server on a loopback port (HTTP/1.1 and HTTP/2 by ALPN)
that reports what the client presented: its Authorization header, its client certificate,
SNI and protocol.  Test modules import what they use from here
(``from tests.core.upstream.upstream_fixtures import ...``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
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

from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.kubeconfig import resolve_upstream
from tests.support.pki import make_ca, make_leaf, pem_cert

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


def make_service_account(directory: Path, ca: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text("sa-token-1\n")
    (directory / "ca.crt").write_bytes(ca)
    (directory / "namespace").write_text("gateway-ns")
    return directory
