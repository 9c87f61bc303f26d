"""``/fleet/graphql``: one query or subscription over every cluster, per-cluster answers.

Two demo upstreams are two clusters (``default`` and ``b``), each with data of its own and,
where a test says so, its own RBAC; a third name may be asked for and is not served.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.core.model.registry import EVENT, LEASE, POD
from gateway.graphql.endpoints.clusters import ClusterEndpoints
from gateway.graphql.endpoints.live import SHARED
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.auth import DEFAULT_TOKENS, TokenGrant
from tests.gateway.test_fleet import gateway, kubeconfig, lease, serves, until
from tests.support.graphql import ADMIN, NAMESPACE, TransportWS, data, gql, unique, ws_client

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
    shared = ("--shared-identity-clusters", "b")  # one identity provider: the demo's tokens
    async with gateway(a, "--cluster", f"b={config}", *shared) as (served, fleet, client):
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
        # "*" stands for every cluster (the caller may see) where it stands, as in gRPC.
        body = data(await gql(client, LEASES, {"clusters": ["b", "*"]}, path=FLEET))
        assert [m["cluster"] for m in body["fleet"]] == ["b", "default"]

        # The clusters' lists are decoded concurrently under one hold of the collector.
        assert fleet.get("b").adapter.large_lists is fleet.get().adapter.large_lists

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
        assert members[2]["error"]["code"] == "NOT_FOUND"
        assert 'cluster "nope" is not served' in members[2]["error"]["message"]
        by_path = {tuple(e["path"]): e for e in body["errors"]}
        for field in ("leases", "podCount"):
            refused = by_path[("fleet", 1, field)]
            assert refused["extensions"]["code"] == "FORBIDDEN", refused
            assert refused["extensions"]["cluster"] == "b"
        # A name not served: its member's `error` says so and its fields are null, with one
        # error for every such name of the field, never one per field and name.
        assert members[2]["leases"] is None and members[2]["podCount"] is None
        (missing,) = [e for e in body["errors"] if e["extensions"]["code"] == "NOT_FOUND"]
        assert missing["path"][:2] == ["fleet", 2]
        assert missing["extensions"]["cluster"] == "nope"
        assert missing["message"] == members[2]["error"]["message"]
        assert len(body["errors"]) == 3  # none for cluster default


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


async def _refusals(ws: TransportWS, op: str, count: int) -> dict[str, str]:
    """Read ``op`` until ``count`` clusters' parts ended with an error; their codes by
    cluster (every event read on the way is cluster default's)."""
    refused: dict[str, str] = {}
    while len(refused) < count:
        got = await ws.next(op)
        if "errors" in got:
            ext = got["errors"][0]["extensions"]
            refused[ext["cluster"]] = ext["code"]
        else:
            assert got["data"]["watchLeases"]["cluster"] == "default"
    return refused


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


async def test_clusters_join_change_and_leave_a_watch_of_every_cluster(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    shared = ("--shared-identity-clusters", "*")  # every file of the directory: trusted
    async with gateway(a, "--clusters-dir", str(clusters), *shared) as (served, fleet, _client):
        seen: dict[str, str] = {}
        async with ws_client(served, path=FLEET) as ws:
            op = await ws.subscribe(WATCH)  # no list: every cluster, now and later
            await _until_lease(ws, op, "default", "only-in-a", seen)
            # b joins the gateway, and the watch, with its initial events.
            kubeconfig(tmp_path / "staged", b.url).rename(clusters / "b")
            await _until_lease(ws, op, "b", "only-in-b", seen)
            # b is reconfigured: its part goes on from where it was, nothing lost or repeated.
            before = fleet.get("b")
            kubeconfig(tmp_path / "staged", b.url, token="viewer-token").rename(clusters / "b")
            await until(fleet, lambda f: "b" in f.names() and f.get("b") is not before)
            await lease(b, "after-reconfigured")
            read = await _until_lease(ws, op, "b", "after-reconfigured", seen)
            assert ("b", "only-in-b") not in read
            # b leaves: its part ends with its error; the default's goes on.
            (clusters / "b").unlink()
            while True:  # the default's events may come first
                payload = await ws.next(op)
                if "errors" in payload:
                    break
            assert payload["data"] is None
            error = payload["errors"][0]
            assert error["extensions"]["code"] == "CLUSTER_REMOVED"
            assert error["extensions"]["cluster"] == "b"
            await lease(a, "after-b-left")
            await _until_lease(ws, op, "default", "after-b-left", seen)


async def test_a_watch_of_named_clusters_reports_one_it_cannot_open_and_goes_on(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    async with fleet_of(a, b, tmp_path) as (served, _fleet, _client):
        payload = {"Authorization": f"Bearer {ALICE}"}
        async with ws_client(served, path=FLEET, payload=payload) as ws:
            op = await ws.subscribe(WATCH, {"clusters": ["b", "nope", "default"]})
            seen: dict[str, str] = {}
            # b refuses alice; nope is not served
            assert await _refusals(ws, op, 2) == {"b": "FORBIDDEN", "nope": "NOT_FOUND"}
            await lease(a, "alice-sees-this")
            await _until_lease(ws, op, "default", "alice-sees-this", seen)


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


async def _sse_events(response: httpx.Response) -> AsyncIterator[tuple[str | None, Any]]:
    """(id, payload) of each ``next`` event of a graphql-sse response."""
    event_id, name, lines = None, "", []
    async for line in response.aiter_lines():
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            lines.append(line[5:].strip())
        elif line == "" and name:
            if name == "next":
                yield event_id, orjson.loads("\n".join(lines))
            event_id, name, lines = None, "", []


async def test_over_sse_the_event_id_resumes_every_cluster(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    body = {"query": WATCH, "variables": {"clusters": ["default", "b"]}}
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {ADMIN}"}
    async with fleet_of(a, b, tmp_path) as (_, _fleet, client):
        last: str | None = None
        async with client.stream("POST", FLEET, json=body, headers=headers) as response:
            got: set[tuple[str, str]] = set()
            async with asyncio.timeout(10):
                async for event_id, payload in _sse_events(response):
                    event = payload["data"]["watchLeases"]
                    got.add((event["cluster"], event["object"]["metadata"]["name"]))
                    last = event_id
                    if {("default", "only-in-a"), ("b", "only-in-b")} <= got:
                        break
        assert last is not None
        assert json.loads(last).keys() == {"default", "b"}  # a point per cluster
        await lease(a, "away-a")
        await lease(b, "away-b")
        again = {**headers, "Last-Event-ID": last}
        async with client.stream("POST", FLEET, json=body, headers=again) as response:
            got = set()
            async with asyncio.timeout(10):
                async for _, payload in _sse_events(response):
                    event = payload["data"]["watchLeases"]
                    got.add((event["cluster"], event["object"]["metadata"]["name"]))
                    if len(got) == 2:
                        break
        assert got == {("default", "away-a"), ("b", "away-b")}


async def test_shared_watches_review_each_caller_on_each_cluster(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    """With --shared-watches each cluster's upstream watches are the gateway's own there, and
    a caller is admitted by that cluster's access review: alice joins a's, not b's."""
    a, b = two
    config = kubeconfig(tmp_path / "b.yaml", b.url)
    own = tmp_path / "token"
    own.write_text(ADMIN)  # the default cluster's gateway identity; b's is its kubeconfig's
    flags = ("--cluster", f"b={config}", "--shared-watches", "--token-file", str(own))
    flags += ("--shared-identity-clusters", "b")
    async with gateway(a, *flags) as (served, fleet, _client):
        await until(fleet, serves("b"))
        payload = {"Authorization": f"Bearer {ALICE}"}
        async with ws_client(served, path=FLEET, payload=payload) as ws:
            op = await ws.subscribe(WATCH)
            seen: dict[str, str] = {}
            assert await _refusals(ws, op, 1) == {"b": "FORBIDDEN"}
            await lease(a, "shared-a")
            await _until_lease(ws, op, "default", "shared-a", seen)
        assert fleet.get("b").watches.shared is not None
        assert fleet.get("b").watches.stats.denied >= 1
        assert fleet.get().watches.stats.denied == 0


async def test_changed_fields_only_is_decided_per_cluster(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    query = """subscription { watchLeases(namespace: "demo", changedFieldsOnly: true) {
      cluster type object { metadata { name } spec { holderIdentity } } } }"""

    async def holder(demo: DemoUpstream, name: str, value: str) -> None:
        await demo.store.patch(
            "leases", name, {"spec": {"holderIdentity": value}}, namespace=NAMESPACE
        )

    async def annotate(demo: DemoUpstream, name: str, value: str) -> None:
        patch = {"metadata": {"annotations": {"note": value}}}
        await demo.store.patch("leases", name, patch, namespace=NAMESPACE)

    async with (
        fleet_of(a, b, tmp_path) as (served, _fleet, _client),
        ws_client(served, path=FLEET) as ws,
    ):
        op = await ws.subscribe(query)
        initial = set()
        while not {("default", "only-in-a"), ("b", "only-in-b")} <= initial:
            event = (await ws.next(op))["data"]["watchLeases"]
            initial.add((event["cluster"], event["object"]["metadata"]["name"]))
        # Unselected changes in both clusters are left out; selected ones come, in order.
        await annotate(b, "only-in-b", "one")
        await annotate(a, "only-in-a", "one")
        await holder(b, "only-in-b", "b-holder")
        await annotate(b, "only-in-b", "two")
        await holder(a, "only-in-a", "a-holder")
        got = set()
        for _ in range(2):
            event = (await ws.next(op))["data"]["watchLeases"]
            assert event["type"] == "MODIFIED"
            got.add((event["cluster"], event["object"]["spec"]["holderIdentity"]))
        assert got == {("b", "b-holder"), ("default", "a-holder")}
        # A fence in each cluster: nothing else of that cluster came before it.
        await lease(a, "fence-a")
        await lease(b, "fence-b")
        fences = set()
        for _ in range(2):
            event = (await ws.next(op))["data"]["watchLeases"]
            fences.add((event["cluster"], event["type"], event["object"]["metadata"]["name"]))
        assert fences == {("default", "ADDED", "fence-a"), ("b", "ADDED", "fence-b")}


async def test_a_drain_completes_a_fleet_watch_with_a_point_per_cluster(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    async with (
        fleet_of(a, b, tmp_path) as (served, _fleet, _client),
        ws_client(served, path=FLEET) as ws,
    ):
        op = await ws.subscribe(WATCH, {"clusters": ["default", "b"]})
        seen: dict[str, str] = {}
        await _until_lease(ws, op, "b", "only-in-b", seen)
        if "default" not in seen:
            await _until_lease(ws, op, "default", "only-in-a", seen)
        assert served.app.state.runtime.drain.request()
        while True:  # events sent before the drain, then its completion
            final = (await ws.recv())["payload"]
            if "extensions" in final:
                break
            event = final["data"]["watchLeases"]
            seen[event["cluster"]] = event["resourceVersion"]
        assert final["extensions"]["reason"] == "DRAINING"
        resume = json.loads(final["extensions"]["resumeFrom"])
        # A point per cluster, at or after the last event of it the client read.
        assert resume.keys() == {"default", "b"}
        assert all(int(resume[c]) >= int(seen[c]) for c in resume)


async def test_clusters_with_the_same_kinds_share_one_schema(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    """Two clusters whose discovery gives the same kinds and OpenAPI serve one schema object
    (built once in the process), and each still answers with its own data through it."""
    a, b = two
    own = tmp_path / "token"
    own.write_text(ADMIN)  # the default cluster's discovery identity
    config = kubeconfig(tmp_path / "b.yaml", b.url)
    builds = SHARED.builds
    shared = ("--shared-identity-clusters", "b")
    async with gateway(a, "--cluster", f"b={config}", "--token-file", str(own), *shared) as (
        served,
        fleet,
        client,
    ):
        await until(fleet, serves("b"))
        routes = [getattr(r, "endpoint", None) for r in served.app.routes]
        (endpoints,) = {e for e in routes if isinstance(e, ClusterEndpoints)}
        lives = [endpoints.served["default"].live, endpoints.served["b"].live]
        for live in lives:
            assert live is not None
            await live.wait_ready()
        assert lives[0].current is lives[1].current  # one object, built once
        assert SHARED.builds - builds == 1
        query = '{ configMaps(namespace: "demo") { items { metadata { name } } } }'
        for path in ("/graphql", "/clusters/b/graphql"):
            assert data(await gql(client, query, path=path))["configMaps"]["items"] is not None
        mine = data(await gql(client, LEASES, path=FLEET))["fleet"]
        assert "only-in-b" in names(mine[1]) and "only-in-b" not in names(mine[0])


FLEET_CREATE = """mutation($clusters: [String!]!, $name: String!) {
  fleet(clusters: $clusters) {
    cluster
    error { code }
    createLease(
      namespace: "demo", object: {metadata: {name: $name}, spec: {holderIdentity: "fleet"}}
    ) {
      metadata { name }
      spec { holderIdentity }
    }
  }
}"""


async def test_a_fleet_mutation_writes_to_each_named_cluster_and_fails_alone(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    async with fleet_of(a, b, tmp_path) as (_, _fleet, client):
        name = unique("everywhere")
        body = data(
            await gql(
                client, FLEET_CREATE, {"clusters": ["default", "b"], "name": name}, path=FLEET
            )
        )
        assert [m["cluster"] for m in body["fleet"]] == ["default", "b"]
        for member in body["fleet"]:
            assert member["createLease"] == {
                "metadata": {"name": name},
                "spec": {"holderIdentity": "fleet"},
            }
        for demo in (a, b):
            assert name in {
                lease["metadata"]["name"]
                for lease in await demo.store.list(LEASE, namespace=NAMESPACE)
            }

        # alice may write to "demo" in the default cluster only: b refuses its own write.
        name = unique("partly")
        body = await gql(
            client, FLEET_CREATE, {"clusters": ["*"], "name": name}, token=ALICE, path=FLEET
        )
        default, in_b = body["data"]["fleet"]
        assert default["createLease"]["metadata"]["name"] == name
        assert in_b["createLease"] is None and in_b["error"] is None
        (refused,) = body["errors"]
        assert refused["path"] == ["fleet", 1, "createLease"]
        assert refused["extensions"]["code"] == "FORBIDDEN"
        assert refused["extensions"]["cluster"] == "b"
        assert name not in {
            lease["metadata"]["name"] for lease in await b.store.list(LEASE, namespace=NAMESPACE)
        }

        # Writing everywhere is never what a missing argument means.
        missing = await gql(
            client,
            FLEET_CREATE.replace("$clusters: [String!]!, ", "").replace(
                "(clusters: $clusters)", ""
            ),
            {"name": unique("nowhere")},
            path=FLEET,
            expect=400,
        )  # fmt: skip
        assert missing["errors"][0]["message"] == (
            "Argument 'Mutation.fleet(clusters:)' of type '[String!]!' is required, but it "
            "was not provided."
        )


async def test_a_kind_only_one_cluster_serves_is_listed_untyped_there(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    """The fleet's typed fields are the default cluster's kinds (here its five built-in
    ones: it discovers nothing without a gateway credential); ``resources`` lists any kind
    a member's own cluster serves (b discovers ConfigMaps), and a cluster that does not
    serve it says so for itself."""
    a, b = two
    await b.store.create("configmaps", {"metadata": {"name": "only-b"}}, namespace=NAMESPACE)
    async with fleet_of(a, b, tmp_path) as (served, _fleet, client):
        routes = [getattr(r, "endpoint", None) for r in served.app.routes]
        (endpoints,) = {e for e in routes if isinstance(e, ClusterEndpoints)}
        live = endpoints.served["b"].live
        assert live is not None
        await live.wait_ready()  # b's discovery is read
        query = """{ fleet(clusters: ["default", "b"]) {
          cluster
          resources(group: "", version: "v1", resource: "configmaps", namespace: "demo")
        } }"""
        typed_query = '{ fleet { configMaps(namespace: "demo") { items { metadata { name } } } } }'
        typed = await gql(client, typed_query, path=FLEET, expect=400)
        assert "Cannot query field 'configMaps'" in typed["errors"][0]["message"]
        body = await gql(client, query, path=FLEET)
        default, in_b = body["data"]["fleet"]
        assert default["resources"] is None
        listed = {i["metadata"]["name"] for i in in_b["resources"]["items"]}
        want = {
            c["metadata"]["name"] for c in await b.store.list("configmaps", namespace=NAMESPACE)
        }
        assert "only-b" in listed and listed == want  # b's own, as its store holds them
        (error,) = body["errors"]
        assert error["path"] == ["fleet", 0, "resources"]
        assert error["extensions"]["cluster"] == "default"
        assert error["message"] == "the gateway does not serve 'configmaps' in 'v1'"
