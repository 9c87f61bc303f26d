"""What an idle gRPC ``Watch`` keeps alive in the gateway's process, and that it is served
all the same: the frames of its handler chain (counted, per stream) and its encoder, shared
by every stream asking for the same read mask."""

from __future__ import annotations

import gc
import types
from pathlib import Path
from typing import Any

from google.protobuf import field_mask_pb2

from gateway.core.model.registry import LEASE
from gateway.grpc import handling
from gateway.grpc.gen.kubegateway.v1 import common_pb2, leases_pb2
from kube_gateway_demo import DemoUpstream
from tests.grpc.test_watch import Stream
from tests.scenarios.backend import sample
from tests.support.grpc import ADMIN, NAMESPACE, GrpcGateway, bearer, gw, unique, upstream

__all__ = ["gw", "upstream"]  # fixtures

AUTH = bearer(ADMIN)
GATEWAY = str(Path(handling.__file__).resolve().parents[1])
#: Frames of gateway code alive per idle stream, at most: the admission's handler, the
#: servicer's call, the pump, the subscription's wait, the operation's metrics and the
#: drain count (the last two the core's context managers): 5.7 measured.  Before this was
#: counted, 9.7 (the access record's and the call's context managers, the admission's
#: writer and a generator of watch_stream's own).
FRAMES_PER_STREAM = 7
STREAMS = 6


def _gateway_frames() -> int:
    """Coroutines and (async) generators of gateway code that are alive and suspended."""
    gc.collect()
    count = 0
    for o in gc.get_objects():
        if isinstance(o, types.CoroutineType):
            frame = o.cr_frame
        elif isinstance(o, types.AsyncGeneratorType):
            frame = o.ag_frame
        elif isinstance(o, types.GeneratorType):
            frame = o.gi_frame
        else:
            continue
        if frame is not None and frame.f_code.co_filename.startswith(GATEWAY):
            count += 1
    return count


def _pumps() -> list[Any]:
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, types.AsyncGeneratorType)
        and o.ag_code is handling.pump.__code__
        and o.ag_frame is not None
    ]


async def test_an_idle_watch_keeps_few_frames_and_shares_its_encoder(
    gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    label = unique("idle")
    name = unique("l")
    body = sample("leases", name, NAMESPACE)
    body["metadata"]["labels"] = {"w": label}
    await upstream.store.create(LEASE, body)
    mask = field_mask_pb2.FieldMask(paths=["metadata.name", "spec.holderIdentity"])

    def watch(masked: bool) -> Stream:
        request = leases_pb2.WatchLeasesRequest(
            namespace=NAMESPACE, label_selector=f"w={label}", read_mask=mask if masked else None
        )
        return Stream(gw.stub("leases").Watch(request, metadata=AUTH))

    # one stream first, so that what every Watch shares (the hub's upstream watch, its
    # tasks) is there before counting
    first = watch(False)
    assert (await first.next()).lease.metadata.name == name
    before = _gateway_frames()
    streams = [watch(masked=i % 2 == 0) for i in range(STREAMS)]
    for stream in streams:
        event = await stream.next()
        assert common_pb2.WatchEvent.Type.Name(event.type) == "ADDED"
        assert event.lease.metadata.name == name
    per_stream = (_gateway_frames() - before) / STREAMS
    assert 0 < per_stream <= FRAMES_PER_STREAM, per_stream

    # every stream asking for one read mask encodes with one encoder (nothing per stream)
    encoders = {}
    for pump in _pumps():
        encode = pump.ag_frame.f_locals["encode"]
        encoders.setdefault(pump.ag_frame.f_locals["key"], set()).add(id(encode))
    masked_key = tuple(mask.paths)
    assert len(encoders[masked_key]) == 1 and len(encoders[None]) == 1

    # idle as they were, they are served: each sees the change, cut to its mask or whole
    await upstream.store.patch(
        LEASE, name, {"spec": {"holderIdentity": "after-idle"}}, namespace=NAMESPACE
    )
    for i, stream in enumerate(streams):
        event = await stream.next()
        assert common_pb2.WatchEvent.Type.Name(event.type) == "MODIFIED"
        assert event.lease.spec.holderIdentity == "after-idle"
        masked = i % 2 == 0
        assert bool(event.lease.spec.leaseDurationSeconds) is not masked
    for stream in [first, *streams]:
        stream.call.cancel()
