"""A compact job's answer in parts (gateway.core.lists.worker.STATUS_PART): a real list
worker process writes each part of PART_ITEMS objects into its memory file as soon as it is
made, the gateway reads each in a thread while the worker makes the next, and takes them in
as one answer: the very objects, keys and column values of the answer in one piece.  The
parts are read whether or not anyone takes them yet (a list of several pages asks for the
next page first, from the same single worker), and a caller that goes stops the worker."""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
from typing import Any

import orjson
import pytest

from gateway.core.lists.body import Undecoded
from gateway.core.lists.compacting import (
    PART_ITEMS,
    TAIL_ITEMS,
    Sliced,
    compact,
    part_bounds,
    taken,
)
from gateway.core.lists.jobs import work
from gateway.core.lists.pool import ListWorkers, _Parts, _read_part
from gateway.core.lists.worker import part_after
from tests.core.lists.test_compacting import COLUMNS, _items

JOB = compact("v1", "Pod", COLUMNS)
ITEMS = 2 * PART_ITEMS + 345  # three parts


def _body(n: int = ITEMS, extra: list[Any] | None = None) -> bytes:
    """A list of ``n`` small pods, the odd items of the compacting tests among them."""
    items: list[Any] = [
        {"metadata": {"name": f"p{i}", "namespace": "ns"}, "spec": {"replicas": i % 9}}
        for i in range(n)
    ]
    odd = [i for i in _items() if "big" not in str(i)]  # (orjson writes no int past 64 bits)
    items[PART_ITEMS - 3 : PART_ITEMS - 3] = odd  # across the first two parts' bound
    items += extra or []
    return orjson.dumps({"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": items})


async def _taken(answer: bytes) -> tuple[dict[str, Any], dict[str, bytes], dict[str, list[Any]]]:
    found: dict[str, bytes] = {}
    rest, listed = await taken(answer, JOB[3], found)
    assert listed is not None
    values = {k: [listed.values[s][listed.of(raw)] for s in JOB[3]] for k, raw in found.items()}  # type: ignore[index]
    return rest, found, values


async def _whole(body: bytes) -> tuple[dict[str, Any], dict[str, bytes], dict[str, list[Any]]]:
    """The answer in one piece (the worker's function, in this process)."""
    answer = work(body, JOB, 0)
    assert isinstance(answer, list)
    return await _taken(b"".join(answer))


async def _workers(test: Any) -> None:
    workers = ListWorkers(1)
    try:
        await test(workers)
    finally:
        await workers.aclose()


def test_a_large_list_comes_in_parts_and_is_taken_in_as_one_answer() -> None:
    body = _body()
    want = asyncio.run(_whole(body))
    assert len(want[1]) > 2 * PART_ITEMS

    async def test(workers: ListWorkers) -> None:
        for _ in range(2):  # the same worker again: its pipe and memory file in step
            answer = await workers.run(Undecoded(body), JOB)
            assert isinstance(answer, Sliced) and answer.more is not None
            assert len(answer.objects) == PART_ITEMS  # the first part alone
            more = answer.more
            assert isinstance(more, _Parts)
            assert await _taken(answer) == want
            # told its end at once, the memory file emptied in a thread after: the worker
            # its pool's again only then (its next body goes into that file)
            await more._task
            assert more._emptied and workers._idle
        assert workers.projected == 2 and workers.returned == 0
        (worker,) = workers._all
        assert worker.shared is not None
        assert os.fstat(worker.shared).st_size == 0  # emptied after the last part

    asyncio.run(_workers(test))


def test_parts_not_taken_yet_leave_the_worker_free_for_the_next_page() -> None:
    """A list of several pages is listed whole before it is taken in: the first page's
    parts are read meanwhile, so the single worker does the next page (no wait forever)."""
    first, second = _body(), _body(300)

    async def test(workers: ListWorkers) -> None:
        async with asyncio.timeout(60):
            one = await workers.run(Undecoded(first), JOB)
            two = await workers.run(Undecoded(second), JOB)
        assert one is not None and two is not None
        assert await _taken(one) == await _whole(first)
        assert await _taken(two) == await _whole(second)

    asyncio.run(_workers(test))


def test_a_caller_that_goes_stops_the_worker_and_the_next_list_has_a_new_one() -> None:
    body = _body()

    async def test(workers: ListWorkers) -> None:
        answer = await workers.run(Undecoded(body), JOB)
        assert isinstance(answer, Sliced) and answer.more is not None
        (worker,) = workers._all
        answer.more.close()  # the caller went: the worker mid-answer is stopped
        assert await asyncio.wait_for(worker.proc.wait(), 30) != 0
        again = await workers.run(Undecoded(body), JOB)
        assert again is not None and await _taken(again) == await _whole(body)

    asyncio.run(_workers(test))


