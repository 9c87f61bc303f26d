"""GraphQL client scenarios that must hold against any upstream: the demo and a real
kube-apiserver.

Each test takes the ``gw`` fixture (a :class:`~tests.scenarios.graphql_backend.GraphQLBackend`:
the gateway served by uvicorn on a loopback port in front of that upstream).  Clients are
real: httpx over HTTP, the ``websockets`` library over ``graphql-transport-ws`` and
``graphql-ws``, SSE over HTTP; the caller's token travels in the Authorization header.
``tests/scenarios/test_graphql_scenarios.py`` (demo) and ``tests/e2e/test_graphql_e2e.py`` (real
apiserver) import this module, so one scenario runs in both places.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import yaml

from gateway.core.upstream.budget import scope_of
from gateway.core.upstream.credentials import Credential
from tests.scenarios.backend import custom_resource, sample
from tests.scenarios.graphql_backend import KINDS, GraphQLBackend, Kind, sample_input
from tests.support.graphql import SSE, TransportWS

META = "metadata { name namespace uid resourceVersion labels }"
GET = "query(%NSDECL% $name: String!) { %kind%(%NS% name: $name) { kind apiVersion raw } }"
LIST = """query(%NSDECL% $labels: String, $limit: Int, $continue: String) {
  %list%(%NS% labelSelector: $labels, limit: $limit, continue: $continue) {
    metadata { resourceVersion continue }
    items { metadata { name namespace } }
  }
}"""
PATCH = """mutation(%NSDECL% $name: String!, $p: JSON!, $type: PatchType, $force: Boolean,
                  $manager: String, $dry: Boolean) {
  patch%Kind%(%NS% name: $name, patch: $p, type: $type, force: $force, fieldManager: $manager,
              dryRun: $dry) {
    metadata { name resourceVersion labels managedFields { manager operation } }
  }
}"""
WATCH = """subscription(%NSDECL% $labels: String, $rv: String, $initial: Boolean) {
  %watch%(%NS% labelSelector: $labels, resourceVersion: $rv, sendInitialEvents: $initial) {
    type resourceVersion
    object { metadata { name resourceVersion labels deletionTimestamp } }
  }
}"""


def ns_of(gw: GraphQLBackend, k: Kind) -> str | None:
    return gw.namespace if k.namespaced else None


def ns_vars(gw: GraphQLBackend, k: Kind) -> dict[str, Any]:
    return {"ns": gw.namespace} if k.namespaced else {}


def assert_error(error: dict[str, Any], expected: str, http_status: int) -> None:
    ext = error["extensions"]
    assert (ext["code"], ext["httpStatus"]) == (expected, http_status), error


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


async def get_raw(gw: GraphQLBackend, k: Kind, name: str) -> dict[str, Any]:
    got = await gw.ok(k.doc(GET), {**ns_vars(gw, k), "name": name})
    raw: dict[str, Any] = got[k.single]["raw"]
    return raw


async def list_names(gw: GraphQLBackend, k: Kind, selector: str) -> list[str]:
    listed = await gw.ok(k.doc(LIST), {**ns_vars(gw, k), "labels": selector})
    return sorted(i["metadata"]["name"] for i in listed[k.list_field]["items"])


async def delete(gw: GraphQLBackend, k: Kind, name: str) -> None:
    await gw.ok(
        k.doc(
            "mutation(%NSDECL% $name: String!) "
            "{ delete%Kind%(%NS% name: $name, gracePeriodSeconds: 0) { raw } }"
        ),
        {**ns_vars(gw, k), "name": name},
    )


# -- queries and mutations for every kind -----------------------------------------------------


@pytest.mark.parametrize("plural", list(KINDS))
async def test_crud_every_kind(gw: GraphQLBackend, plural: str) -> None:
    k = KINDS[plural]
    name = gw.unique(plural[:-1] if plural != "endpoints" else "ep")
    v = {**ns_vars(gw, k), "name": name}
    create = k.doc(
        "mutation(%NSDECL% $o: %Kind%Input!, $dry: Boolean) "
        f"{{ create%Kind%(%NS% object: $o, dryRun: $dry) {{ kind apiVersion {META} }} }}"
    )
    obj = sample_input(plural, name, ns_of(gw, k))

    # dryRun: validated and answered, not stored
    dry = (await gw.ok(create, {**ns_vars(gw, k), "o": obj, "dry": True}))[f"create{k.kind}"]
    assert dry["metadata"]["name"] == name
    assert_error(await gw.error(k.doc(GET), v), "NOT_FOUND", 404)

    created = (await gw.ok(create, {**ns_vars(gw, k), "o": obj}))[f"create{k.kind}"]
    assert (created["kind"], created["apiVersion"]) == (k.kind, k.api_version)
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    assert created["metadata"]["namespace"] == ns_of(gw, k)
    dup = await gw.error(create, {**ns_vars(gw, k), "o": obj})
    assert_error(dup, "ALREADY_EXISTS", 409)
    assert dup["extensions"]["reason"] == "AlreadyExists" and name in dup["message"]

    got = await get_raw(gw, k, name)
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert got["kind"] == k.kind  # `raw` is the object as the upstream sent it
    assert name in await list_names(gw, k, "")
    if k.namespaced:
        everywhere = await gw.ok(
            k.doc(
                "query($labels: String) { %list%(labelSelector: $labels) { items { metadata "
                "{ name namespace } } } }"
            ),
            {"labels": None},
        )
        assert (gw.namespace, name) in {
            (i["metadata"]["namespace"], i["metadata"]["name"])
            for i in everywhere[k.list_field]["items"]
        }

    # replace (typed input) guarded by resourceVersion; a stale one conflicts
    replace = k.doc(
        "mutation(%NSDECL% $name: String!, $o: %Kind%Input!, $dry: Boolean) "
        '{ replace%Kind%(%NS% name: $name, object: $o, dryRun: $dry, fieldManager: "tests") '
        f"{{ {META} }} }}"
    )
    got["metadata"]["labels"] = {**labels_of(got), "replaced": "yes"}
    dry_replaced = (
        await gw.ok(
            replace,
            {
                **v,
                "o": {**got, "metadata": {**got["metadata"], "labels": {"dry": "1"}}},
                "dry": True,
            },
        )
    )[f"replace{k.kind}"]
    assert labels_of(dry_replaced) == {"dry": "1"}
    replaced = (await gw.ok(replace, {**v, "o": got}))[f"replace{k.kind}"]
    assert labels_of(replaced) == {"replaced": "yes"}  # the dryRun replace left nothing
    assert replaced["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    stale = await gw.error(replace, {**v, "o": got})
    assert_error(stale, "CONFLICT", 409)

    patch = k.doc(PATCH)
    merged = (
        await gw.ok(patch, {**v, "p": {"metadata": {"labels": {"merge": "1"}}}, "type": "MERGE"})
    )[f"patch{k.kind}"]
    assert labels_of(merged) == {"replaced": "yes", "merge": "1"}
    jsonp = [{"op": "add", "path": "/metadata/labels/json", "value": "2"}]
    patched = (await gw.ok(patch, {**v, "p": jsonp, "type": "JSON"}))[f"patch{k.kind}"]
    assert labels_of(patched)["json"] == "2"
    smp = {**v, "p": {"metadata": {"labels": {"smp": "3"}}}, "type": "STRATEGIC_MERGE"}
    if not custom_resource(plural):
        patched = (await gw.ok(patch, smp))[f"patch{k.kind}"]
        assert labels_of(patched)["smp"] == "3" and labels_of(patched)["json"] == "2"
    else:  # strategic merge is not served for custom resources
        unsupported = await gw.error(patch, smp)
        assert_error(unsupported, "UNSUPPORTED_MEDIA_TYPE", 415)
    # a JSON patch given as text, and a dryRun patch that changes nothing
    text = orjson.dumps([{"op": "remove", "path": "/metadata/labels/merge"}]).decode()
    patched = (await gw.ok(patch, {**v, "p": text, "type": "JSON"}))[f"patch{k.kind}"]
    assert "merge" not in labels_of(patched)
    await gw.ok(patch, {**v, "p": {"metadata": {"labels": {"dry": "x"}}}, "dry": True})
    assert "dry" not in labels_of(await get_raw(gw, k, name))

    # delete: dryRun keeps it, a wrong precondition conflicts, then it is gone
    remove = k.doc(
        "mutation(%NSDECL% $name: String!, $dry: Boolean, $pre: PreconditionsInput) "
        "{ delete%Kind%(%NS% name: $name, dryRun: $dry, gracePeriodSeconds: 0, "
        "propagationPolicy: BACKGROUND, preconditions: $pre) "
        "{ object { metadata { name } } status { status code } raw } }"
    )
    await gw.ok(remove, {**v, "dry": True})
    await get_raw(gw, k, name)
    conflict = await gw.error(remove, {**v, "pre": {"uid": "not-the-uid"}})
    assert_error(conflict, "CONFLICT", 409)
    assert "precondition" in conflict["message"].lower(), conflict
    deleted = (await gw.ok(remove, {**v, "pre": {"uid": created["metadata"]["uid"]}}))[
        f"delete{k.kind}"
    ]
    if deleted["status"] is not None:
        assert deleted["status"]["status"] == "Success"
    else:
        assert deleted["object"]["metadata"]["name"] == name
    assert_error(await gw.error(k.doc(GET), v), "NOT_FOUND", 404)


@pytest.mark.parametrize("plural", list(KINDS))
async def test_apply_conflict_and_force(gw: GraphQLBackend, plural: str) -> None:
    k = KINDS[plural]
    name = gw.unique("ssa")
    v = {**ns_vars(gw, k), "name": name}
    patch = k.doc(PATCH)
    first = sample(plural, name, ns_of(gw, k))
    first["metadata"]["labels"] = {"owner": "first"}
    # APPLY takes YAML text as is (its own content type), or a JSON object
    applied = (
        await gw.ok(patch, {**v, "p": yaml.safe_dump(first), "type": "APPLY", "manager": "first"})
    )[f"patch{k.kind}"]
    assert labels_of(applied) == {"owner": "first"}
    assert ("first", "Apply") in {
        (m["manager"], m["operation"]) for m in applied["metadata"]["managedFields"]
    }
    second = sample(plural, name, ns_of(gw, k))
    second["metadata"]["labels"] = {"owner": "second"}
    conflict = await gw.error(patch, {**v, "p": second, "type": "APPLY", "manager": "second"})
    assert_error(conflict, "CONFLICT", 409)
    assert any(
        "owner" in (c.get("field") or "") or "owner" in (c.get("message") or "")
        for c in conflict["extensions"]["causes"]
    ), conflict
    # dryRun apply with force: answered, not stored
    dry = (
        await gw.ok(
            patch,
            {**v, "p": second, "type": "APPLY", "manager": "second", "force": True, "dry": True},
        )
    )[f"patch{k.kind}"]
    assert labels_of(dry) == {"owner": "second"}
    assert labels_of(await get_raw(gw, k, name)) == {"owner": "first"}
    forced = (
        await gw.ok(patch, {**v, "p": second, "type": "APPLY", "manager": "second", "force": True})
    )[f"patch{k.kind}"]
    assert labels_of(forced) == {"owner": "second"}
    managers = {m["manager"] for m in forced["metadata"]["managedFields"]}
    assert "second" in managers
    missing_manager = await gw.error(patch, {**v, "p": second, "type": "APPLY"})
    assert_error(missing_manager, "INVALID", 422)  # refused before any upstream call
    assert [c["field"] for c in missing_manager["extensions"]["causes"]] == ["fieldManager"]
    await delete(gw, k, name)


@pytest.mark.parametrize("plural", list(KINDS))
async def test_manifests_paging_and_delete_collection(gw: GraphQLBackend, plural: str) -> None:
    k = KINDS[plural]
    batch = gw.unique("batch")
    names = [f"{batch}-{i}" for i in range(7)]
    create = k.doc(
        "mutation(%NSDECL% $m: JSON!) { create%Kind%FromManifest(%NS% manifest: $m) "
        "{ metadata { name namespace } } }"
    )
    for i, name in enumerate(names):
        doc = sample(plural, name, ns_of(gw, k))
        doc["metadata"]["labels"] = {"batch": batch}
        # an object, YAML text, or JSON text
        manifest: Any = (doc, yaml.safe_dump(doc), orjson.dumps(doc).decode())[i % 3]
        made = (await gw.ok(create, {**ns_vars(gw, k), "m": manifest}))[
            f"create{k.kind}FromManifest"
        ]
        assert (made["metadata"]["name"], made["metadata"]["namespace"]) == (name, ns_of(gw, k))
    if k.namespaced:  # the namespace may come from the manifest alone
        doc = sample(plural, f"{batch}-m", gw.namespace)
        doc["metadata"]["labels"] = {"batch": batch}
        made = (
            await gw.ok(
                k.doc(
                    "mutation($m: JSON!) { create%Kind%FromManifest(manifest: $m) "
                    "{ metadata { namespace } } }"
                ),
                {"m": yaml.safe_dump(doc)},
            )
        )[f"create{k.kind}FromManifest"]
        assert made["metadata"]["namespace"] == gw.namespace
        names = sorted([*names, f"{batch}-m"])
    wrong = await gw.error(create, {**ns_vars(gw, k), "m": "kind: Nope\n"})
    assert_error(wrong, "BAD_REQUEST", 400)

    # replace from a YAML manifest
    current = await get_raw(gw, k, names[0])
    current["metadata"]["labels"]["replaced"] = "yes"
    replaced = await gw.ok(
        k.doc(
            "mutation(%NSDECL% $name: String!, $m: JSON!) { replace%Kind%FromManifest("
            "%NS% name: $name, manifest: $m) { metadata { labels } } }"
        ),
        {**ns_vars(gw, k), "name": names[0], "m": yaml.safe_dump(current)},
    )
    assert replaced[f"replace{k.kind}FromManifest"]["metadata"]["labels"]["replaced"] == "yes"

    # pages of 3 while `continue` is non-empty
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        page = (
            await gw.ok(
                k.doc(LIST),
                {**ns_vars(gw, k), "labels": f"batch={batch}", "limit": 3, "continue": token},
            )
        )[k.list_field]
        pages += 1
        assert len(page["items"]) <= 3
        seen += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"]["continue"]
        if not token:
            break
    assert sorted(seen) == names
    assert pages == (len(names) + 2) // 3

    collection = k.doc(
        "mutation(%NSDECL% $labels: String, $dry: Boolean) { delete%Kind%Collection("
        "%NS% labelSelector: $labels, dryRun: $dry, gracePeriodSeconds: 0) "
        "{ list { items { metadata { name } } } status { status } } }"
    )
    dry = (await gw.ok(collection, {**ns_vars(gw, k), "labels": f"batch={batch}", "dry": True}))[
        f"delete{k.kind}Collection"
    ]
    if dry["list"] is not None:
        assert sorted(i["metadata"]["name"] for i in dry["list"]["items"]) == names
    assert await list_names(gw, k, f"batch={batch}") == names
    done = (await gw.ok(collection, {**ns_vars(gw, k), "labels": f"batch={batch}"}))[
        f"delete{k.kind}Collection"
    ]
    if done["list"] is not None:
        assert sorted(i["metadata"]["name"] for i in done["list"]["items"]) == names
    assert await list_names(gw, k, f"batch={batch}") == []


async def test_selectors_and_resource_versions(gw: GraphQLBackend) -> None:
    k = KINDS["pods"]
    name = gw.unique("fs")
    await gw.ok(
        "mutation($ns: String!, $o: PodInput!) { createPod(namespace: $ns, object: $o) "
        "{ metadata { name } } }",
        {"ns": gw.namespace, "o": sample_input("pods", name, gw.namespace)},
    )
    query = """query($ns: String!, $labels: String, $fields: String, $rv: String,
                     $match: ResourceVersionMatch) {
      pods(namespace: $ns, labelSelector: $labels, fieldSelector: $fields,
           resourceVersion: $rv, resourceVersionMatch: $match) {
        metadata { resourceVersion } items { metadata { name } }
      }
    }"""
    by_field = (await gw.ok(query, {"ns": gw.namespace, "fields": f"metadata.name={name}"}))["pods"]
    assert [i["metadata"]["name"] for i in by_field["items"]] == [name]
    rv = by_field["metadata"]["resourceVersion"]
    assert rv
    newer = await gw.ok(
        query,
        {
            "ns": gw.namespace,
            "fields": f"metadata.name={name}",
            "rv": rv,
            "match": "NOT_OLDER_THAN",
        },
    )
    assert [i["metadata"]["name"] for i in newer["pods"]["items"]] == [name]
    bad_labels = await gw.error(query, {"ns": gw.namespace, "labels": "a in (b"})
    assert_error(bad_labels, "BAD_REQUEST", 400)
    bad_fields = await gw.error(query, {"ns": gw.namespace, "fields": "spec.nope=1"})
    assert_error(bad_fields, "BAD_REQUEST", 400)
    assert "spec.nope" in bad_fields["message"]
    await delete(gw, k, name)


async def test_pod_status_and_ephemeral_containers(gw: GraphQLBackend) -> None:
    name = gw.unique("sub")
    v = {"ns": gw.namespace, "name": name}
    await gw.ok(
        "mutation($ns: String!, $o: PodInput!) { createPod(namespace: $ns, object: $o) "
        "{ metadata { name } } }",
        {"ns": gw.namespace, "o": sample_input("pods", name, gw.namespace)},
    )
    status = (
        await gw.ok(
            "query($ns: String!, $name: String!) { podStatus(namespace: $ns, name: $name) "
            "{ kind status { phase } raw } }",
            v,
        )
    )["podStatus"]
    assert status["kind"] == "Pod"
    raw = status["raw"]
    raw["status"] = {
        **(raw.get("status") or {}),
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    replaced = (
        await gw.ok(
            "mutation($ns: String!, $name: String!, $o: PodInput!) { replacePodStatus("
            "namespace: $ns, name: $name, object: $o) "
            "{ status { phase conditions { type status } } } }",
            {**v, "o": raw},
        )
    )["replacePodStatus"]
    assert replaced["status"]["phase"] == "Running"
    assert {"type": "Ready", "status": "True"} in replaced["status"]["conditions"]
    patch_status = """mutation($ns: String!, $name: String!, $p: JSON!, $dry: Boolean) {
      patchPodStatus(namespace: $ns, name: $name, patch: $p, dryRun: $dry) {
        status { phase message }
      }
    }"""
    dry = (await gw.ok(patch_status, {**v, "p": {"status": {"message": "dry"}}, "dry": True}))[
        "patchPodStatus"
    ]
    assert dry["status"]["message"] == "dry"
    patched = (await gw.ok(patch_status, {**v, "p": {"status": {"message": "patched"}}}))[
        "patchPodStatus"
    ]
    assert patched["status"] == {"phase": "Running", "message": "patched"}
    # a write of the main resource does not change status
    main = (
        await gw.ok(
            "mutation($ns: String!, $name: String!, $p: JSON!) { patchPod(namespace: $ns, "
            "name: $name, patch: $p) { status { phase } } }",
            {**v, "p": {"status": {"phase": "Failed"}}},
        )
    )["patchPod"]
    assert main["status"]["phase"] == "Running"

    eph_query = """query($ns: String!, $name: String!) {
      podEphemeralContainers(namespace: $ns, name: $name) {
        spec { ephemeralContainers { name } } raw
      }
    }"""
    eph = (await gw.ok(eph_query, v))["podEphemeralContainers"]
    assert not eph["spec"]["ephemeralContainers"]
    debugger = {
        "name": "debugger",
        "image": "busybox:1.36",
        "command": ["sh"],
        "stdin": True,
        "tty": True,
    }
    added = (
        await gw.ok(
            "mutation($ns: String!, $name: String!, $p: JSON!) { patchPodEphemeralContainers("
            "namespace: $ns, name: $name, patch: $p, type: STRATEGIC_MERGE) "
            "{ spec { ephemeralContainers { name image } } } }",
            {**v, "p": {"spec": {"ephemeralContainers": [debugger]}}},
        )
    )["patchPodEphemeralContainers"]
    assert [c["name"] for c in added["spec"]["ephemeralContainers"]] == ["debugger"]
    current = (await gw.ok(eph_query, v))["podEphemeralContainers"]["raw"]
    current["spec"]["ephemeralContainers"].append({**debugger, "name": "second"})
    replace_eph = """mutation($ns: String!, $name: String!, $m: JSON!, $dry: Boolean) {
      replacePodEphemeralContainersFromManifest(namespace: $ns, name: $name, manifest: $m,
                                                dryRun: $dry) {
        spec { ephemeralContainers { name } }
      }
    }"""
    both = (await gw.ok(replace_eph, {**v, "m": current}))[
        "replacePodEphemeralContainersFromManifest"
    ]
    assert [c["name"] for c in both["spec"]["ephemeralContainers"]] == ["debugger", "second"]
    # typed replace, dryRun: answered, not stored
    typed = (await gw.ok(eph_query, v))["podEphemeralContainers"]["raw"]
    typed["spec"]["ephemeralContainers"].append({**debugger, "name": "third"})
    dry_eph = (
        await gw.ok(
            "mutation($ns: String!, $name: String!, $o: PodInput!) { replacePodEphemeralContainers("
            "namespace: $ns, name: $name, object: $o, dryRun: true) "
            "{ spec { ephemeralContainers { name } } } }",
            {**v, "o": typed},
        )
    )["replacePodEphemeralContainers"]
    assert len(dry_eph["spec"]["ephemeralContainers"]) == 3
    stored = (await gw.ok(eph_query, v))["podEphemeralContainers"]
    assert [c["name"] for c in stored["spec"]["ephemeralContainers"]] == ["debugger", "second"]
    # ephemeral containers cannot be removed
    current = stored["raw"]
    current["spec"]["ephemeralContainers"] = current["spec"]["ephemeralContainers"][:1]
    removal = await gw.error(replace_eph, {**v, "m": current})
    assert_error(removal, "INVALID", 422)
    assert removal["extensions"]["causes"], removal
    await delete(gw, KINDS["pods"], name)


# -- pod logs ---------------------------------------------------------------------------------


async def test_pod_log_error_paths(gw: GraphQLBackend) -> None:
    name = gw.unique("logs")
    pod = sample_input("pods", name, gw.namespace)
    pod["spec"]["containers"].append({"name": "sidecar", "image": "busybox:1.36"})
    await gw.ok(
        "mutation($ns: String!, $o: PodInput!) { createPod(namespace: $ns, object: $o) "
        "{ metadata { name } } }",
        {"ns": gw.namespace, "o": pod},
    )
    log = """query($ns: String!, $name: String!, $c: String, $since: Long, $at: Time) {
      podLog(namespace: $ns, name: $name, container: $c, sinceSeconds: $since, sinceTime: $at)
    }"""
    v = {"ns": gw.namespace, "name": name}
    choose = await gw.error(log, v)
    assert_error(choose, "BAD_REQUEST", 400)
    assert "a container name must be specified" in choose["message"]
    assert "main" in choose["message"] and "sidecar" in choose["message"], choose
    assert choose["path"] == ["podLog"]
    unknown = await gw.error(log, {**v, "c": "nope"})
    assert_error(unknown, "BAD_REQUEST", 400)
    assert "nope" in unknown["message"]
    # the pod has no node: the log is empty
    assert (await gw.ok(log, {**v, "c": "main"}))["podLog"] == ""
    both = await gw.error(log, {**v, "c": "main", "since": 1, "at": "2026-01-01T00:00:00Z"})
    assert_error(both, "INVALID", 422)
    assert both["extensions"]["causes"][0]["field"] == "sinceTime"

    follow = """subscription($ns: String!, $name: String!, $c: String) {
      followPodLog(namespace: $ns, name: $name, container: $c) { text }
    }"""
    async with gw.ws() as ws:
        op = await ws.subscribe(follow, v)
        payload = await ws.next(op)
        assert payload["errors"][0]["extensions"]["code"] == "BAD_REQUEST"
        assert "sidecar" in payload["errors"][0]["message"]
        assert await ws.recv() == {"id": op, "type": "complete"}
        # a container that is not running: the follow ends at once, cleanly
        op = await ws.subscribe(follow, {**v, "c": "main"})
        assert await ws.recv() == {"id": op, "type": "complete"}
    await delete(gw, KINDS["pods"], name)


# -- identities and errors --------------------------------------------------------------------


async def test_rbac_and_errors_per_identity(gw: GraphQLBackend) -> None:
    name = gw.unique("rbac")
    create_pod = (
        "mutation($ns: String!, $o: PodInput!) { createPod(namespace: $ns, object: $o) "
        "{ metadata { name } } }"
    )
    pods = "query($ns: String) { pods(namespace: $ns) { items { metadata { name } } } }"
    v = {"ns": gw.namespace, "o": sample_input("pods", name, gw.namespace)}
    await gw.ok(create_pod, v, identity="alice")
    got = await gw.ok(
        "query($ns: String!, $name: String!) { pod(namespace: $ns, name: $name) "
        "{ metadata { name } } }",
        {"ns": gw.namespace, "name": name},
        identity="alice",
    )
    assert got["pod"]["metadata"]["name"] == name

    forbidden = await gw.error(pods, {"ns": gw.other_namespace}, identity="alice")
    assert_error(forbidden, "FORBIDDEN", 403)
    assert forbidden["extensions"]["reason"] == "Forbidden"
    assert 'cannot list resource "pods"' in forbidden["message"]
    assert "alice" in forbidden["message"]
    assert_error(await gw.error(pods, {}, identity="alice"), "FORBIDDEN", 403)
    for identity in ("nobody",):
        assert_error(
            await gw.error(pods, {"ns": gw.namespace}, identity=identity), "FORBIDDEN", 403
        )
        assert_error(
            await gw.error(
                create_pod,
                {"ns": gw.namespace, "o": sample_input("pods", gw.unique("n"), None)},
                identity=identity,
            ),
            "FORBIDDEN",
            403,
        )
    for identity in ("bad", "anonymous"):
        err = await gw.error(pods, {"ns": gw.namespace}, identity=identity)
        assert_error(err, "UNAUTHENTICATED", 401)

    # partial data: one field allowed, one forbidden
    body = await gw.post(
        """query($a: String!, $b: String!) {
          mine: pods(namespace: $a) { items { metadata { name } } }
          theirs: pods(namespace: $b) { items { metadata { name } } }
        }""",
        {"a": gw.namespace, "b": gw.other_namespace},
        identity="alice",
    )
    assert name in [i["metadata"]["name"] for i in body["data"]["mine"]["items"]]
    assert body["data"]["theirs"] is None
    assert [e["path"] for e in body["errors"]] == [["theirs"]]

    # images are cluster-scoped: alice may read them (real apiserver), never write them
    image = sample_input("images", gw.unique("img"), None)
    create_image = "mutation($o: ImageInput!) { createImage(object: $o) { metadata { name } } }"
    assert_error(await gw.error(create_image, {"o": image}, identity="alice"), "FORBIDDEN", 403)
    images = "query($l: String) { images(labelSelector: $l) { items { metadata { name } } } }"
    if gw.alice_reads_images:
        await gw.ok(images, {}, identity="alice")
    else:
        assert_error(await gw.error(images, {}, identity="alice"), "FORBIDDEN", 403)
    assert_error(await gw.error(images, {}, identity="nobody"), "FORBIDDEN", 403)

    # errors with causes
    missing = await gw.error(
        "query($ns: String!, $name: String!) { lease(namespace: $ns, name: $name) { raw } }",
        {"ns": gw.namespace, "name": gw.unique("none")},
    )
    assert_error(missing, "NOT_FOUND", 404)
    invalid = sample_input("pods", gw.unique("bad"), None)
    invalid["spec"]["containers"] = []
    err = await gw.error(create_pod, {"ns": gw.namespace, "o": invalid})
    assert_error(err, "INVALID", 422)
    assert err["extensions"]["reason"] == "Invalid"
    assert "spec.containers" in {c["field"] for c in err["extensions"]["causes"]}, err
    no_layers = sample_input("images", gw.unique("img"), None)
    del no_layers["dockerImageLayers"]
    assert_error(await gw.error(create_image, {"o": no_layers}), "INVALID", 422)
    strict = sample("leases", gw.unique("strict"), gw.namespace)
    strict["spec"]["bogusField"] = 1
    err = await gw.error(
        "mutation($m: JSON!) { createLeaseFromManifest(manifest: $m, fieldValidation: STRICT) "
        "{ metadata { name } } }",
        {"m": strict},
    )
    assert_error(err, "BAD_REQUEST", 400)
    assert "bogusField" in err["message"]
    await delete(gw, KINDS["pods"], name)


async def test_links_across_resources(gw: GraphQLBackend) -> None:
    """Pod.events, Event.involvedObject.pod and Endpoints targetRef.pod, batched."""
    name = gw.unique("linked")
    ns = gw.namespace
    pod = (
        await gw.ok(
            "mutation($ns: String!, $o: PodInput!) { createPod(namespace: $ns, object: $o) "
            "{ metadata { name uid } } }",
            {"ns": ns, "o": sample_input("pods", name, ns)},
        )
    )["createPod"]
    ref = {"kind": "Pod", "name": name, "namespace": ns, "uid": pod["metadata"]["uid"]}
    event = sample_input("events", f"{name}.1", ns)
    event["involvedObject"] = {**ref, "apiVersion": "v1"}
    await gw.ok(
        "mutation($ns: String!, $o: EventInput!) { createEvent(namespace: $ns, object: $o) "
        "{ metadata { name } } }",
        {"ns": ns, "o": event},
    )
    endpoints = sample_input("endpoints", name, ns)
    endpoints["subsets"][0]["addresses"][0]["targetRef"] = ref
    await gw.ok(
        "mutation($ns: String!, $o: EndpointsInput!) { createEndpoints(namespace: $ns, "
        "object: $o) { metadata { name } } }",
        {"ns": ns, "o": endpoints},
    )
    linked = await gw.ok(
        """query($ns: String!, $name: String!, $event: String!) {
          pod(namespace: $ns, name: $name) { events { reason involvedObject { name } } }
          event(namespace: $ns, name: $event) { involvedObject { pod { metadata { uid } } } }
          endpoints(namespace: $ns, name: $name) {
            subsets { addresses { targetRef { pod { metadata { name } } } } }
          }
        }""",
        {"ns": ns, "name": name, "event": f"{name}.1"},
    )
    assert linked["pod"]["events"] == [{"reason": "Scheduled", "involvedObject": {"name": name}}]
    assert linked["event"]["involvedObject"]["pod"]["metadata"]["uid"] == pod["metadata"]["uid"]
    address = linked["endpoints"]["subsets"][0]["addresses"][0]
    assert address["targetRef"]["pod"]["metadata"]["name"] == name
    await delete(gw, KINDS["endpoints"], name)
    await delete(gw, KINDS["events"], f"{name}.1")
    await delete(gw, KINDS["pods"], name)


# -- subscriptions ----------------------------------------------------------------------------


def _event(payload: dict[str, Any], k: Kind) -> dict[str, Any]:
    assert "errors" not in payload, payload
    event: dict[str, Any] = payload["data"][k.watch_field]
    return event


async def changes(
    ws: TransportWS, op: str, k: Kind, count: int, timeout: float = 30
) -> list[tuple[str, str, str]]:
    """The next ``count`` changes ``(type, name, resourceVersion)``; markers and the
    deletionTimestamp step of a graceful deletion are skipped."""
    out: list[tuple[str, str, str]] = []
    while len(out) < count:
        event = _event(await ws.next(op, timeout), k)
        if event["type"] in ("RESYNC", "BOOKMARK"):
            continue
        meta = event["object"]["metadata"]
        if event["type"] == "MODIFIED" and meta.get("deletionTimestamp"):
            continue
        out.append((event["type"], meta["name"], event["resourceVersion"]))
    return out


def types_and_names(seen: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    return [(t, n) for t, n, _ in seen]


async def create_labelled(gw: GraphQLBackend, k: Kind, name: str, **labels: str) -> str:
    doc = sample(k.plural, name, ns_of(gw, k))
    doc["metadata"]["labels"] = labels
    made = await gw.ok(
        k.doc(
            "mutation(%NSDECL% $m: JSON!) { create%Kind%FromManifest(%NS% manifest: $m) "
            "{ metadata { resourceVersion } } }"
        ),
        {**ns_vars(gw, k), "m": doc},
    )
    rv: str = made[f"create{k.kind}FromManifest"]["metadata"]["resourceVersion"]
    return rv


async def merge_labels(gw: GraphQLBackend, k: Kind, name: str, **labels: str) -> str:
    patched = await gw.ok(
        k.doc(PATCH),
        {**ns_vars(gw, k), "name": name, "p": {"metadata": {"labels": labels}}, "type": "MERGE"},
    )
    rv: str = patched[f"patch{k.kind}"]["metadata"]["resourceVersion"]
    return rv


@pytest.mark.parametrize("plural", list(KINDS))
async def test_watch_added_modified_deleted(gw: GraphQLBackend, plural: str) -> None:
    k = KINDS[plural]
    tag = gw.unique("w")
    await create_labelled(gw, k, f"{tag}-a", w=tag)
    async with gw.ws() as ws:  # token in the upgrade request's Authorization header
        op = await ws.subscribe(k.doc(WATCH), {**ns_vars(gw, k), "labels": f"w={tag}"})
        assert types_and_names(await changes(ws, op, k, 1)) == [("ADDED", f"{tag}-a")]
        rv_b = await create_labelled(gw, k, f"{tag}-b", w=tag)
        [added] = await changes(ws, op, k, 1)
        assert added == ("ADDED", f"{tag}-b", rv_b)
        rv_a = await merge_labels(gw, k, f"{tag}-a", step="2")
        assert await changes(ws, op, k, 1) == [("MODIFIED", f"{tag}-a", rv_a)]
        await delete(gw, k, f"{tag}-b")
        assert types_and_names(await changes(ws, op, k, 1)) == [("DELETED", f"{tag}-b")]
        await ws.send({"id": op, "type": "complete"})
    await delete(gw, k, f"{tag}-a")


CHANGED_ONLY = """subscription(%NSDECL% $labels: String) {
  %watch%(%NS% labelSelector: $labels, changedFieldsOnly: true) {
    type object { metadata { name labels } }
  }
}"""


@pytest.mark.parametrize("plural", list(KINDS))
async def test_changed_fields_only(gw: GraphQLBackend, plural: str) -> None:
    """Watch rule 31: annotation changes (and the managedFields they touch) are not
    delivered; the label change after them is the next event, and so is each one."""
    k = KINDS[plural]
    tag = gw.unique("c")
    await create_labelled(gw, k, f"{tag}-a", c=tag)
    async with gw.ws() as ws:
        op = await ws.subscribe(k.doc(CHANGED_ONLY), {**ns_vars(gw, k), "labels": f"c={tag}"})
        first = _event(await ws.next(op, 30), k)
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", f"{tag}-a")
        for step in ("1", "2"):
            for note in ("x", "y"):
                await gw.ok(
                    k.doc(PATCH),
                    {
                        **ns_vars(gw, k),
                        "name": f"{tag}-a",
                        "p": {"metadata": {"annotations": {"note": note + step}}},
                        "type": "MERGE",
                    },
                )
            await merge_labels(gw, k, f"{tag}-a", step=step)
            event = _event(await ws.next(op, 30), k)
            assert (event["type"], event["object"]["metadata"]["labels"]["step"]) == (
                "MODIFIED",
                step,
            )
        await ws.send({"id": op, "type": "complete"})
    await delete(gw, k, f"{tag}-a")


async def test_resume_by_resource_version(gw: GraphQLBackend) -> None:
    k = KINDS["pods"]
    tag = gw.unique("resume")
    variables = {**ns_vars(gw, k), "labels": f"r={tag}"}
    await create_labelled(gw, k, f"{tag}-a", r=tag)
    async with gw.ws() as ws:
        # Without initial events a subscription sees only what happens next: change the
        # existing object until the (asynchronously started) watch reports it.
        op = await ws.subscribe(k.doc(WATCH), {**variables, "initial": False})
        first = None
        for step in range(100):
            await merge_labels(gw, k, f"{tag}-a", probe=str(step))
            try:
                [first] = await changes(ws, op, k, 1, timeout=0.3)
                break
            except TimeoutError:
                continue
        assert first is not None and first[:2] == ("MODIFIED", f"{tag}-a")
        # Live now: read up to a known change (late probe events come first, in order).
        resume_at = await merge_labels(gw, k, f"{tag}-a", probe="done")
        while first[2] != resume_at:
            [first] = await changes(ws, op, k, 1)
        await ws.send({"id": op, "type": "complete"})
    # changes while nobody listens ...
    await create_labelled(gw, k, f"{tag}-b", r=tag)
    await merge_labels(gw, k, f"{tag}-a", step="2")
    await delete(gw, k, f"{tag}-a")
    # ... are delivered, in order, to a subscription resumed from the last seen version
    async with gw.ws(token_in="payload") as ws:
        op = await ws.subscribe(k.doc(WATCH), {**variables, "rv": resume_at})
        seen = await changes(ws, op, k, 3)
        assert types_and_names(seen) == [
            ("ADDED", f"{tag}-b"),
            ("MODIFIED", f"{tag}-a"),
            ("DELETED", f"{tag}-a"),
        ]
        # resume again from the middle: only what follows
        op2 = await ws.subscribe(k.doc(WATCH), {**variables, "rv": seen[0][2]})
        assert types_and_names(await changes(ws, op2, k, 2)) == [
            ("MODIFIED", f"{tag}-a"),
            ("DELETED", f"{tag}-a"),
        ]
    await delete(gw, k, f"{tag}-b")


async def test_label_change_out_of_selector_is_deleted(gw: GraphQLBackend) -> None:
    k = KINDS["pods"]
    tag = gw.unique("sel")
    await create_labelled(gw, k, tag, sel=tag)
    async with gw.ws() as ws:
        op = await ws.subscribe(k.doc(WATCH), {**ns_vars(gw, k), "labels": f"sel={tag}"})
        assert types_and_names(await changes(ws, op, k, 1)) == [("ADDED", tag)]
        await merge_labels(gw, k, tag, sel="other")
        assert types_and_names(await changes(ws, op, k, 1)) == [("DELETED", tag)]
    await delete(gw, k, tag)


async def test_watch_by_name_over_legacy_graphql_ws(gw: GraphQLBackend) -> None:
    k = KINDS["leases"]
    tag = gw.unique("legacy")
    await create_labelled(gw, k, tag, legacy="yes")
    await create_labelled(gw, k, f"{tag}-other", legacy="yes")
    query = """subscription($ns: String!, $name: String!) {
      watchLeases(namespace: $ns, name: $name) { type object { metadata { name } } }
    }"""
    async with gw.ws(protocol="graphql-ws") as ws:
        op = await ws.subscribe(query, {"ns": gw.namespace, "name": tag})
        first = (await ws.next(op))["data"]["watchLeases"]
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", tag)
        await merge_labels(gw, k, f"{tag}-other", step="2")  # not this name: not delivered
        await merge_labels(gw, k, tag, step="2")
        second = (await ws.next(op))["data"]["watchLeases"]
        assert (second["type"], second["object"]["metadata"]["name"]) == ("MODIFIED", tag)
        await ws.send({"id": op, "type": "stop"})
        assert await ws.recv() == {"id": op, "type": "complete"}
    await delete(gw, k, tag)
    await delete(gw, k, f"{tag}-other")


async def test_watch_over_sse(gw: GraphQLBackend) -> None:
    k = KINDS["endpoints"]
    tag = gw.unique("sse")
    await create_labelled(gw, k, f"{tag}-a", sse=tag)
    async with gw.http.stream(
        "POST",
        "/graphql",
        json={"query": k.doc(WATCH), "variables": {"ns": gw.namespace, "labels": f"sse={tag}"}},
        headers={"Accept": "text/event-stream", **gw.headers("alice")},
    ) as response:
        assert response.status_code == 200
        sse = SSE(response)
        name, payload = await sse.event()
        assert name == "next"
        assert _event(payload, k)["object"]["metadata"]["name"] == f"{tag}-a"
        await create_labelled(gw, k, f"{tag}-b", sse=tag)
        name, payload = await sse.event()
        event = _event(payload, k)
        assert (name, event["type"], event["object"]["metadata"]["name"]) == (
            "next",
            "ADDED",
            f"{tag}-b",
        )
    await delete(gw, k, f"{tag}-a")
    await delete(gw, k, f"{tag}-b")


async def test_subscription_denials_per_identity(gw: GraphQLBackend) -> None:
    k = KINDS["pods"]
    query = "subscription($ns: String) { watchPods(namespace: $ns) { type } }"
    cases = [
        ("nobody", gw.namespace, "FORBIDDEN"),
        ("alice", gw.other_namespace, "FORBIDDEN"),
        ("alice", None, "FORBIDDEN"),
        ("bad", gw.namespace, "UNAUTHENTICATED"),
        ("anonymous", gw.namespace, "UNAUTHENTICATED"),
    ]
    for identity, namespace, expected in cases:
        async with gw.ws(identity) as ws:
            op = await ws.subscribe(query, {"ns": namespace})
            payload = await ws.next(op)
            assert payload["errors"][0]["extensions"]["code"] == expected, (identity, payload)
            assert await ws.recv() == {"id": op, "type": "complete"}
    # alice in her own namespace: allowed
    tag = gw.unique("mine")
    await create_labelled(gw, k, tag, mine=tag)
    async with gw.ws("alice") as ws:
        op = await ws.subscribe(k.doc(WATCH), {"ns": gw.namespace, "labels": f"mine={tag}"})
        assert types_and_names(await changes(ws, op, k, 1)) == [("ADDED", tag)]
    await delete(gw, k, tag)


async def test_subscribers_share_one_feed_per_identity(gw: GraphQLBackend) -> None:
    k = KINDS["leases"]
    tag = gw.unique("share")
    await create_labelled(gw, k, f"{tag}-a", share=tag)
    variables = {"ns": gw.namespace, "labels": f"share={tag}"}
    subscriptions = gw.graphql.subscriptions
    # executions are keyed by a hash, never a token
    admin = scope_of(Credential(gw.tokens["admin"]))
    async with gw.ws() as one, gw.ws() as two, gw.ws("alice") as three:
        a = await one.subscribe(k.doc(WATCH), variables)
        assert types_and_names(await changes(one, a, k, 1)) == [("ADDED", f"{tag}-a")]
        b = await two.subscribe(k.doc(WATCH), variables)
        # the late joiner gets the current state, then live events
        assert types_and_names(await changes(two, b, k, 1)) == [("ADDED", f"{tag}-a")]
        c = await three.subscribe(k.doc(WATCH), variables)
        assert types_and_names(await changes(three, c, k, 1)) == [("ADDED", f"{tag}-a")]
        mine = [
            key for key in subscriptions.executions if key[0] == admin and key[1] == k.doc(WATCH)
        ]
        assert len(mine) == 1  # one execution (one upstream watch) for both admin subscribers
        assert len([key for key in subscriptions.executions if key[1] == k.doc(WATCH)]) == 2
        await create_labelled(gw, k, f"{tag}-b", share=tag)
        for ws, op in ((one, a), (two, b), (three, c)):
            assert types_and_names(await changes(ws, op, k, 1)) == [("ADDED", f"{tag}-b")]
    await delete(gw, k, f"{tag}-a")
    await delete(gw, k, f"{tag}-b")
