"""The request-rate bench (``tests/bench/bench_rps.py``): its rows, its section in
``BENCHMARKS.md``, and a run of a few seconds on the real kube-apiserver with the Go load
clients that reports every figure (the values are the bench's business, not a test's)."""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import pytest

from tests.bench import bench_rps
from tests.bench.bench_rps import Figures, figure_rows
from tests.bench.report import document, row, splice

MODES = (
    "GraphQL get",
    "GraphQL list of 10",
    "gRPC Get",
    "gRPC List of 10",
    "trusted-document get",
)


def test_rows_compare_each_mode_with_the_direct_call_of_the_same_run() -> None:
    direct = Figures("direct", 4000, 0.7, 0.36, 0.36, None)
    fast = Figures("GraphQL get", 2000, 1.1, 0.4, 0.37, 1.0)
    slow = Figures("gRPC Get", 400, 2.5, 2.0, 0.37, 1.0)
    rows = {r.scenario: r for r in figure_rows([direct, fast, slow], 3000, 4.0)}
    assert rows["rps: GraphQL get, requests/s, concurrency 32"].ratio == 0.5
    p50 = rows["rps: GraphQL get, p50, concurrency 1"]
    assert p50.met is True and p50.note == "added +0.40 ms" and p50.goal == "≤ +0.5 ms added"
    assert rows["rps: gRPC Get, p50, concurrency 1"].met is False
    cpu = rows["rps: gRPC Get, gateway CPU per request"]
    assert cpu.met is False and cpu.ratio == pytest.approx(2.0 / 0.36)
    assert rows["rps: GraphQL get, gateway CPU per request"].met is True
    assert len(rows) == 3 + 2 * 3


def test_list_rows_compare_with_the_direct_list_of_the_same_run() -> None:
    direct = Figures("direct", 4000, 0.7, 0.36, 0.36, None)
    lists = Figures("direct list of 10", 2000, 1.0, 0.6, 0.6, None)
    got = Figures("GraphQL get", 2000, 1.1, 0.4, 0.37, 1.0)
    listed = Figures("gRPC List of 10", 500, 1.3, 1.2, 0.6, 1.0)
    rows = {r.scenario: r for r in figure_rows([direct, lists, got, listed], 3000, 4.0)}
    assert rows["rps: direct list of 10, p50, concurrency 1"].figure == 1.0
    p50 = rows["rps: gRPC List of 10, p50, concurrency 1"]
    assert p50.note == "added +0.30 ms" and p50.met is True
    assert rows["rps: gRPC List of 10, requests/s, concurrency 32"].ratio == 0.25
    assert rows["rps: gRPC List of 10, gateway CPU per request"].ratio == pytest.approx(2.0)
    assert rows["rps: GraphQL get, p50, concurrency 1"].note == "added +0.40 ms"
    assert len(rows) == 3 + 3 + 2 * 3


def test_the_section_is_spliced_in_with_its_unmet_goals() -> None:
    when = datetime.datetime(2026, 1, 1)
    main = [row("get one pod, gRPC, p50, concurrency 1", 3, "ms", 1.0, max_ratio=2)]
    figures = [
        Figures("direct", 4000, 0.7, 0.36, 0.36, None),
        Figures("gRPC Get", 400, 2.5, 2.0, 0.4, 1.0),
    ]
    rps = figure_rows(figures, 3000, 4.0)
    text = splice(document(main, when=when, info={}), rps)
    assert text == document(main + rps, when=when, info={})
    assert "## Per-request cost\n" in text
    unmet = text.split("## Goals not met, and why\n\n", 1)[1].split("\n\n", 1)[0]
    assert "**rps: gRPC Get, gateway CPU per request**" in unmet


@pytest.mark.e2e
def test_a_short_run_on_the_real_apiserver_reports_every_figure() -> None:
    figures = bench_rps.bench(requests=96, single=10, rounds=3)
    rows = figure_rows(figures, 96, 1.0)
    for r in rows:
        print(r)
    assert len(rows) == 3 + 3 + 3 * len(MODES)  # direct get, direct list, the modes
    for r in rows:
        assert r.scenario.startswith("rps: ")
        assert r.figure is not None and math.isfinite(r.figure) and r.figure >= 0, r
    for mode in MODES:
        cpu = next(r for r in rows if r.scenario == f"rps: {mode}, gateway CPU per request")
        # one upstream request for each request the gateway served, none more
        assert "upstream requests per request 1.00" in cpu.note, cpu
        assert cpu.note.startswith("median of 3 rounds, "), cpu
        # each call's upstream time and the gateway's share, from its access lines
        p50 = next(r for r in rows if r.scenario.startswith(f"rps: {mode}, p50"))
        assert "upstream p50" in p50.note and "the gateway's share p50" in p50.note, p50
        assert "the median of 3 interleaved rounds' p50 differences" in p50.note, p50
    for f in figures:
        # every row's rounds, 10 requests each one at a time, timed finer than hey's 0.1 ms
        assert f.rounds is not None and [len(r.ms) for r in f.rounds.runs] == [10, 10, 10]
        assert len(f.cpu_rounds) == 3
        latencies = [ms for r in f.rounds.runs for ms in r.ms]
        assert all(0 < ms < 10_000 for ms in latencies), f.name
        off_grid = [ms for ms in latencies if abs(ms * 10 - round(ms * 10)) > 1e-6]
        assert len(off_grid) > len(latencies) // 2, (f.name, latencies)


