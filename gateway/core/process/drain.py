"""Draining: what the gateway does between SIGTERM and its exit, so no caller loses work.

One :class:`Drain` per application, made with it (its middleware refuses new work while
draining).  The command's signal handler calls :meth:`request` (safe from a signal
handler), which is heard once the lifespan's drain task (:meth:`serve`) runs on its event
loop; that task then:

1. turns ``draining`` on: ``/readyz`` answers 503, the gRPC health service
   ``NOT_SERVING``, and new requests, WebSocket upgrades, subscriptions and RPCs are
   refused with :class:`~gateway.core.errors.Draining` (HTTP 503 + ``Retry-After``, gRPC
   ``UNAVAILABLE``);
2. runs the steps the lifespan registered (:meth:`on_drain`): every open subscription ends
   with a resumable completion carrying its last resourceVersion, log follows end;
3. waits until the work in flight (:meth:`track`: unary requests, and the streams while
   they write their completions) is done, at most ``grace`` seconds;
4. calls the ``on_drained`` callbacks (the server then shuts down and the process exits 0).

A second signal while draining is the server's business (uvicorn then stops at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from gateway.core import errors

log = logging.getLogger(__name__)

T = TypeVar("T")


async def _anext(items: AsyncIterator[T]) -> T:
    return await anext(items)


class _InFlight:
    """Counts a call in flight on its drain while in the block; a class, not a generator
    (every call enters one: no generator nor context manager object per call)."""

    __slots__ = ("_drain",)

    def __init__(self, drain: Drain) -> None:
        self._drain = drain

    def __enter__(self) -> None:
        drain = self._drain
        drain._inflight += 1
        drain._idle.clear()

    def __exit__(self, *_: object) -> None:
        drain = self._drain
        drain._inflight -= 1
        if drain._inflight == 0:
            drain._idle.set()


class Drain:
    """The drain state of one application.

    Args:
        grace: seconds in-flight work may take to finish once draining started.
    """

    def __init__(self, grace: float = 25.0) -> None:
        self.grace = grace
        #: Readiness is false and new work is refused.
        self.draining = False
        #: The loop :meth:`serve` runs on (``None``: not serving yet, :meth:`request`
        #: says so).
        self._loop: asyncio.AbstractEventLoop | None = None
        # Events belong to no loop until awaited: made here, with the drain.
        self._requested = asyncio.Event()
        self._stopping = asyncio.Event()
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._steps: list[Callable[[], Awaitable[None]]] = []
        self._drained: list[Callable[[], None]] = []
        #: :meth:`track`'s context manager: one for every call (it holds no call's state).
        self._tracker = _InFlight(self)

    # -- wiring (the lifespan and the command) ---------------------------------------------------

    def on_drain(self, step: Callable[[], Awaitable[None]]) -> None:
        """Run ``step`` when draining starts (in registration order)."""
        self._steps.append(step)

    def on_drained(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the drain is over (the server then stops)."""
        self._drained.append(callback)

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def request(self) -> bool:
        """Ask for a drain; safe from a signal handler.  ``False``: not serving yet."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return False
        loop.call_soon_threadsafe(self._requested.set)
        return True

    # -- the drain itself ------------------------------------------------------------------------

    async def serve(self) -> None:
        """Wait for a request, drain, then call the ``on_drained`` callbacks (the lifespan's
        task, on the loop that hears :meth:`request` from then on)."""
        self._loop = asyncio.get_running_loop()
        await self._requested.wait()
        await self.run()
        for callback in self._drained:
            callback()

    async def run(self) -> None:
        """Drain now: refuse new work, end every subscription, wait for the rest."""
        if self.draining:
            return
        self.draining = True
        log.info("draining: refusing new work, ending subscriptions (grace %.0f s)", self.grace)
        self._stopping.set()
        for step in self._steps:
            try:
                await step()
            except Exception:
                log.exception("a drain step failed")
        try:
            async with asyncio.timeout(self.grace):
                await self._idle.wait()
        except TimeoutError:
            log.warning("drain grace period over with %d call(s) still running", self._inflight)
        else:
            log.info("drained: no call in flight")

    # -- for the front ends ----------------------------------------------------------------------

    def refuse(self) -> None:
        """Raise :class:`~gateway.core.errors.Draining` when new work must be refused."""
        if self.draining:
            raise errors.Draining()

    def track(self) -> _InFlight:
        """Count a call in flight for the duration of the block (``with drain.track():``)."""
        return self._tracker

    async def until_draining(self, items: AsyncIterator[T]) -> AsyncIterator[T]:
        """``items`` until a drain starts, which ends it with
        :class:`~gateway.core.errors.Draining` (for streams without a hub: log follows)."""
        stopped = asyncio.ensure_future(self._stopping.wait())
        try:
            while True:
                step = asyncio.ensure_future(_anext(items))
                done, _ = await asyncio.wait({step, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if step not in done:
                    step.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await step
                    raise errors.Draining()
                try:
                    yield step.result()
                except StopAsyncIteration:
                    return
        finally:
            stopped.cancel()
