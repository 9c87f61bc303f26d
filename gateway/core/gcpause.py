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

Three shapes, one rule:

* :func:`paused` — a ``with`` block around synchronous work (decoding a body, encoding a
  list message);
* :func:`held` — a ``with`` block around work that yields to the event loop in between
  (a large list encoded in slices): counted, so overlapping holds of several tasks keep the
  collector off until the last one ends;
* :func:`pause_until_next_turn` — for work that does not end in a block of ours (the
  GraphQL projection of a large list: the response and the decoded body are dropped when the
  current event-loop step ends).  The collector comes back on from a ``call_soon`` callback,
  so at most the callbacks already queued run with it held.

Both do nothing when the collector is already off (a pause further out, or whoever turned it
off): they never turn on a collector they did not turn off.
"""

from __future__ import annotations

import asyncio
import gc
from types import TracebackType
from typing import Final

__all__ = ["LARGE_BODY_BYTES", "LARGE_LIST", "held", "pause_until_next_turn", "paused"]

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
