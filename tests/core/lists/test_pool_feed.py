"""A list body fed to a real list worker process as it arrives (gateway.core.lists.pool.Feed):
the job done on it afterwards answers the very bytes the worker gives for the body handed over
whole (every job: projection, gRPC wire, compact); a fed body not wanted is freed and the
worker is idle again; a feed cut short ends its worker; a worker that dies as it is fed costs
no answer (the caller decodes the body it kept); a worker that stops reading holds the feed
back (backpressure), so the gateway writes at most about a pipe's worth ahead of it."""

from __future__ import annotations

import asyncio
import gzip
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from gateway.core import errors
from gateway.core.lists.body import Undecoded
from gateway.core.lists.compacting import Sliced
from gateway.core.lists.jobs import NOT_DONE, project, split_wire, wire, work
from gateway.core.lists.large import LargeLists
from gateway.core.lists.pool import Feed, ListWorkers
from tests.core.lists.test_jobs import NAMES, _body
from tests.core.lists.test_pool_parts import JOB as COMPACT
from tests.core.lists.test_pool_parts import _body as _pods
from tests.core.lists.test_pool_parts import _taken

WIRE = wire(b"\x0a", b"\x12", as_struct=False)


def _run(test: Callable[[ListWorkers], Awaitable[None]], count: int = 1, **more: Any) -> None:
    async def main() -> None:
        workers = ListWorkers(count, **more)
        try:
            async with asyncio.timeout(120):
                await test(workers)
        finally:
            await workers.aclose()

    asyncio.run(main())


async def _fed(workers: ListWorkers, data: bytes, *, gzipped: bool, piece: int = 65_536) -> Feed:
    feed = await workers.feed(gzipped)
    assert feed is not None
    for at in range(0, len(data), piece):
        await feed.send(data[at : at + piece])
    feed.end()
    return feed


@pytest.mark.parametrize("gzipped", [True, False], ids=["gzipped", "plain"])
def test_a_fed_body_is_answered_as_the_same_body_handed_over_whole(gzipped: bool) -> None:
    lists = _body(5000, **{"continue": ""})
    pods = _pods()

    async def test(workers: ListWorkers) -> None:
        for body, job in ((lists, project(NAMES)), (lists, WIRE), (pods, COMPACT)):
            data = gzip.compress(body, 1) if gzipped else body
            feed = await _fed(workers, data, gzipped=gzipped, piece=7_919)
            (worker,) = workers._all
            got = await workers.run(Undecoded(data, gzipped=gzipped, feed=feed), job)
            want = await workers.run(Undecoded(data, gzipped=gzipped), job)
            assert got is not None and want is not None
            if job is COMPACT:
                assert isinstance(got, Sliced) and isinstance(want, Sliced)
                assert await _taken(got) == await _taken(want)
            elif job is WIRE:
                assert split_wire(got) == split_wire(want)
                done = work(body, job, 0)  # its buffers, as the worker writes them
                assert isinstance(done, list) and got == b"".join(done)
            else:
                assert got == want == work(body, job, 0)
            assert workers._all == {worker}  # the same worker for all: its pipe in step
        assert workers.fed == 3 and workers.feeding == 0
        assert workers.projected == 6 and workers.returned == 0

    _run(test)


def test_a_fed_body_over_the_cap_is_refused_as_one_handed_over_whole() -> None:
    data = gzip.compress(_body(600))

    async def test(workers: ListWorkers) -> None:
        feed = await _fed(workers, data, gzipped=True)
        with pytest.raises(errors.RequestEntityTooLarge, match="more than 500 pods match"):
            await workers.run(
                Undecoded(data, gzipped=True, cap=500, plural="pods", feed=feed), WIRE
            )
        assert workers.feeding == 0 and len(workers._idle) == 1

    _run(test)


def test_a_damaged_fed_body_is_given_back_and_decoded_here_as_before() -> None:
    data = gzip.compress(_body(3000))
    damaged = data[:1000] + b"\xff" * 50 + data[1050:]

    async def test(workers: ListWorkers) -> None:
        lists = LargeLists(workers)
        for bad in (damaged, data[:-5]):  # damaged; cut short
            feed = await _fed(workers, bad, gzipped=True)
            body = Undecoded(bad, gzipped=True, feed=feed)
            assert await workers.run(body, project(NAMES)) is None
            with pytest.raises(errors.Unavailable, match="upstream unreachable: DecodingError"):
                await lists.decoded(body)
        assert workers.returned == 2 and len(workers._idle) == 1  # the worker is well

    _run(test)


def test_a_fed_body_not_wanted_is_freed_and_the_worker_is_idle_again() -> None:
    data = gzip.compress(_body(3000))

    async def test(workers: ListWorkers) -> None:
        feed = await _fed(workers, data, gzipped=True)
        (worker,) = workers._all
        assert not workers._idle and workers.feeding == 1
        assert await workers.feed(True) is None  # every worker busy: no wait, none
        feed.release()  # the body decoded here instead
        assert workers._idle == [worker] and workers.feeding == 0
        # dropped unsettled (its body decoded here, the body let go): released the same way
        body = Undecoded(data, gzipped=True, feed=await _fed(workers, data, gzipped=True))
        assert workers.feeding == 1
        del body
        await asyncio.sleep(0)  # (the release is called soon on the loop, once)
        assert workers._idle == [worker] and workers.feeding == 0
        done = await workers.run(Undecoded(_body(3)), project(NAMES))
        assert done is not None and orjson.loads(done)["items"][2] == {"name": "n2"}
        assert workers._all == {worker}  # freed, not killed

    _run(test)


