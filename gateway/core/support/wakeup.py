"""``Wakeup``: the ``asyncio.Event`` of a subscriber's queue, for a few hundred bytes less.

Every subscriber (a hub :class:`~gateway.core.watch.hub.WatchSubscription`, a read-ahead
:class:`~gateway.core.calls.streaming.ReadAhead`) waits on one flag that its producer sets when
it queues an item.  ``asyncio.Event`` keeps a deque of waiters (about 600 bytes allocated
up front, per subscriber, idle or not) and creates, appends and removes a future on every
wait; a subscriber has one reader, so one future, made only when the reader has to wait,
does the same.
"""

from __future__ import annotations

import asyncio

__all__ = ["Wakeup"]


class Wakeup:
    """A flag its one reader can wait for: ``set``, ``clear``, ``is_set`` and ``await
    wait()`` behave as ``asyncio.Event``'s.  One reader at a time (a subscriber is read by
    one task): a second one waiting meanwhile is refused with ``RuntimeError``."""

    __slots__ = ("_flag", "_waiter")

    def __init__(self) -> None:
        self._flag = False
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        if self._flag:
            return
        self._flag = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._flag = False

    async def wait(self) -> None:
        """Return once the flag is set (at once if it is)."""
        if self._flag:
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            raise RuntimeError("Wakeup has one reader; another one is already waiting")
        # (A done one was left by a reader that was cancelled: its future was cancelled.)
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        await waiter
