"""Two real kube-apiservers served by one gateway, as clusters ``a`` and ``b``.

Each cluster is reached through its own kubeconfig (``--cluster``) and each endpoint
answers with its own cluster's data.  The admins' tokens are each cluster's own; alice's is
valid on both (one identity provider), and her rights differ: every verb in ``team-a`` on
``a``, only reading leases there on ``b``.  ``/fleet/graphql`` asks both at once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from gateway.settings import load
from tests.e2e.apiserver import KubeAPIServer, running_apiserver
from tests.gateway.test_fleet import serves, until
from tests.support.graphql import Gateway, data, gql, serve_app, ws_client

LEASES = '{ leases(namespace: "team-a") { items { metadata { name } } } }'


@pytest.fixture(scope="module")
def second_apiserver(kube_apiserver: KubeAPIServer) -> Iterator[KubeAPIServer]:
    with running_apiserver(tokens={"alice": kube_apiserver.tokens["alice"]}) as server:
        _alice_reads_leases_only(server)
        yield server


def _alice_reads_leases_only(server: KubeAPIServer) -> None:
    """On ``server``, alice may only read leases in team-a (her e2e binding is replaced)."""
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a"
    alice = server.headers("alice")
    with httpx.Client(
        base_url=server.url, verify=server.ssl_context(), headers=server.headers("admin")
    ) as admin:
        admin.delete(f"{rbac}/rolebindings/e2e-alice").raise_for_status()
        admin.post(
            f"{rbac}/roles",
            json={
                "metadata": {"name": "lease-reader"},
                "rules": [
                    {
                        "apiGroups": ["coordination.k8s.io"],
                        "resources": ["leases"],
                        "verbs": ["get", "list", "watch"],
                    }
                ],
            },
        ).raise_for_status()
        admin.post(
            f"{rbac}/rolebindings",
            json={
                "metadata": {"name": "lease-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "lease-reader",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}
                ],
            },
        ).raise_for_status()
        # RBAC is evaluated from an informer cache: wait until both changes count.
        deadline = time.monotonic() + 30
        while not (
            admin.get("/api/v1/namespaces/team-a/pods", headers=alice).status_code == 403
            and admin.get(
                "/apis/coordination.k8s.io/v1/namespaces/team-a/leases", headers=alice
            ).status_code
            == 200
        ):
            assert time.monotonic() < deadline, "alice's rights on b never changed"
            time.sleep(0.1)  # polling the apiserver's own answer, not standing in for it


def _lease(server: KubeAPIServer, name: str) -> None:
    with httpx.Client(
        base_url=server.url, verify=server.ssl_context(), headers=server.headers("admin")
    ) as client:
        response = client.post(
            "/apis/coordination.k8s.io/v1/namespaces/team-a/leases",
            json={"metadata": {"name": name}, "spec": {"holderIdentity": name}},
        )
        assert response.status_code == 201, response.text


async def test_two_apiservers_answer_each_at_its_own_endpoint(
    kube_apiserver: KubeAPIServer, second_apiserver: KubeAPIServer
) -> None:
    a, b = kube_apiserver, second_apiserver
    _lease(a, "fleet-only-in-a")
    _lease(b, "fleet-only-in-b")
    flags = ["--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0"]
    flags += ["--kubeconfig", a.kubeconfigs["admin"], "--log-level", "warning"]
    flags += [
        "--cluster",
        f"a={a.kubeconfigs['admin']}",
        "--cluster",
        f"b={b.kubeconfigs['admin']}",
        # alice's token is valid on both: one identity provider for her, so a listing may
        # ask each apiserver about a caller's token (forward mode sends it to no other)
        "--shared-identity-clusters",
        "a,b",
    ]
    async with (
        serve_app(load(flags, {})) as (url, app),
        httpx.AsyncClient(base_url=url, timeout=20) as client,
    ):
        fleet = app.state.runtime.fleet
        await until(fleet, serves("a", "b"))
        for name, server, mine, other in (
            ("a", a, "fleet-only-in-a", "fleet-only-in-b"),
            ("b", b, "fleet-only-in-b", "fleet-only-in-a"),
        ):
            body = await gql(
                client, LEASES, token=server.tokens["admin"], path=f"/clusters/{name}/graphql"
            )
            names = {i["metadata"]["name"] for i in data(body)["leases"]["items"]}
            assert mine in names and other not in names
        # One cluster's token means nothing to the other (each apiserver has its own).
        refused = await gql(client, LEASES, token=a.tokens["admin"], path="/clusters/b/graphql")
        assert refused["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        # alice (known on both) is shown every cluster...
        listed = data(
            await gql(client, "{ clusters { name server version ready } }", token=a.tokens["alice"])
        )["clusters"]
        assert [(c["name"], c["server"], c["ready"]) for c in listed] == [
            ("default", a.url, True),
            ("a", a.url, True),
            ("b", b.url, True),
        ]
        assert all(c["version"].startswith("v1.") for c in listed)
        # ...each admin only the clusters whose apiserver authenticates it (their own
        # SelfSubjectReview answers), in listings and in a NOT_FOUND alike
        for token, shown in ((a.tokens["admin"], ["default", "a"]), (b.tokens["admin"], ["b"])):
            body = await gql(client, "{ clusters { name } }", token=token)
            assert [c["name"] for c in data(body)["clusters"]] == shown
            missing = await gql(
                client, LEASES, token=token, path="/clusters/nope/graphql", expect=404
            )
            assert missing["errors"][0]["message"] == (
                'cluster "nope" is not served by this gateway; clusters you may see: '
                + ", ".join(shown)
            )


@contextlib.asynccontextmanager
async def _both(a: KubeAPIServer, b: KubeAPIServer) -> AsyncIterator[tuple[Gateway, Any]]:
    flags = ["--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0"]
    flags += ["--kubeconfig", a.kubeconfigs["admin"], "--log-level", "warning"]
    flags += ["--cluster", f"b={b.kubeconfigs['admin']}", "--shared-identity-clusters", "b"]
    async with (
        serve_app(load(flags, {})) as (url, app),
        httpx.AsyncClient(base_url=url, timeout=20) as client,
    ):
        await until(app.state.runtime.fleet, serves("b"))
        yield Gateway(url, app, None), client  # type: ignore[arg-type]


FLEET_READ = """query($clusters: [String!]) { fleet(clusters: $clusters) {
  cluster
  pods(namespace: "team-a") { items { metadata { name } } }
  leases(namespace: "team-a") { items { metadata { name } } }
} }"""


async def test_a_fleet_query_answers_each_cluster_by_its_own_rbac(
    kube_apiserver: KubeAPIServer, second_apiserver: KubeAPIServer
) -> None:
    a, b = kube_apiserver, second_apiserver
    _lease(a, "fleet-rbac-a")
    _lease(b, "fleet-rbac-b")
    async with _both(a, b) as (_, client):
        body = await gql(client, FLEET_READ, token=a.tokens["alice"], path="/fleet/graphql")
        default, other = body["data"]["fleet"]
        assert (default["cluster"], other["cluster"]) == ("default", "b")
        leases = {i["metadata"]["name"] for i in default["leases"]["items"]}
        assert "fleet-rbac-a" in leases and "fleet-rbac-b" not in leases
        assert default["pods"] is not None  # alice may list pods on a
        assert {i["metadata"]["name"] for i in other["leases"]["items"]} >= {"fleet-rbac-b"}
        assert other["pods"] is None  # ...and not on b: that field alone fails
        (error,) = body["errors"]
        assert error["path"] == ["fleet", 1, "pods"]
        assert error["extensions"]["code"] == "FORBIDDEN"
        assert error["extensions"]["cluster"] == "b"
        assert 'User "alice" cannot list resource "pods"' in error["message"]

        # a's admin token means nothing to b: b is not in its default set...
        body = await gql(client, FLEET_READ, token=a.tokens["admin"], path="/fleet/graphql")
        assert [m["cluster"] for m in data(body)["fleet"]] == ["default"]
        # ...and named, b's part is UNAUTHENTICATED, a's answers.
        body = await gql(
            client,
            FLEET_READ,
            {"clusters": ["default", "b"]},
            token=a.tokens["admin"],
            path="/fleet/graphql",
        )
        assert body["data"]["fleet"][0]["leases"] is not None
        codes = {(tuple(e["path"]), e["extensions"]["code"]) for e in body["errors"]}
        assert codes == {
            (("fleet", 1, "pods"), "UNAUTHENTICATED"),
            (("fleet", 1, "leases"), "UNAUTHENTICATED"),
        }


async def test_a_fleet_watch_merges_two_apiservers(
    kube_apiserver: KubeAPIServer, second_apiserver: KubeAPIServer
) -> None:
    a, b = kube_apiserver, second_apiserver
    query = """subscription { watchLeases(namespace: "team-a") {
      cluster type object { metadata { name } } } }"""
    async with (
        _both(a, b) as (served, _),
        ws_client(
            served,
            path="/fleet/graphql",
            payload={"Authorization": f"Bearer {a.tokens['alice']}"},
        ) as ws,
    ):
        op = await ws.subscribe(query)
        # Each lease comes in its cluster's initial events or live, whichever is first.
        wanted = {("default", "fleet-watch-a"), ("b", "fleet-watch-b")}
        _lease(a, "fleet-watch-a")
        _lease(b, "fleet-watch-b")
        got: set[tuple[str, str]] = set()
        while not wanted <= got:
            event = (await ws.next(op, timeout=20))["data"]["watchLeases"]
            got.add((event["cluster"], event["object"]["metadata"]["name"]))
        mine = {(c, n) for c, n in got if n.startswith("fleet-")}
        assert all(name.endswith("-a") == (cluster == "default") for cluster, name in mine)
