"""The streaming operations' one entry point: :func:`open_stream`, for both front ends.

:func:`~gateway.core.calls.operations.perform` runs the unary operations; the two streaming ones
of the operations table run here, from the same :class:`~gateway.core.calls.operations.Call`:

- ``watch``: a subscription of the :class:`~gateway.core.watch.hub.WatchHub` (one upstream watch
  per scope and selectors, the caller's own start, resume, relists, rule 31 when asked);
- ``log`` with ``follow``: the :class:`~gateway.core.watch.logfollow.LogFollower`'s lines
  (resumed across upstream breaks, ending when the container stops), read ahead by a
  :class:`ReadAhead`.

Both are read the same way (:class:`Stream`): ``next_nowait()`` for what is ready,
``await next()`` to wait (``None`` at a clean end; the error that ended it is raised), and
``close()`` when the reader is done, which also wakes a reader waiting in ``next()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Generic, Protocol, TypeVar

from gateway.core import errors
from gateway.core.calls.operations import Call, Operation
from gateway.core.support.wakeup import Wakeup
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.credentials import Credential
from gateway.core.watch.hub import WatchHub, WatchStart, WatchSubscription, WatchTarget
from gateway.core.watch.logfollow import LogFollower, RawLine

__all__ = ["LogStream", "ReadAhead", "Stream", "open_stream"]

log = logging.getLogger(__name__)

T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")

#: Lines a followed log holds for a reader that is behind; past that the follow stops
#: reading the upstream (its TCP window fills) until the reader takes some.
LOG_QUEUE = 256


class Stream(Protocol[T_co]):
    """What both front ends read a streaming operation through."""

    @property
    def resume(self) -> str | None:
        """The resume point after the last item taken (``None``: none, as for a log)."""

    def next_nowait(self) -> T_co | None: ...

    async def next(self) -> T_co | None: ...

    def close(self) -> None: ...


class ReadAhead(Generic[T]):
    """An async iterator's items for one reader, read ahead by a task of its own (at most
    ``max_queue`` ahead: then the task waits, and so does what it reads).

    The task is the stream's: :meth:`close` (the reader is done, or the gateway drains)
    stops it and wakes the reader.
    """

    __slots__ = (
        "__weakref__",
        "_ended",
        "_queue",
        "_room",
        "_task",
        "_wakeup",
        "closed",
        "error",
        "max_queue",
    )

    resume: str | None = None

    def __init__(self, items: AsyncIterator[T], max_queue: int = LOG_QUEUE) -> None:
        self.max_queue = max_queue
        self._queue: deque[T] = deque()
        self._wakeup = Wakeup()
        self._room = Wakeup()
        self._ended = False
        self.closed = False
        self.error: errors.GatewayError | None = None
        self._task = asyncio.create_task(self._read(items), name="read-ahead")

    async def _read(self, items: AsyncIterator[T]) -> None:
        try:
            async with aclosing(items) as reading:  # type: ignore[type-var]
                async for item in reading:
                    while len(self._queue) >= self.max_queue:
                        self._room.clear()
                        await self._room.wait()
                    self._queue.append(item)
                    self._wakeup.set()
        except errors.GatewayError as exc:
            self.error = exc
        except Exception:
            log.exception("a stream failed")
            self.error = errors.Internal("the stream failed")
        finally:
            self._ended = True
            self._wakeup.set()

    def __aiter__(self) -> ReadAhead[T]:
        return self

    async def __anext__(self) -> T:
        item = await self.next()
        if item is None:
            raise StopAsyncIteration
        return item

    def next_nowait(self) -> T | None:
        if self._queue:
            item = self._queue.popleft()
            self._room.set()
            return item
        return None

    async def next(self) -> T | None:
        while True:
            item = self.next_nowait()
            if item is not None:
                return item
            if self._ended or self.closed:
                if self.error is not None and not self.closed:
                    raise self.error
                return None
            self._wakeup.clear()
            await self._wakeup.wait()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._queue.clear()
        self._task.cancel()
        self._wakeup.set()

    def end(self, error: errors.GatewayError | None = None) -> None:
        """End the stream with ``error`` (the reader gets it next, what is queued is
        dropped); its task stops."""
        if self.closed or self._ended:
            return
        self.error = error
        self._ended = True
        self._queue.clear()
        self._task.cancel()
        self._wakeup.set()


#: A followed log: its lines, read ahead.
LogStream = ReadAhead[RawLine]


async def open_stream(
    adapter: KubeAdapter,
    watches: WatchHub | None,
    op: Operation,
    call: Call,
    *,
    credential: Credential,
) -> WatchSubscription | LogStream:
    """Start a streaming operation for a caller: a watch, or a followed log.

    In impersonate mode (a credential with a ``proof``) the stream ends with
    ``Unauthorized`` once the caller's token is refused or expires
    (:meth:`~gateway.core.upstream.identity.TokenReviews.follow`).

    A watch starts as ``call.list`` says (:meth:`WatchStart.from_options`), with watch rule
    31 when ``call.changed_only``.

    Raises:
        GatewayError: refused before any request (validation, budgets), or the upstream's
            error on opening (401, 403, 404...).
    """
    namespace = op.namespace(call.namespace)
    if op.action == "watch":
        if watches is None:
            raise errors.Unavailable("watches are not served here")
        start = WatchStart.from_options(call.list, changed_only=call.changed_only)
        target = WatchTarget(
            op.resource, namespace, call.list.label_selector, call.list.field_selector
        )
        sub = await watches.subscribe(target, start, credential)
        if credential.proof is not None:
            credential.proof.follow(sub)
        return sub
    if op.action == "log" and call.log.follow:
        assert namespace is not None  # logs are of pods, which are namespaced
        follower = LogFollower(
            adapter, namespace=namespace, name=call.name, options=call.log, credential=credential
        )
        lines = ReadAhead(follower.lines())
        if credential.proof is not None:
            credential.proof.follow(lines)
        return lines
    raise ValueError(f"{op.describe()} does not stream: it is served by perform()")
