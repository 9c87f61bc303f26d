"""A merged view's objects on ``/fleet/graphql`` written from their stored JSON, differentially.

The merged view's ``nodes`` (and its edges' ``node``) are each cluster's own writing of its
objects for the selection (``gateway.core.views.merge.MergedContents``: no object decoded
whole where the selection is plain fields), so each object of a merged page must read exactly
as the same object does in that cluster's own view (``/graphql``, ``/clusters/b/graphql``),
key order included: selections the JSON writer takes (plain fields, ``__typename``), one it
does not (an alias: the objects read for the selection and projected), pods with unicode,
escapes, nulls and missing members, in both clusters, and again after an object changed;
edges without their ``cluster`` the same, and with it aliased, repeated, skipped, beside
``__typename`` and a fragment.  The merged view's edges written with their ``cluster``
(``PageEdges`` with a column of cluster names) against graphql-core's general path on
generated selections: the same bytes and errors.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.core import POD
from kube_gateway_demo import DemoUpstream
from tests.graphql import test_fleet_views as fleet_views
from tests.graphql import test_projection_differential as differential
from tests.graphql import test_views
from tests.graphql.test_views import _edge_case, _edge_schema, _execute, _fragments, _same
from tests.grpc.test_views_grpc_written import _pods
from tests.support.graphql import ADMIN, NAMESPACE, data, gql

__all__ = ["two"]  # fixtures

two = fleet_views.two
NS = "merged-written"
FIELDS = """metadata { name namespace labels annotations }
  spec { nodeName priority containers { name image args env { name value } } }
  status { phase startTime }"""
SELECTIONS = {
    "plain": FIELDS,
    "typename": "__typename " + FIELDS.replace("status {", "status { __typename"),
    "alias": FIELDS.replace("annotations", "notes: annotations"),
}
OWN = """query($ns: String) { podsView(namespace: $ns, first: 100,
  sort: [{field: "metadata.name"}]) { nodes { %s } } }"""
MERGED = """query($ns: String) { podsView(clusters: ["default", "b"], namespace: $ns,
  first: 100, sort: [{field: "metadata.name"}]) {
    edges { cursor cluster node { %s } } nodes { %s } } }"""
#: Without the edges' ``cluster``: the edges written as a cluster's view's are.
MERGED_UNTAGGED = MERGED.replace("cursor cluster node", "cursor node")
#: The edges' ``cluster`` aliased, twice, skipped, with ``__typename`` and a fragment.
MERGED_ALIASED = MERGED.replace(
    "cursor cluster node",
    "__typename where: cluster cluster @skip(if: false) c: cursor "
    "gone: cluster @include(if: false) ... on FleetPodViewEdge { cluster where: cluster } node",
)


async def _ask(client: httpx.AsyncClient, path: str, query: str) -> Any:
    response = await client.post(
        path,
        json={"query": query, "variables": {"ns": NS}},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert response.status_code == 200, response.text
    body = orjson.loads(response.content)  # keys in the order the answer wrote them
    assert "errors" not in body, body["errors"]
    return body["data"]["podsView"]


async def _check(client: httpx.AsyncClient) -> list[Any]:
    """Every selection: each object of the merged page is its own cluster's writing of it;
    the merged nodes."""
    merged_nodes: list[Any] = []
    for label, selection in SELECTIONS.items():
        own = {
            cluster: {
                n["metadata"]["name"]: orjson.dumps(n)
                for n in (await _ask(client, path, OWN % selection))["nodes"]
            }
            for cluster, path in (("default", "/graphql"), ("b", "/clusters/b/graphql"))
        }
        merged = await _ask(client, "/fleet/graphql", MERGED % (selection, selection))
        assert len(merged["nodes"]) == len(merged["edges"]) == len(own["default"]) + len(own["b"])
        for edge, node in zip(merged["edges"], merged["nodes"], strict=True):
            written = orjson.dumps(node)
            assert written == orjson.dumps(edge["node"]), label
            assert written == own[edge["cluster"]][node["metadata"]["name"]], label
        untagged = await _ask(client, "/fleet/graphql", MERGED_UNTAGGED % (selection, selection))
        assert [e["cursor"] for e in untagged["edges"]] == [e["cursor"] for e in merged["edges"]]
        assert [orjson.dumps(e["node"]) for e in untagged["edges"]] == [
            orjson.dumps(n) for n in merged["nodes"]
        ]
        assert orjson.dumps(untagged["nodes"]) == orjson.dumps(merged["nodes"])
        aliased = await _ask(client, "/fleet/graphql", MERGED_ALIASED % (selection, selection))
        assert [
            (e["__typename"], e["where"], e["cluster"], e["c"], orjson.dumps(e["node"]))
            for e in aliased["edges"]
        ] == [
            ("FleetPodViewEdge", e["cluster"], e["cluster"], e["cursor"], orjson.dumps(e["node"]))
            for e in merged["edges"]
        ]
        assert {tuple(e) for e in aliased["edges"]} == {
            ("__typename", "where", "cluster", "c", "node")
        }
        if label == "plain":
            merged_nodes = merged["nodes"]
    return merged_nodes


async def test_a_merged_views_objects_are_each_clusters_own_writing(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    for upstream in two:
        await upstream.store.ensure_namespace(NS)
        await upstream.store.bulk_create(POD, _pods(), namespace=NS)
    async with fleet_views.fleet_of(a, b, tmp_path) as (_served, _fleet, client):
        nodes = await _check(client)
        notes = [n["metadata"]["annotations"] for n in nodes]
        assert {"note": 'a "quoted" \\ back', "empty": ""} in notes
        assert None in notes  # a pod without annotations

        # b's written-05 changes: the merged view shows it (once b's cache has the change)
        pod = copy.deepcopy(await b.store.get(POD, "written-05", namespace=NS))
        pod["metadata"]["annotations"]["note"] = "changed ü"
        await b.store.update(POD, pod, namespace=NS)
        for _ in range(500):
            shown = await _ask(client, "/fleet/graphql", MERGED % (FIELDS, FIELDS))
            changed = [
                e["node"]["metadata"]["annotations"]["note"]
                for e in shown["edges"]
                if e["cluster"] == "b" and e["node"]["metadata"]["name"] == "written-05"
            ]
            if changed == ["changed ü"]:
                break
        else:
            raise AssertionError("the change never showed")
        await _check(client)


async def test_relations_without_the_edges_cluster_come_from_each_objects_cluster(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    """Edges that do not select ``cluster`` are a cluster view's edges; a node's relations
    are still loaded from its own cluster (in ``edges`` and in ``nodes``)."""
    a, b = two
    await fleet_views.make_pods(two)
    shared = fleet_views.views._pod(0, NAMESPACE)["metadata"]["name"]  # in both clusters
    await a.store.create("events", fleet_views._event(shared, "in-a"), namespace=NAMESPACE)
    await b.store.create("events", fleet_views._event(shared, "in-b"), namespace=NAMESPACE)
    query = """query($name: String!) { podsView(namespace: "demo", first: 10,
        filter: {field: "metadata.name", value: $name}) {
        edges { cursor node { metadata { name } events { message } } }
        nodes { metadata { name } events { message } } } }"""
    async with fleet_views.fleet_of(a, b, tmp_path) as (_, _fleet, client):
        body = data(await gql(client, query, {"name": shared}, path="/fleet/graphql"))
        view = body["podsView"]
        # the same name in both: b's first (the cluster's name breaks the tie)
        assert [[x["message"] for x in e["node"]["events"]] for e in view["edges"]] == [
            ["in-b"],
            ["in-a"],
        ]
        assert [[x["message"] for x in n["events"]] for n in view["nodes"]] == [
            ["in-b"],
            ["in-a"],
        ]


# -- the merged view's edges written with their cluster, against graphql-core --------------

#: Cluster names as a fleet may have them: escapes and unicode written as graphql-core does.
CLUSTER_NAMES = ("default", "b", 'q"uote\\d', "ünï\u2028code", "tab\there", "")


def _edge_parts(gen: Any, node: str) -> tuple[list[str], set[str]]:
    """The edge's selection: ``cursor``, ``cluster`` and ``node`` in any order and subset,
    aliased at times, ``cluster`` twice at times, ``__typename``, a fragment, directives."""
    rng = gen.rng
    cursor = rng.choice(("cursor", "cursor", "cursor", "c: cursor"))
    cluster = rng.choice(("cluster", "cluster", "cluster", "where: cluster", "cursor: cluster"))
    if cluster.startswith("cursor:") and cursor == "cursor":
        cluster = "cluster"  # one response key, two fields: not valid
    if rng.random() < 0.1:
        node = "n: " + node
    parts = [p for p in (cursor, cluster, node) if rng.random() < 0.75] or [cluster]
    rng.shuffle(parts)
    if rng.random() < 0.1:
        parts.append("cluster")  # the same field again: one key
    if rng.random() < 0.1:
        parts.append("__typename")
    if rng.random() < 0.1:
        parts.append(rng.choice(("... on FleetPodViewEdge { cluster }", "...E")))
        if parts[-1] == "...E":
            gen.fragments.append("fragment E on FleetPodViewEdge { cluster cursor }")
    if rng.random() < 0.2:
        directive = gen._directives() or rng.choice((" @include(if: $yes)", " @skip(if: $yes)"))
        gen.variables.add("yes")
        at = rng.randrange(len(parts))
        if "{" in parts[at]:
            head, rest = parts[at].split(" {", 1)
            parts[at] = f"{head}{directive} {{{rest}"
        else:
            parts[at] += directive
    return parts, gen.variables


async def test_a_merged_views_edges_are_written_as_graphql_core_completes_them() -> None:
    """``edges { cursor cluster node { ... } }`` of a merged view as the gateway's executor
    completes them (:class:`~gateway.graphql.resolvers.views.PageEdges` with a ``cluster``
    column: written as JSON where that is exact, else completed the ordinary way from the
    edges ``make`` gives) against graphql-core's standard executor completing the same edges
    as plain data: the same response bytes and errors on 400 generated selections (aliases,
    ``cluster`` alone or twice, ``__typename``, fragments, ``@skip``/``@include``), cluster
    names with escapes and unicode, and damaged nodes; the JSON written directly in many."""

    from gateway.core import ViewContents
    from gateway.core.support import deepjson
    from gateway.graphql.resolvers.views import PageEdges

    schema = _edge_schema("FleetPodViewEdge", "cluster")  # a merged view's edges
    _, engine = differential._setup()
    pod = schema.type_map["Pod"]
    written = compared = with_cluster = 0
    for seed in range(400):
        gen = test_views._Plain(seed)
        rng = gen.rng
        sel = gen.selection(pod, 0)
        parts, variables_used = _edge_parts(gen, "node " + gen.render(pod, sel))
        case = _edge_case(schema, gen, pod, sel, parts, variables=variables_used)
        if case is None:
            continue
        text, document, raws, cursors = case
        clusters = [rng.choice(CLUSTER_NAMES) for _ in raws]

        def make(
            i: int, node: Any, cursors: list[str] = cursors, clusters: list[str] = clusters
        ) -> Any:
            return {"cursor": cursors[i], "cluster": clusters[i], "node": node}

        variables = {"yes": True, "no": False}
        fast_root = {
            "edges": PageEdges(ViewContents(list(raws)), cursors, {"cluster": clusters}, make)
        }
        standard_root = {
            "edges": [
                {"cursor": c, "cluster": k, "node": deepjson.loads(r)}
                for c, k, r in zip(cursors, clusters, raws, strict=True)
            ]
        }
        fast = await _execute(document, variables, fast_root, engine.executor_class, schema)
        standard = await _execute(document, variables, standard_root, None, schema)
        _same(fast, standard, f"seed {seed}:\n{text}\n{raws[:3]!r}")
        compared += 1
        written += bool(raws) and _fragments(fast.data)
        with_cluster += bool(raws) and "cluster" in text and bool(_fragments(fast.data))
    assert compared > 300, compared
    assert written > 50, written
    assert with_cluster > 30, with_cluster
