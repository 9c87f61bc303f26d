"""A text column's bigrams (:mod:`gateway.core.views.grams`), kept by the store per change:
the count of a view's one substring test read from them equals the texts' own count, on
random and non-ASCII texts, through churn, through changes made while they are built, and
never from a generation they do not reflect; their memory is in the store's bytes (and the
view caches' accounting) and given back when their column goes; a change costs microseconds.

Pure functions of a store, then the view caches against the demo upstream over real
sockets: nothing is mocked.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.core import POD, schema
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from gateway.core.views import evaluate
from gateway.core.views.cache import Views
from gateway.core.views.grams import MAX_CANDIDATES, Grams
from gateway.core.views.spec import ViewSpec, view_spec
from gateway.core.views.store import MAX_COLUMNS, Entry, Store
from gateway.core.watch.hub import WatchHub
from gateway.core.watch.watcher import Backoff
from kube_gateway_demo import DemoUpstream

MODEL = schema.seed_model()
KIND = MODEL.kind_type("", "v1", "Pod")
ALPHABET = "ab-é☃😀0"


def _text(rnd: random.Random) -> str:
    return "".join(rnd.choice(ALPHABET) for _ in range(rnd.randrange(0, 9)))


def _needles(rnd: random.Random) -> list[str]:
    return ["".join(rnd.choice(ALPHABET) for _ in range(n)) for n in (1, 2, 2, 3, 4, 6)]


def test_a_count_from_the_bigrams_is_the_texts_own_through_churn() -> None:
    rnd = random.Random(29)
    texts = [_text(rnd) for _ in range(400)]
    grams = Grams()
    grams.extend(texts)
    grams.built, grams.at = True, 1
    answered = 0
    for step in range(60):
        for _ in range(20):
            slot = rnd.randrange(len(texts))
            texts[slot] = _text(rnd) if rnd.random() < 0.8 else ""
            grams.replace(slot, texts[slot])
        for needle in [*_needles(rnd), "aa", "abab", "é☃", "😀😀", "zz"]:
            got = grams.count(needle, 1)
            if got is None:  # one character: counted another way
                assert len(needle) < 2, needle
                continue
            answered += 1
            assert got == sum(needle in t for t in texts), (step, needle)
    assert answered > 500
    assert grams.count("ab", 2) is None  # another generation: not read
    assert grams.entries == sum(len({t[i : i + 2] for i in range(len(t) - 1)}) for t in texts)


def test_a_needle_whose_rarest_bigram_is_everywhere_is_counted_another_way() -> None:
    grams = Grams()
    grams.extend(["abc"] * (MAX_CANDIDATES + 1))
    grams.built, grams.at = True, 0
    assert grams.count("ab", 0) == MAX_CANDIDATES + 1  # two characters: its set's size
    assert grams.count("abc", 0) is None  # too many candidates to verify
    assert grams.count("abx", 0) == 0  # a bigram nobody holds


#: What a realistic object's JSON holds besides its name (a pod's is ~3-5 KB).
PAD = {"note": "x" * 2000}


def _obj(rnd: random.Random, i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{_text(rnd)}-{i}", "namespace": "a", "annotations": PAD},
        "spec": {"nodeName": _text(rnd)} if rnd.random() < 0.8 else {"nodeName": 7},
        "status": {"startTime": f"2026-0{rnd.randrange(1, 4)}-01T00:00:00Z"},
    }


def _key(o: dict[str, Any]) -> str:
    return f"a/{o['metadata']['name']}"


def _spec(field: str, needle: str) -> ViewSpec:
    return view_spec(
        POD,
        KIND,
        MODEL.object_type,
        filter={"field": field, "op": "contains", "value": needle},
        sort=[{"field": "status.startTime", "order": "desc"}],
        first=5,
    )


def _ensure(store: Store, spec: ViewSpec) -> None:
    """The spec's columns and the bigrams of its text (built when asked a second time, in
    the background: waited)."""

    async def ensure() -> None:
        for _ in range(2):
            await store.ensure(evaluate.paths_of(spec), None, evaluate.text_paths(spec))
        await store.settled()

    asyncio.run(ensure())


def _bytes(store: Store) -> int:
    return sum(e.size for e in store.slots if e is not None) + sum(
        g.bytes for g in store.grams.values() if g.built
    )


def test_a_views_total_is_counted_from_the_bigrams_kept_by_every_put_and_delete() -> None:
    """Built while objects change, then through deletions, replacements (the indexed
    field's text changed, or made a number: no text) and new objects in freed slots, a
    view's ``total`` is read from the bigrams (not the regular expression) and equals the
    test's own count; a snapshot taken before a change is counted the other way, the
    same; the store's bytes are its JSON and the bigrams' estimate."""
    rnd = random.Random(7)
    objs = {_key(o): o for o in (_obj(rnd, i) for i in range(300))}
    store = Store()
    for key, o in objs.items():
        store.put(key, Entry(o))
    field = "spec.nodeName"

    def churn() -> None:
        for key in rnd.sample(sorted(objs), 20):
            store.delete(key)
            del objs[key]
        for key in rnd.sample(sorted(objs), 30):
            o = objs[key]
            o = objs[key] = {**o, "spec": {"nodeName": _text(rnd) if rnd.random() < 0.8 else 3}}
            store.put(key, Entry(o))
        for i in range(25):
            o = _obj(rnd, 1000 + len(objs) + i)
            objs[_key(o)] = o
            store.put(_key(o), Entry(o))

    spec = _spec(field, "ab")
    paths = evaluate.paths_of(spec)

    async def build_while_churning() -> None:
        await store.ensure(paths, None, evaluate.text_paths(spec))
        assert not store.grams  # asked once: not built (a cache's first view is not slowed)
        build = asyncio.create_task(store.ensure(paths, None, evaluate.text_paths(spec)))
        for _ in range(10_000):  # the column is built, then its bigrams begin
            if ("spec", "nodeName") in store.grams and store.grams[("spec", "nodeName")].texts:
                break
            await asyncio.sleep(0)
        assert not store.grams[("spec", "nodeName")].built
        churn()  # changes while they are built
        await build
        await store.settled()

    store.grams_step = 16  # many steps for 300 objects: changes fall between them
    asyncio.run(build_while_churning())
    assert store.grams[("spec", "nodeName")].built
    assert store.bytes == _bytes(store)
    for round_ in range(4):
        if round_:
            churn()
        assert store.bytes == _bytes(store)
        for needle in [*_needles(rnd), "ab", "b-", "é☃", "zz"]:
            spec = _spec(field, needle)
            paths = evaluate.paths_of(spec)
            _ensure(store, spec)
            ordered = evaluate.order(store.snapshot("1", paths), spec)
            want = sum(
                type(o["spec"]["nodeName"]) is str and needle in o["spec"]["nodeName"]
                for o in objs.values()
            )
            assert ordered.finder is not None
            assert (ordered.finder.counted is None) is (len(needle) < 2), needle
            assert ordered.total == want, (round_, needle)
    # a snapshot of an earlier generation: its count is not read from the live bigrams
    spec = _spec(field, "ab")
    snap = store.snapshot("1", evaluate.paths_of(spec))
    before = sum(type(o["spec"]["nodeName"]) is str and "ab" in o["spec"]["nodeName"]
                 for o in objs.values())  # fmt: skip
    churn()
    ordered = evaluate.order(snap, spec)
    assert ordered.finder is not None and ordered.finder.counted is None
    assert ordered.total == before


def test_the_bigrams_go_with_their_column_and_their_bytes_with_them() -> None:
    rnd = random.Random(3)
    store = Store()
    for o in (_obj(rnd, i) for i in range(200)):
        store.put(_key(o), Entry(o))
    spec = _spec("metadata.name", "ab")
    _ensure(store, spec)
    json_bytes = sum(e.size for e in store.slots if e is not None)
    grams = store.grams[("metadata", "name")]
    assert grams.bytes > 0 and store.bytes == json_bytes + grams.bytes
    assert store.take_grown() == grams.bytes and store.take_grown() == 0
    # columns of other fields push it out (the least recently used)
    others = [
        _spec(f"metadata.labels.k{i}", "x") for i in range(MAX_COLUMNS)
    ]  # fmt: skip
    for other in others:
        asyncio.run(store.ensure(evaluate.paths_of(other)))
    assert ("metadata", "name") not in store.columns and not store.grams
    assert store.bytes == json_bytes
    assert store.take_grown() == -grams.bytes


def test_a_change_to_the_bigrams_costs_microseconds() -> None:
    """What a put costs with a column's bigrams against without them (names of pods, 30
    characters): an order of magnitude under a millisecond each, however many texts."""
    rnd = random.Random(1)
    names = [f"app-{rnd.getrandbits(40):010x}-{rnd.getrandbits(20):05x}-{i}" for i in range(30_000)]
    grams = Grams()
    grams.extend(names)
    grams.built = True
    started = time.process_time()
    for i in range(3000):
        slot = rnd.randrange(len(names))
        grams.replace(slot, f"app-{rnd.getrandbits(40):010x}-{rnd.getrandbits(20):05x}-{i}")
    each = (time.process_time() - started) / 3000
    assert each < 1e-3, each  # measured ~17 µs
    assert grams.bytes < 30_000 * 2_000  # ~1.2 KB a name: 1x its pod's JSON at most


ADMIN = Credential("admin-token")
NS = "grams"


@pytest.fixture
async def views() -> AsyncIterator[tuple[DemoUpstream, Views]]:
    async with DemoUpstream(seed=False) as demo:
        await demo.store.ensure_namespace(NS)
        async with build_http_client(UpstreamConfig(server=demo.url, source="demo")) as http:
            hub = WatchHub(KubeAdapter(http), backoff=Backoff(initial=0.01, cap=0.05), linger=0)
            cached = Views(hub, version_wait=2)
            try:
                yield demo, cached
            finally:
                await cached.aclose()
                await hub.aclose()


async def test_the_caches_account_for_the_bigrams_and_count_through_watch_events(
    views: tuple[DemoUpstream, Views],
) -> None:
    """A view cache's bigrams are in the views' bytes (the budget's accounting) as they are
    built, kept as watch events change the list, and given back when the cache closes."""
    demo, cached = views

    def pod(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}}

    for i in range(60):
        await demo.store.create(POD, pod(f"web-{i:02d}"), namespace=NS)

    def spec(needle: str, version: str | None = None) -> ViewSpec:
        return view_spec(POD, KIND, MODEL.object_type, namespace=NS, first=3,
                         filter={"field": "metadata.name", "op": "contains", "value": needle},
                         min_resource_version=version)  # fmt: skip

    page = await cached.page(spec("b-1", demo.store.resource_version), ADMIN)
    assert page.total == 10  # counted the other way: built when asked again
    (cache,) = cached.caches
    assert not cache.store.grams
    page = await cached.page(spec("eb-", demo.store.resource_version), ADMIN)
    assert page.total == 60  # counted the other way while the bigrams are built
    await cache.store.settled()
    grams = cache.store.grams[("metadata", "name")]
    assert grams.built and cached.stats.bytes < cache.store.bytes  # taken at the next view
    page = await cached.page(spec("b-2", demo.store.resource_version), ADMIN)
    assert page.total == 10 and cached.stats.bytes == cache.store.bytes
    assert cache.store.bytes == grams.bytes + sum(
        e.size for e in cache.store.slots if e is not None
    )
    for i in range(10, 20):
        await demo.store.delete(POD, f"web-{i:02d}", namespace=NS)
    made = await demo.store.create(POD, pod("web-1x"), namespace=NS)
    version = made["metadata"]["resourceVersion"]
    page = await cached.page(spec("b-1", version), ADMIN)
    ordered = await cache.ordered(spec("b-1", version))
    assert ordered[1].finder is not None and ordered[1].finder.counted == 1
    assert page.total == 1 and cached.stats.bytes == cache.store.bytes
    cache.close()
    assert cached.stats.bytes == 0


def test_bigrams_past_their_share_of_the_json_are_refused_or_dropped() -> None:
    """Long random names in objects of few other bytes: their bigrams would take many times
    the JSON; their build is given up (the views count the other way, the same totals, the
    store's bytes its JSON alone); bigrams built within their share are dropped when such
    objects come, and not built again."""
    rnd = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789-"

    def long_named(i: int) -> dict[str, Any]:
        name = "".join(rnd.choice(letters) for _ in range(200)) + f"-{i}"
        return {"metadata": {"name": name, "namespace": "a"}}

    store = Store()
    objs = [long_named(i) for i in range(300)]
    for o in objs:
        store.put(_key(o), Entry(o))
    spec = _spec("metadata.name", "ab")
    _ensure(store, spec)
    assert not store.grams and ("metadata", "name") in store.grams_refused
    assert store.bytes == sum(e.size for e in store.slots if e is not None)
    ordered = evaluate.order(store.snapshot("1", evaluate.paths_of(spec)), spec)
    assert ordered.total == sum("ab" in o["metadata"]["name"] for o in objs)
    # within the share first (realistic objects), then past it as such objects come
    store = Store()
    for o in (_obj(rnd, i) for i in range(300)):
        store.put(_key(o), Entry(o))
    _ensure(store, spec)
    assert store.grams[("metadata", "name")].built
    for o in (long_named(1000 + i) for i in range(300)):
        store.put(_key(o), Entry(o))
    assert not store.grams and store.bytes == sum(e.size for e in store.slots if e is not None)
    _ensure(store, spec)
    assert not store.grams  # not built again


def test_built_bigrams_are_settled_as_a_fill_is_and_built_with_the_collector_held() -> None:
    """A large column's bigrams (a set as long as the column for a pair every text holds)
    are built with the collector held off and settled after, as a fill is: frozen where the
    process is the gateway's own, so no young collection walks their entries again."""
    import gc

    from gateway.core.process.collector import HOLD
    from gateway.core.views.store import SETTLE_SLOTS

    rnd = random.Random(3)
    store = Store()
    for i in range(SETTLE_SLOTS + 10):
        o = _obj(rnd, i)
        store.put(_key(o), Entry(o))
    spec = _spec("spec.nodeName", "ab")
    held: list[bool] = []
    filled: list[int] = []

    async def build() -> None:
        paths, texts = evaluate.paths_of(spec), evaluate.text_paths(spec)
        await store.ensure(paths, None, texts)  # the columns filled (and settled)
        filled.append(HOLD.settled)
        await store.ensure(paths, None, texts)  # asked again: built in the background
        grams = store.grams[("spec", "nodeName")]
        await asyncio.sleep(0)  # the build's first step
        while not grams.built:
            held.append(gc.isenabled())
            await asyncio.sleep(0)
        await store.settled()

    freeze, enabled = HOLD.freeze, gc.isenabled()
    HOLD.freeze = True
    gc.enable()  # as serving has it (a test before may have left it off)
    try:
        asyncio.run(build())
        grams = store.grams[("spec", "nodeName")]
        assert grams.built and HOLD.settled == filled[0] + 1
        assert held and not any(held)  # the collector off while it was built
        assert gc.isenabled()
        young = {id(o) for o in gc.get_objects()}  # the frozen are in none of the generations
        assert not any(id(s) in young for s in grams.postings.values())
    finally:
        HOLD.freeze = freeze
        gc.unfreeze()
        if not enabled:
            gc.disable()