def test_the_p50_note_splits_each_call_into_upstream_and_the_gateways_share() -> None:
    access = '{"logger":"gateway.access","path":"/graphql","duration_ms":%s%s}'
    lines = [
        access % (1.5, ', "upstream_ms": 1.0'),
        access % (1.0, ', "upstream_ms": 0.7'),
        access % (2.0, ', "upstream_ms": 0.8'),
        access % (9.0, ""),  # a call with no upstream request: in the call's p50 alone
        '{"logger":"gateway.other","duration_ms":50}',
    ]
    parsed = bench_rps._access(lines)
    assert parsed == [(1.5, 1.0), (1.0, 0.7), (2.0, 0.8), (9.0, None)]
    direct = Figures("direct", 4000, 0.7, 0.36, 0.36, None)
    got = Figures("GraphQL get", 2000, 1.6, 0.4, 0.37, 1.0, 2.0, 1.9, 0.8, 0.5)
    rows = figure_rows([direct, got], 96, 1.0)
    p50 = next(r for r in rows if r.scenario.startswith("rps: GraphQL get, p50"))
    assert "gateway's own p50 2.00 ms: upstream p50 0.80 ms, the gateway's share p50 0.50 ms" in (
        p50.note
    )


def test_rows_keeps_the_named_rows_and_their_direct_baselines() -> None:
    names = ["direct", "direct list of 10", *MODES]
    served = {name: (None if name.startswith("direct") else object()) for name in names}

    def kept(*words: str) -> list[str]:
        gateway_rows = [n for n in names if served[n] is not None and bench_rps._kept(n, words)]
        return [
            n
            for n in names
            if n in gateway_rows or bench_rps._baseline(n, served[n], gateway_rows)  # type: ignore[arg-type]
        ]

    assert kept() == names
    # a list row brings the direct list with it, a get only the direct get
    assert kept("gRPC") == ["direct", "direct list of 10", "gRPC Get", "gRPC List of 10"]
    assert kept("grpc get") == ["direct", "gRPC Get"]
    assert kept("trusted", "graphql list") == [
        "direct",
        "direct list of 10",
        "GraphQL list of 10",
        "trusted-document get",
    ]
    assert kept("nothing such") == ["direct"]


def test_a_profile_summary_gives_self_and_inclusive_shares() -> None:
    collapsed = "\n".join(
        [
            "thread (1): MainThread;run (loop.py:1);handle (admission.py:2);write (libc) 6",
            "thread (1): MainThread;run (loop.py:1);encode (codec.py:3) 3",
            "thread (2): poller;poll (grpc) 1",
            "not a stack line",
        ]
    )
    summary = bench_rps.top_frames(collapsed)
    assert summary.startswith("10 samples\n")
    own, inclusive = summary.split("inclusive %  frame\n")
    assert " 60.0  write (libc)" in own and " 30.0  encode (codec.py:3)" in own
    assert " 90.0  run (loop.py:1)" in inclusive and " 60.0  handle (admission.py:2)" in inclusive
    assert bench_rps.top_frames("") == "no samples\n"


def test_a_filtered_or_profiled_run_does_not_write_the_table() -> None:
    for argv in (["--rows", "gRPC"], ["--profile", "/tmp/x"]):
        with pytest.raises(SystemExit) as refused:
            bench_rps.main([*argv, "--out", "BENCHMARKS.md"])
        assert refused.value.code == 2


def test_the_timed_grpc_runs_skip_the_answer_and_ask_the_same_calls(tmp_path: Path) -> None:
    """The timed gRPC runs' descriptors: every PodService answer an empty message (ghz
    skips its bytes, as vegeta does the direct rows'), the requests and everything else as
    the real descriptors say."""
    from google.protobuf import descriptor_pb2

    real = bench_rps.protoset(tmp_path / "real.protoset")
    opaque = bench_rps.opaque_protoset(real, tmp_path / "opaque.protoset")
    before = descriptor_pb2.FileDescriptorSet.FromString(real.read_bytes())
    after = descriptor_pb2.FileDescriptorSet.FromString(opaque.read_bytes())
    assert [f.name for f in after.file] == [f.name for f in before.file]
    changed = 0
    for old, new in zip(before.file, after.file, strict=True):
        for old_service, service in zip(old.service, new.service, strict=True):
            for old_method, method in zip(old_service.method, service.method, strict=True):
                assert method.input_type == old_method.input_type
                assert method.server_streaming == old_method.server_streaming
                if service.name == "PodService":
                    empty = method.output_type.rsplit(".", 1)[1]
                    (message,) = [m for m in new.message_type if m.name == empty]
                    assert not message.field, message
                    changed += 1
                else:
                    assert method.output_type == old_method.output_type
    assert changed >= 2  # Get and List at least
