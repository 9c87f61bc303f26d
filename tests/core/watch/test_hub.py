"""The core's watch hub over real sockets against the demo upstream: sharing, starts,
resume, slow subscribers, budgets, faults, liveness."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.core import errors
from gateway.core.model.options import ListOptions
from gateway.core.model.registry import REGISTRY
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.budget import Budget, Newcomers
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from gateway.core.watch.access import AccessReviews
from gateway.core.watch.hub import (
    HubEvent,
    SharedWatches,
    WatchHub,
    WatchStart,
    WatchSubscription,
    WatchTarget,
)
from gateway.core.watch.watcher import INITIAL_EVENTS_END, RESYNC_ANNOTATION, Backoff
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.auth import TokenGrant

ADMIN = Credential("admin-token")
ALICE = Credential("alice-token")
NS = "demo"
OTHER = "elsewhere"
LEASES = REGISTRY.lookup("leases")
FAST = Backoff(initial=0.01, cap=0.05)
STEP = 30.0


@dataclass
class Env:
    demo: DemoUpstream
    kube: KubeAdapter
    hub: WatchHub


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with DemoUpstream(seed=False, history=20_000) as demo:
        await demo.store.ensure_namespace(NS)
        await demo.store.ensure_namespace(OTHER)
        async with build_http_client(UpstreamConfig(server=demo.url, source="demo")) as http:
            kube = KubeAdapter(http)
            hub = WatchHub(kube, backoff=FAST, linger=0.0)
            try:
                yield Env(demo, kube, hub)
            finally:
                await hub.aclose()


def lease(name: str, holder: str = "a", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "hub", **labels}},
        "spec": {"holderIdentity": holder},
    }


def target(namespace: str | None = NS, labels: str | None = None) -> WatchTarget:
    return WatchTarget(LEASES, namespace, labels)


async def take(sub: WatchSubscription, n: int) -> list[HubEvent]:
    out = []
    async with asyncio.timeout(STEP):
        for _ in range(n):
            event = await sub.next()
            assert event is not None, "the subscription ended"
            out.append(event)
    return out


def names(events: list[HubEvent]) -> list[tuple[str, str | None]]:
    return [(e.type, e.object["metadata"].get("name")) for e in events]


class View:
    """What a subscriber holds after applying its events (RESYNC frames replace it)."""

    def __init__(self) -> None:
        self.objects: dict[str, str] = {}
        self._fresh: dict[str, str] | None = None
        self.resume: str | None = None
        self._last = 0

    def apply(self, event: HubEvent) -> None:
        name = event.object["metadata"].get("name")
        target = self._fresh if self._fresh is not None else self.objects
        if event.resume is not None and event.type in ("ADDED", "MODIFIED", "DELETED"):
            # a live change: in upstream order, never one seen before
            assert int(event.resource_version) > self._last, (event, self._last)
            self._last = int(event.resource_version)
        if event.type == "RESYNC":
            edge = event.object["metadata"]["annotations"][RESYNC_ANNOTATION]
            if edge == "begin":
                self._fresh = dict(self.objects)
            else:
                assert self._fresh is not None
                self.objects, self._fresh = self._fresh, None
        elif event.type == "DELETED":
            target.pop(name, None)
        elif event.type in ("ADDED", "MODIFIED"):
            target[name] = event.object["metadata"]["resourceVersion"]
        if event.resume is not None:
            self.resume = event.resume


async def upstream_state(env: Env) -> dict[str, str]:
    listed = await env.kube.list(LEASES, namespace=NS, credential=ADMIN)
    return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in listed["items"]}


async def follow_until(sub: WatchSubscription, view: View, rv: str) -> None:
    """Apply events until the view's resume point reaches ``rv`` (decimal)."""
    async with asyncio.timeout(STEP):
        while view.resume is None or int(view.resume) < int(rv):
            event = await sub.next()
            assert event is not None, "the subscription ended"
            view.apply(event)


