"""The generic ``kubegateway.v1.ResourceService`` over a real grpc.aio channel, against the demo
upstream: every method on pods and leases (addressed by group/version/resource), objects as
JSON and as Struct, read masks, errors, Watch (resume, 410, shared with the typed services),
and the same object as the typed services for the same get."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import grpc
import orjson
import pytest
from google.protobuf import descriptor_pb2, field_mask_pb2, json_format, struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gateway.core.catalog.catalog import SEED_CATALOG, Catalog, CatalogHolder
from gateway.core.model.registry import LEASE, POD, Registry
from gateway.grpc.codec import codec
from gateway.grpc.gen.kubegateway.v1 import (
    common_pb2,
    leases_pb2,
    meta_pb2,
    pods_pb2,
    resource_pb2,
)
from gateway.grpc.server import GrpcOptions
from kube_gateway_demo import DemoUpstream
from tests.grpc import test_watch as watch_tests
from tests.scenarios.backend import sample
from tests.support.grpc import (
    ADMIN,
    NAMESPACE,
    GrpcGateway,
    bearer,
    details,
    gw,
    serve_grpc,
    unique,
    upstream,
)
from tests.support.tap import Tap

__all__ = ["gw", "upstream"]  # fixtures

AUTH = bearer(ADMIN)
R = resource_pb2
JSON_REP, STRUCT_REP = R.REPRESENTATION_JSON, R.REPRESENTATION_STRUCT
JSON, MERGE, SMP, APPLY = (
    common_pb2.PATCH_TYPE_JSON,
    common_pb2.PATCH_TYPE_MERGE,
    common_pb2.PATCH_TYPE_STRATEGIC_MERGE,
    common_pb2.PATCH_TYPE_APPLY,
)
Event = common_pb2.WatchEvent
#: Request message -> method of the service.
METHODS = {
    m.input_type.name: m.name for m in R.DESCRIPTOR.services_by_name["ResourceService"].methods
}
STEP = 10.0  # seconds any single expected event may take (bounded waits, never sleeps)
ADDRESS = {
    "pods": {"group": "", "version": "v1", "resource": "pods"},
    "leases": {"group": "coordination.k8s.io", "version": "v1", "resource": "leases"},
}


def obj(answer: Any) -> dict[str, Any]:
    """The JSON object of a ``ResourceObject``, whichever form it came in."""
    which = answer.WhichOneof("representation")
    if which == "json":
        decoded = orjson.loads(answer.json)
        assert isinstance(decoded, dict)
        return decoded
    assert which == "struct"
    # json_format: an implementation independent of the gateway's
    return json_format.MessageToDict(answer.struct)


def body(value: dict[str, Any], representation: int) -> Any:
    """A request's ``ResourceObject`` in the given form (built by the client library)."""
    if representation == STRUCT_REP:
        s = struct_pb2.Struct()
        s.update(value)
        return R.ResourceObject(struct=s)
    return R.ResourceObject(json=orjson.dumps(value))


def labels(answer: Any) -> dict[str, str]:
    return dict(obj(answer)["metadata"].get("labels") or {})


