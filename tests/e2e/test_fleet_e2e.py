"""Two real kube-apiservers served by one gateway, as clusters ``a`` and ``b``.

Each cluster is reached through its own kubeconfig (``--cluster``), each caller's token is
that cluster's own, and each endpoint answers with its own cluster's data.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gateway.settings import load
from tests.e2e.apiserver import KubeAPIServer, running_apiserver
from tests.gateway.test_fleet import serves, until
from tests.support.graphql import data, gql, serve_app

LEASES = '{ leases(namespace: "team-a") { items { metadata { name } } } }'


@pytest.fixture(scope="module")
def second_apiserver() -> Iterator[KubeAPIServer]:
    with running_apiserver() as server:
        yield server


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
        listed = data(
            await gql(client, "{ clusters { name server version ready } }", token=a.tokens["admin"])
        )["clusters"]
        assert [(c["name"], c["server"], c["ready"]) for c in listed] == [
            ("default", a.url, True),
            ("a", a.url, True),
            ("b", b.url, True),
        ]
        assert all(c["version"].startswith("v1.") for c in listed)
