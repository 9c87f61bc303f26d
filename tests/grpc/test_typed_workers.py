"""A typed gRPC list (``PodService/List``...) written by list workers is the bytes the gateway
writes itself: the job a worker does (:func:`gateway.core.lists.jobs.typed`, one run of the
items or all of them) against the codec, body by body, for each kind and the edge cases
(int64 values, quantities, timestamps, int-or-string, free-form JSON, unknown fields, values
of the wrong type, an empty list, a list over the cap, a body that is not a list); and a
gateway with two list workers against one with none, over gRPC, byte for byte."""

from __future__ import annotations

import asyncio
import copy
import gzip
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import orjson
import pytest

from gateway.core.lists.body import Undecoded
from gateway.core.lists.jobs import NOT_DONE, OVER_CAP, Job, split_typed, work
from gateway.core.lists.large import LARGE_BODY_BYTES
from gateway.core.lists.parted import run_parts
from gateway.core.lists.pool import ListWorkers
from gateway.core.lists.typedwire import Design, Writer
from gateway.core.model.registry import POD
from gateway.core.support import deepjson
from gateway.grpc import mask as masks
from gateway.grpc.codec import codec
from gateway.grpc.gen.kubegateway.v1 import pods_pb2
from gateway.grpc.messages import message_class
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.sample import make_pods
from tests.bench.realistic import pod, pod_list
from tests.core.lists.test_pool_feed import _fed, _run
from tests.support.graphql import (
    ADMIN,
    Gateway,
    list_workers_of,
    serve_gateway,
    with_and_without_workers,
)
from tests.support.grpc import bearer, pod_list_bytes

JSON = dict[str, Any]
Pod, PodList = message_class("Pod"), message_class("PodList")


def _odd_pod(i: int) -> JSON:
    """A realistic pod with every kind of value the codec treats apart."""
    p = pod(i)
    spec = p["spec"]
    spec["activeDeadlineSeconds"] = 2**40 + i  # int64 past 32 bits
    spec["terminationGracePeriodSeconds"] = 30.0  # a whole float in an int64 field
    spec["priority"] = "7"  # digits in an int32 field: coerced
    spec["laterSpecField"] = {"x": [1, 2]}  # unknown: dropped
    spec["containers"][0]["resources"] = {
        "limits": {"cpu": "500m", "memory": "1Gi"},
        "requests": {"cpu": "0.25", "memory": "128974848"},
    }
    spec["containers"][0]["ports"] = [{"containerPort": 8080, "protocol": "TCP"}]
    spec["containers"][0]["livenessProbe"] = {"httpGet": {"path": "/", "port": 8080}}
    spec["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": "http"}}
    p["metadata"]["creationTimestamp"] = "2024-02-29T23:59:59Z"
    p["metadata"]["deletionTimestamp"] = "2024-03-01T00:00:00Z"
    p["metadata"]["generation"] = 2**53 + 1
    p["metadata"]["labels"] = {f"k{j}": f"v{j}" for j in range(12, 0, -1)}  # a map, unsorted
    p["metadata"]["managedFields"][0]["fieldsV1"] = {"f:deep": {"a": [{"b": None, "c": 1.5}]}}
    p["status"]["conditions"][0]["laterConditionField"] = 3  # unknown, in a list's element
    p["status"]["phase"] = 12  # a number in a string field: its string
    p["laterTopLevel"] = True
    return p


def _listed(items: list[Any], **meta: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "PodList",
        "metadata": {"resourceVersion": "4711", **meta},
        "items": items,
    }


def _event(i: int) -> JSON:
    return {
        "metadata": {"name": f"e{i}", "namespace": "default", "uid": f"u-{i}"},
        "involvedObject": {"kind": "Pod", "name": f"p{i}", "fieldPath": "spec.containers{a}"},
        "reason": "Pulled",
        "count": 2**31 - 1,  # int32's largest
        "firstTimestamp": "2024-01-01T00:00:00Z",
        "eventTime": "2024-01-01T00:00:00.123456Z",  # a MicroTime
        "series": {"count": 3, "lastObservedTime": "2024-01-01T00:00:01.000001Z"},
        "type": "Normal",
        "laterEventField": [1],
    }