async def _fails(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    return failed.value


@pytest.mark.parametrize("representation", [JSON_REP, STRUCT_REP], ids=["json", "struct"])
@pytest.mark.parametrize("plural", ["pods", "leases"])
async def test_every_method(gw: GrpcGateway, plural: str, representation: int) -> None:
    svc, at = gw.resources, ADDRESS[plural]
    name = unique(plural[:-1])
    manifest = sample(plural, name, NAMESPACE)
    manifest["metadata"]["labels"] = {"generic": name}
    one = {**at, "namespace": NAMESPACE, "name": name, "representation": representation}
    rep = {"representation": representation}

    dry = await svc.Create(
        R.CreateResourceRequest(
            **at, namespace=NAMESPACE, object=body(manifest, representation), dry_run=True, **rep
        ),
        metadata=AUTH,
    )
    assert obj(dry)["metadata"]["name"] == name
    assert (await _fails(svc.Get(R.GetResourceRequest(**one), metadata=AUTH))).code() == (
        grpc.StatusCode.NOT_FOUND
    )
    created = await svc.Create(
        R.CreateResourceRequest(
            **at, namespace=NAMESPACE, object=body(manifest, representation), **rep
        ),
        metadata=AUTH,
    )
    assert created.WhichOneof("representation") == (
        "struct" if representation == STRUCT_REP else "json"
    )
    assert obj(created)["metadata"]["uid"]
    duplicate = await _fails(
        svc.Create(
            R.CreateResourceRequest(**at, namespace=NAMESPACE, object=body(manifest, JSON_REP)),
            metadata=AUTH,
        )
    )
    assert duplicate.code() == grpc.StatusCode.ALREADY_EXISTS
    got = await svc.Get(R.GetResourceRequest(**one), metadata=AUTH)
    assert obj(got) == obj(created)

    # replace, guarded by resourceVersion
    changed = obj(got)
    changed["metadata"]["labels"]["replaced"] = "yes"
    replace = R.ReplaceResourceRequest(**one, object=body(changed, representation))
    replaced = await svc.Replace(replace, metadata=AUTH)
    assert labels(replaced)["replaced"] == "yes"
    stale = await _fails(svc.Replace(replace, metadata=AUTH))
    assert stale.code() == grpc.StatusCode.ABORTED

    def patch(patch_type: int, doc: Any, **extra: Any) -> Any:
        return R.PatchResourceRequest(
            **one, patch_type=patch_type, patch=orjson.dumps(doc), **extra
        )

    merged = await svc.Patch(patch(MERGE, {"metadata": {"labels": {"merge": "1"}}}), metadata=AUTH)
    assert labels(merged)["merge"] == "1" and labels(merged)["replaced"] == "yes"
    jsoned = await svc.Patch(
        patch(JSON, [{"op": "add", "path": "/metadata/labels/json", "value": "2"}]), metadata=AUTH
    )
    assert labels(jsoned)["json"] == "2"
    smp = await svc.Patch(patch(SMP, {"metadata": {"labels": {"smp": "3"}}}), metadata=AUTH)
    assert labels(smp)["smp"] == "3" and labels(smp)["json"] == "2"
    applied_doc = {
        "apiVersion": manifest["apiVersion"],
        "kind": manifest["kind"],
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"applied": "4"}},
    }
    applied = await svc.Patch(
        patch(APPLY, applied_doc, field_manager="generic-tests", force=True), metadata=AUTH
    )
    assert labels(applied)["applied"] == "4"
    managers = {m["manager"] for m in obj(applied)["metadata"]["managedFields"]}
    assert "generic-tests" in managers

    # list: a selector, then pages
    second = unique(plural[:-1])
    other = sample(plural, second, NAMESPACE)
    other["metadata"]["labels"] = {"generic": name}
    await svc.Create(
        R.CreateResourceRequest(**at, namespace=NAMESPACE, object=body(other, JSON_REP)),
        metadata=AUTH,
    )
    listing = {**at, "namespace": NAMESPACE, "label_selector": f"generic={name}", **rep}
    listed = await svc.List(R.ListResourcesRequest(**listing), metadata=AUTH)
    assert sorted(obj(i)["metadata"]["name"] for i in listed.items) == sorted([name, second])
    assert listed.kind == f"{manifest['kind']}List"
    assert listed.api_version == manifest["apiVersion"]
    assert listed.metadata.resourceVersion
    page = await svc.List(R.ListResourcesRequest(**listing, limit=1), metadata=AUTH)
    assert len(page.items) == 1 and getattr(page.metadata, "continue")
    rest = await svc.List(
        R.ListResourcesRequest(
            **listing, limit=1, **{"continue": getattr(page.metadata, "continue")}
        ),
        metadata=AUTH,
    )
    assert [obj(i)["metadata"]["name"] for i in (*page.items, *rest.items)] == [
        obj(i)["metadata"]["name"] for i in listed.items
    ]

    # delete one (the object comes back), then the collection
    deleted = await svc.Delete(
        R.DeleteResourceRequest(
            **at,
            namespace=NAMESPACE,
            name=name,
            options=meta_pb2.DeleteOptions(gracePeriodSeconds=0),
            **rep,
        ),
        metadata=AUTH,
    )
    if plural == "pods":  # graceful: the terminating object
        assert obj(deleted.object)["metadata"]["name"] == name
    else:  # gone at once: a Status
        assert deleted.status.status == "Success"
    gone = await svc.DeleteCollection(
        R.DeleteCollectionResourcesRequest(
            **at,
            namespace=NAMESPACE,
            label_selector=f"generic={name}",
            options=meta_pb2.DeleteOptions(gracePeriodSeconds=0),
            **rep,
        ),
        metadata=AUTH,
    )
    assert gone.WhichOneof("result") == "list"
    assert [obj(i)["metadata"]["name"] for i in gone.list.items] == [second]
    left = await svc.List(R.ListResourcesRequest(**listing), metadata=AUTH)
    assert list(left.items) == []


