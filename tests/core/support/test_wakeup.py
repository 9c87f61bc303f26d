"""``gateway.core.support.wakeup.Wakeup``: the flag a subscriber's reader waits on.

It replaces ``asyncio.Event`` for a one-reader queue; these tests pin the Event behaviour
the hub and the GraphQL feeds rely on, including a reader cancelled while it waits.
Tasks advance by yielding to the loop a bounded number of times, never by a timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from gateway.core.support.wakeup import Wakeup


async def _until(condition: Callable[[], bool], turns: int = 100) -> None:
    """Yield to the loop until ``condition`` holds (at most ``turns`` times)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def test_wait_returns_at_once_when_set_and_blocks_when_cleared() -> None:
    wakeup = Wakeup()
    assert not wakeup.is_set()
    wakeup.set()
    wakeup.set()  # idempotent
    assert wakeup.is_set()
    await wakeup.wait()
    wakeup.clear()
    assert not wakeup.is_set()
    reader = asyncio.create_task(wakeup.wait())
    for _ in range(10):
        await asyncio.sleep(0)
    assert not reader.done()
    wakeup.set()
    await _until(reader.done)
    assert reader.result() is None


async def test_a_cancelled_reader_leaves_it_usable() -> None:
    wakeup = Wakeup()
    first = asyncio.create_task(wakeup.wait())
    await _until(lambda: wakeup._waiter is not None)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    second = asyncio.create_task(wakeup.wait())
    await _until(lambda: wakeup._waiter is not None and not wakeup._waiter.done())
    wakeup.set()
    await _until(second.done)
    assert second.result() is None


async def test_set_while_nobody_waits_then_clear_loses_nothing_later() -> None:
    wakeup = Wakeup()
    for _ in range(3):  # the reader's loop: clear, wait, woken by the producer
        wakeup.clear()
        reader = asyncio.create_task(wakeup.wait())
        await _until(lambda: wakeup._waiter is not None and not wakeup._waiter.done())
        wakeup.set()
        await _until(reader.done)
        assert reader.result() is None


async def test_one_reader_at_a_time() -> None:
    wakeup = Wakeup()
    first = asyncio.create_task(wakeup.wait())
    await _until(lambda: wakeup._waiter is not None)
    with pytest.raises(RuntimeError, match="one reader"):
        await wakeup.wait()
    wakeup.set()
    await _until(first.done)
    assert first.result() is None
