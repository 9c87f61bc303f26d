"""Every way a unary gRPC call ends, over real sockets, on the fast path of its handler
(gateway.grpc.calls.Deadline, handling._Served, the drain's tracker, the operation timer
and its cached metric children, the admission's initial metadata in flight): each call
ends with its own status, on the caller's side and on its access line, counted once under
its own outcome, the drain's count exact while calls are in flight and back to 0 after,
and nothing left behind (no unretrieved exception, no cancellation in a later call)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from gateway.core import Drain
from gateway.core.fleet.visibility import Visibility
from gateway.core.process.metrics import Metrics
from gateway.grpc.calls import DEADLINE_MARGIN
from gateway.grpc.gen.kubegateway.v1 import pods_pb2, pods_pb2_grpc
from gateway.grpc.server import start_grpc
from kube_gateway_demo import DemoUpstream
from tests.support.grpc import ADMIN, NAMESPACE, bearer, demo_cluster, one_cluster, upstream

__all__ = ["upstream"]  # fixtures


class _Lines(logging.Handler):
    """The gRPC access lines logged, status by request id (the server runs on this loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.status: dict[str, str] = {}
        self._logged = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "transport", None) == "grpc":
            self.status[record.request_id] = record.status  # type: ignore[attr-defined]
            self._logged.set()

    async def of(self, request_id: str) -> str:
        async with asyncio.timeout(30):
            while request_id not in self.status:
                self._logged.clear()
                await self._logged.wait()
        return self.status[request_id]


@dataclass
class _Served:
    drain: Drain
    metrics: Metrics
    pods: pods_pb2_grpc.PodServiceStub
    lines: _Lines
    #: the name of a pod of the demo's
    pod: str = ""


@pytest.fixture
async def served(
    upstream: DemoUpstream, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[_Served]:
    """The gateway's gRPC server over ``upstream``, with a drain, and a channel to it; once
    it is stopped, nothing was logged as an error (an unretrieved exception included)."""
    caplog.set_level(logging.INFO)
    async with _serving(upstream) as gateway:
        listed = await gateway.pods.List(
            pods_pb2.ListPodsRequest(namespace=NAMESPACE), metadata=bearer(ADMIN), timeout=30
        )
        gateway.pod = listed.items[0].metadata.name
        yield gateway
    gc.collect()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@contextlib.asynccontextmanager
async def _serving(demo: DemoUpstream) -> AsyncIterator[_Served]:
    drain = Drain(grace=30)
    lines = _Lines()
    access = logging.getLogger("gateway.access")
    access.addHandler(lines)
    try:
        async with demo_cluster(demo.url) as cluster:
            fleet = one_cluster(cluster)
            server, port = await start_grpc(
                fleet, "127.0.0.1", 0, visibility=Visibility(fleet), drain=drain
            )
            try:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                    pods = pods_pb2_grpc.PodServiceStub(channel)
                    yield _Served(drain, cluster.adapter.metrics, pods, lines)
            finally:
                await server.stop(None)
    finally:
        access.removeHandler(lines)


def _get(served: _Served, request_id: str, timeout: float | None = 30) -> object:
    return served.pods.Get(
        pods_pb2.GetPodRequest(namespace=NAMESPACE, name=served.pod),
        metadata=(*bearer(ADMIN), ("x-request-id", request_id)),
        timeout=timeout,
    )


def _counted(metrics: Metrics, outcome: str) -> float:
    labels = {"transport": "grpc", "operation": "Get", "resource": "pods", "outcome": outcome}
    return metrics.registry.get_sample_value("kube_gateway_operations_total", labels) or 0.0


async def _code(call: object) -> grpc.StatusCode:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def test_every_ending_is_its_own_and_the_drain_counts_exactly_the_calls_in_flight(
    upstream: DemoUpstream, served: _Served
) -> None:
    drain = served.drain
    before = {o: _counted(served.metrics, o) for o in ("ok", "Cancelled", "Timeout")}
    upstream.faults.hold(verb="get")
    left = _get(served, "left")
    late = _get(served, "late", timeout=1.0)
    answered = _get(served, "answered")
    await upstream.faults.wait_held(3)
    assert drain._inflight == 3

    # the caller leaves while its upstream request is held
    left.cancel()  # type: ignore[attr-defined]
    assert await served.lines.of("left") == "CANCELLED"
    assert drain._inflight == 2
    # the deadline passes while its upstream request is held
    assert await _code(late) == grpc.StatusCode.DEADLINE_EXCEEDED
    assert await served.lines.of("late") == "DEADLINE_EXCEEDED"
    assert drain._inflight == 1

    # a drain waits for exactly the call still in flight, and refuses new ones
    draining = asyncio.create_task(drain.run())
    refused = _get(served, "refused")
    assert await _code(refused) == grpc.StatusCode.UNAVAILABLE
    assert await served.lines.of("refused") == "UNAVAILABLE"
    assert not draining.done() and drain._inflight == 1
    upstream.faults.release()
    assert await _code(answered) == grpc.StatusCode.OK
    async with asyncio.timeout(30):
        await draining
    assert await served.lines.of("answered") == "OK"
    assert drain._inflight == 0

    # each counted once, under its own outcome
    after = {o: _counted(served.metrics, o) - before[o] for o in before}
    assert after == {"ok": 1, "Cancelled": 1, "Timeout": 1}


async def test_a_deadline_racing_the_answer_ends_either_way_cleanly(
    upstream: DemoUpstream, served: _Served
) -> None:
    """The upstream answers about when the call's own deadline (the caller's less the
    margin) passes: each call is answered or DEADLINE_EXCEEDED, never anything else, its
    line says the same, and the calls after them on the same server are answered."""
    delay = 0.2
    upstream.faults.set_delay(delay, verb="get")
    # (the first, with time to spare: the others race the first call's own costs)
    offsets = [1.0] + [i * 0.005 for i in range(31)]
    calls = [
        _get(served, f"race-{i}", timeout=delay + DEADLINE_MARGIN + offset)
        for i, offset in enumerate(offsets)
    ]
    codes = await asyncio.gather(*(_code(c) for c in calls))
    upstream.faults.reset()
    for i, code in enumerate(codes):
        line = await served.lines.of(f"race-{i}")
        assert line in ("OK", "DEADLINE_EXCEEDED"), (i, line)
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED), (i, code)
        if code == grpc.StatusCode.OK:
            assert line == "OK"
    assert served.drain._inflight == 0
    after = await asyncio.gather(*(_code(_get(served, f"after-{i}")) for i in range(8)))
    assert after == [grpc.StatusCode.OK] * 8