async def test_the_typed_and_the_generic_services_return_the_same_object(gw: GrpcGateway) -> None:
    for plural, typed_get, cls in (
        ("pods", pods_pb2.GetPodRequest, "Pod"),
        ("leases", leases_pb2.GetLeaseRequest, "Lease"),
    ):
        name = unique(plural[:-1])
        manifest = sample(plural, name, NAMESPACE)
        await gw.resources.Create(
            R.CreateResourceRequest(
                **ADDRESS[plural], namespace=NAMESPACE, object=body(manifest, JSON_REP)
            ),
            metadata=AUTH,
        )
        typed = await gw.stub(plural).Get(typed_get(namespace=NAMESPACE, name=name), metadata=AUTH)
        for representation in (JSON_REP, STRUCT_REP):
            generic = obj(
                await gw.resources.Get(
                    R.GetResourceRequest(
                        **ADDRESS[plural],
                        namespace=NAMESPACE,
                        name=name,
                        representation=representation,
                    ),
                    metadata=AUTH,
                )
            )
            assert generic["metadata"]["uid"] == typed.metadata.uid
            assert generic["metadata"]["resourceVersion"] == typed.metadata.resourceVersion
            # the generic JSON, put into the typed message, is the typed answer
            assert codec().message(cls, generic) == typed


async def test_the_status_subresource(gw: GrpcGateway) -> None:
    svc, name = gw.resources, unique("pod")
    at = {**ADDRESS["pods"], "namespace": NAMESPACE, "name": name}
    await svc.Create(
        R.CreateResourceRequest(
            **ADDRESS["pods"],
            namespace=NAMESPACE,
            object=body(sample("pods", name, NAMESPACE), JSON_REP),
        ),
        metadata=AUTH,
    )
    patched = await svc.Patch(
        R.PatchResourceRequest(
            **at,
            subresource="status",
            patch_type=MERGE,
            patch=orjson.dumps({"status": {"message": "generic"}}),
        ),
        metadata=AUTH,
    )
    assert obj(patched)["status"]["message"] == "generic"
    status = obj(await svc.Get(R.GetResourceRequest(**at, subresource="status"), metadata=AUTH))
    assert status["status"]["message"] == "generic"
    status["status"]["message"] = "replaced"
    replaced = await svc.Replace(
        R.ReplaceResourceRequest(**at, subresource="status", object=body(status, JSON_REP)),
        metadata=AUTH,
    )
    assert obj(replaced)["status"]["message"] == "replaced"
    # what the resource does not serve is refused before any call
    for request, message in (
        (R.GetResourceRequest(**at, subresource="scale"), "pods has no subresource 'scale'"),
        (R.GetResourceRequest(**at, subresource="log"), "pods/log is not a JSON subresource"),
        (
            R.GetResourceRequest(
                **ADDRESS["leases"], namespace=NAMESPACE, name="x", subresource="status"
            ),
            "leases has no subresource 'status'",
        ),
    ):
        refused = await _fails(svc.Get(request, metadata=AUTH))
        assert refused.code() == grpc.StatusCode.UNIMPLEMENTED
        assert refused.details() is not None and message in refused.details()


