"""The large-list scope: the cyclic collector held exactly as long as promised and never
turned on by a hold that did not turn it off, and a large list freed in slices that each
hold the event loop for one slice's work, no longer."""

from __future__ import annotations

import asyncio
import gc
import itertools
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pytest

from gateway.core.lists import large as largelist
from gateway.core.lists.body import Undecoded
from gateway.core.lists.large import FREE_ITEMS, LargeLists, ListEncoding


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


@pytest.fixture
def lists() -> LargeLists:
    return LargeLists()


def test_a_block_holds_the_collector_off_until_it_ends() -> None:
    with largelist.paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError, match="boom"), largelist.paused(True):
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_block_for_small_work_leaves_the_collector_alone() -> None:
    with largelist.paused(False):
        assert gc.isenabled()
    assert gc.isenabled()


def test_a_pause_never_turns_on_a_collector_someone_else_turned_off() -> None:
    gc.disable()
    with largelist.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_inner_pause_does_not_end_an_outer_one() -> None:
    with largelist.paused():
        with largelist.paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


async def _next_turn() -> None:
    """Wait for a callback queued now: every callback queued before it has run."""
    loop = asyncio.get_running_loop()
    turned = loop.create_future()
    loop.call_soon(turned.set_result, None)
    await turned


async def test_a_step_pause_lasts_until_the_loop_turns(lists: LargeLists) -> None:
    seen: list[bool] = []
    asyncio.get_running_loop().call_soon(lambda: seen.append(gc.isenabled()))
    lists.hold_until_next_turn()
    assert not gc.isenabled()
    await _next_turn()
    assert seen == [False]  # queued before the pause's callback: ran with the GC held
    assert gc.isenabled()


async def test_a_step_pause_leaves_a_collector_that_is_off_alone(lists: LargeLists) -> None:
    gc.disable()
    lists.hold_until_next_turn()
    await _next_turn()
    assert not gc.isenabled()


def test_a_step_pause_needs_a_running_loop(lists: LargeLists) -> None:
    lists.hold_until_next_turn()
    assert gc.isenabled()


async def test_a_hold_begun_during_a_step_pause_keeps_the_collector_off_to_its_end(
    lists: LargeLists,
) -> None:
    lists.hold_until_next_turn()
    hold = lists.scope()
    hold.hold()  # begun while the collector is off: the step pause's end must not turn it on
    await _next_turn()
    assert not gc.isenabled()
    await asyncio.sleep(0)
    assert not gc.isenabled()
    hold.end()
    assert gc.isenabled()


async def test_overlapping_holds_keep_the_collector_off_until_the_last_one_ends(
    lists: LargeLists,
) -> None:
    first, second = lists.scope(), lists.scope()
    first.hold()
    await asyncio.sleep(0)
    second.hold()
    assert not gc.isenabled()
    first.end()  # the first ends while the second still holds
    assert not gc.isenabled()
    second.end()
    assert gc.isenabled()
    with lists.scope():  # a scope that was never asked to hold
        assert gc.isenabled()
    assert gc.isenabled()


async def test_a_hold_never_turns_on_a_collector_someone_else_turned_off(
    lists: LargeLists,
) -> None:
    gc.disable()
    with lists.scope() as scope:
        scope.hold()
        assert not gc.isenabled()
    assert not gc.isenabled()


async def test_a_lingering_scope_holds_to_the_end_of_the_step_it_ends_in(
    lists: LargeLists,
) -> None:
    with lists.scope(linger=True) as scope:
        scope.hold()
    assert not gc.isenabled()  # the value it decoded is still being handed on
    await _next_turn()
    assert gc.isenabled()


class _Item:
    """A list item like a decoded pod (a few hundred objects), counting its own freeing."""

    __slots__ = ("body", "freed")

    def __init__(self, i: int, freed: list[int]) -> None:
        self.freed = freed
        self.body = {
            "metadata": {"name": f"p-{i}", "labels": {f"k{j}": f"v{j}" for j in range(20)}},
            "spec": {
                "containers": [
                    {"name": f"c{j}", "env": [{"name": f"E{k}", "value": k} for k in range(10)]}
                    for j in range(4)
                ]
            },
        }

    def __del__(self) -> None:
        self.freed[0] += 1


class _LoopProbe:
    """Another task on the loop, waking at every turn: how much CPU time the loop's thread
    spent, what was freed, and whether the collector was on, at each of its turns; and the
    memory blocks the interpreter had allocated then.

    Thread CPU time, not wall time: another process taking this core (the machine is shared)
    must not count as our own work holding the loop.
    """

    def __init__(self, freed: list[int] | None = None) -> None:
        self.freed = freed if freed is not None else [0]
        self.turns: list[tuple[float, int, bool]] = []
        self.blocks: list[int] = []
        self._task: asyncio.Task[None] | None = None
        self._done = False

    async def _run(self) -> None:
        while True:
            self.turns.append((time.thread_time(), self.freed[0], gc.isenabled()))
            self.blocks.append(sys.getallocatedblocks())
            if self._done:
                return
            await asyncio.sleep(0)

    async def __aenter__(self) -> _LoopProbe:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)  # the probe's first turn
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._done = True
        assert self._task is not None
        await self._task

    def gaps(self) -> list[tuple[float, int]]:
        """(CPU seconds, items freed) between consecutive turns."""
        return [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(self.turns)]

    def collector(self) -> list[bool]:
        """Whether the collector was on, at each turn."""
        return [on for _, _, on in self.turns]


