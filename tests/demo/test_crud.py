"""CRUD of every served resource against the running demo upstream, with apiserver errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.catalog import DEMO_REGISTRY

PODS = "/api/v1/namespaces/demo/pods"
EVENTS = "/api/v1/namespaces/demo/events"
ENDPOINTS = "/api/v1/namespaces/demo/endpoints"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/demo/leases"
IMAGES = "/apis/image.openshift.io/v1/images"


def image_body(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "image.openshift.io/v1",
        "kind": "Image",
        "metadata": {"name": name},
        "dockerImageReference": f"quay.io/x/y@{name}",
        "dockerImageLayers": [{"name": "sha256:aa", "size": 10, "mediaType": "application/x"}],
        **extra,
    }


def lease_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
    }


def event_body(name: str, pod_name: str = "p") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "namespace": "demo", "name": pod_name},
        "reason": "Tested",
        "message": "a test event",
        "type": "Normal",
    }


def endpoints_body(name: str, ip: str = "10.1.2.3") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": name},
        "subsets": [{"addresses": [{"ip": ip}], "ports": [{"port": 80}]}],
    }


async def test_pod_create_get_list_update_delete(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    created = await client.post(PODS, json=pod("alpha", nodeName="node-a"))
    assert created.status_code == 201
    body = created.json()
    assert body["kind"] == "Pod" and body["apiVersion"] == "v1"
    meta = body["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert int(meta["resourceVersion"]) > 0
    assert meta["generation"] == 1
    assert body["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert body["spec"]["restartPolicy"] == "Always"
    assert body["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert meta["managedFields"][0]["manager"] == "python-httpx"
    assert meta["managedFields"][0]["operation"] == "Update"

    got = (await client.get(f"{PODS}/alpha")).json()
    assert got == body

    listed = (await client.get(PODS)).json()
    assert listed["kind"] == "PodList"
    assert "alpha" in [i["metadata"]["name"] for i in listed["items"]]
    assert all("kind" not in i for i in listed["items"])
    assert int(listed["metadata"]["resourceVersion"]) >= int(meta["resourceVersion"])

    got["metadata"]["labels"]["extra"] = "yes"
    got["spec"]["containers"][0]["image"] = "busybox:1.37"
    updated = await client.put(f"{PODS}/alpha", json=got)
    assert updated.status_code == 200
    u = updated.json()
    assert u["metadata"]["labels"]["extra"] == "yes"
    assert u["metadata"]["generation"] == 2
    assert int(u["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])

    deleted = await client.delete(f"{PODS}/alpha", params={"gracePeriodSeconds": 0})
    assert deleted.status_code == 200
    assert deleted.json()["kind"] == "Pod"
    assert (await client.get(f"{PODS}/alpha")).status_code == 404


async def test_not_found_status_is_the_apiservers(client: httpx.AsyncClient) -> None:
    r = await client.get(f"{PODS}/nope")
    assert r.status_code == 404
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }
    r = await client.get(f"{LEASES}/nope")
    assert r.json()["message"] == 'leases.coordination.k8s.io "nope" not found'
    assert r.json()["details"] == {"name": "nope", "group": "coordination.k8s.io", "kind": "leases"}


async def test_create_conflicts_and_validation(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    assert (await client.post(PODS, json=pod("dup"))).status_code == 201
    r = await client.post(PODS, json=pod("dup"))
    assert r.status_code == 409
    assert r.json()["reason"] == "AlreadyExists"
    assert r.json()["message"] == 'pods "dup" already exists'

    nameless = pod("x")
    del nameless["metadata"]["name"]
    r = await client.post(PODS, json=nameless)
    assert r.status_code == 422
    assert r.json()["message"] == (
        'Pod "" is invalid: metadata.name: Required value: name or generateName is required'
    )
    assert r.json()["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: name or generateName is required",
            "field": "metadata.name",
        }
    ]

    empty = pod("empty")
    empty["spec"]["containers"] = []
    r = await client.post(PODS, json=empty)
    assert r.status_code == 422
    assert r.json()["message"] == 'Pod "empty" is invalid: spec.containers: Required value'

    elsewhere = pod("moved", namespace="default")
    r = await client.post(PODS, json=elsewhere)
    assert r.status_code == 400
    assert r.json()["message"] == (
        "the namespace of the provided object does not match the namespace sent on the request"
    )

    bad_name = pod("Bad_Name")
    r = await client.post(PODS, json=bad_name)
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "metadata.name"
    assert "RFC 1123 subdomain" in r.json()["message"]

    long_name = pod("a" * 254)
    r = await client.post(PODS, json=long_name)
    assert r.status_code == 422
    assert [c["message"] for c in r.json()["details"]["causes"]] == [
        'Invalid value: "' + "a" * 254 + '": must be no more than 253 bytes'
    ]

    bad_container = pod("badc")
    bad_container["spec"]["containers"][0]["name"] = "Bad_C"
    r = await client.post(PODS, json=bad_container)
    assert r.status_code == 422
    causes = r.json()["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.containers[0].name"]
    assert "a lowercase RFC 1123 label must consist of" in causes[0]["message"]
    nameless_container = pod("noc")
    nameless_container["spec"]["containers"][0]["name"] = ""
    r = await client.post(PODS, json=nameless_container)
    assert r.status_code == 422
    assert r.json()["message"] == ('Pod "noc" is invalid: spec.containers[0].name: Required value')

    r = await client.post("/api/v1/namespaces/nowhere/pods", json=pod("x", namespace="nowhere"))
    assert r.status_code == 404
    assert r.json()["message"] == 'namespaces "nowhere" not found'

    with_rv = pod("rv")
    with_rv["metadata"]["resourceVersion"] = "5"
    r = await client.post(PODS, json=with_rv)
    assert r.status_code == 500
    assert r.json()["message"] == "resourceVersion should not be set on objects to be created"


async def test_generate_name(client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]) -> None:
    body = pod("x")
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "gen-"
    r = await client.post(PODS, json=body)
    assert r.status_code == 201
    name = r.json()["metadata"]["name"]
    assert name.startswith("gen-") and len(name) == len("gen-") + 5


async def test_update_optimistic_concurrency(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    first = (await client.post(PODS, json=pod("occ"))).json()
    first["metadata"]["labels"]["v"] = "1"
    assert (await client.put(f"{PODS}/occ", json=first)).status_code == 200
    first["metadata"]["labels"]["v"] = "2"
    r = await client.put(f"{PODS}/occ", json=first)
    assert r.status_code == 409
    assert r.json()["reason"] == "Conflict"
    assert r.json()["message"] == (
        'Operation cannot be fulfilled on pods "occ": the object has been modified; please '
        "apply your changes to the latest version and try again"
    )
    first["metadata"].pop("resourceVersion")
    assert (await client.put(f"{PODS}/occ", json=first)).status_code == 200  # unconditional


async def test_update_checks_names_and_existence(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    r = await client.put(f"{PODS}/ghost", json=pod("ghost"))
    assert r.status_code == 404
    await client.post(PODS, json=pod("named"))
    r = await client.put(f"{PODS}/named", json=pod("other"))
    assert r.status_code == 400
    assert r.json()["message"] == (
        "the name of the object (other) does not match the name on the URL (named)"
    )
    r = await client.put(f"{PODS}/named", json=pod("named", namespace="default"))
    assert r.status_code == 400
    assert r.json()["message"] == (
        "the namespace of the provided object does not match the namespace sent on the request"
    )


async def test_main_resource_put_ignores_status(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    body = (await client.post(PODS, json=pod("st", nodeName="node-a"))).json()
    body["status"] = {"phase": "Running"}
    r = await client.put(f"{PODS}/st", json=body)
    assert r.status_code == 200
    assert r.json()["status"]["phase"] == "Pending"
    assert r.json()["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]


async def test_status_subresource(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    body = (await client.post(PODS, json=pod("sub", nodeName="node-a"))).json()
    got = (await client.get(f"{PODS}/sub/status")).json()
    assert got["kind"] == "Pod" and got["metadata"]["name"] == "sub"
    body["status"] = {"phase": "Running", "podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.9"}]}
    body["spec"]["restartPolicy"] = "Never"  # ignored by the status subresource
    r = await client.put(f"{PODS}/sub/status", json=body)
    assert r.status_code == 200
    out = r.json()
    assert out["status"]["phase"] == "Running"
    assert out["status"]["qosClass"] == "BestEffort"
    assert out["spec"]["restartPolicy"] == "Always"
    assert out["metadata"]["generation"] == 1
    managers = {(m["manager"], m.get("subresource", "")) for m in out["metadata"]["managedFields"]}
    assert ("python-httpx", "status") in managers


async def test_ephemeral_containers(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    body = (await client.post(PODS, json=pod("eph", nodeName="node-a"))).json()
    got = await client.get(f"{PODS}/eph/ephemeralcontainers")
    assert got.status_code == 200 and got.json()["kind"] == "Pod"
    debugger = {
        "name": "debugger",
        "image": "busybox",
        "targetContainerName": "c",
        "stdin": True,
        "tty": True,
    }
    body["spec"]["ephemeralContainers"] = [debugger]
    body["metadata"]["labels"]["ignored"] = "true"
    r = await client.put(f"{PODS}/eph/ephemeralcontainers", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [c["name"] for c in out["spec"]["ephemeralContainers"]] == ["debugger"]
    assert "ignored" not in out["metadata"]["labels"]
    assert out["metadata"]["generation"] == 2

    out["spec"]["ephemeralContainers"] = []
    r = await client.put(f"{PODS}/eph/ephemeralcontainers", json=out)
    assert r.status_code == 422
    assert 'existing ephemeral containers "debugger" may not be removed' in r.json()["message"]

    out["spec"]["ephemeralContainers"] = [{**debugger, "image": "alpine"}]
    r = await client.put(f"{PODS}/eph/ephemeralcontainers", json=out)
    assert r.status_code == 422
    assert 'existing ephemeral containers "debugger" may not be changed' in r.json()["message"]

    r = await client.patch(
        f"{PODS}/eph/ephemeralcontainers",
        json={"spec": {"ephemeralContainers": [{"name": "c", "image": "busybox"}]}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["reason"] == "FieldValueDuplicate"

    r = await client.patch(
        f"{PODS}/eph/ephemeralcontainers",
        json={"spec": {"ephemeralContainers": [{"name": "dbg2", "image": "busybox"}]}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert r.status_code == 200
    assert [c["name"] for c in r.json()["spec"]["ephemeralContainers"]] == ["debugger", "dbg2"]

    body = (await client.get(f"{PODS}/eph")).json()
    body["spec"]["ephemeralContainers"] = []
    r = await client.put(f"{PODS}/eph", json=body)
    assert r.status_code == 422  # the main resource may not touch them


async def test_events_endpoints_leases_images_crud(client: httpx.AsyncClient) -> None:
    for path, body in (
        (EVENTS, event_body("ev1")),
        (ENDPOINTS, endpoints_body("ep1")),
        (LEASES, lease_body("l1")),
        (IMAGES, image_body("sha256-" + "1" * 64)),
    ):
        name = body["metadata"]["name"]
        created = await client.post(path, json=body)
        assert created.status_code == 201, created.text
        obj = created.json()
        assert obj["metadata"]["name"] == name
        assert (await client.get(f"{path}/{name}")).json() == obj
        obj["metadata"]["labels"] = {"touched": "yes"}
        updated = await client.put(f"{path}/{name}", json=obj)
        assert updated.status_code == 200, updated.text
        assert updated.json()["metadata"]["labels"] == {"touched": "yes"}
        deleted = await client.delete(f"{path}/{name}")
        assert deleted.status_code == 200
        status = deleted.json()
        assert status["kind"] == "Status" and status["status"] == "Success"
        assert status["details"]["name"] == name
        assert status["details"]["uid"] == obj["metadata"]["uid"]
        assert (await client.get(f"{path}/{name}")).status_code == 404


async def test_event_shape_matches_core_v1(client: httpx.AsyncClient) -> None:
    ev = (await client.post(EVENTS, json=event_body("shape"))).json()
    assert ev["eventTime"] is None
    assert ev["reportingComponent"] == "" and ev["reportingInstance"] == ""
    assert ev["source"] == {}
    r = await client.post(
        EVENTS, json={**event_body("wrong-ns"), "involvedObject": {"kind": "Pod", "namespace": "x"}}
    )
    assert r.status_code == 422
    assert r.json()["message"] == (
        'Event "wrong-ns" is invalid: involvedObject.namespace: Invalid value: "x": does not '
        "match event.namespace"
    )


async def test_endpoints_carry_deprecation_warning(client: httpx.AsyncClient) -> None:
    r = await client.get(f"{ENDPOINTS}/web")
    assert r.status_code == 200
    assert "v1 Endpoints is deprecated" in r.headers["warning"]
    subset = r.json()["subsets"][0]
    assert subset["addresses"][0]["targetRef"]["kind"] == "Pod"


async def test_lease_put_requires_resource_version(client: httpx.AsyncClient) -> None:
    created = (await client.post(LEASES, json=lease_body("lk"))).json()
    created["metadata"].pop("resourceVersion")
    r = await client.put(f"{LEASES}/lk", json=created)
    assert r.status_code == 422
    assert r.json()["message"] == (
        'leases.coordination.k8s.io "lk" is invalid: metadata.resourceVersion: Invalid value: '
        "0: must be specified for an update"
    )
    r = await client.put(f"{LEASES}/fresh", json=lease_body("fresh"))
    assert r.status_code == 201  # leases may be created by PUT
    bad = lease_body("bad")
    bad["spec"]["leaseDurationSeconds"] = 0
    r = await client.post(LEASES, json=bad)
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "spec.leaseDurationSeconds"


async def test_image_is_a_cluster_scoped_custom_resource(client: httpx.AsyncClient) -> None:
    listed = (await client.get(IMAGES)).json()
    assert listed["kind"] == "ImageList" and listed["apiVersion"] == "image.openshift.io/v1"
    assert listed["metadata"]["continue"] == ""  # an unstructured list always has it
    assert all(i["kind"] == "Image" for i in listed["items"])  # and its items their kind
    assert all("namespace" not in i["metadata"] for i in listed["items"])
    assert all(i["dockerImageLayers"] for i in listed["items"])
    created = await client.post(IMAGES, json=image_body("sha256-abc"))
    assert created.status_code == 201
    assert list(created.json()) == sorted(created.json())
    assert created.json()["metadata"]["generation"] == 1
    layers_missing = image_body("sha256-def")
    del layers_missing["dockerImageLayers"]
    r = await client.post(IMAGES, json=layers_missing)
    assert r.status_code == 422
    assert r.json()["message"] == (
        'Image.image.openshift.io "sha256-def" is invalid: dockerImageLayers: Required value'
    )
    r = await client.post(
        IMAGES,
        json={**image_body("sha256-ghi"), "dockerImageLayers": [{"name": "l", "size": "big"}]},
    )
    assert r.json()["message"] == (
        'Image.image.openshift.io "sha256-ghi" is invalid: [dockerImageLayers[0].mediaType: '
        'Required value, dockerImageLayers[0].size: Invalid value: "string": '
        'dockerImageLayers[0].size in body must be of type integer: "string"]'
    )
    r = await client.post(IMAGES, json=image_body("sha256:abc"))
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "metadata.name"
    no_kind = image_body("sha256-jkl")
    del no_kind["kind"]
    r = await client.post(IMAGES, json=no_kind)
    assert r.status_code == 400
    assert "Object 'Kind' is missing in" in r.json()["message"]
    r = await client.patch(
        f"{IMAGES}/sha256-abc",
        json={"metadata": {"labels": {"a": "b"}}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert r.status_code == 415
    r = await client.patch(
        f"{IMAGES}/sha256-abc",
        json={"dockerImageConfig": "{}"},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.json()["metadata"]["generation"] == 2
    r = await client.get(f"{IMAGES}/sha256-abc/status")
    assert r.status_code == 404
    assert r.json()["message"] == 'images.image.openshift.io "sha256-abc" not found'
    assert (
        await client.get("/apis/image.openshift.io/v1/namespaces/demo/images")
    ).status_code == 404


async def test_dry_run_validates_but_does_not_persist(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    rv_before = (await client.get(PODS)).json()["metadata"]["resourceVersion"]
    r = await client.post(PODS, json=pod("dry"), params={"dryRun": "All"})
    assert r.status_code == 201
    assert r.json()["metadata"]["uid"]
    assert "resourceVersion" not in r.json()["metadata"]
    assert (await client.get(f"{PODS}/dry")).status_code == 404
    bad = pod("dry")
    bad["spec"]["containers"] = []
    assert (await client.post(PODS, json=bad, params={"dryRun": "All"})).status_code == 422
    r = await client.post(PODS, json=pod("dry"), params={"dryRun": "Yes"})
    assert r.status_code == 422
    assert r.json()["message"] == (
        'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ["Yes"]: '
        'supported values: "All"'
    )
    existing = (await client.post(PODS, json=pod("real"))).json()
    existing["metadata"]["labels"]["dry"] = "run"
    r = await client.put(f"{PODS}/real", json=existing, params={"dryRun": "All"})
    assert r.status_code == 200 and r.json()["metadata"]["labels"]["dry"] == "run"
    assert "dry" not in (await client.get(f"{PODS}/real")).json()["metadata"]["labels"]
    r = await client.delete(f"{PODS}/real", params={"dryRun": "All"})
    assert r.status_code == 200
    assert (await client.get(f"{PODS}/real")).status_code == 200
    r = await client.patch(
        f"{PODS}/real",
        params={"dryRun": "All"},
        json={"metadata": {"labels": {"p": "q"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 200 and r.json()["metadata"]["labels"]["p"] == "q"
    assert "p" not in (await client.get(f"{PODS}/real")).json()["metadata"]["labels"]
    rv_after_dry = (await client.get(PODS)).json()["metadata"]["resourceVersion"]
    assert int(rv_after_dry) == int(rv_before) + 1  # only the real create


async def test_field_validation(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    body = pod("fv")
    body["bogus"] = 1
    body["spec"]["alsoBogus"] = True
    r = await client.post(PODS, json=body, params={"fieldValidation": "Strict"})
    assert r.status_code == 400
    assert r.json()["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field '
        '"spec.alsoBogus", unknown field "bogus"'
    )
    r = await client.post(PODS, json=body)  # default: Warn
    assert r.status_code == 201
    assert r.headers.get_list("warning") == [
        '299 - "unknown field \\"spec.alsoBogus\\""',
        '299 - "unknown field \\"bogus\\""',
    ]
    assert "bogus" not in r.json()
    body["metadata"]["name"] = "fv2"
    r = await client.post(PODS, json=body, params={"fieldValidation": "Ignore"})
    assert r.status_code == 201 and "warning" not in r.headers
    r = await client.post(PODS, json=body, params={"fieldValidation": "Loose"})
    assert r.status_code == 422
    typed = pod("typed")
    typed["spec"]["containers"] = "busybox"
    r = await client.post(PODS, json=typed)
    assert r.status_code == 400
    assert r.json()["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string into Go '
        "struct field PodSpec.spec.containers of type []v1.Container"
    )


async def test_delete_options(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    created = (await client.post(PODS, json=pod("del"))).json()
    r = await client.request(
        "DELETE",
        f"{PODS}/del",
        params={"orphanDependents": "true", "propagationPolicy": "Background"},
    )
    assert r.status_code == 422
    assert r.json()["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Background": '
        "orphanDependents and deletionPropagation cannot be both set"
    )
    r = await client.request(
        "DELETE", f"{PODS}/del", json={"preconditions": {"uid": "not-the-uid"}}
    )
    assert r.status_code == 409
    assert r.json()["reason"] == "Conflict"
    assert r.json()["message"] == (
        'Operation cannot be fulfilled on Pod "del": the UID in the precondition (not-the-uid) '
        f"does not match the UID in record ({created['metadata']['uid']}). The object might "
        "have been deleted and then recreated"
    )
    assert r.json()["details"] == {"name": "del", "kind": "Pod"}
    r = await client.request(
        "DELETE",
        f"{PODS}/del",
        json={
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "preconditions": {"resourceVersion": "1"},
        },
    )
    assert r.status_code == 409
    assert r.json()["message"].startswith(
        'Operation cannot be fulfilled on Pod "del": the ResourceVersion in the precondition (1) '
        "does not match the ResourceVersion in record ("
    )
    r = await client.request(
        "DELETE",
        f"{PODS}/del",
        json={
            "preconditions": {"uid": created["metadata"]["uid"]},
            "propagationPolicy": "Foreground",
        },
    )
    assert r.status_code == 200
    assert r.json()["metadata"]["name"] == "del"


async def test_graceful_pod_deletion_and_finalizers(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]], open_watch: Any
) -> None:
    await client.post(PODS, json=pod("grace", nodeName="node-a"))
    fin = pod("fin")
    fin["metadata"]["finalizers"] = ["demo/hold"]
    fin_obj = (await client.post(PODS, json=fin)).json()
    start = fin_obj["metadata"]["resourceVersion"]
    async with open_watch(PODS, resourceVersion=start) as w:
        r = await client.delete(f"{PODS}/grace")
        assert r.status_code == 200
        assert r.json()["metadata"]["deletionGracePeriodSeconds"] == 30
        assert r.json()["metadata"]["deletionTimestamp"]
        first, second = await w.take(2)
        assert (first["type"], second["type"]) == ("MODIFIED", "DELETED")
        assert second["object"]["metadata"]["deletionTimestamp"]

        r = await client.delete(f"{PODS}/fin")
        assert r.status_code == 200
        assert r.json()["metadata"]["finalizers"] == ["demo/hold"]
        assert (await w.next())["type"] == "MODIFIED"
        held = (await client.get(f"{PODS}/fin")).json()
        assert held["metadata"]["deletionTimestamp"]
        r = await client.patch(
            f"{PODS}/fin",
            json={"metadata": {"finalizers": None}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status_code == 200
        assert [e["type"] for e in await w.take(2)] == ["MODIFIED", "DELETED"]
    assert (await client.get(f"{PODS}/fin")).status_code == 404


async def test_deletecollection_returns_the_deleted_list(client: httpx.AsyncClient) -> None:
    for i in range(3):
        body = event_body(f"coll-{i}")
        body["metadata"]["labels"] = {"batch": "b1" if i < 2 else "b2"}
        assert (await client.post(EVENTS, json=body)).status_code == 201
    r = await client.request("DELETE", EVENTS, params={"labelSelector": "batch=b1"})
    assert r.status_code == 200
    body = r.json()
    assert body["kind"] == "EventList"
    assert sorted(i["metadata"]["name"] for i in body["items"]) == ["coll-0", "coll-1"]
    remaining = (await client.get(EVENTS, params={"labelSelector": "batch"})).json()["items"]
    assert [i["metadata"]["name"] for i in remaining] == ["coll-2"]


async def test_protocol_errors(client: httpx.AsyncClient, demo: DemoUpstream) -> None:
    r = await client.get("/api/v1/namespaces/demo/widgets")
    assert r.status_code == 404
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    }
    assert (await client.get("/apis/apps/v1/daemonsets")).status_code == 404
    assert (await client.get("/api/v1/pods/web")).status_code == 404
    r = await client.put(PODS, json={})
    assert r.status_code == 405
    assert r.json()["reason"] == "MethodNotAllowed"
    assert (await client.post(f"{PODS}/x", json={})).status_code == 405
    assert (await client.delete(f"{PODS}/web-6d4b9c7f5-x7k2p/log")).status_code == 405
    r = await client.post(
        PODS, content=b'{"metadata": ', headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400
    assert r.json()["reason"] == "BadRequest"
    r = await client.get(PODS, headers={"Accept": "application/vnd.kubernetes.protobuf"})
    assert r.status_code == 406
    assert r.json()["reason"] == "NotAcceptable"
    r = await client.post(PODS, content=b"<pod/>", headers={"Content-Type": "application/xml"})
    assert r.status_code == 415
    huge = b'{"metadata": {"name": "big"}, "x": "' + b"a" * (3 * 1024 * 1024) + b'"}'
    r = await client.post(PODS, content=huge, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json()["message"] == "Request entity too large: limit is 3145728"


async def test_yaml_bodies_and_pretty_output(client: httpx.AsyncClient) -> None:
    manifest = (
        b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: yml\nspec:\n  containers:\n"
        b"  - name: c\n    image: busybox\n"
    )
    r = await client.post(PODS, content=manifest, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201
    pretty = await client.get(f"{PODS}/yml", params={"pretty": "true"})
    assert pretty.text.startswith('{\n  "kind": "Pod"')


async def test_discovery_is_the_registry(client: httpx.AsyncClient) -> None:
    api = (await client.get("/api")).json()
    assert api["versions"] == ["v1"]
    core = (await client.get("/api/v1")).json()
    names = {r["name"] for r in core["resources"]}
    assert names == {
        name
        for r in DEMO_REGISTRY.values()
        if r.group == ""
        for name in (r.plural, *(f"{r.plural}/{s}" for s in r.subresources))
    }
    assert {"pods", "pods/log", "services", "configmaps", "nodes", "namespaces"} <= names
    pods = next(r for r in core["resources"] if r["name"] == "pods")
    assert pods["categories"] == ["all"] and pods["shortNames"] == ["po"]
    groups = {g["name"] for g in (await client.get("/apis")).json()["groups"]}
    assert groups == {r.group for r in DEMO_REGISTRY.values() if r.group}
    leases = (await client.get("/apis/coordination.k8s.io/v1")).json()
    assert leases["resources"][0]["name"] == "leases"
    version = (await client.get("/version")).json()
    assert (version["major"], version["minor"], version["gitVersion"]) == ("1", "36", "v1.36.3")
    assert (await client.get("/healthz")).text == "ok"
    assert (await client.get("/api/v1/namespaces/demo/secrets")).status_code == 404


@pytest.mark.parametrize("path", [PODS, EVENTS, ENDPOINTS, LEASES])
async def test_every_namespaced_resource_lists_all_namespaces(
    client: httpx.AsyncClient, path: str
) -> None:
    cluster_path = path.replace("/namespaces/demo", "")
    all_items = (await client.get(cluster_path)).json()["items"]
    demo_items = (await client.get(path)).json()["items"]
    assert len(all_items) >= len(demo_items)
    keys = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in all_items]
    assert keys == sorted(keys, key=lambda k: f"{k[0]}/{k[1]}")


async def test_undecodable_bodies_are_400(client: httpx.AsyncClient) -> None:
    for body in (b'{"a" 1}', b"[1 2]", b"", b"[1]"):
        r = await client.post(PODS, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400
        assert r.json()["reason"] == "BadRequest"
        assert r.json()["message"].startswith(
            "the object provided is unrecognized (must be of type Pod): couldn't get version/kind;"
            " json parse error: "
        )
    r = await client.patch(
        f"{PODS}/pending-7f9d8",
        content=b"not json",
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 400
    assert r.json()["message"].startswith("error decoding patch: ")
    r = await client.post(
        PODS, json={"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}}
    )
    assert r.json()["message"] == (
        'Service in version "v1" cannot be handled as a Pod: no kind "Service" is registered '
        'for version "v1" in scheme "pkg/runtime/scheme.go:111"'
    )


async def test_new_style_event_validation(client: httpx.AsyncClient) -> None:
    body = {
        **event_body("new"),
        "eventTime": "2024-01-01T00:00:00.000000Z",
        "reportingComponent": "a",
        "reportingInstance": "b",
    }
    r = await client.post(EVENTS, json=body)
    assert r.status_code == 422
    assert r.json()["message"] == 'Event "new" is invalid: action: Required value'
    r = await client.post(EVENTS, json={**body, "action": "Did"})
    assert r.status_code == 201