async def test_read_masks_select_json_field_names(gw: GrpcGateway) -> None:
    svc, name = gw.resources, unique("lease")
    manifest = sample("leases", name, NAMESPACE)
    manifest["metadata"]["labels"] = {"app": "web", "tier": "front"}
    await svc.Create(
        R.CreateResourceRequest(
            **ADDRESS["leases"], namespace=NAMESPACE, object=body(manifest, JSON_REP)
        ),
        metadata=AUTH,
    )
    one = {**ADDRESS["leases"], "namespace": NAMESPACE, "name": name}
    mask = field_mask_pb2.FieldMask(
        paths=["metadata.name", "metadata.labels.app", "spec.holderIdentity", "nothing.here"]
    )
    for representation in (JSON_REP, STRUCT_REP):
        got = await svc.Get(
            R.GetResourceRequest(**one, read_mask=mask, representation=representation),
            metadata=AUTH,
        )
        assert obj(got) == {
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"holderIdentity": manifest["spec"]["holderIdentity"]},
        }
    # the JSON form of a FieldMask (grpcurl's "read_mask": "metadata.resourceVersion") arrives
    # as snake_case: read under the camelCase name the object has
    request = json_format.ParseDict(
        {**one, "read_mask": "metadata.resourceVersion,spec.holderIdentity"},
        R.GetResourceRequest(),
    )
    assert list(request.read_mask.paths) == ["metadata.resource_version", "spec.holder_identity"]
    got_json = obj(await svc.Get(request, metadata=AUTH))
    assert set(got_json["metadata"]) == {"resourceVersion"}
    assert got_json["spec"] == {"holderIdentity": manifest["spec"]["holderIdentity"]}
    # through arrays, in a list
    pods = await svc.List(
        R.ListResourcesRequest(
            **ADDRESS["pods"],
            namespace=NAMESPACE,
            read_mask=field_mask_pb2.FieldMask(paths=["spec.containers.image"]),
        ),
        metadata=AUTH,
    )
    assert pods.items
    for item in pods.items:
        containers = obj(item)["spec"]["containers"]
        assert containers and all(set(c) == {"image"} for c in containers)
    bad = await _fails(
        svc.Get(
            R.GetResourceRequest(**one, read_mask=field_mask_pb2.FieldMask(paths=["metadata..x"])),
            metadata=AUTH,
        )
    )
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = details(bad)["BadRequest"].field_violations
    assert [v.field for v in violations] == ["read_mask.paths[0]"]


