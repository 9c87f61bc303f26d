"""A small GraphQL list projected from only what its selection reads, in the gateway's own
process (``LargeLists.projected_here``): the same bytes as the ordinary path (the body
decoded whole, the projection run on it), for every selection the projection knows, a
value only a serialiser completes, a list over the cap and a body that is not a list.

The ordinary path, on the same upstream: a gateway with list workers keeps a body the
upstream gzipped as it came (for a worker), and one too small for a worker is then decoded
whole here; a gateway without workers reads the same body inflated, small enough to be
projected from its bytes.  The demo gzips an answer over 128 KiB, as the apiserver does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.core.lists.body import Undecoded
from gateway.core.lists.jobs import NOT_DONE, OVER_CAP, projected_part
from gateway.core.lists.large import LARGE_LIST, SMALL_PROJECTED_BYTES
from gateway.core.model.registry import POD
from gateway.core.upstream.credentials import Credential
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.sample import make_pods
from tests.gateway.test_list_workers import DIRECTED, NARROW, RAW, WIDE
from tests.support.graphql import ADMIN, Gateway, serve_gateway, with_and_without_workers

NS = "mid"
#: Realistic pods (~2.5 KB each): a body over the demo's 128 KiB, under the small bound.
COUNT = 60


@pytest.fixture
async def demo() -> AsyncIterator[DemoUpstream]:
    async with DemoUpstream() as upstream:
        await upstream.store.bulk_create(POD, make_pods(COUNT, NS), namespace=NS)
        yield upstream


@pytest.fixture
async def pair(demo: DemoUpstream) -> AsyncIterator[tuple[Gateway, Gateway]]:
    async with with_and_without_workers(demo) as both:
        yield both


async def _post(gateway: Gateway, query: str, **variables: Any) -> bytes:
    async with httpx.AsyncClient(
        base_url=gateway.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60
    ) as client:
        response = await client.post("/graphql", json={"query": query, "variables": variables})
    assert response.status_code == 200, response.text[:500]
    return response.content


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


async def test_the_two_gateways_take_the_two_paths(pair: tuple[Gateway, Gateway]) -> None:
    with_workers, without = pair
    ordinary = await _handed_on(with_workers, NS)
    assert type(ordinary) is dict  # gzipped, too small for a worker: decoded whole, here
    small = await _handed_on(without, NS)
    assert type(small) is Undecoded and not small.gzipped  # projected from its bytes
    assert 128 * 1024 < len(small.data) < SMALL_PROJECTED_BYTES


@pytest.mark.parametrize(
    ("query", "variables"),
    [
        (WIDE, {"ns": NS}),
        (NARROW.replace('"big"', f'"{NS}"'), {}),
        (RAW.replace('"big"', f'"{NS}"'), {}),
        (DIRECTED, {"ns": NS, "ip": True}),
        (DIRECTED, {"ns": NS, "ip": False}),
        ('{ pods(namespace: "mid", limit: 10) { items { metadata { name } } } }', {}),
    ],
    ids=["wide", "narrow", "raw", "directed-on", "directed-off", "limit"],
)
async def test_a_small_list_from_its_bytes_is_the_ordinary_paths_bytes(
    pair: tuple[Gateway, Gateway], query: str, variables: dict[str, Any]
) -> None:
    with_workers, without = pair
    got = await _post(without, query, **variables)
    assert got == await _post(with_workers, query, **variables)
    assert orjson.loads(got)["data"]["pods"]["items"]


async def test_a_value_only_a_serialiser_completes_is_completed_the_ordinary_way(
    demo: DemoUpstream, pair: tuple[Gateway, Gateway]
) -> None:
    with_workers, without = pair
    odd = next(iter(make_pods(1, "odd", prefix="odd")))
    odd["spec"]["priority"] = 2**40
    await demo.store.bulk_create(POD, [*make_pods(COUNT, "odd"), odd], namespace="odd")
    got = await _post(without, WIDE, ns="odd")
    assert got == await _post(with_workers, WIDE, ns="odd")
    assert b"Int cannot represent non 32-bit signed integer value" in got


async def test_a_small_list_over_the_cap_is_refused_the_same_way(demo: DemoUpstream) -> None:
    query = NARROW.replace('"big"', f'"{NS}"')
    async with (
        serve_gateway(demo, list_workers="1", max_list_items=COUNT - 1) as with_workers,
        serve_gateway(demo, list_workers="0", max_list_items=COUNT - 1) as without,
    ):
        got = await _post(without, query)
        assert got == await _post(with_workers, query)
    assert f"more than {COUNT - 1} pods match".encode() in got


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
