"""Impersonate mode between two real kube-apiservers, with a TLS tap in front of each.

Cluster ``a`` (the home cluster, also the default) and cluster ``b`` each give the gateway a
ServiceAccount of its own, bound to exactly the RBAC of ``deploy/identity/
impersonate-rbac.yaml`` (impersonate users, groups, service accounts, uids and extras; on
the home cluster ``system:auth-delegator`` too).  alice may read leases in ``team-a`` on
``a`` only (``b`` has her binding removed).  Through the gateway in impersonate mode alice
reads ``a`` and is refused by ``b``'s own RBAC, on GraphQL and gRPC; her token reaches no
cluster but inside ``a``'s TokenReview bodies, and neither cluster's gateway token ever
reaches the other: each tap terminates TLS and keeps every byte the gateway sent.  A
ServiceAccount caller (a TokenRequest token, whose review carries the ``credential-id``
extra) is served by ``a`` through the same RBAC, not carried to ``b``, and its
subscription ends once its ServiceAccount is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import yaml
from websockets.asyncio.client import connect

from gateway.grpc.gen.kubegateway.v1 import leases_pb2, leases_pb2_grpc
from gateway.settings import load
from tests.e2e.apiserver import KubeAPIServer, _apply, running_apiserver
from tests.gateway.test_fleet import serves, until
from tests.support.graphql import data, error_of, gql, serve_app
from tests.support.pki import make_ca, make_leaf, pem_cert
from tests.support.tap import requests_carrying

REPO = Path(__file__).resolve().parents[2]
RBAC = REPO / "deploy" / "identity" / "impersonate-rbac.yaml"
LEASES = '{ leases(namespace: "team-a") { items { metadata { name } } } }'
REVIEWS = b"/apis/authentication.k8s.io/v1/tokenreviews"
ROLEBINDINGS = "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings"
LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/team-a/leases"


@pytest.fixture(scope="module")
def cluster_b() -> Iterator[KubeAPIServer]:
    """A second apiserver of this module's own, where alice may read nothing."""
    with running_apiserver() as server:
        with _admin(server) as admin:
            gone = admin.delete(f"{ROLEBINDINGS}/e2e-alice")
            assert gone.status_code in (200, 404), gone.text
            # RBAC is evaluated from an informer cache: wait until the removal counts.
            _until(
                lambda: admin.get(LEASES_PATH, headers=server.headers("alice")).status_code == 403
            )
        yield server