async def test_errors_are_those_of_the_typed_services(upstream: DemoUpstream) -> None:
    async with (
        Tap.before(upstream.url) as tap,
        serve_grpc(
            upstream, server=tap.url, options=GrpcOptions(max_request_bytes=64 * 1024)
        ) as gateway,
    ):
        svc = gateway.resources
        # refused before any upstream call
        for request, code, field in (
            (
                R.GetResourceRequest(group="apps", version="v1", resource="deployments", name="x"),
                grpc.StatusCode.NOT_FOUND,
                None,
            ),
            (
                R.GetResourceRequest(resource="pods", name="x"),
                grpc.StatusCode.INVALID_ARGUMENT,
                "version",
            ),
            (
                R.GetResourceRequest(version="v1", name="x"),
                grpc.StatusCode.INVALID_ARGUMENT,
                "resource",
            ),
            (
                R.GetResourceRequest(**ADDRESS["pods"], name="x"),
                grpc.StatusCode.INVALID_ARGUMENT,
                "namespace",
            ),
            (
                R.GetResourceRequest(
                    group="image.openshift.io",
                    version="v1",
                    resource="images",
                    namespace="demo",
                    name="x",
                ),
                grpc.StatusCode.INVALID_ARGUMENT,
                "namespace",
            ),
            (
                R.ListResourcesRequest(**ADDRESS["pods"], resource_version_match="Sometime"),
                grpc.StatusCode.INVALID_ARGUMENT,
                None,
            ),
            (
                R.CreateResourceRequest(
                    **ADDRESS["pods"], namespace=NAMESPACE, object=R.ResourceObject(json=b"{nope")
                ),
                grpc.StatusCode.INVALID_ARGUMENT,
                "object.json",
            ),
            (
                R.CreateResourceRequest(
                    **ADDRESS["pods"], namespace=NAMESPACE, object=R.ResourceObject(json=b"[]")
                ),
                grpc.StatusCode.INVALID_ARGUMENT,
                "object.json",
            ),
            (
                R.CreateResourceRequest(**ADDRESS["pods"], namespace=NAMESPACE),
                grpc.StatusCode.INVALID_ARGUMENT,
                "object",
            ),
            (
                R.PatchResourceRequest(
                    **ADDRESS["pods"], namespace=NAMESPACE, name="x", patch=b"{}"
                ),
                grpc.StatusCode.INVALID_ARGUMENT,
                "patch_type",
            ),
        ):
            method = METHODS[type(request).__name__]
            failed = await _fails(getattr(svc, method)(request, metadata=AUTH))
            assert failed.code() == code, request
            found = details(failed)
            assert found["ErrorInfo"].domain == "kube-gateway.io"
            if field is not None:
                assert [v.field for v in found["BadRequest"].field_violations] == [field]
        unknown = await _fails(
            svc.Get(
                R.GetResourceRequest(group="apps", version="v1", resource="deployments", name="x"),
                metadata=AUTH,
            )
        )
        assert unknown.details() == "the gateway does not serve 'deployments' in 'apps/v1'"
        assert details(unknown)["ErrorInfo"].reason == "NotFound"
        # a singular name or a kind is answered with the plural to use
        lease = {"group": "coordination.k8s.io", "version": "v1", "name": "x"}
        for name in ("lease", "Lease"):
            wrong = await _fails(
                svc.Get(R.GetResourceRequest(**lease, resource=name), metadata=AUTH)
            )
            assert wrong.code() == grpc.StatusCode.NOT_FOUND
            assert details(wrong)["ErrorInfo"].reason == "NotFound"
            assert wrong.details() == (
                f"the gateway does not serve {name!r} in 'coordination.k8s.io/v1'; "
                'resources are named by their plural: did you mean "leases"?'
            )
        # the plural in a group/version that does not serve it names where it is served
        elsewhere = await _fails(
            svc.Get(R.GetResourceRequest(version="v1", resource="leases", name="x"), metadata=AUTH)
        )
        assert elsewhere.code() == grpc.StatusCode.NOT_FOUND
        assert elsewhere.details() == (
            "the gateway does not serve 'leases' in 'v1'; "
            'did you mean "leases" (group "coordination.k8s.io", version "v1")?'
        )
        assert tap.from_client == b""  # the upstream was never asked

        # oversized: refused by grpc's own limit, unread
        huge = {"metadata": {"name": "x", "annotations": {"a": "x" * (1 << 20)}}}
        oversized = await _fails(
            svc.Create(
                R.CreateResourceRequest(
                    **ADDRESS["pods"], namespace=NAMESPACE, object=body(huge, JSON_REP)
                ),
                metadata=AUTH,
            )
        )
        assert oversized.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert tap.from_client == b""

        # the upstream's answers: a bad selector, NotFound, Conflict (ABORTED), with the
        # Kubernetes Status
        selector = await _fails(
            svc.List(
                R.ListResourcesRequest(**ADDRESS["pods"], label_selector="a in (b"), metadata=AUTH
            )
        )
        assert selector.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert details(selector)["Status"].reason == "BadRequest"
        missing = await _fails(
            svc.Get(
                R.GetResourceRequest(**ADDRESS["leases"], namespace=NAMESPACE, name="absent"),
                metadata=AUTH,
            )
        )
        assert missing.code() == grpc.StatusCode.NOT_FOUND
        assert details(missing)["Status"].reason == "NotFound"
        name = unique("lease")
        created = obj(
            await svc.Create(
                R.CreateResourceRequest(
                    **ADDRESS["leases"],
                    namespace=NAMESPACE,
                    object=body(sample("leases", name, NAMESPACE), JSON_REP),
                ),
                metadata=AUTH,
            )
        )
        created["metadata"]["resourceVersion"] = "1"
        conflict = await _fails(
            svc.Replace(
                R.ReplaceResourceRequest(
                    **ADDRESS["leases"],
                    namespace=NAMESPACE,
                    name=name,
                    object=body(created, JSON_REP),
                ),
                metadata=AUTH,
            )
        )
        assert conflict.code() == grpc.StatusCode.ABORTED
        assert details(conflict)["ErrorInfo"].reason == "Conflict"
        unauthenticated = await _fails(
            svc.Get(
                R.GetResourceRequest(**ADDRESS["leases"], namespace=NAMESPACE, name=name),
                metadata=bearer("nope"),
            )
        )
        assert unauthenticated.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_resources_are_resolved_on_the_current_catalog_at_each_call(
    upstream: DemoUpstream,
) -> None:
    read_only = dataclasses.replace(LEASE, verbs=frozenset(("get", "list")))
    holder = CatalogHolder(SEED_CATALOG)
    async with serve_grpc(upstream, catalog=holder) as gateway:
        svc = gateway.resources
        lease = {**ADDRESS["leases"], "namespace": NAMESPACE}
        await svc.List(R.ListResourcesRequest(**lease), metadata=AUTH)
        holder.swap(Catalog(Registry((POD, read_only)), generation=1))
        listed = await svc.List(R.ListResourcesRequest(**lease), metadata=AUTH)
        assert listed.kind == "LeaseList"
        refused = await _fails(
            svc.Delete(R.DeleteResourceRequest(**lease, name="x"), metadata=AUTH)
        )
        assert refused.code() == grpc.StatusCode.UNIMPLEMENTED
        assert refused.details() == "leases does not support 'delete'"
        holder.swap(Catalog(Registry((POD,)), generation=2))
        gone = await _fails(svc.List(R.ListResourcesRequest(**lease), metadata=AUTH))
        assert gone.code() == grpc.StatusCode.NOT_FOUND
        # the typed services are not the catalog's: they keep serving
        await gateway.stub("leases").List(
            leases_pb2.ListLeasesRequest(namespace=NAMESPACE), metadata=AUTH
        )
        metrics = gateway.adapter.metrics.registry

        def count(operation: str, resource: str, outcome: str) -> float:
            labels = {
                "transport": "grpc",
                "operation": operation,
                "resource": resource,
                "outcome": outcome,
            }
            return metrics.get_sample_value("kube_gateway_operations_total", labels) or 0.0

        assert count("List", LEASE.key, "ok") == 3  # two generic, one typed
        assert count("Delete", LEASE.key, "MethodNotSupported") == 1
        assert count("List", "_unresolved", "UnknownResource") == 1


