"""Every RPC of every resource service, over a real grpc.aio channel, against the demo upstream."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import orjson
import pytest
from google.protobuf import field_mask_pb2, json_format

from gateway.core.upstream.credentials import Credential
from gateway.grpc.gen.kubegateway.v1 import common_pb2, meta_pb2, pods_pb2
from gateway.grpc.messages import message_class
from kube_gateway_demo import DemoUpstream
from tests.scenarios.backend import sample
from tests.scenarios.grpc_backend import KIND
from tests.support.grpc import ADMIN, NAMESPACE, GrpcGateway, bearer, gw, unique, upstream

__all__ = ["gw", "upstream"]  # fixtures

KINDS = list(KIND)  # every resource of the registry
MODULES = {plural: (k.module, k.kind, k.plural_name) for plural, k in KIND.items()}
AUTH = bearer(ADMIN)
JSON, MERGE, SMP, APPLY = (
    common_pb2.PATCH_TYPE_JSON,
    common_pb2.PATCH_TYPE_MERGE,
    common_pb2.PATCH_TYPE_STRATEGIC_MERGE,
    common_pb2.PATCH_TYPE_APPLY,
)


def ns_of(kind: str) -> str | None:
    return NAMESPACE if KIND[kind].namespaced else None


def request(kind: str, template: str, /, **fields: Any) -> Any:
    """``request("pods", "Get{kind}Request", ...)``, dropping the namespace of a cluster-scoped
    kind."""
    return KIND[kind].request(template, **fields)


def message(kind: str, obj: dict[str, Any]) -> Any:
    """A client-built object message (json_format: an implementation independent of ours)."""
    return json_format.ParseDict(obj, message_class(MODULES[kind][1])())


def labels(obj: Any) -> dict[str, str]:
    return dict(obj.metadata.labels)


@pytest.mark.parametrize("kind", KINDS)
async def test_crud_and_every_patch_type(gw: GrpcGateway, kind: str) -> None:
    stub, ns = gw.stub(kind), ns_of(kind)
    name = unique(kind[:-1])
    body = sample(kind, name, ns)
    get = request(kind, "Get{kind}Request", namespace=ns, name=name)

    dry = await stub.Create(
        request(
            kind, "Create{kind}Request", namespace=ns, object=message(kind, body), dry_run=True
        ),
        metadata=AUTH,
    )
    assert dry.metadata.name == name
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await stub.Get(get, metadata=AUTH)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND

    created = await stub.Create(
        request(kind, "Create{kind}Request", namespace=ns, object=message(kind, body)),
        metadata=AUTH,
    )
    assert created.metadata.uid and created.metadata.resourceVersion
    with pytest.raises(grpc.aio.AioRpcError) as dup:
        await stub.Create(
            request(kind, "Create{kind}Request", namespace=ns, object=message(kind, body)),
            metadata=AUTH,
        )
    assert dup.value.code() == grpc.StatusCode.ALREADY_EXISTS

    got = await stub.Get(get, metadata=AUTH)
    assert got.metadata.uid == created.metadata.uid
    assert got == created

    # replace, guarded by resourceVersion
    changed = type(got)()
    changed.CopyFrom(got)
    changed.metadata.labels["replaced"] = "yes"
    replaced = await stub.Replace(
        request(kind, "Replace{kind}Request", namespace=ns, name=name, object=changed),
        metadata=AUTH,
    )
    assert labels(replaced)["replaced"] == "yes"
    with pytest.raises(grpc.aio.AioRpcError) as stale:
        await stub.Replace(
            request(kind, "Replace{kind}Request", namespace=ns, name=name, object=changed),
            metadata=AUTH,
        )
    assert stale.value.code() == grpc.StatusCode.ABORTED

    def patch(kind_: int, doc: Any, **extra: Any) -> Any:
        return request(
            kind,
            "Patch{kind}Request",
            namespace=ns,
            name=name,
            patch_type=kind_,
            patch=orjson.dumps(doc),
            **extra,
        )

    merged = await stub.Patch(patch(MERGE, {"metadata": {"labels": {"merge": "1"}}}), metadata=AUTH)
    assert labels(merged)["merge"] == "1" and labels(merged)["replaced"] == "yes"
    jsoned = await stub.Patch(
        patch(JSON, [{"op": "add", "path": "/metadata/labels/json", "value": "2"}]), metadata=AUTH
    )
    assert labels(jsoned)["json"] == "2"
    try:
        smp = await stub.Patch(patch(SMP, {"metadata": {"labels": {"smp": "3"}}}), metadata=AUTH)
        assert labels(smp)["smp"] == "3" and labels(smp)["json"] == "2"
    except grpc.aio.AioRpcError as unsupported:
        # strategic merge is not served for custom resources (a CRD-backed Image): 415
        assert kind == "images"
        assert unsupported.code() == grpc.StatusCode.INVALID_ARGUMENT
    dry_patch = await stub.Patch(
        patch(MERGE, {"metadata": {"labels": {"dry": "x"}}}, dry_run=True), metadata=AUTH
    )
    assert labels(dry_patch)["dry"] == "x"
    assert "dry" not in labels(await stub.Get(get, metadata=AUTH))

    # server-side apply: fieldManager, a conflict, then force
    applied = sample(kind, name, ns)
    applied["metadata"]["labels"] = {"owner": "first"}
    first = await stub.Patch(patch(APPLY, applied, field_manager="first"), metadata=AUTH)
    assert labels(first)["owner"] == "first"
    assert "first" in {m.manager for m in first.metadata.managedFields}
    applied["metadata"]["labels"] = {"owner": "second"}
    with pytest.raises(grpc.aio.AioRpcError) as conflict:
        await stub.Patch(patch(APPLY, applied, field_manager="second"), metadata=AUTH)
    assert conflict.value.code() == grpc.StatusCode.ABORTED
    forced = await stub.Patch(
        patch(APPLY, applied, field_manager="second", force=True), metadata=AUTH
    )
    assert labels(forced)["owner"] == "second"

    # delete: dry run keeps it, a wrong precondition conflicts, then it is gone
    delete = request(kind, "Delete{kind}Request", namespace=ns, name=name)
    await stub.Delete(
        request(
            kind,
            "Delete{kind}Request",
            namespace=ns,
            name=name,
            options=meta_pb2.DeleteOptions(dryRun=["All"]),
        ),
        metadata=AUTH,
    )
    await stub.Get(get, metadata=AUTH)
    with pytest.raises(grpc.aio.AioRpcError) as precondition:
        await stub.Delete(
            request(
                kind,
                "Delete{kind}Request",
                namespace=ns,
                name=name,
                options=meta_pb2.DeleteOptions(preconditions=meta_pb2.Preconditions(uid="nope")),
            ),
            metadata=AUTH,
        )
    assert precondition.value.code() == grpc.StatusCode.ABORTED
    delete.options.gracePeriodSeconds = 0
    delete.options.propagationPolicy = "Background"
    deleted = await stub.Delete(delete, metadata=AUTH)
    which = deleted.WhichOneof("result")
    assert which in ("object", "status")
    if which == "object":
        assert deleted.object.metadata.uid == created.metadata.uid
    else:
        assert deleted.status.status == "Success"
    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await stub.Get(get, metadata=AUTH)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("kind", KINDS)
async def test_create_and_replace_from_raw_json(gw: GrpcGateway, kind: str) -> None:
    # raw_json: objects with fields newer than the contract go upstream untouched
    stub, ns = gw.stub(kind), ns_of(kind)
    name = unique(f"raw-{kind[:-1]}")
    body = sample(kind, name, ns)
    body["metadata"]["annotations"] = {"future.example/field": "kept upstream"}
    created = await stub.Create(
        request(kind, "Create{kind}Request", namespace=ns, raw_json=orjson.dumps(body)),
        metadata=AUTH,
    )
    assert created.metadata.annotations["future.example/field"] == "kept upstream"
    # what the upstream holds, as JSON (read directly, not through the gateway)
    current = await gw.adapter.get(kind, name, namespace=ns, credential=Credential(ADMIN))
    current["metadata"]["labels"] = {"raw": "replaced"}
    replaced = await stub.Replace(
        request(
            kind, "Replace{kind}Request", namespace=ns, name=name, raw_json=orjson.dumps(current)
        ),
        metadata=AUTH,
    )
    assert labels(replaced) == {"raw": "replaced"}


@pytest.mark.parametrize("kind", KINDS)
async def test_list_select_page_and_delete_collection(gw: GrpcGateway, kind: str) -> None:
    stub, ns = gw.stub(kind), ns_of(kind)
    batch = unique("batch")
    names = [unique(f"{kind[:-1]}-l") for _ in range(3)]
    for n in names:
        body = sample(kind, n, ns)
        body["metadata"]["labels"] = {"batch": batch}
        await stub.Create(
            request(kind, "Create{kind}Request", namespace=ns, object=message(kind, body)),
            metadata=AUTH,
        )
    select = f"batch={batch}"
    listed = await stub.List(
        request(kind, "List{plural}Request", namespace=ns, label_selector=select), metadata=AUTH
    )
    assert sorted(i.metadata.name for i in listed.items) == sorted(names)
    assert listed.metadata.resourceVersion
    if ns is not None:  # all namespaces
        everywhere = await stub.List(
            request(kind, "List{plural}Request", label_selector=select), metadata=AUTH
        )
        assert len(everywhere.items) == 3
    by_name = await stub.List(
        request(
            kind,
            "List{plural}Request",
            namespace=ns,
            field_selector=f"metadata.name={names[0]}",
        ),
        metadata=AUTH,
    )
    assert [i.metadata.name for i in by_name.items] == [names[0]]

    # pages: limit and continue
    seen: list[str] = []
    token = ""
    while True:
        page_request = request(
            kind, "List{plural}Request", namespace=ns, label_selector=select, limit=2
        )
        setattr(page_request, "continue", token)
        page = await stub.List(page_request, metadata=AUTH)
        assert len(page.items) <= 2
        seen += [i.metadata.name for i in page.items]
        token = getattr(page.metadata, "continue")
        if not token:
            break
    assert sorted(seen) == sorted(names)

    masked = await stub.List(
        request(
            kind,
            "List{plural}Request",
            namespace=ns,
            label_selector=select,
            read_mask=field_mask_pb2.FieldMask(paths=["metadata.name", "metadata.labels"]),
        ),
        metadata=AUTH,
    )
    for item in masked.items:
        assert item.metadata.name in names and labels(item) == {"batch": batch}
        assert not item.metadata.uid and not item.metadata.managedFields
        assert [f.name for f, _ in item.ListFields()] == ["metadata"]

    dry = await stub.DeleteCollection(
        request(
            kind,
            "DeleteCollection{plural}Request",
            namespace=ns,
            label_selector=select,
            options=meta_pb2.DeleteOptions(dryRun=["All"]),
        ),
        metadata=AUTH,
    )
    assert dry.WhichOneof("result") in ("list", "status")
    assert (
        len(
            (
                await stub.List(
                    request(kind, "List{plural}Request", namespace=ns, label_selector=select),
                    metadata=AUTH,
                )
            ).items
        )
        == 3
    )
    removed = await stub.DeleteCollection(
        request(
            kind,
            "DeleteCollection{plural}Request",
            namespace=ns,
            label_selector=select,
            options=meta_pb2.DeleteOptions(gracePeriodSeconds=0),
        ),
        metadata=AUTH,
    )
    if removed.WhichOneof("result") == "list":
        assert sorted(i.metadata.name for i in removed.list.items) == sorted(names)
    after = await stub.List(
        request(kind, "List{plural}Request", namespace=ns, label_selector=select), metadata=AUTH
    )
    assert list(after.items) == []


async def test_get_and_list_read_masks(gw: GrpcGateway) -> None:
    pods = gw.stub("pods")
    mask = field_mask_pb2.FieldMask(
        paths=["metadata.name", "status.phase", "spec.containers.image"]
    )
    listed = await pods.List(pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=AUTH)
    name = listed.items[0].metadata.name
    got = await pods.Get(
        pods_pb2.GetPodRequest(namespace=NAMESPACE, name=name, read_mask=mask), metadata=AUTH
    )
    full = listed.items[0]
    assert got.metadata.name == name and not got.metadata.uid
    assert got.status.phase == full.status.phase and not got.status.conditions
    assert [c.image for c in got.spec.containers] == [c.image for c in full.spec.containers]
    assert [c.name for c in got.spec.containers] == [""] * len(full.spec.containers)
    assert not got.HasField("apiVersion") and not got.HasField("kind")


async def _scheduled_pod(gw: GrpcGateway, name: str, *containers: str) -> Any:
    body = sample("pods", name, NAMESPACE)
    body["spec"]["containers"] = [{"name": c, "image": "busybox:1.36"} for c in containers]
    body["spec"]["nodeName"] = "node-a"
    return await gw.stub("pods").Create(
        pods_pb2.CreatePodRequest(namespace=NAMESPACE, object=message("pods", body)),
        metadata=AUTH,
    )


async def test_pod_status_subresource(gw: GrpcGateway) -> None:
    pods = gw.stub("pods")
    name = unique("st")
    await _scheduled_pod(gw, name, "c")
    got = await pods.GetStatus(
        pods_pb2.GetPodRequest(namespace=NAMESPACE, name=name), metadata=AUTH
    )
    assert got.metadata.name == name
    got.status.conditions.add(type="Ready", status="False", reason="Testing")
    replaced = await pods.ReplaceStatus(
        pods_pb2.ReplacePodRequest(namespace=NAMESPACE, name=name, object=got), metadata=AUTH
    )
    assert any(c.reason == "Testing" for c in replaced.status.conditions)
    patched = await pods.PatchStatus(
        pods_pb2.PatchPodRequest(
            namespace=NAMESPACE,
            name=name,
            patch_type=MERGE,
            patch=orjson.dumps({"status": {"message": "patched through gRPC"}}),
        ),
        metadata=AUTH,
    )
    assert patched.status.message == "patched through gRPC"


async def test_pod_ephemeral_containers_subresource(gw: GrpcGateway) -> None:
    pods = gw.stub("pods")
    name = unique("eph")
    await _scheduled_pod(gw, name, "c")
    got = await pods.GetEphemeralContainers(
        pods_pb2.GetPodRequest(namespace=NAMESPACE, name=name), metadata=AUTH
    )
    assert list(got.spec.ephemeralContainers) == []
    got.spec.ephemeralContainers.add(name="debugger", image="busybox:1.36", targetContainerName="c")
    replaced = await pods.ReplaceEphemeralContainers(
        pods_pb2.ReplacePodRequest(namespace=NAMESPACE, name=name, object=got), metadata=AUTH
    )
    assert [e.name for e in replaced.spec.ephemeralContainers] == ["debugger"]
    patched = await pods.PatchEphemeralContainers(
        pods_pb2.PatchPodRequest(
            namespace=NAMESPACE,
            name=name,
            patch_type=SMP,
            patch=orjson.dumps(
                {"spec": {"ephemeralContainers": [{"name": "second", "image": "busybox:1.36"}]}}
            ),
        ),
        metadata=AUTH,
    )
    assert [e.name for e in patched.spec.ephemeralContainers] == ["debugger", "second"]


async def test_pod_log_read_and_options(gw: GrpcGateway, upstream: DemoUpstream) -> None:
    pods = gw.stub("pods")
    name = unique("log")
    await _scheduled_pod(gw, name, "c")
    await upstream.store.set_log(NAMESPACE, name, "c", ["one", "two", "three", "four"])

    async def read(**options: Any) -> bytes:
        call = pods.GetLog(
            pods_pb2.GetPodLogRequest(namespace=NAMESPACE, name=name, **options), metadata=AUTH
        )
        return b"".join([chunk.data async for chunk in call])

    assert await read() == b"one\ntwo\nthree\nfour\n"
    assert await read(tail_lines=2) == b"three\nfour\n"
    assert await read(tail_lines=0) == b""
    assert await read(limit_bytes=6) == b"one\ntw"
    assert (await read(timestamps=True, tail_lines=1)).endswith(b" four\n")
    assert await read(container="c", insecure_skip_tls_verify_backend=True) == (
        b"one\ntwo\nthree\nfour\n"
    )
    # not UTF-8: bytes travel untouched
    await upstream.store.append_log(NAMESPACE, name, "c", b"\xff\xfe raw")
    assert (await read(tail_lines=1)) == b"\xff\xfe raw\n"


async def test_pod_log_errors_name_the_choices(gw: GrpcGateway) -> None:
    pods = gw.stub("pods")
    name = unique("two")
    await _scheduled_pod(gw, name, "app", "sidecar")
    call = pods.GetLog(pods_pb2.GetPodLogRequest(namespace=NAMESPACE, name=name), metadata=AUTH)
    with pytest.raises(grpc.aio.AioRpcError) as choose:
        async for _ in call:
            pass
    assert choose.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "choose one of: [app sidecar]" in choose.value.details()
    call = pods.GetLog(
        pods_pb2.GetPodLogRequest(
            namespace=NAMESPACE, name=name, since_seconds=5, since_time="2024-01-01T00:00:00Z"
        ),
        metadata=AUTH,
    )
    with pytest.raises(grpc.aio.AioRpcError) as both:
        async for _ in call:
            pass
    assert both.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_pod_log_follow_streams_until_the_container_ends(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    pods = gw.stub("pods")
    name = unique("fol")
    await _scheduled_pod(gw, name, "c")
    await upstream.store.set_log(NAMESPACE, name, "c", ["first"])
    call = pods.GetLog(
        pods_pb2.GetPodLogRequest(namespace=NAMESPACE, name=name, follow=True),
        metadata=AUTH,
        timeout=10,
    )
    chunks = call.__aiter__()
    assert (await anext(chunks)).data == b"first\n"
    await upstream.store.append_log(NAMESPACE, name, "c", "second")
    assert (await anext(chunks)).data == b"second\n"
    await upstream.store.terminate_container(NAMESPACE, name, "c")
    assert [c.data async for c in chunks] == []
    assert await call.code() == grpc.StatusCode.OK


async def test_pod_log_follow_resumes_after_upstream_breaks_without_loss_or_duplicates(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    pods = gw.stub("pods")
    name = unique("res")
    await _scheduled_pod(gw, name, "c")
    await upstream.store.set_log(NAMESPACE, name, "c", ["a1", "a2"])
    obj = await upstream.store.get("pods", name, namespace=NAMESPACE)
    log = upstream.store.logs.get(str(obj["metadata"]["uid"]), "c")
    assert log is not None
    a1 = log.lines[0].render(True)
    # the first upstream follow is cut inside its second line; the resumed one carries on
    upstream.faults.drop_connections(1, verb="get", resource="pods/log", after_bytes=len(a1) + 5)
    upstream.faults.drop_connections(1, verb="get", resource="pods/log", after_bytes=10**9)
    call = pods.GetLog(
        pods_pb2.GetPodLogRequest(namespace=NAMESPACE, name=name, follow=True),
        metadata=AUTH,
        timeout=20,
    )
    chunks = call.__aiter__()
    assert [(await anext(chunks)).data for _ in range(2)] == [b"a1\n", b"a2\n"]
    await upstream.store.append_log(NAMESPACE, name, "c", "b1", "b2")
    assert [(await anext(chunks)).data for _ in range(2)] == [b"b1\n", b"b2\n"]
    await upstream.store.terminate_container(NAMESPACE, name, "c")
    assert [c.data async for c in chunks] == []
    assert await call.code() == grpc.StatusCode.OK
    assert upstream.faults.dropped_requests == 2  # the second rule proves a resumed request


class _Followers(set[Any]):
    """The demo's follower set of one container log, announcing when one leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.joined = asyncio.Event()
        self.left = asyncio.Event()

    def add(self, item: Any) -> None:
        super().add(item)
        self.joined.set()

    def discard(self, item: Any) -> None:
        super().discard(item)
        self.left.set()


