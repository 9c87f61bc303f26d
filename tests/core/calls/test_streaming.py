"""The core's read-ahead stream (a followed log's lines): order, a bounded read-ahead, and a
close that wakes a waiting reader and stops the reading task."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.core import errors
from gateway.core.calls.streaming import ReadAhead


async def test_items_arrive_in_order_then_the_end() -> None:
    async def items() -> AsyncIterator[int]:
        for i in range(5):
            yield i

    stream = ReadAhead(items())
    assert [i async for i in stream] == [0, 1, 2, 3, 4]
    assert await stream.next() is None


async def test_reading_ahead_stops_at_the_bound_until_the_reader_takes() -> None:
    produced: list[int] = []
    more = asyncio.Event()

    async def items() -> AsyncIterator[int]:
        for i in range(10):
            produced.append(i)
            if len(produced) == 4:
                more.set()
            yield i

    stream = ReadAhead(items(), max_queue=3)
    await more.wait()
    for _ in range(5):  # the task runs until it holds 3 and waits with the 4th
        await asyncio.sleep(0)
    assert len(produced) == 4 and stream.next_nowait() == 0
    assert [await stream.next() for _ in range(9)] == list(range(1, 10))
    assert await stream.next() is None


async def test_close_wakes_a_waiting_reader_and_stops_the_task() -> None:
    stopped = asyncio.Event()

    async def items() -> AsyncIterator[int]:
        try:
            await asyncio.Event().wait()  # nothing ever comes
            yield 0
        finally:
            stopped.set()

    stream = ReadAhead(items())
    reader = asyncio.create_task(stream.next())
    await asyncio.sleep(0)
    stream.close()
    assert await asyncio.wait_for(reader, 5) is None
    await asyncio.wait_for(stopped.wait(), 5)


async def test_the_error_that_ended_it_is_raised_to_the_reader() -> None:
    async def items() -> AsyncIterator[int]:
        yield 1
        raise errors.NotFound('pods "x" not found')

    stream = ReadAhead(items())
    assert await stream.next() == 1
    with pytest.raises(errors.NotFound):
        await stream.next()
