"""Counting calls: work measured by the functions that ran, not by how long it took.

A test that must show some work was *not* done (a document refused before it was parsed, a
YAML bomb refused before it was expanded) counts the calls into the functions that do that
work while the request is served.  The API tests serve the gateway in process, on the
test's own thread and event loop, so a profile function set here sees the server's calls
too.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from types import FrameType, FunctionType
from typing import cast


@contextlib.contextmanager
def calls_to(*functions: Callable[..., object]) -> Iterator[Counter[Callable[..., object]]]:
    """Count the calls to each of ``functions`` (plain Python functions, not coroutines)
    made on this thread while the block runs; the counter is keyed by the function."""
    codes = {cast(FunctionType, f).__code__: f for f in functions}
    counts: Counter[Callable[..., object]] = Counter(dict.fromkeys(functions, 0))

    def count(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            function = codes.get(frame.f_code)
            if function is not None:
                counts[function] += 1

    previous = sys.getprofile()
    sys.setprofile(count)
    try:
        yield counts
    finally:
        sys.setprofile(previous)