async def test_a_cancelled_log_follow_closes_its_upstream_stream(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    pods = gw.stub("pods")
    name = unique("fc")
    created = await _scheduled_pod(gw, name, "c")
    await upstream.store.set_log(NAMESPACE, name, "c", ["hello"])
    followers = _Followers()
    upstream.store.logs.container(created.metadata.uid, "c").followers = followers
    call = pods.GetLog(
        pods_pb2.GetPodLogRequest(namespace=NAMESPACE, name=name, follow=True), metadata=AUTH
    )
    async with asyncio.timeout(10):
        assert (await anext(call.__aiter__())).data == b"hello\n"
        await followers.joined.wait()  # the upstream follow is live at the demo
        call.cancel()
        await followers.left.wait()  # ...and gone as soon as the caller went away
    assert len(followers) == 0


@pytest.mark.parametrize("kind", KINDS)
async def test_watch_every_kind(gw: GrpcGateway, kind: str) -> None:
    stub, ns = gw.stub(kind), ns_of(kind)
    label = unique("wk")
    call = stub.Watch(
        request(
            kind,
            "Watch{plural}Request",
            namespace=ns,
            label_selector=f"wk={label}",
            send_initial_events=True,
            resource_version_match="NotOlderThan",
        ),
        metadata=AUTH,
    )
    events = call.__aiter__()
    async with asyncio.timeout(10):
        marker = await anext(events)  # nothing matches yet: the end-of-initial-events marker
        assert marker.type == common_pb2.WatchEvent.BOOKMARK
        name = unique(f"{kind[:-1]}-w")
        body = sample(kind, name, ns)
        body["metadata"]["labels"] = {"wk": label}
        await stub.Create(
            request(kind, "Create{kind}Request", namespace=ns, object=message(kind, body)),
            metadata=AUTH,
        )
        added = await anext(events)
    member = {"pods": "pod", "events": "event", "endpoints": "endpoints", "leases": "lease"}
    assert added.WhichOneof("object") == member.get(kind, "image")
    assert added.type == common_pb2.WatchEvent.ADDED
    assert getattr(added, added.WhichOneof("object")).metadata.name == name
    call.cancel()
