"""GraphQL mutations over HTTP for every resource and operation: create and replace (typed
input objects and JSON/YAML manifests), the four patch types, delete, deleteCollection, pod
status and ephemeral containers, dryRun and fieldValidation."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from kube_gateway_demo import DemoUpstream
from tests.support.graphql import NAMESPACE, data, error_of, gql, unique

#: A minimal valid object of each kind, as typed input (kind -> (mutation suffix, object)).
SAMPLES: dict[str, dict[str, Any]] = {
    "Pod": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}},
    "Event": {
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": NAMESPACE},
        "reason": "Tested",
        "message": "from the GraphQL tests",
        "type": "Normal",
        "source": {"component": "tests"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    },
    "Endpoints": {
        "subsets": [{"addresses": [{"ip": "10.0.0.7"}], "ports": [{"name": "http", "port": 80}]}]
    },
    "Lease": {"spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}},
    "Image": {
        "dockerImageReference": "quay.io/demo/tested@sha256:" + "a" * 64,
        "dockerImageLayers": [
            {
                "name": "sha256:" + "b" * 64,
                "size": 1000,
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            }
        ],
    },
}
PLURAL = {"Pod": "Pods", "Event": "Events", "Endpoints": "Endpoints", "Lease": "Leases"}
LIST_FIELD = {
    "Pod": "pods",
    "Event": "events",
    "Endpoints": "endpointsList",
    "Lease": "leases",
    "Image": "images",
}


def _ns(kind: str) -> str:
    return "" if kind == "Image" else 'namespace: "demo", '


@pytest.mark.parametrize("kind", list(SAMPLES))
async def test_crud_every_resource(client: httpx.AsyncClient, kind: str) -> None:
    name = unique(kind.lower())
    ns = _ns(kind)
    obj = {"metadata": {"name": name, "labels": {"suite": name}}, **SAMPLES[kind]}
    lower = kind[0].lower() + kind[1:]

    created = data(
        await gql(
            client,
            f"mutation($o: {kind}Input!) {{ create{kind}({ns}object: $o) "
            "{ metadata { name uid resourceVersion labels } } }",
            {"o": obj},
        )
    )[f"create{kind}"]
    assert created["metadata"]["name"] == name
    rv = created["metadata"]["resourceVersion"]

    # dryRun: validated and answered, not stored.
    dry = data(
        await gql(
            client,
            f"mutation($o: {kind}Input!) {{ create{kind}({ns}object: $o, dryRun: true) "
            "{ metadata { name } } }",
            {"o": {**obj, "metadata": {"name": name + "-dry"}}},
        )
    )
    assert dry[f"create{kind}"]["metadata"]["name"] == name + "-dry"
    missing = await gql(
        client,
        f'{{ {lower}({ns}name: "{name}-dry") {{ metadata {{ name }} }} }}',
    )
    assert error_of(missing)["extensions"]["code"] == "NOT_FOUND"

    current = data(await gql(client, f'{{ {lower}({ns}name: "{name}") {{ raw }} }}'))[lower]["raw"]
    current["metadata"]["labels"]["v"] = "2"
    replaced = data(
        await gql(
            client,
            f'mutation($o: {kind}Input!) {{ replace{kind}({ns}name: "{name}", object: $o, '
            'fieldManager: "tests", fieldValidation: STRICT) '
            "{ metadata { labels resourceVersion } } }",
            {"o": current},
        )
    )[f"replace{kind}"]
    assert replaced["metadata"]["resourceVersion"] != rv
    assert replaced["metadata"]["labels"]["v"] == "2"

    for patch_type, patch in (
        ("MERGE", {"metadata": {"labels": {"merge": "yes"}}}),
        ("JSON", [{"op": "add", "path": "/metadata/labels/json", "value": "yes"}]),
        ("STRATEGIC_MERGE", {"metadata": {"labels": {"smp": "yes"}}})
        if kind != "Image"
        else ("MERGE", {"metadata": {"labels": {"smp": "yes"}}}),
    ):
        patched = data(
            await gql(
                client,
                f'mutation($p: JSON!) {{ patch{kind}({ns}name: "{name}", patch: $p, '
                f"type: {patch_type}) {{ metadata {{ labels }} }} }}",
                {"p": patch},
            )
        )[f"patch{kind}"]
        assert patched["metadata"]["labels"]
    applied = data(
        await gql(
            client,
            f'mutation($p: JSON!) {{ patch{kind}({ns}name: "{name}", patch: $p, type: APPLY, '
            'fieldManager: "tests-apply", force: true) { metadata { labels } } }',
            {
                "p": f"apiVersion: {_api_version(kind)}\nkind: {kind}\nmetadata:\n  name: {name}\n"
                + (f"  namespace: {NAMESPACE}\n" if kind != "Image" else "")
                + "  labels:\n    applied: 'yes'\n"
            },
        )
    )[f"patch{kind}"]
    labels = applied["metadata"]["labels"]
    assert {"merge", "json", "smp", "applied"} <= set(labels)

    listed = data(
        await gql(
            client,
            f'{{ {LIST_FIELD[kind]}({ns}labelSelector: "suite={name}") '
            "{ items { metadata { name } } } }",
        )
    )
    assert [i["metadata"]["name"] for i in listed[LIST_FIELD[kind]]["items"]] == [name]

    deleted = data(
        await gql(
            client,
            f'mutation {{ delete{kind}({ns}name: "{name}", gracePeriodSeconds: 0, '
            "propagationPolicy: BACKGROUND) { object { metadata { name } } "
            "status { status code details { name } } raw } }",
        )
    )[f"delete{kind}"]
    if kind == "Pod":
        # Pods answer a delete with the deleted object (the apiserver's pod strategy).
        assert deleted["raw"]["kind"] == "Pod"
        assert deleted["object"] == {"metadata": {"name": name}}
        assert deleted["status"] is None
    else:
        # The other kinds answer with a Status.
        assert deleted["raw"]["kind"] == "Status"
        assert deleted["object"] is None
        assert deleted["status"] == {
            "status": "Success",
            "code": None,
            "details": {"name": name},
        }


def _api_version(kind: str) -> str:
    return {"Lease": "coordination.k8s.io/v1", "Image": "image.openshift.io/v1"}.get(kind, "v1")


@pytest.mark.parametrize("kind", list(SAMPLES))
async def test_manifests_and_delete_collection(client: httpx.AsyncClient, kind: str) -> None:
    label = unique("coll")
    ns = _ns(kind)
    names = [f"{label}-{i}" for i in range(3)]
    for i, name in enumerate(names):
        doc = {
            "apiVersion": _api_version(kind),
            "kind": kind,
            "metadata": {"name": name, "labels": {"suite": label}},
            **SAMPLES[kind],
        }
        if kind != "Image":
            doc["metadata"]["namespace"] = NAMESPACE
        # The JSON variant takes an object, or JSON or YAML text.
        manifest: Any = doc if i == 0 else (_yaml(doc) if i == 1 else __import__("json").dumps(doc))
        created = data(
            await gql(
                client,
                f"mutation($m: JSON!) {{ create{kind}FromManifest(manifest: $m) "
                "{ metadata { name } } }",
                {"m": manifest},
            )
        )
        assert created[f"create{kind}FromManifest"]["metadata"]["name"] == name
    lower = kind[0].lower() + kind[1:]
    doc = data(await gql(client, f'{{ {lower}({ns}name: "{names[2]}") {{ raw }} }}'))[lower]["raw"]
    doc["metadata"]["labels"]["replaced"] = "yes"
    replaced = data(
        await gql(
            client,
            f"mutation($m: JSON!) {{ replace{kind}FromManifest("
            f'{ns}name: "{names[2]}", manifest: $m) '
            "{ metadata { labels } } }",
            {"m": _yaml(doc)},
        )
    )
    assert replaced[f"replace{kind}FromManifest"]["metadata"]["labels"]["replaced"] == "yes"
    wrong = await gql(
        client,
        f'mutation {{ create{kind}FromManifest(manifest: "kind: Nope\\n") '
        "{ metadata { name } } }",
    )
    assert error_of(wrong)["extensions"]["code"] == "BAD_REQUEST"
    dry = data(
        await gql(
            client,
            f'mutation {{ delete{kind}Collection({ns}labelSelector: "suite={label}", dryRun: true) '
            "{ list { items { metadata { name } } } status { status } raw } }",
        )
    )[f"delete{kind}Collection"]
    still = data(
        await gql(
            client,
            f'{{ {LIST_FIELD[kind]}({ns}labelSelector: "suite={label}") '
            "{ items { metadata { name } } } }",
        )
    )
    assert len(still[LIST_FIELD[kind]]["items"]) == 3, dry
    data(
        await gql(
            client,
            f'mutation {{ delete{kind}Collection({ns}labelSelector: "suite={label}", '
            "gracePeriodSeconds: 0) { raw } }",
        )
    )
    gone = data(
        await gql(
            client,
            f'{{ {LIST_FIELD[kind]}({ns}labelSelector: "suite={label}") '
            "{ items { metadata { name deletionTimestamp } } } }",
        )
    )
    assert all(i["metadata"]["deletionTimestamp"] for i in gone[LIST_FIELD[kind]]["items"])


def _yaml(doc: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(doc)


async def test_pod_status_and_ephemeral_containers(
    client: httpx.AsyncClient, demo: DemoUpstream
) -> None:
    name = unique("sub")
    pod = await demo.store.create(
        "pods",
        {
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        },
        namespace=NAMESPACE,
    )
    status = data(
        await gql(
            client,
            f'mutation($s: JSON!) {{ patchPodStatus(namespace: "demo", name: "{name}", patch: $s) '
            "{ status { phase message } } }",
            {"s": {"status": {"message": "patched status"}}},
        )
    )["patchPodStatus"]
    assert status["status"]["message"] == "patched status"
    current = data(
        await gql(client, f'{{ podStatus(namespace: "demo", name: "{name}") {{ raw }} }}')
    )["podStatus"]["raw"]
    current["status"]["message"] = "replaced status"
    replaced = data(
        await gql(
            client,
            "mutation($m: JSON!) { replacePodStatusFromManifest("
            f'namespace: "demo", name: "{name}", '
            "manifest: $m) { status { message } } }",
            {"m": current},
        )
    )["replacePodStatusFromManifest"]
    assert replaced["status"]["message"] == "replaced status"
    typed = data(
        await gql(
            client,
            f'mutation($o: PodInput!) {{ replacePodStatus(namespace: "demo", name: "{name}", '
            "object: $o) { status { message } } }",
            {
                "o": {
                    "metadata": {"name": name},
                    "status": {"message": "typed status", "phase": "Running"},
                }
            },
        )
    )["replacePodStatus"]
    assert typed["status"]["message"] == "typed status"
    debug = {"name": "debug", "image": "busybox", "targetContainerName": "main"}
    patched = data(
        await gql(
            client,
            "mutation($p: JSON!) { patchPodEphemeralContainers("
            f'namespace: "demo", name: "{name}", '
            "patch: $p, type: STRATEGIC_MERGE) { spec { ephemeralContainers { name } } } }",
            {"p": {"spec": {"ephemeralContainers": [debug]}}},
        )
    )["patchPodEphemeralContainers"]
    assert [c["name"] for c in patched["spec"]["ephemeralContainers"]] == ["debug"]
    current = data(
        await gql(
            client, f'{{ podEphemeralContainers(namespace: "demo", name: "{name}") {{ raw }} }}'
        )
    )["podEphemeralContainers"]["raw"]
    current["spec"]["ephemeralContainers"].append({"name": "debug2", "image": "busybox"})
    replaced = data(
        await gql(
            client,
            f'mutation($o: PodInput!) {{ replacePodEphemeralContainers(namespace: "demo", '
            f'name: "{name}", object: $o, dryRun: true) '
            "{ spec { ephemeralContainers { name } } } }",
            {"o": {"metadata": current["metadata"], "spec": current["spec"]}},
        )
    )["replacePodEphemeralContainers"]
    assert [c["name"] for c in replaced["spec"]["ephemeralContainers"]] == ["debug", "debug2"]
    assert pod["metadata"]["name"] == name


async def test_delete_preconditions_and_field_validation(client: httpx.AsyncClient) -> None:
    name = unique("pre")
    data(
        await gql(
            client,
            f'mutation {{ createLease(namespace: "demo", object: {{metadata: {{name: "{name}"}}}}) '
            "{ metadata { uid } } }",
        )
    )
    conflict = await gql(
        client,
        f'mutation {{ deleteLease(namespace: "demo", name: "{name}", '
        'preconditions: {uid: "not-the-uid"}) { raw } }',
    )
    assert error_of(conflict)["extensions"]["code"] == "CONFLICT"
    strict = await gql(
        client,
        'mutation($m: JSON!) { createLeaseFromManifest(namespace: "demo", manifest: $m, '
        "fieldValidation: STRICT) { metadata { name } } }",
        {"m": {"metadata": {"name": name + "-s"}, "spec": {"nope": 1}}},
    )
    err = error_of(strict)
    assert err["extensions"]["code"] == "BAD_REQUEST"
    assert "nope" in err["message"]
