"""Both front ends are generated from the core's operations table, and answer alike.

The gRPC methods and the GraphQL root fields of every resource are exactly the operations
:func:`gateway.core.calls.operations.operations` lists; a call that breaks a core rule (here: a
namespaced object without a namespace) gets the same refusal on both transports.
"""

from __future__ import annotations

from collections import Counter

import grpc
import httpx
import orjson
import pytest

from gateway.core.calls.operations import ACTIONS, Action, Operation, operations
from gateway.core.model.registry import POD, REGISTRY
from gateway.graphql import gateway_schema
from gateway.grpc.contract import contract, service_name
from gateway.grpc.gen.kubegateway.v1 import events_pb2
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import error_of, gql, serve_gateway
from tests.support.grpc import ADMIN, bearer, details, serve_grpc

#: GraphQL root fields each action contributes (a create and a replace also take manifests;
#: a log is read by a query and followed by a subscription).
FIELDS_PER_ACTION: dict[Action, int] = {
    "get": 1,
    "list": 2,  # the list and its view (docs/views.md)
    "watch": 1,
    "create": 2,
    "replace": 2,
    "patch": 1,
    "delete": 1,
    "deletecollection": 1,
    "log": 2,
}


def test_pod_operations_are_the_table() -> None:
    names = [op.name for op in operations(POD)]
    assert names == [
        "Get",
        "List",
        "Watch",
        "Create",
        "Replace",
        "Patch",
        "Delete",
        "DeleteCollection",
        "GetLog",
        "GetStatus",
        "ReplaceStatus",
        "PatchStatus",
        "GetEphemeralContainers",
        "ReplaceEphemeralContainers",
        "PatchEphemeralContainers",
    ]
    streaming = {op.name for op in operations(POD) if op.streaming}
    assert streaming == {"Watch", "GetLog"}
    assert {op.name: op.verb for op in operations(POD)}["ReplaceStatus"] == "update"
    assert set(FIELDS_PER_ACTION) == set(ACTIONS)


@pytest.mark.parametrize("key", sorted(REGISTRY))
def test_grpc_methods_are_the_operations(key: str) -> None:
    r = REGISTRY[key]
    service = next(s for s in contract().services if s.name == service_name(r))
    assert [rpc.operation for rpc in service.rpcs] == list(operations(r))


def test_graphql_root_fields_are_the_operations() -> None:
    schema = gateway_schema()
    roots = [schema.get_type_by_name(n) for n in ("Query", "Mutation", "Subscription")]
    generated = {f.name for t in roots if t is not None for f in t.fields}  # type: ignore[attr-defined]
    # The gateway's own field (the served clusters), beside the operations' root fields.
    assert "clusters" in generated
    generated.remove("clusters")
    expected = sum(FIELDS_PER_ACTION[op.action] for r in REGISTRY.values() for op in operations(r))
    assert len(generated) == expected
    # Pod's fields, spelled out: the naming rules of gateway/graphql/resolvers/operations.py.
    pod = {n for n in generated if "Pod" in n or n.startswith("pod")}
    assert pod == {
        "pod",
        "pods",
        "podsView",
        "watchPods",
        "createPod",
        "createPodFromManifest",
        "replacePod",
        "replacePodFromManifest",
        "patchPod",
        "deletePod",
        "deletePodCollection",
        "podLog",
        "followPodLog",
        "podStatus",
        "replacePodStatus",
        "replacePodStatusFromManifest",
        "patchPodStatus",
        "podEphemeralContainers",
        "replacePodEphemeralContainers",
        "replacePodEphemeralContainersFromManifest",
        "patchPodEphemeralContainers",
    }


def test_every_action_is_used_and_named_once() -> None:
    ops = [op for r in REGISTRY.values() for op in operations(r)]
    assert {op.action for op in ops} == set(ACTIONS)
    for r in REGISTRY.values():
        counts = Counter(op.name for op in operations(r))
        assert max(counts.values()) == 1, counts


def test_namespace_rule() -> None:
    event = REGISTRY.lookup("events")
    create, get, watch = (Operation(event, a) for a in ("create", "get", "watch"))
    assert create.namespace(None, {"metadata": {"namespace": "demo"}}) == "demo"
    assert create.namespace("other", {"metadata": {"namespace": "demo"}}) == "other"
    assert watch.namespace("") is None  # every namespace
    assert get.namespace("demo") == "demo"
    image = Operation(REGISTRY.lookup("images"), "get")
    assert image.namespace("demo") is None  # cluster-scoped


async def test_missing_namespace_is_refused_alike_on_both_transports() -> None:
    manifest = {
        "metadata": {"name": "no-namespace"},
        "involvedObject": {"kind": "Pod", "name": "x"},
        "reason": "Test",
    }
    async with (
        DemoUpstream() as demo,
        serve_gateway(demo) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as client,
    ):
        err = error_of(
            await gql(
                client,
                "mutation($m: JSON!) { createEventFromManifest(manifest: $m) "
                "{ metadata { name } } }",
                {"m": manifest},
                token=ADMIN,
            )
        )
        async with serve_grpc(demo) as gw:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gw.stub("events").Create(
                    events_pb2.CreateEventRequest(raw_json=orjson.dumps(manifest)),
                    metadata=bearer(ADMIN),
                )
        # Refused before any upstream call: nothing was created anywhere.
        listed = await gql(
            client,
            '{ events(fieldSelector: "metadata.name=no-namespace") '
            "{ items { metadata { name } } } }",
            token=ADMIN,
        )
    ext = err["extensions"]
    assert (ext["code"], ext["httpStatus"]) == ("INVALID", 422)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == err["message"]
    assert err["message"] == "Event is namespaced: namespace or metadata.namespace is required"
    violations = details(caught.value)["BadRequest"].field_violations
    assert [v.field for v in violations] == [c["field"] for c in ext["causes"]] == ["namespace"]
    assert listed == {"data": {"events": {"items": []}}}
