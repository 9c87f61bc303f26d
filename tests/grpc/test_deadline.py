"""A unary call's deadline (gateway.grpc.calls.Deadline): what ``asyncio.timeout`` did for
the servicer's one await, each ending compared with what ``asyncio.timeout`` does with it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest

from gateway.grpc.calls import Deadline

Ending = tuple[str, int]


async def _with_deadline(work: Callable[[], Awaitable[None]], timeout: float) -> Ending:
    """How ``work`` ends under a :class:`Deadline` (as the servicer uses it), and how many
    cancellations its task has left pending after."""
    deadline = Deadline(timeout)
    try:
        await work()
    except BaseException as exc:
        passed = deadline.end(exc)
        task = asyncio.current_task()
        assert task is not None
        if passed:
            return "deadline", task.cancelling()
        if isinstance(exc, asyncio.CancelledError):
            return "cancelled", task.uncancel()
        raise
    deadline.end()
    task = asyncio.current_task()
    assert task is not None
    return "done", task.cancelling()


async def _with_timeout(work: Callable[[], Awaitable[None]], timeout: float) -> Ending:
    """The same with ``asyncio.timeout``."""
    task = asyncio.current_task()
    assert task is not None
    try:
        async with asyncio.timeout(timeout):
            await work()
    except TimeoutError:
        return "deadline", task.cancelling()
    except asyncio.CancelledError:
        return "cancelled", task.uncancel()
    return "done", task.cancelling()


async def _slow() -> None:
    await asyncio.sleep(30)


async def _quick() -> None:
    await asyncio.sleep(0)


async def _swallows() -> None:
    """Takes the deadline's cancellation and ends normally all the same."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(30)


@pytest.mark.parametrize("bound", [_with_deadline, _with_timeout])
async def test_each_ending_is_the_one_asyncio_timeout_gives(
    bound: Callable[[Callable[[], Awaitable[None]], float], Awaitable[Ending]],
) -> None:
    # past the deadline: the deadline's own ending, no cancellation left on the task
    assert await bound(_slow, 0.02) == ("deadline", 0)
    # in time: done, and the timer stopped (nothing cancels the task later)
    assert await bound(_quick, 0.02) == ("done", 0)
    await asyncio.sleep(0.05)
    # the cancellation taken by the work: done, the task's count given back
    assert await bound(_swallows, 0.02) == ("done", 0)

    # a cancellation from outside (the caller left) before the deadline: not the deadline's
    async def cancelled_from_outside() -> Ending:
        return await bound(_slow, 30)

    task = asyncio.create_task(cancelled_from_outside())
    await asyncio.sleep(0.02)
    task.cancel()
    assert await task == ("cancelled", 0)


@pytest.mark.parametrize("bound", [_with_deadline, _with_timeout])
async def test_a_cancellation_counted_before_stays_counted(
    bound: Callable[[Callable[[], Awaitable[None]], float], Awaitable[Ending]],
) -> None:
    # A task that took a cancellation and has not given its count back (its owner will):
    # the deadline's own is told apart from it, and the earlier one stays counted.
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(0)
    assert task.cancelling() == 1
    try:
        assert await bound(_slow, 0.02) == ("deadline", 1)
    finally:
        task.uncancel()