def test_a_feed_cut_short_ends_its_worker_and_the_next_list_has_a_new_one() -> None:
    data = gzip.compress(_body(3000))

    async def test(workers: ListWorkers) -> None:
        feed = await workers.feed(True)
        assert feed is not None
        await feed.send(data[: len(data) // 2])
        (worker,) = workers._all
        feed.abandon()  # the caller went, or the upstream broke off, in the middle
        assert await asyncio.wait_for(worker.proc.wait(), 30) != 0  # killed
        assert workers.feeding == 0
        assert await workers.run(Undecoded(data, gzipped=True, feed=feed), WIRE) is not None
        assert worker not in workers._idle and len(workers._idle) == 1  # a new one

    _run(test)


def _random(count: int) -> bytes:
    """A list that gzip shrinks little (random names): many pieces on the wire."""
    items = [{"name": os.urandom(40).hex()} for _ in range(count)]
    return orjson.dumps({"kind": "List", "metadata": {"resourceVersion": "7"}, "items": items})


def test_a_worker_that_dies_as_it_is_fed_costs_no_answer() -> None:
    data = gzip.compress(_random(20_000))
    assert len(data) > 500_000
    died: list[str] = []

    async def test(workers: ListWorkers) -> None:
        lists = LargeLists(workers)
        feed = await workers.feed(True)
        assert feed is not None
        (worker,) = workers._all
        await feed.send(data[:100_000])
        worker.proc.kill()  # killed (out of memory, say) in the middle of the body
        await worker.proc.wait()
        for at in range(100_000, len(data), 65_536):  # the rest is read all the same
            await feed.send(data[at : at + 65_536])
        feed.end()
        assert not feed.alive and workers.feeding == 0
        body = Undecoded(data, gzipped=True, feed=feed)
        assert await workers.run(body, project(NAMES)) is None  # the caller decodes it
        assert died == ["died"] and workers.returned == 1
        assert len((await lists.decoded(body))["items"]) == 20_000  # from the bytes kept
        assert await workers.run(Undecoded(data, gzipped=True), WIRE) is not None  # a new one

    _run(test, counted=died.append)


def test_a_worker_that_stops_reading_holds_the_feed_back() -> None:
    """Backpressure: a worker that takes nothing in (stuck) lets the gateway write at most
    its pipe's buffer and the event loop's write buffer ahead, not the whole body."""
    data = b"x" * (32 << 20)
    piece = 65_536
    stuck = (sys.executable, "-c", "import time; time.sleep(600)")  # (reads no request)

    async def test(workers: ListWorkers) -> None:
        feed = await workers.feed(False)
        assert feed is not None
        (worker,) = workers._all

        async def feeding() -> None:
            for at in range(0, len(data), piece):
                await feed.send(data[at : at + piece])

        sending = asyncio.create_task(feeding())
        done, _ = await asyncio.wait({sending}, timeout=2)  # a generous bound: it is stuck
        assert not done
        assert feed.sent <= (2 << 20) + piece  # a pipe (1 MiB at most) and 64 KiB ahead
        sending.cancel()  # the caller goes meanwhile: the worker ended, its slot back
        with pytest.raises(asyncio.CancelledError):
            await sending
        feed.abandon()
        assert await asyncio.wait_for(worker.proc.wait(), 30) != 0
        assert workers.feeding == 0 and workers._slots is not None
        assert not workers._slots.locked()

    _run(test, command=stuck)


def test_no_worker_is_fed_where_there_are_none() -> None:
    async def test(workers: ListWorkers) -> None:
        assert await workers.feed(True) is None
        assert not workers._all

    _run(test, count=0)


def test_a_job_the_worker_gives_back_is_counted_as_before() -> None:
    data = gzip.compress(b"[1, 2, 3]" + b" " * 100_000)  # not a list object

    async def test(workers: ListWorkers) -> None:
        feed = await _fed(workers, data, gzipped=True)
        assert await workers.run(Undecoded(data, gzipped=True, feed=feed), WIRE) is None
        assert work(gzip.decompress(data), WIRE, 0) == NOT_DONE
        assert workers.returned == 1 and len(workers._idle) == 1

    _run(test)


def _joined(answer: Any) -> Any:
    return b"".join(answer) if isinstance(answer, list) else answer


@pytest.mark.parametrize("job", [project(NAMES), WIRE, COMPACT], ids=["project", "wire", "compact"])
def test_a_fed_body_held_as_a_bytearray_is_done_as_the_same_bytes(job: Any) -> None:
    """A worker holds a fed body as one buffer grown as it came (a ``bytearray``, no copy
    at its end): every job reads it as it reads the same bytes."""
    accented = orjson.dumps(
        {"kind": "List", "metadata": {}, "items": [{"name": "né", "big": "€" * 30}] * 50}
    )
    for body in (_body(50), accented, _pods(), b"[1, 2]", b"{not json"):
        assert _joined(work(bytearray(body), job, 0)) == _joined(work(body, job, 0))
