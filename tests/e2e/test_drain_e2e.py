"""Two ``kube-gateway serve`` processes on the real kube-apiserver: SIGTERM to the first ends
its subscribers (GraphQL over WebSocket, gRPC ``Watch``) with their resume points; they
resubscribe on the second from there and see every change exactly once, in order."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from websockets.asyncio.client import connect

from gateway.grpc.gen.kubegateway.v1 import common_pb2, leases_pb2, leases_pb2_grpc
from tests.e2e.apiserver import KubeAPIServer
from tests.support.graphql import TransportWS
from tests.support.grpc import details
from tests.support.serve_process import Served, serve_process_async

STEP = 60.0
_names = itertools.count()

WATCH = """subscription($ns: String, $rv: String) {
  watchLeases(namespace: $ns, resourceVersion: $rv) {
    type resourceVersion object { metadata { name } }
  }
}"""
GRPC_TYPES = {
    common_pb2.WatchEvent.ADDED: "ADDED",
    common_pb2.WatchEvent.MODIFIED: "MODIFIED",
    common_pb2.WatchEvent.DELETED: "DELETED",
}

Change = tuple[str, str]  # (type, lease name)


class Cluster:
    """Changes to leases of one namespace, made with the admin token, as they happen."""

    def __init__(self, http: httpx.AsyncClient, namespace: str) -> None:
        self.http = http
        self.ns = namespace
        self.base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.changes: list[Change] = []

    async def create(self, name: str) -> None:
        body = {"metadata": {"name": name}, "spec": {"holderIdentity": "a"}}
        r = await self.http.post(self.base, json=body)
        assert r.status_code == 201, r.text
        self.changes.append(("ADDED", name))

    async def modify(self, name: str) -> None:
        r = await self.http.patch(
            f"{self.base}/{name}",
            content=b'{"spec": {"holderIdentity": "b"}}',
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status_code == 200, r.text
        self.changes.append(("MODIFIED", name))

    async def delete(self, name: str) -> None:
        r = await self.http.delete(f"{self.base}/{name}")
        assert r.status_code == 200, r.text
        self.changes.append(("DELETED", name))


async def ws_subscribe(
    url: str, token: str, namespace: str, rv: str | None
) -> tuple[TransportWS, str, contextlib.AsyncExitStack]:
    stack = contextlib.AsyncExitStack()
    socket = await stack.enter_async_context(
        connect(url.replace("http://", "ws://") + "/graphql", subprotocols=["graphql-transport-ws"])  # type: ignore[list-item]
    )
    ws = TransportWS(socket)
    await ws.send({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
    assert (await ws.recv(STEP))["type"] == "connection_ack"
    op = await ws.subscribe(WATCH, {"ns": namespace, "rv": rv})
    return ws, op, stack


async def ws_read(ws: TransportWS, op: str, seen: list[Change], until: int) -> None:
    """Read changes until ``until`` were seen in all."""
    while len(seen) < until:
        event = (await ws.next(op, STEP))["data"]["watchLeases"]
        seen.append((event["type"], event["object"]["metadata"]["name"]))


async def ws_read_to_completion(ws: TransportWS, op: str, seen: list[Change]) -> str:
    """Read changes until the drain's completion; returns its ``resumeFrom``."""
    while True:
        payload = await ws.next(op, STEP)
        if payload.get("data") is None:
            extensions = payload["extensions"]
            assert extensions["reason"] == "DRAINING", payload
            assert await ws.recv(STEP) == {"id": op, "type": "complete"}
            resume: str = extensions["resumeFrom"]
            assert resume
            return resume
        event = payload["data"]["watchLeases"]
        seen.append((event["type"], event["object"]["metadata"]["name"]))


def grpc_watch(channel: grpc.aio.Channel, token: str, namespace: str, rv: str = "") -> Any:
    stub = leases_pb2_grpc.LeaseServiceStub(channel)
    return stub.Watch(
        leases_pb2.WatchLeasesRequest(namespace=namespace, resource_version=rv),
        metadata=(("authorization", f"Bearer {token}"),),
    )


