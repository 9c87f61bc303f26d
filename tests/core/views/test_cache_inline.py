"""Where the cache runs an evaluation (:func:`gateway.core.views.cache._evaluate`): the first
of a shape at a version in a worker thread (what it reads built first, once), the others
of that shape on the event loop once it measured cheap, in worker threads when it did not.

Real threads and a real event loop; the evaluations are plain functions that record the
thread they ran in (one of them burns CPU past the inline bound).
"""

from __future__ import annotations

import asyncio
import threading
import time

from gateway.core.views import cache
from gateway.core.views.store import Store


def _burn(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_cheap_evaluations_run_on_the_loop_and_dear_ones_in_threads() -> None:
    snap = Store().snapshot("1", [])
    prepared: list[int] = []
    ran: dict[str, list[int]] = {"cheap": [], "dear": []}

    def evaluation(kind: str) -> str:
        ran[kind].append(threading.get_ident())
        if kind == "dear":
            _burn(cache.INLINE_SECONDS * 3)
        return kind

    async def main() -> int:
        loop_thread = threading.get_ident()
        for kind in ("cheap", "dear"):
            answers = await asyncio.gather(
                *(
                    cache._evaluate(snap, kind, lambda: prepared.append(1), evaluation, kind)
                    for _ in range(8)
                )
            )
            assert answers == [kind] * 8
            answers = await asyncio.gather(
                *(cache._evaluate(snap, kind, prepared.clear, evaluation, kind) for _ in range(8))
            )
            assert answers == [kind] * 8
        return loop_thread

    loop_thread = asyncio.run(main())
    assert prepared == [1, 1]  # once per shape, by the first of each; never again
    cheap, dear = ran["cheap"], ran["dear"]
    assert cheap[0] != loop_thread and dear[0] != loop_thread  # the first: in a thread
    assert cheap[1:] == [loop_thread] * 15  # measured cheap: on the loop, none waiting
    assert loop_thread not in dear  # measured dear: every one in a worker thread
    assert len(dear) == 16


def test_callers_woken_together_take_turns_on_the_loop() -> None:
    """60 evaluations of 1.5 ms CPU each (under the inline bound) that woke together, all
    in one turn of the loop, would hold it for 90 ms of CPU; they take a turn each.  The
    turns are measured in the loop thread's CPU time (on a loaded machine a turn's wall
    time also holds the waits for a core)."""
    snap = Store().snapshot("1", [])
    each = cache.INLINE_SECONDS * 0.75

    async def main() -> float:
        gaps: list[float] = []
        done = False

        async def ticker() -> None:
            last = time.thread_time()
            while not done:
                await asyncio.sleep(0)
                now = time.thread_time()
                gaps.append(now - last)
                last = now

        task = asyncio.create_task(ticker())
        await asyncio.gather(
            *(cache._evaluate(snap, "x", lambda: None, _burn, each) for _ in range(60))
        )
        done = True
        await task
        return max(gaps)

    longest = asyncio.run(main())
    assert longest < 60 * each / 6, longest  # 15 ms of CPU: a tenth of the herd's