class Stream(watch_tests.Stream):
    """A generic Watch call read event by event, each read bounded."""

    async def take(self, count: int) -> list[tuple[str, str]]:
        """The next ``count`` events as (type name, object name)."""
        out = []
        for _ in range(count):
            event = await self.next()
            out.append((Event.Type.Name(event.type), obj(event.object)["metadata"]["name"]))
        return out


def _watch(gw: GrpcGateway, label: str, **fields: Any) -> Stream:
    return Stream(
        gw.resources.Watch(
            R.WatchResourcesRequest(
                **ADDRESS["leases"], namespace=NAMESPACE, label_selector=f"w={label}", **fields
            ),
            metadata=AUTH,
        )
    )


_lease, _renew = watch_tests._lease, watch_tests._renew


async def test_watch_events_resume_and_bookmarks(gw: GrpcGateway, upstream: DemoUpstream) -> None:
    label = unique("w")
    a, b = sorted(unique("a") for _ in range(2))
    await upstream.store.create(LEASE, _lease(a, label))
    await upstream.store.create(LEASE, _lease(b, label))
    stream = _watch(gw, label)
    assert sorted(await stream.take(2)) == [("ADDED", a), ("ADDED", b)]
    await _renew(upstream, a, "node-b")
    modified = await stream.next()
    assert modified.type == Event.MODIFIED
    assert obj(modified.object)["spec"]["holderIdentity"] == "node-b"
    resume = modified.resource_version
    assert resume == obj(modified.object)["metadata"]["resourceVersion"]
    stream.call.cancel()
    # changes after the resume point, exactly
    await _renew(upstream, b, "node-c")
    await upstream.store.delete(LEASE, a, namespace=NAMESPACE)
    resumed = _watch(gw, label, resource_version=resume, representation=STRUCT_REP)
    assert await resumed.take(2) == [("MODIFIED", b), ("DELETED", a)]
    resumed.call.cancel()
    # streaming-list semantics: the state, then the end-of-initial-events bookmark
    initial = _watch(
        gw,
        label,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
        read_mask=field_mask_pb2.FieldMask(paths=["metadata.name"]),
    )
    first = await initial.next()
    assert (first.type, obj(first.object)) == (Event.ADDED, {"metadata": {"name": b}})
    marker = await initial.next()
    assert marker.type == Event.BOOKMARK
    annotations = obj(marker.object)["metadata"]["annotations"]  # markers are not masked
    assert annotations["k8s.io/initial-events-end"] == "true"
    initial.call.cancel()


