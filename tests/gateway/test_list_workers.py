"""List workers: a large list decoded and projected (GraphQL) or written (gRPC's
``ResourceService``) in worker processes answers the same as the gateway's own decode, in
every case the projection knows (planned fields, values only a serialiser completes, a list
over the cap, a worker killed mid-life, several clusters at once)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest

from gateway.core.lists.body import Undecoded
from gateway.core.lists.gzipped import gzip_size
from gateway.core.lists.large import LARGE_BODY_BYTES
from gateway.core.lists.pool import ListWorkers
from gateway.core.lists.projections import build
from gateway.core.model.registry import POD
from gateway.core.upstream.credentials import Credential
from gateway.grpc.gen.kubegateway.v1 import resource_pb2, resource_pb2_grpc
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.sample import make_pods
from tests.gateway.test_fleet import gateway, kubeconfig, serves, until
from tests.support.graphql import (
    ADMIN,
    Gateway,
    list_workers_of,
    serve_gateway,
    with_and_without_workers,
)
from tests.support.grpc import bearer

COUNT = 600
NS = "big"

WIDE = """query($ns: String!) {
  pods(namespace: $ns) {
    __typename
    metadata { resourceVersion continue remainingItemCount }
    items {
      kind
      metadata { name namespace uid resourceVersion creationTimestamp labels }
      spec { nodeName priority containers { name image ports { containerPort protocol } } }
      status { phase podIP conditions { type status } }
      ...More
    }
  }
}
fragment More on Pod { status { startTime } renamed: metadata { name } }"""

NARROW = '{ pods(namespace: "big") { items { metadata { name } } } }'
RAW = '{ pods(namespace: "big") { items { raw } } }'
SMALL = '{ pods(namespace: "big", limit: 1) { items { metadata { name } } } }'
FLEET = """{
  fleet(clusters: ["default", "b"]) {
    cluster pods(namespace: "big") { items { metadata { name } } }
  }
}"""
#: A selection that depends on a variable (the plan is compiled per execution).
DIRECTED = """query($ns: String!, $ip: Boolean!) {
  pods(namespace: $ns) { items { metadata { name } status { podIP @include(if: $ip) } } }
}"""


@pytest.fixture
async def demo() -> AsyncIterator[DemoUpstream]:
    async with DemoUpstream() as upstream:
        await upstream.store.bulk_create(POD, make_pods(COUNT, NS), namespace=NS)
        yield upstream


@pytest.fixture
async def pair(demo: DemoUpstream) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """The same upstream through a gateway with two list workers and one with none."""
    async with with_and_without_workers(demo) as both:
        yield both


def _workers(gateway: Gateway) -> ListWorkers:
    workers: ListWorkers = list_workers_of(gateway)
    return workers


async def _post(gateway: Gateway, query: str, **variables: Any) -> bytes:
    async with httpx.AsyncClient(
        base_url=gateway.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60
    ) as client:
        response = await client.post("/graphql", json={"query": query, "variables": variables})
    assert response.status_code == 200, response.text[:500]
    return response.content


async def _listed(gateway: Gateway, outcome: str) -> float:
    """``kube_gateway_list_worker_lists_total{outcome}`` as ``/metrics`` serves it."""
    async with httpx.AsyncClient(base_url=gateway.url) as client:
        scraper = {"Authorization": f"Bearer {ADMIN}"}  # /metrics: for callers RBAC allows
        text = (await client.get("/metrics", headers=scraper)).text
    line = f'kube_gateway_list_worker_lists_total{{outcome="{outcome}"}} '
    return sum(float(row.removeprefix(line)) for row in text.splitlines() if row.startswith(line))


async def test_the_body_is_large_enough_to_go_to_a_worker(demo: DemoUpstream) -> None:
    async with httpx.AsyncClient(
        base_url=demo.url, headers={"Authorization": f"Bearer {ADMIN}"}
    ) as c:
        body = (await c.get(f"/api/v1/namespaces/{NS}/pods")).content
    assert len(body) >= LARGE_BODY_BYTES


async def test_a_body_the_upstream_gzipped_goes_to_a_worker_gzipped(
    demo: DemoUpstream, pair: tuple[Gateway, Gateway]
) -> None:
    """The upstream gzips a large answer (as the apiserver does for a client that accepts
    it): a list a worker will decode is read as it came and the worker inflates it; the
    answers are the same bytes, gzipped or not, with workers or without."""
    with_workers, without = pair
    adapter = with_workers.app.state.runtime.cluster.adapter
    lists = adapter.large_lists

    async def fetched() -> Any:
        return await lists.handed_on(
            lambda gzipped: adapter.list_body(
                POD, namespace=NS, credential=Credential(ADMIN), gzipped=gzipped
            ),
            deferrable=True,
        )

    held = await fetched()
    assert type(held) is Undecoded and held.gzipped
    assert len(held.data) < LARGE_BODY_BYTES <= gzip_size(held.data)  # as it came
    assert (await lists.decoded(held))["items"][0]["metadata"]["namespace"] == NS
    answers = set()
    for compress in (True, False):
        demo.app.compress = compress
        if not compress:
            held = await fetched()
            assert type(held) is Undecoded and not held.gzipped
        before = _workers(with_workers).projected
        answers.add(await _post(with_workers, WIDE, ns=NS))
        assert _workers(with_workers).projected == before + 1
        answers.add(await _post(without, WIDE, ns=NS))
    assert len(answers) == 1


@pytest.mark.parametrize(
    ("query", "variables"),
    [
        (WIDE, {"ns": NS}),
        (NARROW, {}),
        (RAW, {}),
        (DIRECTED, {"ns": NS, "ip": True}),
        (DIRECTED, {"ns": NS, "ip": False}),
    ],
    ids=["wide", "narrow", "raw", "directed-on", "directed-off"],
)
async def test_a_worker_answers_the_same_bytes_as_the_gateway(
    pair: tuple[Gateway, Gateway], query: str, variables: dict[str, Any]
) -> None:
    with_workers, without = pair
    before = _workers(with_workers).projected
    got = await _post(with_workers, query, **variables)
    assert _workers(with_workers).projected == before + 1  # a worker did it
    assert await _listed(with_workers, "done") == before + 1
    want = await _post(without, query, **variables)
    assert got == want
    assert _workers(without).projected == 0


async def test_a_value_only_a_serialiser_completes_is_completed_by_the_gateway(
    demo: DemoUpstream, pair: tuple[Gateway, Gateway]
) -> None:
    """An ``Int`` out of range: the worker gives the list back, the gateway completes it,
    the field error and the partial data are the spec's, the same with or without."""
    with_workers, without = pair
    odd = next(iter(make_pods(1, "odd", prefix="odd")))
    odd["spec"]["priority"] = 2**40
    await demo.store.bulk_create(POD, [*make_pods(COUNT, "odd"), odd], namespace="odd")
    workers = _workers(with_workers)
    projected, returned = workers.projected, workers.returned
    got = await _post(with_workers, WIDE, ns="odd")
    assert (workers.projected, workers.returned) == (projected, returned + 1)
    assert await _listed(with_workers, "returned") == returned + 1  # the operators' count
    want = await _post(without, WIDE, ns="odd")
    assert got == want
    assert b"Int cannot represent non 32-bit signed integer value" in got


