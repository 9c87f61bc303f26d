"""A refused gRPC call leaves nothing behind for the cyclic garbage collector.

A handler that keeps the exception it fails with in a local of its own frame makes a
cycle (the frame holds the exception, whose traceback holds the frame), and the frame holds
the request: a large refused request (a fleet ``List`` naming 390,000 clusters is 3.5 MB
on the wire and more parsed, outside Python's allocator) then lives until a full
collection, which the gateway makes rare (``gateway/app.py``, ``tune_garbage_collector``).
Under hostile clients that refuse-and-keep grew the soak's RSS by hundreds of MB in three
minutes (``tests/bench/soak.py``).  grpc itself keeps an aborted call's exception on the
call's state, which the handler frames hold (``context``): that cycle stays, but
``gateway/grpc/admission.py`` clears the frames' locals, so it no longer holds the request.
Here, on a real gRPC server and channel, refused unary and streaming fleet calls leave no
request message held by cyclic garbage.
"""

from __future__ import annotations

import contextlib
import gc
import types
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from gateway.grpc.gen.kubegateway.v1 import resource_pb2
from kube_gateway_demo import DemoUpstream
from tests.support.grpc import ADMIN, NAMESPACE, Two, bearer, serve_two

LEASES = {"group": "coordination.k8s.io", "version": "v1", "resource": "leases"}
#: Far more names than a fleet call may list.
NAMES = [f"n{i:06d}" for i in range(20_000)]


@pytest.fixture
async def two() -> AsyncIterator[Two]:
    async with contextlib.AsyncExitStack() as stack:
        demos = {
            "default": await stack.enter_async_context(DemoUpstream()),
            "b": await stack.enter_async_context(DemoUpstream()),
        }
        yield await serve_two(stack, demos)


@contextlib.contextmanager
def cyclic_garbage() -> Iterator[list[object]]:
    """The objects only the cyclic collector would free, made inside the block (the
    collector off meanwhile, so none is freed before it is seen)."""
    gc.collect()
    gc.disable()
    found: list[object] = []
    try:
        yield found
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def requests_held(garbage: list[object]) -> list[str]:
    """The request messages the cyclic garbage holds (a frame holds its locals)."""
    kinds = (resource_pb2.ListResourcesRequest, resource_pb2.WatchResourcesRequest)
    return [
        f"{type(r).__name__} held by {describe(o)}"
        for o in garbage
        for r in gc.get_referents(o)
        if isinstance(r, kinds)
    ]


def describe(o: object) -> str:
    if isinstance(o, types.FrameType):
        return f"a frame of {o.f_code.co_filename}:{o.f_code.co_name}"
    return type(o).__name__


async def test_refused_fleet_calls_leave_no_frame_holding_the_request(two: Two) -> None:
    listing = resource_pb2.ListResourcesRequest(**LEASES, namespace=NAMESPACE, clusters=NAMES)
    watching = resource_pb2.WatchResourcesRequest(**LEASES, namespace=NAMESPACE, clusters=NAMES)
    with cyclic_garbage() as garbage:
        for _ in range(3):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await two.resources.List(listing, metadata=bearer(ADMIN), timeout=30)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "a fleet call names at most" in (refused.value.details() or "")
            call = two.resources.Watch(watching, metadata=bearer(ADMIN), timeout=30)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call.read()
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # a served call beside them still answers
        served = await two.resources.List(
            resource_pb2.ListResourcesRequest(**LEASES, namespace=NAMESPACE),
            metadata=bearer(ADMIN),
            timeout=30,
        )
        assert served.items is not None
    assert requests_held(garbage) == []
