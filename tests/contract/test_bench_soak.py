"""The soak bench (``tests/bench/soak.py``): what its lost-event, stall and metric figures are
made of, its section in ``BENCHMARKS.md``, and a run of a few seconds on the real
kube-apiserver that reports every figure (the values are the bench's business, not a test's)."""

from __future__ import annotations

import datetime
import math

import httpx
import pytest

from tests.bench import soak
from tests.bench.report import carry, document, row, splice
from tests.bench.soak import Change, lost_and_unexpected

LAG = {0.05: 10, 0.1: 12, 0.25: 13, math.inf: 13}


def test_a_subscriber_loses_the_writes_it_did_not_receive_and_nothing_past_its_window() -> None:
    written = [
        Change("ADDED", "l0", 10),
        Change("MODIFIED", "l0", 11),
        Change("DELETED", "l0", 13),  # the rv of a list read after the deletion
        Change("ADDED", "l0", 14),
    ]
    # a deletion is matched by type and name: its event's rv is the deletion's own
    seen = [
        Change("ADDED", "l0", 10),
        Change("BOOKMARK", "", 12),
        Change("DELETED", "l0", 12),
        Change("ADDED", "l0", 14),
        Change("MODIFIED", "l0", 15),
    ]
    assert lost_and_unexpected(written, seen) == (1, 0)  # rv 11 lost; rv 15 past the window
    assert lost_and_unexpected(written, [*seen, Change("MODIFIED", "l0", 11)]) == (0, 0)
    assert lost_and_unexpected(written, [*seen, seen[0]]) == (1, 1)  # a duplicate
    assert lost_and_unexpected(written, []) == (4, 0)
    assert lost_and_unexpected([], seen) == (0, 0)


def test_stalls_are_the_lag_samples_over_the_bound_and_the_highest_bucket_grown() -> None:
    after = {0.05: 15, 0.1: 18, 0.25: 20, math.inf: 21}
    assert soak.stall_samples(LAG, after, 0.1) == 2  # one up to 250 ms, one beyond
    assert soak.stall_samples(LAG, LAG, 0.1) == 0
    assert soak.longest_bucket(LAG, after) == math.inf
    assert soak.longest_bucket(LAG, {0.05: 11, 0.1: 13, 0.25: 14, math.inf: 14}) == 0.05
    assert soak.longest_bucket(LAG, LAG) == 0.0


def test_metric_sums_read_every_labelled_sample_of_one_family_only() -> None:
    text = (
        "kube_gateway_upstream_watches 2.0\n"
        "kube_gateway_upstream_watches_total 9.0\n"
        'kube_gateway_upstream_request_duration_seconds_count{code="200",verb="list"} 3.0\n'
        'kube_gateway_upstream_request_duration_seconds_count{code="201",verb="create"} 4.0\n'
    )
    assert soak.metric_sum(text, "kube_gateway_upstream_watches") == 2
    count = "kube_gateway_upstream_request_duration_seconds_count"
    assert soak.metric_sum(text, count) == 7
    assert soak.metric_sum(text, count, 'verb="list"') == 3


def test_a_hostile_answer_is_counted_by_its_refusal_code() -> None:
    def answer(status: int, body: object) -> httpx.Response:
        return httpx.Response(status, json=body)

    refused = {"errors": [{"message": "no", "extensions": {"code": "BAD_REQUEST"}}]}
    assert soak.graphql_outcome(answer(400, refused)) == "BAD_REQUEST"
    assert soak.graphql_outcome(answer(401, {"errors": [{"message": "who?"}]})) == "HTTP 401"
    assert soak.graphql_outcome(answer(200, {"data": {"x": 1}})) == "served"
    assert soak.graphql_outcome(httpx.Response(413, text="too large")) == "HTTP 413"


def test_the_soak_section_is_spliced_in_and_kept_by_a_run_without_the_soak() -> None:
    when = datetime.datetime(2026, 1, 1)
    main = [row("get one pod, gRPC, p50, concurrency 1", 3, "ms", 1.0, max_ratio=2)]
    fleet = [row("fleet: list of 2 x 5 pods", 30, "ms", 10, max_ratio=1.2)]
    soaked = [row("soak: events lost by well-behaved subscribers, 1 min", 2, "", max_value=0)]
    text = splice(document(main + fleet, when=when, info={}), soaked)
    assert text == document(main + fleet + soaked, when=when, info={})
    # a later run of every bench but the soak keeps its section and its unmet goal
    later = document(main + fleet, when=when, info={})
    kept = carry(text, later, "Soak")
    assert kept == text
    assert carry(text, text, "Soak") == text  # a run with the soak: its own section
    assert carry(later, later, "Soak") == later  # nothing to carry


@pytest.mark.e2e
def test_a_short_soak_on_the_real_apiserver_reports_every_figure() -> None:
    rows = soak.rows(soak.Plan(minutes=0.25, sample_seconds=1.0))
    for r in rows:
        print(r)
    expected = [
        "gateway RSS, highest after warm-up",
        "gateway RSS, last sample",
        "gateway RSS, median of the last 20 %",
        "events lost by well-behaved subscribers",
        "event-loop lag samples over 100 ms",
        "longest event-loop stall",
        "small GraphQL query during the soak, p50",
        "small GraphQL query during the soak, p99",
        "gateway CPU per request",
        "upstream requests per minute",
        "CRDs created, served and deleted",
        "clusters added to --clusters-dir",
        "hostile requests and connections refused",
        "hostile requests served",
        "slow-loris and idle connections",
    ]
    missing = [what for what in expected if not any(what in r.scenario for r in rows)]
    assert not missing, rows
    assert len(rows) == len(expected)
    for r in rows:
        assert r.scenario.startswith("soak: ")
        assert r.figure is not None and math.isfinite(r.figure), r
