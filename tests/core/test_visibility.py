"""Which clusters a caller may see (:mod:`gateway.core.visibility`), against demo upstreams.

Clusters ``default`` and ``b`` are two demo upstreams; bob's token is known on ``b`` only.
Each review is a real SelfSubjectReview over loopback, counted by the visibility itself
and by the demo's own fault counters where a test makes the demo fail; time is a clock
the test moves, so expiry is shown without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from gateway.core import errors
from gateway.core.credentials import ANONYMOUS, Credential
from gateway.core.fleet import Fleet
from gateway.core.visibility import Visibility
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.auth import DEFAULT_TOKENS, TokenGrant
from tests.support.grpc import ADMIN, demo_cluster

BOB = Credential("bob-token")
#: b shares the default cluster's identity provider (its demo knows the same tokens and bob).
SHARED = ("b",)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def two(stack: contextlib.AsyncExitStack) -> AsyncIterator[tuple[Fleet, DemoUpstream]]:
    tokens = {**DEFAULT_TOKENS, "bob-token": TokenGrant("bob", "*", cluster_scoped=True)}
    a = await stack.enter_async_context(DemoUpstream())
    b = await stack.enter_async_context(DemoUpstream(tokens=tokens))
    fleet = Fleet()
    for name, demo in (("default", a), ("b", b)):
        fleet.add(name, await stack.enter_async_context(demo_cluster(demo.url, name=name)))
    yield fleet, b


async def test_answers_are_kept_a_yes_longer_than_a_no_and_coalesced() -> None:
    clock = Clock()
    async with contextlib.AsyncExitStack() as stack, two(stack) as (fleet, _):
        seen = Visibility(fleet, clock=clock, shared=SHARED)
        shown = await asyncio.gather(*(seen.names(BOB) for _ in range(20)))
        assert shown == [["b"]] * 20
        assert seen.reviews == 2  # one per cluster for twenty concurrent callers
        assert await seen.names(Credential(ADMIN)) == ["default", "b"]
        assert seen.reviews == 4
        assert await seen.names(BOB) == ["b"] and seen.reviews == 4  # kept

        clock.now += 10.5  # the no (default's) has expired, the yes (b's) has not
        assert await seen.names(BOB) == ["b"]
        assert seen.reviews == 5
        clock.now += 50  # 60.5 s after the first: b's yes has expired too
        assert await seen.names(BOB) == ["b"]
        assert seen.reviews == 7

        # A caller without a credential is known nowhere (401 from both demos).
        assert await seen.names(ANONYMOUS) == []
        assert await seen.sees("b", ANONYMOUS) is False
        assert await seen.sees("nope", Credential(ADMIN)) is False


async def test_a_removed_or_reconfigured_cluster_forgets_its_answers() -> None:
    async with contextlib.AsyncExitStack() as stack, two(stack) as (fleet, b):
        seen = Visibility(fleet, max_entries=2, shared=SHARED)
        assert await seen.names(BOB) == ["b"]
        assert len(seen) == 2
        fleet.remove("b")
        assert len(seen) == 1  # b's answer went with it
        reviews = seen.reviews
        assert await seen.names(BOB) == ["default"]  # one cluster: shown to all, unasked
        assert seen.reviews == reviews
        # b again, on a new configuration: asked again (it may trust other callers now)
        fleet.add("b", await stack.enter_async_context(demo_cluster(b.url, name="b")))
        assert await seen.names(BOB) == ["b"]
        assert seen.reviews == reviews + 1
        again = await stack.enter_async_context(demo_cluster(b.url, name="b"))
        fleet.add("b", again)
        assert await seen.sees("b", BOB)
        assert seen.reviews == reviews + 2
        # bounded per cluster: the oldest answers go first
        for token in ("t1", "t2", "t3"):
            await seen.names(Credential(token))
        assert len(seen) == 4


async def test_an_old_cluster_is_asked_its_discovery_and_a_failing_one_is_not_shown() -> None:
    async with contextlib.AsyncExitStack() as stack, two(stack) as (fleet, b):
        seen = Visibility(fleet, shared=SHARED)
        # no SelfSubjectReview (before 1.28): GET /apis, which only a known caller may read
        b.faults.fail_requests(1, status=404, verb="create", resource="selfsubjectreviews")
        assert await seen.sees("b", BOB)
        assert b.faults.failed_requests == 1
        assert not await seen.sees("b", Credential("stranger"))
        assert seen.reviews == 2

        # a cluster answering 500, or not at all, is not shown; named, it is still served
        b.faults.fail_requests(1, status=500, verb="create", resource="selfsubjectreviews")
        assert not await seen.sees("b", Credential(ADMIN))
        async with demo_cluster("http://127.0.0.1:1", name="down") as down:
            fleet.add("down", down)
            assert await seen.names(Credential(ADMIN)) == ["default"]
            assert await seen.get("down", Credential(ADMIN)) is down
            fleet.remove("down")
        with pytest.raises(errors.NotFound) as unknown:
            await seen.get("nope", BOB)
        assert unknown.value.message == (
            'cluster "nope" is not served by this gateway; clusters you may see: b'
        )


async def test_every_cluster_is_shown_without_review_with_all_or_one_cluster() -> None:
    async with contextlib.AsyncExitStack() as stack, two(stack) as (fleet, _):
        everything = Visibility(fleet, "all")
        assert await everything.names(ANONYMOUS) == ["default", "b"]
        assert everything.reviews == 0
        fleet.remove("b")
        alone = Visibility(fleet)
        assert await alone.names(ANONYMOUS) == ["default"]
        assert alone.reviews == 0
        with pytest.raises(ValueError, match="authenticated, all"):
            Visibility(fleet, "some")