# -- start policy --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (ListOptions(), WatchStart("snapshot")),
        (ListOptions(resource_version="0"), WatchStart("snapshot")),
        (ListOptions(resource_version="42"), WatchStart("resume", "42")),
        (
            ListOptions(send_initial_events=False, resource_version_match="NotOlderThan"),
            WatchStart("now"),
        ),
        (
            ListOptions(
                send_initial_events=False,
                resource_version="42",
                resource_version_match="NotOlderThan",
            ),
            WatchStart("resume", "42"),
        ),
        (
            ListOptions(
                send_initial_events=True,
                resource_version_match="NotOlderThan",
                allow_watch_bookmarks=True,
            ),
            WatchStart("snapshot", initial_events_end=True, bookmarks=True),
        ),
    ],
)
def test_the_start_policy_is_the_apiservers(options: ListOptions, expected: WatchStart) -> None:
    assert WatchStart.from_options(options) == expected


@pytest.mark.parametrize(
    "options",
    [
        ListOptions(send_initial_events=True),  # without resourceVersionMatch
        ListOptions(resource_version_match="NotOlderThan"),  # without sendInitialEvents
        ListOptions(limit=5),
        ListOptions(continue_="abc"),
    ],
)
def test_watch_options_the_apiserver_refuses_are_refused(options: ListOptions) -> None:
    with pytest.raises(errors.InvalidParameter):
        WatchStart.from_options(options)


# -- snapshots, sharing --------------------------------------------------------------------


async def test_a_snapshot_far_larger_than_the_queue_arrives_whole_then_the_changes(
    env: Env,
) -> None:
    env.hub.max_queue = 8
    await env.demo.store.bulk_create(
        "leases", (lease(f"l{i:04}") for i in range(3000)), namespace=NS
    )
    sub = await env.hub.subscribe(target(), WatchStart("snapshot", initial_events_end=True), ADMIN)
    initial = await take(sub, 3001)
    assert sorted(n for _, n in names(initial[:-1])) == [f"l{i:04}" for i in range(3000)]
    assert {e.type for e in initial[:-1]} == {"ADDED"}
    end = initial[-1]
    assert end.type == "BOOKMARK"
    assert end.object["metadata"]["annotations"] == {INITIAL_EVENTS_END: "true"}
    assert [e.resume for e in initial[:-2]] == [None] * 2999  # not resumable mid-snapshot
    await env.demo.store.patch("leases", "l0007", {"spec": {"holderIdentity": "b"}}, namespace=NS)
    assert names(await take(sub, 1)) == [("MODIFIED", "l0007")]
    assert env.demo.faults.watch_requests == 1
    sub.close()


async def test_a_snapshot_taken_at_once_is_what_its_events_would_have_been(env: Env) -> None:
    await env.demo.store.bulk_create(
        "leases", (lease(f"l{i:04}") for i in range(1200)), namespace=NS
    )
    start = WatchStart("snapshot", initial_events_end=True)
    by_event = await env.hub.subscribe(target(), start, ADMIN)
    events = await take(by_event, 1201)
    at_once = await env.hub.subscribe(target(), start, ADMIN)
    delivered = env.hub.stats.events_delivered
    pairs = at_once.take_snapshot()
    assert pairs is not None and at_once.take_snapshot() is None  # once
    # the same objects, the very bytes the events carry, and the same resume point after
    assert [(e.key, e.raw) for e in events[:-1]] == pairs
    assert all(raw is e.raw for (_, raw), e in zip(pairs, events, strict=False))
    assert at_once.resume == events[-2].resume and at_once.resume is not None
    assert at_once.delivered == 1200 and env.hub.stats.events_delivered == delivered + 1200
    (end,) = await take(at_once, 1)  # then the end marker, then the changes
    assert end.type == "BOOKMARK" and end.object["metadata"]["annotations"] == {
        INITIAL_EVENTS_END: "true"
    }
    await env.demo.store.patch("leases", "l0007", {"spec": {"holderIdentity": "b"}}, namespace=NS)
    assert names(await take(at_once, 1)) == [("MODIFIED", "l0007")]
    assert names(await take(by_event, 1)) == [("MODIFIED", "l0007")]
    # a subscriber that has read an event of its snapshot gets the rest as events
    late = await env.hub.subscribe(target(), WatchStart("snapshot"), ADMIN)
    first = await take(late, 1)
    assert late.take_snapshot() is None
    rest = await take(late, 1199)
    assert sorted(n for _, n in names(first + rest)) == [f"l{i:04}" for i in range(1200)]
    for sub in (by_event, at_once, late):
        sub.close()


