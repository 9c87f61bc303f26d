"""``/fleet/graphql``: one query or subscription over every cluster, per-cluster answers.

Two demo upstreams are two clusters (``default`` and ``b``), each with data of its own and,
where a test says so, its own RBAC; a third name may be asked for and is not served.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.core.registry import EVENT, POD
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.auth import DEFAULT_TOKENS, TokenGrant
from tests.gateway.test_fleet import gateway, kubeconfig, lease, serves, until
from tests.support.graphql import NAMESPACE, TransportWS, data, gql, unique, ws_client

FLEET = "/fleet/graphql"
ALICE = "alice-token"

LEASES = """query($clusters: [String!]) {
  fleet(clusters: $clusters) {
    cluster
    error { code message }
    leases(namespace: "demo") { items { metadata { name } } }
  }
}"""


def names(member: dict[str, Any]) -> set[str]:
    return {item["metadata"]["name"] for item in member["leases"]["items"]}


@contextlib.asynccontextmanager
async def fleet_of(
    a: DemoUpstream, b: DemoUpstream, tmp_path: Path
) -> AsyncIterator[tuple[Any, Any, Any]]:
    config = kubeconfig(tmp_path / "b.yaml", b.url)
    async with gateway(a, "--cluster", f"b={config}") as (served, fleet, client):
        await until(fleet, serves("b"))
        yield served, fleet, client


@pytest.fixture
async def two() -> AsyncIterator[tuple[DemoUpstream, DemoUpstream]]:
    """Cluster b lets alice into namespace ``elsewhere`` only (a: ``demo``)."""
    tokens = {**DEFAULT_TOKENS, ALICE: TokenGrant("alice", frozenset({"elsewhere"}))}
    async with DemoUpstream() as a, DemoUpstream(tokens=tokens) as b:
        await lease(a, "only-in-a")
        await lease(b, "only-in-b")
        yield a, b


async def test_a_fleet_query_answers_per_cluster_concurrently(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    async with fleet_of(a, b, tmp_path) as (_, fleet, client):
        body = data(await gql(client, LEASES, path=FLEET))
        members = body["fleet"]
        assert [m["cluster"] for m in members] == ["default", "b"]  # every cluster, in order
        assert "only-in-a" in names(members[0]) and "only-in-b" not in names(members[0])
        assert "only-in-b" in names(members[1]) and "only-in-a" not in names(members[1])
        assert all(m["error"] is None for m in members)

        # Named clusters, in the order named, each once.
        body = data(await gql(client, LEASES, {"clusters": ["b", "default", "b"]}, path=FLEET))
        assert [m["cluster"] for m in body["fleet"]] == ["b", "default"]

        # The listing of the served clusters is there too.
        listed = data(await gql(client, "{ clusters { name ready } }", path=FLEET))
        assert [c["name"] for c in listed["clusters"]] == fleet.names()


async def test_a_cluster_that_refuses_the_caller_fails_alone(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    async with fleet_of(a, b, tmp_path) as (_, _fleet, client):
        query = LEASES.replace(
            "cluster\n",
            'cluster\n    podCount: pods(namespace: "demo") { items { metadata { name } } }\n',
        )
        body = await gql(
            client, query, {"clusters": ["default", "b", "nope"]}, token=ALICE, path=FLEET
        )
        members = body["data"]["fleet"]
        assert [m["cluster"] for m in members] == ["default", "b", "nope"]
        assert "only-in-a" in names(members[0])  # alice may read demo in a
        assert members[1]["leases"] is None and members[1]["podCount"] is None
        assert members[1]["error"] is None  # b answers; it refuses these fields
        assert members[2]["error"]["code"] == "NotFound"
        assert 'cluster "nope" is not served' in members[2]["error"]["message"]
        by_path = {tuple(e["path"]): e for e in body["errors"]}
        for field in ("leases", "podCount"):
            refused = by_path[("fleet", 1, field)]
            assert refused["extensions"]["code"] == "FORBIDDEN", refused
            assert refused["extensions"]["cluster"] == "b"
            missing = by_path[("fleet", 2, field)]
            assert missing["extensions"]["code"] == "NOT_FOUND"
            assert missing["extensions"]["cluster"] == "nope"
        assert len(body["errors"]) == 4  # none for cluster default


async def test_relations_of_a_member_load_from_its_own_cluster(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    pod = unique("pod")
    for demo, reason in ((a, "InA"), (b, "InB")):
        created = await demo.store.create(
            POD,
            {"metadata": {"name": pod}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
            namespace=NAMESPACE,
        )
        await demo.store.create(
            EVENT,
            {
                "metadata": {"name": f"{pod}.{reason.lower()}"},
                "involvedObject": {
                    "kind": "Pod",
                    "namespace": NAMESPACE,
                    "name": pod,
                    "uid": created["metadata"]["uid"],
                },
                "reason": reason,
                "message": reason,
            },
            namespace=NAMESPACE,
        )
    select = f'pod(namespace: "demo", name: "{pod}") {{ events {{ reason }} }}'
    query = f"{{ fleet {{ cluster {select} }} }}"
    async with fleet_of(a, b, tmp_path) as (_, _fleet, client):
        members = data(await gql(client, query, path=FLEET))["fleet"]
        reasons = {m["cluster"]: [e["reason"] for e in m["pod"]["events"]] for m in members}
        assert reasons == {"default": ["InA"], "b": ["InB"]}


WATCH = """subscription($clusters: [String!], $resumeFrom: JSON) {
  watchLeases(namespace: "demo", clusters: $clusters, resumeFrom: $resumeFrom) {
    cluster type resourceVersion object { metadata { name } }
  }
}"""


async def _until_lease(
    ws: TransportWS, op: str, cluster: str, name: str, seen: dict[str, str]
) -> list[tuple[str, str]]:
    """Read events (noting each cluster's last version in ``seen``) up to ``name`` of
    ``cluster``; returns the (cluster, name) of each one read."""
    read: list[tuple[str, str]] = []
    while True:
        payload = await ws.next(op)
        assert "errors" not in payload, payload
        event = payload["data"]["watchLeases"]
        seen[event["cluster"]] = event["resourceVersion"]
        got = (event["cluster"], event["object"]["metadata"]["name"])
        read.append(got)
        if got == (cluster, name):
            return read


async def test_a_fleet_watch_merges_clusters_and_resumes_each_without_loss(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    async with fleet_of(a, b, tmp_path) as (served, _fleet, _client):
        seen: dict[str, str] = {}
        async with ws_client(served, path=FLEET) as ws:
            op = await ws.subscribe(WATCH)
            read = await _until_lease(ws, op, "b", "only-in-b", seen)
            read += (
                await _until_lease(ws, op, "default", "only-in-a", seen)
                if (
                    "default",
                    "only-in-a",
                )
                not in read
                else []
            )
            assert ("default", "only-in-a") in read and ("b", "only-in-b") in read
            assert all(c != "default" or n != "only-in-b" for c, n in read)
            await lease(a, "live-a")
            await lease(b, "live-b")
            read = await _until_lease(ws, op, "b", "live-b", seen)
            if ("default", "live-a") not in read:
                await _until_lease(ws, op, "default", "live-a", seen)
        # Disconnected: both clusters change; a resume from what was seen misses nothing.
        await lease(a, "missed-a")
        await lease(b, "missed-b")
        async with ws_client(served, path=FLEET) as ws:
            op = await ws.subscribe(WATCH, {"resumeFrom": dict(seen)})
            first = await ws.next(op)
            event = first["data"]["watchLeases"]
            got = {(event["cluster"], event["object"]["metadata"]["name"])}
            second = (await ws.next(op))["data"]["watchLeases"]
            got.add((second["cluster"], second["object"]["metadata"]["name"]))
            assert got == {("default", "missed-a"), ("b", "missed-b")}
            assert {event["type"], second["type"]} == {"ADDED"}


async def test_a_removed_cluster_ends_its_part_only(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    kubeconfig(clusters / "b", b.url)
    async with gateway(a, "--clusters-dir", str(clusters)) as (served, fleet, _client):
        await until(fleet, serves("b"))
        seen: dict[str, str] = {}
        async with ws_client(served, path=FLEET) as ws:
            op = await ws.subscribe(WATCH, {"clusters": ["b", "default"]})
            await _until_lease(ws, op, "b", "only-in-b", seen)
            (clusters / "b").unlink()
            while True:  # b's part ends with its error; default's events may come first
                payload = await ws.next(op)
                if "errors" in payload:
                    break
            error = payload["errors"][0]
            assert error["extensions"]["code"] == "CLUSTER_REMOVED"
            assert error["extensions"]["cluster"] == "b"
            await lease(a, "after-b-left")
            await _until_lease(ws, op, "default", "after-b-left", seen)


async def test_a_cluster_cut_upstream_stays_exact_while_the_other_changes(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    async with fleet_of(a, b, tmp_path) as (served, _fleet, _client):
        seen: dict[str, str] = {}
        async with ws_client(served, path=FLEET) as ws:
            op = await ws.subscribe(WATCH, {"clusters": ["default", "b"]})
            await _until_lease(ws, op, "b", "only-in-b", seen)
            # Every upstream watch of b ends after each event from now on: the hub resumes it.
            b.faults.close_watches_after(1)
            expected = []
            for n in range(5):
                await lease(b, f"b-{n}")
                await lease(a, f"a-{n}")
                expected += [("b", f"b-{n}"), ("default", f"a-{n}")]
            got: list[tuple[str, str]] = []
            while len(got) < len(expected):
                event = (await ws.next(op))["data"]["watchLeases"]
                pair = (event["cluster"], event["object"]["metadata"]["name"])
                if pair != ("default", "only-in-a"):
                    got.append(pair)
            # Exact: each cluster's events once, in its own order.
            assert sorted(got) == sorted(expected)
            for cluster in ("default", "b"):
                assert [n for c, n in got if c == cluster] == [
                    n for c, n in expected if c == cluster
                ]
