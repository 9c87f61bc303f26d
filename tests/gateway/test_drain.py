"""SIGTERM to a real ``kube-gateway serve``: readiness false, new work refused, the call in
flight answered, every subscription ended with its resume point, exit code 0.

The upstream is a demo in this test's process, so that it can hold a request in flight
(``faults.hold``) while the gateway drains: nothing here is timed.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from gateway.grpc.gen.kubegateway.v1 import common_pb2, pods_pb2, pods_pb2_grpc
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, TransportWS
from tests.support.grpc import details
from tests.support.serve_process import serve_process_async

NS = "drain"
AUTH = (("authorization", f"Bearer {ADMIN}"),)
HEADERS = {"Authorization": f"Bearer {ADMIN}"}
WATCH = """subscription($ns: String) {
  watchPods(namespace: $ns) { type resourceVersion object { metadata { name } } }
}"""
GET_A = f'{{ pod(namespace: "{NS}", name: "a") {{ metadata {{ name }} }} }}'
DRAINING = {"reason": "DRAINING"}


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


class Parts:
    """A multipart subscription response read part by part (heartbeats skipped); ``None``
    once the closing boundary arrived."""

    def __init__(self, response: httpx.Response) -> None:
        self.chunks = response.aiter_text()
        self.buffer = ""

    async def next(self) -> Any:
        while True:
            head, sep, rest = self.buffer.partition("\r\n--graphql")
            if sep:
                self.buffer = rest
                body = head.partition("\r\n\r\n")[2].strip()
                if body and body != "{}":
                    return orjson.loads(body)
                continue
            if self.buffer.startswith("--"):
                return None  # the closing boundary
            self.buffer += await anext(self.chunks)


def _sse_request(client: httpx.AsyncClient) -> Any:
    return client.stream(
        "POST",
        "/graphql",
        json={"query": WATCH, "variables": {"ns": NS}},
        headers={**HEADERS, "Accept": "text/event-stream"},
    )


class Events:
    """A graphql-sse response read event by event, with each event's ``id:``."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.aiter_lines()

    async def next(self) -> tuple[str | None, str, Any]:
        event_id, name, data = None, "", []
        async for line in self.lines:
            if line.startswith(":"):
                continue
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "" and name:
                raw = "\n".join(data)
                return event_id, name, orjson.loads(raw) if raw else None
        raise AssertionError("the stream ended")


async def test_sigterm_drains_every_transport_and_exits_0(tmp_path: Path) -> None:
    async with DemoUpstream() as demo:
        await demo.store.ensure_namespace(NS)
        await demo.store.create("pods", _pod("a"), namespace=NS)
        async with (
            serve_process_async(
                tmp_path, "--server", demo.url, "--drain-seconds", "120", "--log-level", "info"
            ) as served,
            httpx.AsyncClient(base_url=served.http, timeout=60) as client,
            grpc.aio.insecure_channel(served.grpc) as channel,
            connect(
                served.http.replace("http", "ws") + "/graphql",
                subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
            ) as socket,
            _sse_request(client) as sse_response,
            client.stream(
                "POST",
                "/graphql",
                json={"query": WATCH, "variables": {"ns": NS}},
                headers={**HEADERS, "Accept": 'multipart/mixed;subscriptionSpec="1.0"'},
            ) as multipart_response,
        ):
            pods = pods_pb2_grpc.PodServiceStub(channel)
            ws = TransportWS(socket)
            await ws.send({"type": "connection_init", "payload": HEADERS})
            assert (await ws.recv())["type"] == "connection_ack"
            op = await ws.subscribe(WATCH, {"ns": NS})
            watch = pods.Watch(pods_pb2.WatchPodsRequest(namespace=NS), metadata=AUTH)
            sse = Events(sse_response)
            parts = Parts(multipart_response)

            # Each subscriber has the snapshot (a), then a live change (b).
            assert (await ws.next(op, 60))["data"]["watchPods"]["object"]["metadata"]["name"] == "a"
            _, _, payload = await sse.next()
            assert payload["data"]["watchPods"]["object"]["metadata"]["name"] == "a"
            assert (await watch.read()).pod.metadata.name == "a"
            part = await parts.next()
            assert part["payload"]["data"]["watchPods"]["object"]["metadata"]["name"] == "a"
            b = await demo.store.create("pods", _pod("b"), namespace=NS)
            rv = b["metadata"]["resourceVersion"]
            assert (await ws.next(op, 60))["data"]["watchPods"]["resourceVersion"] == rv
            event_id, name, payload = await sse.next()
            assert (event_id, name) == (rv, "next"), payload
            part = await parts.next()
            assert part["payload"]["data"]["watchPods"]["resourceVersion"] == rv
            grpc_event = await watch.read()
            assert (grpc_event.type, grpc_event.resource_version) == (
                common_pb2.WatchEvent.ADDED,
                rv,
            )

            # A unary call in flight, held by the upstream.
            demo.faults.hold(verb="get")
            slow = asyncio.create_task(
                client.post(
                    "/graphql",
                    json={"query": GET_A},
                    headers=HEADERS,
                )
            )
            await demo.faults.wait_held(1)

            served.proc.send_signal(signal.SIGTERM)

            # Every subscription ends with a completion carrying its resume point.
            completion = {"data": None, "extensions": {**DRAINING, "resumeFrom": rv}}
            assert await ws.next(op, 60) == completion
            assert await ws.recv(60) == {"id": op, "type": "complete"}
            assert await sse.next() == (rv, "next", completion)
            assert (await sse.next())[1] == "complete"
            assert await parts.next() == {"payload": completion}
            assert await parts.next() is None
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await watch.read()
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
            info = details(ended.value)["ErrorInfo"]
            assert info.metadata["resourceVersion"] == rv
            assert details(ended.value)["RetryInfo"].retry_delay.seconds == 1

            # Not ready any more, and new work is refused (retryable), on both ports.
            ready = await client.get("/readyz")
            assert (ready.status_code, ready.json()) == (503, {"status": "draining"})
            health = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=60
            )
            assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING
            refused = await client.post("/graphql", json={"query": "{ __typename }"})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert refused.json()["errors"][0]["extensions"]["code"] == "DRAINING"
            with pytest.raises(grpc.aio.AioRpcError) as get:
                await pods.Get(pods_pb2.GetPodRequest(namespace=NS, name="a"), metadata=AUTH)
            assert get.value.code() == grpc.StatusCode.UNAVAILABLE
            async with connect(
                served.http.replace("http", "ws") + "/graphql",
                subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
            ) as refused_ws:
                with pytest.raises(ConnectionClosed):
                    await refused_ws.recv()
            assert refused_ws.close_code == 1013  # Try Again Later
            assert refused_ws.subprotocol == "graphql-transport-ws"  # as browsers require
            # A new operation on a connection still open is refused too.
            late = await ws.subscribe(WATCH, {"ns": NS})
            error = await ws.recv(60)
            assert (error["id"], error["type"]) == (late, "error")
            assert error["payload"][0]["extensions"]["code"] == "DRAINING"

            # The call in flight finishes within the grace period.
            demo.faults.release()
            answer = await slow
            assert answer.status_code == 200
            assert answer.json() == {"data": {"pod": {"metadata": {"name": "a"}}}}

            assert await asyncio.to_thread(served.proc.wait) == 0
    await asyncio.to_thread(served._reader.join, 10)
    assert "drained: no call in flight" in served.log, served.log
    assert "Traceback" not in served.log and "ERROR" not in served.log, served.log