def _lease(i: int) -> JSON:
    return {
        "metadata": {"name": f"l{i}", "namespace": "kube-system"},
        "spec": {
            "holderIdentity": f"node-{i}",
            "leaseDurationSeconds": 40,
            "renewTime": "2024-01-01T00:00:00.000001Z",
            "leaseTransitions": "5",
        },
    }


def _endpoints(i: int) -> JSON:
    return {
        "metadata": {"name": f"svc{i}", "namespace": "default"},
        "subsets": [
            {
                "addresses": [{"ip": f"10.0.0.{i % 250}", "targetRef": {"kind": "Pod"}}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }
        ],
    }


#: (kind, list body) pairs: each kind the contract serves, and the edge cases.
BODIES: dict[str, tuple[str, JSON]] = {
    "realistic pods": ("Pod", pod_list(40)),
    "odd pods": ("Pod", _listed([_odd_pod(i) for i in range(9)])),
    "pods and non-objects": ("Pod", _listed([pod(1), None, 3, "x", [], pod(2), pod(3)])),
    "empty list": ("Pod", _listed([])),
    "no items": ("Pod", {"metadata": {"resourceVersion": "1"}}),
    "null items": ("Pod", {"metadata": {"resourceVersion": "1"}, "items": None}),
    "one item": ("Pod", _listed([pod(7)])),
    "a continue token": ("Pod", _listed([pod(1), pod(2)], **{"continue": "abc"})),
    "events": ("Event", _listed([_event(i) for i in range(7)], remainingItemCount=3)),
    "leases": ("Lease", _listed([_lease(i) for i in range(5)])),
    "endpoints": ("Endpoints", _listed([_endpoints(i) for i in range(5)])),
}
MASKS = {
    "no mask": None,
    "a mask": ["metadata.name", "metadata.labels", "spec.containers.resources", "status"],
}


def _work(data: bytes, job: Job, cap: int) -> bytes | str:
    """``job`` done on ``data`` as a worker does it (here), its buffers as the gateway reads
    them (one after the other), or what else it answered."""
    done = work(data, job, cap)
    if isinstance(done, list):
        return b"".join(done)
    assert isinstance(done, str | bytes)
    return done


def _by_workers(kind: str, body: JSON, parts: int, mask: masks.Tree | None) -> bytes:
    """``body``'s list written by the job of ``parts`` workers (each the worker's own code,
    run here), joined as the gateway joins them."""
    encoding = codec().list_encoding(kind, mask)
    assert encoding.split is not None and encoding.finish is not None
    data = orjson.dumps(body)
    answers = []
    for job in encoding.split(parts):
        done = _work(data, job, 0)
        assert isinstance(done, bytes), done
        answers.append(done)
    return encoding.finish(answers)


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("masked", list(MASKS))
@pytest.mark.parametrize("case", list(BODIES))
def test_workers_write_the_bytes_the_gateway_writes(case: str, masked: str, parts: int) -> None:
    kind, body = BODIES[case]
    paths = MASKS[masked]
    c = codec()
    mask = None
    if paths is not None:
        mask = masks.parse(paths, c.contract.kinds[kind][0], c.contract) if kind == "Pod" else None
    before = copy.deepcopy(body)
    got = _by_workers(kind, body, parts, mask)
    assert body == before
    want = c.list_bytes(kind, orjson.loads(orjson.dumps(body)), mask)
    assert got == want
    message = c.parse(c.contract.kinds[kind][1], got)
    listed = [i for i in body.get("items") or () if isinstance(i, dict)]
    assert len(message.items) == len(listed)
    assert message.metadata.resourceVersion == body["metadata"]["resourceVersion"]


def test_the_values_that_need_care_arrive_as_the_contract_says() -> None:
    got = _by_workers("Pod", _listed([_odd_pod(1)]), 2, None)
    message = PodList.FromString(got)
    (item,) = message.items
    assert item.spec.activeDeadlineSeconds == 2**40 + 1
    assert item.spec.terminationGracePeriodSeconds == 30
    assert item.spec.priority == 7
    assert item.metadata.generation == 2**53 + 1
    assert item.spec.containers[0].resources.limits["cpu"] == "500m"
    assert item.spec.containers[0].livenessProbe.httpGet.port == "8080"
    assert item.spec.containers[0].readinessProbe.tcpSocket.port == "http"
    assert item.metadata.creationTimestamp == "2024-02-29T23:59:59Z"
    assert item.status.phase == "12"
    fields = item.metadata.managedFields[0].fieldsV1
    assert fields["f:deep"]["a"][0]["c"] == 1.5


def test_the_bytes_do_not_depend_on_the_process() -> None:
    """A worker builds its message classes from the design's descriptors (its own pool);
    map entries are written sorted, so its bytes are the gateway's whatever the hash seeds
    (upb's map order differs from one process to the next)."""
    c = codec()
    design = Design(*(getattr(c.design, f) for f in ("files", "package", "plans", "shapes")))
    own = Writer(design)  # classes built from the descriptors, not the generated modules
    item = _odd_pod(3)
    assert own.encode(item, "Pod") == c.encode("Pod", item)
    labels = Pod.FromString(own.encode(item, "Pod")).metadata.labels
    assert list(labels) != sorted(labels) or len(labels) > 1  # a real map
    wire = own.encode({"metadata": {"labels": {"b": "2", "a": "1", "c": "3"}}}, "Pod")
    assert wire.index(b"\x0a\x01a") < wire.index(b"\x0a\x01b") < wire.index(b"\x0a\x01c")


def test_what_a_worker_drops_is_logged_by_the_gateway(caplog: pytest.LogCaptureFixture) -> None:
    """Once per field and process: fields no other test sends."""
    odd = [_odd_pod(i) for i in range(4)]
    for p in odd:
        p["loggedTopLevel"] = 1
        p["spec"]["loggedSpecField"] = "x"
    body = _listed(odd)
    encoding = codec().list_encoding("Pod")
    assert encoding.split is not None and encoding.finish is not None
    (job,) = encoding.split(1)
    done = _work(orjson.dumps(body), job, 0)
    assert isinstance(done, bytes)
    _, notes, _ = split_typed(done)
    said = [fmt % tuple(args) for fmt, *args in notes]
    assert sum("Pod.loggedTopLevel" in s for s in said) == 1, said
    with caplog.at_level(logging.INFO, logger="gateway.grpc.codec"):
        encoding.finish([done])
    logged = [r.getMessage() for r in caplog.records if "dropping" in r.getMessage()]
    assert sum("PodSpec.loggedSpecField" in m for m in logged) == 1, logged


@pytest.mark.parametrize("parts", [1, 2])
def test_a_list_over_the_cap_is_refused_by_every_part(parts: int) -> None:
    encoding = codec().list_encoding("Pod")
    assert encoding.split is not None
    five = orjson.dumps(_listed([pod(i) for i in range(5)]))
    token = orjson.dumps(_listed([pod(1)], **{"continue": "more"}))
    for job in encoding.split(parts):
        assert _work(five, job, 4) == OVER_CAP
        assert _work(token, job, 4) == OVER_CAP
        assert isinstance(_work(five, job, 5), bytes)


#: Bodies no fast path writes exactly (not JSON, not a list, nested past what ``orjson``
#: reads, ...): each is left to the gateway's ordinary decode, by id.
DAMAGED: dict[str, bytes] = {
    "array": b"[1, 2]",
    "items-object": b'{"items": {"a": 1}}',
    "broken": b'{"items": [{"metadata": {"name": "a"}}, }',
    "not-utf8": b'{"items": [{"metadata": {"name": "\xff"}}]}',
    "too-deep": b'{"items": [' + b"[" * 1100 + b"]" * 1100 + b"]}",
    "deep": b'{"items": [{"spec": {"overhead": ' + b'{"a":' * 120 + b"1" + b"}" * 120 + b"}}]}",
}


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize(
    "data",
    [*DAMAGED.values(), b'{"metadata": 5, "items": []}'],
    ids=[*DAMAGED, "odd-metadata"],
)
def test_a_body_a_worker_cannot_write_exactly_is_left_to_the_gateway(
    data: bytes, parts: int
) -> None:
    """Not JSON, not a list, nested past what ``orjson`` reads: the worker says not done,
    and the gateway decodes it the ordinary way (and says what is wrong)."""
    encoding = codec().list_encoding("Pod")
    assert encoding.split is not None and encoding.finish is not None
    whole = _work(data, encoding.split(1)[0], 0)
    answers = [_work(data, job, 0) for job in encoding.split(parts)]
    if whole == NOT_DONE:
        assert NOT_DONE in answers  # the gateway decodes it then
    if all(isinstance(done, bytes) for done in answers):  # then it is what the gateway writes
        done = [a for a in answers if isinstance(a, bytes)]
        assert encoding.finish(done) == codec().list_bytes("Pod", deepjson.loads(data))
    else:
        assert set(answers) <= {NOT_DONE} | {a for a in answers if isinstance(a, bytes)}


# -- a gateway with list workers, over gRPC ----------------------------------------------------

COUNT = 600
NS = "big"


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Gateway, Gateway]]:
    """A gateway with two list workers and one with none, in front of one upstream with
    enough pods for a large list body."""
    async with DemoUpstream() as demo:
        await demo.store.bulk_create(POD, make_pods(COUNT, NS), namespace=NS)
        async with with_and_without_workers(demo) as both:
            yield both