def test_an_item_that_is_not_an_object_past_the_first_part_refuses_the_list() -> None:
    """The worker gives up in the middle (the parts before stand for nothing): the answer
    is refused as damaged, and the worker serves the next list."""
    bad = _body(extra=[1])

    async def test(workers: ListWorkers) -> None:
        answer = await workers.run(Undecoded(bad), JOB)
        assert answer is not None
        with pytest.raises(ValueError, match="gave its answer up"):
            await _taken(answer)
        body = _body(300)
        again = await workers.run(Undecoded(body), JOB)
        assert again is not None and await _taken(again) == await _whole(body)
        assert len(workers._all) == 1  # the same worker

    asyncio.run(_workers(test))


def test_the_pool_closing_mid_answer_ends_its_parts_with_an_error_not_a_wait() -> None:
    """The gateway stopping while an answer's parts are read: whoever takes them in gets
    an error at once (never waits for parts that will not come), and the worker is gone."""
    body = _body()

    async def test() -> None:
        workers = ListWorkers(1)
        answer = await workers.run(Undecoded(body), JOB)
        assert isinstance(answer, Sliced) and answer.more is not None
        (worker,) = workers._all
        await workers.aclose()
        assert worker.proc.returncode is not None
        with pytest.raises(ValueError, match="list worker"):
            async with asyncio.timeout(30):
                await _taken(answer)

    asyncio.run(test())


def test_a_part_is_read_at_its_place_in_the_memory_file_and_a_damaged_one_refused() -> None:
    answer = work(_body(300), JOB, 0)
    assert isinstance(answer, list)
    data = b"".join(answer)
    shared = os.memfd_create("parts")
    try:
        at = part_after(0, 10)  # a part after a first of 10 bytes
        os.pwrite(shared, data, at)
        read = _read_part(shared, at, len(data))
        assert isinstance(read, Sliced) and len(read.objects) == 300 + len(_items()) - 2
        os.pwrite(shared, (1 << 40).to_bytes(8, "little"), at + 8)  # a section's size wrong
        with pytest.raises(ValueError, match="add up"):
            _read_part(shared, at, len(data))
    finally:
        os.close(shared)


@pytest.mark.parametrize("n", [0, 1, PART_ITEMS, PART_ITEMS + 1, ITEMS, 12 * PART_ITEMS, 30_001])
def test_parts_cover_the_list_the_first_whole_the_last_small(n: int) -> None:
    """What the gateway does after the worker's last part is that part's: the last
    PART_ITEMS items come in parts of TAIL_ITEMS, the first part is PART_ITEMS (or all)."""
    bounds = part_bounds(n)
    assert bounds[0] == (0, min(n, PART_ITEMS)) and bounds[-1][1] == n
    assert all(end == start for (_, end), (start, _) in itertools.pairwise(bounds))
    sizes = [end - start for start, end in bounds]
    assert all(0 < size <= PART_ITEMS for size in sizes) or n == 0
    if n > PART_ITEMS:
        assert sizes[-1] <= TAIL_ITEMS
        assert sum(s for s in sizes[1:] if s <= TAIL_ITEMS) >= min(n - PART_ITEMS, PART_ITEMS)


@pytest.mark.parametrize("taken_in", [False, True], ids=["mid-answer", "answered"])
def test_closing_the_pool_waits_for_the_parts_reads_before_closing_the_memory_file(
    taken_in: bool,
) -> None:
    """The pool closed while an answer's parts are read (mid-answer), or right after the
    last was taken in (the memory file then emptied in a thread): when the close is over,
    the parts' reading is over too (a read or the emptying in a thread ran to its end before
    the worker's file was closed: none works on a closed descriptor, or on one reused for
    another file by then), the file is closed, and nothing failed unseen."""
    body = _body()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        unseen: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: unseen.append(context))
        workers = ListWorkers(1)
        answer = await workers.run(Undecoded(body), JOB)
        assert isinstance(answer, Sliced) and isinstance(answer.more, _Parts)
        more = answer.more
        if taken_in:
            await _taken(answer)  # every part: the end told, the file emptied after
        (worker,) = workers._all
        shared = worker.shared
        assert shared is not None
        await workers.aclose()
        assert more._task.done() and worker.shared is None
        assert more._task.cancelled() or more._task.exception() is None
        with pytest.raises(OSError):
            os.fstat(shared)  # closed
        if taken_in:
            assert more._emptied  # (its end told: the emptying ran to its end)
        del answer, more
        gc.collect()  # a task's exception never retrieved is reported as it is freed
        assert not unseen, unseen

    asyncio.run(main())
