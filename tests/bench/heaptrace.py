"""Heap figures from inside a gateway process, for finding what grows in a soak.

``env(path)`` is the environment that makes a ``kube-gateway serve`` process (and no other:
not its list workers) start :mod:`tracemalloc` at start-up, through the ``sitecustomize``
module in ``heaptrace_site/``, and append to ``path`` every ``KG_HEAP_TRACE_EVERY`` seconds
(default 20): its RSS; what glibc's heap holds over all its arenas (``malloc_info``: bytes
taken from the system, free in its lists, mmapped chunks, the number of arenas); the bytes
Python allocations hold (tracemalloc); and the allocation sites that grew most since the
first figures after ``KG_HEAP_TRACE_BASE`` seconds (default 60, after warm-up).  With
``frames=0`` (``KG_HEAP_TRACE_FRAMES``) no tracemalloc: RSS and glibc's figures only, at no
cost to the process.

RSS far above glibc's total means memory outside malloc (thread stacks, mmapped files);
glibc's in-use bytes (taken less free) far above tracemalloc's means allocations that bypass
Python's allocator (C extensions: grpc, orjson's buffers); glibc's free bytes growing with
tracemalloc's flat means fragmentation, not a leak.  ``python -m tests.bench.soak
--heap-trace FILE`` uses it.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["env", "malloc_totals"]

SITE = Path(__file__).with_name("heaptrace_site")


def env(path: Path, *, every: float = 20.0, base: float = 60.0, frames: int = 8) -> dict[str, str]:
    return {
        "PYTHONPATH": str(SITE),
        "KG_HEAP_TRACE": str(path.resolve()),
        "KG_HEAP_TRACE_EVERY": str(every),
        "KG_HEAP_TRACE_BASE": str(base),
        "KG_HEAP_TRACE_FRAMES": str(frames),
    }


def malloc_totals(xml: str) -> dict[str, int]:
    """glibc ``malloc_info`` XML, summed over arenas: ``system`` (bytes taken from the system,
    mmapped chunks included), ``free`` (in its free lists), ``mmap``, ``arenas``."""

    def total(kind: str) -> int:
        tail = xml[xml.rfind("</heap>") :]
        m = re.search(rf'<total type="{kind}" count="\d+" size="(\d+)"', tail)
        return int(m.group(1)) if m else 0

    tail = xml[xml.rfind("</heap>") :]
    current = re.search(r'<system type="current" size="(\d+)"', tail)
    mmap = total("mmap")
    return {
        "system": (int(current.group(1)) if current else 0) + mmap,
        "free": total("fast") + total("rest"),
        "mmap": mmap,
        "arenas": xml.count("<heap nr="),
    }