async def test_a_deadline_inside_the_margin_is_refused_before_the_upstream_is_asked(
    upstream: DemoUpstream, served: _Served
) -> None:
    upstream.faults.hold(verb="get")
    try:
        short = _get(served, "short", timeout=DEADLINE_MARGIN * 0.8)
        assert await _code(short) == grpc.StatusCode.DEADLINE_EXCEEDED
        # (the caller's own deadline may pass first on a slow machine)
        assert await served.lines.of("short") in ("DEADLINE_EXCEEDED", "CANCELLED")
        assert upstream.faults.held_requests == 0
        assert served.drain._inflight == 0
    finally:
        upstream.faults.release()


async def test_a_refusal_before_the_handler_first_waits_still_sends_the_id_first(
    served: _Served,
) -> None:
    """The handler refuses the call before its first await (a malformed ``authorization``,
    read before the caller is identified), while the batch of the call's initial metadata
    may still be in flight: the refusal waits for it, so the caller gets the id and the
    status, with no usage error and nothing unretrieved."""
    before = _counted(served.metrics, "Unauthorized")
    for i in range(20):
        call = served.pods.Get(
            pods_pb2.GetPodRequest(namespace=NAMESPACE, name=served.pod),
            metadata=(("authorization", "Basic abc"), ("x-request-id", f"basic-{i}")),
            timeout=30,
        )
        assert await _code(call) == grpc.StatusCode.UNAUTHENTICATED
        assert ("x-request-id", f"basic-{i}") in tuple(await call.initial_metadata())
        assert await served.lines.of(f"basic-{i}") == "UNAUTHENTICATED"
    assert _counted(served.metrics, "Unauthorized") - before == 20
    assert served.drain._inflight == 0
