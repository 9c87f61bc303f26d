"""Answers worth asking once: kept for a while, shared by concurrent askers, bounded.

Access reviews (:mod:`gateway.core.watch.access`) and token reviews
(:mod:`gateway.core.upstream.identity`)
ask the cluster a question whose answer holds for a while.  Asking it once per caller
per call would double every request's latency and load the cluster; asking it once per
key and keeping the answer briefly does not.  Concurrent first questions about one key
share one upstream call (a burst of a new caller's requests makes one review), and the
table is bounded (the oldest answers go first), so a flood of distinct keys costs memory
in proportion to the bound, not to the flood.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Answers(Generic[K, V]):
    """Answers by key, each kept until the expiry its asker gave it.

    Args:
        max_entries: answers kept at most (the oldest go first).
        clock: monotonic clock, in seconds.
    """

    def __init__(
        self, *, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._answers: OrderedDict[K, tuple[V, float]] = OrderedDict()
        self._asking: dict[K, asyncio.Future[V]] = {}
        #: Questions actually asked (not answered from the table nor shared).
        self.asked = 0

    def __len__(self) -> int:
        return len(self._answers)

    async def get(
        self, key: K, ask: Callable[[], Awaitable[tuple[V, float]]], *, fresh: bool = False
    ) -> V:
        """The answer for ``key``: kept, being asked by another task, or asked now.

        ``ask`` returns the answer and how many seconds it holds (0: not kept); an answer
        it raises instead is shared with the concurrent askers and not kept.

        Args:
            fresh: ask even when a kept answer is still valid.
        """
        if not fresh:
            kept = self._answers.get(key)
            if kept is not None and kept[1] > self.clock():
                return kept[0]
        while (asking := self._asking.get(key)) is not None:
            try:
                return await asyncio.shield(asking)
            except asyncio.CancelledError:
                if not asking.cancelled():
                    raise  # we were cancelled
                # the one asking went away: ask again
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._asking[key] = future
        try:
            self.asked += 1
            answer, ttl = await ask()
            if ttl > 0:
                self._keep(key, answer, ttl)
            future.set_result(answer)
            return answer
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            del self._asking[key]

    def _keep(self, key: K, answer: V, ttl: float) -> None:
        self._answers[key] = (answer, self.clock() + ttl)
        self._answers.move_to_end(key)
        while len(self._answers) > self.max_entries:
            self._answers.popitem(last=False)
