"""gRPC client scenarios that must hold against any upstream: the demo and a real
kube-apiserver.

Each test takes the ``grpc_backend`` fixture (a
:class:`~tests.scenarios.grpc_backend.GrpcBackend`: the gateway's gRPC server on a loopback
port in front of that upstream, and a real ``grpc.aio`` channel to it); the caller's token
travels in ``authorization`` metadata.  ``tests/scenarios/test_grpc_scenarios.py`` (demo) and
``tests/e2e/test_grpc_e2e.py`` (real apiserver) import this module, so one scenario runs in
both places.  Every object a scenario creates goes through the gateway, never around it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import grpc
import orjson
import pytest
from google.protobuf import field_mask_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from gateway.grpc.gen.kubegateway.v1 import common_pb2, meta_pb2, pods_pb2
from gateway.grpc.status import DOMAIN
from tests.scenarios.backend import custom_resource, sample
from tests.scenarios.grpc_backend import KIND, KINDS, GrpcBackend, Kind

Event = common_pb2.WatchEvent
JSON, MERGE, SMP, APPLY = (
    common_pb2.PATCH_TYPE_JSON,
    common_pb2.PATCH_TYPE_MERGE,
    common_pb2.PATCH_TYPE_STRATEGIC_MERGE,
    common_pb2.PATCH_TYPE_APPLY,
)
STEP = 30.0  # seconds any one expected answer or event may take (bounded waits, never sleeps)


# -- helpers ------------------------------------------------------------------------------------


def labels(obj: Any) -> dict[str, str]:
    return dict(obj.metadata.labels)


def details(error: grpc.aio.AioRpcError) -> dict[str, Any]:
    """The rich details of a failed call by type name; ``ErrorInfo`` is always there."""
    status = rpc_status.from_call(error)
    assert status is not None, f"no google.rpc.Status in {error!r}"
    assert status.code == error.code().value[0] and status.message == error.details()
    out: dict[str, Any] = {}
    for detail in status.details:
        for cls in (
            error_details_pb2.ErrorInfo,
            error_details_pb2.BadRequest,
            error_details_pb2.RetryInfo,
            meta_pb2.Status,
        ):
            if detail.Is(cls.DESCRIPTOR):
                message = cls()
                detail.Unpack(message)
                out[cls.DESCRIPTOR.name] = message
    assert out["ErrorInfo"].domain == DOMAIN
    return out


async def fails(
    gw: GrpcBackend, call: Any, code: grpc.StatusCode, reason: str, http_status: int
) -> grpc.aio.AioRpcError:
    """Await a unary call (or read a streaming one) that must fail with ``code``; check the
    ErrorInfo reason, the HTTP status, the embedded Kubernetes Status, and that no token
    leaked into anything the caller sees."""
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        async with asyncio.timeout(STEP):
            if hasattr(call, "__aiter__"):
                async for _ in call:
                    pass
            else:
                await call
    error = failed.value
    assert error.code() == code, (error.code(), error.details())
    found = details(error)
    info = found["ErrorInfo"]
    assert (info.reason, info.metadata["httpStatus"]) == (reason, str(http_status)), info
    status = found["Status"]
    assert (status.code, status.reason, status.status) == (http_status, reason, "Failure")
    seen = f"{error.details()} {error.debug_error_string()} {found}"
    for secret in gw.tokens.values():
        assert secret not in seen
    return error


def violations(error: grpc.aio.AioRpcError) -> dict[str, Any]:
    """The BadRequest field violations of a failed call, by field."""
    return {v.field: v for v in details(error)["BadRequest"].field_violations}


async def names_of(gw: GrpcBackend, k: Kind, selector: str) -> list[str]:
    listed = await gw.stub(k.plural).List(
        k.request("List{plural}Request", namespace=gw.namespace, label_selector=selector),
        metadata=gw.auth(),
    )
    return sorted(i.metadata.name for i in listed.items)


async def create(gw: GrpcBackend, k: Kind, body: Mapping[str, Any], **fields: Any) -> Any:
    """Create from ``raw_json`` as admin."""
    return await gw.stub(k.plural).Create(
        k.request(
            "Create{kind}Request",
            namespace=gw.ns(k.plural),
            raw_json=orjson.dumps(body),
            **fields,
        ),
        metadata=gw.auth(),
    )


async def delete(gw: GrpcBackend, k: Kind, name: str) -> None:
    await gw.stub(k.plural).Delete(
        k.request(
            "Delete{kind}Request",
            namespace=gw.ns(k.plural),
            name=name,
            options=meta_pb2.DeleteOptions(gracePeriodSeconds=0),
        ),
        metadata=gw.auth(),
    )


class Stream:
    """A Watch call read by a pump task into a queue, so each read can be bounded without
    cancelling the call; :meth:`close` cancels the call and the pump."""

    def __init__(self, call: Any, member: str) -> None:
        self.call = call
        self.member = member
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._pump = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for event in self.call:
                self._queue.put_nowait(event)
            self._queue.put_nowait(StopAsyncIteration())
        except grpc.aio.AioRpcError as error:
            self._queue.put_nowait(error)

    async def next(self, timeout: float = STEP) -> Any:
        item = await asyncio.wait_for(self._queue.get(), timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    async def change(self) -> tuple[str, str, Any]:
        """The next ADDED / MODIFIED / DELETED as (type, name, event); bookmarks skipped."""
        while True:
            event = await self.next()
            if event.type in (Event.ADDED, Event.MODIFIED, Event.DELETED):
                obj = getattr(event, self.member)
                return Event.Type.Name(event.type), obj.metadata.name, event

    async def changes(self, count: int) -> list[tuple[str, str]]:
        return [(t, n) for t, n, _ in [await self.change() for _ in range(count)]]

    async def close(self) -> None:
        self.call.cancel()
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump


def watch(gw: GrpcBackend, k: Kind, identity: str = "admin", **fields: Any) -> Stream:
    call = gw.stub(k.plural).Watch(
        k.request("Watch{plural}Request", namespace=gw.namespace, **fields),
        metadata=gw.auth(identity),
    )
    return Stream(call, k.member)


# -- every RPC of every service -----------------------------------------------------------------


@pytest.mark.parametrize("plural", KINDS)
async def test_crud_every_patch_type_and_delete(grpc_backend: GrpcBackend, plural: str) -> None:
    gw, k = grpc_backend, KIND[plural]
    stub, ns, auth = gw.stub(plural), gw.ns(plural), gw.auth()
    name = gw.unique(plural[:-1])
    body = sample(plural, name, ns)
    get = k.request("Get{kind}Request", namespace=ns, name=name)

    dry = await stub.Create(
        k.request("Create{kind}Request", namespace=ns, object=k.message(body), dry_run=True),
        metadata=auth,
    )
    assert dry.metadata.name == name and dry.metadata.uid
    await fails(gw, stub.Get(get, metadata=auth), grpc.StatusCode.NOT_FOUND, "NotFound", 404)

    created = await stub.Create(
        k.request("Create{kind}Request", namespace=ns, object=k.message(body)), metadata=auth
    )
    assert created.metadata.uid and created.metadata.resourceVersion
    assert (created.kind, created.metadata.namespace) == (k.kind, ns or "")
    dup = await fails(
        gw,
        stub.Create(
            k.request("Create{kind}Request", namespace=ns, object=k.message(body)), metadata=auth
        ),
        grpc.StatusCode.ALREADY_EXISTS,
        "AlreadyExists",
        409,
    )
    assert name in dup.details()

    got = await stub.Get(get, metadata=auth)
    assert got == created

    listed = await stub.List(k.request("List{plural}Request", namespace=ns), metadata=auth)
    assert name in {i.metadata.name for i in listed.items}
    assert listed.metadata.resourceVersion
    if ns is not None:  # across all namespaces
        everywhere = await stub.List(k.request("List{plural}Request"), metadata=auth)
        assert (ns, name) in {(i.metadata.namespace, i.metadata.name) for i in everywhere.items}

    # typed replace (the upstream's object through the contract and back), guarded by RV
    changed = type(got)()
    changed.CopyFrom(got)
    changed.metadata.labels["replaced"] = "yes"
    replaced = await stub.Replace(
        k.request("Replace{kind}Request", namespace=ns, name=name, object=changed), metadata=auth
    )
    assert labels(replaced) == {"replaced": "yes"}
    assert replaced.metadata.resourceVersion != got.metadata.resourceVersion
    stale = await fails(
        gw,
        stub.Replace(
            k.request("Replace{kind}Request", namespace=ns, name=name, object=changed),
            metadata=auth,
        ),
        grpc.StatusCode.ABORTED,
        "Conflict",
        409,
    )
    assert "the object has been modified" in stale.details()
    dry_replace = type(replaced)()
    dry_replace.CopyFrom(replaced)
    dry_replace.metadata.labels["dry"] = "replace"
    assert labels(
        await stub.Replace(
            k.request(
                "Replace{kind}Request", namespace=ns, name=name, object=dry_replace, dry_run=True
            ),
            metadata=auth,
        )
    ) == {"replaced": "yes", "dry": "replace"}

    def patch(kind_: int, doc: Any, **extra: Any) -> Any:
        return k.request(
            "Patch{kind}Request",
            namespace=ns,
            name=name,
            patch_type=kind_,
            patch=orjson.dumps(doc),
            **extra,
        )

    merged = await stub.Patch(patch(MERGE, {"metadata": {"labels": {"merge": "1"}}}), metadata=auth)
    assert labels(merged) == {"replaced": "yes", "merge": "1"}
    jsoned = await stub.Patch(
        patch(JSON, [{"op": "add", "path": "/metadata/labels/json", "value": "2"}]), metadata=auth
    )
    assert labels(jsoned)["json"] == "2"
    smp = stub.Patch(patch(SMP, {"metadata": {"labels": {"smp": "3"}}}), metadata=auth)
    if custom_resource(plural):  # strategic merge is not served for a custom resource: 415
        unsupported = await fails(
            gw, smp, grpc.StatusCode.INVALID_ARGUMENT, "UnsupportedMediaType", 415
        )
        assert "application/merge-patch+json" in unsupported.details()
    else:
        assert labels(await smp)["smp"] == "3"
    dry_patch = await stub.Patch(
        patch(MERGE, {"metadata": {"labels": {"dry": "x"}}}, dry_run=True), metadata=auth
    )
    assert labels(dry_patch)["dry"] == "x"
    assert "dry" not in labels(await stub.Get(get, metadata=auth))

    # delete: dry run keeps it, a wrong precondition conflicts, then it is gone
    await stub.Delete(
        k.request(
            "Delete{kind}Request",
            namespace=ns,
            name=name,
            options=meta_pb2.DeleteOptions(dryRun=["All"]),
        ),
        metadata=auth,
    )
    assert (await stub.Get(get, metadata=auth)).metadata.uid == created.metadata.uid
    precondition = await fails(
        gw,
        stub.Delete(
            k.request(
                "Delete{kind}Request",
                namespace=ns,
                name=name,
                options=meta_pb2.DeleteOptions(preconditions=meta_pb2.Preconditions(uid="nope")),
            ),
            metadata=auth,
        ),
        grpc.StatusCode.ABORTED,
        "Conflict",
        409,
    )
    assert "the UID in the precondition (nope)" in precondition.details()
    deleted = await stub.Delete(
        k.request(
            "Delete{kind}Request",
            namespace=ns,
            name=name,
            options=meta_pb2.DeleteOptions(
                gracePeriodSeconds=0,
                propagationPolicy="Background",
                preconditions=meta_pb2.Preconditions(uid=created.metadata.uid),
            ),
        ),
        metadata=auth,
    )
    if deleted.WhichOneof("result") == "object":
        assert deleted.object.metadata.uid == created.metadata.uid
    else:
        assert deleted.status.status == "Success"
    await fails(gw, stub.Get(get, metadata=auth), grpc.StatusCode.NOT_FOUND, "NotFound", 404)


@pytest.mark.parametrize("plural", KINDS)
async def test_apply_conflict_is_aborted_and_force_wins(
    grpc_backend: GrpcBackend, plural: str
) -> None:
    gw, k = grpc_backend, KIND[plural]
    stub, ns, auth = gw.stub(plural), gw.ns(plural), gw.auth()
    name = gw.unique("ssa")

    def apply(owner: str, manager: str, **extra: Any) -> Any:
        body = sample(plural, name, ns)
        body["metadata"]["labels"] = {"owner": owner}
        return k.request(
            "Patch{kind}Request",
            namespace=ns,
            name=name,
            patch_type=APPLY,
            patch=orjson.dumps(body),
            field_manager=manager,
            **extra,
        )

    first = await stub.Patch(apply("first", "first"), metadata=auth)  # apply creates
    assert labels(first) == {"owner": "first"}
    assert "first" in {m.manager for m in first.metadata.managedFields}
    assert {m.operation for m in first.metadata.managedFields} == {"Apply"}
    conflict = await fails(
        gw,
        stub.Patch(apply("second", "second"), metadata=auth),
        grpc.StatusCode.ABORTED,
        "Conflict",
        409,
    )
    found = violations(conflict)
    assert found, "a field manager conflict names the fields"
    assert any("owner" in f for f in found)
    assert {v.reason for v in found.values()} == {"FieldManagerConflict"}
    dry = await stub.Patch(apply("second", "second", force=True, dry_run=True), metadata=auth)
    assert labels(dry) == {"owner": "second"}
    got = await stub.Get(k.request("Get{kind}Request", namespace=ns, name=name), metadata=auth)
    assert labels(got) == {"owner": "first"}
    forced = await stub.Patch(apply("second", "second", force=True), metadata=auth)
    assert labels(forced) == {"owner": "second"}
    assert {"first", "second"} <= {m.manager for m in forced.metadata.managedFields}
    refused = await fails(
        gw,
        stub.Patch(apply("third", ""), metadata=auth),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Invalid",
        422,
    )
    assert "fieldManager" in violations(refused)
    await delete(gw, k, name)


@pytest.mark.parametrize("plural", KINDS)
async def test_raw_json_pages_read_masks_and_delete_collection(
    grpc_backend: GrpcBackend, plural: str
) -> None:
    gw, k = grpc_backend, KIND[plural]
    stub, ns, auth = gw.stub(plural), gw.ns(plural), gw.auth()
    batch = gw.unique("batch")
    names = [f"{batch}-{i}" for i in range(5)]
    for n in names:
        body = sample(plural, n, ns)
        body["metadata"]["labels"] = {"batch": batch}
        body["metadata"]["annotations"] = {"example.com/raw": "kept"}
        created = await create(gw, k, body)
        assert created.metadata.annotations["example.com/raw"] == "kept"
    select = f"batch={batch}"

    # raw_json replace of what the upstream holds (read directly, as JSON)
    current = await gw.adapter.get(plural, names[0], namespace=ns, credential=gw.credential())
    current["metadata"]["labels"]["raw"] = "replaced"
    replaced = await stub.Replace(
        k.request(
            "Replace{kind}Request", namespace=ns, name=names[0], raw_json=orjson.dumps(current)
        ),
        metadata=auth,
    )
    assert labels(replaced) == {"batch": batch, "raw": "replaced"}

    # pages of 2 with continue
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page_request = k.request(
            "List{plural}Request", namespace=ns, label_selector=select, limit=2
        )
        setattr(page_request, "continue", token)
        page = await stub.List(page_request, metadata=auth)
        pages += 1
        assert len(page.items) <= 2
        seen += [i.metadata.name for i in page.items]
        token = getattr(page.metadata, "continue")
        if not token:
            break
    assert sorted(seen) == names and pages == 3

    by_name = await stub.List(
        k.request("List{plural}Request", namespace=ns, field_selector=f"metadata.name={names[1]}"),
        metadata=auth,
    )
    assert [i.metadata.name for i in by_name.items] == [names[1]]

    mask = field_mask_pb2.FieldMask(paths=["metadata.name", "metadata.labels"])
    masked = await stub.List(
        k.request("List{plural}Request", namespace=ns, label_selector=select, read_mask=mask),
        metadata=auth,
    )
    assert sorted(i.metadata.name for i in masked.items) == names
    assert masked.metadata.resourceVersion  # list metadata is not masked
    for item in masked.items:
        assert [f.name for f, _ in item.ListFields()] == ["metadata"]
        assert not item.metadata.uid and not item.metadata.annotations
        assert labels(item)["batch"] == batch
    one = await stub.Get(
        k.request(
            "Get{kind}Request",
            namespace=ns,
            name=names[2],
            read_mask=field_mask_pb2.FieldMask(paths=["metadata.uid", "kind"]),
        ),
        metadata=auth,
    )
    assert one.kind == k.kind and one.metadata.uid and not one.metadata.name

    dry = await stub.DeleteCollection(
        k.request(
            "DeleteCollection{plural}Request",
            namespace=ns,
            label_selector=select,
            options=meta_pb2.DeleteOptions(dryRun=["All"]),
        ),
        metadata=auth,
    )
    assert dry.WhichOneof("result") in ("list", "status")
    assert await names_of(gw, k, select) == names
    removed = await stub.DeleteCollection(
        k.request(
            "DeleteCollection{plural}Request",
            namespace=ns,
            label_selector=select,
            options=meta_pb2.DeleteOptions(gracePeriodSeconds=0),
        ),
        metadata=auth,
    )
    if removed.WhichOneof("result") == "list":
        assert sorted(i.metadata.name for i in removed.list.items) == names
    else:
        assert removed.status.status == "Success"
    assert await names_of(gw, k, select) == []


async def test_a_rich_typed_pod_round_trips_through_the_contract(grpc_backend: GrpcBackend) -> None:
    """Int-or-string ports, quantities, probes, env, volumes and tolerations survive a typed
    create, get and replace: a lossy conversion would change the immutable pod spec, which
    the apiserver refuses."""
    gw, k = grpc_backend, KIND["pods"]
    pods, auth, ns = gw.stub("pods"), gw.auth(), gw.namespace
    name = gw.unique("rich")
    body = sample("pods", name, ns)
    body["spec"] = {
        "containers": [
            {
                "name": "main",
                "image": "nginx:1.27",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}},
                # int-or-string is a string in the contract; digits go upstream as a number
                "livenessProbe": {"tcpSocket": {"port": "8080"}, "periodSeconds": 7},
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"cpu": "1", "memory": "128Mi"},
                },
                "env": [
                    {"name": "PLAIN", "value": "x"},
                    {
                        "name": "FROM_FIELD",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                    },
                ],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
            }
        ],
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}],
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 5,
    }
    created = await pods.Create(
        pods_pb2.CreatePodRequest(namespace=ns, object=k.message(body)), metadata=auth
    )
    main = created.spec.containers[0]
    assert main.readinessProbe.httpGet.port == "http"
    assert main.livenessProbe.tcpSocket.port == "8080"
    assert main.resources.requests["cpu"] == "100m"
    assert created.spec.volumes[0].emptyDir.sizeLimit == "1Gi"
    # what the gateway sends upstream for a typed object is what the upstream holds
    got = await pods.Get(pods_pb2.GetPodRequest(namespace=ns, name=name), metadata=auth)
    got.metadata.labels["round"] = "trip"
    replaced = await pods.Replace(
        pods_pb2.ReplacePodRequest(namespace=ns, name=name, object=got), metadata=auth
    )
    assert replaced.spec == created.spec
    held = await gw.adapter.get("pods", name, namespace=ns, credential=gw.credential())
    probe = held["spec"]["containers"][0]
    assert probe["livenessProbe"]["tcpSocket"]["port"] == 8080  # a number again upstream
    assert probe["readinessProbe"]["httpGet"]["port"] == "http"
    await delete(gw, k, name)


async def test_selectors_and_resource_versions(grpc_backend: GrpcBackend) -> None:
    gw, k = grpc_backend, KIND["pods"]
    pods, auth = gw.stub("pods"), gw.auth()
    name = gw.unique("sel")
    created = await create(gw, k, sample("pods", name, gw.namespace))
    at_least = await pods.List(
        pods_pb2.ListPodsRequest(
            namespace=gw.namespace,
            field_selector=f"metadata.name={name}",
            resource_version=created.metadata.resourceVersion,
            resource_version_match="NotOlderThan",
        ),
        metadata=auth,
    )
    assert [i.metadata.name for i in at_least.items] == [name]
    for bad in (
        pods_pb2.ListPodsRequest(namespace=gw.namespace, label_selector="a in (b"),
        pods_pb2.ListPodsRequest(namespace=gw.namespace, field_selector="spec.nope=1"),
    ):
        await fails(
            gw,
            pods.List(bad, metadata=auth),
            grpc.StatusCode.INVALID_ARGUMENT,
            "BadRequest",
            400,
        )
    # refused by the gateway before any request, with the apiserver's wording
    refused = await fails(
        gw,
        pods.List(
            pods_pb2.ListPodsRequest(namespace=gw.namespace, resource_version_match="Sometime"),
            metadata=auth,
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Invalid",
        422,
    )
    assert "resourceVersionMatch" in violations(refused)
    await delete(gw, k, name)


# -- pod subresources ---------------------------------------------------------------------------


async def test_pod_status_and_ephemeral_containers(grpc_backend: GrpcBackend) -> None:
    gw, k = grpc_backend, KIND["pods"]
    pods, auth, ns = gw.stub("pods"), gw.auth(), gw.namespace
    name = gw.unique("sub")
    await create(gw, k, sample("pods", name, ns))
    get = pods_pb2.GetPodRequest(namespace=ns, name=name)

    status = await pods.GetStatus(get, metadata=auth)
    assert status.metadata.name == name and status.kind == "Pod"
    status.status.phase = "Running"
    status.status.conditions.add(type="Ready", status="True", reason="ThroughGrpc")
    replaced = await pods.ReplaceStatus(
        pods_pb2.ReplacePodRequest(namespace=ns, name=name, object=status), metadata=auth
    )
    assert replaced.status.phase == "Running"
    assert [c.reason for c in replaced.status.conditions if c.type == "Ready"] == ["ThroughGrpc"]
    patched = await pods.PatchStatus(
        pods_pb2.PatchPodRequest(
            namespace=ns,
            name=name,
            patch_type=MERGE,
            patch=orjson.dumps({"status": {"message": "patched through gRPC"}}),
        ),
        metadata=auth,
    )
    assert (patched.status.message, patched.status.phase) == ("patched through gRPC", "Running")
    dry = await pods.PatchStatus(
        pods_pb2.PatchPodRequest(
            namespace=ns,
            name=name,
            patch_type=MERGE,
            patch=orjson.dumps({"status": {"message": "dry"}}),
            dry_run=True,
        ),
        metadata=auth,
    )
    assert dry.status.message == "dry"
    # a main-resource write keeps status
    main = await pods.Patch(
        pods_pb2.PatchPodRequest(
            namespace=ns,
            name=name,
            patch_type=MERGE,
            patch=orjson.dumps({"status": {"phase": "Failed"}}),
        ),
        metadata=auth,
    )
    assert (main.status.phase, main.status.message) == ("Running", "patched through gRPC")

    eph = await pods.GetEphemeralContainers(get, metadata=auth)
    assert list(eph.spec.ephemeralContainers) == []
    patched = await pods.PatchEphemeralContainers(
        pods_pb2.PatchPodRequest(
            namespace=ns,
            name=name,
            patch_type=SMP,
            patch=orjson.dumps(
                {
                    "spec": {
                        "ephemeralContainers": [
                            {
                                "name": "debugger",
                                "image": "busybox:1.36",
                                "targetContainerName": "main",
                            }
                        ]
                    }
                }
            ),
        ),
        metadata=auth,
    )
    assert [e.name for e in patched.spec.ephemeralContainers] == ["debugger"]
    current = await pods.GetEphemeralContainers(get, metadata=auth)
    current.spec.ephemeralContainers.add(name="second", image="busybox:1.36", stdin=True, tty=True)
    both = await pods.ReplaceEphemeralContainers(
        pods_pb2.ReplacePodRequest(namespace=ns, name=name, object=current), metadata=auth
    )
    assert [e.name for e in both.spec.ephemeralContainers] == ["debugger", "second"]
    assert both.spec.ephemeralContainers[1].tty
    # ephemeral containers cannot be removed
    del both.spec.ephemeralContainers[1]
    removal = await fails(
        gw,
        pods.ReplaceEphemeralContainers(
            pods_pb2.ReplacePodRequest(namespace=ns, name=name, object=both), metadata=auth
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Invalid",
        422,
    )
    assert violations(removal)
    await delete(gw, k, name)


async def test_pod_log_error_paths(grpc_backend: GrpcBackend) -> None:
    gw, k = grpc_backend, KIND["pods"]
    pods, auth, ns = gw.stub("pods"), gw.auth(), gw.namespace
    name = gw.unique("logs")
    pod = sample("pods", name, ns)
    pod["spec"]["containers"].append({"name": "sidecar", "image": "busybox:1.36"})
    await create(gw, k, pod)

    def log(**fields: Any) -> Any:
        return pods.GetLog(
            pods_pb2.GetPodLogRequest(namespace=ns, name=name, **fields), metadata=auth
        )

    for follow in (False, True):
        choose = await fails(
            gw, log(follow=follow), grpc.StatusCode.INVALID_ARGUMENT, "BadRequest", 400
        )
        assert "a container name must be specified" in choose.details()
        assert "choose one of: [main sidecar]" in choose.details()
    unknown = await fails(
        gw, log(container="nope"), grpc.StatusCode.INVALID_ARGUMENT, "BadRequest", 400
    )
    assert "nope" in unknown.details()
    both = await fails(
        gw,
        log(container="main", since_seconds=1, since_time="2026-01-01T00:00:00Z"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Invalid",
        422,
    )
    assert violations(both)
    # the containers do not run (no node): an empty log, and a follow that ends at once
    for follow in (False, True):
        call = log(container="main", follow=follow, tail_lines=10)
        async with asyncio.timeout(STEP):
            assert [c.data async for c in call] == []
        assert await call.code() == grpc.StatusCode.OK
    await fails(
        gw,
        pods.GetLog(
            pods_pb2.GetPodLogRequest(namespace=ns, name=gw.unique("none"), container="main"),
            metadata=auth,
        ),
        grpc.StatusCode.NOT_FOUND,
        "NotFound",
        404,
    )
    await delete(gw, k, name)


# -- identities and errors ----------------------------------------------------------------------


async def test_errors_per_identity(grpc_backend: GrpcBackend) -> None:
    gw, k = grpc_backend, KIND["pods"]
    pods, ns, other = gw.stub("pods"), gw.namespace, gw.other_namespace
    name = gw.unique("rbac")

    # alice: everything in her namespace, with her own identity
    mine = await pods.Create(
        pods_pb2.CreatePodRequest(namespace=ns, object=k.message(sample("pods", name, ns))),
        metadata=gw.auth("alice"),
    )
    assert mine.metadata.name == name
    assert (
        await pods.Get(pods_pb2.GetPodRequest(namespace=ns, name=name), metadata=gw.auth("alice"))
    ).metadata.uid == mine.metadata.uid
    for request in (
        pods_pb2.ListPodsRequest(namespace=other),
        pods_pb2.ListPodsRequest(),  # all namespaces
    ):
        denied = await fails(
            gw,
            pods.List(request, metadata=gw.auth("alice")),
            grpc.StatusCode.PERMISSION_DENIED,
            "Forbidden",
            403,
        )
        assert 'cannot list resource "pods"' in denied.details()
        assert "alice" in denied.details()
    denied = await fails(
        gw,
        pods.Create(
            pods_pb2.CreatePodRequest(
                namespace=other, object=k.message(sample("pods", gw.unique("x"), other))
            ),
            metadata=gw.auth("alice"),
        ),
        grpc.StatusCode.PERMISSION_DENIED,
        "Forbidden",
        403,
    )
    assert dict(details(denied)["ErrorInfo"].metadata)["kind"] == "pods"
    images = gw.stub("images")
    img = KIND["images"]
    await fails(
        gw,
        images.Create(
            img.request(
                "CreateImageRequest",
                raw_json=orjson.dumps(sample("images", gw.unique("img"), None)),
            ),
            metadata=gw.auth("alice"),
        ),
        grpc.StatusCode.PERMISSION_DENIED,
        "Forbidden",
        403,
    )
    if gw.alice_reads_images:
        await images.List(img.request("ListImagesRequest", limit=1), metadata=gw.auth("alice"))

    # nobody: nothing
    for call in (
        pods.Get(pods_pb2.GetPodRequest(namespace=ns, name=name), metadata=gw.auth("nobody")),
        images.List(img.request("ListImagesRequest"), metadata=gw.auth("nobody")),
        gw.stub("leases").Watch(
            KIND["leases"].request("WatchLeasesRequest", namespace=ns),
            metadata=gw.auth("nobody"),
        ),
    ):
        await fails(gw, call, grpc.StatusCode.PERMISSION_DENIED, "Forbidden", 403)

    # a bad token, no token, a token that is not a bearer token
    for metadata in (
        gw.auth("bad"),
        gw.auth("anonymous"),
        (("authorization", "Basic YWRtaW46YWRtaW4="),),
    ):
        await fails(
            gw,
            pods.List(pods_pb2.ListPodsRequest(namespace=ns), metadata=metadata),
            grpc.StatusCode.UNAUTHENTICATED,
            "Unauthorized",
            401,
        )
    await fails(
        gw,
        pods.GetLog(pods_pb2.GetPodLogRequest(namespace=ns, name=name), metadata=gw.auth("bad")),
        grpc.StatusCode.UNAUTHENTICATED,
        "Unauthorized",
        401,
    )

    # NotFound names the object
    missing = gw.unique("missing")
    not_found = await fails(
        gw,
        pods.Get(pods_pb2.GetPodRequest(namespace=ns, name=missing), metadata=gw.auth()),
        grpc.StatusCode.NOT_FOUND,
        "NotFound",
        404,
    )
    assert not_found.details() == f'pods "{missing}" not found'
    assert dict(details(not_found)["ErrorInfo"].metadata) == {
        "httpStatus": "404",
        "name": missing,
        "kind": "pods",
    }
    exists = await fails(
        gw,
        pods.Create(
            pods_pb2.CreatePodRequest(namespace=ns, object=k.message(sample("pods", name, ns))),
            metadata=gw.auth(),
        ),
        grpc.StatusCode.ALREADY_EXISTS,
        "AlreadyExists",
        409,
    )
    assert dict(details(exists)["ErrorInfo"].metadata)["name"] == name

    # Invalid: one field violation per cause, as the upstream reported them
    bad = sample("pods", "Not_A_Valid_Name", ns)
    bad["spec"]["containers"] = []
    invalid = await fails(
        gw,
        pods.Create(
            pods_pb2.CreatePodRequest(namespace=ns, object=k.message(bad)), metadata=gw.auth()
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Invalid",
        422,
    )
    found = violations(invalid)
    assert {"metadata.name", "spec.containers"} <= set(found)
    assert found["spec.containers"].reason == "FieldValueRequired"
    assert found["spec.containers"].description.startswith("Required value")
    assert [c.field for c in details(invalid)["Status"].details.causes] == list(found)
    no_layers = sample("images", gw.unique("img"), None)
    del no_layers["dockerImageLayers"]
    layers = await fails(
        gw,
        images.Create(
            img.request("CreateImageRequest", raw_json=orjson.dumps(no_layers)), metadata=gw.auth()
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Invalid",
        422,
    )
    assert any("dockerImageLayers" in f for f in violations(layers))
    strict = sample("leases", gw.unique("strict"), ns)
    strict["spec"]["bogusField"] = 1
    unknown = await fails(
        gw,
        gw.stub("leases").Create(
            KIND["leases"].request(
                "CreateLeaseRequest",
                namespace=ns,
                raw_json=orjson.dumps(strict),
                field_validation="Strict",
            ),
            metadata=gw.auth(),
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "BadRequest",
        400,
    )
    assert "bogusField" in unknown.details()
    await delete(gw, k, name)


# -- watch ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("plural", KINDS)
async def test_watch_added_modified_deleted(grpc_backend: GrpcBackend, plural: str) -> None:
    gw, k = grpc_backend, KIND[plural]
    tag = gw.unique("wk")
    stream = watch(
        gw,
        k,
        label_selector=f"wk={tag}",
        send_initial_events=True,
        resource_version_match="NotOlderThan",
    )
    try:
        marker = await stream.next()  # nothing matches yet: only the end-of-initial-events mark
        assert marker.type == Event.BOOKMARK
        assert getattr(marker, k.member).metadata.annotations["k8s.io/initial-events-end"] == "true"
        name = gw.unique(f"{plural[:-1]}-w")
        body = sample(plural, name, gw.ns(plural))
        body["metadata"]["labels"] = {"wk": tag}
        created = await create(gw, k, body)
        kind, got, event = await stream.change()
        assert (kind, got) == ("ADDED", name)
        assert event.WhichOneof("object") == k.member
        assert event.resource_version == created.metadata.resourceVersion
        assert getattr(event, k.member).kind == k.kind
        patched = await gw.stub(plural).Patch(
            k.request(
                "Patch{kind}Request",
                namespace=gw.ns(plural),
                name=name,
                patch_type=MERGE,
                patch=orjson.dumps({"metadata": {"labels": {"step": "two"}}}),
            ),
            metadata=gw.auth(),
        )
        kind, got, event = await stream.change()
        assert (kind, got) == ("MODIFIED", name)
        assert event.resource_version == patched.metadata.resourceVersion
        assert labels(getattr(event, k.member))["step"] == "two"
        await delete(gw, k, name)
        kind, got, event = await stream.change()
        while kind == "MODIFIED":  # a pod is first marked for deletion (deletionTimestamp)
            assert getattr(event, k.member).metadata.deletionTimestamp
            kind, got, event = await stream.change()
        assert (kind, got) == ("DELETED", name)
    finally:
        await stream.close()


async def test_watch_resume_initial_events_and_read_mask(grpc_backend: GrpcBackend) -> None:
    gw, k = grpc_backend, KIND["leases"]
    leases, auth = gw.stub("leases"), gw.auth()
    tag = gw.unique("w")
    names = [f"{tag}-{i}" for i in range(3)]
    for n in names:
        body = sample("leases", n, gw.namespace)
        body["metadata"]["labels"] = {"w": tag}
        await create(gw, k, body)

    def renew(name: str, holder: str) -> Any:
        return leases.Patch(
            k.request(
                "PatchLeaseRequest",
                namespace=gw.namespace,
                name=name,
                patch_type=MERGE,
                patch=orjson.dumps({"spec": {"holderIdentity": holder}}),
            ),
            metadata=auth,
        )

    # the current state, then the end-of-initial-events marker, then changes
    initial = watch(
        gw,
        k,
        label_selector=f"w={tag}",
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
    )
    try:
        assert sorted(await initial.changes(3)) == [("ADDED", n) for n in names]
        marker = await initial.next()
        assert marker.type == Event.BOOKMARK and marker.resource_version
        assert marker.lease.metadata.annotations["k8s.io/initial-events-end"] == "true"
        resume_at = marker.resource_version
        renewed = [await renew(n, "later") for n in names]
        assert await initial.changes(3) == [("MODIFIED", n) for n in names]
    finally:
        await initial.close()

    # resume from a resourceVersion: exactly the later changes, in order, with their RVs
    resumed = watch(gw, k, label_selector=f"w={tag}", resource_version=resume_at)
    try:
        got = [await resumed.change() for _ in names]
        assert [(t, n) for t, n, _ in got] == [("MODIFIED", n) for n in names]
        assert [e.resource_version for _, _, e in got] == [
            r.metadata.resourceVersion for r in renewed
        ]
        assert [e.lease.spec.holderIdentity for _, _, e in got] == ["later"] * 3
    finally:
        await resumed.close()

    # send_initial_events=false: only what happens after the call, masked as asked.  The
    # change before the call is never delivered; the call starts asynchronously, so change
    # the lease until the watch reports a change.
    await renew(names[0], "before")
    later = watch(
        gw,
        k,
        label_selector=f"w={tag}",
        send_initial_events=False,
        resource_version_match="NotOlderThan",
        read_mask=field_mask_pb2.FieldMask(paths=["metadata.name", "spec.holderIdentity"]),
    )
    try:
        first = None
        for step in range(100):
            await renew(names[0], f"probe-{step}")
            try:
                first = await later.next(timeout=0.3)
                break
            except TimeoutError:
                continue
        assert first is not None and first.type == Event.MODIFIED
        assert first.lease.spec.holderIdentity.startswith("probe-")
        now = await renew(names[0], "now")
        event = first
        while event.resource_version != now.metadata.resourceVersion:
            event = await later.next()
        lease = event.lease
        assert (lease.metadata.name, lease.spec.holderIdentity) == (names[0], "now")
        assert not lease.metadata.uid and not lease.HasField("kind")
        assert not lease.spec.HasField("leaseDurationSeconds")
        # a label change out of the selector is a DELETED
        await leases.Patch(
            k.request(
                "PatchLeaseRequest",
                namespace=gw.namespace,
                name=names[1],
                patch_type=MERGE,
                patch=orjson.dumps({"metadata": {"labels": {"w": "elsewhere"}}}),
            ),
            metadata=auth,
        )
        assert await later.changes(1) == [("DELETED", names[1])]
    finally:
        await later.close()

    # watches the caller may not make
    await fails(
        gw,
        leases.Watch(
            k.request("WatchLeasesRequest", namespace=gw.other_namespace),
            metadata=gw.auth("alice"),
        ),
        grpc.StatusCode.PERMISSION_DENIED,
        "Forbidden",
        403,
    )
    await fails(
        gw,
        leases.Watch(
            k.request("WatchLeasesRequest", namespace=gw.namespace), metadata=gw.auth("bad")
        ),
        grpc.StatusCode.UNAUTHENTICATED,
        "Unauthorized",
        401,
    )
    for n in names:
        await delete(gw, k, n)
