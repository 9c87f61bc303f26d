"""The fleet bench's readings of the gateway's ``/metrics`` and log (``tests/bench/bench_fleet``):
what its stall, upstream-request and cluster-served figures are made of."""

from __future__ import annotations

import datetime
import math

from tests.bench.bench_fleet import (
    _all_built,
    lag_buckets,
    list_requests,
    longest_lag,
    rebuilds,
    served_names,
)
from tests.bench.report import document, row, splice

METRICS = """\
# HELP kube_gateway_event_loop_lag_seconds How late the event loop ran a due callback.
kube_gateway_event_loop_lag_seconds_bucket{le="0.005"} 10.0
kube_gateway_event_loop_lag_seconds_bucket{le="0.05"} 12.0
kube_gateway_event_loop_lag_seconds_bucket{le="0.5"} 13.0
kube_gateway_event_loop_lag_seconds_bucket{le="+Inf"} 13.0
kube_gateway_event_loop_lag_seconds_count 13.0
kube_gateway_upstream_request_duration_seconds_count{code="200",resource="pods",verb="list"} 3.0
kube_gateway_upstream_request_duration_seconds_count{code="500",resource="pods",verb="list"} 1.0
kube_gateway_upstream_request_duration_seconds_count{code="200",resource="pods",verb="get"} 7.0
kube_gateway_upstream_request_duration_seconds_count{code="200",resource="leases",verb="list"} 5.0
"""


def test_lag_buckets_read_the_cumulative_histogram() -> None:
    assert lag_buckets(METRICS) == {0.005: 10, 0.05: 12, 0.5: 13, math.inf: 13}


def test_longest_lag_is_the_highest_bucket_that_gained_a_sample() -> None:
    before = {0.005: 10, 0.05: 12, 0.5: 13, math.inf: 13}
    # two short samples and one between 50 and 500 ms
    after = {0.005: 12, 0.05: 14, 0.5: 16, math.inf: 16}
    assert longest_lag(before, after) == 0.5
    # only short ones: the first bucket
    assert longest_lag(before, {0.005: 11, 0.05: 13, 0.5: 14, math.inf: 14}) == 0.005
    assert longest_lag(before, before) == 0.0
    assert longest_lag(before, {0.005: 10, 0.05: 12, 0.5: 13, math.inf: 14}) == math.inf


def test_list_requests_count_every_outcome_of_the_resource_lists_only() -> None:
    assert list_requests(METRICS) == 4
    assert list_requests(METRICS, "leases") == 5


def test_clusters_are_built_once_served_and_each_schema_rebuilt() -> None:
    lines = [
        '{"message": "GraphQL schema /graphql rebuilt for catalog 1: 60 resources"}\n',
        '{"message": "cluster x1: served (https://127.0.0.1:6443)"}\n',
        '{"message": "cluster x2: served (https://127.0.0.1:6443)"}\n',
        '{"message": "GraphQL schema /graphql rebuilt for catalog 1: 60 resources"}\n',
    ]
    assert served_names(lines) == {"x1", "x2"}
    assert rebuilds(lines) == 2
    assert _all_built({"x1"}, lines)
    assert not _all_built({"x1", "x2"}, lines)  # x2's schema is not rebuilt yet
    assert not _all_built({"x3"}, lines)


def test_splice_puts_the_section_in_and_replaces_it_the_next_time() -> None:
    when = datetime.datetime(2026, 1, 1)
    main = [row("get one pod, gRPC, p50, concurrency 1", 3, "ms", 1.0, max_ratio=2)]
    text = document(main, when=when, info={})
    fleet = [
        row("fleet: list of 2 x 5 pods", 30, "ms", 10, max_ratio=1.2),
        row("fleet: RSS per added cluster", 50, "MB"),
    ]
    once = splice(text, fleet)
    assert once == document(main + fleet, when=when, info={})
    again = splice(once, [row("fleet: list of 2 x 5 pods", 11, "ms", 10, max_ratio=1.2)])
    assert "| fleet: list of 2 x 5 pods | 11.0 ms |" in again
    assert "| fleet: RSS per added cluster |" not in again  # the row (the prose may name it)
    assert "- **fleet: " not in again  # the goal is met now: its cause is gone
    assert again.count("## Many clusters") == 1
    assert "- **get one pod, gRPC, p50, concurrency 1**" in again
