# ruff: noqa: E501  (GraphQL documents read best on one line)
"""Discovered kinds over GraphQL against the real kube-apiserver: Deployments, ConfigMaps and a
CRD the test installs are typed from the cluster's OpenAPI v3, queried, mutated with all four
patch types and subscribed to without resource-specific code; a catalog swap that drops the CRD
ends its subscription with a clear error while a subscription on a kept kind keeps going."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.core.catalog.catalog import Catalog, CatalogHolder, GroupVersion
from gateway.core.model.registry import REGISTRY, Registry, Resource, Subresource
from gateway.graphql.endpoints.live import GroupEndpoint, LiveSchema, group_routes
from gateway.settings import Settings
from tests.e2e.apiserver import KubeAPIServer
from tests.support.graphql import Gateway as _Gateway
from tests.support.graphql import TransportWS, serve_app

pytestmark = pytest.mark.e2e

GROUP = "e2e.kube-gateway.dev"
GADGET_PATH = f"/apis/{GROUP}/graphql"
_names = itertools.count()
_STATUS = Subresource("status", frozenset(("get", "update", "patch")))
DEPLOYMENTS = Resource(
    "apps", "v1", "Deployment", "deployments", "deployment", True,
    subresources={"status": _STATUS},
)  # fmt: skip
CONFIGMAPS = Resource("", "v1", "ConfigMap", "configmaps", "configmap", True)
GADGETS = Resource(
    GROUP, "v1", "Gadget", "gadgets", "gadget", True, subresources={"status": _STATUS}
)

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"gadgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer"},
                                    "color": {"type": "string"},
                                    "parts": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "name": {"type": "string"},
                                                "count": {"type": "integer"},
                                            },
                                        },
                                    },
                                    "extra": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {"ready": {"type": "boolean"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{id(_names) % 997}"


async def _established(admin: httpx.AsyncClient) -> None:
    """Wait for the CRD's Established condition by watching it (no polling)."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    params = {"watch": "1", "fieldSelector": f"metadata.name=gadgets.{GROUP}"}
    async with admin.stream("GET", path, params=params) as response:
        async for line in response.aiter_lines():
            obj = httpx.Response(200, content=line).json()["object"]
            conditions = (obj.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return


async def _openapi(admin: httpx.AsyncClient, path: str) -> dict[str, Any]:
    """The OpenAPI v3 document of one group/version; a new CRD's is published a moment
    after it is established, so this follows the index until it lists the document."""
    for attempt in itertools.count():
        index = (await admin.get("/openapi/v3")).json()["paths"]
        if path in index:
            document: dict[str, Any] = (await admin.get(index[path]["serverRelativeURL"])).json()
            if any(
                s.get("x-kubernetes-group-version-kind")
                for s in document.get("components", {}).get("schemas", {}).values()
            ):
                return document
        assert attempt < 200, f"{path} never appeared in /openapi/v3"
        await asyncio.sleep(0.05)  # the apiserver publishes it asynchronously; no event to wait on
    raise AssertionError("unreachable")


def _catalog(generation: int, docs: dict[str, dict[str, Any]], *extra: Resource) -> Catalog:
    groups = {
        ("apps", "v1"): GroupVersion("apps", "v1", (DEPLOYMENTS,), docs["apis/apps/v1"]),
        ("", "v1"): GroupVersion("", "v1", (CONFIGMAPS,), docs["api/v1"]),
    }
    if extra:
        groups[(GROUP, "v1")] = GroupVersion(GROUP, "v1", extra, docs[f"apis/{GROUP}/v1"])
    registry = Registry((*REGISTRY.values(), DEPLOYMENTS, CONFIGMAPS, *extra))
    return Catalog(registry, groups, generation)


@contextlib.asynccontextmanager
async def _ws(url: str, token: str, path: str = "/graphql") -> AsyncIterator[TransportWS]:
    from websockets.asyncio.client import connect

    async with connect(url.replace("http://", "ws://") + path, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]  # fmt: skip
        client = TransportWS(ws)
        await client.send(
            {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
        )
        assert (await client.recv())["type"] == "connection_ack"
        yield client


async def test_discovered_kinds_are_typed_queried_mutated_watched_and_swapped_out(
    kube_apiserver: KubeAPIServer,
) -> None:
    kube = kube_apiserver
    token = kube.tokens["admin"]
    ns = "team-a"
    async with httpx.AsyncClient(
        base_url=kube.url, verify=kube.ssl_context(), headers=kube.headers("admin"), timeout=30
    ) as admin:
        created = await admin.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD
        )
        assert created.status_code in (201, 409), created.text
        await _established(admin)
        docs = {p: await _openapi(admin, p) for p in ("api/v1", "apis/apps/v1", f"apis/{GROUP}/v1")}

        settings = Settings(
            host="127.0.0.1", http_port=0, grpc_port=0, server=kube.url, ca_file=kube.ca_file,
            log_level="warning",
        )  # fmt: skip
        async with serve_app(settings) as (url, app):
            served = _Gateway(url, app, None)  # type: ignore[arg-type]
            holder = CatalogHolder()
            live = LiveSchema(served.graphql, holder)
            live.start()
            # Group endpoints that follow this holder, served ahead of the gateway's own.
            app.router.routes[:0] = group_routes(GroupEndpoint(served.graphql, live))
            try:
                await _scenario(
                    url=url, token=token, ns=ns, holder=holder, live=live, docs=docs, admin=admin
                )
            finally:
                await live.aclose()


async def _scenario(
    *,
    url: str,
    token: str,
    ns: str,
    holder: CatalogHolder,
    live: LiveSchema,
    docs: dict[str, dict[str, Any]],
    admin: httpx.AsyncClient,
) -> None:
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as gql:

        async def run(query: str, path: str = "/graphql", **variables: Any) -> dict[str, Any]:
            body = (await gql.post(path, json={"query": query, "variables": variables})).json()
            assert "errors" not in body, body
            return body["data"]  # type: ignore[no-any-return]

        holder.swap(_catalog(1, docs, GADGETS))
        swap = await live.wait_for(1)
        assert swap.served == len(REGISTRY) + 2  # the custom resource has a schema of its own

        # Introspection: the CRD's kind is typed from its schema, nested objects hoisted.
        fields = await run(
            '{ __type(name: "GadgetSpec") { fields { name type { name kind ofType { name } } } } }',
            GADGET_PATH,
        )
        by_name = {f["name"]: f["type"] for f in fields["__type"]["fields"]}
        assert by_name["size"]["name"] == "Long"
        assert by_name["color"]["name"] == "String"
        assert by_name["parts"]["ofType"]["name"] == "GadgetSpecPartsItem"
        assert by_name["extra"]["name"] == "JSON"

        name, dep = unique("gadget"), unique("web")
        async with _ws(url, token) as ws, _ws(url, token, GADGET_PATH) as group_ws:
            gadgets = await group_ws.subscribe(
                "subscription($ns: String!) { watchGadgets(namespace: $ns) "
                "{ type object { metadata { name } spec { size color } } } }",
                {"ns": ns},
            )
            deployments = await ws.subscribe(
                "subscription($ns: String!) { watchDeployments(namespace: $ns) "
                "{ type object { metadata { name } spec { replicas } } } }",
                {"ns": ns},
            )
            made = await run(
                "mutation($ns: String!, $m: JSON!) { createGadgetFromManifest(namespace: $ns, manifest: $m) "
                "{ metadata { name } spec { size color parts { name count } } } }",
                GADGET_PATH,
                ns=ns,
                m={"apiVersion": f"{GROUP}/v1", "kind": "Gadget", "metadata": {"name": name},
                   "spec": {"size": 3, "color": "red", "parts": [{"name": "bolt", "count": 4}]}},
            )  # fmt: skip
            assert made["createGadgetFromManifest"]["spec"] == {
                "size": 3, "color": "red", "parts": [{"name": "bolt", "count": 4}],
            }  # fmt: skip
            event = await _next_of(group_ws, gadgets)
            assert event["watchGadgets"]["type"] == "ADDED"
            assert event["watchGadgets"]["object"]["metadata"]["name"] == name

            # Three patch types on the CRD (strategic merge is refused by the apiserver for
            # custom resources: its error comes through), typed results.
            patched = await run(
                'mutation($ns: String!, $n: String!) { a: patchGadget(namespace: $ns, name: $n, type: MERGE, patch: {spec: {size: 5}}) { spec { size } } '
                'b: patchGadget(namespace: $ns, name: $n, type: JSON, patch: [{op: "replace", path: "/spec/color", value: "blue"}]) { spec { color } } '
                'c: patchGadget(namespace: $ns, name: $n, type: APPLY, fieldManager: "e2e", force: true, '
                'patch: {apiVersion: "' + GROUP + '/v1", kind: "Gadget", metadata: {name: $n}, spec: {size: 7}}) { spec { size color } } }',
                GADGET_PATH, ns=ns, n=name,
            )  # fmt: skip
            assert patched["a"]["spec"]["size"] == 5
            assert patched["b"]["spec"]["color"] == "blue"
            assert patched["c"]["spec"]["size"] == 7
            sizes = [
                (await _next_of(group_ws, gadgets))["watchGadgets"]["object"]["spec"]["size"]
                for _ in range(3)
            ]
            assert sizes == [5, 5, 7]
            status = await run(
                "mutation($ns: String!, $n: String!) { patchGadgetStatus(namespace: $ns, name: $n, "
                "type: MERGE, patch: {status: {ready: true}}) { status { ready } } }",
                GADGET_PATH, ns=ns, n=name,
            )  # fmt: skip
            assert status["patchGadgetStatus"]["status"]["ready"] is True
            await _next_of(group_ws, gadgets)

            # A built-in kind: a Deployment with a strategic merge on its containers.
            manifest = {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": dep},
                "spec": {
                    "replicas": 1, "selector": {"matchLabels": {"app": dep}},
                    "template": {
                        "metadata": {"labels": {"app": dep}},
                        "spec": {"containers": [{"name": "web", "image": "nginx:1"}]},
                    },
                },
            }  # fmt: skip
            await run(
                "mutation($ns: String!, $m: JSON!) { createDeploymentFromManifest(namespace: $ns, manifest: $m) { metadata { name } } }",
                ns=ns, m=manifest,
            )  # fmt: skip
            assert (await _next_of(ws, deployments))["watchDeployments"]["type"] == "ADDED"
            merged = await run(
                "mutation($ns: String!, $n: String!) { patchDeployment(namespace: $ns, name: $n, type: STRATEGIC_MERGE, "
                'patch: {spec: {template: {spec: {containers: [{name: "side", image: "busybox"}]}}}}) '
                "{ spec { template { spec { containers { name image } } } } } }",
                ns=ns, n=dep,
            )  # fmt: skip
            containers = merged["patchDeployment"]["spec"]["template"]["spec"]["containers"]
            assert sorted(c["name"] for c in containers) == ["side", "web"]
            config = unique("settings")
            made_cm = await run(
                "mutation($ns: String!, $n: String!) { createConfigMap(namespace: $ns, "
                'object: {metadata: {name: $n}, data: {mode: "fast"}}) { data } }',
                ns=ns, n=config,
            )  # fmt: skip
            assert made_cm["createConfigMap"]["data"] == {"mode": "fast"}
            listed = await run(
                "query($ns: String!) { deployments(namespace: $ns) { items { metadata { name } } } "
                "configMaps(namespace: $ns) { items { metadata { name } data } } }",
                ns=ns,
            )
            assert dep in {i["metadata"]["name"] for i in listed["deployments"]["items"]}
            assert {"metadata": {"name": config}, "data": {"mode": "fast"}} in listed["configMaps"][
                "items"
            ]
            assert (await _next_of(ws, deployments))["watchDeployments"]["type"] == "MODIFIED"

            # The CRD leaves the catalog: its subscription ends with a clear error; the
            # Deployment subscription, in flight across the swap, keeps delivering.
            holder.swap(_catalog(2, docs))
            await live.wait_for(2)
            assert GROUP not in live.groups
            ended = await _message_of(group_ws, gadgets)
            assert ended["type"] == "next", ended
            (error,) = ended["payload"]["errors"]
            assert error["message"] == f"API group {GROUP!r} is no longer served by the cluster"
            assert error["extensions"]["code"] == "NOT_FOUND"
            assert (await _message_of(group_ws, gadgets))["type"] == "complete"
            await run(
                "mutation($ns: String!, $n: String!) { patchDeployment(namespace: $ns, name: $n, type: MERGE, patch: {spec: {replicas: 2}}) { spec { replicas } } }",
                ns=ns, n=dep,
            )  # fmt: skip
            event = await _next_of(ws, deployments)
            assert event["watchDeployments"]["object"]["spec"]["replicas"] == 2
            gone = await gql.post(GADGET_PATH, json={"query": "{ gadgets(namespace: \"team-a\") { items { metadata { name } } } }"})  # fmt: skip
            assert gone.status_code == 404
            assert "no GraphQL schema for API group" in gone.json()["errors"][0]["message"]
        await admin.delete(f"/apis/apps/v1/namespaces/{ns}/deployments/{dep}")
        await admin.delete(f"/api/v1/namespaces/{ns}/configmaps/{config}")
        await admin.delete(f"/apis/{GROUP}/v1/namespaces/{ns}/gadgets/{name}")


_pending: dict[str, list[dict[str, Any]]] = {}


async def _message_of(ws: TransportWS, op_id: str) -> dict[str, Any]:
    """The next message of ``op_id``; another operation's are kept, in order, for it."""
    if _pending.get(op_id):
        return _pending[op_id].pop(0)
    while True:
        message = await ws.recv()
        if message.get("id") == op_id:
            return message
        _pending.setdefault(message["id"], []).append(message)


async def _next_of(ws: TransportWS, op_id: str) -> dict[str, Any]:
    """The next change of a watch subscription; ``RESYNC`` markers are passed over.

    A kind whose CRD was just established can have its first upstream watch refused
    with 410 (the apiserver's cache for it starts after the list's version) or closed
    when the CRD's storage is replaced: the gateway then relists and frames the
    difference with ``RESYNC`` begin/end.  The changes inside the frame are the ones a
    client applies, so they are returned like any other.
    """
    while True:
        message = await _message_of(ws, op_id)
        assert message["type"] == "next", message
        data: dict[str, Any] = message["payload"]["data"]
        (event,) = data.values()
        if event["type"] != "RESYNC":
            return data


REPLICASETS = Resource("apps", "v1", "ReplicaSet", "replicasets", "replicaset", True)
NODES = Resource("", "v1", "Node", "nodes", "node", False)
SERVICES = Resource("", "v1", "Service", "services", "service", True)
OWNERS = 50


def _owned_by(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"],
            "controller": True,
        }
    ]