async def test_a_release_frees_everything_and_holds_the_loop_one_slice_at_a_time(
    lists: LargeLists,
) -> None:
    count = 4000
    # What freeing the whole list at once holds the loop for (the collector off, as in the
    # scope: only reference counting frees it).
    freed = [0]
    whole = [_Item(i, freed) for i in range(count)]
    gc.disable()
    start = time.thread_time()
    del whole
    at_once = time.thread_time() - start
    gc.enable()
    assert freed == [count]

    freed = [0]
    body: dict[str, Any] = {"metadata": {}, "items": [_Item(i, freed) for i in range(count)]}
    items = body["items"]
    with lists.scope() as scope:
        scope.hold()
        async with _LoopProbe(freed) as probe:
            await scope.release(body)
        assert not gc.isenabled()  # held until the scope ends
    assert gc.isenabled()

    assert freed == [count]  # everything freed
    assert body == {} and items == []  # emptied in place
    gaps = probe.gaps()
    assert sum(n for _, n in gaps) == count  # all of it while the probe was running
    # Never more than one slice between two turns of another task...
    assert max(n for _, n in gaps) == FREE_ITEMS
    assert len([n for _, n in gaps if n]) >= count // FREE_ITEMS
    # ...and so the loop is never held for anything like the whole free (all at once is 160
    # slices; the longest gap measured ~1.5 slices on a quiet machine, up to ~6 when the
    # other core's work slows this one's memory: a bound of a few slices was flaky).
    one_slice = at_once * FREE_ITEMS / count
    longest = max(t for t, _ in gaps)
    assert longest < 16 * one_slice, (longest, one_slice)


async def test_a_value_handed_over_is_freed_in_slices_only_when_nothing_else_holds_it(
    lists: LargeLists,
) -> None:
    freed = [0]
    kept = [_Item(i, freed) for i in range(100)]
    scope = lists.scope()
    scope.hold()
    scope.release_later(kept, per_turn=10)  # still held here: left alone
    turns = 0
    while not gc.isenabled():
        turns += 1
        await asyncio.sleep(0)
    assert freed == [0] and len(kept) == 100
    assert turns <= 2

    scope = lists.scope()
    scope.hold()
    scope.release_later({"items": [_Item(i, freed) for i in range(100)]}, per_turn=10)
    turns = 0
    seen: list[int] = []
    while not gc.isenabled():
        turns += 1
        seen.append(freed[0])
        await asyncio.sleep(0)
    assert freed == [100]
    assert turns >= 100 // 10  # a slice per step, the collector off until all is gone
    assert all(b - a <= 10 for a, b in itertools.pairwise(seen))


async def test_a_completion_that_fails_holds_the_collector_to_the_end_of_its_step(
    lists: LargeLists,
) -> None:
    async def work(value: list[int]) -> int:
        await asyncio.sleep(0)
        assert not gc.isenabled()
        raise ValueError("does not fit")

    with pytest.raises(ValueError, match="does not fit"):
        await lists.complete(list(range(1000)), work, per_turn=100)
    assert not gc.isenabled()  # the value is completed another way in this step
    await _next_turn()
    assert gc.isenabled()


def _encoding(slice_items: int) -> ListEncoding:
    def head(body: Any) -> bytes:
        return orjson.dumps(body.get("metadata"))

    def items(run: Sequence[Any], parts: list[bytes]) -> None:
        parts.extend(orjson.dumps(item) for item in run)

    return ListEncoding(head, items, slice_items)


async def test_a_list_answer_is_decoded_encoded_and_freed_with_the_collector_off_throughout(
    lists: LargeLists,
) -> None:
    body = {
        "kind": "PodList",
        "metadata": {"resourceVersion": "7"},
        "items": [
            {"metadata": {"name": f"p-{i}", "annotations": {"note": "x" * 800}}}
            for i in range(3000)
        ],
    }
    data = orjson.dumps(body)
    assert len(data) >= 2 * largelist.LARGE_BODY_BYTES
    fetched: list[bool] = []

    async def fetch(gzipped: bool) -> Undecoded:
        fetched.append(gzipped)
        return Undecoded(data)

    async with _LoopProbe() as probe:
        before = sys.getallocatedblocks()
        written = await lists.answer(fetch, _encoding(10))
        at_the_end = probe.blocks[-1]  # the probe's last turn, before the answer returned
    assert written == largelist.encode_now(body, _encoding(10))
    assert fetched == [False]  # no workers: the body is never kept gzipped
    # Freed in place: the decoded body (three objects an item, at least) was alive during
    # the call, and gone before it returned.
    most = max(probe.blocks) - before
    assert most > 3 * 3000
    assert at_the_end - before < most // 4, (at_the_end - before, most)
    # decoded, encoded (3,000 / 10 slices) and freed (3,000 / 25) with the loop turning
    collector = probe.collector()
    assert len(collector) >= 3000 // 10 + 3000 // FREE_ITEMS
    assert not any(collector[1:-1])  # from its first turn after the call to its last in it
    assert gc.isenabled()


async def test_a_small_list_answer_leaves_the_collector_alone(lists: LargeLists) -> None:
    body = {"metadata": {}, "items": [{"a": i} for i in range(10)]}

    async def fetch(gzipped: bool) -> Undecoded:
        return Undecoded(orjson.dumps(body))

    def head(decoded: Any) -> bytes:
        assert gc.isenabled()  # after the decode
        return orjson.dumps(decoded.get("metadata"))

    encoding = ListEncoding(head, _encoding(3).items, 3)
    assert await lists.answer(fetch, encoding) == largelist.encode_now(body, _encoding(3))
    assert gc.isenabled()