async def test_a_list_over_the_cap_is_refused_the_same_way(demo: DemoUpstream) -> None:
    async with (
        serve_gateway(demo, list_workers="1", max_list_items=COUNT - 1) as with_workers,
        serve_gateway(demo, list_workers="0", max_list_items=COUNT - 1) as without,
    ):
        got = await _post(with_workers, NARROW)
        want = await _post(without, NARROW)
    assert got == want
    assert f"more than {COUNT - 1} pods match".encode() in got


async def test_a_killed_worker_costs_no_answer_and_is_replaced(demo: DemoUpstream) -> None:
    async with serve_gateway(demo, list_workers="1") as gateway:
        workers = _workers(gateway)
        (pid,) = await workers.ready()
        want = await _post(gateway, NARROW)
        assert workers.projected == 1
        os.kill(pid, signal.SIGKILL)
        # The death is noticed before the next list (a new worker takes it) or by it (the
        # gateway decodes that list itself): the same bytes either way, then a new worker.
        assert await _post(gateway, NARROW) == want
        assert await _post(gateway, NARROW) == want
        assert workers.projected >= 2
        (new,) = await workers.ready()
        assert new != pid


@contextlib.asynccontextmanager
async def _two_clusters(
    demo: DemoUpstream, tmp_path: Path
) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient, Gateway]]:
    """A gateway with two list workers serving ``demo`` and cluster ``b`` (its own pods),
    its client, and ``b`` alone through a gateway without workers."""
    async with DemoUpstream() as second:
        await second.store.bulk_create(POD, make_pods(COUNT, NS, prefix="b"), namespace=NS)
        config = kubeconfig(tmp_path / "b.yaml", second.url)
        flags = ("--list-workers", "2", "--cluster", f"b={config}")
        async with (
            gateway(demo, *flags) as (served, fleet, client),
            serve_gateway(second, list_workers="0") as own_b,
        ):
            await until(fleet, serves("b"))
            yield served, client, own_b


