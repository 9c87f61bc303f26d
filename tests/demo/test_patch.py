"""Every patch type: JSON patch, merge patch, strategic merge patch and server-side apply."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import orjson
import yaml

from gateway.core.model import schema
from kube_gateway_demo.patching import strategic_merge_patch

PODS = "/api/v1/namespaces/demo/pods"
POD_TYPE = schema.kind_type("", "v1", "Pod").name
LEASES = "/apis/coordination.k8s.io/v1/namespaces/demo/leases"
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
MERGE = {"Content-Type": "application/merge-patch+json"}
SMP = {"Content-Type": "application/strategic-merge-patch+json"}
APPLY = {"Content-Type": "application/apply-patch+yaml"}


async def _pod(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]], name: str, **spec: Any
) -> dict[str, Any]:
    r = await client.post(PODS, json=pod(name, **spec))
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_json_patch(client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]) -> None:
    await _pod(client, pod, "jp")
    ops = [
        {"op": "add", "path": "/metadata/labels/tier", "value": "web"},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:2"},
        {"op": "add", "path": "/metadata/annotations", "value": {"a/b": "c"}},
        {"op": "copy", "from": "/metadata/labels/tier", "path": "/metadata/labels/copy"},
        {"op": "move", "from": "/metadata/labels/copy", "path": "/metadata/labels/moved"},
        {"op": "remove", "path": "/metadata/labels/app"},
        {"op": "test", "path": "/metadata/labels/tier", "value": "web"},
    ]
    r = await client.patch(f"{PODS}/jp", content=orjson.dumps(ops), headers=JSON_PATCH)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["metadata"]["labels"] == {"tier": "web", "moved": "web"}
    assert body["metadata"]["annotations"] == {"a/b": "c"}
    assert body["spec"]["containers"][0]["image"] == "busybox:2"

    failing = [{"op": "test", "path": "/metadata/labels/tier", "value": "nope"}]
    r = await client.patch(f"{PODS}/jp", content=orjson.dumps(failing), headers=JSON_PATCH)
    assert r.status_code == 422
    assert r.json()["message"] == "the server rejected our request due to an error in our request"
    assert r.json()["details"] == {}  # the apiserver does not say which operation failed
    for missing in (
        {"op": "remove", "path": "/metadata/labels/absent"},
        {"op": "replace", "path": "/metadata/labels/absent", "value": "x"},
        {"op": "replace", "path": "/spec/containers/1", "value": {}},
        {"op": "copy", "from": "/spec/containers/x", "path": "/metadata/labels/c"},
        {"op": "move", "from": "/spec/containers/-1", "path": "/metadata/labels/c"},
    ):
        r = await client.patch(f"{PODS}/jp", content=orjson.dumps([missing]), headers=JSON_PATCH)
        assert r.status_code == 422, missing
    r = await client.patch(f"{PODS}/jp", content=b'{"op": "add"}', headers=JSON_PATCH)
    assert r.status_code == 400
    r = await client.patch(f"{PODS}/nope", content=b"[]", headers=JSON_PATCH)
    assert r.status_code == 404


async def test_json_patch_with_stale_resource_version_conflicts(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    await _pod(client, pod, "jprv")
    ops = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "1"},
        {"op": "add", "path": "/metadata/labels/x", "value": "y"},
    ]
    r = await client.patch(f"{PODS}/jprv", content=orjson.dumps(ops), headers=JSON_PATCH)
    assert r.status_code == 409
    assert r.json()["reason"] == "Conflict"


async def test_merge_patch(client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]) -> None:
    created = await _pod(client, pod, "mp")
    patch = {
        "metadata": {"labels": {"app": None, "new": "1"}, "annotations": {"k": "v"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:3"}]},
    }
    r = await client.patch(f"{PODS}/mp", json=patch, headers=MERGE)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["metadata"]["labels"] == {"new": "1"}
    assert body["spec"]["containers"][0]["image"] == "busybox:3"
    # merge patch replaces lists: the defaulted container fields come back by defaulting
    assert body["spec"]["containers"][0]["terminationMessagePolicy"] == "File"
    assert int(body["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    noop = await client.patch(
        f"{PODS}/mp", json={"metadata": {"labels": {"new": "1"}}}, headers=MERGE
    )
    assert noop.json()["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]
    r = await client.patch(
        f"{PODS}/mp",
        json={"spec": {"bogus": 1}},
        headers=MERGE,
        params={"fieldValidation": "Strict"},
    )
    assert r.status_code == 422
    assert 'strict decoding error: unknown field "spec.bogus"' in r.json()["message"]


async def test_strategic_merge_patch_merges_lists_by_key(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    body = pod("smp")
    body["spec"]["containers"] = [
        {"name": "a", "image": "busybox"},
        {"name": "b", "image": "busybox"},
    ]
    body["metadata"]["finalizers"] = ["one/x"]
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "o1", "uid": "u1"},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "o2", "uid": "u2"},
    ]
    r = await client.post(PODS, json=body)
    assert r.status_code == 201
    patch = {
        "metadata": {
            "finalizers": ["two/y"],
            "ownerReferences": [{"uid": "u1", "$patch": "delete"}],
        },
        "spec": {"containers": [{"name": "b", "image": "busybox:9"}]},
    }
    r = await client.patch(f"{PODS}/smp", json=patch, headers=SMP)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [(c["name"], c["image"]) for c in out["spec"]["containers"]] == [
        ("a", "busybox"),
        ("b", "busybox:9"),
    ]
    assert out["metadata"]["finalizers"] == ["one/x", "two/y"]
    assert [o["uid"] for o in out["metadata"]["ownerReferences"]] == ["u2"]

    replace = {"metadata": {"labels": {"$patch": "replace", "only": "this"}}}
    r = await client.patch(f"{PODS}/smp", json=replace, headers=SMP)
    assert r.json()["metadata"]["labels"] == {"only": "this"}
    r = await client.patch(
        f"{PODS}/smp",
        headers=SMP,
        json={"metadata": {"$deleteFromPrimitiveList/finalizers": ["one/x"]}},
    )
    assert r.json()["metadata"]["finalizers"] == ["two/y"]
    r = await client.patch(
        f"{PODS}/smp", headers=SMP, json={"spec": {"containers": [{"image": "no-name"}]}}
    )
    assert r.status_code == 500
    assert "does not contain declared merge key: name" in r.json()["message"]
    r = await client.patch(
        f"{PODS}/smp",
        headers=SMP,
        json={"spec": {"containers": [{"name": "a", "env": [{"name": "NEW", "value": "1"}]}]}},
    )
    assert r.status_code == 200, r.text
    merged = r.json()["spec"]["containers"][0]
    assert (merged["name"], merged["env"]) == ("a", [{"name": "NEW", "value": "1"}])


def test_strategic_merge_patch_semantics() -> None:
    doc = {
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "image": "x",
                    "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
                    "ports": [{"containerPort": 80}],
                    "volumeMounts": [{"name": "v", "mountPath": "/a"}],
                },
                {"name": "b", "image": "x"},
            ],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "tolerations": [{"key": "k"}],
        }
    }
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "env": [
                        {"name": "X", "value": "9"},
                        {"name": "Y", "$patch": "delete"},
                        {"name": "Z", "value": "3"},
                    ],
                    "ports": [{"containerPort": 80, "name": "http"}],
                    "volumeMounts": [{"name": "w", "mountPath": "/b"}],
                },
                {"name": "c", "image": "new"},
            ],
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
            "volumes": [{"name": "v", "$patch": "delete"}],
            "tolerations": [{"key": "only"}],
        }
    }
    out = strategic_merge_patch(doc, patch, POD_TYPE)
    containers = out["spec"]["containers"]
    assert [c["name"] for c in containers] == ["c", "a", "b"]
    a = containers[1]
    assert a["env"] == [{"name": "X", "value": "9"}, {"name": "Z", "value": "3"}]
    assert a["ports"] == [{"containerPort": 80, "name": "http"}]
    assert [m["mountPath"] for m in a["volumeMounts"]] == ["/a", "/b"]
    assert out["spec"]["volumes"] == []
    assert out["spec"]["tolerations"] == [{"key": "only"}]  # no merge key: replaced
    replaced = strategic_merge_patch(
        doc,
        {"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "z"}]}},
        POD_TYPE,
    )
    assert replaced["spec"]["containers"] == [{"name": "z", "image": "z"}]
    assert strategic_merge_patch(doc, {"spec": {"$patch": "delete"}}, POD_TYPE) == {}


async def test_strategic_merge_patch_on_status_conditions(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    await _pod(client, pod, "cond", nodeName="node-a")
    first = {
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "PodScheduled", "status": "True"},
            ],
        }
    }
    r = await client.patch(f"{PODS}/cond/status", json=first, headers=SMP)
    assert r.status_code == 200, r.text
    second = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    r = await client.patch(f"{PODS}/cond/status", json=second, headers=SMP)
    conditions = {c["type"]: c["status"] for c in r.json()["status"]["conditions"]}
    assert conditions == {"Ready": "True", "PodScheduled": "True"}
    assert r.json()["status"]["phase"] == "Running"


async def test_patch_media_types_and_options(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    await _pod(client, pod, "opts")
    r = await client.patch(f"{PODS}/opts", json={}, headers={"Content-Type": "application/json"})
    assert r.status_code == 415
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "415: Unsupported Media Type",
        "reason": "UnsupportedMediaType",
        "details": {},
        "code": 415,
    }
    r = await client.patch(f"{PODS}/opts", json={}, headers=MERGE, params={"force": "true"})
    assert r.status_code == 422
    assert r.json()["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for '
        "non-apply patch"
    )


def _apply_doc(name: str, **labels: str) -> bytes:
    doc = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": labels},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 10},
    }
    return yaml.safe_dump(doc).encode()


async def test_server_side_apply_creates_and_tracks_ownership(client: httpx.AsyncClient) -> None:
    r = await client.patch(f"{LEASES}/ssa", content=_apply_doc("ssa", team="x"), headers=APPLY)
    assert r.status_code == 422
    assert r.json()["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for '
        "apply patch"
    )
    r = await client.patch(
        f"{LEASES}/ssa",
        content=_apply_doc("ssa", team="x"),
        headers=APPLY,
        params={"fieldManager": "alice"},
    )
    assert r.status_code == 201, r.text
    created = r.json()
    entry = created["metadata"]["managedFields"][0]
    assert entry["manager"] == "alice" and entry["operation"] == "Apply"
    assert entry["fieldsV1"] == {
        "f:metadata": {"f:labels": {"f:team": {}}},
        "f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}},
    }
    # the same manager applying again with the same content is a no-op
    r = await client.patch(
        f"{LEASES}/ssa",
        content=_apply_doc("ssa", team="x"),
        headers=APPLY,
        params={"fieldManager": "alice"},
    )
    assert r.status_code == 200
    assert r.json()["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    # another manager setting a different value conflicts...
    other = yaml.safe_dump(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "ssa"},
            "spec": {"holderIdentity": "b"},
        }
    )
    r = await client.patch(
        f"{LEASES}/ssa", content=other.encode(), headers=APPLY, params={"fieldManager": "bob"}
    )
    assert r.status_code == 409
    status = r.json()
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Apply failed with 1 conflict: conflict with "alice": .spec.holderIdentity'
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "alice"',
            "field": ".spec.holderIdentity",
        }
    ]
    # ...unless forced, which takes ownership
    r = await client.patch(
        f"{LEASES}/ssa",
        content=other.encode(),
        headers=APPLY,
        params={"fieldManager": "bob", "force": "true"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["spec"]["holderIdentity"] == "b"
    owners = {m["manager"]: m["fieldsV1"] for m in body["metadata"]["managedFields"]}
    assert owners["bob"] == {"f:spec": {"f:holderIdentity": {}}}
    assert "f:holderIdentity" not in owners["alice"]["f:spec"]


async def test_apply_shares_equal_values_and_removes_dropped_fields(
    client: httpx.AsyncClient,
) -> None:
    params = {"fieldManager": "alice"}
    await client.patch(
        f"{LEASES}/shared",
        content=_apply_doc("shared", team="x", env="dev"),
        headers=APPLY,
        params=params,
    )
    same = yaml.safe_dump(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "shared", "labels": {"team": "x"}},
        }
    )
    r = await client.patch(
        f"{LEASES}/shared", content=same.encode(), headers=APPLY, params={"fieldManager": "bob"}
    )
    assert r.status_code == 200, r.text
    # alice stops applying the "env" label: nobody else owns it, so it is removed; "team" is
    # still alice's (and bob's) and stays.
    r = await client.patch(
        f"{LEASES}/shared",
        headers=APPLY,
        params=params,
        content=yaml.safe_dump(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "shared", "labels": {"team": "x"}},
                "spec": {"holderIdentity": "a", "leaseDurationSeconds": 10},
            }
        ).encode(),
    )
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["labels"] == {"team": "x"}


async def test_apply_conflicts_with_an_updater(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    await _pod(client, pod, "upd")
    r = await client.patch(
        f"{PODS}/upd",
        json={"metadata": {"labels": {"app": "changed"}}},
        headers=MERGE,
        params={"fieldManager": "editor"},
    )
    assert r.status_code == 200
    apply = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "upd", "labels": {"app": "mine"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
        }
    )
    r = await client.patch(
        f"{PODS}/upd", content=apply.encode(), headers=APPLY, params={"fieldManager": "applier"}
    )
    assert r.status_code == 409
    assert r.json()["message"] == (
        'Apply failed with 1 conflict: conflict with "editor" using v1: .metadata.labels.app'
    )
    bad = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "upd"}, "spec": {"bogus": 1}}
    )
    r = await client.patch(
        f"{PODS}/upd", content=bad.encode(), headers=APPLY, params={"fieldManager": "applier"}
    )
    assert r.status_code == 500
    assert r.json()["message"] == (
        "failed to create typed patch object (/upd; /v1, Kind=Pod): .spec.bogus: field not "
        "declared in schema"
    )
    wrong = yaml.safe_dump({"apiVersion": "v2", "kind": "Pod", "metadata": {"name": "upd"}})
    r = await client.patch(
        f"{PODS}/upd", content=wrong.encode(), headers=APPLY, params={"fieldManager": "applier"}
    )
    assert r.status_code == 400
    assert r.json()["message"].startswith("Incorrect version specified in apply patch.")


async def test_apply_to_status_subresource(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    await _pod(client, pod, "apst", nodeName="node-a")
    doc = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "apst"},
            "status": {"phase": "Running"},
        }
    )
    r = await client.patch(
        f"{PODS}/apst/status",
        content=doc.encode(),
        headers=APPLY,
        params={"fieldManager": "kubelet-ish"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["status"]["phase"] == "Running"
    entry = next(m for m in r.json()["metadata"]["managedFields"] if m["manager"] == "kubelet-ish")
    assert entry["subresource"] == "status"
    assert entry["fieldsV1"] == {"f:status": {"f:phase": {}}}
