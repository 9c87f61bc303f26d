"""BENCHMARKS.md states, for every goal a run does not meet, the measured cause of the gap."""

from __future__ import annotations

import datetime

from tests.bench.report import CAUSES, Row, document, put_rows, row


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


def _unmet(text: str) -> list[str]:
    return text.split("## Goals not met, and why\n\n", 1)[1].split("\n\n", 1)[0].splitlines()


GETS = ("get one pod, ",)
LIST = row("GraphQL list 5,000 pods, 15 fields, median", 400, "ms", 300, max_ratio=1.2)
FLEET = row("fleet: list of 2 x 5 pods", 13, "ms", 10, max_ratio=1.2)


def _gets(c1: float, c32: float) -> list[Row]:
    return [
        row("get one pod, gRPC, p50, concurrency 1", c1, "ms", 1.0, max_ratio=2),
        row("get one pod, gRPC, p50, concurrency 32", c32, "ms", 1.0, max_ratio=2),
    ]


def test_a_benchs_rows_of_the_first_table_are_put_in_place_and_the_rest_kept() -> None:
    when = datetime.datetime(2026, 1, 1)
    old = document([LIST, *_gets(3, 4), FLEET], when=when, info={"CPU": "test"})
    # the same rows measured again give the same file; new figures, the file of the new run
    assert put_rows(old, _gets(3, 4), GETS) == old
    new = put_rows(old, _gets(1.5, 5), GETS)
    assert new == document([LIST, *_gets(1.5, 5), FLEET], when=when, info={"CPU": "test"})
    # "concurrency 1" starts "concurrency 32" as well: each row took its own place
    table = [line for line in new.splitlines() if line.startswith("| get one pod")]
    assert [line.split(" | ")[1] for line in table] == ["1.50 ms", "5.00 ms"]
    # the met row lost its line of the goals not met; the others' lines are as they were
    assert _unmet(new) == [
        f"- **GraphQL list 5,000 pods, 15 fields, median**: {CAUSES['GraphQL list']}",
        f"- **get one pod, gRPC, p50, concurrency 32**: {CAUSES['get one pod']}",
        _unmet(old)[-1],  # the fleet section's row, not the first table's
    ]


def test_a_refresh_is_stamped_rows_new_to_the_table_go_at_its_end_and_met_goals_go() -> None:
    when = datetime.datetime(2026, 1, 1)
    old = document([LIST], when=when, info={})
    new = put_rows(old, _gets(1.2, 1.5), GETS, note="load 0.7; 2026-11-29, commit abc")
    table = [line for line in new.splitlines() if line.startswith("| ")]
    assert table[2].startswith("| GraphQL list")  # after the header and its rule
    assert table[3].startswith("| get one pod, gRPC, p50, concurrency 1 (load 0.7; 2026-11-29")
    assert table[4].startswith("| get one pod, gRPC, p50, concurrency 32 |")
    assert _unmet(new) == _unmet(old)  # both gets met their goal: no line for them
    # every goal met, the list goes; a goal missed again, it comes back
    met = put_rows(old, [row(LIST.scenario, 300, "ms", 300, max_ratio=1.2)], ("GraphQL list ",))
    assert "Goals not met" not in met and "| GraphQL list" in met
    assert put_rows(met, [LIST], ("GraphQL list ",)) == old