async def grpc_read(call: Any, seen: list[Change], until: int) -> None:
    while len(seen) < until:
        event = await call.read()
        seen.append((GRPC_TYPES[event.type], event.lease.metadata.name))


async def grpc_read_to_completion(call: Any, seen: list[Change]) -> str:
    """Read changes until the stream ends with the drain's status; returns its version."""
    while True:
        try:
            event = await call.read()
        except grpc.aio.AioRpcError as ended:
            assert ended.code() == grpc.StatusCode.UNAVAILABLE, ended
            resume: str = details(ended)["ErrorInfo"].metadata["resourceVersion"]
            assert resume
            return resume
        seen.append((GRPC_TYPES[event.type], event.lease.metadata.name))


@contextlib.asynccontextmanager
async def gateway(home: Path, kube: KubeAPIServer) -> AsyncIterator[Served]:
    args = ("--server", kube.url, "--ca-file", kube.ca_file, "--drain-seconds", "60")
    async with serve_process_async(home, *args) as served:
        yield served


@pytest.mark.timeout(600)
async def test_subscribers_move_to_another_gateway_after_sigterm_without_loss_or_duplicate(
    kube_apiserver: KubeAPIServer, tmp_path: Path
) -> None:
    kube = kube_apiserver
    token = kube.tokens["admin"]
    namespace = f"drain-{next(_names)}-{id(_names) % 997}"
    async with (
        httpx.AsyncClient(
            base_url=kube.url, verify=kube.ssl_context(), headers=kube.headers("admin")
        ) as http,
        gateway(tmp_path, kube) as a,
        gateway(tmp_path, kube) as b,
        grpc.aio.insecure_channel(a.grpc) as channel_a,
        grpc.aio.insecure_channel(b.grpc) as channel_b,
    ):
        r = await http.post("/api/v1/namespaces", json={"metadata": {"name": namespace}})
        assert r.status_code == 201, r.text
        cluster = Cluster(http, namespace)
        ws_seen: list[Change] = []
        grpc_seen: list[Change] = []

        # Both subscribe on A (from now: the namespace is empty) and see a first batch.
        ws, op, ws_stack = await ws_subscribe(a.http, token, namespace, None)
        async with ws_stack:
            call = grpc_watch(channel_a, token, namespace)
            await cluster.create("l0")  # also proves both subscriptions are live
            await asyncio.gather(ws_read(ws, op, ws_seen, 1), grpc_read(call, grpc_seen, 1))
            for name in ("l1", "l2"):
                await cluster.create(name)
            await cluster.modify("l0")
            await asyncio.gather(ws_read(ws, op, ws_seen, 4), grpc_read(call, grpc_seen, 4))

            # More changes, some maybe still on their way to the subscribers, then SIGTERM.
            await cluster.create("l3")
            await cluster.modify("l1")
            await cluster.delete("l2")
            a.proc.send_signal(signal.SIGTERM)
            ws_rv, grpc_rv = await asyncio.gather(
                ws_read_to_completion(ws, op, ws_seen), grpc_read_to_completion(call, grpc_seen)
            )
        assert await asyncio.to_thread(a.proc.wait) == 0

        # Changes while nobody is subscribed, then both resume on B where they stopped.
        await cluster.create("l4")
        await cluster.delete("l0")
        ws, op, ws_stack = await ws_subscribe(b.http, token, namespace, ws_rv)
        async with ws_stack:
            call = grpc_watch(channel_b, token, namespace, grpc_rv)
            await cluster.create("l5")
            await cluster.modify("l3")
            await cluster.create("end")  # the last change: nothing may follow it
            total = len(cluster.changes)
            await asyncio.gather(ws_read(ws, op, ws_seen, total), grpc_read(call, grpc_seen, total))
            call.cancel()

    assert ws_seen == cluster.changes
    assert grpc_seen == cluster.changes
    assert "drained: no call in flight" in a.log
