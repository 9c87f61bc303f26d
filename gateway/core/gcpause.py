"""Holding the cyclic garbage collector off while a large upstream body is handled.

A list response of a few thousand objects decodes (orjson) into millions of young dicts,
lists and strings, and the gateway then builds as many again: the gRPC codec's wire bytes,
or the GraphQL projection's response.  Every one of those allocations counts towards the
collector's generation-0 threshold, so a collection starts over and over in the middle of
the work, and each one traverses the young objects allocated so far (then generation 1, then
2): work proportional to the body, repeated, that finds nothing, because decoded JSON holds
no reference cycles.  For 5,000 realistic pods the projection alone lost 150 to 300 ms to
it, two to three times its own cost.  The body is freed by reference counting once dropped,
so the collector need never see it: it is held off for the duration of the work and turned
back on afterwards, when the next collection runs as usual.

Four shapes, one rule:

* :func:`paused` — a ``with`` block around synchronous work (decoding a body, encoding a
  list message);
* :func:`held` — a ``with`` block around work that yields to the event loop in between
  (a large list encoded in slices): counted, so overlapping holds of several tasks keep the
  collector off until the last one ends;
* :func:`pause_until_next_turn` — for work that does not end in a block of ours (the
  GraphQL projection of a large list: the response and the decoded body are dropped when the
  current event-loop step ends).  The collector comes back on from a ``call_soon`` callback,
  so at most the callbacks already queued run with it held.

* :func:`scope` and :func:`hold_for_scope` — for a large body decoded in one place and dropped
  in another (the adapter decodes a list, the gRPC servicer encodes it and drops it): the
  decoder holds the collector for the caller's scope, which ends after the caller has
  dropped the body.  Turning the collector back on while the decoded body is still alive
  would cost what the pause saved and more: the objects allocated while it was off are all
  in the youngest generation, so the first allocation after it comes back on starts a
  collection that traverses every one of them (measured: 100-170 ms, one loop stall, for
  5,000 pods).

All of them do nothing when the collector is already off (a pause further out, or whoever turned it
off): they never turn on a collector they did not turn off.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import Final

__all__ = [
    "LARGE_BODY_BYTES",
    "LARGE_LIST",
    "held",
    "hold_for_scope",
    "pause_until_next_turn",
    "paused",
    "scope",
]

#: A JSON body at least this large is decoded with the collector held off.
LARGE_BODY_BYTES: Final = 1 << 20
#: A list (of a list response's ``items``) at least this long is a large decoded body.
LARGE_LIST: Final = 500


class _Pause:
    __slots__ = ("_held",)

    def __init__(self, held: bool) -> None:
        self._held = held

    def __enter__(self) -> None:
        if self._held:
            gc.disable()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._held:
            gc.enable()


def paused(when: bool = True) -> _Pause:
    """A ``with`` block run with the cyclic collector off (``when`` false: left as it is).

    The collector is turned on again when the block ends, also by an exception.
    """
    return _Pause(when and gc.isenabled())


class _Hold:
    """The counted pause of :func:`held` (one event loop thread: no lock needed)."""

    holders = 0
    #: Whether the first holder turned the collector off (and the last turns it back on).
    ours = False

    __slots__ = ("_when",)

    def __init__(self, when: bool) -> None:
        self._when = when

    def __enter__(self) -> None:
        if not self._when:
            return
        if _Hold.holders == 0 and gc.isenabled():
            gc.disable()
            _Hold.ours = True
        _Hold.holders += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._when:
            return
        _Hold.holders -= 1
        if _Hold.holders == 0 and _Hold.ours:
            _Hold.ours = False
            gc.enable()


def held(when: bool = True) -> _Hold:
    """A ``with`` block, which may span ``await``, run with the cyclic collector off.

    Other tasks run with the collector off while the block waits; the work inside yields
    often, so that is a few milliseconds at a time, and the block as a whole lasts as long
    as the synchronous work it replaces.  Holds overlap: the collector comes back on when
    the last open hold ends, and only if the first one turned it off.
    """
    return _Hold(when)


def pause_until_next_turn() -> None:
    """Hold the cyclic collector off until the running event loop's current step ends.

    Outside a running event loop, or with the collector already off, nothing happens.
    """
    if not gc.isenabled():
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    gc.disable()
    loop.call_soon(_resume)


def _resume() -> None:
    """The end of a :func:`pause_until_next_turn`: the collector back on, unless a
    :func:`held` block began meanwhile (it found the collector off, so it did not take it
    over): then the last holder turns it on when its block ends."""
    if _Hold.holders:
        _Hold.ours = True
    else:
        gc.enable()


#: The holds of the innermost open :func:`scope` of the running task (``None``: no scope).
_scope: ContextVar[list[_Hold] | None] = ContextVar("gcpause_scope", default=None)


@contextmanager
def scope(*, linger: bool = False) -> Iterator[None]:
    """A ``with`` block (which may span ``await``) in which :func:`hold_for_scope` holds the
    collector off until the block ends.

    The block must drop what it decoded before it ends (``del``): the collector comes back
    on when it ends, and finds nothing young to traverse only if the body is gone by then.
    With ``linger`` the hold lasts to the end of the event-loop step the block ends in
    instead: for a caller that hands the decoded value on (a GraphQL list resolver, whose
    value is completed later in the same step, under a hold of its own when it is large).
    """
    holds: list[_Hold] = []
    token = _scope.set(holds)
    try:
        yield
    finally:
        _scope.reset(token)
        if linger and holds:
            loop = asyncio.get_running_loop()
            for hold in reversed(holds):
                loop.call_soon(hold.__exit__, None, None, None)
        else:
            for hold in reversed(holds):
                hold.__exit__(None, None, None)


def hold_for_scope() -> bool:
    """Hold the cyclic collector off until the innermost open :func:`scope` of the running
    task ends (a scope holds once however often this is called).

    Returns whether a scope is open: without one, nothing happens and the caller turns the
    collector back on itself (a :func:`held` or :func:`paused` block of its own).
    """
    holds = _scope.get()
    if holds is None:
        return False
    if not holds:
        hold = _Hold(True)
        hold.__enter__()
        holds.append(hold)
    return True
