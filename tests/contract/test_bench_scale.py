"""bench_scale's rows from the stall trace's walks, and its section of BENCHMARKS.md."""

from __future__ import annotations

import datetime

from tests.bench.bench_scale import walk_rows, walks_of
from tests.bench.report import document, row, splice

TRACE = """\
1764355200.100 walk gen1 young [1200, 3400] cpu 0.8ms freed 12 thread MainThread: \
collector.py:before_build < live.py:build < tasks.py:run
1764355200.200 walk gen0 counts [5001] cpu 6.5ms freed 0 thread asyncio_1: \
native.py:_field < native.py:_object < native.py:build
1764355200.300 walk gen1 counts [11100, 3] cpu 12.5ms freed 3 thread MainThread: \
execution.py:run < http.py:post < routing.py:app
1764355200.400 GIL late 35ms; gc: none; sampler waited for a CPU 30ms
"""


def test_the_walks_of_the_stall_trace_become_rows() -> None:
    walks = walks_of(TRACE)
    assert [(w.generation, w.young, w.thread) for w in walks] == [
        (1, 4600, "MainThread"),
        (0, 5001, "asyncio_1"),
        (1, 11100, "MainThread"),
    ]
    assert walks[0].caller.startswith("collector.py:before_build")
    rows = {r.scenario: r for r in walk_rows("scale N=470 CRDs", walks)}
    loop = rows[
        "scale N=470 CRDs: longest collection on the event loop's thread, its thread's CPU "
        "(stall trace)"
    ]
    assert loop.figure == 12.5
    assert "11,100 young" in loop.note and "1 of 10 ms or more" in loop.note
    before = rows[
        "scale N=470 CRDs: longest collection on the event loop's thread before a group "
        "build, its thread's CPU (stall trace)"
    ]
    assert before.figure == 0.8
    other = rows[
        "scale N=470 CRDs: longest collection in another thread, its thread's CPU (stall trace)"
    ]
    assert other.figure == 6.5
    assert walk_rows("scale N=0 CRDs", []) == []


def test_the_rows_go_in_their_own_section() -> None:
    when = datetime.datetime(2026, 1, 1)
    main = [row("get one pod, gRPC, p50, concurrency 1", 3, "ms", 1.0, max_ratio=2)]
    scale = [
        row(
            "scale N=470 CRDs: RSS after every group's endpoint was used once",
            280,
            "MB",
            max_value=300,
        ),
        *walk_rows("scale N=470 CRDs", walks_of(TRACE)),
    ]
    text = splice(document(main, when=when, info={}), scale)
    assert text == document(main + scale, when=when, info={})
    section = text.split("## Group schemas under CRD churn\n", 1)[1].split("\n## ", 1)[0]
    assert "RSS after every group's endpoint was used once | 280 MB" in section
    assert "--out BENCHMARKS.md" in section
