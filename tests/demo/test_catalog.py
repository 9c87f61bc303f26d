"""The demo serves more than the gateway's seeds: workloads, services, config, nodes,
namespaces, a custom resource with its CRD, OpenAPI v3 and aggregated discovery."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest

from gateway.core.model.registry import REGISTRY
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.catalog import DEMO_REGISTRY, WIDGET_CRD
from scripts import demo_definitions as demo_extract

from .conftest import WatchReader

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

#: One manifest per new kind: (collection path, manifest, a merge patch, where it shows).
NEW_KINDS: dict[str, tuple[str, dict[str, Any], dict[str, Any], tuple[str, ...]]] = {
    "deployments": (
        "/apis/apps/v1/namespaces/demo/deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "api", "labels": {"app": "api"}},
            "spec": {
                "selector": {"matchLabels": {"app": "api"}},
                "template": {
                    "metadata": {"labels": {"app": "api"}},
                    "spec": {"containers": [{"name": "api", "image": "nginx:1.27"}]},
                },
            },
        },
        {"spec": {"replicas": 3}},
        ("spec", "replicas"),
    ),
    "replicasets": (
        "/apis/apps/v1/namespaces/demo/replicasets",
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "api-1"},
            "spec": {
                "selector": {"matchLabels": {"app": "api1"}},
                "template": {
                    "metadata": {"labels": {"app": "api1"}},
                    "spec": {"containers": [{"name": "api", "image": "nginx:1.27"}]},
                },
            },
        },
        {"spec": {"replicas": 4}},
        ("spec", "replicas"),
    ),
    "services": (
        "/api/v1/namespaces/demo/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "api"},
            "spec": {"selector": {"app": "api"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        {"spec": {"sessionAffinity": "ClientIP"}},
        ("spec", "sessionAffinity"),
    ),
    "configmaps": (
        "/api/v1/namespaces/demo/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "api"}, "data": {"a": "1"}},
        {"data": {"b": "2"}},
        ("data", "b"),
    ),
    "nodes": (
        "/api/v1/nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-z"}, "spec": {}},
        {"spec": {"unschedulable": True}},
        ("spec", "unschedulable"),
    ),
    "namespaces": (
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-z"}},
        {"metadata": {"labels": {"team": "z"}}},
        ("metadata", "labels", "team"),
    ),
    "widgets": (
        "/apis/demo.kube-gateway.dev/v1/namespaces/demo/widgets",
        {
            "apiVersion": "demo.kube-gateway.dev/v1",
            "kind": "Widget",
            "metadata": {"name": "green-widget"},
            "spec": {"color": "green", "size": 2},
        },
        {"spec": {"size": 5}},
        ("spec", "size"),
    ),
}


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


@pytest.mark.parametrize("plural", sorted(NEW_KINDS))
async def test_new_kinds_create_get_list_watch_patch_delete(
    client: httpx.AsyncClient, plural: str
) -> None:
    path, manifest, patch, shows = NEW_KINDS[plural]
    start = (await client.get(path)).json()
    assert start["kind"] == f"{manifest['kind']}List"
    params = {"watch": "1", "resourceVersion": start["metadata"]["resourceVersion"]}
    async with client.stream("GET", path, params=params) as stream:
        events = WatchReader(stream)
        created = await client.post(path, json=manifest)
        assert created.status_code == 201, created.text
        body = created.json()
        assert (body["kind"], body["apiVersion"]) == (manifest["kind"], manifest["apiVersion"])
        added = await events.next()
        assert added == {"type": "ADDED", "object": body}
        name = manifest["metadata"]["name"]
        assert (await client.get(f"{path}/{name}")).json() == body
        names = [i["metadata"]["name"] for i in (await client.get(path)).json()["items"]]
        assert name in names

        patched = await client.patch(
            f"{path}/{name}",
            json=patch,
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert patched.status_code == 200, patched.text
        assert _dig(patched.json(), shows) == _dig(patch, shows)
        modified = await events.next()
        assert modified == {"type": "MODIFIED", "object": patched.json()}

        deleted = await client.delete(f"{path}/{name}")
        assert deleted.status_code == 200, deleted.text
        gone = await events.next()
        assert gone["type"] == "DELETED"
        assert gone["object"]["metadata"]["uid"] == body["metadata"]["uid"]
    assert (await client.get(f"{path}/{name}")).status_code == 404


async def test_a_namespace_object_is_where_objects_may_live(client: httpx.AsyncClient) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert (await client.post("/api/v1/namespaces/team-q/configmaps", json=cm)).status_code == 404
    ns = await client.post(
        "/api/v1/namespaces",
        json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-q"}},
    )
    assert ns.status_code == 201
    assert ns.json()["status"] == {"phase": "Active"}
    assert ns.json()["spec"] == {"finalizers": ["kubernetes"]}
    assert (await client.post("/api/v1/namespaces/team-q/configmaps", json=cm)).status_code == 201
    assert (await client.delete("/api/v1/namespaces/team-q")).status_code == 200
    assert (await client.post("/api/v1/namespaces/team-q/configmaps", json=cm)).status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/apis/demo.kube-gateway.dev/v1/namespaces/demo/widgets/blue-widget",
        "/apis/apps/v1/namespaces/demo/deployments/web",
    ],
)
async def test_status_is_its_own_subresource(client: httpx.AsyncClient, path: str) -> None:
    current = (await client.get(path)).json()
    generation = current["metadata"]["generation"]
    changed = {**current, "status": {"observedGeneration": 99}}
    changed["metadata"] = {**current["metadata"], "labels": {"changed": "yes"}}
    main = (await client.put(path, json=changed)).json()
    assert main["status"] == current["status"]  # the main resource ignores status
    assert main["metadata"]["labels"] == {"changed": "yes"}
    assert main["metadata"]["generation"] == generation  # metadata only: no new generation
    status_write = {**main, "status": {**main["status"], "observedGeneration": 7}}
    status_write["spec"] = {"ignored": True}
    status_write["metadata"] = {**main["metadata"], "labels": {}}
    written = await client.put(f"{path}/status", json=status_write)
    assert written.status_code == 200, written.text
    after = written.json()
    assert after["status"]["observedGeneration"] == 7
    assert after["spec"] == main["spec"]
    assert after["metadata"]["labels"] == {"changed": "yes"}


async def test_sample_objects_reference_each_other_consistently(
    client: httpx.AsyncClient,
) -> None:
    deployment = (await client.get("/apis/apps/v1/namespaces/demo/deployments/web")).json()
    replicasets = (await client.get("/apis/apps/v1/namespaces/demo/replicasets")).json()["items"]
    [rs] = [
        r
        for r in replicasets
        if any(o["uid"] == deployment["metadata"]["uid"] for o in r["metadata"]["ownerReferences"])
    ]
    assert rs["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "web",
            "uid": deployment["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    pods = (await client.get("/api/v1/namespaces/demo/pods")).json()["items"]
    owned = [
        p
        for p in pods
        if any(o["uid"] == rs["metadata"]["uid"] for o in p["metadata"].get("ownerReferences", []))
    ]
    assert {p["metadata"]["name"] for p in owned} == {
        "web-6d4b9c7f5-x7k2p",
        "web-6d4b9c7f5-m9q4z",
    }
    for p in owned:
        [ref] = p["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["controller"]) == (
            "ReplicaSet",
            rs["metadata"]["name"],
            True,
        )
        labels = p["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in rs["spec"]["selector"]["matchLabels"].items())

    service = (await client.get("/api/v1/namespaces/demo/services/web")).json()
    selected = [
        p
        for p in pods
        if all(
            p["metadata"].get("labels", {}).get(k) == v
            for k, v in service["spec"]["selector"].items()
        )
    ]
    assert {p["metadata"]["uid"] for p in selected} == {p["metadata"]["uid"] for p in owned}
    endpoints = (await client.get("/api/v1/namespaces/demo/endpoints/web")).json()
    targets = {a["targetRef"]["uid"] for s in endpoints["subsets"] for a in s["addresses"]}
    assert targets == {p["metadata"]["uid"] for p in owned}

    nodes = {n["metadata"]["name"] for n in (await client.get("/api/v1/nodes")).json()["items"]}
    all_pods = (await client.get("/api/v1/pods")).json()["items"]
    scheduled = {p["spec"]["nodeName"] for p in all_pods if p["spec"].get("nodeName")}
    assert scheduled and scheduled <= nodes

    for p in owned:
        [volume] = [v for v in p["spec"]["volumes"] if "configMap" in v]
        cm = await client.get(f"/api/v1/namespaces/demo/configmaps/{volume['configMap']['name']}")
        assert cm.status_code == 200

    widgets = (await client.get("/apis/demo.kube-gateway.dev/v1/widgets")).json()["items"]
    assert len(widgets) >= 2
    assert {w["status"]["phase"] for w in widgets} == {"Ready", "Pending"}


async def test_the_crd_of_the_custom_resource_is_served(client: httpx.AsyncClient) -> None:
    crds = (await client.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")).json()
    [crd] = [c for c in crds["items"] if c["metadata"]["name"] == "widgets.demo.kube-gateway.dev"]
    assert crd["spec"]["names"] == WIDGET_CRD["spec"]["names"]
    assert crd["spec"]["versions"] == WIDGET_CRD["spec"]["versions"]
    established = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert established == {"NamesAccepted": "True", "Established": "True"}
    assert crd["status"]["acceptedNames"]["kind"] == "Widget"
    assert crd["status"]["storedVersions"] == ["v1"]


async def _index(client: httpx.AsyncClient) -> dict[str, str]:
    index = (await client.get("/openapi/v3")).json()["paths"]
    return {key: entry["serverRelativeURL"] for key, entry in index.items()}


async def test_openapi_v3_index_names_one_document_per_group_version(
    client: httpx.AsyncClient,
) -> None:
    index = await _index(client)
    expected = {
        f"apis/{r.group}/{r.version}" if r.group else f"api/{r.version}"
        for r in DEMO_REGISTRY.values()
    }
    assert set(index) == expected
    for key, url in index.items():
        r = await client.get(url)
        assert r.status_code == 200
        digest = url.split("?hash=")[1]
        assert hashlib.sha512(r.content).hexdigest().upper() == digest
        assert r.headers["etag"] == f'"{digest}"'
        assert r.headers["cache-control"] == "public, immutable"
        doc = r.json()
        assert doc["openapi"] == "3.0.0"
        schemas = doc["components"]["schemas"]
        group_version = key.split("/", 1)[1]
        for res in DEMO_REGISTRY.values():
            if res.api_version != group_version:
                continue
            gvks = [
                gvk
                for s in schemas.values()
                for gvk in s.get("x-kubernetes-group-version-kind", [])
                if gvk == {"group": res.group, "kind": res.kind, "version": res.version}
            ]
            assert gvks, (key, res.kind)
        for ref in _all_refs(doc):
            assert ref.startswith("#/components/schemas/")
            assert ref.removeprefix("#/components/schemas/") in schemas, ref

    apps = (await client.get(index["apis/apps/v1"])).json()["components"]["schemas"]
    spec = apps["io.k8s.api.apps.v1.Deployment"]["properties"]["spec"]
    assert spec["allOf"] == [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"}]
    assert spec["default"] == {}
    widgets = (await client.get(index["apis/demo.kube-gateway.dev/v1"])).json()
    widget = widgets["components"]["schemas"]["dev.kube-gateway.demo.v1.Widget"]
    assert widget["properties"]["spec"]["properties"]["color"]["enum"] == ["red", "green", "blue"]
    stale = await client.get(
        "/openapi/v3/apis/apps/v1", params={"hash": "0"}, follow_redirects=False
    )
    assert stale.status_code == 301
    assert stale.headers["location"] == index["apis/apps/v1"]
    assert (await client.get("/openapi/v3/apis/nothing/v1")).status_code == 404


def _all_refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for k, v in node.items() if k != "$ref" for r in _all_refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _all_refs(v)]
    return []


async def test_openapi_hash_changes_when_and_only_when_a_document_changes(
    client: httpx.AsyncClient,
) -> None:
    before = await _index(client)
    assert before == await _index(client)
    crd_path = (
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.demo.kube-gateway.dev"
    )
    labelled = await client.patch(
        crd_path,
        json={"metadata": {"labels": {"owner": "team-web"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert labelled.status_code == 200
    assert await _index(client) == before  # a new resourceVersion, the same document

    crd = labelled.json()
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props["properties"]["shape"] = {"type": "string", "description": "Round or square."}
    assert (await client.put(crd_path, json=crd)).status_code == 200
    after = await _index(client)
    changed = {key for key in before if before[key] != after[key]}
    assert changed == {"apis/demo.kube-gateway.dev/v1"}
    doc = (await client.get(after["apis/demo.kube-gateway.dev/v1"])).json()
    widget = doc["components"]["schemas"]["dev.kube-gateway.demo.v1.Widget"]
    assert "shape" in widget["properties"]["spec"]["properties"]


async def test_openapi_documents_differ_by_served_set() -> None:
    smaller = DemoUpstream(registry=REGISTRY, seed=False)
    async with (
        smaller,
        httpx.AsyncClient(
            base_url=smaller.url, headers={"Authorization": "Bearer admin-token"}
        ) as small,
    ):
        small_index = await _index(small)
    async with (
        DemoUpstream(seed=False) as full,
        httpx.AsyncClient(
            base_url=full.url, headers={"Authorization": "Bearer admin-token"}
        ) as big,
    ):
        big_index = await _index(big)
    # core/v1 gains kinds (another document), coordination.k8s.io/v1 does not (same one)
    assert small_index["api/v1"] != big_index["api/v1"]
    assert small_index["apis/coordination.k8s.io/v1"] == big_index["apis/coordination.k8s.io/v1"]
    assert "apis/apps/v1" not in small_index


async def test_aggregated_discovery_lists_every_resource(client: httpx.AsyncClient) -> None:
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in ("/api", "/apis"):
        r = await client.get(path, headers={"Accept": AGGREGATED})
        assert r.status_code == 200
        assert r.headers["content-type"] == AGGREGATED
        assert r.headers["vary"] == "Accept"
        body = r.json()
        assert (body["kind"], body["apiVersion"]) == (
            "APIGroupDiscoveryList",
            "apidiscovery.k8s.io/v2",
        )
        for group in body["items"]:
            name = group["metadata"].get("name", "")
            assert (name == "") == (path == "/api")
            for version in group["versions"]:
                assert version["freshness"] == "Current"
                for res in version["resources"]:
                    found[(name, version["version"], res["resource"])] = res
    assert set(found) == {(r.group, r.version, r.plural) for r in DEMO_REGISTRY.values()}
    for r in DEMO_REGISTRY.values():
        entry = found[(r.group, r.version, r.plural)]
        assert entry["scope"] == ("Namespaced" if r.namespaced else "Cluster")
        assert set(entry["verbs"]) == set(r.verbs)
        assert entry["singularResource"] == r.singular
        assert entry["responseKind"]["kind"] == r.kind
        assert entry.get("shortNames", []) == list(r.short_names)
        subs = {s["subresource"]: set(s["verbs"]) for s in entry.get("subresources", [])}
        assert subs == {name: set(s.verbs) for name, s in r.subresources.items()}
    widget = found[("demo.kube-gateway.dev", "v1", "widgets")]
    assert widget["responseKind"] == {
        "group": "demo.kube-gateway.dev",
        "version": "v1",
        "kind": "Widget",
    }
    assert found[("apps", "v1", "deployments")]["categories"] == ["all"]


async def test_discovery_negotiates_accept(client: httpx.AsyncClient) -> None:
    legacy = await client.get("/apis")
    assert legacy.json()["kind"] == "APIGroupList"
    assert (await client.get("/api", headers={"Accept": "application/json"})).json()[
        "kind"
    ] == "APIVersions"
    aggregated_first = await client.get(
        "/apis", headers={"Accept": f"{AGGREGATED},application/json"}
    )
    assert aggregated_first.json()["kind"] == "APIGroupDiscoveryList"
    # as kube-apiserver: aggregated whenever it is offered at all
    json_first = await client.get("/apis", headers={"Accept": f"application/json,{AGGREGATED}"})
    assert json_first.json()["kind"] == "APIGroupDiscoveryList"
    old = AGGREGATED.replace("v=v2", "v=v2beta1")
    refused = await client.get("/apis", headers={"Accept": old})
    assert refused.status_code == 406
    assert refused.json()["message"] == (
        "only the following media types are accepted: application/json, application/yaml, "
        "application/vnd.kubernetes.protobuf"
    )
    fallback = await client.get("/apis", headers={"Accept": f"{old},application/json"})
    assert fallback.json()["kind"] == "APIGroupList"
    # a group's own discovery document is always the legacy one
    group = await client.get("/apis/apps", headers={"Accept": f"{AGGREGATED},application/json"})
    assert group.json()["kind"] == "APIGroup"


def test_the_demo_definitions_file_matches_a_fresh_extraction() -> None:
    assert demo_extract.main(["--check"]) == 0
