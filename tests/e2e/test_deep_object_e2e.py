"""Poison objects on the real kube-apiserver: custom resources with
``x-kubernetes-preserve-unknown-fields`` holding values nested 300, 600, 1,000, 1,100 and
5,000 levels deep (the apiserver takes up to 10,000; orjson, the gateway's decoder, reads
1,024 levels and writes no more than 254).  Each is served whole (exactly as stored) in
lists, gets and watches, over GraphQL (HTTP, SSE, WebSocket) and gRPC (JSON and Struct), the
plain objects beside them as before, a watch goes on past them, and neither their decode
nor their encoding holds the event loop long."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import orjson
import pytest

from gateway.core.support import deepjson
from gateway.grpc.gen.kubegateway.v1 import resource_pb2 as R
from gateway.grpc.gen.kubegateway.v1 import resource_pb2_grpc as services
from tests.e2e.apiserver import KubeAPIServer
from tests.support.collector import frozen_heap
from tests.support.graphql import TransportWS, serve_app

pytestmark = pytest.mark.e2e

GROUP = "poison.kube-gateway.dev"
PATH = f"/apis/{GROUP}/graphql"
NS = "team-b"
DEPTHS = (300, 600, 1_000, 1_100, 5_000)
POISONS = {f"poison-{depth}": depth for depth in DEPTHS}
JSON_BODY = {"Content-Type": "application/json"}
BLOBS = {"group": GROUP, "version": "v1", "resource": "blobs"}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"blobs.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "blobs", "singular": "blob", "kind": "Blob"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"a": value}
    return value


def _blob(name: str, spec: Any) -> bytes:
    """The body, written without recursion (orjson writes no more than 254 levels)."""
    return deepjson.encode(
        {"apiVersion": f"{GROUP}/v1", "kind": "Blob", "metadata": {"name": name}, "spec": spec}
    )


async def _established(admin: httpx.AsyncClient) -> None:
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    params = {"watch": "1", "fieldSelector": f"metadata.name=blobs.{GROUP}"}
    async with admin.stream("GET", path, params=params) as response:
        async for line in response.aiter_lines():
            obj = orjson.loads(line)["object"]
            conditions = (obj.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return


@contextlib.asynccontextmanager
async def _ws(url: str, token: str) -> AsyncIterator[TransportWS]:
    from websockets.asyncio.client import connect

    async with connect(
        url.replace("http://", "ws://") + PATH,
        subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        max_size=None,
    ) as ws:
        client = TransportWS(ws)
        await client.send(
            {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
        )
        assert (await client.recv())["type"] == "connection_ack"
        yield client


async def _next(ws: TransportWS, op_id: str) -> dict[str, Any]:
    """The next payload of ``op_id``, read at any depth (orjson, the helpers' decoder,
    stops at 1,024 levels)."""
    async with asyncio.timeout(30):
        while True:
            message: dict[str, Any] = deepjson.loads(await ws.ws.recv())
            if message.get("type") not in ("ping", "pong", "ka"):
                break
    assert message.get("id") == op_id and message["type"] == "next", str(message)[:300]
    payload: dict[str, Any] = message["payload"]
    assert "errors" not in payload, str(payload)[:300]
    data: dict[str, Any] = payload["data"]
    return data


class LoopLag:
    """The longest the event loop went without running a 1 ms ticker (a stalled loop), in
    wall time (``worst``) and in the CPU the loop's thread used in one gap (``worst_cpu``:
    the loop's own work, whatever else the machine runs), the suite's own heap frozen
    meanwhile as ``serve`` freezes the gateway's (tests/support/collector.py)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.worst_cpu = 0.0
        self._task: asyncio.Task[None] | None = None
        self._frozen = frozen_heap()

    async def _tick(self) -> None:
        last, cpu = time.perf_counter(), time.thread_time()
        while True:
            await asyncio.sleep(0.001)
            now, used = time.perf_counter(), time.thread_time()
            self.worst = max(self.worst, now - last)
            self.worst_cpu = max(self.worst_cpu, used - cpu)
            last, cpu = now, used

    async def __aenter__(self) -> LoopLag:
        self._frozen.__enter__()
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._frozen.__exit__(None, None, None)


