"""BENCHMARKS.md states, for every goal a run does not meet, the measured cause of the gap."""

from __future__ import annotations

import datetime

from tests.bench.report import CAUSES, document, row


def test_every_unmet_goal_has_its_cause_and_met_goals_none() -> None:
    rows = [
        row("gRPC List 5,000 pods, client parse included, best", 800, "ms", 400, max_ratio=1.5),
        row("get one pod, gRPC, p50, concurrency 1", 1.2, "ms", 1.0, max_ratio=2),
        row("a scenario nobody explained", 3, "ms", max_value=1),
        row("get one pod, GraphQL, p50, concurrency 1", 1.3, "ms", 0.5, max_ratio=2),
        row("get one pod, gRPC, p50, concurrency 32", 1.4, "ms", 0.5, max_ratio=2),
        row("another scenario nobody explained", 3, "ms", max_value=1),
    ]
    text = document(rows, when=datetime.datetime(2026, 1, 1), info={"CPU": "test"})
    section = text.split("## Goals not met, and why\n\n", 1)[1].split("\n\n", 1)[0]
    assert section.splitlines() == [
        f"- **gRPC List 5,000 pods, client parse included, best**: {CAUSES['gRPC List']}",
        "- **a scenario nobody explained**: cause not measured yet",
        # one line for the rows of one cause, the cause said once
        "- **get one pod, GraphQL, p50, concurrency 1**, **get one pod, gRPC, p50, "
        f"concurrency 32**: {CAUSES['get one pod']}",
        "- **another scenario nobody explained**: cause not measured yet",
    ]


def test_no_section_when_every_goal_is_met() -> None:
    rows = [row("get one pod, gRPC, p50, concurrency 1", 1.2, "ms", 1.0, max_ratio=2)]
    text = document(rows, when=datetime.datetime(2026, 1, 1), info={})
    assert "Goals not met" not in text
