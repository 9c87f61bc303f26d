"""What stalls a gateway process, seen from inside it, for finding the cause of event-loop lag.

``env(path)`` is the environment that makes a ``kube-gateway serve`` process (and no other)
run, through the ``sitecustomize`` module in ``stalltrace_site/``, a thread that wakes every
5 ms and appends to ``path``: each time it woke ``KG_STALL_TRACE_MS`` (default 30) late, so
something held the GIL that long, the cyclic collections that ran meanwhile (generation,
duration, objects freed, from ``gc.callbacks``) and where every other busy thread was; each
slow collection on its own; each time the event loop's thread stayed on one line of Python
that long (busy, not waiting in ``select``); and every 30 s the collections so far by
generation, the frozen objects and the tracked ones per generation.  ``python -m
tests.bench.soak --gateway-env`` and ``bench_scale --stall-trace`` use it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["env"]

SITE = Path(__file__).with_name("stalltrace_site")


def env(path: Path, *, over_ms: float = 30.0) -> dict[str, str]:
    return {
        "PYTHONPATH": str(SITE),
        "KG_STALL_TRACE": str(path.resolve()),
        "KG_STALL_TRACE_MS": str(over_ms),
    }