class SSE:
    """The ``next`` payloads of a GraphQL subscription over SSE, read at any depth."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def next(self) -> dict[str, Any]:
        async with asyncio.timeout(30):
            name, data = "", []
            async for line in self._lines:
                if line.startswith(":"):
                    continue
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)
                elif line == "" and name:
                    assert name == "next", (name, str(data)[:300])
                    payload: dict[str, Any] = deepjson.loads("\n".join(data))
                    assert "errors" not in payload, str(payload)[:300]
                    out: dict[str, Any] = payload["data"]
                    return out
        raise AssertionError("the SSE stream ended")


def _whole(spec: Any, depth: int) -> None:
    """``spec`` is the poison object's, exactly as the apiserver stored it."""
    assert deepjson.encode(spec) == deepjson.encode({"deep": _nested(depth)})


async def test_deep_objects_are_served_whole_and_the_watch_goes_on(
    kube_apiserver: KubeAPIServer,
) -> None:
    kube = kube_apiserver
    token = kube.tokens["admin"]
    auth = {"Authorization": f"Bearer {token}"}
    watch_query = (
        'subscription { watchBlobs(namespace: "' + NS + '") '
        "{ type object { metadata { name } spec } } }"
    )
    async with httpx.AsyncClient(
        base_url=kube.url, verify=kube.ssl_context(), headers=kube.headers("admin"), timeout=60
    ) as admin:
        made = await admin.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD)
        assert made.status_code in (201, 409), made.text
        await _established(admin)
        blobs = f"/apis/{GROUP}/v1/namespaces/{NS}/blobs"
        for name in ("plain-1", "plain-2"):
            await admin.delete(f"{blobs}/{name}")
            made = await admin.post(blobs, content=_blob(name, {"size": 1}), headers=JSON_BODY)
            assert made.status_code == 201, made.text[:300]
        for name in ("poison", *POISONS):
            await admin.delete(f"{blobs}/{name}")
        settings = kube.gateway_settings(discovery_token_file=kube.token_files["admin"])
        async with (
            serve_app(settings) as (url, app),
            httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as gql,
        ):
            # the CRD's group endpoint is served once discovery has read it
            for attempt in range(600):
                if (await gql.post(PATH, json={"query": "{ __typename }"})).status_code == 200:
                    break
                assert attempt < 599, "the CRD's group endpoint never appeared"
                await asyncio.sleep(0.05)  # discovery reads the cluster on its own schedule
            async with (
                _ws(url, token) as ws,
                gql.stream(
                    "GET",
                    PATH,
                    params={"query": watch_query},
                    headers={"Accept": "text/event-stream"},
                ) as sse_response,
            ):
                assert sse_response.status_code == 200
                sse = SSE(sse_response)
                sub = await ws.subscribe(watch_query)

                async def ws_next() -> dict[str, Any]:
                    event: dict[str, Any] = (await _next(ws, sub))["watchBlobs"]
                    return event

                async def sse_next() -> dict[str, Any]:
                    event: dict[str, Any] = (await sse.next())["watchBlobs"]
                    return event

                for read in (ws_next, sse_next):
                    seen = [(await read())["object"]["metadata"]["name"] for _ in range(2)]
                    assert sorted(seen) == ["plain-1", "plain-2"]
                # The poison objects, as alice could make them (the apiserver takes them).
                for name, depth in POISONS.items():
                    made = await admin.post(
                        blobs,
                        content=_blob(name, {"deep": _nested(depth)}),
                        headers=JSON_BODY,
                    )
                    assert made.status_code == 201, made.text[:300]
                async with LoopLag() as lag:
                    # served whole over WebSocket and SSE, each as the apiserver stored it
                    for read in (ws_next, sse_next):
                        for name, depth in POISONS.items():
                            event = await read()
                            assert event["type"] == "ADDED"
                            assert event["object"]["metadata"]["name"] == name
                            _whole(event["object"]["spec"], depth)
                    # the watches go on past them
                    patched = await admin.patch(
                        f"{blobs}/plain-1",
                        json={"spec": {"size": 2}},
                        headers={"Content-Type": "application/merge-patch+json"},
                    )
                    assert patched.status_code == 200, patched.text[:300]
                    for read in (ws_next, sse_next):
                        after = await read()
                        assert (after["type"], after["object"]["metadata"]["name"]) == (
                            "MODIFIED",
                            "plain-1",
                        )
                        assert after["object"]["spec"] == {"size": 2}

                    # A list holding them: every item, each poison one whole.
                    listed = await gql.post(
                        PATH,
                        json={"query": "{ blobs { items { metadata { name } spec } } }"},
                    )
                    assert listed.status_code == 200, listed.text[:300]
                    body = deepjson.loads(listed.content)
                    assert "errors" not in body, str(body)[:300]
                    got_items = body["data"]["blobs"]["items"]
                    items = {i["metadata"]["name"]: i["spec"] for i in got_items}
                    assert set(items) == {"plain-1", "plain-2", *POISONS}
                    assert items["plain-1"] == {"size": 2} and items["plain-2"] == {"size": 1}
                    for name, depth in POISONS.items():
                        _whole(items[name], depth)
                        # and one by one
                        got = await gql.post(
                            PATH,
                            json={
                                "query": '{ blob(namespace: "'
                                + NS
                                + '", name: "'
                                + name
                                + '") { spec } }'
                            },
                        )
                        assert got.status_code == 200, got.text[:300]
                        one = deepjson.loads(got.content)
                        assert "errors" not in one, str(one)[:300]
                        _whole(one["data"]["blob"]["spec"], depth)

                    await _grpc(app.state.runtime.grpc_port, token)
                    # decodes went in steps, encodes at orjson's speed: no long stall
                    assert lag.worst_cpu < 0.5, (lag.worst_cpu, lag.worst)
                    # and in wall time, whatever else the machine runs, never many seconds
                    assert lag.worst < 5.0, (lag.worst_cpu, lag.worst)
            for name in POISONS:
                await admin.delete(f"{blobs}/{name}")


