"""List workers: a large list decoded and projected (GraphQL) or written (gRPC's
``ResourceService``) in worker processes answers the same as the gateway's own decode, in
every case the projection knows (planned fields, values only a serialiser completes, a list
over the cap, a worker killed mid-life, several clusters at once); and a small GraphQL list,
projected by the same code in the gateway's own process, answers the same as its decode."""

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
from gateway.core.lists.jobs import NOT_DONE, OVER_CAP, projected_part
from gateway.core.lists.large import LARGE_BODY_BYTES, LARGE_LIST, SMALL_PROJECTED_BYTES
from gateway.core.lists.pool import FEED_FROM, FEED_FROM_GZIPPED, Feed, ListWorkers
from gateway.core.lists.projections import build
from gateway.core.model.registry import POD
from gateway.core.upstream.credentials import Credential
from gateway.grpc.gen.kubegateway.v1 import resource_pb2, resource_pb2_grpc
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.sample import make_pods
from tests.bench.realistic import pod
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
    options = [("grpc.max_receive_message_length", 64 << 20)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
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


# -- a long body fed to a worker as it arrives ------------------------------------------------

#: Realistic pods (managedFields, probes, volumes): their list gzipped is past
#: ``FEED_FROM_GZIPPED`` (so fed to a worker as it arrives), and inflated past ``FEED_FROM``.
FED_COUNT = 1500
FED_NS = "fed"


async def _fed_pods(demo: DemoUpstream) -> None:
    manifests = []
    for i in range(FED_COUNT):
        body = pod(i, FED_NS)
        for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
            body["metadata"].pop(key, None)
        manifests.append(body)
    await demo.store.bulk_create(POD, manifests, namespace=FED_NS)


async def test_a_long_body_is_fed_to_a_worker_as_it_arrives_and_answers_the_same_bytes(
    demo: DemoUpstream, pair: tuple[Gateway, Gateway]
) -> None:
    """A list body past ``FEED_FROM_GZIPPED`` gzipped (or ``FEED_FROM`` plain) goes to a
    worker piece by piece as it is read; the answers are the bytes of a gateway without
    workers, for GraphQL and gRPC, gzipped or not; a short body is handed over whole."""
    await _fed_pods(demo)
    with_workers, without = pair
    workers = _workers(with_workers)
    adapter = with_workers.app.state.runtime.cluster.adapter
    body = await adapter.list_body(
        POD, namespace=FED_NS, credential=Credential(ADMIN), gzipped=True
    )
    assert body.gzipped and FEED_FROM_GZIPPED <= len(body.data) < FEED_FROM
    assert isinstance(body.feed, Feed) and body.feed.sent == len(body.data)
    del body  # not wanted: the worker frees it and is idle again
    await asyncio.sleep(0)
    assert workers.feeding == 0
    for compress in (True, False):
        demo.app.compress = compress
        fed, projected = workers.fed, workers.projected
        got = await _post(with_workers, WIDE, ns=FED_NS)
        assert (workers.fed, workers.projected) == (fed + 1, projected + 1)
        assert got == await _post(without, WIDE, ns=FED_NS)
        request = {**PODS, "namespace": FED_NS}
        listed = await _grpc_list(with_workers, **request)
        assert (workers.fed, workers.projected) == (fed + 2, projected + 2)
        assert listed == await _grpc_list(without, **request)
        assert len(listed.items) == FED_COUNT
    demo.app.compress = True
    fed, projected = workers.fed, workers.projected
    assert await _post(with_workers, NARROW) == await _post(without, NARROW)  # 600 pods
    assert (workers.fed, workers.projected) == (fed, projected + 1)  # whole, as before
    assert workers.feeding == 0 and workers.returned == 0


@pytest.mark.parametrize("drops", [1, 2], ids=["retried", "broken"])
async def test_an_upstream_that_breaks_off_mid_body_is_the_same_answer_as_before(
    demo: DemoUpstream, pair: tuple[Gateway, Gateway], drops: int
) -> None:
    """The upstream closes the connection in the middle of a body being fed: the worker fed
    is ended, and the caller gets what a gateway without workers gives: the list (the GET
    sent once more on a fresh connection) or, broken again, the same error."""
    await _fed_pods(demo)
    with_workers, without = pair
    workers = _workers(with_workers)
    answers = []
    for served in (with_workers, without):
        demo.faults.reset()
        demo.faults.drop_connections(
            drops, verb="list", resource="pods", after_bytes=FEED_FROM_GZIPPED + 50_000
        )
        fed = workers.fed
        answers.append(await _post(served, WIDE, ns=FED_NS))
        assert demo.faults.dropped_requests == drops
        if served is with_workers:
            assert workers.fed == fed + drops + (drops == 1)  # each try fed; a third whole
            assert workers.feeding == 0
    assert answers[0] == answers[1]
    if drops == 2:
        assert b"upstream unreachable" in answers[0]
    else:
        assert len(orjson.loads(answers[0])["data"]["pods"]["items"]) == FED_COUNT
    demo.faults.reset()
    assert await _post(with_workers, WIDE, ns=FED_NS) == await _post(without, WIDE, ns=FED_NS)


class _Valve:
    """A loopback TCP proxy that passes an upstream's answer up to ``limit`` bytes, then
    holds the rest until :attr:`opened` is set (an upstream slow in the middle of a body)."""

    def __init__(self, target: str, limit: int) -> None:
        self.target_port = int(target.rsplit(":", 1)[1])
        self.limit = limit
        self.opened = asyncio.Event()
        #: The most bytes passed of one answer (one connection's).
        self.passed = 0
        #: Set when an answer is held.
        self.holding = asyncio.Event()
        #: Set when the gateway closed its side of a connection.
        self.client_closed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> _Valve:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def requests() -> None:
            while data := await reader.read(65_536):
                up_writer.write(data)
                await up_writer.drain()
            self.client_closed.set()
            up_writer.close()

        async def answers() -> None:
            passed = 0
            while data := await up_reader.read(65_536):
                room = max(0, self.limit - passed)
                if len(data) > room and not self.opened.is_set():
                    writer.write(data[:room])
                    passed += room
                    self.passed = max(self.passed, passed)
                    await writer.drain()
                    self.holding.set()
                    await self.opened.wait()
                    data = data[room:]
                writer.write(data)
                passed += len(data)
                self.passed = max(self.passed, passed)
                await writer.drain()
            writer.close()

        for work in (requests(), answers()):
            task = asyncio.create_task(work)
            self._tasks.add(task)


async def test_a_caller_that_goes_mid_body_ends_the_worker_fed_and_frees_it_all(
    demo: DemoUpstream,
) -> None:
    """The upstream holds the rest of a body being fed; the caller goes meanwhile: the
    worker fed is ended, its slot given back, the upstream connection closed; the next
    list is answered (by a new worker) the same as before."""
    await _fed_pods(demo)
    async with (
        _Valve(demo.url, FEED_FROM_GZIPPED + 50_000) as valve,
        serve_gateway(demo, valve.url, list_workers="1") as gateway,
        serve_gateway(demo, list_workers="0") as without,
    ):
        workers = _workers(gateway)
        adapter = gateway.app.state.runtime.cluster.adapter
        listing = asyncio.create_task(
            adapter.list_body(POD, namespace=FED_NS, credential=Credential(ADMIN), gzipped=True)
        )
        await asyncio.wait_for(valve.holding.wait(), 60)  # the rest of the body held
        for _ in range(6000):  # and what came before read and fed (the pool has no
            if workers.feeding:  # event for it: looked at every 10 ms, for 60 s at most)
                break
            await asyncio.sleep(0.01)
        (worker,) = workers._all
        listing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await listing
        assert workers.feeding == 0 and workers._slots is not None
        assert not workers._slots.locked()
        assert await asyncio.wait_for(worker.proc.wait(), 30) != 0  # ended
        await asyncio.wait_for(valve.client_closed.wait(), 30)  # the upstream call too
        valve.opened.set()
        got = await _post(gateway, WIDE, ns=FED_NS)
        assert got == await _post(without, WIDE, ns=FED_NS)
        assert workers.projected == 1 and worker.stopped and worker not in workers._idle


# -- small lists, projected in the gateway's own process ----------------------------------
#
# A small GraphQL list is projected from only what its selection reads, here
# (``LargeLists.projected_here``): the same bytes as the ordinary path (the body decoded
# whole, the projection run on it).  The ordinary path, on the same upstream: the gateway
# with list workers keeps a body the upstream gzipped as it came (for a worker), and one
# too small for a worker is then decoded whole here; the gateway without workers reads the
# same body inflated, small enough to be projected from its bytes.  The demo gzips an
# answer over 128 KiB, as the apiserver does.

MID = "mid"
#: Realistic pods (~2.5 KB each): a body over the demo's 128 KiB, under the small bound.
MID_COUNT = 60


@pytest.fixture
async def mid(demo: DemoUpstream) -> None:
    """A small list (in ``mid``) beside the large one."""
    await demo.store.bulk_create(POD, make_pods(MID_COUNT, MID), namespace=MID)


async def _handed_on(gateway: Gateway, namespace: str) -> Any:
    """What a GraphQL list field of ``namespace``'s pods is handed (``deferrable``)."""
    adapter = gateway.app.state.runtime.cluster.adapter
    lists = adapter.large_lists
    return await lists.handed_on(
        lambda gzipped: adapter.list_body(
            POD, namespace=namespace, credential=Credential(ADMIN), gzipped=gzipped
        ),
        deferrable=True,
    )


@pytest.mark.usefixtures("mid")
async def test_a_small_list_goes_undecoded_to_be_projected(pair: tuple[Gateway, Gateway]) -> None:
    with_workers, without = pair
    ordinary = await _handed_on(with_workers, MID)
    assert type(ordinary) is dict  # gzipped, too small for a worker: decoded whole, here
    small = await _handed_on(without, MID)
    assert type(small) is Undecoded and not small.gzipped  # projected from its bytes
    assert 128 * 1024 < len(small.data) < SMALL_PROJECTED_BYTES


@pytest.mark.parametrize(
    ("query", "variables"),
    [
        (WIDE, {"ns": MID}),
        (NARROW.replace('"big"', f'"{MID}"'), {}),
        (RAW.replace('"big"', f'"{MID}"'), {}),
        (DIRECTED, {"ns": MID, "ip": True}),
        (DIRECTED, {"ns": MID, "ip": False}),
        ('{ pods(namespace: "mid", limit: 10) { items { metadata { name } } } }', {}),
    ],
    ids=["wide", "narrow", "raw", "directed-on", "directed-off", "limit"],
)
@pytest.mark.usefixtures("mid")
async def test_a_small_list_from_its_bytes_is_the_ordinary_paths_bytes(
    pair: tuple[Gateway, Gateway], query: str, variables: dict[str, Any]
) -> None:
    with_workers, without = pair
    got = await _post(without, query, **variables)
    assert got == await _post(with_workers, query, **variables)
    assert orjson.loads(got)["data"]["pods"]["items"]


async def test_a_small_lists_value_only_a_serialiser_completes_is_completed_here(
    demo: DemoUpstream, pair: tuple[Gateway, Gateway]
) -> None:
    with_workers, without = pair
    odd = next(iter(make_pods(1, "odd", prefix="odd")))
    odd["spec"]["priority"] = 2**40
    await demo.store.bulk_create(POD, [*make_pods(MID_COUNT, "odd"), odd], namespace="odd")
    got = await _post(without, WIDE, ns="odd")
    assert got == await _post(with_workers, WIDE, ns="odd")
    assert b"Int cannot represent non 32-bit signed integer value" in got


@pytest.mark.usefixtures("mid")
async def test_a_small_list_over_the_cap_is_refused_the_same_way(demo: DemoUpstream) -> None:
    query = NARROW.replace('"big"', f'"{MID}"')
    async with (
        serve_gateway(demo, list_workers="1", max_list_items=MID_COUNT - 1) as with_workers,
        serve_gateway(demo, list_workers="0", max_list_items=MID_COUNT - 1) as without,
    ):
        got = await _post(without, query)
        assert got == await _post(with_workers, query)
    assert f"more than {MID_COUNT - 1} pods match".encode() in got


SPEC = (
    "object",
    "PodList",
    (
        (
            "items",
            1,
            "items",
            None,
            ("list", False, ("object", "Pod", (("name", 0, "name", None, None, False),))),
            False,
        ),
    ),
)


def test_a_part_is_projected_only_where_that_is_sure() -> None:
    def body(items: list[Any], **more: Any) -> bytes:
        return orjson.dumps({**more, "items": items})

    assert projected_part(body([{"name": "a"}]), SPEC, 0, LARGE_LIST) == b'{"items":[{"name":"a"}]}'
    # a large list: completed in slices by the caller, from the whole decode
    many = body([{"name": "a"}] * LARGE_LIST)
    assert projected_part(many, SPEC, 0, LARGE_LIST) == NOT_DONE
    # past 64 bits: a whole decode reads a float
    assert projected_part(b'{"items":[{"name":123456789012345678901234}]}', SPEC, 0, 9) == NOT_DONE
    assert projected_part(b'[{"items":[]}]', SPEC, 0, 9) == NOT_DONE  # not an object
    assert projected_part(b'{"items":[', SPEC, 0, 9) == NOT_DONE  # not JSON
    assert projected_part(b'{"items":"\xff"}', SPEC, 0, 9) == NOT_DONE  # not UTF-8
    over = body([{"name": "a"}, {"name": "b"}], metadata={"continue": "x"})
    assert projected_part(over, SPEC, 1, 9) == OVER_CAP


#: Annotation values JSON writes escaped, or as more than one byte per character.
ODD_TEXT = 'é\u2028\u2029\u0000\u001f\t\n"\\/😀\ud7ff\ue000'
#: One field selected twice with different sub-selections (merged), under aliases, with
#: ``__typename`` at each level and a fragment.
MERGED = """query($ns: String!) {
  pods(namespace: $ns) {
    __typename
    metadata { continue }
    items {
      __typename
      metadata { name }
      metadata { annotations namespace }
      m: metadata { __typename uid labels }
      m2: metadata { name }
      ...Spec
    }
  }
}
fragment Spec on Pod { spec { priority nodeName } status { phase } }"""


async def test_a_small_lists_odd_strings_and_merged_selections_are_the_ordinary_bytes(
    demo: DemoUpstream, pair: tuple[Gateway, Gateway]
) -> None:
    with_workers, without = pair
    pods = list(make_pods(MID_COUNT, "odd"))
    for i, item in enumerate(pods[:5]):
        item["metadata"]["annotations"] = {"odd": ODD_TEXT * (i + 1), "u": "ü"}
    await demo.store.bulk_create(POD, pods, namespace="odd")
    small = await _handed_on(without, "odd")
    assert type(small) is Undecoded and not small.gzipped  # projected from its bytes
    got = await _post(without, MERGED, ns="odd")
    assert got == await _post(with_workers, MERGED, ns="odd")
    items = orjson.loads(got)["data"]["pods"]["items"]
    assert items[0]["metadata"]["annotations"]["odd"] == ODD_TEXT
    assert items[0]["m"]["__typename"] and items[0]["m2"]["name"] == items[0]["metadata"]["name"]