async def test_changed_fields_only_withholds_modified_events_outside_the_mask(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    """Watch rule 31 on the generic service: an annotation change is outside the mask and
    not sent; the holder change after it is the very next event (no waiting)."""
    label, name = unique("w"), unique("c")
    await upstream.store.create(LEASE, _lease(name, label))
    mask = field_mask_pb2.FieldMask(paths=["metadata.name", "spec.holderIdentity"])
    changed = _watch(gw, label, read_mask=mask, changed_fields_only=True)
    every = _watch(gw, label, read_mask=mask, representation=STRUCT_REP)
    assert await changed.take(1) == [("ADDED", name)]
    assert await every.take(1) == [("ADDED", name)]
    await upstream.store.patch(
        LEASE, name, {"metadata": {"annotations": {"note": "x"}}}, namespace=NAMESPACE
    )
    await _renew(upstream, name, "node-9")
    event = await changed.next()
    assert (event.type, obj(event.object)["spec"]) == (Event.MODIFIED, {"holderIdentity": "node-9"})
    assert [t for t, _ in await every.take(2)] == ["MODIFIED", "MODIFIED"]
    changed.call.cancel()
    every.call.cancel()


async def test_a_forced_410_resyncs_and_typed_and_generic_subscribers_share_the_watch(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    label = unique("w")
    keep, drop = unique("keep"), unique("drop")
    await upstream.store.create(LEASE, _lease(keep, label))
    await upstream.store.create(LEASE, _lease(drop, label))
    upstream.faults.close_watches_after(1)
    generic = _watch(gw, label)
    typed = gw.stub("leases").Watch(
        leases_pb2.WatchLeasesRequest(namespace=NAMESPACE, label_selector=f"w={label}"),
        metadata=AUTH,
    )
    typed_events = typed.__aiter__()
    assert sorted(await generic.take(2)) == sorted([("ADDED", keep), ("ADDED", drop)])
    for _ in range(2):
        async with asyncio.timeout(STEP):
            assert (await anext(typed_events)).lease.metadata.name in (keep, drop)
    assert gw.hub.stats.upstream_watches == 1  # one upstream watch for both services
    upstream.faults.expire_watches(1)  # the resume after the next close gets 410
    added = unique("new")
    await _renew(upstream, keep, "renewed")
    await upstream.store.delete(LEASE, drop, namespace=NAMESPACE)
    await upstream.store.create(LEASE, _lease(added, label))
    assert await generic.take(1) == [("MODIFIED", keep)]
    begin = await generic.next()
    assert begin.type == Event.RESYNC
    assert obj(begin.object)["metadata"]["annotations"]["kube-gateway.io/resync"] == "begin"
    assert sorted(await generic.take(2)) == sorted([("DELETED", drop), ("ADDED", added)])
    end = await generic.next()
    assert end.type == Event.RESYNC and end.resource_version
    # the typed subscriber got the same events, as typed messages
    typed_seen = []
    for _ in range(5):
        async with asyncio.timeout(STEP):
            event = await anext(typed_events)
        typed_seen.append((Event.Type.Name(event.type), event.lease.metadata.name))
    assert typed_seen[0] == ("MODIFIED", keep) and typed_seen[1][0] == "RESYNC"
    assert sorted(typed_seen[2:4]) == sorted([("DELETED", drop), ("ADDED", added)])
    generic.call.cancel()
    typed.cancel()


async def test_reflection_describes_the_resource_service(gw: GrpcGateway) -> None:
    call = reflection_pb2_grpc.ServerReflectionStub(gw.channel).ServerReflectionInfo()
    await call.write(
        reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="kubegateway.v1.ResourceService"
        )
    )
    await call.done_writing()
    found = await call.read()
    files = {
        proto.name: proto
        for proto in map(
            descriptor_pb2.FileDescriptorProto.FromString,
            found.file_descriptor_response.file_descriptor_proto,
        )
    }
    service = files["kubegateway/v1/resource.proto"].service[0]
    assert [m.name for m in service.method] == [
        "Get",
        "List",
        "Watch",
        "Create",
        "Replace",
        "Patch",
        "Delete",
        "DeleteCollection",
        "View",
        "WatchView",
    ]
    view = next(m for m in service.method if m.name == "View")
    assert (view.input_type, view.output_type) == (
        ".kubegateway.v1.ViewResourcesRequest",
        ".kubegateway.v1.ResourceView",
    )
    live = next(m for m in service.method if m.name == "WatchView")
    assert (live.input_type, live.output_type) == (
        ".kubegateway.v1.WatchViewRequest",
        ".kubegateway.v1.ResourceView",
    )
    assert [m.name for m in service.method if m.server_streaming] == ["Watch", "WatchView"]
    health = await health_pb2_grpc.HealthStub(gw.channel).Check(
        health_pb2.HealthCheckRequest(service="kubegateway.v1.ResourceService")
    )
    assert health.status == health_pb2.HealthCheckResponse.SERVING