async def test_lists_of_two_clusters_go_to_two_workers(
    demo: DemoUpstream, pair: tuple[Gateway, Gateway], tmp_path: Path
) -> None:
    """A fleet list of two clusters: both lists go to workers, and each member is the
    same bytes as that cluster's own list through a gateway without workers."""
    _, without = pair
    async with _two_clusters(demo, tmp_path) as (served, client, own_b):
        workers = _workers(served)
        before = workers.projected
        response = await client.post(
            "/fleet/graphql",
            json={"query": FLEET},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert workers.projected == before + 2
        members = {m["cluster"]: m["pods"] for m in orjson.loads(response.content)["data"]["fleet"]}
        for name, own in (("default", without), ("b", own_b)):
            alone = orjson.loads(await _post(own, NARROW))["data"]["pods"]
            assert members[name] == alone
        assert len(members["b"]["items"]) == COUNT


def test_a_spec_builds_the_projection_a_worker_runs() -> None:
    spec = (
        "object",
        "PodList",
        (
            ("kind", 0, "kind", None, None, False),
            (
                "items",
                1,
                "items",
                None,
                (
                    "list",
                    False,
                    (
                        "object",
                        "Pod",
                        (("name", 1, "name", "type({v}) is not str", ("leaf", "String"), False),),
                    ),
                ),
                False,
            ),
        ),
    )
    run = build(spec)
    assert run({"kind": "PodList", "items": [{"name": "a"}, {"name": "b"}]}) == {
        "kind": "PodList",
        "items": [{"name": "a"}, {"name": "b"}],
    }


PODS = {"group": "", "version": "v1", "resource": "pods"}


async def _grpc_list(gateway: Gateway, **request: Any) -> resource_pb2.ResourceList:
    port = gateway.app.state.runtime.grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = resource_pb2_grpc.ResourceServiceStub(channel)
        answer: resource_pb2.ResourceList = await stub.List(
            resource_pb2.ListResourcesRequest(**request), metadata=bearer(ADMIN)
        )
    return answer


@pytest.mark.parametrize(
    "representation",
    [resource_pb2.REPRESENTATION_JSON, resource_pb2.REPRESENTATION_STRUCT],
    ids=["json", "struct"],
)
async def test_a_grpc_resource_list_written_by_a_worker_is_the_same_message(
    pair: tuple[Gateway, Gateway], representation: int
) -> None:
    with_workers, without = pair
    workers = _workers(with_workers)
    before = workers.projected
    request = {**PODS, "namespace": NS, "representation": representation}
    got = await _grpc_list(with_workers, **request)
    assert workers.projected == before + 1
    want = await _grpc_list(without, **request)
    assert got == want
    assert len(got.items) == COUNT and got.metadata.resourceVersion
    # A read mask is applied by the gateway itself: no worker, the same message.
    masked = {**request, "read_mask": {"paths": ["metadata.name"]}}
    got = await _grpc_list(with_workers, **masked)
    assert workers.projected == before + 1
    assert got == await _grpc_list(without, **masked)


async def test_a_grpc_fleet_list_goes_to_two_workers(
    demo: DemoUpstream, pair: tuple[Gateway, Gateway], tmp_path: Path
) -> None:
    _, without = pair
    async with _two_clusters(demo, tmp_path) as (served, _, own_b):
        workers = _workers(served)
        before = workers.projected
        listed = await _grpc_list(served, **PODS, namespace=NS, clusters=["default", "b"])
        assert workers.projected == before + 2
        members = {m.cluster: m.list for m in listed.clusters}
        assert members["default"] == await _grpc_list(without, **PODS, namespace=NS)
        assert members["b"] == await _grpc_list(own_b, **PODS, namespace=NS)
        assert len(members["b"].items) == COUNT


async def test_more_lists_than_workers_wait_their_turn_and_small_calls_go_on(
    demo: DemoUpstream,
) -> None:
    """Large lists wait for a free worker (one body in a worker at a time), and a small
    request meanwhile is answered without waiting for them; then each list is exact."""
    async with (
        serve_gateway(demo, list_workers="1") as gateway,
        serve_gateway(demo, list_workers="0") as plain,
    ):
        want = await _post(plain, NARROW)
        workers = _workers(gateway)
        assert await _post(gateway, NARROW) == want  # the worker is started
        slots = workers._slots
        assert slots is not None
        async with slots:  # the one worker is busy (held here) until the block ends
            lists = [asyncio.create_task(_post(gateway, NARROW)) for _ in range(6)]
            small = await _post(gateway, SMALL)
            assert orjson.loads(small)["data"]["pods"]["items"] == [
                {"metadata": {"name": "bulk-00000"}}
            ]
            assert not any(task.done() for task in lists)  # they wait for the worker
        assert await asyncio.gather(*lists) == [want] * 6
        assert workers.projected == 7
        assert len(workers._all) == 1  # one worker did them all, one after another