def _workers(gateway: Gateway) -> ListWorkers:
    workers: ListWorkers = list_workers_of(gateway)
    return workers


async def _list_bytes(gateway: Gateway, **request: Any) -> bytes:
    """``PodService/List``'s answer from ``gateway`` as the bytes on the wire."""
    return await pod_list_bytes(gateway.app.state.runtime.grpc_port, ADMIN, **request)


async def test_a_typed_list_written_by_two_workers_is_the_same_bytes(
    pair: tuple[Gateway, Gateway],
) -> None:
    with_workers, without = pair
    workers = _workers(with_workers)
    before = workers.projected
    got = await _list_bytes(with_workers, namespace=NS)
    assert workers.projected == before + 2  # two runs of the items, two workers
    assert got == await _list_bytes(without, namespace=NS)
    assert len(got) > LARGE_BODY_BYTES // 2
    assert len(PodList.FromString(got).items) == COUNT
    # a read mask too: cut down in the workers
    masked = {"namespace": NS, "read_mask": {"paths": ["metadata.name", "spec.nodeName"]}}
    got = await _list_bytes(with_workers, **masked)
    assert workers.projected == before + 4
    assert got == await _list_bytes(without, **masked)
    names = [p.metadata.name for p in PodList.FromString(got).items]
    assert names == sorted(names) and len(names) == COUNT