async def test_one_identity_shares_one_upstream_watch_identities_never_share(env: Env) -> None:
    await env.demo.store.create("leases", lease("mine"), namespace=NS)
    await env.demo.store.create("leases", lease("theirs"), namespace=OTHER)
    starts = [WatchStart("snapshot"), WatchStart("now"), WatchStart("snapshot", bookmarks=True)]
    subs = [await env.hub.subscribe(target(None), starts[i % 3], ADMIN) for i in range(60)]
    assert env.hub.stats.upstream_watches == 1 and env.hub.stats.subscribers == 60
    # alice may watch only her namespace: her own upstream watch, her own objects
    with pytest.raises(errors.Forbidden):
        await env.hub.subscribe(target(None), WatchStart("snapshot"), ALICE)
    hers = await env.hub.subscribe(target(NS), WatchStart("snapshot"), ALICE)
    assert names(await take(hers, 1)) == [("ADDED", "mine")]
    assert env.hub.stats.upstream_watches == 2
    await env.demo.store.create("leases", lease("secret"), namespace=OTHER)
    await env.demo.store.create("leases", lease("shared"), namespace=NS)
    assert names(await take(hers, 1)) == [("ADDED", "shared")]  # never "secret"
    for i, sub in enumerate(subs):
        got = names(await take(sub, 4 if i % 3 != 1 else 2))
        if i % 3 != 1:
            assert sorted(got[:2]) == [("ADDED", "mine"), ("ADDED", "theirs")]
            got = got[2:]
        assert got == [("ADDED", "secret"), ("ADDED", "shared")]
        sub.close()
    hers.close()
    assert env.demo.faults.watch_requests == 2  # one per identity, counted at the upstream


async def test_late_joiners_get_a_consistent_snapshot_with_no_gap_and_no_duplicate(
    env: Env,
) -> None:
    for i in range(20):
        await env.demo.store.create("leases", lease(f"l{i}"), namespace=NS)
    views: list[tuple[WatchSubscription, View]] = []
    rng = random.Random(7)
    for n in range(400):
        name = f"l{rng.randrange(20)}"
        if n % 97 == 96:
            await env.demo.store.delete("leases", name, namespace=NS)
            await env.demo.store.create("leases", lease(name), namespace=NS)
        else:
            await env.demo.store.patch(
                "leases", name, {"spec": {"holderIdentity": f"h{n}"}}, namespace=NS
            )
        if n % 40 == 0:
            start = WatchStart("snapshot") if n % 80 == 0 else WatchStart("now")
            sub = await env.hub.subscribe(target(), start, ADMIN)
            view = View()
            if start.mode == "now":
                view.objects = dict(await upstream_state(env))  # what "now" means to it
            views.append((sub, view))
        if n % 7 == 0:
            await asyncio.sleep(0)  # let the hub's watch make progress while we write
    final = await upstream_state(env)
    last = env.demo.store.resource_version
    for sub, view in views:
        await follow_until(sub, view, last)
        assert view.objects == final
        sub.close()
    assert env.demo.faults.watch_requests == 1


# -- resume ---------------------------------------------------------------------------------


