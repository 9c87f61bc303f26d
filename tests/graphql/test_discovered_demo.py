"""Discovery against the demo upstream: its extra kinds (Deployments, ReplicaSets, Services,
ConfigMaps, Nodes, the Widget custom resource) appear in GraphQL, typed from the demo's
OpenAPI v3, with relations across them, and no resource-specific code in the gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.core.documents import Documents
from gateway.demo import DemoUpstream
from gateway.settings import Settings
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
            await runtime.live_schema.wait_for(runtime.catalog.current.generation)
            yield Gateway(url, app, demo)


async def _query(gw: Gateway, query: str, **variables: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as http:
        response = await http.post(
            "/graphql",
            json={"query": query, "variables": variables},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
    body: dict[str, Any] = response.json()
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
          widgets(namespace: "demo") { items { metadata { name } raw } }
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
    assert {w["metadata"]["name"] for w in data["widgets"]["items"]} == {
        "blue-widget",
        "red-widget",
    }
    on_nodes = {p["metadata"]["name"] for n in data["nodes"]["items"] for p in n["pods"]}
    assert pods <= on_nodes
    # typed from documents read on demand: the catalog only names them, the build read them
    catalog = discovering.app.state.runtime.catalog.current
    assert all(gv.openapi is None for gv in catalog.groups.values())
    assert catalog.groups[("apps", "v1")].openapi_hash
    assert isinstance(catalog.documents, Documents)
    assert len(catalog.documents) > 0


async def test_a_discovered_kind_is_created_patched_and_watched(discovering: Gateway) -> None:
    spec = await _query(discovering, '{ __type(name: "WidgetSpec") { fields { name } } }')
    fields = {f["name"] for f in spec["__type"]["fields"]}
    assert fields  # typed from the CRD's schema, not JSON
    async with ws_client(discovering) as ws:
        op = await ws.subscribe(
            'subscription { watchConfigmaps(namespace: "demo", sendInitialEvents: false) '
            "{ type object { metadata { name } data } } }"
        )
        made = await _query(
            discovering,
            'mutation { createConfigMap(namespace: "demo", object: {metadata: {name: "made-here"}, '
            'data: {a: "1"}}) { metadata { name } data } }',
        )
        assert made["createConfigMap"] == {"metadata": {"name": "made-here"}, "data": {"a": "1"}}
        event = (await ws.next(op))["data"]["watchConfigmaps"]
        assert (event["type"], event["object"]["data"]) == ("ADDED", {"a": "1"})
        await _query(
            discovering,
            'mutation { patchConfigMap(namespace: "demo", name: "made-here", type: MERGE, '
            'patch: {data: {a: "2"}}) { data } }',
        )
        event = (await ws.next(op))["data"]["watchConfigmaps"]
        assert (event["type"], event["object"]["data"]) == ("MODIFIED", {"a": "2"})
