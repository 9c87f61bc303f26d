"""Core scenarios that must hold against any upstream: the demo and a real kube-apiserver.

Each test takes the ``backend`` fixture (see ``tests/scenarios/backend.py``); the demo suite
(``tests/scenarios/test_core_scenarios.py``) and the end-to-end suite
(``tests/e2e/test_core_e2e.py``) import this module, so one scenario runs in both places.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.core import errors
from gateway.core.lists import large as largelist
from gateway.core.lists import slicedjson
from gateway.core.model.options import (
    DeleteOptions,
    ListOptions,
    LogOptions,
    PatchOptions,
    PatchType,
    Preconditions,
    WriteOptions,
)
from gateway.core.watch.watcher import Watcher, WatchEvent
from tests.scenarios.backend import RESOURCES, Backend, custom_resource, namespaced, sample

KINDS = list(RESOURCES)


def ns_for(backend: Backend, kind: str) -> str | None:
    return backend.namespace if namespaced(kind) else None


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


@pytest.mark.parametrize("kind", KINDS)
async def test_crud_and_every_patch_type(backend: Backend, kind: str) -> None:
    kube, admin, ns = backend.adapter, backend.admin, ns_for(backend, kind)
    name = backend.unique(kind[:-1])
    body = sample(kind, name, ns)

    # dryRun create: returned, not persisted
    dry = await kube.create(
        kind, body, namespace=ns, write=WriteOptions(dry_run=True), credential=admin
    )
    assert dry["metadata"]["name"] == name
    with pytest.raises(errors.NotFound):
        await kube.get(kind, name, namespace=ns, credential=admin)

    created = await kube.create(kind, body, namespace=ns, credential=admin)
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    with pytest.raises(errors.AlreadyExists) as dup:
        await kube.create(kind, body, namespace=ns, credential=admin)
    assert dup.value.status_code == 409 and name in dup.value.message

    got = await kube.get(kind, name, namespace=ns, credential=admin)
    assert got["metadata"]["uid"] == created["metadata"]["uid"]

    listed = await kube.list(kind, namespace=ns, credential=admin)
    assert name in {i["metadata"]["name"] for i in listed["items"]}
    assert listed["metadata"]["resourceVersion"]
    if ns is not None:
        everywhere = await kube.list(kind, credential=admin)
        assert (ns, name) in {
            (i["metadata"].get("namespace"), i["metadata"]["name"]) for i in everywhere["items"]
        }

    # replace guarded by resourceVersion; a stale one conflicts
    changed = dict(got)
    changed["metadata"] = {**got["metadata"], "labels": {**labels(got), "replaced": "yes"}}
    replaced = await kube.replace(kind, name, changed, namespace=ns, credential=admin)
    assert labels(replaced)["replaced"] == "yes"
    with pytest.raises(errors.Conflict):
        await kube.replace(kind, name, changed, namespace=ns, credential=admin)

    merge = await kube.patch(
        kind,
        name,
        {"metadata": {"labels": {"merge": "1"}}},
        namespace=ns,
        patch_options=PatchOptions(PatchType.MERGE),
        credential=admin,
    )
    assert labels(merge)["merge"] == "1" and labels(merge)["replaced"] == "yes"
    jsonp = await kube.patch(
        kind,
        name,
        [{"op": "add", "path": "/metadata/labels/json", "value": "2"}],
        namespace=ns,
        patch_options=PatchOptions(PatchType.JSON),
        credential=admin,
    )
    assert labels(jsonp)["json"] == "2"
    if not custom_resource(kind):  # strategic merge is not served for custom resources
        smp = await kube.patch(
            kind,
            name,
            {"metadata": {"labels": {"smp": "3"}}},
            namespace=ns,
            patch_options=PatchOptions(PatchType.STRATEGIC_MERGE),
            credential=admin,
        )
        assert labels(smp)["smp"] == "3" and labels(smp)["json"] == "2"
    else:
        with pytest.raises(errors.UnsupportedMediaType):
            await kube.patch(
                kind,
                name,
                {"metadata": {"labels": {"smp": "3"}}},
                namespace=ns,
                patch_options=PatchOptions(PatchType.STRATEGIC_MERGE),
                credential=admin,
            )

    # dryRun writes change nothing
    await kube.patch(
        kind,
        name,
        {"metadata": {"labels": {"dry": "x"}}},
        namespace=ns,
        patch_options=PatchOptions(PatchType.MERGE),
        write=WriteOptions(dry_run=True),
        credential=admin,
    )
    assert "dry" not in labels(await kube.get(kind, name, namespace=ns, credential=admin))

    # delete: dryRun keeps it, a wrong precondition conflicts, then it is gone
    await kube.delete(
        kind, name, namespace=ns, options=DeleteOptions(dry_run=True), credential=admin
    )
    await kube.get(kind, name, namespace=ns, credential=admin)
    with pytest.raises(errors.Conflict) as pre:
        await kube.delete(
            kind,
            name,
            namespace=ns,
            options=DeleteOptions(preconditions=Preconditions(uid="not-the-uid")),
            credential=admin,
        )
    assert "precondition" in pre.value.message.lower(), pre.value.message
    await kube.delete(
        kind,
        name,
        namespace=ns,
        options=DeleteOptions(
            grace_period_seconds=0,
            propagation_policy="Background",
            preconditions=Preconditions(uid=created["metadata"]["uid"]),
        ),
        credential=admin,
    )
    with pytest.raises(errors.NotFound) as gone:
        await kube.get(kind, name, namespace=ns, credential=admin)
    assert gone.value.status_code == 404


@pytest.mark.parametrize("kind", KINDS)
async def test_server_side_apply_conflicts_and_force(backend: Backend, kind: str) -> None:
    kube, admin, ns = backend.adapter, backend.admin, ns_for(backend, kind)
    name = backend.unique("ssa")
    body = sample(kind, name, ns)
    body["metadata"]["labels"] = {"owner": "first"}
    applied = await kube.patch(
        kind,
        name,
        body,
        namespace=ns,
        patch_options=PatchOptions(PatchType.APPLY),
        write=WriteOptions(field_manager="first"),
        credential=admin,
    )
    assert labels(applied)["owner"] == "first"
    managers = {m["manager"] for m in applied["metadata"]["managedFields"]}
    assert "first" in managers
    other = sample(kind, name, ns)
    other["metadata"]["labels"] = {"owner": "second"}
    with pytest.raises(errors.Conflict) as conflict:
        await kube.patch(
            kind,
            name,
            other,
            namespace=ns,
            patch_options=PatchOptions(PatchType.APPLY),
            write=WriteOptions(field_manager="second"),
            credential=admin,
        )
    assert any("owner" in c.field or "owner" in c.message for c in conflict.value.causes)
    forced = await kube.patch(
        kind,
        name,
        other,
        namespace=ns,
        patch_options=PatchOptions(PatchType.APPLY, force=True),
        write=WriteOptions(field_manager="second"),
        credential=admin,
    )
    assert labels(forced)["owner"] == "second"
    await kube.delete(kind, name, namespace=ns, credential=admin)


@pytest.mark.parametrize("kind", KINDS)
async def test_list_pagination_and_deletecollection(backend: Backend, kind: str) -> None:
    kube, admin, ns = backend.adapter, backend.admin, ns_for(backend, kind)
    batch = backend.unique("batch")
    names = [f"{batch}-{i}" for i in range(7)]
    for n in names:
        obj = sample(kind, n, ns)
        obj["metadata"]["labels"] = {"batch": batch}
        await kube.create(kind, obj, namespace=ns, credential=admin)
    selector = ListOptions(label_selector=f"batch={batch}", limit=3)
    page = await kube.list(kind, namespace=ns, options=selector, credential=admin)
    assert len(page["items"]) == 3 and page["metadata"]["continue"]
    everything = await kube.list_all(kind, namespace=ns, options=selector, credential=admin)
    assert sorted(i["metadata"]["name"] for i in everything["items"]) == names
    assert "continue" not in everything["metadata"]

    # dryRun deletecollection deletes nothing
    await kube.delete_collection(
        kind,
        namespace=ns,
        list_options=ListOptions(label_selector=f"batch={batch}"),
        options=DeleteOptions(dry_run=True),
        credential=admin,
    )
    assert (
        len((await kube.list_all(kind, namespace=ns, options=selector, credential=admin))["items"])
        == 7
    )
    await kube.delete_collection(
        kind,
        namespace=ns,
        list_options=ListOptions(label_selector=f"batch={batch}"),
        options=DeleteOptions(grace_period_seconds=0),
        credential=admin,
    )
    left = await kube.list_all(kind, namespace=ns, options=selector, credential=admin)
    assert left["items"] == []


@pytest.mark.parametrize("kind", ["pods", *[k for k in KINDS if custom_resource(k)][:1]])
async def test_a_large_list_decodes_in_slices_to_the_whole_decode(
    backend: Backend, kind: str
) -> None:
    # The upstream's own list bytes (built-in kinds: items last; custom resources: items
    # first, each item opening with apiVersion), larger than the slicing threshold.
    kube, admin, ns = backend.adapter, backend.admin, ns_for(backend, kind)
    batch = backend.unique("large")
    note = "n" * 8192
    for i in range(160):
        obj = sample(kind, f"{batch}-{i}", ns)
        obj["metadata"]["labels"] = {"batch": batch}
        obj["metadata"]["annotations"] = {"note": note}
        await kube.create(kind, obj, namespace=ns, credential=admin)
    response = await kube.http.get(
        RESOURCES[kind].path(ns),
        params={"labelSelector": f"batch={batch}"},
        headers=admin.headers(),
    )
    raw = response.content
    assert len(raw) > largelist.LARGE_BODY_BYTES
    whole = orjson.loads(raw)
    sliced = await kube.large_lists.decode(raw)
    assert sliced == whole
    assert orjson.dumps(sliced) == orjson.dumps(whole)  # the same key order too
    yields = sum(1 for _ in slicedjson.decoder(raw, slice_bytes=64 * 1024))
    assert yields >= len(raw) // (64 * 1024) // 2  # really cut between items
    listed = await kube.list(
        kind, namespace=ns, options=ListOptions(label_selector=f"batch={batch}"), credential=admin
    )
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == sorted(
        i["metadata"]["name"] for i in whole["items"]
    )
    await kube.delete_collection(
        kind,
        namespace=ns,
        list_options=ListOptions(label_selector=f"batch={batch}"),
        options=DeleteOptions(grace_period_seconds=0),
        credential=admin,
    )


async def test_field_selector_and_bad_selectors(backend: Backend) -> None:
    kube, admin, ns = backend.adapter, backend.admin, backend.namespace
    name = backend.unique("fs")
    await kube.create("pods", sample("pods", name, ns), namespace=ns, credential=admin)
    got = await kube.list(
        "pods",
        namespace=ns,
        options=ListOptions(field_selector=f"metadata.name={name}"),
        credential=admin,
    )
    assert [i["metadata"]["name"] for i in got["items"]] == [name]
    with pytest.raises(errors.BadRequest):
        await kube.list(
            "pods", namespace=ns, options=ListOptions(label_selector="a in (b"), credential=admin
        )
    with pytest.raises(errors.BadRequest):
        await kube.list(
            "pods",
            namespace=ns,
            options=ListOptions(field_selector="spec.nope=1"),
            credential=admin,
        )
    await kube.delete("pods", name, namespace=ns, credential=admin)


async def test_pod_status_and_ephemeral_containers(backend: Backend) -> None:
    kube, admin, ns = backend.adapter, backend.admin, backend.namespace
    name = backend.unique("sub")
    await kube.create("pods", sample("pods", name, ns), namespace=ns, credential=admin)

    status = await kube.get("pods", name, namespace=ns, subresource="status", credential=admin)
    assert status["kind"] == "Pod"
    status["status"] = {
        **(status.get("status") or {}),
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    replaced = await kube.replace(
        "pods", name, status, namespace=ns, subresource="status", credential=admin
    )
    assert replaced["status"]["phase"] == "Running"
    patched = await kube.patch(
        "pods",
        name,
        {"status": {"message": "patched"}},
        namespace=ns,
        subresource="status",
        patch_options=PatchOptions(PatchType.MERGE),
        credential=admin,
    )
    assert patched["status"]["message"] == "patched" and patched["status"]["phase"] == "Running"
    # a main-resource write does not change status
    patched_main = await kube.patch(
        "pods",
        name,
        {"status": {"phase": "Failed"}},
        namespace=ns,
        patch_options=PatchOptions(PatchType.MERGE),
        credential=admin,
    )
    assert patched_main["status"]["phase"] == "Running"

    eph = await kube.get(
        "pods", name, namespace=ns, subresource="ephemeralcontainers", credential=admin
    )
    assert not eph["spec"].get("ephemeralContainers")
    debugger = {
        "name": "debugger",
        "image": "busybox:1.36",
        "command": ["sh"],
        "stdin": True,
        "tty": True,
    }
    added = await kube.patch(
        "pods",
        name,
        {"spec": {"ephemeralContainers": [debugger]}},
        namespace=ns,
        subresource="ephemeralcontainers",
        patch_options=PatchOptions(PatchType.STRATEGIC_MERGE),
        credential=admin,
    )
    assert [c["name"] for c in added["spec"]["ephemeralContainers"]] == ["debugger"]
    current = await kube.get(
        "pods", name, namespace=ns, subresource="ephemeralcontainers", credential=admin
    )
    current["spec"]["ephemeralContainers"].append({**debugger, "name": "second"})
    both = await kube.replace(
        "pods", name, current, namespace=ns, subresource="ephemeralcontainers", credential=admin
    )
    assert [c["name"] for c in both["spec"]["ephemeralContainers"]] == ["debugger", "second"]
    # ephemeral containers cannot be removed
    both["spec"]["ephemeralContainers"] = both["spec"]["ephemeralContainers"][:1]
    with pytest.raises(errors.Invalid):
        await kube.replace(
            "pods", name, both, namespace=ns, subresource="ephemeralcontainers", credential=admin
        )
    await kube.delete("pods", name, namespace=ns, credential=admin)


async def test_pod_log_error_paths(backend: Backend) -> None:
    kube, admin, ns = backend.adapter, backend.admin, backend.namespace
    name = backend.unique("logs")
    pod = sample("pods", name, ns)
    pod["spec"]["containers"].append({"name": "sidecar", "image": "busybox:1.36"})
    await kube.create("pods", pod, namespace=ns, credential=admin)
    with pytest.raises(errors.BadRequest) as exc:
        await kube.read_log(name, namespace=ns, credential=admin)
    assert "a container name must be specified" in exc.value.message
    assert "main" in exc.value.message and "sidecar" in exc.value.message
    with pytest.raises(errors.BadRequest) as exc:
        await kube.read_log(
            name, namespace=ns, options=LogOptions(container="nope"), credential=admin
        )
    assert "nope" in exc.value.message
    # the pod has no node: the apiserver answers with an empty log
    assert (
        await kube.read_log(
            name, namespace=ns, options=LogOptions(container="main"), credential=admin
        )
        == b""
    )
    with pytest.raises(errors.InvalidParameter):
        await kube.read_log(
            name,
            namespace=ns,
            options=LogOptions(
                container="main", since_seconds=1, since_time="2026-01-01T00:00:00Z"
            ),
            credential=admin,
        )
    await kube.delete("pods", name, namespace=ns, credential=admin)


async def test_errors_per_identity_and_kind(backend: Backend) -> None:
    kube, ns = backend.adapter, backend.namespace
    name = backend.unique("rbac")
    await kube.create("pods", sample("pods", name, ns), namespace=ns, credential=backend.alice)
    assert (await kube.get("pods", name, namespace=ns, credential=backend.alice))["metadata"][
        "name"
    ] == name
    with pytest.raises(errors.Forbidden) as forbidden:
        await kube.list("pods", namespace=backend.other_namespace, credential=backend.alice)
    assert 'cannot list resource "pods"' in forbidden.value.message
    with pytest.raises(errors.Forbidden):
        await kube.get("pods", name, namespace=ns, credential=backend.nobody)
    with pytest.raises(errors.Forbidden):  # alice may read images, not write them
        await kube.create(
            "images", sample("images", backend.unique("img"), None), credential=backend.alice
        )
    with pytest.raises(errors.Unauthorized):
        await kube.list("pods", namespace=ns, credential=backend.bad_token)
    with pytest.raises(errors.NotFound):
        await kube.get("leases", backend.unique("missing"), namespace=ns, credential=backend.admin)
    invalid = sample("pods", backend.unique("bad"), ns)
    invalid["spec"]["containers"] = []
    with pytest.raises(errors.Invalid) as inv:
        await kube.create("pods", invalid, namespace=ns, credential=backend.admin)
    assert any(c.field == "spec.containers" for c in inv.value.causes)
    no_layers = sample("images", backend.unique("img"), None)
    del no_layers["dockerImageLayers"]
    with pytest.raises(errors.Invalid):
        await kube.create("images", no_layers, credential=backend.admin)
    strict = sample("leases", backend.unique("strict"), ns)
    strict["spec"]["bogusField"] = 1
    with pytest.raises(errors.BadRequest) as bad:
        await kube.create(
            "leases",
            strict,
            namespace=ns,
            write=WriteOptions(field_validation="Strict"),
            credential=backend.admin,
        )
    assert "bogusField" in bad.value.message
    await kube.delete("pods", name, namespace=ns, credential=backend.admin)


# -- watch ------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def collecting(watcher: Watcher) -> AsyncIterator[asyncio.Queue[WatchEvent]]:
    queue: asyncio.Queue[WatchEvent] = asyncio.Queue()

    async def pump() -> None:
        async with contextlib.aclosing(watcher.events()) as stream:
            async for event in stream:
                queue.put_nowait(event)

    task = asyncio.create_task(pump())
    try:
        yield queue
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def next_change(queue: asyncio.Queue[WatchEvent], timeout: float = 30) -> WatchEvent:
    while True:
        event = await asyncio.wait_for(queue.get(), timeout)
        if event.type in ("ADDED", "MODIFIED", "DELETED"):
            return event


async def test_watch_initial_state_then_changes_then_resume(backend: Backend) -> None:
    kube, admin, ns = backend.adapter, backend.admin, backend.namespace
    tag = backend.unique("w")
    first = sample("leases", f"{tag}-a", ns)
    first["metadata"]["labels"] = {"w": tag}
    await kube.create("leases", first, namespace=ns, credential=admin)
    selector = ListOptions(label_selector=f"w={tag}")
    watcher = Watcher(kube, "leases", namespace=ns, options=selector, credential=admin)
    async with collecting(watcher) as events:
        added = await next_change(events)
        assert (added.type, added.object["metadata"]["name"]) == ("ADDED", f"{tag}-a")
        assert added.object["kind"] == "Lease"
        second = sample("leases", f"{tag}-b", ns)
        second["metadata"]["labels"] = {"w": tag}
        created = await kube.create("leases", second, namespace=ns, credential=admin)
        ev = await next_change(events)
        assert (ev.type, ev.object["metadata"]["name"]) == ("ADDED", f"{tag}-b")
        assert ev.resource_version == created["metadata"]["resourceVersion"]
        resume_at = ev.resource_version
    # a new watcher resumes from a resourceVersion: only changes after it
    await kube.delete("leases", f"{tag}-a", namespace=ns, credential=admin)
    resumed = Watcher(
        kube,
        "leases",
        namespace=ns,
        options=ListOptions(label_selector=f"w={tag}", resource_version=resume_at),
        credential=admin,
    )
    async with collecting(resumed) as events:
        ev = await next_change(events)
        assert (ev.type, ev.object["metadata"]["name"]) == ("DELETED", f"{tag}-a")
    await kube.delete("leases", f"{tag}-b", namespace=ns, credential=admin)


async def test_watch_label_change_out_of_selector_is_deleted(backend: Backend) -> None:
    kube, admin, ns = backend.adapter, backend.admin, backend.namespace
    tag = backend.unique("sel")
    pod = sample("pods", tag, ns)
    pod["metadata"]["labels"] = {"sel": tag}
    await kube.create("pods", pod, namespace=ns, credential=admin)
    watcher = Watcher(
        kube,
        "pods",
        namespace=ns,
        options=ListOptions(label_selector=f"sel={tag}"),
        credential=admin,
    )
    async with collecting(watcher) as events:
        assert (await next_change(events)).type == "ADDED"
        await kube.patch(
            "pods",
            tag,
            {"metadata": {"labels": {"sel": "other"}}},
            namespace=ns,
            patch_options=PatchOptions(PatchType.MERGE),
            credential=admin,
        )
        ev = await next_change(events)
        assert (ev.type, ev.object["metadata"]["name"]) == ("DELETED", tag)
    await kube.delete("pods", tag, namespace=ns, credential=admin)


async def test_streaming_list_and_bookmarks(backend: Backend) -> None:
    kube, admin, ns = backend.adapter, backend.admin, backend.namespace
    tag = backend.unique("sl")
    for i in range(3):
        obj = sample("endpoints", f"{tag}-{i}", ns)
        obj["metadata"]["labels"] = {"sl": tag}
        await kube.create("endpoints", obj, namespace=ns, credential=admin)
    watcher = Watcher(
        kube,
        "endpoints",
        namespace=ns,
        options=ListOptions(label_selector=f"sl={tag}"),
        credential=admin,
        streaming_list=True,
        bookmarks=True,
    )
    async with collecting(watcher) as events:
        names = sorted([(await next_change(events)).object["metadata"]["name"] for _ in range(3)])
        assert names == [f"{tag}-{i}" for i in range(3)]
        assert watcher.resource_version  # taken from the initial-events-end bookmark
    # raw: the server marks the end of initial events with an annotated bookmark
    options = ListOptions(
        label_selector=f"sl={tag}",
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        resource_version="",
        allow_watch_bookmarks=True,
        timeout_seconds=30,
    )
    seen: list[str] = []
    async with kube.watch_stream(
        "endpoints", namespace=ns, options=options, credential=admin
    ) as stream:
        async for raw in stream:
            seen.append(raw["type"])
            if raw["type"] == "BOOKMARK":
                annotations = raw["object"]["metadata"].get("annotations") or {}
                assert annotations.get("k8s.io/initial-events-end") == "true"
                break
    assert seen == ["ADDED", "ADDED", "ADDED", "BOOKMARK"]
    await kube.delete_collection(
        "endpoints",
        namespace=ns,
        list_options=ListOptions(label_selector=f"sl={tag}"),
        credential=admin,
    )


async def test_a_rejected_token_does_not_disturb_other_callers(backend: Backend) -> None:
    """One caller's bad token must not break another caller's watch or requests."""
    kube, admin, ns = backend.adapter, backend.admin, backend.namespace
    tag = backend.unique("iso")
    watcher = Watcher(
        kube,
        "leases",
        namespace=ns,
        options=ListOptions(label_selector=f"iso={tag}"),
        credential=admin,
    )
    async with collecting(watcher) as events:
        first = sample("leases", f"{tag}-0", ns)
        first["metadata"]["labels"] = {"iso": tag}
        await kube.create("leases", first, namespace=ns, credential=admin)
        assert (await next_change(events)).object["metadata"]["name"] == f"{tag}-0"
        for _ in range(5):
            with pytest.raises(errors.Unauthorized):
                await kube.list("leases", namespace=ns, credential=backend.bad_token)
        second = sample("leases", f"{tag}-1", ns)
        second["metadata"]["labels"] = {"iso": tag}
        await kube.create("leases", second, namespace=ns, credential=admin)
        assert (await next_change(events)).object["metadata"]["name"] == f"{tag}-1"
        assert watcher.reconnects == 0
    await kube.delete_collection(
        "leases",
        namespace=ns,
        list_options=ListOptions(label_selector=f"iso={tag}"),
        credential=admin,
    )
