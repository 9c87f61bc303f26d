"""The generic ``kubegateway.v1.ResourceService`` against the real kube-apiserver, on resources
the gateway has no typed service (and no line of code) for: a ConfigMap and a Deployment.

Until discovery builds the catalog, the gateway is given a :class:`CatalogHolder` holding a
:class:`Catalog` with hand-built :class:`Resource` records for ``configmaps`` and
``apps/v1 deployments`` next to the seed resources: the records are all the gateway knows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import grpc
import orjson
import pytest
from google.protobuf import field_mask_pb2, json_format

from gateway.core.catalog.catalog import Catalog, CatalogHolder
from gateway.core.model.registry import REGISTRY, Registry, Resource, Subresource
from gateway.core.upstream.config import UpstreamConfig
from gateway.grpc.gen.kubegateway.v1 import common_pb2, meta_pb2, resource_pb2
from gateway.grpc.gen.kubegateway.v1 import resource_pb2_grpc as services
from tests.e2e.apiserver import KubeAPIServer
from tests.scenarios.grpc_backend import GrpcBackend, serve_backend

R = resource_pb2
Event = common_pb2.WatchEvent
STEP = 15.0  # seconds any single expected event may take (bounded waits, never sleeps)

CONFIGMAPS = Resource(
    group="",
    version="v1",
    kind="ConfigMap",
    plural="configmaps",
    singular="configmap",
    namespaced=True,
    short_names=("cm",),
)
_READ_WRITE = frozenset(("get", "update", "patch"))
DEPLOYMENTS = Resource(
    group="apps",
    version="v1",
    kind="Deployment",
    plural="deployments",
    singular="deployment",
    namespaced=True,
    short_names=("deploy",),
    subresources=MappingProxyType(
        {
            "status": Subresource("status", _READ_WRITE),
            "scale": Subresource("scale", _READ_WRITE),
        }
    ),
)
CM = {"group": "", "version": "v1", "resource": "configmaps"}
DEPLOY = {"group": "apps", "version": "v1", "resource": "deployments"}


@pytest.fixture
async def backend(kube_apiserver: KubeAPIServer) -> AsyncIterator[GrpcBackend]:
    cfg = UpstreamConfig(
        server=kube_apiserver.url, source="e2e", ca_file=Path(kube_apiserver.ca_file)
    )
    catalog = CatalogHolder(Catalog(Registry((*REGISTRY.values(), CONFIGMAPS, DEPLOYMENTS))))
    async with serve_backend(
        "apiserver", cfg, dict(kube_apiserver.tokens), alice_reads_images=True, catalog=catalog
    ) as gateway:
        yield gateway


def obj(answer: Any) -> dict[str, Any]:
    which = answer.WhichOneof("representation")
    if which == "struct":
        return json_format.MessageToDict(answer.struct)
    decoded = orjson.loads(answer.json)
    assert isinstance(decoded, dict)
    return decoded


async def test_a_configmap_through_the_generic_service(backend: GrpcBackend) -> None:
    svc, ns, auth = services.ResourceServiceStub(backend.channel), backend.namespace, backend.auth()
    name, label = backend.unique("cm"), backend.unique("generic")
    one = {**CM, "namespace": ns, "name": name}
    created = obj(
        await svc.Create(
            R.CreateResourceRequest(
                **CM,
                namespace=ns,
                # no apiVersion or kind: the gateway fills them in from the record
                object=R.ResourceObject(
                    json=orjson.dumps(
                        {"metadata": {"name": name, "labels": {"g": label}}, "data": {"a": "1"}}
                    )
                ),
            ),
            metadata=auth,
        )
    )
    assert created["kind"] == "ConfigMap" and created["data"] == {"a": "1"}

    got = await svc.Get(
        R.GetResourceRequest(**one, representation=R.REPRESENTATION_STRUCT), metadata=auth
    )
    assert got.WhichOneof("representation") == "struct"
    assert obj(got)["metadata"]["uid"] == created["metadata"]["uid"]
    masked = await svc.Get(
        R.GetResourceRequest(
            **one, read_mask=field_mask_pb2.FieldMask(paths=["data", "metadata.name"])
        ),
        metadata=auth,
    )
    assert obj(masked) == {"metadata": {"name": name}, "data": {"a": "1"}}

    listed = await svc.List(
        R.ListResourcesRequest(**CM, namespace=ns, label_selector=f"g={label}"), metadata=auth
    )
    assert [obj(i)["metadata"]["name"] for i in listed.items] == [name]
    assert listed.kind == "ConfigMapList" and listed.metadata.resourceVersion

    watch = svc.Watch(
        R.WatchResourcesRequest(
            **CM,
            namespace=ns,
            label_selector=f"g={label}",
            resource_version=listed.metadata.resourceVersion,
        ),
        metadata=auth,
    )
    events = watch.__aiter__()

    async def next_event() -> tuple[str, dict[str, Any]]:
        async with asyncio.timeout(STEP):
            event = await anext(events)
        return Event.Type.Name(event.type), obj(event.object)

    def patch(patch_type: int, doc: Any, **extra: Any) -> Any:
        return R.PatchResourceRequest(
            **one, patch_type=patch_type, patch=orjson.dumps(doc), **extra
        )

    merged = obj(
        await svc.Patch(patch(common_pb2.PATCH_TYPE_MERGE, {"data": {"b": "2"}}), metadata=auth)
    )
    assert merged["data"] == {"a": "1", "b": "2"}
    jsoned = obj(
        await svc.Patch(
            patch(common_pb2.PATCH_TYPE_JSON, [{"op": "add", "path": "/data/c", "value": "3"}]),
            metadata=auth,
        )
    )
    assert jsoned["data"]["c"] == "3"
    smp = obj(
        await svc.Patch(
            patch(common_pb2.PATCH_TYPE_STRATEGIC_MERGE, {"data": {"d": "4"}}), metadata=auth
        )
    )
    assert smp["data"] == {"a": "1", "b": "2", "c": "3", "d": "4"}
    applied = obj(
        await svc.Patch(
            patch(
                common_pb2.PATCH_TYPE_APPLY,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns},
                    "data": {"e": "5"},
                },
                field_manager="generic-e2e",
                force=True,
            ),
            metadata=auth,
        )
    )
    assert applied["data"]["e"] == "5"
    assert "generic-e2e" in {m["manager"] for m in applied["metadata"]["managedFields"]}

    seen = [await next_event() for _ in range(4)]
    assert [t for t, _ in seen] == ["MODIFIED"] * 4
    assert seen[-1][1]["data"]["e"] == "5"

    deleted = await svc.Delete(R.DeleteResourceRequest(**one), metadata=auth)
    assert deleted.WhichOneof("result") in ("object", "status")
    kind, last = await next_event()
    assert (kind, last["metadata"]["name"]) == ("DELETED", name)
    watch.cancel()
    missing = await _fails(svc.Get(R.GetResourceRequest(**one), metadata=auth))
    assert missing.code() == grpc.StatusCode.NOT_FOUND


async def test_a_deployment_and_its_scale_subresource(backend: GrpcBackend) -> None:
    svc, ns, auth = services.ResourceServiceStub(backend.channel), backend.namespace, backend.auth()
    name = backend.unique("web")
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }
    await svc.Create(
        R.CreateResourceRequest(
            **DEPLOY, namespace=ns, object=R.ResourceObject(json=orjson.dumps(manifest))
        ),
        metadata=auth,
    )
    one = {**DEPLOY, "namespace": ns, "name": name}
    scale = obj(await svc.Get(R.GetResourceRequest(**one, subresource="scale"), metadata=auth))
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1
    scaled = obj(
        await svc.Patch(
            R.PatchResourceRequest(
                **one,
                subresource="scale",
                patch_type=common_pb2.PATCH_TYPE_MERGE,
                patch=b'{"spec": {"replicas": 3}}',
            ),
            metadata=auth,
        )
    )
    assert scaled["spec"]["replicas"] == 3
    got = obj(await svc.Get(R.GetResourceRequest(**one), metadata=auth))
    assert got["spec"]["replicas"] == 3
    # nobody may list deployments
    denied = await _fails(
        svc.List(
            R.ListResourcesRequest(**DEPLOY, namespace=backend.other_namespace),
            metadata=backend.auth("nobody"),
        )
    )
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    await svc.Delete(
        R.DeleteResourceRequest(
            **one, options=meta_pb2.DeleteOptions(propagationPolicy="Background")
        ),
        metadata=auth,
    )


async def _fails(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    return failed.value