def _until(holds: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll the apiserver until ``holds()`` (its RBAC cache settles within a second)."""
    deadline = time.monotonic() + timeout
    while not holds():
        assert time.monotonic() < deadline, "the apiserver's RBAC did not settle"
        time.sleep(0.1)


def _admin(server: KubeAPIServer) -> httpx.Client:
    return httpx.Client(
        base_url=server.url,
        verify=server.ssl_context(),
        headers=server.headers("admin"),
        timeout=20,
    )


def _gateway_token(server: KubeAPIServer) -> str:
    """A token of the ServiceAccount kube-system/kube-gateway, bound to the documented RBAC."""
    with _admin(server) as admin:
        made = admin.post(
            "/api/v1/namespaces/kube-system/serviceaccounts",
            json={"metadata": {"name": "kube-gateway"}},
        )
        assert made.status_code in (201, 409), made.text
        _apply(admin, RBAC)
        minted = admin.post(
            "/api/v1/namespaces/kube-system/serviceaccounts/kube-gateway/token",
            json={"spec": {"expirationSeconds": 3600}},
        )
        assert minted.status_code == 201, minted.text
        token: str = minted.json()["status"]["token"]

        def may_impersonate() -> bool:
            review = admin.post(
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                headers={"Authorization": f"Bearer {token}"},
                json={
                    "kind": "SelfSubjectAccessReview",
                    "apiVersion": "authorization.k8s.io/v1",
                    "spec": {"resourceAttributes": {"verb": "impersonate", "resource": "users"}},
                },
            )
            return review.status_code == 201 and review.json()["status"]["allowed"] is True

        _until(may_impersonate)
        return token


def _lease(server: KubeAPIServer, name: str) -> None:
    with _admin(server) as admin:
        made = admin.post(
            "/apis/coordination.k8s.io/v1/namespaces/team-a/leases",
            json={"metadata": {"name": name}, "spec": {"holderIdentity": name}},
        )
        assert made.status_code in (201, 409), made.text


@dataclass(eq=False)
class TlsTap:
    """A TLS-terminating proxy in front of an apiserver that keeps what its clients sent.

    It serves a certificate of its own CA (the gateway's kubeconfig trusts that CA) and
    calls the apiserver over TLS trusting the apiserver's CA; bytes are kept in the clear.
    """

    server: KubeAPIServer
    workdir: Path
    from_client: bytearray = field(default_factory=bytearray)
    port: int = 0
    ca_file: Path | None = None
    _listener: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def __aenter__(self) -> TlsTap:
        ca_key, ca_cert = make_ca("tap-ca")
        cert, key = make_leaf(ca_key, ca_cert, "127.0.0.1", server=True)
        self.ca_file = self.workdir / "tap-ca.pem"
        self.ca_file.write_bytes(pem_cert(ca_cert))
        (self.workdir / "tap.pem").write_bytes(cert)
        (self.workdir / "tap.key").write_bytes(key)
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(self.workdir / "tap.pem", self.workdir / "tap.key")
        serving.set_alpn_protocols(["http/1.1"])
        self._listener = await asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=serving)
        self.port = int(self._listener.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._listener is not None
        self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # A pipe cancelled before it ever ran closed nothing: every socket is closed here.
        for writer in self._writers:
            writer.transport.abort()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = int(self.server.url.rsplit(":", 1)[1])
        self._writers.append(writer)
        up_reader, up_writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=self.server.ssl_context(), server_hostname="127.0.0.1"
        )
        self._writers.append(up_writer)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, keep: bool) -> None:
            try:
                with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                    while chunk := await src.read(65536):
                        if keep:
                            self.from_client += chunk
                        dst.write(chunk)
                        await dst.drain()
            finally:  # cancelled at the tap's exit too: its sockets never wait for the GC
                with contextlib.suppress(Exception):
                    dst.close()
                    await asyncio.wait_for(dst.wait_closed(), 2)
                # A TLS close waits for the peer's close_notify, which a peer that went
                # away never sends: the socket is closed now, whatever that wait did.
                dst.transport.abort()

        for task in (
            asyncio.create_task(pipe(reader, up_writer, True)),
            asyncio.create_task(pipe(up_reader, writer, False)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


def _kubeconfig(path: Path, tap: TlsTap, token: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": tap.url, "certificate-authority": str(tap.ca_file)},
                    }
                ],
                "users": [{"name": "gateway", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "gateway"}}],
                "current-context": "c",
            }
        )
    )
    return path


@contextlib.asynccontextmanager
async def impersonating(
    a: KubeAPIServer, b: KubeAPIServer, workdir: Path, *more: str
) -> AsyncIterator[tuple[str, Any, httpx.AsyncClient, TlsTap, TlsTap, dict[str, str]]]:
    own = {"a": _gateway_token(a), "b": _gateway_token(b)}
    (workdir / "a").mkdir()
    (workdir / "b").mkdir()
    async with TlsTap(a, workdir / "a") as tap_a, TlsTap(b, workdir / "b") as tap_b:
        config_a = _kubeconfig(workdir / "a.yaml", tap_a, own["a"])
        config_b = _kubeconfig(workdir / "b.yaml", tap_b, own["b"])
        flags = ["--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0"]
        flags += ["--kubeconfig", str(config_a), "--no-discovery", "--log-level", "warning"]
        flags += ["--cluster", f"a={config_a}", "--cluster", f"b={config_b}"]
        flags += ["--identity", "impersonate", "--home-cluster", "a", *more]
        async with (
            serve_app(load(flags, {})) as (url, app),
            httpx.AsyncClient(base_url=url, timeout=20) as client,
        ):
            await until(app.state.runtime.fleet, serves("a", "b"))
            yield url, app, client, tap_a, tap_b, own


async def test_alice_reads_a_only_and_no_token_crosses_clusters(
    kube_apiserver: KubeAPIServer, cluster_b: KubeAPIServer, tmp_path: Path
) -> None:
    a, b = kube_apiserver, cluster_b
    _lease(a, "imp-only-in-a")
    _lease(b, "imp-only-in-b")
    alice = a.tokens["alice"]
    async with impersonating(a, b, tmp_path) as (_, app, client, tap_a, tap_b, own):
        for path in ("/clusters/a/graphql", "/graphql"):
            body = await gql(client, LEASES, token=alice, path=path)
            names = {i["metadata"]["name"] for i in data(body)["leases"]["items"]}
            assert "imp-only-in-a" in names and "imp-only-in-b" not in names
        refused = error_of(await gql(client, LEASES, token=alice, path="/clusters/b/graphql"))
        assert refused["extensions"]["code"] == "FORBIDDEN"
        assert 'User "alice" cannot list resource "leases"' in refused["message"]
        # b's own token of alice means nothing: only the home cluster authenticates.
        unknown = error_of(
            await gql(client, LEASES, token=b.tokens["alice"], path="/clusters/b/graphql")
        )
        assert unknown["extensions"]["code"] == "UNAUTHENTICATED"

        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.state.runtime.grpc_port}") as ch:
            stub = leases_pb2_grpc.LeaseServiceStub(ch)
            auth = (("authorization", f"Bearer {alice}"),)
            listed = await stub.List(
                leases_pb2.ListLeasesRequest(namespace="team-a"),
                metadata=(*auth, ("x-kube-cluster", "a")),
            )
            assert "imp-only-in-a" in {item.metadata.name for item in listed.items}
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await stub.List(
                    leases_pb2.ListLeasesRequest(namespace="team-a"),
                    metadata=(*auth, ("x-kube-cluster", "b")),
                )
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
            with pytest.raises(grpc.aio.AioRpcError) as chosen:
                await stub.List(
                    leases_pb2.ListLeasesRequest(namespace="team-a"),
                    metadata=(*auth, ("impersonate-user", "admin")),
                )
            assert chosen.value.code() == grpc.StatusCode.PERMISSION_DENIED

        # A caller may not choose whom the gateway impersonates.
        chosen_http = await client.post(
            "/clusters/b/graphql",
            json={"query": LEASES},
            headers={"Authorization": f"Bearer {alice}", "Impersonate-User": "admin"},
        )
        assert chosen_http.status_code == 403
        assert chosen_http.json()["errors"][0]["extensions"]["code"] == "FORBIDDEN"

        wire_a, wire_b = bytes(tap_a.from_client), bytes(tap_b.from_client)
        # Each cluster saw its own gateway token, never the other's.
        assert f"Bearer {own['a']}".encode() in wire_a and own["b"].encode() not in wire_a
        assert f"Bearer {own['b']}".encode() in wire_b and own["a"].encode() not in wire_b
        # alice was impersonated on b; her token never reached b ...
        assert b"impersonate-user: alice\r\n" in wire_b.lower()
        assert b"impersonate-uid: uid-alice\r\n" in wire_b.lower()
        assert alice.encode() not in wire_b
        assert b"impersonate-user: admin" not in wire_b.lower()
        # ... and reached a only inside TokenReview bodies, never as a credential.
        carrying = requests_carrying(wire_a, alice.encode())
        assert carrying and all(REVIEWS in line for line in carrying), carrying
        assert f"Bearer {alice}".encode() not in wire_a
        assert f"Bearer {b.tokens['alice']}".encode() not in wire_a + wire_b


ROBOT = "/api/v1/namespaces/team-a/serviceaccounts/e2e-robot"
WATCH = 'subscription { watchLeases(namespace: "team-a") { type object { metadata { name } } } }'


def _robot_token(server: KubeAPIServer) -> str:
    """A TokenRequest token of the ServiceAccount team-a/e2e-robot, bound to alice's Role
    in team-a (its TokenReview carries the extra ``authentication.kubernetes.io/
    credential-id``)."""
    with _admin(server) as admin:
        made = admin.post(
            "/api/v1/namespaces/team-a/serviceaccounts", json={"metadata": {"name": "e2e-robot"}}
        )
        assert made.status_code in (201, 409), made.text
        bound = admin.post(
            ROLEBINDINGS,
            json={
                "metadata": {"name": "e2e-robot"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "e2e-alice",
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": "e2e-robot", "namespace": "team-a"}
                ],
            },
        )
        assert bound.status_code in (201, 409), bound.text
        minted = admin.post(f"{ROBOT}/token", json={"spec": {"expirationSeconds": 3600}})
        assert minted.status_code == 201, minted.text
        token: str = minted.json()["status"]["token"]
        _until(
            lambda: (
                admin.get(LEASES_PATH, headers={"Authorization": f"Bearer {token}"}).status_code
                == 200
            )
        )
        return token


async def _subscribe(ws: Any, token: str) -> None:
    await ws.send(json.dumps({"type": "connection_init", "payload": {"authToken": token}}))
    assert json.loads(await ws.recv())["type"] == "connection_ack"
    await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": WATCH}}))


async def _frame(ws: Any) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 30))
    return frame


async def _added(ws: Any, name: str) -> None:
    """Read ``ws``'s events until the ADDED of lease ``name`` (an error fails)."""
    async with asyncio.timeout(30):
        while True:
            frame = await _frame(ws)
            assert frame["type"] == "next" and not frame["payload"].get("errors"), frame
            event = frame["payload"]["data"]["watchLeases"]
            if event["type"] == "ADDED" and event["object"]["metadata"]["name"] == name:
                return


async def test_a_service_account_is_served_at_home_and_its_subscription_ends_with_its_token(
    kube_apiserver: KubeAPIServer, cluster_b: KubeAPIServer, tmp_path: Path
) -> None:
    """A ServiceAccount caller (a TokenRequest token) through the documented RBAC: served
    by the home cluster (its extra ``credential-id`` impersonated), refused by b (a
    ``system:`` user is not carried), and its subscription ends ``UNAUTHENTICATED`` soon
    after its ServiceAccount is deleted, while alice's subscription beside it goes on."""
    a, b = kube_apiserver, cluster_b
    _lease(a, "robot-before")
    robot = _robot_token(a)
    async with impersonating(a, b, tmp_path, "--token-recheck-seconds", "1") as (
        url,
        _app,
        client,
        tap_a,
        tap_b,
        _,
    ):
        for path in ("/clusters/a/graphql", "/graphql"):
            body = await gql(client, LEASES, token=robot, path=path)
            assert "robot-before" in {i["metadata"]["name"] for i in data(body)["leases"]["items"]}
        refused = error_of(await gql(client, LEASES, token=robot, path="/clusters/b/graphql"))
        assert refused["extensions"]["code"] == "FORBIDDEN"
        assert "is not carried to this cluster" in refused["message"]
        shown = data(await gql(client, "{ clusters { name } }", token=robot))["clusters"]
        assert "b" not in {c["name"] for c in shown} and "a" in {c["name"] for c in shown}
        wire_a = bytes(tap_a.from_client).lower()
        assert b"impersonate-extra-authentication.kubernetes.io%2fcredential-id: jti=" in wire_a
        assert b"impersonate-user: system:serviceaccount:team-a:e2e-robot\r\n" in wire_a
        assert b"e2e-robot" not in bytes(tap_b.from_client)

        ws_url = url.replace("http", "ws") + "/clusters/a/graphql"
        async with (
            connect(ws_url, subprotocols=["graphql-transport-ws"]) as doomed,  # type: ignore[list-item]
            connect(ws_url, subprotocols=["graphql-transport-ws"]) as neighbour,  # type: ignore[list-item]
        ):
            await _subscribe(doomed, robot)
            await _subscribe(neighbour, a.tokens["alice"])
            await _added(doomed, "robot-before")
            await _added(neighbour, "robot-before")

            with _admin(a) as admin:
                gone = admin.delete(ROBOT)
                assert gone.status_code == 200, gone.text
            deleted = time.monotonic()
            async with asyncio.timeout(60):
                while (frame := await _frame(doomed))["type"] == "next" and not frame[
                    "payload"
                ].get("errors"):
                    pass
            took = time.monotonic() - deleted
            payload = frame["payload"]
            error = payload[0] if isinstance(payload, list) else payload["errors"][0]
            assert error["extensions"]["code"] == "UNAUTHENTICATED", frame
            assert took < 20, took  # a recheck of 1 s (and a kept answer of 1 s at most)
            again = error_of(await gql(client, LEASES, token=robot, path="/clusters/a/graphql"))
            assert again["extensions"]["code"] == "UNAUTHENTICATED"

            started = time.monotonic()
            _lease(a, "robot-after")
            await _added(neighbour, "robot-after")
            assert time.monotonic() - started < 10