async def test_a_typed_list_over_the_cap_is_refused_the_same_way() -> None:
    async with DemoUpstream() as demo:
        await demo.store.bulk_create(POD, make_pods(COUNT, NS), namespace=NS)
        async with (
            serve_gateway(demo, list_workers="2", max_list_items=COUNT - 1) as with_workers,
            serve_gateway(demo, list_workers="0", max_list_items=COUNT - 1) as without,
        ):
            refusals = []
            for gateway in (with_workers, without):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await _list_bytes(gateway, namespace=NS)
                refusals.append((refused.value.code(), refused.value.details()))
            small = await _list_bytes(with_workers, namespace=NS, limit=5)
    assert refusals[0] == refusals[1]
    code, details = refusals[0]
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"more than {COUNT - 1} pods match" in (details or "")
    assert len(PodList.FromString(small).items) == 5


async def _get_pod(gateway: Gateway, name: str) -> Any:
    port = gateway.app.state.runtime.grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(
            "/kubegateway.v1.PodService/Get",
            request_serializer=pods_pb2.GetPodRequest.SerializeToString,
            response_deserializer=Pod.FromString,
        )
        return await call(pods_pb2.GetPodRequest(namespace=NS, name=name), metadata=bearer(ADMIN))


async def test_lists_at_once_share_the_workers_and_a_small_get_goes_on(
    pair: tuple[Gateway, Gateway],
) -> None:
    """Four lists at once, each split in two, on two workers: each part waits for a free
    worker (none holds one while it waits for another), every list is exact, and a small
    ``Get`` while they wait is answered without waiting for them."""
    with_workers, without = pair
    want = await _list_bytes(without, namespace=NS)
    workers = _workers(with_workers)
    assert await _list_bytes(with_workers, namespace=NS) == want  # the workers are started
    before = workers.projected
    slots = workers._slots
    assert slots is not None
    async with slots, slots:  # both workers busy (held here) until the block ends
        lists = [asyncio.create_task(_list_bytes(with_workers, namespace=NS)) for _ in range(4)]
        started = time.perf_counter()
        got = await _get_pod(with_workers, "bulk-00007")
        waited = time.perf_counter() - started
        assert got.metadata.name == "bulk-00007"
        assert waited < 5  # not behind the lists
        assert not any(task.done() for task in lists)  # they wait for the workers
    assert await asyncio.gather(*lists) == [want] * 4
    assert workers.projected == before + 8
    assert len(workers._all) == 2


