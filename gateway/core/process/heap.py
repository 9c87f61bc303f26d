"""Giving the heap memory a burst of work freed back to the system.

Discovering a cluster reads its OpenAPI documents (megabytes of JSON each, with hundreds of
CRDs) and builds schemas from them; most of what that allocates is freed once the schema
is built.  Python's own small-object arenas go back to the system when they empty, but the
C allocator (glibc's ``malloc``, which holds every object over 512 bytes: dict tables, long
strings, lists) keeps freed pages for reuse, so the process's RSS stays at the high-water
mark of every discovery: measured, 16.9 MB per added cluster with 100 CRDs of which 5.2 MB
was still in use.  :func:`give_back` asks glibc to return the free pages
(``malloc_trim(0)``): 10.6-11.1 MB per added cluster in the same measurement
(``tests/bench/bench_fleet.py``).

Elsewhere (musl, macOS) there is no such call and nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
from collections.abc import Callable

__all__ = ["give_back", "trim_function"]


@functools.cache
def trim_function() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or ``None`` where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


async def give_back() -> None:
    """Return the C heap's free pages to the system, in a thread: it walks the heap (a few
    ms after a large discovery, microseconds otherwise) and the event loop goes on."""
    trim = trim_function()
    if trim is not None:
        await asyncio.to_thread(trim, 0)
