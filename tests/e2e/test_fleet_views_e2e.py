"""A view merged across two real kube-apiservers on ``/fleet/graphql``.

The gateway of ``test_fleet_e2e.py`` (clusters ``default``, the suite's apiserver, and ``b``,
a second one where alice may only read leases in ``team-a``): alice's merged view of leases
is both clusters' leases in one global order (the same lease names in both: ties broken by
the cluster's name), equal to the test's own merge of both apiservers' lists; her merged
view of pods is the default cluster's pods, with b's refusal as b's own error.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e import test_fleet_e2e as fleet_e2e
from tests.e2e.apiserver import KubeAPIServer
from tests.support.graphql import gql, ws_client

__all__ = ["second_apiserver"]  # fixtures

second_apiserver = fleet_e2e.second_apiserver
NS = "team-a"
FLEET = "/fleet/graphql"
LEASES = 12
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"

VIEW = """query($after: String) {
  leasesView(namespace: "team-a", first: 5, after: $after,
             sort: [{field: "spec.holderIdentity", order: DESC}]) {
    total pageInfo { hasNextPage endCursor }
    edges { cluster node { metadata { name } spec { holderIdentity } } }
    clusters { cluster total error { code } }
  }
}"""


def _leases(server: KubeAPIServer, cluster: str) -> list[tuple[str, str, str]]:
    """(holderIdentity, name, cluster) of every lease in team-a (read as the admin)."""
    with httpx.Client(
        base_url=server.url, verify=server.ssl_context(), headers=server.headers("admin")
    ) as admin:
        items = admin.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases").json()["items"]
    return [
        ((i.get("spec") or {}).get("holderIdentity") or "", i["metadata"]["name"], cluster)
        for i in items
    ]


def _make(server: KubeAPIServer, leases: list[tuple[str, str]]) -> None:
    with httpx.Client(
        base_url=server.url, verify=server.ssl_context(), headers=server.headers("admin")
    ) as admin:
        for name, holder in leases:
            made = admin.post(
                f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
                json={"metadata": {"name": name}, "spec": {"holderIdentity": holder}},
            )
            assert made.status_code in (201, 409), made.text


def _clean(server: KubeAPIServer) -> None:
    """Delete this module's pods and leases (the apiserver is the session's)."""
    with httpx.Client(
        base_url=server.url, verify=server.ssl_context(), headers=server.headers("admin")
    ) as admin:
        for path in (f"/api/v1/namespaces/{NS}/pods", LEASE_PATH):
            for item in admin.get(path).json()["items"]:
                name = item["metadata"]["name"]
                if name.startswith("merged-"):
                    admin.delete(f"{path}/{name}", params={"gracePeriodSeconds": 0})


def _pods(server: KubeAPIServer, count: int) -> None:
    with httpx.Client(
        base_url=server.url, verify=server.ssl_context(), headers=server.headers("admin")
    ) as admin:
        for i in range(count):
            made = admin.post(
                f"/api/v1/namespaces/{NS}/pods",
                json={
                    "metadata": {"name": f"merged-pod-{i}"},
                    "spec": {"containers": [{"name": "c", "image": "example.com/x"}]},
                },
            )
            assert made.status_code in (201, 409), made.text


async def _walk(client: httpx.AsyncClient, token: str) -> tuple[list[str], list[dict[str, Any]]]:
    names: list[str] = []
    pages = []
    after = None
    for _ in range(200):
        body = await gql(client, VIEW, {"after": after}, token=token, path=FLEET)
        assert "errors" not in body, body
        view = body["data"]["leasesView"]
        pages.append(view)
        names += [f"{e['cluster']}:{e['node']['metadata']['name']}" for e in view["edges"]]
        if not view["pageInfo"]["hasNextPage"]:
            return names, pages
        after = view["pageInfo"]["endCursor"]
    raise AssertionError("the pages never ended")


async def test_a_merged_view_over_two_apiservers_is_one_global_order_and_partial_on_refusal(
    kube_apiserver: KubeAPIServer, second_apiserver: KubeAPIServer
) -> None:
    a, b = kube_apiserver, second_apiserver
    # the same names in both clusters, holders that interleave and tie across them
    _make(a, [(f"merged-{i:02d}", f"holder-{i % 5}") for i in range(LEASES)])
    _make(b, [(f"merged-{i:02d}", f"holder-{(i * 3) % 7}") for i in range(LEASES)])
    _pods(a, 3)
    try:
        await _check(a, b)
    finally:
        _clean(a)
        _clean(b)


async def _check(a: KubeAPIServer, b: KubeAPIServer) -> None:
    own = sorted([*_leases(a, "default"), *_leases(b, "b")], key=lambda t: (t[1], t[2]))
    own.sort(key=lambda t: t[0], reverse=True)  # stable: name, then cluster, break ties
    alice = a.tokens["alice"]
    async with fleet_e2e._both(a, b) as (_, client):
        names, pages = await _walk(client, alice)
        assert names == [f"{cluster}:{name}" for _, name, cluster in own]
        assert {n.split(":")[0] for n in names} == {"default", "b"}
        assert len(pages) > 2 and pages[-1]["total"] == len(own)
        assert [(c["cluster"], c["error"]) for c in pages[-1]["clusters"]] == [
            ("default", None),
            ("b", None),
        ]
        # pods: alice may list them in team-a on the default cluster only
        pods = """{ podsView(namespace: "team-a", first: 500) {
            total edges { cluster } clusters { cluster total error { code } } } }"""
        body = await gql(client, pods, token=alice, path=FLEET)
        view = body["data"]["podsView"]
        assert {e["cluster"] for e in view["edges"]} <= {"default"}
        async with httpx.AsyncClient(
            base_url=a.url, verify=a.ssl_context(), headers=a.headers("admin")
        ) as admin:
            listed = (await admin.get(f"/api/v1/namespaces/{NS}/pods")).json()["items"]
        assert view["total"] == len(listed) == len(view["edges"]) >= 3
        default, other = view["clusters"]
        assert default == {"cluster": "default", "total": len(listed), "error": None}
        assert other == {"cluster": "b", "total": None, "error": {"code": "FORBIDDEN"}}
        (error,) = body["errors"]
        assert (error["extensions"]["code"], error["extensions"]["cluster"]) == ("FORBIDDEN", "b")
        assert error["path"] == ["podsView", "clusters", 1, "total"]


LIVE = """subscription {
  leasesView(namespace: "team-a", first: 4, filter: {field: "metadata.name", op: PREFIX,
             value: "livefleet-"}, sort: [{field: "spec.holderIdentity", order: DESC}]) {
    total
    edges { cluster node { metadata { name } spec { holderIdentity } } }
    clusters { cluster total error { code } }
  }
}"""

LIVE_PODS = """subscription {
  podsView(namespace: "team-a", sort: [{field: "metadata.name"}], first: 500) {
    total edges { cluster node { metadata { name } } } clusters { cluster error { code } }
  }
}"""


def _holders(view: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (e["node"]["spec"]["holderIdentity"], e["node"]["metadata"]["name"], e["cluster"])
        for e in view["edges"]
    ]


async def test_a_live_fleet_view_over_two_apiservers_follows_both_and_is_partial_on_refusal(
    kube_apiserver: KubeAPIServer, second_apiserver: KubeAPIServer
) -> None:
    a, b = kube_apiserver, second_apiserver
    _make(a, [(f"livefleet-{i}", f"holder-{i * 2}") for i in range(3)])
    _make(b, [(f"livefleet-{i}", f"holder-{i * 2 + 1}") for i in range(3)])
    alice = a.tokens["alice"]
    try:
        async with (
            fleet_e2e._both(a, b) as (gateway, _client),
            ws_client(gateway, path=FLEET, payload={"Authorization": f"Bearer {alice}"}) as ws,
        ):
            # leases: alice may read team-a's in both clusters; one global order
            op = await ws.subscribe(LIVE)
            first = (await ws.next(op, timeout=60))["data"]["leasesView"]
            assert _holders(first) == [
                ("holder-5", "livefleet-2", "b"),
                ("holder-4", "livefleet-2", "default"),
                ("holder-3", "livefleet-1", "b"),
                ("holder-2", "livefleet-1", "default"),
            ]
            assert first["total"] == 6
            # a visible change in b: its lease moves to the top
            async with httpx.AsyncClient(
                base_url=b.url, verify=b.ssl_context(), headers=b.headers("admin")
            ) as admin:
                patched = await admin.patch(
                    f"{LEASE_PATH}/livefleet-0",
                    json={"spec": {"holderIdentity": "holder-9"}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
                assert patched.status_code == 200, patched.text
            update = (await ws.next(op, timeout=60))["data"]["leasesView"]
            assert _holders(update)[0] == ("holder-9", "livefleet-0", "b")
            assert update["total"] == 6

            # pods: the default cluster's, b's refusal its own, the default still live
            pods = await ws.subscribe(LIVE_PODS)
            body = await ws.next(pods, timeout=60)
            view = body["data"]["podsView"]
            assert {e["cluster"] for e in view["edges"]} <= {"default"}
            assert view["clusters"][1] == {"cluster": "b", "error": {"code": "FORBIDDEN"}}
            _pods(a, 1)  # merged-pod-0, cleaned by _clean
            while True:
                view = (await ws.next(pods, timeout=60))["data"]["podsView"]
                names = [e["node"]["metadata"]["name"] for e in view["edges"]]
                if "merged-pod-0" in names:
                    break
            assert view["clusters"][1]["error"] == {"code": "FORBIDDEN"}
    finally:
        for server in (a, b):
            with httpx.Client(
                base_url=server.url, verify=server.ssl_context(), headers=server.headers("admin")
            ) as admin:
                for i in range(3):
                    admin.delete(f"{LEASE_PATH}/livefleet-{i}")
            _clean(server)
