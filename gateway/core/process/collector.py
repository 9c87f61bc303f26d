"""The process's holds of the cyclic garbage collector, counted in one place.

Several kinds of work allocate a burst of objects that a collection in the middle would
walk for nothing: a large list body's decode (:mod:`gateway.core.lists.large`), a schema
build (``gateway/graphql/engine/collector.py``), the fill of a watch hub's state and of a
view cache (:mod:`gateway.core.watch.watcher`).  Each holds the collector off while it
runs.  They overlap (a schema build in a thread while the event loop decodes a list), so
the holds are counted here, once for the process: the first hold turns the collector off
(if it was on), the last one to end turns it back on, and none of them ever turns on a
collector it did not turn off (a test or an embedding application that disabled it keeps
it disabled).  Counted with a lock: schema builds take their hold in worker threads.

What a fill leaves behind lives on (a view cache's entries and columns: a few objects per
cached object), and each full collection would walk it again.  Where the process is the
gateway's own (``kube-gateway serve`` sets :attr:`CollectorHold.freeze`, as it does for
schema builds), :meth:`CollectorHold.settle` after a large fill collects the youngest
generation (the garbage of whatever ran meanwhile, so it is not frozen with the fill) and
freezes what is left: no collection walks it again, and it is still freed by reference
counting (what a fill keeps holds no reference cycles).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["HOLD", "CollectorHold"]


class CollectorHold:
    """A count of holds of the cyclic collector (see the module)."""

    __slots__ = ("_holders", "_lock", "_ours", "freeze", "settled")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        #: Whether the first open hold turned the collector off (the last turns it back on).
        self._ours = False
        #: Freeze what a large fill leaves (:meth:`settle`): the process is the gateway's.
        self.freeze = False
        #: Settles that froze (for tests and logs).
        self.settled = 0

    @property
    def holders(self) -> int:
        """Holds open now."""
        return self._holders

    def take(self) -> None:
        """Hold the collector off until the matching :meth:`give`."""
        with self._lock:
            if self._holders == 0 and gc.isenabled():
                gc.disable()
                self._ours = True
            self._holders += 1

    def give(self) -> None:
        """End one hold; the last one turns the collector back on if the first turned it
        off."""
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._ours:
                self._ours = False
                gc.enable()

    def settle(self) -> None:
        """After a large fill of long-lived objects (on the event loop): where freezing is
        on, the youngest generation collected and what is left frozen (see the module)."""
        if self.freeze:
            gc.collect(0)
            gc.freeze()
            self.settled += 1

    @contextmanager
    def held(self) -> Iterator[None]:
        """A block (which may span ``await``) run with the collector held off."""
        self.take()
        try:
            yield
        finally:
            self.give()


#: The process's (the collector is the process's too).
HOLD = CollectorHold()
