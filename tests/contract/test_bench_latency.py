"""The p50 rows at concurrency 1 of ``bench_rps`` and ``bench_get``
(``tests/bench/latency.py``): each request's latency at the load client's full precision,
the first request of a run (its connection's) dropped, and a row's added latency the median
of interleaved rounds' differences, judged to the microsecond."""

from __future__ import annotations

import json

import pytest

from tests.bench import latency
from tests.bench.bench_rps import Figures, added_row, figure_rows
from tests.bench.latency import Rounds, Timed


def _timed(*ms: float) -> Timed:
    return Timed(ms, 1000.0)


def test_percentiles_interpolate_between_the_nearest_ranks() -> None:
    assert latency.percentile([0.9, 0.7, 0.8, 1.0], 0.5) == pytest.approx(0.85)
    assert latency.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert latency.percentile([float(i) for i in range(101)], 0.99) == 99.0
    assert latency.percentile([0.5], 0.99) == 0.5
    with pytest.raises(ValueError):
        latency.percentile([], 0.5)


def test_the_added_latency_is_the_median_of_the_rounds_differences() -> None:
    # the machine slows down in round 2 for both rows: the differences see it, the
    # difference of the two medians does not
    direct = Rounds((_timed(0.60, 0.62), _timed(1.40, 1.42), _timed(0.61, 0.63)))
    gateway = Rounds((_timed(0.90, 0.92), _timed(1.70, 1.72), _timed(1.50, 1.52)))
    assert direct.p50 == pytest.approx(0.62) and gateway.p50 == pytest.approx(1.51)
    added, low, high = gateway.added(direct)
    assert added == pytest.approx(0.30) and low == pytest.approx(0.30)
    assert high == pytest.approx(0.89)
    assert gateway.p50 - direct.p50 == pytest.approx(0.89)  # what a median of each would say
    with pytest.raises(ValueError):
        gateway.added(Rounds(direct.runs[:2]))


def test_a_row_is_judged_to_the_microsecond_on_the_rounds_median() -> None:
    over = added_row("x, p50", 1.3, 0.8, added=(0.5006, 0.41, 0.62), rounds=5)
    assert over.met is False
    assert over.note == (
        "added +0.501 ms, the median of 5 interleaved rounds' p50 differences (+0.410 to +0.620)"
    )
    within = added_row("x, p50", 1.3, 0.8, added=(0.5004, 0.41, 0.62), rounds=5)
    assert within.met is True and within.figure == 1.3 and within.direct == 0.8
    # without rounds, the figure less the direct one (hey's steps: 1.1 - 0.6 is 0.5)
    assert added_row("x, p50", 1.1, 0.6).met is True


def test_the_rps_rows_say_how_their_rounds_were_judged() -> None:
    def rounds(*p50s: float) -> Rounds:
        return Rounds(tuple(_timed(p, p, p + 1.0) for p in p50s))

    direct = Figures(
        "direct", 4000, 0.7, 0.36, 0.36, None, rounds=rounds(0.7, 0.9), cpu_rounds=(0.3, 0.4)
    )
    got = Figures(
        "GraphQL get",
        2000,
        1.2,
        0.45,
        0.37,
        1.0,
        rounds=rounds(1.1, 1.5),
        cpu_rounds=(0.4, 0.5),
    )
    found = {r.scenario: r for r in figure_rows([direct, got], 3000, 1.0)}
    p50 = found["rps: GraphQL get, p50, concurrency 1"]
    assert p50.note.startswith(
        "added +0.500 ms, the median of 2 interleaved rounds' p50 differences (+0.400 to +0.600)"
    )
    assert "; p99 " in p50.note and p50.met is True
    assert found["rps: direct GET, p50, concurrency 1"].note.startswith(
        "median of 2 rounds' p50s of 3 requests one at a time, each timed to the ns; p99 "
    )
    cpu = found["rps: GraphQL get, gateway CPU per request"]
    assert cpu.note.startswith("median of 2 rounds, 0.40-0.50 ms; apiserver 0.37 ms")
    assert "in 2 interleaved rounds" in found["rps: direct GET, apiserver CPU per request"].note


def _vegeta(seq: int, latency_ns: int, code: int = 200, error: str = "") -> str:
    return json.dumps(
        {
            "seq": seq,
            "code": code,
            "timestamp": f"2026-11-29T02:50:54.{seq:03d}000001Z",
            "latency": latency_ns,
            "error": error,
        }
    )


def test_vegetas_results_keep_each_latency_in_ns_and_drop_the_connections() -> None:
    lines = [_vegeta(s, ns) for s, ns in ((1, 812_345), (0, 4_108_585), (2, 790_001))]
    lines.append(_vegeta(3, 3_586, code=0, error="no targets to attack"))  # vegeta's last
    timed = latency.vegeta_results("\n".join(lines) + "\n", 2)
    assert timed.ms == (0.812345, 0.790001)  # not in 0.1 ms steps; the connection's dropped
    assert timed.p50 == pytest.approx(0.801173)
    # two requests from the start of seq 1 (1 ms after 0) to the end of seq 2
    assert timed.rps == pytest.approx(2 / (1e-3 + 790_001e-9))
    with pytest.raises(RuntimeError, match="not 200"):
        latency.vegeta_results("\n".join([*lines[:2], _vegeta(2, 1, code=503)]), 2)
    with pytest.raises(RuntimeError, match="2 results of 3"):
        latency.vegeta_results("\n".join(lines[:2]), 2)


def test_ghz_details_keep_each_calls_latency_and_drop_the_first() -> None:
    details = [
        {"timestamp": "2026-11-29T02:50:54.000000001Z", "latency": 3_000_000, "status": "OK"},
        {"timestamp": "2026-11-29T02:50:54.003100001Z", "latency": 1_234_567, "status": "OK"},
        {"timestamp": "2026-11-29T02:50:54.004400001Z", "latency": 1_111_111, "status": "OK"},
    ]
    timed = latency.ghz_details({"details": details}, 2)
    assert timed.ms == (1.234567, 1.111111)
    with pytest.raises(RuntimeError, match="3 details of 4"):
        latency.ghz_details({"details": details}, 3)
