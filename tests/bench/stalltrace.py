"""What stalls a gateway process, seen from inside it, for finding the cause of event-loop lag.

``env(path)`` is the environment that makes a ``kube-gateway serve`` process (and no other)
run, through the ``sitecustomize`` module in ``stalltrace_site/``, a thread that wakes every
5 ms and appends to ``path``: each time it woke ``KG_STALL_TRACE_MS`` (default 30) late, the cyclic
collections that ran meanwhile (generation, duration, objects freed, from ``gc.callbacks``),
where the late window's time went (from each thread's ``/proc/self/task/*/schedstat``: how
long the sampler itself waited for a CPU, which is the machine's load and not the process's
doing; how long the event loop's thread ran and waited for a CPU; which other threads ran)
and where every other busy thread was; each slow collection on its own; each time the event
loop's thread stayed on one line of Python that long (busy, not waiting in ``select``); and
every 30 s the collections so far by generation and the young generations' counts (not
the frozen objects: counting them walks them all, holding the GIL for 80-300 ms).  With
``walks`` (``KG_STALL_TRACE_WALKS=1``, a debug run: counting the young objects at each
collection's start is a walk of its own), each collection of the middle generation or older
and each that took 5 ms of its thread's CPU or more (``KG_STALL_TRACE_WALK_MS``), with the
young generations' objects it walked, its thread, its caller and its CPU time.

Reading it: a late wake the sampler spent waiting for a CPU is the machine; one where the
loop's thread ran most of the window is the loop's own work (its frame is printed); one
where another thread ran is that thread holding the GIL; one where no thread ran nor
waited for a CPU is a thread blocked holding the GIL (a lock in C, e.g. the allocator's
while ``malloc_trim`` runs).  ``python -m
tests.bench.soak --gateway-env`` and ``bench_scale --stall-trace`` use it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["env"]

SITE = Path(__file__).with_name("stalltrace_site")


def env(path: Path, *, over_ms: float = 30.0, walks: bool = False) -> dict[str, str]:
    out = {
        "PYTHONPATH": str(SITE),
        "KG_STALL_TRACE": str(path.resolve()),
        "KG_STALL_TRACE_MS": str(over_ms),
    }
    if walks:
        out["KG_STALL_TRACE_WALKS"] = "1"
    return out
