# ruff: noqa: E501  (GraphQL documents read best on one line)
"""A CRD installed while the gateway runs gets its API group's GraphQL schema
(``/apis/<group>/graphql``), receives events on a subscription there, and disappears when
deleted: discovery, the catalog reload and the live schema
together, against the real kube-apiserver, with the gateway's own discovery identity."""

from __future__ import annotations

import time
from typing import Any

import grpc
import httpx
import orjson
import pytest

from gateway.graphql.schemas.schema import group_scopes
from gateway.grpc.gen.kubegateway.v1 import common_pb2, resource_pb2
from gateway.grpc.gen.kubegateway.v1 import resource_pb2_grpc as services
from gateway.settings import Settings
from tests.e2e.apiserver import KubeAPIServer
from tests.e2e.test_discovered_graphql_e2e import _message_of, _next_of, _ws
from tests.support.graphql import serve_app

pytestmark = pytest.mark.e2e

GROUP = "live.kube-gateway.dev"
PATH = f"/apis/{GROUP}/graphql"


def sprocket_crd(group: str = GROUP) -> dict[str, Any]:
    """A namespaced ``Sprocket`` kind (``spec.teeth``) in ``group``; a ``*.k8s.io`` group
    carries the API-approval annotation such a CRD needs."""
    annotations = {"api-approved.kubernetes.io": "unapproved, testing only"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"sprockets.{group}",
            **({"annotations": annotations} if group.endswith(".k8s.io") else {}),
        },
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "sprockets", "singular": "sprocket", "kind": "Sprocket"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"teeth": {"type": "integer"}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def _serves(plural: str) -> Any:
    return lambda built: any(r.plural == plural for r in built.registry.values())


async def test_a_crd_installed_while_running_is_served_then_removed(
    kube_apiserver: KubeAPIServer,
) -> None:
    kube = kube_apiserver
    settings = Settings(
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        server=kube.url,
        ca_file=kube.ca_file,
        discovery_token_file=kube.token_files["admin"],
        log_level="warning",
    )
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    async with (
        httpx.AsyncClient(
            base_url=kube.url, verify=kube.ssl_context(), headers=kube.headers("admin"), timeout=60
        ) as admin,
        serve_app(settings) as (url, app),
        httpx.AsyncClient(base_url=url, headers=kube.headers("admin"), timeout=60) as gql,
    ):
        live = app.state.runtime.live_schema
        first = await live.wait_until(_serves("deployments"))
        assert not _serves("sprockets")(first)
        assert (await gql.post(PATH, json={"query": "{ __typename }"})).status_code == 404

        started = time.monotonic()
        created = await admin.post(crds, json=sprocket_crd())
        assert created.status_code == 201, created.text
        await live.wait_catalog(lambda catalog: GROUP in group_scopes(catalog))
        fields = (
            await gql.post(PATH, json={"query": '{ __type(name: "SprocketSpec") { fields { name } } }'})
        ).json()  # fmt: skip
        print(f"CRD served over GraphQL {time.monotonic() - started:.1f}s after its creation")
        assert fields["data"]["__type"]["fields"] == [{"name": "teeth"}, {"name": "raw"}]
        # /graphql is not rebuilt for a custom resource: the built-in API is unchanged.
        assert live.current is first

        async with _ws(url, kube.tokens["admin"], PATH) as ws:
            op = await ws.subscribe(
                'subscription { watchSprockets(namespace: "team-a") '
                "{ type object { metadata { name } spec { teeth } } } }"
            )
            made = await admin.post(
                f"/apis/{GROUP}/v1/namespaces/team-a/sprockets",
                json={"apiVersion": f"{GROUP}/v1", "kind": "Sprocket",
                      "metadata": {"name": "s1"}, "spec": {"teeth": 12}},
            )  # fmt: skip
            assert made.status_code == 201, made.text
            event = (await _next_of(ws, op))["watchSprockets"]
            assert (event["type"], event["object"]["spec"]["teeth"]) == ("ADDED", 12)

            # The generic gRPC service serves the same discovered kind, no code for it.
            address = {"group": GROUP, "version": "v1", "resource": "sprockets"}
            auth = (("authorization", f"Bearer {kube.tokens['admin']}"),)
            port = app.state.runtime.grpc_port
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = services.ResourceServiceStub(channel)
                listed = await stub.List(
                    resource_pb2.ListResourcesRequest(**address, namespace="team-a"), metadata=auth
                )
                assert [orjson.loads(i.json)["spec"] for i in listed.items] == [{"teeth": 12}]
                patched = await stub.Patch(
                    resource_pb2.PatchResourceRequest(
                        **address, namespace="team-a", name="s1",
                        patch_type=common_pb2.PATCH_TYPE_MERGE, patch=b'{"spec":{"teeth":13}}',
                    ),
                    metadata=auth,
                )  # fmt: skip
                assert orjson.loads(patched.json)["spec"] == {"teeth": 13}
                event = (await _next_of(ws, op))["watchSprockets"]
                assert (event["type"], event["object"]["spec"]["teeth"]) == ("MODIFIED", 13)

            deleted = time.monotonic()
            assert (await admin.delete(f"{crds}/sprockets.{GROUP}")).status_code == 200
            await live.wait_catalog(lambda catalog: GROUP not in group_scopes(catalog))
            print(f"CRD gone from GraphQL {time.monotonic() - deleted:.1f}s after its deletion")
            # The subscription ends with NOT_FOUND: from the schema swap, or first from the
            # upstream watch that the apiserver closed when it stopped serving the kind.
            message = await _message_of(ws, op)
            while message["type"] == "next" and "data" in message["payload"]:
                assert message["payload"]["data"]["watchSprockets"]["type"] == "DELETED"
                message = await _message_of(ws, op)
            assert message["type"] in ("next", "error"), message
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await services.ResourceServiceStub(channel).Get(
                    resource_pb2.GetResourceRequest(**address, namespace="team-a", name="s1"),
                    metadata=auth,
                )
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND
            assert "does not serve 'sprockets'" in (refused.value.details() or "")
        gone = await gql.post(PATH, json={"query": '{ __type(name: "Sprocket") { name } }'})
        assert gone.status_code == 404
