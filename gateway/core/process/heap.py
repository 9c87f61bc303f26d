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

A gateway also takes requests of megabytes from anyone (a 4 MiB body is refused only
once read), each in whichever thread's malloc arena: with glibc's defaults (8 arenas a
core, and a threshold for serving large blocks by ``mmap`` that rises to 32 MiB once such a
block is freed) their freed pages pile up as free lists across arenas and RSS grows with
the traffic, not with what is kept (the soak, ``tests/bench/soak.py``: 30 MB of glibc's
free lists over 15 arenas under hostile clients).  :func:`limit_arenas` caps the arenas
and keeps large blocks on ``mmap`` (given back the moment they are freed); the command
sets it at start, unless ``MALLOC_ARENA_MAX`` or ``MALLOC_MMAP_THRESHOLD_`` says otherwise.

Elsewhere (musl, macOS) there is no such call and nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable, Mapping

__all__ = ["give_back", "limit_arenas", "trim_function"]

#: glibc's mallopt parameters.
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def limit_arenas(
    arenas: int = 2, mmap_threshold: int = 256 * 1024, env: Mapping[str, str] = os.environ
) -> bool:
    """At most ``arenas`` malloc arenas, and blocks of ``mmap_threshold`` bytes or more
    served by ``mmap`` (so freed at once, whatever else the heap holds); each left as the
    environment sets it.  Whether glibc took them (``False`` elsewhere)."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:
        return False
    took = True
    if "MALLOC_ARENA_MAX" not in env:
        took = bool(mallopt(_M_ARENA_MAX, arenas)) and took
    if "MALLOC_MMAP_THRESHOLD_" not in env:
        took = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and took
    return took


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
