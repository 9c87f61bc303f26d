"""A unary call's ``x-request-id`` initial metadata: its grpc batch is started before the
handler runs and awaited after it (gateway.grpc.admission._Sent), so the id still reaches
the caller first thing, and every way a call ends (an answer, a refusal of the servicer, an
unexpected deadline, a caller leaving) still sends it once and ends the call cleanly."""

from __future__ import annotations

import asyncio
import logging

import grpc
import h2.config
import h2.connection
import h2.events
import pytest

from gateway.grpc.gen.kubegateway.v1 import pods_pb2
from kube_gateway_demo import DemoUpstream
from tests.support.grpc import ADMIN, NAMESPACE, GrpcGateway, bearer, gw, upstream

__all__ = ["gw", "upstream"]  # fixtures

AUTH = bearer(ADMIN)


def _metadata(request_id: str) -> tuple[tuple[str, str], ...]:
    return (*AUTH, ("x-request-id", request_id))


async def _headers_before_answer(gw: GrpcGateway, request_id: str) -> list[tuple[str, str]]:
    """A ``PodService/Get`` sent over a raw HTTP/2 connection: the response headers the
    server sent, which must come before anything else of the answer (the upstream holds
    it); then the caller leaves (``RST_STREAM`` CANCEL).  grpc's own clients hand a unary
    call's initial metadata over with its answer only."""
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(header_encoding="utf-8"))
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/kubegateway.v1.PodService/Get"),
        (":authority", f"127.0.0.1:{gw.port}"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *_metadata(request_id),
    ]
    message = pods_pb2.GetPodRequest(namespace=NAMESPACE, name="anything").SerializeToString()
    conn.send_headers(stream, headers)
    conn.send_data(stream, b"\0" + len(message).to_bytes(4, "big") + message, end_stream=True)
    writer.write(conn.data_to_send())
    try:
        async with asyncio.timeout(30):
            while True:
                data = await reader.read(65536)
                assert data, "the server closed the connection"
                for event in conn.receive_data(data):
                    assert not isinstance(
                        event, h2.events.DataReceived | h2.events.TrailersReceived
                    ), f"the answer came before the upstream's: {event}"
                    if isinstance(event, h2.events.ResponseReceived):
                        conn.reset_stream(stream, error_code=8)  # CANCEL
                        writer.write(conn.data_to_send())
                        await writer.drain()
                        return [(str(k), str(v)) for k, v in event.headers]
                writer.write(conn.data_to_send())
    finally:
        writer.close()


class _Ended(logging.Handler):
    """Sets ``ended`` when the access line of the call ``request_id`` is logged (on the
    event loop: the server runs in this process)."""

    def __init__(self, request_id: str) -> None:
        super().__init__()
        self.request_id = request_id
        self.ended = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "request_id", None) == self.request_id:
            self.ended.set()


async def test_the_id_arrives_before_a_slow_answer_and_with_every_ending(
    upstream: DemoUpstream, gw: GrpcGateway, caplog: pytest.LogCaptureFixture
) -> None:
    pods = gw.stub("pods")
    caplog.set_level(logging.INFO)
    # The upstream holds every get: the id is the caller's before the answer exists; then
    # the caller leaves while the handler waits, and the call ends CANCELLED, once.
    upstream.faults.set_delay(60, verb="get")
    early_ended = _Ended("early-1")
    access = logging.getLogger("gateway.access")
    access.addHandler(early_ended)
    try:
        assert ("x-request-id", "early-1") in await _headers_before_answer(gw, "early-1")
        # its line is written when its handler unwinds, on the server's time
        async with asyncio.timeout(30):
            await early_ended.ended.wait()
    finally:
        access.removeHandler(early_ended)

    # A deadline that passes while the upstream waits: DEADLINE_EXCEEDED, with the id.
    late = pods.Get(
        pods_pb2.GetPodRequest(namespace=NAMESPACE, name="anything"),
        metadata=_metadata("late-1"),
        timeout=1.5,
    )
    with pytest.raises(grpc.aio.AioRpcError) as timed_out:
        await late
    assert timed_out.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert ("x-request-id", "late-1") in tuple(await late.initial_metadata())
    upstream.faults.reset()

    # A refusal of the servicer (no such pod): NOT_FOUND, its details, and the id.
    missing = pods.Get(
        pods_pb2.GetPodRequest(namespace=NAMESPACE, name="no-such-pod"),
        metadata=_metadata("missing-1"),
        timeout=30,
    )
    with pytest.raises(grpc.aio.AioRpcError) as not_found:
        await missing
    assert not_found.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no-such-pod" in (not_found.value.details() or "")
    assert ("x-request-id", "missing-1") in tuple(await missing.initial_metadata())

    # An answer: the id once in the initial metadata, none in the trailers.
    call = pods.List(
        pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=_metadata("list-1"), timeout=30
    )
    listed = await call
    assert listed.items
    initial = [v for k, v in await call.initial_metadata() if k == "x-request-id"]
    assert initial == ["list-1"]
    assert all(k != "x-request-id" for k, _ in await call.trailing_metadata())

    # Many at once, each with its own id and nothing else's.
    calls = [
        pods.Get(
            pods_pb2.GetPodRequest(namespace=NAMESPACE, name=listed.items[0].metadata.name),
            metadata=_metadata(f"many-{i}"),
            timeout=60,
        )
        for i in range(32)
    ]
    answers = await asyncio.gather(*calls)
    assert all(a.metadata.name == listed.items[0].metadata.name for a in answers)
    for i, c in enumerate(calls):
        assert [v for k, v in await c.initial_metadata() if k == "x-request-id"] == [f"many-{i}"]

    # Every call has its access line with its ending; nothing failed unexpectedly.
    def endings() -> dict[str, str]:
        return {
            r.request_id: r.status  # type: ignore[attr-defined]
            for r in caplog.records
            if r.name == "gateway.access" and getattr(r, "transport", None) == "grpc"
        }

    lines = endings()
    assert lines["early-1"] == "CANCELLED"
    # the server's deadline (the caller's less a margin) or the caller's, whichever is first
    assert lines["late-1"] in ("DEADLINE_EXCEEDED", "CANCELLED")
    assert lines["missing-1"] == "NOT_FOUND"
    assert lines["list-1"] == "OK"
    assert all(lines[f"many-{i}"] == "OK" for i in range(32))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
