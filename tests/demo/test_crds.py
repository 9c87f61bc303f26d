"""A CustomResourceDefinition created, changed and deleted while the demo runs is served as
kube-apiserver serves it (the shapes below were taken from kube-apiserver v1.36.3 running the
same steps): discovery, OpenAPI v3, storage, subresources, watches; then gone again."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from typing import Any

import httpx

from tests.demo.conftest import WatchReader

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GROUP = "probe.example.com"
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
MERGE = {"content-type": "application/merge-patch+json"}


def _version(name: str, *, storage: bool, served: bool = True, **more: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": "object",
        "properties": {
            "size": {"type": "integer", "minimum": 0},
            "color": {"type": "string", "enum": ["red", "blue"]},
            "replicas": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "enabled": {"type": "boolean", "default": True},
            **more,
        },
    }
    status = {
        "type": "object",
        "properties": {
            "replicas": {"type": "integer"},
            "selector": {"type": "string"},
            "phase": {"type": "string"},
        },
    }
    return {
        "name": name,
        "served": served,
        "storage": storage,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "description": "A gizmo.",
                "properties": {"spec": spec, "status": status},
            }
        },
        "subresources": {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        },
        "selectableFields": [{"jsonPath": ".spec.color"}],
    }


def gizmo_crd(*versions: dict[str, Any], scope: str = "Namespaced") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gizmos.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "plural": "gizmos",
                "singular": "gizmo",
                "kind": "Gizmo",
                "shortNames": ["gz"],
                "categories": ["all"],
            },
            "versions": list(versions) or [_version("v1", storage=True)],
        },
    }


def gizmo(name: str, version: str = "v1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "Gizmo",
        "metadata": {"name": name, "labels": {"app": "gizmo"}},
        "spec": spec,
    }


async def _create_crd(client: httpx.AsyncClient, crd: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    created = await client.post(CRDS, json=crd)
    assert created.status_code == 201, created.text
    # served at once: the next request already finds it (the apiserver took 13 ms)
    served = await client.get(f"/apis/{GROUP}/{crd['spec']['versions'][0]['name']}")
    assert served.status_code == 200, served.text
    assert time.monotonic() - started < 1.0
    body: dict[str, Any] = created.json()
    return body


async def test_a_created_crd_is_established_and_discovered(client: httpx.AsyncClient) -> None:
    assert (await client.get(f"/apis/{GROUP}/v1")).status_code == 404
    crd = await _create_crd(client, gizmo_crd())
    conditions = {c["type"]: (c["status"], c["reason"]) for c in crd["status"]["conditions"]}
    assert conditions == {
        "NamesAccepted": ("True", "NoConflicts"),
        "Established": ("True", "InitialNamesAccepted"),
    }
    assert crd["status"]["acceptedNames"]["listKind"] == "GizmoList"
    assert crd["status"]["storedVersions"] == ["v1"]

    group = (await client.get(f"/apis/{GROUP}")).json()
    gv = {"groupVersion": f"{GROUP}/v1", "version": "v1"}
    assert group == {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [gv],
        "preferredVersion": gv,
    }
    listed = (await client.get("/apis")).json()["groups"]
    assert {"name": GROUP, "versions": [gv], "preferredVersion": gv} in listed
    resources = (await client.get(f"/apis/{GROUP}/v1")).json()["resources"]
    assert resources == [
        {
            "name": "gizmos",
            "singularName": "gizmo",
            "namespaced": True,
            "kind": "Gizmo",
            "verbs": [
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
            "shortNames": ["gz"],
            "categories": ["all"],
        },
        {
            "name": "gizmos/status",
            "singularName": "",
            "namespaced": True,
            "kind": "Gizmo",
            "verbs": ["get", "patch", "update"],
        },
        {
            "name": "gizmos/scale",
            "singularName": "",
            "namespaced": True,
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
            "group": "autoscaling",
            "version": "v1",
        },
    ]
    aggregated = (await client.get("/apis", headers={"Accept": AGGREGATED})).json()
    item = next(i for i in aggregated["items"] if i["metadata"].get("name") == GROUP)
    [version] = item["versions"]
    [entry] = version["resources"]
    assert version["version"] == "v1"
    assert entry["responseKind"] == {"group": GROUP, "version": "v1", "kind": "Gizmo"}
    assert entry["verbs"] == [
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "create",
        "update",
        "watch",
    ]
    assert [(s["subresource"], s["responseKind"]["kind"]) for s in entry["subresources"]] == [
        ("status", "Gizmo"),
        ("scale", "Scale"),
    ]
    assert (entry["scope"], entry["shortNames"], entry["categories"]) == (
        "Namespaced",
        ["gz"],
        ["all"],
    )


async def test_a_created_crd_publishes_its_openapi_v3(client: httpx.AsyncClient) -> None:
    await _create_crd(client, gizmo_crd())
    index = (await client.get("/openapi/v3")).json()["paths"]
    url = index[f"apis/{GROUP}/v1"]["serverRelativeURL"]
    doc = (await client.get(url)).json()
    schemas = doc["components"]["schemas"]
    kind = schemas["com.example.probe.v1.Gizmo"]
    assert kind["x-kubernetes-group-version-kind"] == [
        {"group": GROUP, "kind": "Gizmo", "version": "v1"}
    ]
    assert list(kind["properties"]) == ["apiVersion", "kind", "metadata", "spec", "status"]
    assert kind["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    ]
    assert kind["properties"]["spec"]["properties"]["size"] == {"type": "integer", "minimum": 0}
    listed = schemas["com.example.probe.v1.GizmoList"]
    assert listed["properties"]["items"]["items"] == {
        "$ref": "#/components/schemas/com.example.probe.v1.Gizmo"
    }
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas
    # the scale subresource brings autoscaling/v1 Scale along
    assert schemas["io.k8s.api.autoscaling.v1.Scale"]["x-kubernetes-group-version-kind"] == [
        {"group": "autoscaling", "kind": "Scale", "version": "v1"}
    ]
    assert schemas["io.k8s.api.autoscaling.v1.ScaleStatus"]["required"] == ["replicas"]
    assert doc["info"] == {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"}
    assert f"/apis/{GROUP}/v1/namespaces/{{namespace}}/gizmos/{{name}}" in doc["paths"]


async def test_objects_are_stored_pruned_defaulted_and_validated(
    client: httpx.AsyncClient,
) -> None:
    await _create_crd(client, gizmo_crd())
    base = f"/apis/{GROUP}/v1/namespaces/demo/gizmos"
    body = gizmo("g1", size=1, replicas=2, junk=1, labels={"a": "b"})
    body["status"] = {"phase": "ignored"}
    made = await client.post(base, json=body)
    assert made.status_code == 201, made.text
    assert made.headers["warning"] == '299 - "unknown field \\"spec.junk\\""'
    obj = made.json()
    assert obj["spec"] == {"enabled": True, "labels": {"a": "b"}, "replicas": 2, "size": 1}
    assert "status" not in obj  # the status subresource owns it
    assert obj["metadata"]["generation"] == 1
    assert list(obj) == ["apiVersion", "kind", "metadata", "spec"]

    strict = await client.post(base, params={"fieldValidation": "Strict"}, json=gizmo("g2", junk=1))
    assert strict.status_code == 400
    assert strict.json()["message"] == (
        'Gizmo in version "v1" cannot be handled as a Gizmo: strict decoding error: '
        'unknown field "spec.junk"'
    )
    wrong = await client.post(base, json=gizmo("g3", size="big", color="green"))
    assert wrong.status_code == 422, wrong.text
    causes = {c["field"]: c["message"] for c in wrong.json()["details"]["causes"]}
    assert causes == {
        "spec.size": 'Invalid value: "string": spec.size in body must be of type integer: "string"',
        "spec.color": 'Unsupported value: "green": supported values: "red", "blue"',
    }
    assert (await client.get(f"{base}/g3")).status_code == 404


async def test_generation_and_the_status_subresource(client: httpx.AsyncClient) -> None:
    await _create_crd(client, gizmo_crd())
    base = f"/apis/{GROUP}/v1/namespaces/demo/gizmos"
    assert (await client.post(base, json=gizmo("g1", size=1, replicas=2))).status_code == 201
    spec = await client.patch(
        f"{base}/g1", headers=MERGE, json={"spec": {"size": 2}, "status": {"phase": "y"}}
    )
    assert spec.json()["metadata"]["generation"] == 2
    assert "status" not in spec.json()
    status = await client.patch(
        f"{base}/g1/status",
        headers=MERGE,
        json={"spec": {"size": 3}, "status": {"phase": "z", "replicas": 2, "selector": "a=b"}},
    )
    assert status.status_code == 200, status.text
    assert status.json()["metadata"]["generation"] == 2
    assert status.json()["spec"]["size"] == 2
    assert status.json()["status"] == {"phase": "z", "replicas": 2, "selector": "a=b"}
    labels = await client.patch(f"{base}/g1", headers=MERGE, json={"metadata": {"labels": {}}})
    assert labels.json()["metadata"]["generation"] == 2

    scale = await client.get(f"{base}/g1/scale")
    assert scale.status_code == 200
    assert {k: scale.json()[k] for k in ("kind", "apiVersion", "spec", "status")} == {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "spec": {"replicas": 2},
        "status": {"replicas": 2, "selector": "a=b"},
    }
    put = await client.put(f"{base}/g1/scale", json={**scale.json(), "spec": {"replicas": 5}})
    assert put.status_code == 200, put.text
    assert put.json()["spec"] == {"replicas": 5}
    after = (await client.get(f"{base}/g1")).json()
    assert (after["spec"]["replicas"], after["metadata"]["generation"]) == (5, 3)
    patched = await client.patch(f"{base}/g1/scale", headers=MERGE, json={"spec": {"replicas": 1}})
    assert patched.json()["spec"] == {"replicas": 1}
    missing = await client.get(f"{base}/g1/nope")
    assert missing.status_code == 404
    smp = await client.patch(
        f"{base}/g1",
        headers={"content-type": "application/strategic-merge-patch+json"},
        json={"spec": {"size": 9}},
    )
    assert smp.status_code == 415


async def test_a_crd_without_subresources_counts_status_in_its_generation(
    client: httpx.AsyncClient,
) -> None:
    plain = _version("v1", storage=True)
    del plain["subresources"]
    await _create_crd(client, gizmo_crd(plain))
    base = f"/apis/{GROUP}/v1/namespaces/demo/gizmos"
    body = {**gizmo("p1", size=1), "status": {"phase": "a"}}
    made = await client.post(base, json=body)
    assert made.json()["status"] == {"phase": "a"}
    patched = await client.patch(f"{base}/p1", headers=MERGE, json={"status": {"phase": "b"}})
    assert patched.json()["metadata"]["generation"] == 2
    assert (await client.get(f"{base}/p1/status")).status_code == 404


async def test_cluster_scoped_crd(client: httpx.AsyncClient) -> None:
    await _create_crd(client, gizmo_crd(scope="Cluster"))
    made = await client.post(f"/apis/{GROUP}/v1/gizmos", json=gizmo("c1", size=1))
    assert made.status_code == 201, made.text
    assert "namespace" not in made.json()["metadata"]
    assert (await client.get(f"/apis/{GROUP}/v1/namespaces/demo/gizmos")).status_code == 404
    listed = (await client.get(f"/apis/{GROUP}/v1/gizmos")).json()
    assert (listed["kind"], [i["metadata"]["name"] for i in listed["items"]]) == (
        "GizmoList",
        ["c1"],
    )


async def test_lists_selectors_and_watches(
    client: httpx.AsyncClient, open_watch: Callable[..., Any]
) -> None:
    await _create_crd(client, gizmo_crd())
    base = f"/apis/{GROUP}/v1/namespaces/demo/gizmos"
    async with open_watch(base, labelSelector="app=gizmo") as watch:
        for name, color in (("a", "red"), ("b", "blue")):
            assert (await client.post(base, json=gizmo(name, color=color))).status_code == 201
        events = await watch.take(2)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "a"),
            ("ADDED", "b"),
        ]
        assert events[0]["object"]["apiVersion"] == f"{GROUP}/v1"
    red = (await client.get(base, params={"fieldSelector": "spec.color=red"})).json()
    assert [i["metadata"]["name"] for i in red["items"]] == ["a"]
    assert red["metadata"]["continue"] == ""
    by_name = (await client.get(base, params={"fieldSelector": "metadata.name=b"})).json()
    assert [i["metadata"]["name"] for i in by_name["items"]] == ["b"]
    bad = await client.get(base, params={"fieldSelector": "spec.size=2"})
    assert (bad.status_code, bad.json()["message"]) == (
        400,
        "field label not supported: spec.size",
    )
    every = (await client.get(f"/apis/{GROUP}/v1/gizmos")).json()
    assert every["kind"] == "GizmoList" and len(every["items"]) == 2


async def test_a_changed_crd_republishes(
    client: httpx.AsyncClient, open_watch: Callable[..., Any]
) -> None:
    await _create_crd(client, gizmo_crd())
    base = f"/apis/{GROUP}/v1/namespaces/demo/gizmos"
    assert (await client.post(base, json=gizmo("g1", size=1))).status_code == 201
    async with open_watch(base) as watch:
        assert (await watch.next())["type"] == "ADDED"
        current = (await client.get(f"{CRDS}/gizmos.{GROUP}")).json()
        changed = copy.deepcopy(current)
        shape = {"shape": {"type": "string"}}
        changed["spec"]["versions"] = [
            _version("v1", storage=True, **shape),
            _version("v2", storage=False, **shape),
        ]
        put = await client.put(f"{CRDS}/gizmos.{GROUP}", json=changed)
        assert put.status_code == 200, put.text
        assert put.json()["metadata"]["generation"] == 2
        # the old definition's watches end, cleanly, as its storage is torn down
        assert await watch.rest() == []

    v2 = (await client.get(f"/apis/{GROUP}")).json()
    assert [v["version"] for v in v2["versions"]] == ["v2", "v1"]
    assert v2["preferredVersion"]["version"] == "v2"
    index = (await client.get("/openapi/v3")).json()["paths"]
    assert {f"apis/{GROUP}/v1", f"apis/{GROUP}/v2"} <= set(index)
    doc = (await client.get(f"/openapi/v3/apis/{GROUP}/v1")).json()
    spec = doc["components"]["schemas"]["com.example.probe.v1.Gizmo"]["properties"]["spec"]
    assert "shape" in spec["properties"]
    patched = await client.patch(f"{base}/g1", headers=MERGE, json={"spec": {"shape": "round"}})
    assert patched.json()["spec"]["shape"] == "round"
    same = (await client.get(f"/apis/{GROUP}/v2/namespaces/demo/gizmos/g1")).json()
    assert (same["apiVersion"], same["spec"]["shape"]) == (f"{GROUP}/v2", "round")

    # v1 no longer served: its paths and discovery go, v2 keeps the objects
    current = (await client.get(f"{CRDS}/gizmos.{GROUP}")).json()
    current["spec"]["versions"][0].update(served=False, storage=False)
    current["spec"]["versions"][1]["storage"] = True
    put = await client.put(f"{CRDS}/gizmos.{GROUP}", json=current)
    assert put.json()["status"]["storedVersions"] == ["v1", "v2"]
    assert (await client.get(f"{base}/g1")).status_code == 404
    assert (await client.get(f"/apis/{GROUP}/v1")).status_code == 404
    assert [v["version"] for v in (await client.get(f"/apis/{GROUP}")).json()["versions"]] == ["v2"]
    index = (await client.get("/openapi/v3")).json()["paths"]
    assert f"apis/{GROUP}/v1" not in index and f"apis/{GROUP}/v2" in index
    got = await client.get(f"/apis/{GROUP}/v2/namespaces/demo/gizmos/g1")
    assert got.json()["spec"]["shape"] == "round"


async def test_a_deleted_crd_deletes_its_objects_then_goes(
    client: httpx.AsyncClient, open_watch: Callable[..., Any]
) -> None:
    await _create_crd(client, gizmo_crd())
    base = f"/apis/{GROUP}/v1/namespaces/demo/gizmos"
    for name in ("g1", "g2"):
        assert (await client.post(base, json=gizmo(name))).status_code == 201
    async with open_watch(base) as watch:
        watch: WatchReader
        assert [e["type"] for e in await watch.take(2)] == ["ADDED", "ADDED"]
        started = time.monotonic()
        deleted = await client.delete(f"{CRDS}/gizmos.{GROUP}")
        assert deleted.status_code == 200
        marked = deleted.json()
        assert marked["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
        terminating = marked["status"]["conditions"][-1]
        assert (terminating["type"], terminating["reason"]) == (
            "Terminating",
            "InstanceDeletionPending",
        )
        # served no more, at once (the apiserver: 70 ms)
        gone = (f"/apis/{GROUP}/v1", f"/apis/{GROUP}", f"{base}/g1", f"/openapi/v3/apis/{GROUP}/v1")
        for path in gone:
            assert (await client.get(path)).status_code == 404, path
        assert time.monotonic() - started < 1.0
        # the open watch saw each object's DELETED, and ends when the storage is torn down,
        # a second after the CRD went (as the apiserver's: 1.0 s)
        rest = await watch.rest()
        ended = time.monotonic() - started
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in rest] == [
            ("DELETED", "g1"),
            ("DELETED", "g2"),
        ]
        assert 1.0 <= ended < 5.0
    assert GROUP not in str((await client.get("/openapi/v3")).json())
    assert GROUP not in str((await client.get("/apis", headers={"Accept": AGGREGATED})).json())
    assert (await client.get(f"{CRDS}/gizmos.{GROUP}")).status_code == 404
    again = await client.get(base, params={"watch": "1"})
    assert again.status_code == 404

    # and it can be created again, empty
    await _create_crd(client, gizmo_crd())
    assert (await client.get(base)).json()["items"] == []


async def test_creates_are_refused_while_the_crd_terminates(demo: Any) -> None:
    store = demo.store
    await store.create("customresourcedefinitions", gizmo_crd())
    held = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}
    await store.patch(
        "customresourcedefinitions",
        f"gizmos.{GROUP}",
        {**held, "metadata": {"finalizers": ["example.com/hold"]}},
    )
    await store.delete("customresourcedefinitions", f"gizmos.{GROUP}")
    async with httpx.AsyncClient(
        base_url=demo.url, headers={"Authorization": "Bearer admin-token"}
    ) as client:
        refused = await client.post(f"/apis/{GROUP}/v1/namespaces/demo/gizmos", json=gizmo("late"))
    assert refused.status_code == 403
    assert refused.json()["message"] == (
        f'gizmos.{GROUP} "late" is forbidden: create not allowed while custom resource '
        "definition is terminating"
    )


async def test_an_invalid_crd_is_refused_as_the_apiserver_refuses_it(
    client: httpx.AsyncClient,
) -> None:
    def broken(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        crd = gizmo_crd()
        change(crd["spec"])
        return crd

    def no_storage(spec: dict[str, Any]) -> None:
        spec["versions"][0]["storage"] = False

    def no_kind(spec: dict[str, Any]) -> None:
        del spec["names"]["kind"]

    def no_schema(spec: dict[str, Any]) -> None:
        del spec["versions"][0]["schema"]

    def untyped(spec: dict[str, Any]) -> None:
        schema = spec["versions"][0]["schema"]["openAPIV3Schema"]
        schema["properties"]["spec"]["properties"]["b"] = {}

    cases = {
        no_storage: [("spec.versions", "must have exactly one version marked as storage version")],
        no_kind: [("spec.names.kind", "Required value"), ("spec.names.listKind", "Required value")],
        no_schema: [("spec.versions[0].schema.openAPIV3Schema", "Required value")],
        untyped: [
            (
                "spec.validation.openAPIV3Schema.properties[spec].properties[b].type",
                "Required value: must not be empty for specified object fields",
            )
        ],
        (lambda spec: spec.update(scope="Weird")): [
            ("spec.scope", 'Unsupported value: "Weird": supported values: "Cluster", "Namespaced"')
        ],
    }
    for change, expected in cases.items():
        refused = await client.post(CRDS, json=broken(change))
        assert refused.status_code == 422, refused.text
        causes = [(c["field"], c["message"]) for c in refused.json()["details"]["causes"]]
        # an Invalid value's rendering of the value is Go's; its field and detail are compared
        shown = [
            (f, m.rsplit(": ", 1)[-1] if m.startswith("Invalid value") else m) for f, m in causes
        ]
        assert shown == expected, causes
        assert (await client.get(f"/apis/{GROUP}")).status_code == 404

    made = await _create_crd(client, gizmo_crd())
    assert made["spec"]["names"]["listKind"] == "GizmoList"
    assert made["spec"]["conversion"] == {"strategy": "None"}
    made["spec"]["scope"] = "Cluster"
    changed = await client.put(f"{CRDS}/gizmos.{GROUP}", json=made)
    assert changed.status_code == 422
    assert changed.json()["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "Cluster": field is immutable',
            "field": "spec.scope",
        }
    ]


async def test_each_version_validates_with_its_own_schema(client: httpx.AsyncClient) -> None:
    strict = _version("v2", storage=False, shape={"type": "string", "enum": ["round"]})
    await _create_crd(client, gizmo_crd(_version("v1", storage=True), strict))
    v1 = f"/apis/{GROUP}/v1/namespaces/demo/gizmos"
    v2 = f"/apis/{GROUP}/v2/namespaces/demo/gizmos"
    # v1 has no "shape": pruned there; v2 checks it against its enum
    pruned = await client.post(v1, json=gizmo("a", shape="square"))
    assert pruned.status_code == 201 and "shape" not in pruned.json()["spec"]
    refused = await client.post(v2, json=gizmo("b", "v2", shape="square"))
    assert refused.status_code == 422
    assert refused.json()["details"]["causes"][0]["field"] == "spec.shape"
    made = await client.post(v2, json=gizmo("c", "v2", shape="round"))
    assert made.status_code == 201, made.text
    # one store: written through v2, read through v1
    read = (await client.get(f"{v1}/c")).json()
    assert (read["apiVersion"], read["spec"]["shape"]) == (f"{GROUP}/v1", "round")


async def test_the_in_process_api_serves_defined_kinds(demo: Any) -> None:
    store = demo.store
    await store.create("customresourcedefinitions", gizmo_crd())
    await store.create("gizmos", gizmo("g1", size=2), namespace="demo")
    assert [g["spec"]["size"] for g in await store.list("gizmos", namespace="demo")] == [2]
    crds = store.resource("customresourcedefinitions")
    watcher = store.watches.open(crds, store.list_query(crds, None, "", ""), resource_version="0")
    marked = await store.delete("customresourcedefinitions", f"gizmos.{GROUP}")
    assert marked["metadata"]["deletionTimestamp"]
    # the cleanup runs on the loop's next turn: the objects, then the definition
    async with asyncio.timeout(5):
        while not any(p.type == "DELETED" for p in watcher.pending):
            watcher.wake.clear()
            await watcher.wake.wait()
    store.storage.remove_watcher(crds, watcher)
    assert all(r.plural != "gizmos" for r in store.resources)


def test_without_an_event_loop_the_cleanup_runs_at_once() -> None:
    from kube_gateway_demo.catalog import CRD
    from kube_gateway_demo.options import DemoDeleteOptions, DemoWriteOptions
    from kube_gateway_demo.store import Store

    store = Store()
    store.writes.create(CRD, gizmo_crd(), namespace=None, opts=DemoWriteOptions())
    gizmos = store.resource("gizmos")
    store.writes.create(gizmos, gizmo("g1"), namespace="default", opts=DemoWriteOptions())
    store.deletion.delete(CRD, f"gizmos.{GROUP}", namespace=None, opts=DemoDeleteOptions())
    assert store.storage.get(CRD, f"gizmos.{GROUP}") is None
    assert all(r.plural != "gizmos" for r in store.resources)