async def _grpc(port: int, token: str) -> None:
    """gRPC's generic service: List, Get and Watch, JSON and Struct: the plain objects
    as asked, each poison one as its JSON, whole (no ``Struct`` nests that deep)."""
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]
    )
    async with channel:
        svc = services.ResourceServiceStub(channel)
        meta = (("authorization", f"Bearer {token}"),)

        def check(obj: R.ResourceObject, rep: int) -> str:
            which = obj.WhichOneof("representation")
            if which == "json":
                value = deepjson.loads(obj.json)
                name: str = value["metadata"]["name"]
                if name in POISONS:
                    _whole(value["spec"], POISONS[name])
            else:
                name = dict(obj.struct["metadata"])["name"]
            plain = "json" if rep == R.REPRESENTATION_JSON else "struct"
            assert which == ("json" if name in POISONS else plain), (name, which)
            return name

        everything = {"plain-1", "plain-2", *POISONS}
        for rep in (R.REPRESENTATION_JSON, R.REPRESENTATION_STRUCT):
            got = await svc.List(
                R.ListResourcesRequest(**BLOBS, namespace=NS, representation=rep), metadata=meta
            )
            assert {check(item, rep) for item in got.items} == everything
            for name in POISONS:
                one = await svc.Get(
                    R.GetResourceRequest(**BLOBS, namespace=NS, name=name, representation=rep),
                    metadata=meta,
                )
                assert check(one, rep) == name
            call = svc.Watch(
                R.WatchResourcesRequest(**BLOBS, namespace=NS, representation=rep), metadata=meta
            )
            seen = set()
            async with asyncio.timeout(30):
                async for event in call:
                    seen.add(check(event.object, rep))
                    if seen == everything:
                        break
            call.cancel()
