"""The test process's heap frozen as ``kube-gateway serve`` freezes its own after start-up.

``serve`` collects once and freezes what exists (``gateway/app.py``,
``tune_garbage_collector``), so its collections walk only what it made since.  A test that
serves the gateway in its own process and measures the event loop's lag shares that process
with every object the suite made before it (over a thousand tests' worth in ``make test``):
a full collection of those, seconds late in the suite, is not the gateway's stall.  Inside
:func:`frozen_heap` the heap that was there is left out of collections, as ``serve``'s is.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect once and freeze what is left until the block ends."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
