"""Discovery against the demo upstream: its extra kinds (Deployments, ReplicaSets, Services,
ConfigMaps, Nodes) appear at ``/graphql`` and the Widget custom resource at its API group's
``/apis/demo.kube-gateway.dev/graphql``, typed from the demo's OpenAPI v3, with relations
across them, and no resource-specific code in the gateway."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.core.catalog.openapi_documents import Documents
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, Gateway, serve_app, ws_client


@pytest.fixture
async def discovering(tmp_path: Path) -> AsyncIterator[Gateway]:
    token = tmp_path / "token"
    token.write_text(ADMIN)
    async with DemoUpstream() as demo:
        settings = Settings(
            host="127.0.0.1",
            http_port=0,
            grpc_port=0,
            server=demo.url,
            discovery_token_file=str(token),
            log_level="warning",
        )
        async with serve_app(settings) as (url, app):
            runtime = app.state.runtime
            assert runtime.live_schema is not None
            await runtime.live_schema.wait_ready()
            yield Gateway(url, app, demo)


WIDGETS = "/apis/demo.kube-gateway.dev/graphql"


async def _post(gw: Gateway, query: str, path: str = "/graphql") -> httpx.Response:
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as http:
        return await http.post(
            path, json={"query": query}, headers={"Authorization": f"Bearer {ADMIN}"}
        )


async def _query(gw: Gateway, query: str, path: str = "/graphql") -> dict[str, Any]:
    body: dict[str, Any] = (await _post(gw, query, path)).json()
    assert "errors" not in body, body
    return body["data"]  # type: ignore[no-any-return]


async def test_demo_kinds_are_served_with_relations(discovering: Gateway) -> None:
    data = await _query(
        discovering,
        """{
          deployments(namespace: "demo") { items { metadata { name }
            replicaSets { metadata { name } deployment { metadata { name } }
              pods { metadata { name } node { metadata { name } }
                     replicaSet { metadata { name } } } } } }
          services(namespace: "demo") { items { metadata { name }
            endpoints { subsets { addresses { targetRef { pod { metadata { name } } } } } } } }
          nodes { items { metadata { name } pods { metadata { name } } } }
        }""",
    )
    (web,) = [d for d in data["deployments"]["items"] if d["metadata"]["name"] == "web"]
    (rs,) = web["replicaSets"]
    assert rs["deployment"]["metadata"]["name"] == "web"
    pods = {p["metadata"]["name"] for p in rs["pods"]}
    assert pods == {"web-6d4b9c7f5-x7k2p", "web-6d4b9c7f5-m9q4z"}
    for pod in rs["pods"]:
        assert pod["replicaSet"]["metadata"]["name"] == rs["metadata"]["name"]
        assert pod["node"]["metadata"]["name"] in {"node-a", "node-b"}
    (svc,) = [s for s in data["services"]["items"] if s["metadata"]["name"] == "web"]
    targets = {
        a["targetRef"]["pod"]["metadata"]["name"]
        for subset in svc["endpoints"]["subsets"]
        for a in subset["addresses"]
    }
    assert targets == pods
    on_nodes = {p["metadata"]["name"] for n in data["nodes"]["items"] for p in n["pods"]}
    assert pods <= on_nodes
    # typed from documents read on demand: the catalog only names them, the build read them
    catalog = discovering.app.state.runtime.cluster.catalog.current
    assert all(gv.openapi is None for gv in catalog.groups.values())
    assert catalog.groups[("apps", "v1")].openapi_hash
    assert isinstance(catalog.documents, Documents)
    assert len(catalog.documents) > 0


async def test_a_custom_resource_is_served_in_its_group_schema(discovering: Gateway) -> None:
    data = await _query(
        discovering,
        '{ widgets(namespace: "demo") { items { metadata { name } raw events { reason } } } '
        'pods(namespace: "demo", limit: 1) { items { metadata { name } } } '
        '__type(name: "WidgetSpec") { fields { name } } }',
        WIDGETS,
    )
    assert {w["metadata"]["name"] for w in data["widgets"]["items"]} == {
        "blue-widget",
        "red-widget",
    }
    assert data["pods"]["items"]  # the seed kinds are in every schema
    assert {f["name"] for f in data["__type"]["fields"]}  # typed from the CRD, not JSON
    # /graphql is Kubernetes' own API: no custom resource, whatever the cluster installs
    root = (await _post(discovering, "{ widgets { items { raw } } }")).json()
    assert root["errors"][0]["message"] == "Cannot query field 'widgets' on type 'Query'."
    # ...and a group's schema holds that group's kinds only
    other = (await _post(discovering, "{ deployments { items { raw } } }", WIDGETS)).json()
    assert other["errors"][0]["message"] == "Cannot query field 'deployments' on type 'Query'."


async def test_a_group_schema_is_built_once_and_shared(discovering: Gateway) -> None:
    live = discovering.app.state.runtime.live_schema
    # the reloader tells the catalog which groups CRDs define (the demo's Widget)
    catalog = discovering.app.state.runtime.cluster.catalog.current
    assert catalog.crd_groups == {"demo.kube-gateway.dev"}
    assert "demo.kube-gateway.dev" not in live.groups  # built on first use, not before
    bodies = await asyncio.gather(
        *(
            _query(
                discovering,
                '{ widgets(namespace: "demo") { items { metadata { name } } } }',
                WIDGETS,
            )
            for _ in range(5)
        )
    )
    assert all(len(b["widgets"]["items"]) == 2 for b in bodies)
    built = [s for s in live.swaps if s.scope == "demo.kube-gateway.dev"]
    assert len(built) == 1  # five first uses at once: one build


async def test_an_unknown_group_is_refused_clearly(discovering: Gateway) -> None:
    for group in ("nothing.example.com", "apps"):
        response = await _post(discovering, "{ __typename }", f"/apis/{group}/graphql")
        assert response.status_code == 404
        (error,) = response.json()["errors"]
        assert f"no GraphQL schema for API group {group!r}" in error["message"]
        assert error["extensions"]["code"] == "NOT_FOUND"


async def test_a_custom_resource_is_watched_over_its_group_websocket(
    discovering: Gateway,
) -> None:
    async with ws_client(discovering, path=WIDGETS) as ws:
        op = await ws.subscribe(
            'subscription { watchWidgets(namespace: "demo") { type object { metadata { name } } } }'
        )
        names = set()
        while len(names) < 2:
            event = (await ws.next(op))["data"]["watchWidgets"]
            assert event["type"] == "ADDED"
            names.add(event["object"]["metadata"]["name"])
        assert names == {"blue-widget", "red-widget"}


async def test_a_discovered_kind_is_created_patched_and_watched(discovering: Gateway) -> None:
    async with ws_client(discovering) as ws:
        op = await ws.subscribe(
            'subscription { watchConfigMaps(namespace: "demo", sendInitialEvents: false) '
            "{ type object { metadata { name } data } } }"
        )
        made = await _query(
            discovering,
            'mutation { createConfigMap(namespace: "demo", object: {metadata: {name: "made-here"}, '
            'data: {a: "1"}}) { metadata { name } data } }',
        )
        assert made["createConfigMap"] == {"metadata": {"name": "made-here"}, "data": {"a": "1"}}
        event = (await ws.next(op))["data"]["watchConfigMaps"]
        assert (event["type"], event["object"]["data"]) == ("ADDED", {"a": "1"})
        await _query(
            discovering,
            'mutation { patchConfigMap(namespace: "demo", name: "made-here", type: MERGE, '
            'patch: {data: {a: "2"}}) { data } }',
        )
        event = (await ws.next(op))["data"]["watchConfigMaps"]
        assert (event["type"], event["object"]["data"]) == ("MODIFIED", {"a": "2"})