async def test_a_killed_worker_costs_no_typed_list(pair: tuple[Gateway, Gateway]) -> None:
    """A worker killed between lists: the next list is still exact (its part goes to a new
    worker, or the gateway writes the list itself), and new workers take the ones after."""
    with_workers, without = pair
    want = await _list_bytes(without, namespace=NS)
    workers = _workers(with_workers)
    first, _ = await workers.ready()
    os.kill(first, signal.SIGKILL)
    assert await _list_bytes(with_workers, namespace=NS) == want
    assert await _list_bytes(with_workers, namespace=NS) == want
    pids = await workers.ready()
    assert first not in pids and len(pids) == 2
    before = workers.projected
    assert await _list_bytes(with_workers, namespace=NS) == want
    assert workers.projected == before + 2


@pytest.mark.parametrize("gzipped", [True, False], ids=["gzipped", "plain"])
def test_a_typed_list_fed_to_a_worker_as_it_arrives_is_written_in_two_parts_the_same(
    gzipped: bool,
) -> None:
    """The first part's worker holds the body it was fed as it arrived (a buffer it grew),
    the second gets it whole: the list joined is the gateway's own bytes."""
    body = pod_list(2_000)
    data = orjson.dumps(body)
    sent = gzip.compress(data, 1) if gzipped else data
    encoding = codec().list_encoding("Pod")
    assert encoding.split is not None and encoding.finish is not None
    want = codec().list_bytes("Pod", deepjson.loads(data))

    async def test(workers: ListWorkers) -> None:
        feed = await _fed(workers, sent, gzipped=gzipped, piece=7_919)
        parts = await run_parts(
            workers, Undecoded(sent, gzipped=gzipped, feed=feed), encoding.split(2)
        )
        assert parts is not None and encoding.finish is not None
        assert encoding.finish(parts) == want
        assert workers.fed == 1 and workers.feeding == 0

    _run(test, 2)


# -- a small list written from its bytes (Codec.small_list), its objects remembered ------------


def _mask_of(kind: str, masked: str) -> tuple[masks.Tree | None, Any]:
    paths = MASKS[masked]
    if paths is None or kind != "Pod":
        return None, None
    c = codec()
    return masks.parse(paths, c.contract.kinds[kind][0], c.contract), tuple(paths)


@pytest.mark.parametrize("masked", list(MASKS))
@pytest.mark.parametrize("case", list(BODIES))
def test_a_small_list_written_from_its_bytes_is_the_bytes_the_gateway_writes(
    case: str, masked: str
) -> None:
    """Cold (each object decoded and written) and again (each object's bytes remembered):
    the bytes of the body decoded whole and written, every time."""
    kind, body = BODIES[case]
    mask, key = _mask_of(kind, masked)
    c = codec()
    data = orjson.dumps(body)
    want = c.list_bytes(kind, orjson.loads(data), mask)
    c.memo.clear()
    assert c.small_list(kind, data, mask, key) == want
    objects = sum(isinstance(i, dict) for i in body.get("items") or ())
    assert len(c.memo) == len(
        {orjson.dumps(i) for i in body.get("items") or () if i.__class__ is dict}
    )
    hits = c.memo.hits
    assert c.small_list(kind, data, mask, key) == want
    assert c.memo.hits == hits + objects


