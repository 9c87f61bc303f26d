"""The rows of the first table of ``BENCHMARKS.md`` that ``bench_get`` and
``bench_loop_hold`` write: how their goals are judged, what their notes say, and that each
bench's ``--out`` takes its own rows and no other's (the values are the benches' business)."""

from __future__ import annotations

import datetime

from tests.bench import bench_get, bench_graphql_list, bench_loop_hold, grpc_conversion
from tests.bench.report import document, put_rows, row


def _gets() -> dict[tuple[str, int], dict[str, float]]:
    figures = {
        ("direct", 1): (0.1, 5000, 0.07),
        ("graphql", 1): (0.5, 1900, 0.33),
        ("grpc", 1): (1.2, 800, 0.68),
        ("direct", 32): (2.5, 10000, 0.08),
        ("graphql", 32): (9.0, 3000, 0.23),
        ("grpc", 32): (3.4, 900, 0.55),
    }
    return {k: {"p50": p50, "rps": rps, "cpu": cpu} for k, (p50, rps, cpu) in figures.items()}


def test_a_get_is_judged_on_the_latency_it_adds_with_the_gateways_cpu_beside_it() -> None:
    rows = {r.scenario: r for r in bench_get.figure_rows(_gets(), (1, 32))}
    assert len(rows) == 8
    graphql = rows["get one pod, GraphQL, p50, concurrency 1"]
    assert graphql.met is True and graphql.note == "added +0.40 ms"
    assert graphql.goal == "≤ +1 ms added"
    assert rows["get one pod, gRPC, p50, concurrency 1"].met is False  # +1.10 ms
    assert rows["get one pod, GraphQL, p50, concurrency 32"].met is False  # +6.50 ms
    assert rows["get one pod, gRPC, p50, concurrency 32"].met is True  # +0.90 ms
    rate = rows["get one pod, gRPC, requests/s, concurrency 32"]
    assert rate.ratio == 0.09 and rate.met is None
    assert rate.note == "gateway CPU 0.55 ms per request, upstream 0.08 ms per direct get"


def test_a_get_at_1_is_judged_on_the_median_of_its_rounds_differences() -> None:
    figures = _gets()
    # bench_get's figures at 1 (tests/bench/latency.py): each request timed to the ns, the
    # added latency the median of the rounds' differences to the direct get's
    figures["graphql", 1] |= {"p99": 0.9, "added": 0.4123, "added_low": 0.35, "rounds": 5}
    figures["graphql", 1] |= {"added_high": 0.52}
    figures["grpc", 1] |= {"p99": 2.0, "added": 1.0006, "added_low": 0.9, "rounds": 5}
    figures["grpc", 1] |= {"added_high": 1.3}
    rows = {r.scenario: r for r in bench_get.figure_rows(figures, (1, 32))}
    graphql = rows["get one pod, GraphQL, p50, concurrency 1"]
    assert graphql.met is True and graphql.note == (
        "added +0.412 ms, the median of 5 interleaved rounds' p50 differences "
        "(+0.350 to +0.520); p99 0.900 ms"
    )
    # 1.2 - 0.1 is over the goal of +1 ms, and so is the rounds' median, to the microsecond
    assert rows["get one pod, gRPC, p50, concurrency 1"].met is False
    assert rows["get one pod, GraphQL, p50, concurrency 32"].note == "added +6.50 ms"


def test_a_small_get_is_judged_on_its_p99_against_idle_with_the_upstreams_own_beside() -> None:
    figures: dict[str, tuple[float, ...]] = {}
    for phase, loaded, direct in (("GraphQL", 0.004, 0.0022), ("gRPC", 0.009, 0.003)):
        figures[f"GraphQL get during {phase} lists"] = (loaded, 0.002)
        figures[f"gRPC Get during {phase} lists"] = (loaded, 0.003)
        figures[f"direct get during {phase} lists"] = (direct, 0.001)
        figures[f"stall during {phase} lists"] = (0.02, 0.005)
        figures[f"loop thread during {phase} lists"] = (0.5, 1.25, 0.0137)
    rows = {r.scenario: r for r in bench_loop_hold.figure_rows(figures, 5000)}
    assert len(rows) == 6  # the direct gets and the loop's thread are notes, not rows
    fine = rows["small GraphQL get during GraphQL lists (5,000 pods), p99"]
    assert fine.met is True and fine.ratio == 2.0
    assert fine.note.endswith("straight to the upstream meanwhile 2.2 ms, idle 1.0 ms")
    assert rows["small gRPC Get during gRPC lists (5,000 pods), p99"].met is False
    stall = rows["longest event-loop stall during gRPC lists (5,000 pods)"]
    assert stall.met is None and stall.figure == 20.0
    assert stall.note.endswith("1.2 s waiting for one; its most CPU in one gap 13.7 ms")


def test_each_bench_refreshes_its_own_rows_of_the_first_table_and_no_others() -> None:
    benches = {
        grpc_conversion.OWNS: [
            row("gRPC List 5,000 pods, client parse included, best", 400, "ms", 300),
            row("codec dicts → PodList bytes vs orjson decode, 5,000 pods, CPU", 1, "ms", 1),
            row("one watch event to a gRPC message, CPU", 30, "µs", max_value=40),
        ],
        bench_graphql_list.OWNS: [row("GraphQL list 5,000 pods, 15 fields, median", 1, "ms")],
        bench_loop_hold.OWNS: [
            row("small GraphQL get during GraphQL lists (5,000 pods), p99", 9, "ms", 3),
            row("longest event-loop stall during GraphQL lists (5,000 pods)", 20, "ms", 5),
        ],
        bench_get.OWNS: bench_get.figure_rows(_gets(), (1, 32)),
    }
    when = datetime.datetime(2026, 1, 1)
    every = [r for found in benches.values() for r in found]
    for owned, found in benches.items():
        assert all(r.scenario.startswith(owned) for r in found)
        # no other bench's row starts with what this one owns
        assert not [r for r in every if r not in found and r.scenario.startswith(owned)]
        doubled = [row(r.scenario, 2 * (r.figure or 1), r.unit, r.direct) for r in found]
        text = put_rows(document(every, when=when, info={}), doubled, owned)
        others = [doubled[found.index(r)] if r in found else r for r in every]
        assert text == document(others, when=when, info={})