async def test_resume_replays_the_history_and_older_versions_catch_up_exactly(env: Env) -> None:
    env.hub.history = 5
    first = await env.hub.subscribe(target(), WatchStart("snapshot"), ADMIN)
    rvs = []
    for i in range(8):
        created = await env.demo.store.create("leases", lease(f"r{i}"), namespace=NS)
        rvs.append(created["metadata"]["resourceVersion"])
    await take(first, 8)
    # inside the history: exactly what followed
    again = await env.hub.subscribe(target(), WatchStart("resume", rvs[4]), ADMIN)
    assert names(await take(again, 3)) == [("ADDED", f"r{i}") for i in (5, 6, 7)]
    # at the newest version: nothing to replay, then live
    now = await env.hub.subscribe(target(), WatchStart("resume", rvs[7]), ADMIN)
    # older than the history (r3..r7): a watch of its own from rvs[0] until it reaches the
    # history, then the shared watch's history and live events; exactly what followed
    old = await env.hub.subscribe(target(), WatchStart("resume", rvs[0]), ADMIN)
    assert old.catching_up
    caught = await take(old, 7)
    assert names(caught) == [("ADDED", f"r{i}") for i in range(1, 8)]
    assert [e.resume for e in caught] == rvs[1:]
    assert not old.catching_up  # handed over
    assert env.hub.stats.catch_ups == 1
    await env.demo.store.create("leases", lease("next"), namespace=NS)
    for sub in (first, again, now, old):
        assert names(await take(sub, 1)) == [("ADDED", "next")]  # once each
        sub.close()
    assert env.demo.faults.watch_requests == 2  # the shared watch and old's catch-up


async def test_a_resume_the_upstream_no_longer_has_gets_a_resync_frame(env: Env) -> None:
    env.hub.history = 2
    first = await env.hub.subscribe(target(), WatchStart("snapshot"), ADMIN)
    rvs = []
    for i in range(5):
        created = await env.demo.store.create("leases", lease(f"r{i}"), namespace=NS)
        rvs.append(created["metadata"]["resourceVersion"])
    await take(first, 5)
    env.demo.faults.compact()  # rvs[0] is gone upstream too: its catch-up watch gets 410
    old = await env.hub.subscribe(target(), WatchStart("resume", rvs[0]), ADMIN)
    frame = await take(old, 7)
    assert frame[0].type == "RESYNC" and frame[-1].type == "RESYNC"
    assert sorted(n for _, n in names(frame[1:-1])) == [f"r{i}" for i in range(5)]
    assert frame[-1].resume is not None
    await env.demo.store.create("leases", lease("next"), namespace=NS)
    for sub in (first, old):
        assert names(await take(sub, 1)) == [("ADDED", "next")]
        sub.close()
    assert not old.catching_up


async def test_a_resume_before_the_history_without_stream_budget_gets_a_resync(env: Env) -> None:
    env.hub.history = 5
    env.hub.streams = Budget("upstream streams", 10, 1)  # the shared watch takes the one
    first = await env.hub.subscribe(target(), WatchStart("snapshot"), ADMIN)
    rvs = []
    for i in range(8):
        created = await env.demo.store.create("leases", lease(f"r{i}"), namespace=NS)
        rvs.append(created["metadata"]["resourceVersion"])
    await take(first, 8)
    # no catch-up watch can be opened: the whole state inside a RESYNC frame (a relist's)
    old = await env.hub.subscribe(target(), WatchStart("resume", rvs[0]), ADMIN)
    assert not old.catching_up
    frame = await take(old, 10)
    assert frame[0].type == "RESYNC" and frame[-1].type == "RESYNC"
    assert sorted(n for _, n in names(frame[1:-1])) == [f"r{i}" for i in range(8)]
    assert frame[-1].resume == rvs[7]
    await env.demo.store.create("leases", lease("next"), namespace=NS)
    for sub in (first, old):
        assert names(await take(sub, 1)) == [("ADDED", "next")]
        sub.close()
    assert env.hub.stats.catch_ups == 0
    assert env.demo.faults.watch_requests == 1


