"""Tracing: an operation's server span continues the caller's ``traceparent``, its upstream
request is a child client span, and the upstream receives a ``traceparent`` of that trace.

Spans land in the SDK's in-memory exporter, installed with
:func:`gateway.core.process.tracing.configure`;
what reached the upstream is read on the wire by a tap in front of the demo upstream.
Without ``OTEL_*`` variables, ``kube-gateway serve`` imports nothing of OpenTelemetry.
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.core.process import tracing
from gateway.grpc.gen.kubegateway.v1 import pods_pb2, pods_pb2_grpc
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, Gateway, gql, serve_gateway
from tests.support.serve_process import serve_process
from tests.support.tap import Tap

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
_SENT = re.compile(rb"traceparent: 00-([0-9a-f]{32})-([0-9a-f]{16})-01\r\n", re.IGNORECASE)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.configure(exporter, batch=False)
    try:
        yield exporter
    finally:
        tracing.shutdown()


@pytest.fixture
async def served() -> AsyncIterator[tuple[Gateway, Tap]]:
    async with (
        DemoUpstream() as demo,
        Tap.before(demo.url) as tap,
        serve_gateway(demo, tap.url) as gateway,
    ):
        yield gateway, tap


def sent_traceparents(tap: Tap) -> list[tuple[str, str]]:
    """The (trace id, parent span id) of every ``traceparent`` the upstream received."""
    return [(t.decode(), s.decode()) for t, s in _SENT.findall(bytes(tap.from_client))]


def hex_id(value: int, digits: int) -> str:
    return format(value, f"0{digits}x")


def check_trace(spans: tuple[ReadableSpan, ...], tap: Tap, name: str, transport: str) -> None:
    """One server span ``name`` under the caller's span, one upstream client span under it,
    and the upstream got that client span as its parent."""
    servers = [s for s in spans if s.kind is SpanKind.SERVER]
    clients = [s for s in spans if s.kind is SpanKind.CLIENT]
    assert [s.name for s in servers] == [name]
    server = servers[0]
    assert server.context is not None and server.parent is not None
    assert hex_id(server.context.trace_id, 32) == TRACE_ID
    assert hex_id(server.parent.span_id, 16) == PARENT_ID and server.parent.is_remote
    assert dict(server.attributes or {}) == {
        "kube_gateway.transport": transport,
        "kube_gateway.operation": "List",
        "kube_gateway.resource": "pods",
        "kube_gateway.outcome": "ok",
    }
    assert server.status.status_code is StatusCode.UNSET
    assert [c.name for c in clients] == ["list pods"]
    client = clients[0]
    assert client.context is not None and client.parent is not None
    assert client.parent.span_id == server.context.span_id
    assert client.context.trace_id == server.context.trace_id
    assert dict(client.attributes or {}) == {
        "http.request.method": "GET",
        "kube_gateway.verb": "list",
        "kube_gateway.resource": "pods",
        "http.response.status_code": 200,
    }
    assert sent_traceparents(tap) == [(TRACE_ID, hex_id(client.context.span_id, 16))]
    for span in spans:  # nothing of the caller's request: no namespace, token, URL
        text = repr(dict(span.attributes or {}))
        assert "demo" not in text and ADMIN not in text and "/api" not in text


async def test_a_graphql_query_continues_the_callers_trace_to_the_upstream(
    spans: InMemorySpanExporter, served: tuple[Gateway, Tap]
) -> None:
    gateway, tap = served
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        response = await client.post(
            "/graphql",
            json={"query": '{ pods(namespace: "demo") { items { metadata { name } } } }'},
            headers={"authorization": f"Bearer {ADMIN}", "traceparent": TRACEPARENT},
        )
    assert response.json()["data"]["pods"]["items"]
    check_trace(spans.get_finished_spans(), tap, "graphql List pods", "graphql")


async def test_a_grpc_call_continues_the_callers_trace_to_the_upstream(
    spans: InMemorySpanExporter, served: tuple[Gateway, Tap]
) -> None:
    gateway, tap = served
    port = gateway.app.state.runtime.grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await pods_pb2_grpc.PodServiceStub(channel).List(
            pods_pb2.ListPodsRequest(namespace="demo"),
            metadata=(("authorization", f"Bearer {ADMIN}"), ("traceparent", TRACEPARENT)),
            timeout=10,
        )
    assert reply.items
    check_trace(spans.get_finished_spans(), tap, "grpc List pods", "grpc")


async def test_an_upstream_fault_is_an_error_span(spans: InMemorySpanExporter) -> None:
    async with DemoUpstream() as demo:
        url = demo.url
    async with (
        DemoUpstream() as demo,
        serve_gateway(demo, url) as gateway,  # nobody listens at url any more
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as client,
    ):
        body = await gql(client, '{ pods(namespace: "demo") { items { kind } } }')
    assert body["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
    (server,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert server.parent is None  # no traceparent came: a root span
    assert server.attributes is not None and server.attributes["kube_gateway.outcome"] == (
        "Unavailable"
    )
    assert server.status.status_code is StatusCode.ERROR
    clients = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CLIENT]
    assert clients and all(c.status.status_code is StatusCode.ERROR for c in clients)


def test_without_otel_variables_serve_imports_no_opentelemetry(tmp_path: Path) -> None:
    # -X importtime's log names every module the process imports, when it imports it.
    with serve_process(tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"}) as served:
        with httpx.Client(base_url=served.http, timeout=10) as client:
            response = client.post(
                "/graphql",
                json={"query": '{ pods(namespace: "demo") { items { kind } } }'},
                headers={"authorization": f"Bearer {ADMIN}", "traceparent": TRACEPARENT},
            )
        assert response.json()["data"]["pods"]["items"]
        with grpc.insecure_channel(served.grpc) as channel:
            reply = pods_pb2_grpc.PodServiceStub(channel).List(
                pods_pb2.ListPodsRequest(namespace="demo"),
                metadata=(("authorization", f"Bearer {ADMIN}"), ("traceparent", TRACEPARENT)),
                timeout=10,
            )
        assert reply.items
        served.proc.send_signal(signal.SIGTERM)
        served.proc.wait()
        served._reader.join(10)
    imported = re.findall(r"^import time:.*\|\s+(\S+)$", served.log, re.MULTILINE)
    assert (
        "gateway.core.process.tracing" in imported and "gateway.core.upstream.adapter" in imported
    )
    assert not [m for m in imported if m.startswith("opentelemetry")]
    assert "opentelemetry" not in served.log


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver that keeps what it was sent."""

    received: list[tuple[str, bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_otel_variables_export_the_spans_over_otlp_by_shutdown(tmp_path: Path) -> None:
    received: list[tuple[str, bytes]] = []
    handler = type("Collector", (_Collector,), {"received": received})
    collector = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=collector.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
    try:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        with serve_process(tmp_path, env=env) as served:
            with httpx.Client(base_url=served.http, timeout=10) as client:
                response = client.post(
                    "/graphql",
                    json={"query": '{ pods(namespace: "demo") { items { kind } } }'},
                    headers={"authorization": f"Bearer {ADMIN}", "traceparent": TRACEPARENT},
                )
            assert response.json()["data"]["pods"]["items"]
            served.proc.send_signal(signal.SIGTERM)
            served.proc.wait()  # the lifespan flushes the batch before the process ends
            served._reader.join(10)
        assert "tracing: on (OTLPSpanExporter exporter)" in served.log
    finally:
        collector.shutdown()
        collector.server_close()
    assert received and {path for path, _ in received} == {"/v1/traces"}
    names: dict[str, tuple[str, str]] = {}
    for _, body in received:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}[
                "service.name"
            ]
            assert service == "kube-gateway"
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    names[span.name] = (span.trace_id.hex(), span.parent_span_id.hex())
    assert names["graphql List pods"] == (TRACE_ID, PARENT_ID)
    assert names["list pods"][0] == TRACE_ID