def _upstream_requests(metrics: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("kube_gateway_upstream_request_duration_seconds_count")
    )


async def test_relations_over_50_owners_cost_a_bounded_number_of_upstream_calls(
    kube_apiserver: KubeAPIServer,
) -> None:
    kube = kube_apiserver
    ns, node = unique("rel"), unique("rel-node")
    async with httpx.AsyncClient(
        base_url=kube.url, verify=kube.ssl_context(), headers=kube.headers("admin"), timeout=60
    ) as admin:

        async def create(path: str, body: dict[str, Any]) -> dict[str, Any]:
            response = await admin.post(path, json=body)
            assert response.status_code == 201, response.text
            return response.json()  # type: ignore[no-any-return]

        await create("/api/v1/namespaces", {"metadata": {"name": ns}})
        await create("/api/v1/nodes", {"metadata": {"name": node}})
        docs = {p: await _openapi(admin, p) for p in ("api/v1", "apis/apps/v1")}

        async def chain(i: int) -> dict[str, Any]:
            labels = {"app": f"web-{i}"}
            dep = await create(f"/apis/apps/v1/namespaces/{ns}/deployments", {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"web-{i}"},
                "spec": {"selector": {"matchLabels": labels}, "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}},
            })  # fmt: skip
            rs = await create(f"/apis/apps/v1/namespaces/{ns}/replicasets", {
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": f"web-{i}-rs", "ownerReferences": _owned_by(dep)},
                "spec": {"selector": {"matchLabels": labels}, "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}},
            })  # fmt: skip
            return await create(f"/api/v1/namespaces/{ns}/pods", {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"web-{i}-pod", "labels": labels, "ownerReferences": _owned_by(rs)},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/x:1"}]},
            })  # fmt: skip

        pods = await asyncio.gather(*(chain(i) for i in range(OWNERS)))
        first = pods[0]
        await create(f"/api/v1/namespaces/{ns}/services", {
            "metadata": {"name": "web-0"},
            "spec": {"selector": {"app": "web-0"}, "ports": [{"port": 80}]},
        })  # fmt: skip
        await create(f"/api/v1/namespaces/{ns}/endpoints", {
            "metadata": {"name": "web-0"},
            "subsets": [{"ports": [{"port": 80}], "addresses": [{"ip": "10.0.0.1", "targetRef": {
                "kind": "Pod", "namespace": ns, "name": first["metadata"]["name"],
                "uid": first["metadata"]["uid"]}}]}],
        })  # fmt: skip
        await create(f"/api/v1/namespaces/{ns}/events", {
            "metadata": {"name": "web-0-rs.scaled"}, "reason": "Scaled", "type": "Normal",
            "involvedObject": first["metadata"]["ownerReferences"][0] | {"namespace": ns},
        })  # fmt: skip

        settings = Settings(
            host="127.0.0.1", http_port=0, grpc_port=0, server=kube.url, ca_file=kube.ca_file,
            log_level="warning",
        )  # fmt: skip
        async with (
            serve_app(settings) as (url, app),
            httpx.AsyncClient(base_url=url, headers=kube.headers("admin"), timeout=60) as gql,
        ):
            holder = CatalogHolder()
            live = LiveSchema(_Gateway(url, app, None).graphql, holder)  # type: ignore[arg-type]
            live.start()
            try:
                registry = Registry((*REGISTRY.values(), DEPLOYMENTS, REPLICASETS, NODES, SERVICES))
                holder.swap(Catalog(registry, {
                    ("apps", "v1"): GroupVersion("apps", "v1", (DEPLOYMENTS, REPLICASETS), docs["apis/apps/v1"]),
                    ("", "v1"): GroupVersion("", "v1", (NODES, SERVICES), docs["api/v1"]),
                }, 1))  # fmt: skip
                await live.wait_for(1)
                before = _upstream_requests((await gql.get("/metrics")).text)
                body = (await gql.post("/graphql", json={"query": """
                    query($ns: String!) {
                      deployments(namespace: $ns) { items { metadata { name }
                        replicaSets { metadata { name } deployment { metadata { name } }
                          events { reason }
                          pods { metadata { name } replicaSet { metadata { name } }
                                 node { metadata { name } pods { metadata { name } } } } } } }
                      services(namespace: $ns) { items { metadata { name }
                        endpoints { service { metadata { name } }
                          subsets { addresses { targetRef { pod { metadata { name } } } } } } } }
                    }""", "variables": {"ns": ns}})).json()  # fmt: skip
                after = _upstream_requests((await gql.get("/metrics")).text)
            finally:
                await live.aclose()
        assert "errors" not in body, body
        deployments = body["data"]["deployments"]["items"]
        assert len(deployments) == OWNERS
        for d in deployments:
            name = d["metadata"]["name"]
            (rs,) = d["replicaSets"]
            assert rs["metadata"]["name"] == f"{name}-rs"
            assert rs["deployment"]["metadata"]["name"] == name
            (pod,) = rs["pods"]
            assert pod["metadata"]["name"] == f"{name}-pod"
            assert pod["replicaSet"]["metadata"]["name"] == f"{name}-rs"
            assert pod["node"]["metadata"]["name"] == node
            assert len(pod["node"]["pods"]) == OWNERS
            assert rs["events"] == ([{"reason": "Scaled"}] if name == "web-0" else [])
        (service,) = body["data"]["services"]["items"]
        endpoints = service["endpoints"]
        assert endpoints["service"]["metadata"]["name"] == "web-0"
        target = endpoints["subsets"][0]["addresses"][0]["targetRef"]
        assert target["pod"]["metadata"]["name"] == "web-0-pod"
        # 50 owners, three levels, eight relations: a list per kind and namespace, or a get
        # where one or two names are asked, never a call per parent.  Lists: deployments,
        # replicasets (owned and owner share one), deployments again (the owners), pods (owned),
        # pods of every namespace (the node's), events, services; gets: the node, the
        # endpoints, the service, the pod.
        assert after - before == 11
        await admin.delete(f"/api/v1/namespaces/{ns}")
        await admin.delete(f"/api/v1/nodes/{node}")