def test_a_remembered_object_is_written_again_once_it_changes() -> None:
    c = codec()
    first = _listed([pod(1), pod(2)])
    c.small_list("Pod", orjson.dumps(first))
    changed = copy.deepcopy(first)
    changed["items"][0]["metadata"]["labels"]["tier"] = "changed"
    changed["items"][0]["metadata"]["resourceVersion"] = "99999"
    got = c.small_list("Pod", orjson.dumps(changed))
    assert got == c.list_bytes("Pod", changed)
    assert PodList.FromString(got).items[0].metadata.labels["tier"] == "changed"
    # the same objects under another read mask are written for that mask
    mask, key = _mask_of("Pod", "a mask")
    masked = c.small_list("Pod", orjson.dumps(changed), mask, key)
    assert masked == c.list_bytes("Pod", changed, mask)
    assert not PodList.FromString(masked).items[0].spec.nodeName


def test_a_small_list_over_the_cap_is_left_to_the_ordinary_path() -> None:
    c = codec()
    five = orjson.dumps(_listed([pod(i) for i in range(5)]))
    token = orjson.dumps(_listed([pod(1)], **{"continue": "more"}))
    assert c.small_list("Pod", five, cap=4) is None
    assert c.small_list("Pod", token, cap=4) is None
    assert c.small_list("Pod", five, cap=5) == c.list_bytes("Pod", orjson.loads(five))


def test_a_list_of_many_small_objects_is_left_to_the_sliced_path() -> None:
    """Hostile: a body under the small path's bytes with thousands of tiny objects is not
    written in one piece (it would hold the event loop): the large-list scope writes it a
    few items at a time; one item fewer than a large list is written here."""
    from gateway.core.lists.large import LARGE_LIST

    c = codec()
    many = orjson.dumps(_listed([{"metadata": {"name": f"p{i}"}} for i in range(LARGE_LIST)]))
    assert len(many) < 256 * 1024
    assert c.small_list("Pod", many) is None
    fewer = _listed([{"metadata": {"name": f"p{i}"}} for i in range(LARGE_LIST - 1)])
    assert c.small_list("Pod", orjson.dumps(fewer)) == c.list_bytes("Pod", fewer)


@pytest.mark.parametrize(
    "data",
    [
        *DAMAGED.values(),
        b'{"items": [{"metadata": {"name": "a"}}], "big": 123456789012345678901234567890}',
        b'{"items": [{"metadata": {"name": "a"}}], "items": []}',
        b'{"kind": "PodList", "items": [{"metadata": {"name": "a"}}]} trailing',
    ],
    ids=[*DAMAGED, "big-int", "duplicate-items", "trailing"],
)
def test_a_body_not_surely_written_from_its_bytes_is_left_to_the_ordinary_path(
    data: bytes,
) -> None:
    """What is not JSON, not a list, or not what a whole decode reads: ``None`` (the
    ordinary path decodes it and says what is wrong), or else the ordinary path's bytes."""
    c = codec()
    got = c.small_list("Pod", data)
    if got is not None:
        assert got == c.list_bytes("Pod", deepjson.loads(data))


def test_the_memo_holds_at_most_its_bytes() -> None:
    """Hostile: many distinct objects, some larger than an entry may be; the memo keeps
    within its bytes, the newest kept, and every answer is still exact."""
    from gateway.grpc.codec import WireMemo

    c = codec()
    memo = WireMemo(limit=200_000, item_limit=8_000)
    c.memo, saved = memo, c.memo
    try:
        for round_ in range(30):
            items = [pod(100 * round_ + i) for i in range(10)]
            big = pod(9_999)
            big["metadata"]["annotations"] = {"blob": "x" * 20_000}
            data = orjson.dumps(_listed([*items, big]))
            assert c.small_list("Pod", data) == c.list_bytes("Pod", orjson.loads(data))
            assert memo.size <= memo.limit
        assert all(len(key[2]) <= memo.item_limit for key in memo._entries)
        newest = orjson.dumps(pod(100 * 29 + 9))
        assert ("Pod", None, newest) in memo._entries
    finally:
        c.memo = saved


