"""The watch hub against the real kube-apiserver, through ``kube-gateway serve``'s two front
ends: shared watches across identities admitted by the cluster's own RBAC (revoked
mid-stream by deleting a RoleBinding), and a namespace of 5,000 pods on every transport."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
from websockets.asyncio.client import connect

from gateway.grpc.gen.kubegateway.v1 import (
    common_pb2,
    leases_pb2,
    leases_pb2_grpc,
    pods_pb2,
    pods_pb2_grpc,
)
from tests.e2e.apiserver import KubeAPIServer
from tests.support.graphql import SSE, TransportWS, serve_app

STEP = 60.0
_names = itertools.count()

WATCH_LEASES = """subscription($ns: String) {
  watchLeases(namespace: $ns) { type object { metadata { name } } }
}"""
WATCH_PODS = """subscription($ns: String) {
  watchPods(namespace: $ns, sendInitialEvents: true) { type object { metadata { name } } }
}"""


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{id(_names) % 997}"


@contextlib.asynccontextmanager
async def gateway(kube: KubeAPIServer, **settings: Any) -> AsyncIterator[tuple[str, Any]]:
    async with serve_app(kube.gateway_settings(**settings)) as (url, app):
        yield url, app


@contextlib.asynccontextmanager
async def ws_as(url: str, token: str) -> AsyncIterator[TransportWS]:
    ws_url = url.replace("http://", "ws://") + "/graphql"
    async with connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        client = TransportWS(ws)
        await client.send(
            {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
        )
        assert (await client.recv())["type"] == "connection_ack"
        yield client


def auth(kube: KubeAPIServer, identity: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {kube.tokens[identity]}"),)


async def test_shared_watches_admit_by_rbac_and_end_a_subscriber_whose_right_is_revoked(
    kube_apiserver: KubeAPIServer,
) -> None:
    kube = kube_apiserver
    ns = "team-b"
    role = unique("hub-reader")
    lease = unique("shared")
    admin = kube.headers("admin")
    async with httpx.AsyncClient(
        base_url=kube.url, verify=kube.ssl_context(), headers=admin, timeout=30
    ) as api:
        rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
        made = await api.post(
            f"{rbac}/roles",
            json={
                "metadata": {"name": role},
                "rules": [
                    {
                        "apiGroups": ["coordination.k8s.io"],
                        "resources": ["leases"],
                        "verbs": ["list", "watch"],
                    }
                ],
            },
        )
        assert made.status_code == 201, made.text
        created = await api.post(
            f"{rbac}/rolebindings",
            json={
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "nobody"}
                ],
            },
        )
        assert created.status_code == 201, created.text
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
        await api.post(leases, json={"metadata": {"name": lease}, "spec": {}})

        async with (
            gateway(
                kube,
                shared_watches=True,
                token_file=kube.token_files["admin"],  # the gateway's own credential
                access_recheck_seconds=1.0,
            ) as (url, app),
            grpc.aio.insecure_channel(f"127.0.0.1:{app.state.runtime.grpc_port}") as channel,
            ws_as(url, kube.tokens["nobody"]) as ws,
        ):
            stub = leases_pb2_grpc.LeaseServiceStub(channel)
            hub = app.state.runtime.cluster.watches
            mine = stub.Watch(
                leases_pb2.WatchLeasesRequest(namespace=ns), metadata=auth(kube, "admin")
            )
            theirs = stub.Watch(
                leases_pb2.WatchLeasesRequest(namespace=ns), metadata=auth(kube, "nobody")
            )
            mine_events, their_events = mine.__aiter__(), theirs.__aiter__()
            op = await ws.subscribe(WATCH_LEASES, {"ns": ns})
            async with asyncio.timeout(STEP):
                assert (await anext(mine_events)).lease.metadata.name == lease
                assert (await anext(their_events)).lease.metadata.name == lease
            event = (await ws.next(op, timeout=STEP))["data"]["watchLeases"]
            assert event["object"]["metadata"]["name"] == lease
            assert hub.stats.upstream_watches == 1  # two identities, one upstream watch

            # alice has no right to every namespace: refused as the apiserver refuses it
            everywhere = stub.Watch(leases_pb2.WatchLeasesRequest(), metadata=auth(kube, "alice"))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async with asyncio.timeout(STEP):
                    await anext(everywhere.__aiter__())
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED

            # the RoleBinding goes: nobody's subscriptions end with FORBIDDEN within 60 s
            gone = await api.delete(f"{rbac}/rolebindings/{role}")
            assert gone.status_code == 200, gone.text
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                async with asyncio.timeout(STEP):
                    async for _ in their_events:
                        pass
            assert ended.value.code() == grpc.StatusCode.PERMISSION_DENIED
            message = await ws.recv(timeout=STEP)
            assert message["id"] == op and message["type"] == "next", message
            assert message["payload"]["errors"][0]["extensions"]["code"] == "FORBIDDEN"
            # admin's subscription is untouched
            await api.post(leases, json={"metadata": {"name": f"{lease}-2"}, "spec": {}})
            async with asyncio.timeout(STEP):
                assert (await anext(mine_events)).lease.metadata.name == f"{lease}-2"
            mine.cancel()
        await api.delete(f"{rbac}/roles/{role}")
        await api.delete(f"{leases}/{lease}")
        await api.delete(f"{leases}/{lease}-2")


async def test_5000_pods_arrive_whole_on_every_transport_then_a_change(
    kube_apiserver: KubeAPIServer,
) -> None:
    kube = kube_apiserver
    ns = unique("big")
    count = 5000
    async with httpx.AsyncClient(
        base_url=kube.url,
        verify=kube.ssl_context(),
        headers=kube.headers("admin"),
        timeout=60,
        limits=httpx.Limits(max_connections=16),
    ) as api:
        made = await api.post("/api/v1/namespaces", json={"metadata": {"name": ns}})
        assert made.status_code == 201, made.text
        limit = asyncio.Semaphore(16)

        async def create(i: int) -> None:
            body = {
                "metadata": {"name": f"p{i:05}"},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/c:1"}]},
            }
            async with limit:
                response = await api.post(f"/api/v1/namespaces/{ns}/pods", json=body)
            assert response.status_code == 201, response.text

        await asyncio.gather(*(create(i) for i in range(count)))
        expected = {f"p{i:05}" for i in range(count)}
        admin = kube.tokens["admin"]

        async with gateway(kube) as (url, app):
            ready = [asyncio.Event() for _ in range(3)]
            live = asyncio.Event()

            async def over_ws() -> set[str]:
                async with ws_as(url, admin) as ws:
                    op = await ws.subscribe(WATCH_PODS, {"ns": ns})
                    seen = set()
                    for _ in range(count):
                        event = (await ws.next(op, timeout=STEP))["data"]["watchPods"]
                        assert event["type"] == "ADDED", event
                        seen.add(event["object"]["metadata"]["name"])
                    event = (await ws.next(op, timeout=STEP))["data"]["watchPods"]
                    assert event["type"] == "BOOKMARK"  # k8s.io/initial-events-end
                    ready[0].set()
                    await live.wait()
                    event = (await ws.next(op, timeout=STEP))["data"]["watchPods"]
                    assert event["object"]["metadata"]["name"] == "late"
                    return seen

            async def over_sse() -> set[str]:
                async with (
                    httpx.AsyncClient(base_url=url, timeout=STEP) as client,
                    client.stream(
                        "POST",
                        "/graphql",
                        json={"query": WATCH_PODS, "variables": {"ns": ns}},
                        headers={
                            "Accept": "text/event-stream",
                            "Authorization": f"Bearer {admin}",
                        },
                    ) as response,
                ):
                    sse = SSE(response)
                    seen = set()
                    for _ in range(count):
                        _, payload = await sse.event(timeout=STEP)
                        seen.add(payload["data"]["watchPods"]["object"]["metadata"]["name"])
                    _, payload = await sse.event(timeout=STEP)
                    assert payload["data"]["watchPods"]["type"] == "BOOKMARK"
                    ready[1].set()
                    await live.wait()
                    _, payload = await sse.event(timeout=STEP)
                    assert payload["data"]["watchPods"]["object"]["metadata"]["name"] == "late"
                    return seen

            async def over_grpc() -> set[str]:
                port = app.state.runtime.grpc_port
                async with grpc.aio.insecure_channel(
                    f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]
                ) as channel:
                    call = pods_pb2_grpc.PodServiceStub(channel).Watch(
                        pods_pb2.WatchPodsRequest(
                            namespace=ns,
                            send_initial_events=True,
                            resource_version_match="NotOlderThan",
                            allow_watch_bookmarks=True,
                        ),
                        metadata=(("authorization", f"Bearer {admin}"),),
                    )
                    events = call.__aiter__()
                    seen = set()
                    async with asyncio.timeout(STEP):
                        for _ in range(count):
                            event = await anext(events)
                            assert event.type == common_pb2.WatchEvent.ADDED
                            seen.add(event.pod.metadata.name)
                        assert (await anext(events)).type == common_pb2.WatchEvent.BOOKMARK
                    ready[2].set()
                    await live.wait()
                    async with asyncio.timeout(STEP):
                        event = await anext(events)
                    assert event.pod.metadata.name == "late"
                    call.cancel()
                    return seen

            readers = [asyncio.create_task(f()) for f in (over_ws, over_sse, over_grpc)]
            async with asyncio.timeout(STEP * 3):
                await asyncio.gather(*(r.wait() for r in ready))
            late = {
                "metadata": {"name": "late"},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }
            response = await api.post(f"/api/v1/namespaces/{ns}/pods", json=late)
            assert response.status_code == 201, response.text
            live.set()
            results = await asyncio.gather(*readers)
            assert all(seen == expected for seen in results)
            assert app.state.runtime.cluster.watches.stats.upstream_watches == 1
        await api.delete(f"/api/v1/namespaces/{ns}")


async def test_a_subscriber_resuming_from_before_the_history_catches_up_exactly(
    kube_apiserver: KubeAPIServer,
) -> None:
    """A gRPC subscriber resuming from a version the hub's history no longer holds is replayed
    exactly what followed it, from the apiserver's own watch cache, on a watch of its own,
    then handed over to the shared watch: no RESYNC, no duplicate."""
    kube = kube_apiserver
    ns = "team-b"
    names = [unique("catch") for _ in range(6)]
    async with (
        httpx.AsyncClient(
            base_url=kube.url, verify=kube.ssl_context(), headers=kube.headers("admin"), timeout=30
        ) as api,
        gateway(kube) as (url, app),
        grpc.aio.insecure_channel(f"127.0.0.1:{app.state.runtime.grpc_port}") as channel,
        ws_as(url, kube.tokens["admin"]) as ws,
    ):
        hub = app.state.runtime.cluster.watches
        hub.history = 3  # the shared watch keeps only the last three events
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
        # from the namespace's version now: every lease created after is delivered, however
        # late the subscription is set up
        listed = await api.get(leases)
        assert listed.status_code == 200, listed.text
        op = await ws.subscribe(
            """subscription($ns: String, $rv: String) {
              watchLeases(namespace: $ns, resourceVersion: $rv) {
                type object { metadata { name } } } }""",
            {"ns": ns, "rv": listed.json()["metadata"]["resourceVersion"]},
        )
        rvs = []
        for name in names:
            made = await api.post(leases, json={"metadata": {"name": name}, "spec": {}})
            assert made.status_code == 201, made.text
            rvs.append(made.json()["metadata"]["resourceVersion"])
        seen = [
            (await ws.next(op, timeout=STEP))["data"]["watchLeases"]["object"]["metadata"]["name"]
            for _ in names
        ]
        assert seen == names

        stub = leases_pb2_grpc.LeaseServiceStub(channel)
        late = stub.Watch(
            leases_pb2.WatchLeasesRequest(namespace=ns, resource_version=rvs[0]),
            metadata=auth(kube, "admin"),
        )
        events = late.__aiter__()
        async with asyncio.timeout(STEP):
            caught = [await anext(events) for _ in names[1:]]
        assert [(e.type, e.lease.metadata.name) for e in caught] == [
            (common_pb2.WatchEvent.ADDED, name) for name in names[1:]
        ]
        assert hub.stats.catch_ups == 1
        last = unique("catch")
        made = await api.post(leases, json={"metadata": {"name": last}, "spec": {}})
        assert made.status_code == 201, made.text
        async with asyncio.timeout(STEP):
            after = await anext(events)
        assert (after.type, after.lease.metadata.name) == (common_pb2.WatchEvent.ADDED, last)
        event = (await ws.next(op, timeout=STEP))["data"]["watchLeases"]
        assert event["object"]["metadata"]["name"] == last
        late.cancel()