async def test_a_herd_resuming_at_its_own_versions_is_replayed_from_one_upstream_watch(
    env: Env,
) -> None:
    """Subscribers moving from a draining gateway arrive together, each at its own version:
    the hub's one watch starts from the oldest, and each gets exactly what followed its own."""
    created = await env.demo.store.create("leases", lease("a"), namespace=NS)
    oldest = created["metadata"]["resourceVersion"]
    patched = await env.demo.store.patch(
        "leases", "a", {"spec": {"holderIdentity": "b"}}, namespace=NS
    )
    newer = patched["metadata"]["resourceVersion"]
    await env.demo.store.create("leases", lease("b"), namespace=NS)
    await env.demo.store.delete("leases", "a", namespace=NS)
    # the newer one opens the watch; the older one joins before its list is taken
    ahead, behind = await asyncio.gather(
        env.hub.subscribe(target(), WatchStart("resume", newer), ADMIN),
        env.hub.subscribe(target(), WatchStart("resume", oldest), ADMIN),
    )
    assert names(await take(behind, 3)) == [("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    assert names(await take(ahead, 2)) == [("ADDED", "b"), ("DELETED", "a")]
    await env.demo.store.create("leases", lease("c"), namespace=NS)
    for sub in (ahead, behind):
        assert names(await take(sub, 1)) == [("ADDED", "c")]
        sub.close()
    assert env.hub.stats.catch_ups == 0
    assert env.demo.faults.watch_requests == 1


async def test_a_first_subscriber_resuming_from_before_the_list_loses_nothing(env: Env) -> None:
    created = await env.demo.store.create("leases", lease("a"), namespace=NS)
    since = created["metadata"]["resourceVersion"]
    await env.demo.store.patch("leases", "a", {"spec": {"holderIdentity": "b"}}, namespace=NS)
    await env.demo.store.create("leases", lease("b"), namespace=NS)
    await env.demo.store.delete("leases", "a", namespace=NS)
    # No hub watch ran meanwhile: the hub lists, then watches from `since`.
    resumed = await env.hub.subscribe(target(), WatchStart("resume", since), ADMIN)
    snapshot = await env.hub.subscribe(target(), WatchStart("snapshot"), ADMIN)
    assert names(await take(resumed, 3)) == [("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    assert names(await take(snapshot, 1)) == [("ADDED", "b")]  # the list's state, once
    await env.demo.store.create("leases", lease("c"), namespace=NS)
    assert names(await take(resumed, 1)) == [("ADDED", "c")]
    assert names(await take(snapshot, 1)) == [("ADDED", "c")]  # no catch-up replays
    resumed.close()
    snapshot.close()


# -- slow subscribers -----------------------------------------------------------------------


async def test_a_subscriber_that_stops_reading_is_ended_resumably_and_slows_no_one(
    env: Env,
) -> None:
    env.hub.max_queue = 5
    await env.demo.store.create("leases", lease("x"), namespace=NS)
    fast = await env.hub.subscribe(target(), WatchStart("snapshot"), ADMIN)
    slow = await env.hub.subscribe(target(), WatchStart("snapshot"), ADMIN)
    assert names(await take(fast, 1)) == names(await take(slow, 1)) == [("ADDED", "x")]
    stopped_at = slow.resume
    assert stopped_at is not None
    for i in range(12):
        await env.demo.store.create("leases", lease(f"s{i}"), namespace=NS)
        assert names(await take(fast, 1)) == [("ADDED", f"s{i}")]
    with pytest.raises(errors.SlowSubscriber) as ended:
        await slow.next()
    assert ended.value.resource_version == stopped_at
    assert env.hub.stats.dropped_slow == 1
    back = await env.hub.subscribe(target(), WatchStart("resume", stopped_at), ADMIN)
    assert names(await take(back, 12)) == [("ADDED", f"s{i}") for i in range(12)]
    for sub in (fast, slow, back):
        sub.close()


# -- budgets ----------------------------------------------------------------------------------


async def test_streams_past_the_budget_are_refused_at_once_and_others_are_served(
    env: Env,
) -> None:
    env.kube.streams = Budget("upstream streams", total=4, per_scope=3)
    env.hub.streams = env.kube.streams
    mine = [
        await env.hub.subscribe(target(NS, f"n={i}"), WatchStart("now"), ADMIN) for i in range(3)
    ]
    # the same watch again shares the open one: no new stream
    extra = await env.hub.subscribe(target(NS, "n=0"), WatchStart("now"), ADMIN)
    with pytest.raises(errors.ResourceExhausted) as refused:
        await env.hub.subscribe(target(NS, "n=9"), WatchStart("now"), ADMIN)
    assert "identity" in refused.value.message
    assert env.hub.stats.upstream_watches == 3  # refused before any upstream call
    theirs = await env.hub.subscribe(target(NS), WatchStart("now"), ALICE)
    with pytest.raises(errors.ResourceExhausted) as full:
        await env.hub.subscribe(target(NS, "n=1"), WatchStart("now"), ALICE)
    assert "at most 4" in full.value.message
    # requests are untouched by a spent stream budget
    await env.kube.list(LEASES, namespace=NS, credential=ADMIN)
    for sub in mine:
        sub.close()
    assert env.hub.stats.upstream_watches == 2  # linger 0: closed with their last subscriber
    again = await env.hub.subscribe(target(NS, "n=9"), WatchStart("now"), ADMIN)
    for sub in (extra, theirs, again):
        sub.close()


async def test_subscribers_past_the_budget_are_refused(env: Env) -> None:
    env.hub.subscriber_budget = Budget("subscriptions", total=100, per_scope=2)
    subs = [await env.hub.subscribe(target(), WatchStart("now"), ADMIN) for _ in range(2)]
    with pytest.raises(errors.ResourceExhausted):
        await env.hub.subscribe(target(), WatchStart("now"), ADMIN)
    subs[0].close()
    subs.append(await env.hub.subscribe(target(), WatchStart("now"), ADMIN))
    assert env.hub.stats.refused == 1
    for sub in subs:
        sub.close()


async def test_the_upstream_watch_lingers_after_the_last_subscriber(env: Env) -> None:
    env.hub.linger = 30.0
    sub = await env.hub.subscribe(target(), WatchStart("now"), ADMIN)
    upstream = sub.upstream
    sub.close()
    assert env.hub.upstreams == [upstream]  # still open for a returning subscriber
    back = await env.hub.subscribe(target(), WatchStart("snapshot"), ADMIN)
    assert back.upstream is upstream and not upstream.closed
    back.close()
    env.hub.linger = 0.0
    upstream.close()
    assert env.hub.stats.upstream_watches == 0


# -- upstream faults --------------------------------------------------------------------------


async def test_cuts_and_a_410_leave_every_subscriber_with_the_upstreams_state(env: Env) -> None:
    for i in range(10):
        await env.demo.store.create("leases", lease(f"l{i}"), namespace=NS)
    env.demo.faults.close_watches_after(40, cut_last_line=True, abrupt=True)
    views = []
    for n in range(1200):
        name = f"l{n % 10}"
        if n == 600:
            env.demo.faults.compact()  # the next resume gets 410: a relist for everyone
        if n % 301 == 300:
            await env.demo.store.delete("leases", name, namespace=NS)
        else:
            try:
                await env.demo.store.patch(
                    "leases", name, {"spec": {"holderIdentity": f"h{n}"}}, namespace=NS
                )
            except Exception:  # deleted a moment ago: bring it back
                await env.demo.store.create("leases", lease(name, f"h{n}"), namespace=NS)
        if n % 150 == 0:
            sub = await env.hub.subscribe(target(), WatchStart("snapshot"), ADMIN)
            views.append((sub, View()))
        if n % 10 == 0:
            await asyncio.sleep(0)
    final = await upstream_state(env)
    last = env.demo.store.resource_version
    upstream = views[0][0].upstream
    for sub, view in views:
        await follow_until(sub, view, last)
        assert view.objects == final
        sub.close()
    assert upstream.watcher.reconnects >= 1  # how many depends on how far the hub lagged
    assert env.hub.stats.relists >= 1


class BlackHole:
    """A loopback TCP proxy whose open connections can be made to swallow everything."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._open: list[asyncio.Event] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None

    def hole(self) -> None:
        """Every connection open now goes silent for good (without closing)."""
        for dead in self._open:
            dead.set()

    async def __aenter__(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        dead = asyncio.Event()
        self._open.append(dead)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    if dead.is_set():
                        continue  # swallowed: the connection stays open, nothing arrives
                    dst.write(data)
                    await dst.drain()

        tasks = [
            asyncio.create_task(pipe(reader, up_writer)),
            asyncio.create_task(pipe(up_reader, writer)),
        ]
        self._tasks.update(tasks)
        try:
            await asyncio.gather(*tasks)
        finally:
            writer.close()
            up_writer.close()


async def test_a_black_holed_upstream_is_noticed_by_its_missing_bookmarks() -> None:
    # The demo sends a progress bookmark every 0.2 s; silence past 0.2 + 0.3 s is death.
    async with DemoUpstream(seed=False, bookmark_interval=0.2) as demo:
        await demo.store.ensure_namespace(NS)
        upstream_port = int(demo.url.rsplit(":", 1)[1])
        proxy = BlackHole(upstream_port)
        async with proxy as port:
            cfg = UpstreamConfig(server=f"http://127.0.0.1:{port}", source="t")
            async with build_http_client(cfg) as http:
                kube = KubeAdapter(http, watch_idle_margin=0.3, bookmark_interval=0.2)
                hub = WatchHub(kube, backoff=FAST, linger=0.0)
                try:
                    sub = await hub.subscribe(target(), WatchStart("snapshot"), ADMIN)
                    await demo.store.create("leases", lease("before"), namespace=NS)
                    assert names(await take(sub, 1)) == [("ADDED", "before")]
                    proxy.hole()  # the open watch connection goes silent, still open
                    await demo.store.create("leases", lease("during"), namespace=NS)
                    # noticed by the missing bookmarks, resumed on a new connection
                    assert names(await take(sub, 1)) == [("ADDED", "during")]
                    assert hub.upstreams[0].watcher.reconnects >= 1
                    sub.close()
                finally:
                    await hub.aclose()


# -- shared watches -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def shared_hub(
    tokens: dict[str, TokenGrant], recheck: float = 30.0
) -> AsyncIterator[tuple[DemoUpstream, WatchHub, KubeAdapter]]:
    """A hub sharing watches across identities: its upstream watches run as the demo admin
    (the gateway's own credential), each subscriber admitted by its own access review."""
    async with DemoUpstream(seed=False, tokens=tokens) as demo:
        await demo.store.ensure_namespace(NS)
        await demo.store.ensure_namespace(OTHER)
        own = UpstreamConfig(server=demo.url, source="demo", token="admin-token")
        async with (
            build_http_client(UpstreamConfig(server=demo.url, source="demo")) as http,
            build_http_client(own, gateway_identity=True) as own_http,
        ):
            callers = KubeAdapter(http)
            shared = SharedWatches(
                KubeAdapter(own_http, streams=callers.streams),
                # these tests are about sharing, not the new-caller budget (its own tests
                # are tests/gateway/test_newcomers.py): room for their 100+ identities at once
                AccessReviews(callers, newcomers=Newcomers(rate=1000.0)),
                recheck=recheck,
            )
            hub = WatchHub(callers, backoff=FAST, linger=0.0, shared=shared)
            try:
                yield demo, hub, callers
            finally:
                await hub.aclose()


async def test_shared_watches_serve_100_identities_from_one_upstream_watch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tokens = {"admin-token": TokenGrant("admin", "*", cluster_scoped=True)}
    tokens |= {f"user-{i}": TokenGrant(f"user{i}", frozenset({NS})) for i in range(100)}
    tokens["outsider"] = TokenGrant("outsider", frozenset({OTHER}))
    async with shared_hub(tokens) as (demo, hub, _):
        await demo.store.create("leases", lease("x"), namespace=NS)
        subs = [
            await hub.subscribe(target(), WatchStart("snapshot"), Credential(f"user-{i}"))
            for i in range(100)
        ]
        # no right to that namespace: refused, as the apiserver would refuse the watch
        with pytest.raises(errors.Forbidden) as refused:
            await hub.subscribe(target(), WatchStart("snapshot"), Credential("outsider"))
        assert refused.value.status_code == 403
        # a namespace-scoped user asking for every namespace: refused
        with pytest.raises(errors.Forbidden) as everywhere:
            await hub.subscribe(target(None), WatchStart("snapshot"), Credential("user-1"))
        assert "at the cluster scope" in everywhere.value.message
        await demo.store.create("leases", lease("y"), namespace=NS)
        for sub in subs:
            assert names(await take(sub, 2)) == [("ADDED", "x"), ("ADDED", "y")]
        assert demo.faults.watch_requests == 1  # one upstream watch, counted at the upstream
        assert hub.stats.upstream_watches == 1 and hub.stats.denied == 2
        assert hub.shared is not None and hub.shared.access.reviews == 102
        # the same identity again: answered from the cache, no new review
        again = await hub.subscribe(target(), WatchStart("now"), Credential("user-7"))
        assert hub.shared.access.reviews == 102
        for sub in (*subs, again):
            sub.close()
    assert not any("user-" in r.getMessage() for r in caplog.records)  # no token in logs


async def test_a_revoked_right_ends_that_subscriber_only() -> None:
    tokens = {
        "admin-token": TokenGrant("admin", "*", cluster_scoped=True),
        "stays": TokenGrant("stays", frozenset({NS})),
        "goes": TokenGrant("goes", frozenset({NS})),
    }
    async with shared_hub(tokens, recheck=0.1) as (demo, hub, _):
        staying = await hub.subscribe(target(), WatchStart("snapshot"), Credential("stays"))
        going = await hub.subscribe(target(), WatchStart("snapshot"), Credential("goes"))
        await demo.store.create("leases", lease("a"), namespace=NS)
        assert names(await take(going, 1)) == [("ADDED", "a")]
        demo.app.tokens["goes"] = TokenGrant("goes", frozenset({OTHER}))  # RBAC changed
        with pytest.raises(errors.Forbidden):
            async with asyncio.timeout(STEP):
                while await going.next() is not None:
                    pass
        await demo.store.create("leases", lease("b"), namespace=NS)
        assert names(await take(staying, 2)) == [("ADDED", "a"), ("ADDED", "b")]
        assert hub.stats.denied == 1
        staying.close()
        going.close()


async def test_an_events_encodings_go_once_every_subscriber_has_moved_past_it(env: Env) -> None:
    """Encodings made for subscribers (a gRPC message, a GraphQL payload) are kept on the
    event while a subscriber still has it queued or in hand, and dropped once the last one
    moved on, though the event stays in the history for subscribers that resume."""
    fast = await env.hub.subscribe(target(), WatchStart("now"), ADMIN)
    slow = await env.hub.subscribe(target(), WatchStart("now"), ADMIN)
    for name in ("e1", "e2"):
        await env.demo.store.create("leases", lease(name), namespace=NS)
    first, _ = await take(fast, 2)
    assert first.encoded("k", lambda e: b"payload") == b"payload"
    assert first.readers == 1  # the fast one has moved past it; the slow one has it queued
    assert first._encoded is not None
    (again,) = await take(slow, 1)
    assert again is first and again.encoded("k", lambda e: b"other") == b"payload"  # shared
    await take(slow, 1)  # the slow one moved on too: nobody holds the first event
    assert first._encoded is None
    assert first in env.hub.upstreams[0].history  # still there for subscribers that resume
    fast.close()
    slow.close()


async def test_an_idle_subscriber_holds_no_event(env: Env) -> None:
    """Once a subscriber asks for more and nothing is ready, it is done with the event it
    took last: it holds neither that event nor its encodings.  A snapshot's events are its
    own (decoded and encoded for it alone), so an idle subscriber that kept its last one
    would cost its object's size for as long as it stays idle."""
    await env.demo.store.create("leases", lease("only"), namespace=NS)
    sub = await env.hub.subscribe(target(), WatchStart("snapshot"), ADMIN)
    (event,) = await take(sub, 1)
    assert event.object["metadata"]["name"] == "only"  # decoded for this subscriber
    assert event.encoded("k", lambda e: b"payload") == b"payload"
    assert sub.next_nowait() is None  # asked again: nothing ready
    assert event._encoded is None
    assert not any(r is sub for r in gc.get_referrers(event))  # the subscription let it go
    await env.demo.store.create("leases", lease("next"), namespace=NS)
    (live,) = await take(sub, 1)  # and the live events still come
    assert names([live]) == [("ADDED", "next")]
    sub.close()