async def test_a_small_list_over_grpc_is_exact_unchanged_and_changed() -> None:
    """A gateway on the demo upstream: a small ``List`` is the bytes of the same list asked
    of the upstream directly and written whole; asked again it is answered from the memo,
    the same bytes; after a pod changes, the answer has the change and the rest as before."""
    async with DemoUpstream() as demo:
        await demo.store.bulk_create(POD, make_pods(12, "small"), namespace="small")
        async with (
            serve_gateway(demo, list_workers="0") as gateway,
            httpx.AsyncClient(
                base_url=demo.url, headers={"Authorization": f"Bearer {ADMIN}"}
            ) as api,
        ):
            c = codec()
            port = gateway.app.state.runtime.grpc_port
            first = await pod_list_bytes(port, ADMIN, namespace="small", limit=10)
            direct = await api.get("/api/v1/namespaces/small/pods", params={"limit": 10})
            assert first == c.list_bytes("Pod", direct.json())
            hits = c.memo.hits
            assert await pod_list_bytes(port, ADMIN, namespace="small", limit=10) == first
            assert c.memo.hits >= hits + 10
            items = PodList.FromString(first).items
            assert len(items) == 10
            await demo.store.patch(
                POD, items[3].metadata.name, {"metadata": {"labels": {"x": "y"}}}, namespace="small"
            )
            changed = PodList.FromString(
                await pod_list_bytes(port, ADMIN, namespace="small", limit=10)
            )
            assert changed.items[3].metadata.labels["x"] == "y"
            assert changed.items[3].metadata.resourceVersion != items[3].metadata.resourceVersion
            assert list(changed.items[4:]) == list(items[4:])


_ITEMS = (
    b'[{"metadata": {"name": "a", "labels": {"x": "\\u00fc"}}}, 7, {"metadata": {"name": "b"}}]'
)


@pytest.mark.parametrize(
    "data",
    [
        b'{"items": ' + _ITEMS + b', "metadata": {"resourceVersion": "5"}, "kind": "PodList"}',
        b'{"kind": "PodList", "apiVersion": "v1", "metadata": null, "items": ' + _ITEMS + b"}",
        b' { "metadata" : { "continue" : "" } , "items" : ' + _ITEMS + b" } ",
        b'{"kind": "PodList", "kind": "Other", "items": ' + _ITEMS + b"}",
        b'{"metadata": {"resourceVersion": "1"}, "metadata": {"resourceVersion": "2"}, '
        b'"items": []}',
        b'{"items": ' + _ITEMS + b', "items": null}',
        b'{"items": 5, "items": ' + _ITEMS + b"}",
        b'{"apiVersion": 5, "items": ' + _ITEMS + b"}",
        b'{"extra": {"a": [1, 2]}, "items": ' + _ITEMS + b', "kind": "PodList"}',
        b'{"metadata": {"resourceVersion": "1", "unknown": 1}, "items": ' + _ITEMS + b"}",
        b'{"metadata": {"resourceVersion": "1"}, "items": ' + _ITEMS + b', "x": [}',
        b'{"metadata": {"resourceVersion": "1"}, "items": ' + _ITEMS + b"",
        b'{"metadata": ["x"], "items": ' + _ITEMS + b"}",
    ],
    ids=[
        "items-first",
        "null-metadata",
        "whitespace",
        "duplicate-kind",
        "duplicate-metadata",
        "items-then-null",
        "wrong-then-items",
        "apiversion-number",
        "unknown-member",
        "unknown-in-metadata",
        "broken-unknown",
        "unterminated",
        "metadata-array",
    ],
)
def test_a_small_lists_head_read_in_one_scan_is_the_whole_decodes(data: bytes) -> None:
    """The body delimited in one scan (its items and the members its list message has):
    members in any order, repeated (the last one counts, as a whole decode reads it), null,
    of a wrong shape, one the message does not have (then delimited as members first): the
    bytes of the body decoded whole and written, cold and from the memo; ``None`` where that
    decode fails (the ordinary path then says what is wrong)."""
    c = codec()
    try:
        whole = deepjson.loads(data)
    except (orjson.JSONDecodeError, ValueError):
        whole = None
    for _ in range(2):  # cold, then each object from the memo
        got = c.small_list("Pod", data)
        if whole is None:
            assert got is None
            continue
        assert got is not None
        assert got == c.list_bytes("Pod", whole)
