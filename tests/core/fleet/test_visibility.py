"""Which clusters a caller may see (:mod:`gateway.core.fleet.visibility`), against demo upstreams,
and the names of a fleet call (:func:`gateway.core.fleet.fanout.select`).

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
from gateway.core.fleet.fanout import MAX_LISTED, check_resume, max_listed, select
from gateway.core.fleet.fleet import Fleet
from gateway.core.fleet.visibility import NOT_ASKED, Visibility, refusal_message
from gateway.core.upstream.budget import Newcomers
from gateway.core.upstream.credentials import ANONYMOUS, Credential
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


# -- a caller's token goes only where it is named or shared ------------------------------


async def test_a_token_is_reviewed_only_on_clusters_that_share_the_identity_provider() -> None:
    async with contextlib.AsyncExitStack() as stack, two(stack) as (fleet, _):
        alone = Visibility(fleet)  # b does not share the default's identity provider
        admin = Credential(ADMIN)
        assert await alone.names(admin) == ["default"]
        assert alone.reviews == 1  # the default's; b was never asked with the token
        assert await alone.names(BOB) == [] and alone.reviews == 2
        assert not await alone.sees("b", BOB) and alone.reviews == 2
        assert not await alone.joins("b", admin)
        # named, b is served all the same (its own answer shows)
        assert await alone.get("b", BOB) is fleet.get("b")
        # a caller without a token has nothing to leak: every cluster may be asked
        assert await alone.names(ANONYMOUS) == [] and alone.reviews == 4

        # shown to everyone with "all", yet "*" still stands for the shared clusters only
        everything = Visibility(fleet, "all")
        assert await everything.names(admin) == ["default", "b"]
        assert await everything.view(admin).default_set() == ["default"]
        assert not await everything.joins("b", admin)
        assert await everything.view(ANONYMOUS).default_set() == ["default", "b"]

        # "*" shares every cluster; so does a demo cluster of the gateway's own
        assert await Visibility(fleet, shared=("*",)).names(admin) == ["default", "b"]
        fleet.get("b").demo = True
        assert await Visibility(fleet).names(admin) == ["default", "b"]


async def test_one_view_asks_once_whatever_it_is_asked() -> None:
    async with contextlib.AsyncExitStack() as stack, two(stack) as (fleet, _):
        seen = Visibility(fleet, shared=SHARED, ttl=0, negative_ttl=0)  # nothing kept
        view = seen.view(BOB)
        answers = await asyncio.gather(
            *(view.names() for _ in range(50)),
            *(view.refusal([f"n{i}", "x"]) for i in range(50)),
            *(view.default_set() for _ in range(50)),
        )
        assert seen.reviews == 2  # one per cluster for the whole operation
        assert answers[0] == ["b"] and answers[-1] == ["b"]
        refusal = answers[50]
        assert isinstance(refusal, errors.NotFound)
        assert refusal.message == (
            'clusters "n0", "x" are not served by this gateway; clusters you may see: b'
        )
        await seen.view(BOB).names()
        assert seen.reviews == 4  # a new operation asks again (nothing kept here)


def test_a_refusal_is_bounded_whatever_it_quotes() -> None:
    long = "x" * 5000
    message = refusal_message([long, *(f"n{i}" for i in range(10_000))], ["default"])
    assert len(message) < 400
    assert message.startswith(f'clusters "{"x" * 63}..." (5000 characters), "n0"')
    assert "and 9996 more are not served by this gateway; clusters you may see: default" in (
        message
    )
    assert refusal_message([""], []) == (
        'cluster "default" is not served by this gateway; clusters you may see: none'
    )


# -- the reviews of callers not known yet share one budget --------------------------------


def test_newcomers_share_one_bucket_and_known_callers_pass_free() -> None:
    clock = Clock()
    gate = Newcomers(rate=2, burst=4, memory=100, max_known=2, clock=clock)
    for i in range(4):
        gate.admit(f"stranger-{i}")
    with pytest.raises(errors.ResourceExhausted) as spent:
        gate.admit("stranger-5")
    assert spent.value.retry_after == 1.0
    assert "too many new callers" in spent.value.message
    gate.remember("alice")
    for _ in range(100):
        gate.admit("alice")  # known: free, however spent the bucket is
    clock.now += 1.0  # two more a second
    gate.admit("stranger-6")
    gate.admit("stranger-7")
    with pytest.raises(errors.ResourceExhausted):
        gate.admit("stranger-8")
    assert (gate.admitted, gate.refused) == (6, 2)
    clock.now += 100  # alice's last review is older than `memory`: a stranger again
    assert not gate.known("alice")
    gate.remember("a")
    gate.remember("b")
    gate.remember("c")  # at most two known: the oldest goes
    assert not gate.known("a") and gate.known("b") and gate.known("c")
    with pytest.raises(ValueError):
        Newcomers(rate=0)


async def test_a_flood_of_fresh_tokens_is_refused_while_known_callers_are_asked() -> None:
    clock = Clock()
    async with contextlib.AsyncExitStack() as stack, two(stack) as (fleet, _):
        gate = Newcomers(rate=1, burst=4, clock=clock)
        seen = Visibility(fleet, shared=SHARED, newcomers=gate, clock=clock)
        assert await seen.names(BOB) == ["b"]  # 2 reviews: bob is known now (b said yes)
        assert seen.reviews == 2
        refused = 0
        for i in range(20):
            try:
                await seen.names(Credential(f"random-{i}"))
            except errors.ResourceExhausted:
                refused += 1
        assert seen.reviews == 4  # what was left of the burst; nothing more was sent
        assert refused == 19
        # a name not served is still a NOT_FOUND, naming none, and sends nothing
        refusal = await seen.unknown("nope", Credential("random-y"))
        assert refusal.message.endswith(f"clusters you may see: {NOT_ASKED}")
        assert seen.reviews == 4
        clock.now += 61  # bob's answers have expired: asked again, free of the budget
        assert await seen.names(BOB) == ["b"]
        assert seen.reviews == 6
        # a stream that follows every cluster does not take in what cannot be asked now
        assert not await seen.joins("b", Credential("random-x"))


async def test_a_fleet_calls_list_is_bounded_collapsed_and_resolved_once() -> None:
    async with contextlib.AsyncExitStack() as stack, two(stack) as (fleet, _):
        seen = Visibility(fleet, shared=SHARED, ttl=0, negative_ttl=0)
        view = seen.view(BOB)
        chosen = await select(fleet, view, ["b", "*", "nope", "b", "*", "nope", "default"])
        assert chosen.names == ("b", "nope", "default")  # each once, "*" where it stands
        assert chosen.missing == ("nope",) and chosen.follows_all
        assert chosen.refusal("nope").message == (
            'cluster "nope" is not served by this gateway; clusters you may see: b'
        )
        assert chosen.refusal("nope").cluster == "nope"
        assert seen.reviews == 2  # "*" and the refusal: one question per cluster
        unserved = [f"n{i}" for i in range(MAX_LISTED)]
        many = await select(fleet, seen.view(BOB), unserved)
        refusal = many.refusal_of_all()
        assert refusal is not None and len(refusal.message) < 300
        assert seen.reviews == 4  # 64 names not served, one question per cluster

        for asked, field_message in (
            ([*unserved, "b"], "clusters names 65 entries; a fleet call names at most 64"),
            (["b", ""], "a cluster name is empty"),
            (["x" * 64], "a cluster name has at most 63 characters; one of clusters has 64"),
        ):
            with pytest.raises(errors.InvalidParameter) as refused:
                await select(fleet, seen.view(BOB), asked)
            assert refused.value.message.startswith(field_message)
            assert refused.value.causes[0].field == "clusters"
        assert seen.reviews == 4  # refused before anything was asked
        assert max_listed(fleet) == MAX_LISTED
        with pytest.raises(errors.InvalidParameter, match="resume_from names 65 clusters"):
            check_resume(fleet, 65, "resume_from")
