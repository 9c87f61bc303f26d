"""Run every benchmark, print one table and write it to ``BENCHMARKS.md`` (``make bench``).

    .venv/bin/python -m tests.bench [--quick] [--out BENCHMARKS.md] [--soak-minutes 30]

Order: the CPU-bound conversion and list figures first (before the fan-out runs leave processes
and sockets behind), then small gets while large lists convert, then gets, then the per-request
cost on a real kube-apiserver with the Go load clients hey and ghz
(``tests/bench/bench_rps.py``), then the in-process GraphQL fan-out, then the fan-out of the
gateway as a subprocess with the Go load client (``make go-client`` builds it), then the CRD
scale steps on a real kube-apiserver (``make e2e-bins`` builds it; 0, 235 and 1,000 published
CRDs, 0 only with ``--quick``), then many clusters from one gateway: the fleet list of two
upstreams against each cluster's own list, and the memory each added cluster costs on a real
kube-apiserver (1, 2, 4 and 8 added clusters, built-in kinds and 100 CRDs; ``--quick``: 1 added
cluster, 10 CRDs), then views of 30,000 realistic pods (``--quick``: 3,000). Each bench prints
its own details as it goes; a bench that fails is reported
in the table and the others still run. ``--quick`` is for trying the driver: small sizes, and
nothing written unless ``--out`` is given. The soak (``tests/bench/soak.py``: churn and hostile
clients beside well-behaved subscribers on a real kube-apiserver) runs last and only with
``--soak-minutes``; without it, the "Soak" section of the file written is kept as it was.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from tests.bench import (
    bench_fanout,
    bench_fleet,
    bench_get,
    bench_graphql_fanout,
    bench_graphql_list,
    bench_loop_hold,
    bench_rps,
    bench_scale,
    bench_views,
    grpc_conversion,
    soak,
)
from tests.bench.report import Row, carry, document, machine, not_measured, text_table

REPO = Path(__file__).resolve().parents[2]

#: Scenarios of the performance issue no bench measures yet, with their goals.
NOT_MEASURED: list[Row] = []


def _run(name: str, fn: Callable[[], list[Row]]) -> list[Row]:
    print(f"\n== {name}", flush=True)
    try:
        return fn()
    except (Exception, SystemExit) as exc:  # one failing bench must not lose the others
        traceback.print_exc()
        return [not_measured(name, "-", f"bench failed: {exc!r}"[:120])]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, to try the driver")
    parser.add_argument("--out", type=Path, default=None, help="default: BENCHMARKS.md")
    parser.add_argument(
        "--soak-minutes",
        type=float,
        default=0,
        help="run the soak this long (default: not run, its section kept)",
    )
    args = parser.parse_args(argv)
    out = args.out if args.out or args.quick else REPO / "BENCHMARKS.md"
    pods, rounds = (300, 3) if args.quick else (5000, 7)
    fanout = ["--subscribers", "50", "--seconds", "2"] if args.quick else []
    gql_subscribers = 20 if args.quick else 200

    rows: list[Row] = []
    rows += _run("grpc_conversion", lambda: grpc_conversion.rows(pods, rounds))
    rows += _run("bench_graphql_list", lambda: bench_graphql_list.rows(pods, rounds))
    rows += _run(
        "bench_loop_hold",
        lambda: bench_loop_hold.rows(pods, 1 if args.quick else 3, 60 if args.quick else 300),
    )
    rows += _run("bench_get", lambda: bench_get.rows(100 if args.quick else 400))
    rows += _run(
        "bench_rps",
        lambda: bench_rps.rows(320 if args.quick else 3000, 50 if args.quick else 300),
    )
    rows += _run(
        "bench_graphql_fanout", lambda: bench_graphql_fanout.rows(subscribers=gql_subscribers)
    )
    rows += _run("bench_fanout", lambda: bench_fanout.rows(fanout))
    rows += _run(
        "bench_scale",
        lambda: bench_scale.rows((0,) if args.quick else (0, 235, 1000), churn_rounds=3),
    )
    rows += _run(
        "bench_fleet",
        lambda: bench_fleet.rows(
            pods,
            rounds,
            extras=(1,) if args.quick else (1, 2, 4, 8),
            crds=10 if args.quick else 100,
        ),
    )
    rows += _run("bench_views", lambda: bench_views.rows(3000 if args.quick else 30_000))
    if args.soak_minutes:
        rows += _run("soak", lambda: soak.rows(soak.Plan(minutes=args.soak_minutes)))
    rows += NOT_MEASURED

    print()
    print(text_table(rows))
    if out is not None:
        when = datetime.datetime.now(datetime.UTC)
        text = document(rows, when=when, info=machine())
        if out.exists():
            text = carry(out.read_text(), text, "Soak")
        out.write_text(text)
        print(f"\nwritten to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
